"""Import Hugging Face BERT / RoBERTa checkpoints (config.json + safetensors).

Weights are read with safetensors' NumPy loader: no torch, no pickle. Every
layout transformers writes for these families is accepted: the bare encoder
(with or without pooler), the pretraining and masked-LM heads, and task models
such as `*ForSequenceClassification` whose task head is skipped and reported;
names with or without the `bert.` / `roberta.` prefix; single-file or sharded
safetensors; legacy gamma/beta LayerNorm names. PyTorch Linear weights are
stored [out, in] and become Keras' [in, out] kernels; every shape is checked
before assignment, and tensors present but unused are reported, never
silently dropped.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from keras_bertology.errors import CheckpointError

SUPPORTED_MODEL_TYPES = ("bert", "roberta")
DEFAULT_SEQ_LEN = 128
# Index buffers some checkpoints carry; they hold no learned values.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_REQUIRED_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size", "max_position_embeddings")


@dataclass
class ConversionReport:
    """What `convert_hf_checkpoint` found: the architecture, the heads imported, tensors skipped."""

    architecture: str
    heads: list = field(default_factory=list)
    skipped: list = field(default_factory=list)


def read_hf_checkpoint(hf_dir):
    """Return `(config, weights)` from a Hugging Face model folder."""
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise CheckpointError(f"--from-hf {hf_dir} is not a folder")
    config_path = hf_dir / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path} not found: --from-hf needs a folder with config.json and model.safetensors")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{config_path} is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path} must hold a JSON object, not {type(config).__name__}")
    return config, _read_weights(hf_dir)


def _read_weights(hf_dir):
    """All tensors of model.safetensors, or of the shards listed in model.safetensors.index.json."""
    single, index = hf_dir / "model.safetensors", hf_dir / "model.safetensors.index.json"
    if single.is_file():
        return _load_safetensors(single)
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
            raise CheckpointError(f"{index} is not a valid safetensors index: {error}") from None
        weights = {}
        for shard in shards:
            weights.update(_load_safetensors(hf_dir / shard))
        return weights
    if any(hf_dir.glob("*.bin")) or any(hf_dir.glob("*.pt")):
        raise CheckpointError(
            f"{hf_dir} has only PyTorch pickle weights, which are not loaded (they can run code); "
            "re-save the model with transformers' save_pretrained(), which writes model.safetensors"
        )
    raise CheckpointError(f"{single} not found: --from-hf needs a folder with config.json and model.safetensors")


def _load_safetensors(path):
    from safetensors.numpy import load_file

    if not path.is_file():
        raise CheckpointError(f"{path} not found (named by the safetensors index)")
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types for bad files
        raise CheckpointError(f"cannot read {path} (truncated or not safetensors?): {error}") from None


def backbone_kwargs_from_hf(config, weights=None):
    """Map a Hugging Face config dict to `(model_type, BertBackbone kwargs)`.

    With `weights`, the pooler is built only when the checkpoint has one.
    """
    from keras_bertology.layers.activations import HF_ACTIVATIONS

    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    for key in _REQUIRED_SIZES:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"config.json: {key} must be a positive integer (got {value!r})")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise CheckpointError(
            f"config.json: hidden_size {config['hidden_size']} is not divisible by "
            f"num_attention_heads {config['num_attention_heads']}"
        )
    hidden_act = config.get("hidden_act", "gelu")
    if hidden_act not in HF_ACTIVATIONS:
        raise CheckpointError(
            f"hidden_act {hidden_act!r} is not supported; supported: {', '.join(HF_ACTIVATIONS)}"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError("only absolute position embeddings are supported")
    use_pooler = model_type == "bert" if weights is None else _has(weights, model_type, "pooler.dense.weight")
    kwargs = dict(
        vocab_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        activation=HF_ACTIVATIONS[hidden_act],
        max_positions=config["max_position_embeddings"],
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        initializer_range=config.get("initializer_range", 0.02),
        use_pooler=use_pooler,
        num_segments=config.get("type_vocab_size", 2),
    )
    if model_type == "roberta":
        offset = _roberta_position_offset(config)
        if kwargs["max_positions"] <= offset:
            raise CheckpointError(f"config.json: max_position_embeddings must exceed {offset} for RoBERTa")
        kwargs.update(max_positions=kwargs["max_positions"] - offset, num_segments=0)
    return model_type, kwargs


def _roberta_position_offset(config):
    """RoBERTa numbers positions from padding_idx + 1; those first rows are never used."""
    return config.get("pad_token_id", 1) + 1


def _has(weights, model_type, name):
    return name in weights or f"{model_type}.{name}" in weights


class _WeightSource:
    """Hands out checkpoint tensors by name, remembering which were used."""

    def __init__(self, weights, prefix):
        self.weights = weights
        # Task models (`BertForMaskedLM`, ...) prefix the encoder's names; bare encoders do not.
        self.prefix = prefix if any(name.startswith(prefix) for name in weights) else ""
        self.used = set()

    def has(self, name):
        return self._key(name) in self.weights

    def _key(self, name):
        key = self.prefix + name
        return key if key in self.weights else name

    def get(self, name):
        key = self._key(name)
        if key not in self.weights:
            raise CheckpointError(f"checkpoint has no tensor {self.prefix + name!r} (incomplete checkpoint?)")
        self.used.add(key)
        return self.weights[key]

    def take_tied_copy(self, name, expected):
        """Consume `name` when present, refusing it unless it equals `expected` (a tied tensor)."""
        if not self.has(name):
            return
        if not np.array_equal(self.get(name), expected):
            raise CheckpointError(
                f"{self.prefix + name} differs from the tensor it should be tied to; "
                "keras-bertology ties the MLM decoder to the word embeddings"
            )


def _assign(variable, value, name):
    value = np.asarray(value, dtype="float32")
    if tuple(variable.shape) != value.shape:
        raise CheckpointError(
            f"shape mismatch for {name}: checkpoint {value.shape}, model {tuple(variable.shape)}"
        )
    variable.assign(value)


def _load_dense(dense, source, name):
    _assign(dense.kernel, source.get(f"{name}.weight").T, f"{name}.weight")
    _assign(dense.bias, source.get(f"{name}.bias"), f"{name}.bias")


def _load_layer_norm(norm, source, name):
    _assign(norm.gamma, source.get(f"{name}.weight"), f"{name}.weight")
    _assign(norm.beta, source.get(f"{name}.bias"), f"{name}.bias")


def _load_embeddings(backbone, source, model_type, config):
    embeddings = backbone.get_layer("embeddings")
    _assign(embeddings.token_embedding.embeddings,
            source.get("embeddings.word_embeddings.weight"), "word_embeddings")
    positions = source.get("embeddings.position_embeddings.weight")
    if model_type == "roberta":
        # Drop the offset rows, and fold RoBERTa's constant token-type vector
        # into every position row: (p + t) is added the same way either way.
        positions = positions[_roberta_position_offset(config):]
        if source.has("embeddings.token_type_embeddings.weight"):
            positions = positions + source.get("embeddings.token_type_embeddings.weight")[0]
    _assign(embeddings.position_embedding.embeddings, positions, "position_embeddings")
    if embeddings.segment_embedding is not None:
        _assign(embeddings.segment_embedding.embeddings,
                source.get("embeddings.token_type_embeddings.weight"), "token_type_embeddings")
    _load_layer_norm(embeddings.layer_norm, source, "embeddings.LayerNorm")


def _load_encoder_block(block, source, index):
    prefix = f"encoder.layer.{index}"
    attention = block.attention
    _load_dense(attention.query_dense, source, f"{prefix}.attention.self.query")
    _load_dense(attention.key_dense, source, f"{prefix}.attention.self.key")
    _load_dense(attention.value_dense, source, f"{prefix}.attention.self.value")
    _load_dense(attention.output_dense, source, f"{prefix}.attention.output.dense")
    _load_layer_norm(block.attention_norm, source, f"{prefix}.attention.output.LayerNorm")
    _load_dense(block.intermediate_dense, source, f"{prefix}.intermediate.dense")
    _load_dense(block.output_dense, source, f"{prefix}.output.dense")
    _load_layer_norm(block.output_norm, source, f"{prefix}.output.LayerNorm")


def load_hf_weights_into_backbone(backbone, weights, config):
    """Copy a Hugging Face encoder's tensors into `backbone`; returns the names used."""
    model_type, _ = backbone_kwargs_from_hf(config)
    source = _WeightSource(_rename_legacy_layer_norm(weights), prefix=f"{model_type}.")
    _load_embeddings(backbone, source, model_type, config)
    for index in range(backbone.num_layers):
        _load_encoder_block(backbone.get_layer(f"encoder_block_{index}"), source, index)
    if backbone.use_pooler:
        _load_dense(backbone.get_layer("pooler"), source, "pooler.dense")
    return source.used


