"""The options of `bertology study` and their validation, importable without TensorFlow."""

import dataclasses
import json
from pathlib import Path

from keras_bertology import flag_ranges as ranges
from keras_bertology.errors import ConfigError
from keras_bertology.extras import require_extra
from keras_bertology.study.arms import ARM_NAMES, ARMS, SCALES, arm_named

DEFAULT_TASKS = ("bbc-news", "bbc-names")
# The arm of the batch-size axis: RoBERTa's table is of its recipe (MLM alone, FULL-SENTENCES).
BATCH_ARM = "roberta"
BACKENDS = ("tensorflow", "jax")
# "shared": one cased SentencePiece vocabulary for every arm whose family takes one (tokenizers/shared_vocabulary.py);
# "native": each family's own, as its paper trained it (the verdicts it can judge are then about the tokenizer).
TOKENIZERS = ("shared", "native")
# The numeric options and their ranges: those of the CLI's flags.
_RANGES = {"seeds": ranges.STUDY_SEEDS, "seed": ranges.SEED, "vocab_size": ranges.VOCAB_SIZE,
           "workers": ranges.WORKERS}


@dataclasses.dataclass
class StudyOptions:
    """Everything `bertology study` accepts.

    corpus / corpus_format / text_field: as `bertology pretrain`; None pretrains on the tasks' own
        unlabeled text (the text of their training splits, no labels, no dev or test example).
    scale: a name of `arms.SCALES` (sizes, budget, fine-tuning recipe).
    arms: the arms to compare (default all; the first sets the compute budget), or with `batch_sizes` the
        one arm studied (default roberta).
    tasks: fine-tuning tasks, built-in names or data folders as `bertology finetune --task` takes.
    seeds: fine-tuning seeds per arm, task and label count (None: the scale's); seed s draws the
        same labeled examples for every arm (pretraining uses `seed`).
    workers: runs side by side, in processes sharing the CPU cores (see study/workers.py); 1 on a GPU.
    all_tasks: fine-tune every arm also on the tasks the gate refuses (scores without verdicts); by
        default only the reference arm and random initialisation run there, which is all the gate needs.
    backend: the Keras backend of the pretraining runs ("jax": the GPU fast path), in worker processes of
        their own; counting FLOPs and fine-tuning run on TensorFlow.
    batch_sizes: the batch-size axis in place of the objectives (study/batch_sizes.py): these effective
        batches at equal samples seen, each at its best rate of a grid by held-out perplexity.
    tokenizers: one of TOKENIZERS: a vocabulary trained once and shared by the arms, or each family's own.
    """

    out: str = "studies/objectives"
    corpus: list | None = None
    corpus_format: str = "auto"
    text_field: str = "text"
    scale: str = "tiny"
    arms: tuple | None = None  # None: every arm, or with batch_sizes BATCH_ARM
    tasks: tuple = DEFAULT_TASKS
    seeds: int | None = None
    seed: int = 0
    vocab_size: int = 8000
    workers: int = 1
    all_tasks: bool = False
    backend: str = "tensorflow"
    verbose: int = 1
    batch_sizes: tuple | None = None
    tokenizers: str = "shared"

    def __post_init__(self):
        if self.arms is None:
            self.arms = (BATCH_ARM,) if self.batch_sizes else ARM_NAMES

    def validate(self):
        if self.scale not in SCALES:
            raise ConfigError(f"--scale must be one of {', '.join(SCALES)} (got {self.scale!r})")
        unknown = [name for name in self.arms if name not in ARM_NAMES]
        if unknown or not self.arms:
            raise ConfigError(f"--arms takes one or more of {', '.join(ARM_NAMES)} (got {', '.join(unknown) or 'none'})")
        if len(set(self.arms)) != len(self.arms):
            raise ConfigError("--arms names an arm twice")
        first = arm_named(self.arms[0])
        if first.depends_on:
            raise ConfigError(f"--arms {first.name} cannot come first: the first arm sets the compute budget, and "
                              f"{first.name} trains only after the {first.depends_on[0]} arm's run")
        for arm in ARMS:
            missing = [other for other in arm.depends_on if arm.name in self.arms and other not in self.arms]
            if missing:
                raise ConfigError(f"--arms {arm.name} learns from the {missing[0]} arm's run: add {missing[0]} to --arms")
        if self.tokenizers not in TOKENIZERS:
            raise ConfigError(f"--tokenizers must be one of {', '.join(TOKENIZERS)} (got {self.tokenizers!r})")
        if self.backend not in BACKENDS:
            raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)} (got {self.backend!r})")
        if self.backend == "jax":
            require_extra("jax", "bertology study --backend jax")
        if not self.tasks:
            raise ConfigError("--tasks needs at least one task")
        names = [Path(task).name for task in self.tasks]
        if len(set(names)) != len(names):
            raise ConfigError(f"--tasks names two tasks alike ({', '.join(names)}): each task's results are kept "
                              "under its folder's name")
        ranges.check_options(self, _RANGES, optional=("seeds",))
        if self.batch_sizes is not None:
            check_batch_sizes(self.batch_sizes, SCALES[self.scale], self.arms)
        return SCALES[self.scale]

    @property
    def seed_count(self):
        return self.seeds if self.seeds is not None else SCALES[self.scale].seeds

    def plan_key(self):
        """What fixes the study's results: a study folder holds one plan, resumed only with the same
        (the scale's sizes and recipe included, so a changed scale is not mixed into an old study)."""
        key = dataclasses.asdict(self)
        for name in ("out", "workers", "all_tasks", "backend", "verbose"):
            key.pop(name)
        key["recipe"] = dataclasses.asdict(SCALES[self.scale])
        key["seeds"] = self.seed_count
        return json.loads(json.dumps(key))  # as study.json holds it: tuples become lists


def check_batch_sizes(batch_sizes, scale, arms):
    """ConfigError unless `batch_sizes` can make the axis at `scale` for `arms`."""
    micro = scale.batch_size
    for size in batch_sizes:
        if not ranges.BATCH_SIZE.accepts(size):
            raise ConfigError(f"--batch-sizes {size!r}: each size must be {ranges.BATCH_SIZE}")
    if len(batch_sizes) < 2 or len(set(batch_sizes)) != len(batch_sizes):
        raise ConfigError(f"--batch-sizes takes two or more different sizes (got {','.join(map(str, batch_sizes))})")
    samples = scale.reference_steps * micro
    for size in batch_sizes:
        if size < micro or size % micro:
            raise ConfigError(f"--batch-sizes {size}: each size must be a multiple of the scale's batch of {micro} "
                              "(a step holds that many rows; larger batches accumulate them)")
        if size > samples:
            raise ConfigError(f"--batch-sizes {size} is more than the {samples} samples the scale's run sees "
                              f"({scale.reference_steps} steps of {micro}): it would make no whole update")
    if len(arms) != 1:
        raise ConfigError(f"--batch-sizes studies one arm (got --arms {' '.join(arms)}); without --arms it is "
                          f"{BATCH_ARM}")
