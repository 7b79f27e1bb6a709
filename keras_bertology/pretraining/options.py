"""The options of a pretraining run and their validation, importable without TensorFlow.

`bertology pretrain` builds a `PretrainOptions` from its flags; `validate()`
refuses anything that cannot work before a slow step starts.
"""

import dataclasses
import inspect
import math
import os

from keras_bertology import flag_ranges as ranges
from keras_bertology.data.recipe_fields import RECIPE_FIELDS
from keras_bertology.engine.choices import OPTIMIZERS, RATE_FACTORS, SCHEDULES, STRATEGIES
from keras_bertology.errors import ConfigError
from keras_bertology.models.family import ENCODER_SIZES
from keras_bertology.models.registry import DEFAULT_MODEL, check_preset, default_preset, get_family

PRECISIONS = ("auto", "float32", "mixed_bfloat16")
XLA_CHOICES = ("auto", "on", "off")
MASKINGS = ("static", "dynamic")
PACKINGS = ("full-sentences", "doc-sentences", "unpadded")

# A run logs at least this many windows when it has the steps for them, so
# that its first and last window (and the loss curve) say something.
MIN_WINDOWS = 10

# The numeric options and their ranges: those of the CLI's flags.
_RANGES = {"steps": ranges.STEPS, "batch_size": ranges.BATCH_SIZE, "seq_len": ranges.SEQ_LEN,
           "vocab_size": ranges.VOCAB_SIZE, "dupe_factor": ranges.DUPE_FACTOR, "log_every": ranges.LOG_EVERY,
           "max_predictions": ranges.MAX_PREDICTIONS, "learning_rate": ranges.LEARNING_RATE,
           "layer_decay": ranges.LAYER_DECAY, "seed": ranges.SEED, "decay_share": ranges.DECAY_SHARE,
           "model_parallel": ranges.MODEL_PARALLEL, "warmup_steps": ranges.WARMUP_STEPS,
           "decay_power": ranges.DECAY_POWER, "accumulate": ranges.ACCUMULATE, "eval_every": ranges.EVAL_EVERY,
           "attention_dropout": ranges.ATTENTION_DROPOUT}
_SPECIAL_POSITIONS = 3  # [CLS] and up to two [SEP]s are never masked