def _rename_legacy_layer_norm(weights):
    """Old BERT checkpoints call LayerNorm parameters gamma/beta instead of weight/bias."""
    renamed = {}
    for name, value in weights.items():
        if "LayerNorm" in name:
            name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[name] = value
    return renamed


def has_mlm_head(weights):
    """Whether the checkpoint carries a masked-LM head (BertForPreTraining/MaskedLM, RobertaForMaskedLM)."""
    return "cls.predictions.transform.dense.weight" in weights or "lm_head.dense.weight" in weights


def has_nsp_head(weights):
    """Whether the checkpoint carries BERT's next-sentence head (BertForPreTraining)."""
    return "cls.seq_relationship.weight" in weights


def load_hf_heads_into_pretrainer(pretrainer, weights):
    """Copy the MLM (and, when present, NSP) head of a checkpoint into `pretrainer`; returns names used."""
    source = _WeightSource(_rename_legacy_layer_norm(weights), prefix="")
    head = pretrainer.get_layer("mlm_head")
    word_embeddings = head.token_embedding.embeddings.numpy()
    if source.has("lm_head.dense.weight"):
        name, bias = "lm_head", "lm_head.bias"
        _load_dense(head.transform, source, "lm_head.dense")
        _load_layer_norm(head.layer_norm, source, "lm_head.layer_norm")
    else:
        name, bias = "cls.predictions", "cls.predictions.bias"
        _load_dense(head.transform, source, "cls.predictions.transform.dense")
        _load_layer_norm(head.layer_norm, source, "cls.predictions.transform.LayerNorm")
    _assign(head.output_bias, source.get(bias), bias)
    source.take_tied_copy(f"{name}.decoder.weight", word_embeddings)
    source.take_tied_copy(f"{name}.decoder.bias", source.get(bias))
    if pretrainer.next_sentence_prediction:
        _load_dense(pretrainer.get_layer("nsp_head").classifier, source, "cls.seq_relationship")
    return source.used


