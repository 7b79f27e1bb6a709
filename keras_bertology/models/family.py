"""What the training, conversion and export code needs to know about a model family."""

import math
import numbers
from dataclasses import dataclass, field

from keras_bertology.data.builder_contexts import InstanceContext, MaskingContext
from keras_bertology.errors import ConfigError
from keras_bertology.flag_ranges import Range
from keras_bertology.lazy_imports import import_object
from keras_bertology.models.layouts import TRANSFORMER_BLOCK_LAYOUT

# The Transformer sizes a run may set (`PretrainOptions.encoder`, the study): a preset's architecture at
# another depth and width, each renamed in a family's config by its `TrainingDefaults.size_keys`.
ENCODER_SIZES = ("num_layers", "hidden_size", "num_heads", "intermediate_size")


@dataclass(frozen=True)
class FamilyOption:
    """A pretraining setting of one family, offered as `--<name>` by the CLI.

    Attributes:
        name: keyword of the family's builders that take it; the flag is the name with dashes.
        kind: int, float or str (a str without `choices` is free text: a path).
        default: the family's value when the flag is not given.
        help: one line for `--help`.
        minimum, maximum: the accepted range (inclusive) of a number, required for one: the CLI
            parses the flag with it (`range`) and shows it in --help.
        choices: the accepted values of a string.
        used_by: which builders take it: "masker", "instances", "pretrainer", "backbone" (a key of the
            backbone's config, or of the dict `config_key` of it; None keeps the preset's value),
            "context" (the family's `context_path`, e.g. the path of a teacher).
        config_key: for a backbone option, the backbone argument (a dict) it is a key of, e.g.
            "attention_options".
        applies_when: (option, value): given while that option of the family has another value, it
            is refused (a generator's settings with an objective that has no generator).
        step: a whole number the model takes in steps of this size, rounding a value given down (a window
            split in two halves: 2); a run given another value is told so.
    """

    name: str
    kind: type
    default: object
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()
    used_by: tuple = ("masker",)
    applies_when: tuple = ()
    config_key: str = ""
    step: int = 1

    @property
    def flag(self):
        return "--" + self.name.replace("_", "-")

    def check(self, value):
        """`value` as `kind`, or a ConfigError naming the flag and what it accepts; None stays None
        for options whose default is None (the preset or the builder decides)."""
        if value is None and self.default is None:
            return None
        if self.kind is str and not self.choices:
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{self.flag} must be a non-empty string (got {value!r})")
            return value
        if self.kind is str:
            if value not in self.choices:
                raise ConfigError(f"{self.flag} must be one of {', '.join(self.choices)} (got {value!r})")
            return value
        if self.kind is int and isinstance(value, numbers.Real) and not isinstance(value, (bool, int)) \
                and math.isfinite(value) and float(value).is_integer():
            value = int(value)  # 3.0 is 3
        return self.kind(self.range.check(value, self.flag))

    @property
    def range(self):
        """The accepted numbers (`flag_ranges.Range`), which the CLI also parses the flag with; None for str."""
        return None if self.kind is str else Range(self.kind, self.minimum, self.maximum)

    def __post_init__(self):
        """A number without bounds would reach the CLI without a range: refused where it is declared."""
        if self.kind is not str and (self.minimum is None or self.maximum is None):
            raise TypeError(f"FamilyOption {self.name}: a number needs a minimum and a maximum")


@dataclass(frozen=True)
class RunContext:
    """What a family's run takes from outside its corpus (a distillation teacher), made by the family's
    `context_path` from its "context" options.

    Attributes:
        tokenizer: used instead of training one (a student reads its teacher's vocabulary); None trains one.
        backbone_overrides: backbone config entries over the preset's (a student is as wide as its teacher).
        pretrainer_kwargs: further arguments of the pretrainer builder (the teacher model).
        record: what metrics.json says about it.
        initial_weights: a run folder whose weights the new pretrainer starts from (`--init-from`).
    """

    tokenizer: object = None
    backbone_overrides: dict = field(default_factory=dict)
    pretrainer_kwargs: dict = field(default_factory=dict)
    record: dict = field(default_factory=dict)
    initial_weights: str | None = None

    @property
    def source(self):
        """What the context's vocabulary and sizes come from, for messages: a teacher or a run folder."""
        return self.record.get("teacher") or self.record.get("init_from") or "the run's context"


