"""The options of a fine-tuning run and their validation, importable without TensorFlow."""

import dataclasses

from keras_bertology import flag_ranges as ranges
from keras_bertology.errors import ConfigError


# Strategies fine-tuning runs under (`engine.strategy`); multi-worker is pretraining only so far.
FINETUNE_STRATEGIES = ("auto", "default", "mirrored", "tpu")
# Where a classifier sums up a text (models.task_models.SUMMARY_POSITIONS, kept here free of Keras).
SUMMARY_POSITIONS = ("first", "last", "last_text", "mean")
# What learns the task (finetune.text_to_text): the family's choice, a head on the encoder, or the decoder.
HEADS = ("auto", "encoder", "text-to-text")
# The numeric options and their ranges: those of the CLI's flags.
_RANGES = {"epochs": ranges.EPOCHS, "batch_size": ranges.BATCH_SIZE, "learning_rate": ranges.LEARNING_RATE,
           "layer_decay": ranges.LAYER_DECAY, "warmup": ranges.WARMUP, "seq_len": ranges.SEQ_LEN,
           "seed": ranges.SEED, "max_examples": ranges.MAX_EXAMPLES,
           "train_examples": ranges.MAX_EXAMPLES}


@dataclasses.dataclass
class FinetuneOptions:
    """Everything `bertology finetune` accepts.

    The defaults are BERT's fine-tuning recipe (AdamW, 10% warm-up then
    linear decay, weight decay 0.01, 3 epochs, peak rate 5e-5, batch 32);
    `seq_len` None takes the run's own sequence length, `learning_rate`
    None the family's (`TrainingDefaults.finetune_learning_rate`).
    """

    task: str = ""
    from_dir: str = ""
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float | None = None
    layer_decay: float = 1.0
    warmup: float = 0.1
    seq_len: int | None = None
    seed: int = 0
    out: str | None = None
    export: str | None = None
    no_export: bool = False  # results and model.keras only, no SavedModel
    results_only: bool = False  # the scores alone, no model.keras or SavedModel (a study's hundreds of runs)
    length_buckets: tuple = ()  # the export's serving lengths (see export.saved_model); () pads to the longest
    serving_xla: bool = False  # the export's endpoints run the model compiled by XLA
    remat: bool = False  # recompute each block's activations in the backward pass (see layers.remat)
    max_examples: int | None = None
    train_examples: int | None = None  # N labeled examples drawn from train by `seed` (a learning curve's point)
    last_epoch: bool = False  # keep the last epoch, dev scored once (few labels: no dev set larger than train)
    random_init: bool = False
    summary: str | None = None  # a classifier's summary position (models.task_models); None: the family's
    head: str = "auto"  # one of HEADS
    strategy: str = "default"
    verbose: int = 1

    def validate(self):
        """Raise ConfigError for values that cannot work, before anything slow starts."""
        if not self.task:
            raise ConfigError("--task is required: a built-in task name or a data folder")
        if (self.no_export or self.results_only) and self.export:
            flag = "--no-export" if self.no_export else "--results-only"
            raise ConfigError(f"--export and {flag} contradict each other; keep one")
        if not self.from_dir:
            raise ConfigError("--from is required: a run folder from `bertology pretrain` or `bertology convert`")
        ranges.check_options(self, _RANGES, optional=("seq_len", "max_examples", "train_examples",
                                                             "learning_rate"))
        ranges.check_length_buckets(self.length_buckets, self.seq_len or ranges.SEQ_LEN.high)
        ranges.check_serving_flags(self.length_buckets, self.serving_xla,
                                   "--results-only" if self.results_only else "--no-export" if self.no_export else None)
        if self.summary is not None and self.summary not in SUMMARY_POSITIONS:
            raise ConfigError(f"--summary must be one of {', '.join(SUMMARY_POSITIONS)} (got {self.summary!r})")
        if self.head not in HEADS:
            raise ConfigError(f"--head must be one of {', '.join(HEADS)} (got {self.head!r})")
        if self.strategy not in FINETUNE_STRATEGIES:
            raise ConfigError(f"--strategy must be one of {', '.join(FINETUNE_STRATEGIES)} for fine-tuning "
                              f"(got {self.strategy!r}; multiworker fine-tuning is not supported yet)")
