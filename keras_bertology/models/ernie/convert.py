"""Hugging Face ERNIE checkpoints (ErnieModel, ErnieForPreTraining, ErnieForMaskedLM) into a `BertBackbone`
and `BertPretrainer`, and back.

transformers lays ERNIE out as BERT under the prefix `ernie.` (`cls.predictions` and `cls.seq_relationship`
for the heads), so BERT's converter reads it. What ERNIE adds is the task-type table of its 2.0 / 3.0
checkpoints (config.json `use_task_id`): `embeddings.task_type_embeddings.weight` [task types, hidden],
whose row `task_type_ids` picks is added to every token's embedding sum, before the embedding LayerNorm.

Folding it away is exact: transformers' `task_type_ids` default to zeros, so row 0 is added to every
token, and so is exactly one row of the token-type table (each token has one token type, 0 by default).
Adding row 0 into every token-type row therefore gives every token the same sum, (word + token type +
task 0) + position, in both models, whatever the segments. The other task rows, which only a caller
passing `task_type_ids` reaches, have no place in BERT's encoder; the convert report says so. The
export writes the folded table as is, with `use_task_id` left false: transformers then computes what
our model computes.
"""

from keras_bertology.convert.hf_weights import WeightSource
from keras_bertology.errors import CheckpointError, ConfigError
from keras_bertology.models.bert.convert import convert as convert_bert_layout
from keras_bertology.models.bert.convert import export_with_layout

TASK_TYPES = "embeddings.task_type_embeddings.weight"
TOKEN_TYPES = "embeddings.token_type_embeddings.weight"


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from an ERNIE checkpoint: BERT's
    import of the checkpoint whose task-type row 0 is folded into its token-type table."""
    weights, folded, notes = fold_task_types(config, weights)
    backbone, pretrainer, heads, used, head_notes = convert_bert_layout(family, config, weights)
    return backbone, pretrainer, heads, used | folded, notes + head_notes


def fold_task_types(config, weights):
    """(weights, names used, notes): with `use_task_id`, the checkpoint's token-type table plus task-type
    row 0 in every row (see the module docstring); the weights as given otherwise (transformers then
    builds no task-type table, and a saved one is reported unused)."""
    if not config.get("use_task_id"):
        return weights, set(), []
    sizes = {key: config.get(key, default) for key, default in (("type_vocab_size", 2), ("task_type_vocab_size", 3))}
    if any(isinstance(size, bool) or not isinstance(size, int) or size < 1 for size in sizes.values()):
        raise ConfigError(f"config.json: use_task_id=true needs type_vocab_size and task_type_vocab_size >= 1 "
                          f"(got {sizes['type_vocab_size']!r} and {sizes['task_type_vocab_size']!r}): task type 0 "
                          "is folded into the token-type rows")
    source = WeightSource(weights, prefix="ernie.")
    tasks, types = source.get(TASK_TYPES), source.get(TOKEN_TYPES)
    if tasks.ndim != 2 or types.ndim != 2 or tasks.shape[1] != types.shape[1]:
        raise CheckpointError(f"shape mismatch for {TASK_TYPES}: {tasks.shape}, but {TOKEN_TYPES} is {types.shape}")
    notes = []
    if len(tasks) > 1:
        notes.append(f"use_task_id: task type 0 (transformers' default task_type_ids) was added into every token-type "
                     f"row; the other {len(tasks) - 1} task-type rows are dropped")
    # Under the prefix the checkpoint's names have: the name BERT's import reads first.
    return {**weights, source.prefix + TOKEN_TYPES: types + tasks[0]}, source.used, notes


def export(family, run):
    """`HFExport` of an ERNIE run: ErnieForPreTraining (MLM + NSP), ErnieForMaskedLM (MLM only) or
    ErnieModel (no heads), without a task-type table (`use_task_id` false; an imported one is already
    in the token-type rows); the vocabulary as BertTokenizer's vocab.txt."""
    return export_with_layout(run, "ernie", "Ernie", {"wordpiece": "BertTokenizer"})