@dataclass(frozen=True)
class DataRecipe:
    """How a family's pretraining data is made from tokenized documents: its instances and the masking stage
    mapped over their batches.

    Attributes:
        instances_path: `build(documents, context, **options) -> dict of arrays`, documents being lists of
            token-id arrays and `context` a `data.builder_contexts.InstanceContext` (sequence length,
            specials, random generator, copies, packing, batch size, replicas).
        masking: default masking, "static" (written once) or "dynamic".
        masker_path: `build(context, **options) -> masker`, `context` being a
            `data.builder_contexts.MaskingContext` (tokenizer, prediction slots, whole words, sequence length,
            replicas, the corpus' token counts) of which the stage reads what it needs; the masking stage is
            mapped over batches of instances, called as `masker(batch, seed=[2] ints)` and draws every random
            number from the seed.
        packings: the `--packing` choices the instance builder takes, default first; empty when it takes
            none.
        prediction_share: masked-LM prediction slots per token when --max-predictions is not given (BERT: 20
            for 128 tokens, 80 for 512).
        stream_batches: the instances are consecutive batches of text streams (batch row r continues row
            r's text, for a Transformer-XL memory): the input pipeline keeps their order, and the pretrainer
            builder receives `batch_size` (per replica).
        masks_tokens: False for a family whose data stage (`masker_path`) has no masked-LM slots: a causal
            LM, which predicts every next token, or T5's span corruption: --masking static, --whole-word and
            --max-predictions are refused for it.
        masking_units: the units masked whole when --masking-units is not given (`data.unit_stages`; a
            comma-separated list is a schedule of equal shares of the run's steps, ERNIE's
            "words,phrases,entities"); None: tokens, or words with --whole-word.
        masks_units: the masking stage reads a batch's own unit starts (`data.masking.UNIT_STARTS`), so
            --masking-units may name phrases, entities or a schedule (False for XLNet's permutations).
        stage_draws: False where the data stage draws nothing (a causal LM's next tokens, ELMo's neighbours):
            the unigram level a token objective is read against then counts the stage's own labels over every
            instance, which are exactly its targets (ends of text and unknown words among them). A stage that
            draws predicts the corpus' non-special tokens.
    """

    instances_path: str
    masking: str = "dynamic"
    masker_path: str = "keras_bertology.data.masking:token_masker"
    packings: tuple = ()
    prediction_share: float = 0.15625
    stream_batches: bool = False
    masks_tokens: bool = True
    masking_units: str | None = None
    masks_units: bool = True
    stage_draws: bool = True


@dataclass(frozen=True)
class InputLayout:
    """How text becomes a family's model inputs, for serving and fine-tuning.

    Attributes:
        segment_packer_path: `pack(segments, seq_len, cls_id, sep_id, pad_id) -> dict of [B, seq_len]
            int32`: how one or two ragged segments of ids become model inputs (BERT's [CLS] A [SEP] B [SEP]
            by default); served raw text and fine-tuning data are laid out with it.
        text_packer_path: `pack(tokenizer, seq_len, first, second=None) -> dict` of the model inputs of raw
            strings, in place of tokenizing them and laying the ids out with `segment_packer_path`: for a
            family whose inputs are not only token ids (ELMo's words spelled in characters, from the text
            itself). None: the default.
        id_inputs_path: `complete(tokenizer, packed) -> packed` adding the model inputs a family derives from
            laid-out token ids, for layouts built from ids (fine-tuning's tagging and span extraction; ELMo
            spells each id's word). None: the ids are all.
        summary_position: the token whose state sums up a sequence for sequence classification: "first"
            ([CLS]), "last" (XLNet's <cls>), "last_text" (a causal LM's last text token, before the closing
            end token, whose state pretraining makes text-independent) or "mean" (of the states).
    """

    segment_packer_path: str = "keras_bertology.data.packing:pack_segments"
    text_packer_path: str | None = None
    id_inputs_path: str | None = None
    summary_position: str = "first"


