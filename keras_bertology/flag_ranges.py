"""The accepted range of every numeric flag, in one place, importable without TensorFlow.

`bertology` checks each numeric flag against its range while it parses the
command line (and shows the range in `--help`); the options classes'
`validate()` check the same ranges, so the Python API refuses what the CLI
refuses. The upper bounds are far above what any real run needs: they are
there to refuse at once what would otherwise overflow, crash deep inside
NumPy or TensorFlow, or run for hours without output (`--dupe-factor 10**22`).
"""

import argparse
import dataclasses
import math
import numbers

from keras_bertology.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Range:
    """Finite numbers of `kind` (int or float) from `low` to `high`; the ends named in `open`
    ("low", "high") are excluded."""

    kind: type
    low: float
    high: float
    open: tuple = ()

    def __post_init__(self):
        if not -math.inf < self.low <= self.high < math.inf:
            raise ValueError(f"a range needs finite bounds, low <= high (got {self.low}, {self.high})")

    def __str__(self):
        if self.kind is int:
            return f"a whole number from {self.low} to {self.high}"
        if not self.open:
            return f"a number from {self.low} to {self.high}"
        return (f"a number in {'(' if 'low' in self.open else '['}{self.low}, "
                f"{self.high}{')' if 'high' in self.open else ']'}")

    def accepts(self, value):
        """Whether `value` is a number of this kind within the range (bools are not numbers here). The
        bounds are finite, so infinities are outside, and NaN fails every comparison."""
        if isinstance(value, bool) or not isinstance(value, self.kind if self.kind is int else numbers.Real):
            return False
        above = value > self.low if "low" in self.open else value >= self.low
        below = value < self.high if "high" in self.open else value <= self.high
        return above and below

    def check(self, value, flag):
        """`value`, or a ConfigError naming `flag` and this range (the options classes' check)."""
        if not self.accepts(value):
            raise ConfigError(f"{flag} must be {self} (got {value!r})")
        return value

    def parse_list(self, text):
        """An argparse `type=` for comma-separated numbers ("16,32,64"), each in range."""
        try:
            return tuple(self.parse(part) for part in text.split(","))
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentTypeError(f"in {text!r}: {error}") from None

    def parse(self, text):
        """An argparse `type=`: the flag's text as a number in range, or a one-line reason."""
        try:
            value = self.kind(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not self.accepts(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {self}")
        return value


def check_length_buckets(buckets, seq_len):
    """Serving length buckets (tokens), sorted and unique; ConfigError for the first that is not a whole
    number in [1, seq_len] (the model's sequence length caps every input)."""
    for size in buckets:
        if not LENGTH_BUCKET.accepts(size) or size > seq_len:
            raise ConfigError(f"--length-buckets {size!r}: each bucket must be a whole number of tokens from 1 "
                              f"to {seq_len}, the sequence length")
    return tuple(sorted(set(buckets)))


def check_serving_flags(length_buckets, serving_xla, without_saved_model):
    """ConfigError for the SavedModel's flags given where no SavedModel is written (`without_saved_model`:
    the flag that leaves it out, or None where one is written): they would do nothing."""
    for flag, given in (("--length-buckets", length_buckets), ("--serving-xla", serving_xla)):
        if given and without_saved_model:
            raise ConfigError(f"{flag} applies to the SavedModel, which {without_saved_model} leaves out; keep one")


def check_options(options, ranges_by_name, optional=()):
    """ConfigError for the first field of `options` (a dataclass of a command's options) out of its
    flag's range; None passes for the `optional` fields, where it stands for a default."""
    for name, bounds in ranges_by_name.items():
        value = getattr(options, name)
        if value is not None or name not in optional:
            bounds.check(value, "--" + name.replace("_", "-"))


# Steps of one run: 10**9 is 1000x BERT-base's million; more is a typo that would run for years
# (and 10**22 overflows the int64 step counters).
STEPS = Range(int, 1, 10**9)
# Steps per logged window: a window is never longer than the run.
LOG_EVERY = STEPS
# Sequences in a (global) batch: 2**20 is 16x the largest published (LAMB's 64K); past it the
# batch's arrays alone outgrow any accelerator.
BATCH_SIZE = Range(int, 1, 2**20)
# Tokens per sequence: 8 leaves room for text beside [CLS] and two [SEP]s; 65536 is 128x BERT's 512
# positions (XLNet's relative positions have no table), where one head's attention is already 16 GiB.
SEQ_LEN = Range(int, 8, 2**16)
# Serving length buckets, in tokens: each at most the model's sequence length (checked with it).
LENGTH_BUCKET = Range(int, 1, SEQ_LEN.high)
# Masked-LM prediction slots per sequence: at most the maskable positions of --seq-len (checked with it).
MAX_PREDICTIONS = Range(int, 1, SEQ_LEN.high)
# Tokenizer size: 2**21 is 8x the largest vocabularies in use (XLM-R's 250K). Small sizes are left
# to the tokenizer, which says why a corpus needs more.
VOCAB_SIZE = Range(int, 1, 2**21)
# Masked copies of the corpus (static masking): BERT used 10; each copy is another pass over the corpus
# written to disk, so 1000 is already a hundred times BERT's data.
DUPE_FACTOR = Range(int, 1, 1000)
# Seeds: what every seeded library takes (TensorFlow's int32 seeds; NumPy's stop at 2**32 - 1).
SEED = Range(int, 0, 2**31 - 1)
# Peak learning rate: recipes use 1e-5 to 1e-2, so 10 is 1000x the largest; a tiny RoBERTa's loss still
# stays finite at 10 (30 steps, measured), while 1e30 overflows its weights to NaN by step 3.
LEARNING_RATE = Range(float, 0, 10, open=("low",))
ATTENTION_DROPOUT = Range(float, 0, 1, open=("high",))
# Layer-wise decay factor: 1 turns it off; above 1 the lowest layers would learn fastest.
LAYER_DECAY = Range(float, 0, 1, open=("low",))
# Share of the steps of a warmup-stable-decay schedule's final decay: none would end the run at the peak
# rate, all of it is the linear schedule's shape with a square-root tail.
DECAY_SHARE = Range(float, 0, 1, open=("low",))
# Share of the steps spent warming up: all of them would leave no step at the peak rate.
WARMUP = Range(float, 0, 1, open=("high",))
# Warm-up updates of pretraining: none starts at the peak; at most the run's --steps (checked with it).
WARMUP_STEPS = Range(int, 0, STEPS.high)
# A polynomial schedule's power: 1 is linear; 0 would hold the peak, and past 10 the rate is all but gone
# after a tenth of the decay.
DECAY_POWER = Range(float, 0, 10, open=("low",))
# Micro-batches per update: 8192 reaches RoBERTa's 8K batch from batches of one sequence.
ACCUMULATE = Range(int, 1, 2**13)
# Updates between held-out evaluations: at most a run's --steps (checked with it).
EVAL_EVERY = Range(int, 1, STEPS.high)
# Fine-tuning epochs: recipes use 2 to 10; 10000 still allows overfitting studies of tiny data.
EPOCHS = Range(int, 1, 10**4)
# Examples kept per split: more than any labeled data set holds.
MAX_EXAMPLES = Range(int, 1, 10**9)
# Shard files: 100000 of the default 16 MB hold 1.6 TB of text; more only slows the file system.
SHARDS = Range(int, 1, 10**5)
# DirectRunner processes on this machine: more than any machine has cores.
WORKERS = Range(int, 1, 4096)
# Replicas sharing a batch: 2**16 is 7x the largest TPU pod (8960 v5p chips).
REPLICAS = Range(int, 1, 2**16)
# Devices each weight is split over (--model-parallel): no more than the replicas a batch can have.
MODEL_PARALLEL = Range(int, 1, REPLICAS.high)
# Tokenizer training text, held in memory as Python strings (several times its size): 64 GiB is
# past any machine's memory for it, and a tokenizer learns little more after a few GB.
TOKENIZER_SAMPLE_MB = Range(float, 0, 2**16, open=("low",))
# Fine-tuning seeds of a study: each one fine-tunes every arm on every task again; two are the fewest
# whose paired differences have a standard error, and the mean has long settled at 100.
STUDY_SEEDS = Range(int, 2, 100)
# Seeds of `bertology probe`: each draws the probe's examples and a control; two give a standard error.
PROBE_SEEDS = STUDY_SEEDS
