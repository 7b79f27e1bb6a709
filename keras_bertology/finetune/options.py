"""The options of a fine-tuning run and their validation, importable without TensorFlow."""

import dataclasses
import math

from keras_bertology.errors import ConfigError


# Strategies fine-tuning runs under (`training.strategy`); multi-worker is pretraining only so far.
FINETUNE_STRATEGIES = ("auto", "default", "mirrored", "tpu")


@dataclasses.dataclass
class FinetuneOptions:
    """Everything `bertology finetune` accepts.

    The defaults are BERT's fine-tuning recipe (AdamW, 10% warm-up then
    linear decay, weight decay 0.01, 3 epochs, peak rate 5e-5, batch 32);
    `seq_len` None takes the run's own sequence length.
    """

    task: str = ""
    from_dir: str = ""
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 5e-5
    layer_decay: float = 1.0
    warmup: float = 0.1
    seq_len: int | None = None
    seed: int = 0
    out: str | None = None
    export: str | None = None
    no_export: bool = False  # results and model.keras only (a study fine-tunes many models it never serves)
    max_examples: int | None = None
    random_init: bool = False
    strategy: str = "default"
    verbose: int = 1

    def validate(self):
        """Raise ConfigError for values that cannot work, before anything slow starts."""
        if not self.task:
            raise ConfigError("--task is required: a built-in task name or a data folder")
        if self.no_export and self.export:
            raise ConfigError("--export and --no-export contradict each other; keep one")
        if not self.from_dir:
            raise ConfigError("--from is required: a run folder from `bertology pretrain` or `bertology convert`")
        for name in ("epochs", "batch_size") + tuple(n for n in ("seq_len", "max_examples")
                                                      if getattr(self, n) is not None):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{_flag(name)} must be a whole number of at least 1 (got {value!r})")
        if self.seq_len is not None and self.seq_len < 8:
            raise ConfigError(f"--seq-len {self.seq_len} is too short; use at least 8")
        _check_number("learning_rate", self.learning_rate, lambda v: v > 0, "above 0")
        _check_number("layer_decay", self.layer_decay, lambda v: 0 < v <= 1, "in (0, 1]")
        _check_number("warmup", self.warmup, lambda v: 0 <= v < 1, "in [0, 1)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"--seed must be a whole number (got {self.seed!r})")
        if self.strategy not in FINETUNE_STRATEGIES:
            raise ConfigError(f"--strategy must be one of {', '.join(FINETUNE_STRATEGIES)} for fine-tuning "
                              f"(got {self.strategy!r}; multiworker fine-tuning is not supported yet)")


def _flag(name):
    return "--" + name.replace("_", "-")


def _check_number(name, value, accepted, words):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not accepted(value):
        raise ConfigError(f"{_flag(name)} must be a finite number {words} (got {value!r})")
