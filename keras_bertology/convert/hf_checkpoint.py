"""Import Hugging Face BERT / RoBERTa checkpoints (config.json + model.safetensors).

Weights are read with safetensors' NumPy loader: no torch, no pickle. Names
follow the Hugging Face layout (with or without the `bert.` / `roberta.`
prefix); PyTorch Linear weights are stored [out, in] and are transposed into
Keras' [in, out] kernels. Every tensor's shape is checked before assignment.
"""

import json
from pathlib import Path

import numpy as np

from keras_bertology.errors import CheckpointError

SUPPORTED_MODEL_TYPES = ("bert", "roberta")


def read_hf_checkpoint(hf_dir):
    """Return `(config, weights)` from a Hugging Face model folder."""
    hf_dir = Path(hf_dir)
    config_path, weights_path = hf_dir / "config.json", hf_dir / "model.safetensors"
    for path in (config_path, weights_path):
        if not path.is_file():
            raise CheckpointError(f"{path} not found: --from-hf needs a folder with config.json and model.safetensors")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{config_path} is not valid JSON: {error}") from None
    from safetensors.numpy import load_file

    try:
        weights = load_file(str(weights_path))
    except Exception as error:  # safetensors raises its own error types for bad files
        raise CheckpointError(f"cannot read {weights_path}: {error}") from None
    return config, weights


def backbone_kwargs_from_hf(config):
    """Map a Hugging Face config dict to `(family name, BertBackbone kwargs)`."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if config.get("hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"hidden_act {config['hidden_act']!r} is not supported (only 'gelu')")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError("only absolute position embeddings are supported")
    kwargs = dict(
        vocab_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        max_positions=config["max_position_embeddings"],
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        initializer_range=config.get("initializer_range", 0.02),
    )
    if model_type == "roberta":
        kwargs.update(
            max_positions=config["max_position_embeddings"] - _roberta_position_offset(config),
            num_segments=0,
            use_pooler=False,
        )
    else:
        kwargs.update(num_segments=config.get("type_vocab_size", 2), use_pooler=True)
    return model_type, kwargs


def _roberta_position_offset(config):
    """RoBERTa numbers positions from padding_idx + 1; those first rows are never used."""
    return config.get("pad_token_id", 1) + 1


class _WeightSource:
    """Hands out checkpoint tensors by name, remembering which were used."""

    def __init__(self, weights, prefix):
        self.weights = weights
        self.prefix = prefix
        self.used = set()

    def has(self, name):
        return self._key(name) in self.weights

    def _key(self, name):
        key = self.prefix + name
        return key if key in self.weights else name

    def get(self, name):
        key = self._key(name)
        if key not in self.weights:
            raise CheckpointError(f"checkpoint has no tensor {self.prefix + name!r}")
        self.used.add(key)
        return self.weights[key]


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
    weights = _rename_legacy_layer_norm(weights)
    source = _WeightSource(weights, prefix=f"{model_type}.")
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


def load_hf_heads_into_pretrainer(pretrainer, weights):
    """Copy the MLM (and, when present, NSP) head of a checkpoint into `pretrainer`."""
    source = _WeightSource(weights, prefix="")
    head = pretrainer.get_layer("mlm_head")
    if source.has("lm_head.dense.weight"):
        _load_dense(head.transform, source, "lm_head.dense")
        _load_layer_norm(head.layer_norm, source, "lm_head.layer_norm")
        _assign(head.output_bias, source.get("lm_head.bias"), "lm_head.bias")
    else:
        _load_dense(head.transform, source, "cls.predictions.transform.dense")
        _load_layer_norm(head.layer_norm, source, "cls.predictions.transform.LayerNorm")
        _assign(head.output_bias, source.get("cls.predictions.bias"), "cls.predictions.bias")
    if pretrainer.next_sentence_prediction and source.has("cls.seq_relationship.weight"):
        _load_dense(pretrainer.get_layer("nsp_head").classifier, source, "cls.seq_relationship")
    return source.used


def convert_hf_checkpoint(hf_dir, seq_len=128):
    """A `runs.RunModel` from a Hugging Face folder: encoder, heads if present, WordPiece vocab if present."""
    from keras_bertology.data.tokenizers import WordPieceTokenizer
    from keras_bertology.models import get_family
    from keras_bertology.runs import RunModel

    config, weights = read_hf_checkpoint(hf_dir)
    model_type, kwargs = backbone_kwargs_from_hf(config)
    if seq_len > kwargs["max_positions"]:
        raise CheckpointError(f"--seq-len {seq_len} is above the checkpoint's {kwargs['max_positions']} positions")
    family = get_family(model_type)
    backbone = family.backbone_cls(**kwargs)
    load_hf_weights_into_backbone(backbone, weights, config)
    pretrainer = None
    if has_mlm_head(weights):
        pretrainer = family.pretrainer_cls(backbone)
        load_hf_heads_into_pretrainer(pretrainer, weights)
    tokenizer = None
    vocab_path = Path(hf_dir) / "vocab.txt"
    if vocab_path.is_file():
        tokenizer = WordPieceTokenizer(vocab_path, lower_case=_lower_case(Path(hf_dir)))
        if tokenizer.vocab_size != backbone.vocab_size:
            raise CheckpointError(
                f"{vocab_path} has {tokenizer.vocab_size} tokens but the model expects {backbone.vocab_size}"
            )
    return RunModel(model_type, backbone, tokenizer, seq_len, pretrainer=pretrainer)


def _lower_case(hf_dir):
    """`do_lower_case` from tokenizer_config.json; uncased (True) when absent, as HF defaults."""
    path = hf_dir / "tokenizer_config.json"
    if not path.is_file():
        return True
    try:
        return bool(json.loads(path.read_text(encoding="utf-8")).get("do_lower_case", True))
    except ValueError:
        raise CheckpointError(f"{path} is not valid JSON") from None