@dataclass(frozen=True)
class TrainingDefaults:
    """How a family trains when the run does not say otherwise.

    Attributes:
        learning_rate: peak learning rate of `optimizer` when --learning-rate is not given.
        schedule: the learning-rate schedule when --schedule is not given ("linear", BERT's; "wsd",
            warmup-stable-decay, ModernBERT's).
        optimizer: the optimizer when --optimizer is not given, its original's ("adamw"; ALBERT's "lamb").
        finetune_learning_rate: `bertology finetune`'s peak learning rate when --learning-rate is not given
            (BERT's 5e-5; higher where the task head has more to learn, ELMo's).
        xla_compiles: False where XLA cannot compile the family's training step on TensorFlow (ELMo's LSTMs:
            Keras' scan leaves TensorFlow's loop unbounded, and XLA compiles no unbounded loop's gradient):
            `--xla auto` leaves it off there and `--xla on` is refused.
        model_parallel_layout: how `--model-parallel N` splits the weights over the mesh's `model` axis:
            (regular expression over a variable's path, an axis name or None per dimension) pairs, each path
            matched by one at most (`models.layouts`); the generic block's by default.
        size_keys: where the study's Transformer sizes (`num_layers`, `hidden_size`, `num_heads`,
            `intermediate_size`) go in this family's backbone config, for a family whose sizes have other
            names: {size: config key, or None where it has no counterpart} (ELMo: hidden_size ->
            projection_dim, intermediate_size -> lstm_units, no heads). Sizes not named keep their own names.
    """

    learning_rate: float = 1e-3
    schedule: str = "linear"
    optimizer: str = "adamw"
    finetune_learning_rate: float = 5e-5
    xla_compiles: bool = True
    model_parallel_layout: tuple = TRANSFORMER_BLOCK_LAYOUT
    size_keys: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Conversion:
    """The family's Hugging Face counterpart: what `bertology convert` imports and `export --format hf`
    writes.

    Attributes:
        hf_model_types: the Hugging Face `model_type`s this family imports.
        hf_tokenizer_path: the `convert.hf_tokenizer.HFTokenizerFormat` of the transformers tokenizer classes
            the family's folder reads and writes: their special tokens, files and layout of text (what a
            converted checkpoint serves with); its first class is the one AutoTokenizer builds for the model
            types where tokenizer_config.json names none. None: the family has none.
        converter_path: `convert(family, config, weights) -> (backbone, pretrainer or None, head names,
            tensor names used[, notes])`; notes are lines for the convert report (where the import followed
            the tensors over config.json, as transformers does).
        hf_exporter_path: `export(family, run) -> convert.hf_export.HFExport`, the inverse of the converter
            (`bertology export --format hf`): the transformers class, config and tensors of a
            `runs.RunModel`; None where transformers has no model of the family.
    """

    hf_model_types: tuple = ()
    hf_tokenizer_path: str | None = None
    converter_path: str | None = None
    hf_exporter_path: str | None = None


