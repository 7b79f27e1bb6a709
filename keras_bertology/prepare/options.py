"""The options of `bertology prepare` and their checks, importable without TensorFlow or Beam."""

import dataclasses
import math
import os

from keras_bertology import flag_ranges as ranges
from keras_bertology.data.corpus import CORPUS_FORMATS
from keras_bertology.errors import ConfigError
from keras_bertology.models.registry import DEFAULT_MODEL, default_preset
from keras_bertology.pretraining.options import PretrainOptions

# Text per shard when --shards is not given: a shard's documents are held in memory while its instances
# are built, so this bounds the memory of a worker.
SHARD_TEXT_BYTES = 16 * 2**20
# A gzip-compressed corpus file holds about this many times its size in text.
GZIP_RATIO = 3
# prepare's own numeric options and their ranges (those of the CLI's flags); the data options are
# checked as pretrain's.
_RANGES = {"shards": ranges.SHARDS, "workers": ranges.WORKERS, "replicas": ranges.REPLICAS,
           "tokenizer_sample_mb": ranges.TOKENIZER_SAMPLE_MB}


@dataclasses.dataclass
class PrepareOptions:
    """Everything `bertology prepare` accepts. The data options (seq_len, masking, ...) mean what they
    mean for `bertology pretrain`, which takes them from the manifest when it trains from the shards."""

    out: str
    model: str = DEFAULT_MODEL
    preset: str | None = None  # None: the family's default (`default_preset`)
    corpus: list | None = None
    corpus_format: str = "auto"
    text_field: str = "text"
    shards: int | None = None  # None: one per SHARD_TEXT_BYTES of text, at least one per worker
    workers: int | None = None  # DirectRunner processes; None: the machine's cores
    runner: str = "DirectRunner"
    pipeline_args: list = dataclasses.field(default_factory=list)  # any further Beam pipeline options
    tokenizer: str | None = None  # a saved tokenizer (or run folder) instead of training one
    tokenizer_sample_mb: float = 64.0
    vocab_size: int = 8000
    seq_len: int = 128
    masking: str | None = None
    packing: str | None = None
    whole_word: bool = False
    masking_units: str | None = None
    phrases: str | None = None
    gazetteer: str | None = None
    dupe_factor: int = 10
    max_predictions: int | None = None
    family_options: dict | None = None
    seed: int = 0
    batch_size: int = 32  # stream families (XLNet) lay their rows out for this global batch ...
    replicas: int = 1  # ... shared by this many replicas
    skip_bad_records: bool = False
    verbose: int = 1

    def __post_init__(self):
        if self.preset is None:
            self.preset = default_preset(self.model)

    def recipe_options(self):
        """The data options as `PretrainOptions` (what the recipe functions take)."""
        return PretrainOptions(model=self.model, preset=self.preset, corpus=self.corpus, vocab_size=self.vocab_size,
                               seq_len=self.seq_len, masking=self.masking, packing=self.packing,
                               whole_word=self.whole_word, masking_units=self.masking_units,
                               phrases=self.phrases, gazetteer=self.gazetteer, dupe_factor=self.dupe_factor,
                               max_predictions=self.max_predictions, family_options=self.family_options,
                               seed=self.seed, batch_size=self.batch_size, verbose=self.verbose)

    def validate(self):
        """Raise ConfigError for values that cannot work; returns the model family."""
        family = self.recipe_options().validate()
        if self.corpus_format not in CORPUS_FORMATS:
            raise ConfigError(f"--corpus-format must be one of {', '.join(CORPUS_FORMATS)} "
                              f"(got {self.corpus_format!r})")
        ranges.check_options(self, _RANGES, optional=("shards", "workers"))
        if not self.text_field:
            raise ConfigError("--text-field must name a field")
        if family.data.stream_batches and self.batch_size % self.replicas:
            raise ConfigError(f"--batch-size {self.batch_size} must divide evenly among --replicas {self.replicas}")
        return family

    def local_workers(self):
        return self.workers or os.cpu_count() or 1

    def shard_count(self, corpus_bytes):
        """--shards, or about SHARD_TEXT_BYTES of text each and at least one per worker."""
        return self.shards or max(self.local_workers(), math.ceil(corpus_bytes / SHARD_TEXT_BYTES))