@dataclasses.dataclass
class PretrainOptions:
    """Everything `bertology pretrain` accepts; defaults give the quick CPU run."""

    model: str = DEFAULT_MODEL
    # None: the family's default (`default_preset`), with --data the shards' family's, with --init-from the source's
    preset: str | None = None
    corpus: list | None = None
    corpus_format: str = "auto"
    text_field: str = "text"
    skip_bad_records: bool = False
    data: str | None = None  # prepared shards (`bertology prepare`) instead of --corpus
    steps: int = 600
    batch_size: int = 32
    seq_len: int = 128
    out: str | None = None
    export: str | None = None
    no_export: bool = False  # keep the run folder only (`bertology export RUN_DIR` exports it later)
    length_buckets: tuple = ()  # the export's serving lengths (see export.saved_model); () pads to the longest
    serving_xla: bool = False  # the export's endpoints run the model compiled by XLA (see export.saved_model)
    vocab_size: int = 8000
    masking: str | None = None
    packing: str | None = None
    whole_word: bool = False
    masking_units: str | None = None  # None: the family's (see `data.recipe.units_of`)
    phrases: str | None = None  # a phrase list for the phrase level (None: the corpus's collocations)
    gazetteer: str | None = None  # an entity list for the entity level (None: capitalised names)
    dupe_factor: int = 10
    max_predictions: int | None = None  # None: the family's rule (BERT: 20 for 128 tokens)
    learning_rate: float | None = None  # None: the family's peak rate (1e-3 for BERT's quick runs)
    layer_decay: float = 1.0  # ELECTRA's layer-wise learning-rate decay (0.8); 1 turns it off
    schedule: str | None = None  # None: the family's ("linear"; ModernBERT's "wsd"), see engine.optimization
    decay_share: float = 0.1  # the share of the steps a "wsd" schedule decays over
    warmup_steps: int | None = None  # None: 10% of the steps
    decay_power: float = 1.0  # a "polynomial" schedule's power
    optimizer: str | None = None  # None: the family's ("adamw"; ALBERT's "lamb"), see engine.optimization
    accumulate: int = 1  # micro-batches per update: --batch-size is the update's batch, split in this many
    eval_every: int | None = None  # updates between held-out evaluations (None: none during training)
    log_every: int = 50
    # auto: mixed_bfloat16 where the processor has native bf16, else float32; BERTOLOGY_PRECISION sets the default
    precision: str = dataclasses.field(default_factory=lambda: os.environ.get("BERTOLOGY_PRECISION", "auto"))
    # auto: XLA-compiled steps on one device (see engine/xla.py); BERTOLOGY_XLA sets the default
    xla: str = dataclasses.field(default_factory=lambda: os.environ.get("BERTOLOGY_XLA", "auto"))
    remat: bool = False  # recompute each block's activations in the backward pass (see layers.remat)
    attention_dropout: float | None = None  # dropout on the attention probabilities; None: the preset's
    strategy: str = "default"
    model_parallel: int = 1  # devices each weight is split over (--backend jax), see engine.keras_distribution
    seed: int = 0
    resume: bool = False
    verbose: int = 1
    family_options: dict | None = None  # the family's own settings, see `ModelFamily.options`
    encoder: dict | None = None  # the preset's sizes replaced (ENCODER_SIZES), e.g. by `bertology study`
    snapshots: tuple = ()  # steps (window ends) at which the encoder is also kept, RUN/snapshots/step-N/
    init_from: str | None = None  # a finished run whose weights and vocabulary a new run starts from

    def __post_init__(self):
        if self.preset is None and not self.data and not self.init_from:
            self.preset = default_preset(self.model)

    def validate(self):
        """Raise ConfigError for values that cannot work; returns the model family."""
        family = get_family(self.model)
        if self.preset is not None or not self.init_from:  # a run from a converted model has none
            check_preset(family, self.preset)
        if self.no_export and self.export:
            raise ConfigError("--export and --no-export contradict each other; keep one")
        ranges.check_options(self, _RANGES, optional=("max_predictions", "learning_rate", "warmup_steps",
                                                      "eval_every", "attention_dropout"))
        if self.attention_dropout is not None and not _takes_attention_dropout(family.backbone_cls):
            raise ConfigError(f"--attention-dropout does not apply to --model {family.name}: its backbone has no "
                              "dropout of the attention probabilities of its own")
        self._check_schedule()
        ranges.check_length_buckets(self.length_buckets, self.seq_len)
        ranges.check_serving_flags(self.length_buckets, self.serving_xla, "--no-export" if self.no_export else None)
        # T5's positions are relative; a run from --init-from has the source's (checked as its model is built)
        max_positions = family.presets[self.preset]["config"].get("max_positions") if self.preset else None
        if max_positions and self.seq_len > max_positions:
            raise ConfigError(
                f"--seq-len {self.seq_len} is above the {max_positions} positions of {self.preset}"
            )
        if self.max_predictions is not None and self.max_predictions > self.seq_len - _SPECIAL_POSITIONS:
            raise ConfigError(
                f"--max-predictions {self.max_predictions} is above the "
                f"{self.seq_len - _SPECIAL_POSITIONS} maskable positions of --seq-len {self.seq_len}"
            )
        _check_choice("masking", self.masking, MASKINGS, optional=True)
        _check_choice("packing", self.packing, PACKINGS, optional=True)
        _check_choice("schedule", self.schedule, SCHEDULES, optional=True)
        _check_choice("optimizer", self.optimizer, OPTIMIZERS, optional=True)
        _check_choice("precision", self.precision, PRECISIONS)
        _check_choice("xla", self.xla, XLA_CHOICES)
        _check_choice("strategy", self.strategy, STRATEGIES)
        if self.packing is not None and self.packing not in family.data.packings:
            raise ConfigError(
                f"--packing {self.packing} does not apply to --model {family.name}, "
                + (f"which takes {', '.join(family.data.packings)}" if family.data.packings
                   else "which takes none")
            )
        if self.init_from is not None:
            from keras_bertology.pretraining.init_from import check_source, check_source_sizes

            if family.context_path is not None:
                raise ConfigError(f"--init-from and --model {family.name}'s own context (its teacher) both give the "
                                  "run its vocabulary and sizes: keep one")
            description = check_source(self.init_from, family)
            if self.preset is not None:
                check_source_sizes(family, self.preset, description, self.init_from)
        if self.accumulate > 1 and family.data.stream_batches:
            raise ConfigError(f"--accumulate does not apply to --model {family.name}: row r of each batch goes on "
                              "with the text of row r of the batch before (its memory), which micro-batches "
                              "would tear apart; raise --batch-size instead")
        if not family.data.masks_tokens:
            self._check_no_masking(family)
        self._check_units(family)
        if self.family_options is not None and not isinstance(self.family_options, dict):
            raise ConfigError(f"family_options must be a dict (got {self.family_options!r})")
        family.option_values(self.family_options)
        self._check_encoder(family)
        window = self.steps_per_window
        for step in self.snapshots:
            if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= self.windows * window \
                    or step % window:
                raise ConfigError(f"snapshot step {step!r} is not the end of a logged window of this run "
                                  f"(every {window} steps, up to {self.windows * window})")
        return family

    def check_given(self, family, given):
        """Refuse the flags of `given` (the names of the options set by the user) that do nothing with
        this run's other settings; their defaults are values, so only a flag given says the user meant one."""
        schedule = self.learning_rate_schedule(family)
        for name, applies_to in (("decay_share", "wsd"), ("decay_power", "polynomial")):
            if name in given and schedule != applies_to:
                raise ConfigError(f"{_flag(name)} applies to --schedule {applies_to}, not {schedule}")

    def _check_schedule(self):
        for flag, value in (("--warmup-steps", self.warmup_steps), ("--eval-every", self.eval_every)):
            if value is not None and value > self.steps:
                raise ConfigError(f"{flag} {value} is more than the run's --steps {self.steps}")
        if self.eval_every and self.data:
            raise ConfigError("--eval-every holds documents of the corpus out of training, and prepared shards "
                              "(--data) hold none out: give --corpus instead")
        if self.batch_size % self.accumulate:
            raise ConfigError(f"--batch-size {self.batch_size} (the batch of one update) must be a multiple of "
                              f"--accumulate {self.accumulate}, the micro-batches it is split into")

    def _check_units(self, family):
        from keras_bertology.data.knowledge_units import UNITS, needs_stage, parse_units

        if self.masking_units is None:
            levels = parse_units(family.data.masking_units or "tokens")
        else:
            if self.whole_word:
                raise ConfigError("--whole-word is --masking-units words: give one of them")
            levels = parse_units(self.masking_units)
        if needs_stage(levels) and not family.data.masks_units:
            raise ConfigError(f"--masking-units {','.join(levels)} does not apply to --model {family.name}, whose "
                              f"masking takes {'whole words' if family.data.masks_tokens else 'no units'} only")
        if len(levels) > 1 and (self.masking or family.data.masking) == "static":
            raise ConfigError(f"--masking-units {','.join(levels)} is a schedule over the run's steps: it needs "
                              "--masking dynamic (static masks are written before the run)")
        for flag, path, level in (("--phrases", self.phrases, "phrases"), ("--gazetteer", self.gazetteer, "entities")):
            if path is None:
                continue
            if level not in levels:
                raise ConfigError(f"{flag} applies to --masking-units with {level} (of {', '.join(UNITS)})")
            if not os.path.isfile(path) and not self.data:  # prepared shards carry the units marked with it
                raise ConfigError(f"{flag} {path} is not a file")

    def _check_no_masking(self, family):
        given = [flag for flag, value in (("--whole-word", self.whole_word),
                                          ("--masking-units", self.masking_units is not None),
                                          ("--max-predictions", self.max_predictions is not None),
                                          ("--masking static", self.masking == "static")) if value]
        if given:
            raise ConfigError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to --model "
                              f"{family.name}, whose data stage has no masked-LM slots to set")

    def _check_encoder(self, family):
        if self.encoder is None:
            return
        if not isinstance(self.encoder, dict) or set(self.encoder) - set(ENCODER_SIZES):
            raise ConfigError(f"encoder sizes must be a dict of {', '.join(ENCODER_SIZES)} (got {self.encoder!r})")
        for name, value in self.encoder.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"encoder {name} must be a whole number of at least 1 (got {value!r})")
        config = self.backbone_config(family)
        if "num_heads" in config and config["hidden_size"] % config["num_heads"]:
            raise ConfigError(f"encoder hidden_size {config['hidden_size']} is not a multiple of its "
                              f"{config['num_heads']} heads")

    def backbone_config(self, family, **overrides):
        """The preset's backbone config with the `encoder` sizes. A factored embedding (ELECTRA's,
        ALBERT's) is made as wide as the new hidden size: encoders given one size have the same
        embeddings too, so none has fewer parameters than another for its family's preset."""
        # Without a preset (a run from a converted model) the source's config, in `overrides`, sets every entry.
        config = family.backbone_config(self.preset or default_preset(self.model), self.family_options,
                                        **family.sized_config(self.encoder or {}))
        if self.encoder and config.get("embedding_size"):
            config["embedding_size"] = config["hidden_size"]
        if self.packing == "unpadded":  # rows of several documents (the families that take it)
            config["packed_documents"] = True
        config = dict(config, **overrides)
        if self.attention_dropout is not None:  # over a source run's too: dropout changes no weight
            config["attention_dropout"] = self.attention_dropout
        return config

    def with_prepared_data(self, manifest, given=()):
        """These options with the data options of prepared shards (`manifest`). An option in `given`
        (set by the user) that disagrees with the shards is refused, as is --corpus beside --data."""
        recipe = manifest["recipe"]
        if "corpus" in given and self.corpus:
            raise ConfigError("--corpus and --data exclude each other: the shards in --data are the corpus")
        for name in RECIPE_FIELDS:
            if name in given and getattr(self, name) != recipe[name]:
                raise ConfigError(f"{_flag(name)} {getattr(self, name)} disagrees with the shards in {self.data}, "
                                  f"prepared with {_flag(name)} {recipe[name]}; leave it out or prepare again")
        family_options = dict(self.family_options or {})
        for name, value in recipe["family_options"].items():
            if name in family_options and family_options[name] != value:
                raise ConfigError(f"{_flag(name)} {family_options[name]} disagrees with the shards in {self.data}, "
                                  f"prepared with {_flag(name)} {value}")
            family_options[name] = value
        return dataclasses.replace(self, **{name: recipe[name] for name in RECIPE_FIELDS},
                                   preset=self.preset or (None if self.init_from else default_preset(recipe["model"])),
                                   family_options=family_options or None)

    def with_init_source(self):
        """These options with the preset of the run in --init-from where none is given (None for a converted
        model, whose run.json records its shape); a run keeps its source's shape, so a preset given must
        have its sizes (checked by `validate`)."""
        if not self.init_from or self.preset is not None:
            return self
        from keras_bertology.pretraining.init_from import check_source

        return dataclasses.replace(self, preset=check_source(self.init_from, get_family(self.model)).get("preset"))

    def learning_rate_schedule(self, family):
        """The schedule's name: --schedule, else the family's."""
        return self.schedule or family.training.schedule

    def optimizer_name(self, family):
        """The optimizer's name: --optimizer, else the family's."""
        return self.optimizer or family.training.optimizer

    def peak_learning_rate(self, family):
        """--learning-rate, or the family's default (for the family's optimizer; for another, scaled by
        the ratio of their `engine.choices.RATE_FACTORS`)."""
        if self.learning_rate is not None:
            return self.learning_rate
        optimizer = self.optimizer_name(family)
        factor = RATE_FACTORS[optimizer] / RATE_FACTORS[family.training.optimizer]
        return family.training.learning_rate * factor

    def prediction_slots(self, family):
        """--max-predictions, or the family's rule for --seq-len; None for a causal LM (it predicts every
        token: nothing to count, and nothing for prepared data to record)."""
        if not family.data.masks_tokens:
            return None
        return self.max_predictions if self.max_predictions is not None else family.max_predictions(self.seq_len)

    @property
    def steps_per_window(self):
        """Steps per logged window: at most --log-every, small enough for MIN_WINDOWS windows. With
        --eval-every K the windows end where evaluations are due: K, or a divisor of K at least half as
        long as the window would be (else evaluations come at the end of the window K's multiples fall in)."""
        window = max(1, min(self.log_every, self.steps // MIN_WINDOWS))
        if not self.eval_every or self.eval_every <= window:
            return min(window, self.eval_every or window)
        divisor = max(size for size in range(1, window + 1) if self.eval_every % size == 0)
        return divisor if 2 * divisor >= window else window

    @property
    def windows(self):
        """Logged windows; --steps is rounded up to a whole number of them."""
        return math.ceil(self.steps / self.steps_per_window)


def _flag(name):
    return "--" + name.replace("_", "-")


def _check_choice(name, value, choices, optional=False):
    if (value is None and optional) or value in choices:
        return
    raise ConfigError(f"{_flag(name)} must be one of {', '.join(choices)} (got {value!r})")


def _takes_attention_dropout(backbone_cls):
    """Whether the backbone class, or a base it hands its keyword arguments to, takes `attention_dropout`."""
    return any("attention_dropout" in inspect.signature(cls.__init__).parameters
               for cls in backbone_cls.__mro__ if "__init__" in vars(cls))