@dataclass(frozen=True)
class ModelFamily:
    """A model family: its presets, its classes, and the groups of what it declares about its data, inputs,
    training and conversion.

    Generic code (training, export, CLI) asks the family for each piece and
    never compares family names, so a new family is a new record. Classes and
    recipe functions are named by "module:name" import paths, loaded on first
    use, so that listing families and presets does not start TensorFlow.

    Attributes:
        name: CLI name (`--model`).
        presets: preset name -> {"config", "params", "description"} and
            optionally "pretrainer" (settings of the pretrainer builder) and
            "hf_repo" (the Hugging Face Hub repository of its published weights).
        backbone_path: the backbone class built from a preset's config.
        pretrainer_path: `build(backbone, **settings) -> Pretrainer` (a
            `models.pretrainer.Pretrainer` class or a function making one)
            wrapping a backbone with the family's objectives.
        tokenizer_path: `train(sentences, vocab_size) -> Tokenizer`.
        shared_tokenizer_path: `read(shared) -> Tokenizer`: a shared vocabulary
            (`tokenizers.shared_vocabulary`, a cased SentencePiece model) read
            with the special tokens this family needs, so that families compared
            on it split text alike (the study's default); None where the family's
            tokenizer is part of its recipe (ELMo's words spelled in characters).
        data: its `DataRecipe`: instances and masking stage.
        options: the family's own settings (`FamilyOption`s), passed by keyword
            to the builders that declare them: masker, instances, pretrainer.
        context_path: `load(**context options) -> RunContext`, what a run takes
            from outside its corpus (DistilBERT's teacher); None: nothing.
        inputs: its `InputLayout`: how text becomes model inputs.
        training: its `TrainingDefaults`.
        conversion: its `Conversion` to and from Hugging Face checkpoints.
    """

    name: str
    presets: dict
    backbone_path: str
    pretrainer_path: str
    tokenizer_path: str
    data: DataRecipe
    shared_tokenizer_path: str | None = "keras_bertology.tokenizers.shared_vocabulary:encoder_tokenizer"
    options: tuple = ()
    context_path: str | None = None
    inputs: InputLayout = field(default_factory=InputLayout)
    training: TrainingDefaults = field(default_factory=TrainingDefaults)
    conversion: Conversion = field(default_factory=Conversion)

    @property
    def backbone_cls(self):
        return import_object(self.backbone_path)

    @property
    def pretrainer_cls(self):
        return import_object(self.pretrainer_path)

    @property
    def hf_tokenizer(self):
        """The `HFTokenizerFormat` of `Conversion.hf_tokenizer_path`, None without one."""
        path = self.conversion.hf_tokenizer_path
        return import_object(path) if path else None

    def train_tokenizer(self, sentences, vocab_size):
        """The family's tokenizer, trained on `sentences`."""
        return import_object(self.tokenizer_path)(sentences, vocab_size)

    def tokenizer_over(self, shared):
        """The family's tokenizer over the shared vocabulary `shared`; None where it takes none."""
        return import_object(self.shared_tokenizer_path)(shared) if self.shared_tokenizer_path else None

    def build_instances(self, documents, seq_len, specials, rng, copies=1, packing=None, options=None,
                        batch_size=None, replicas=1):
        """Pretraining instances of tokenized `documents`, built `copies` times over the corpus, for a
        global batch of `batch_size` rows shared by `replicas` (stream families lay rows out for them)."""
        self._check_stream_batch(batch_size)
        context = InstanceContext(seq_len, specials, rng, copies, self.packing(packing), batch_size, replicas)
        return import_object(self.data.instances_path)(documents, context, **self.option_values(options, "instances"))

    def build_pretrainer(self, backbone, options=None, preset=None, batch_size=None, context=None):
        """The family's pretrainer (objectives and heads) on `backbone`: the preset's pretrainer
        settings, overridden by the options given; `batch_size` is the batch of one replica; `context`
        (a `RunContext`) adds its pretrainer arguments."""
        self._check_stream_batch(batch_size)
        return self.pretrainer_cls(backbone, **self._pretrainer_settings(options, preset, context),
                                   **({"batch_size": batch_size} if self.data.stream_batches else {}))

    def backbone_needs(self, options=None, preset=None):
        """The backbone config entries that the pretrainer `build_pretrainer` makes needs (see
        `models.pretrainer.Pretrainer.backbone_needs`; none for a builder that is a function)."""
        needs = getattr(self.pretrainer_cls, "backbone_needs", None)
        return needs(**self._pretrainer_settings(options, preset)) if needs else {}

    def _pretrainer_settings(self, options=None, preset=None, context=None):
        """The pretrainer's arguments: the preset's, overridden by the options given and the context's."""
        kwargs = dict(self.presets[preset].get("pretrainer", {})) if preset else {}
        kwargs.update({k: v for k, v in self.option_values(options, "pretrainer").items() if v is not None})
        kwargs.update(context.pretrainer_kwargs if context else {})
        return kwargs

    def run_context(self, options=None):
        """The `RunContext` of a run with these family options (an empty one for most families)."""
        if self.context_path is None:
            return RunContext()
        return import_object(self.context_path)(**self.option_values(options, "context"))

    def _check_stream_batch(self, batch_size):
        """Builders of stream batches lay their rows out for the batch size: refused without one."""
        if self.data.stream_batches and not batch_size:
            raise ConfigError(f"--model {self.name} reads its corpus as batch_size streams: give the batch size")

    def packing(self, given=None):
        """The `given` packing, else the family's default (its first), None for a family with no packings."""
        return given or (self.data.packings[0] if self.data.packings else None)

    def max_predictions(self, seq_len):
        """Prediction slots for `seq_len` tokens when --max-predictions is not given."""
        return max(1, int(self.data.prediction_share * seq_len))

    def build_masker(self, tokenizer, max_predictions, whole_word=False, options=None, replicas=1, seq_len=None,
                     token_counts=None):
        """The family's masking stage for batches of its instances, built from one `MaskingContext` of which
        it reads what it needs (how many `replicas` share a batch, the sequence length, the corpus'
        `token_counts`); `options` as `option_values` checks."""
        context = MaskingContext(tokenizer, max_predictions, whole_word, seq_len, replicas, token_counts)
        return import_object(self.data.masker_path)(context, **self.option_values(options, "masker"))

    def option_values(self, given=None, used_by=None):
        """The family's options (those `used_by` one builder, or all): checked values from `given`,
        else defaults. A name in `given` that is not one of this family's options is refused."""
        given = dict(given or {})
        known = {option.name: option for option in self.options}
        for name in given:
            if name not in known:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} does not apply to --model {self.name}"
                                  + (f", which takes {', '.join(o.flag for o in self.options)}"
                                     if self.options else ""))
        values = {name: option.check(given.get(name, option.default)) for name, option in known.items()}
        for name in given:
            if known[name].applies_when:
                other, needed = known[name].applies_when
                if values[other] != needed:
                    raise ConfigError(f"{known[name].flag} applies to {known[other].flag} {needed}, not "
                                      f"{values[other]}")
        return {name: value for name, value in values.items() if used_by is None or used_by in known[name].used_by}

    def rounding_notes(self, given=None):
        """A line for each option of `given` that the model rounds down to its `step`."""
        stepped = {option.name: option for option in self.options if option.step > 1}
        return [f"{stepped[name].flag} {value} works as {value - value % stepped[name].step} (the model takes it "
                f"in steps of {stepped[name].step})" for name, value in (given or {}).items()
                if name in stepped and value is not None and value % stepped[name].step]

    def pack_text(self, tokenizer, seq_len, first, second=None):
        """Raw strings -> the model inputs this family serves with (see `InputLayout.segment_packer_path` and
        `InputLayout.text_packer_path`), laid out as the tokenizer's `layout` says where it has one (a converted
        checkpoint's, as its Hugging Face tokenizer lays text out)."""
        from keras_bertology.data.packing import layout_packer, pack_text

        if self.inputs.text_packer_path:
            return import_object(self.inputs.text_packer_path)(tokenizer, seq_len, first, second)
        layout = tokenizer.layout_ids
        packer = layout_packer(layout) if layout else import_object(self.inputs.segment_packer_path)
        return pack_text(tokenizer, seq_len, first, second, packer=packer)

    def summary_for(self, tokenizer):
        """The summary position of text that `tokenizer` lays out (see `InputLayout.summary_position`):
        "last_text" is the last real token where the tokenizer's layout closes a text with no token of its own
        (a converted GPT-2's, as its Hugging Face tokenizer)."""
        from keras_bertology.data.packing import TEXT_PIECES

        layout = tokenizer.layout if tokenizer is not None else None
        if self.inputs.summary_position == "last_text" and layout and layout["single"][-1][0] in TEXT_PIECES:
            return "last"
        return self.inputs.summary_position

    def text_layout(self, tokenizer, own_layout=False):
        """How `pack_text` lays out a text and a pair, as a `Tokenizer.layout`: the tokenizer's where it has
        one (unless `own_layout`), else the family's packer's, read off a packing of one-token texts. None
        for a family with a text packer (its inputs are not laid-out ids)."""
        if self.inputs.text_packer_path:
            return None
        if tokenizer.layout is not None and not own_layout:
            return tokenizer.layout
        import tensorflow as tf

        from keras_bertology.data.packing import TEXT_PIECES

        texts = [tf.ragged.constant([[-1]]), tf.ragged.constant([[-2]])]  # ids no token has: -1 is $A, -2 $B
        layout = {}
        for kind, count in (("single", 1), ("pair", 2)):
            packed = self.pack_segments(texts[:count], 8, tokenizer.optional_id("cls"), tokenizer.sep_id,
                                        tokenizer.pad_id)
            real = packed["padding_mask"].numpy()[0].astype(bool)
            layout[kind] = [[TEXT_PIECES[-1 - int(token)] if token < 0 else tokenizer.vocabulary[token], int(segment)]
                            for token, segment in zip(packed["token_ids"].numpy()[0][real],
                                                      packed["segment_ids"].numpy()[0][real])]
        return layout

    def complete_inputs(self, tokenizer, packed):
        """Laid-out ids (`pack_segments`' dict) with the inputs the family derives from them (see
        `InputLayout.id_inputs_path`)."""
        path = self.inputs.id_inputs_path
        return import_object(path)(tokenizer, packed) if path else packed

    def sized_config(self, sizes):
        """Config overrides that give the backbone the Transformer `sizes` (see `TrainingDefaults.size_keys`)."""
        renamed = {self.training.size_keys.get(name, name): value for name, value in sizes.items()}
        return {key: value for key, value in renamed.items() if key is not None}

    def pack_segments(self, segments, seq_len, cls_id, sep_id, pad_id):
        """Ragged id segments (or per-piece values, with -1 specials) -> this family's layout."""
        return import_object(self.inputs.segment_packer_path)(segments, seq_len, cls_id, sep_id, pad_id)

    def convert_hf(self, config, weights):
        """This family's model from a Hugging Face config and tensors (see `Conversion.converter_path`)."""
        return import_object(self.conversion.converter_path)(self, config, weights)

    def export_hf(self, run):
        """The run as a Hugging Face model (see `Conversion.hf_exporter_path`)."""
        return import_object(self.conversion.hf_exporter_path)(self, run)

    def instance_kind(self, packing=None):
        """A name for metrics.json: the builder, and the packing when it takes one."""
        builder = self.data.instances_path.rpartition(":")[2]
        packing = self.packing(packing)
        return f"{builder} ({packing})" if packing else builder

    def backbone_config(self, preset, options=None, **overrides):
        """The backbone kwargs of `preset` with the family's backbone `options` (as `option_values` checks
        them; None keeps the preset's value) and `overrides` applied."""
        config = dict(self.presets[preset]["config"])
        known = {option.name: option for option in self.options}
        for name, value in self.option_values(options, "backbone").items():
            if value is None:
                continue
            key = known[name].config_key
            if key:
                config[key] = dict(config.get(key) or {}, **{name: value})
            else:
                config[name] = value
        return dict(config, **overrides)


# The families whose language-model loss can take its positions in chunks (`layers.vocabulary_scores`).
LOSS_CHUNK_SIZE = FamilyOption(
    "loss_chunk_size", int, 0, "positions whose vocabulary logits a training step holds at once: the loss in "
    "chunks, each recomputed for the gradient, instead of [positions, vocabulary] logits kept for it (0: all "
    "at once)", minimum=0, maximum=1 << 20, used_by=("pretrainer",))


def sized_preset(base_config, num_layers, hidden_size, params, description):
    """A preset in the BERT sizing rule: 64-wide heads and a 4x feed-forward."""
    return {
        "config": dict(base_config, num_layers=num_layers, hidden_size=hidden_size,
                       num_heads=hidden_size // 64, intermediate_size=4 * hidden_size),
        "params": params,
        "description": description,
    }


def publish_weights(presets, repos):
    """Record in `presets` the Hugging Face Hub repository of each named preset's published weights, which
    `from_preset(name, weights="pretrained")` loads and `bertology presets` lists."""
    for name, repo in repos.items():
        presets[name]["hf_repo"] = repo
