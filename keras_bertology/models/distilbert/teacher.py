"""The teacher of a DistilBERT run: a trained masked LM read from a run folder or a Hugging Face folder,
whose tokenizer the student reuses and whose width it takes."""

from keras_bertology.errors import ConfigError
from keras_bertology.models.family import RunContext

# Families whose pretrainer is a BERT-shaped encoder under a masked-LM head named "mlm_head".
TEACHER_FAMILIES = ("bert", "roberta", "spanbert")
# The student's backbone takes these from the teacher's (its vocabulary size from the teacher's tokenizer,
# which the run reads with); its depth is the preset's.
INHERITED = ("hidden_size", "num_heads", "intermediate_size", "max_positions", "activation",
             "layer_norm_epsilon", "initializer_range")


def teacher_context(teacher=None):
    """`RunContext` of a student of the model at `teacher` (a run folder or a Hugging Face folder)."""
    from keras_bertology import preset_loading

    if not teacher:
        raise ConfigError("--model distilbert distils a trained masked LM: give --teacher RUN_OR_CHECKPOINT (a run "
                          "folder of `bertology pretrain` or a Hugging Face folder)")
    try:
        source = preset_loading.locate(teacher)
    except ConfigError as error:
        raise ConfigError(f"--teacher {teacher}: {error}") from None
    if source.kind == preset_loading.PRESET:
        raise ConfigError(f"--teacher {teacher} is a preset, which has no trained weights: give a run folder or a "
                          "Hugging Face folder")
    if source.family.name not in TEACHER_FAMILIES:
        raise ConfigError(f"--teacher {teacher} holds a model of the {source.family.name} family; a DistilBERT "
                          f"student learns from the masked LM of {', '.join(TEACHER_FAMILIES)}")
    run = preset_loading.load_model(source)
    pretrainer = run.pretrainer
    if pretrainer is None or "mlm" not in pretrainer.objectives:
        raise ConfigError(f"--teacher {teacher} has no masked-LM head to learn from (an encoder alone)")
    if run.tokenizer is None:
        raise ConfigError(f"--teacher {teacher} has no tokenizer the student could read its text with")
    config = pretrainer.backbone.get_config()
    if config.get("attention_type", "full") != "full":
        raise ConfigError(f"--teacher {teacher} attends with {config['attention_type']} attention; the student's "
                          "layers are full attention")
    return RunContext(
        tokenizer=run.tokenizer,
        backbone_overrides={name: config[name] for name in INHERITED},
        pretrainer_kwargs={"teacher": pretrainer},
        record={"teacher": str(teacher), "teacher_family": source.family.name,
                "teacher_layers": config["num_layers"], "teacher_params": pretrainer.backbone.count_params()},
    )