def convert_hf_checkpoint(hf_dir, seq_len=None):
    """`(runs.RunModel, ConversionReport)` from a Hugging Face folder.

    The encoder always; the pooler, MLM and NSP heads when the checkpoint has
    them; the tokenizer when the folder ships one that runs in-graph. The
    sequence length defaults to the smaller of 128 and the model's positions.
    """
    from keras_bertology.convert.hf_tokenizer import load_hf_tokenizer
    from keras_bertology.models import get_family
    from keras_bertology.runs import RunModel

    config, weights = read_hf_checkpoint(hf_dir)
    model_type, kwargs = backbone_kwargs_from_hf(config, weights)
    positions = kwargs["max_positions"]
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, positions)
    elif seq_len > positions:
        raise CheckpointError(f"--seq-len {seq_len} is above the checkpoint's {positions} positions")
    family = get_family(model_type)
    backbone = family.backbone_cls(**kwargs)
    used = set(load_hf_weights_into_backbone(backbone, weights, config))
    report = ConversionReport(architecture=(config.get("architectures") or ["unknown"])[0])
    if backbone.use_pooler:
        report.heads.append("pooler")
    pretrainer = None
    if has_mlm_head(weights):
        nsp = has_nsp_head(weights) and backbone.use_pooler
        pretrainer = family.pretrainer_cls(backbone, next_sentence_prediction=nsp)
        used |= load_hf_heads_into_pretrainer(pretrainer, weights)
        report.heads += ["mlm", "nsp"] if nsp else ["mlm"]
    renamed = _rename_legacy_layer_norm(weights)
    report.skipped = sorted(name for name in renamed if name not in used and not name.endswith(_BUFFERS))
    tokenizer = load_hf_tokenizer(hf_dir, backbone.vocab_size)
    return RunModel(model_type, backbone, tokenizer, seq_len, pretrainer=pretrainer), report
