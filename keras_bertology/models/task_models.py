"""Fine-tuning models: one task head on any backbone of the library.

Each takes the backbone's inputs (`token_ids`, `padding_mask`, and
`segment_ids` where the backbone has them), trains with `compile()`/`fit()`
and saves to `.keras` with its backbone inside. They see only the backbone's
`sequence_output` (and `pooled_output` when it has one), so they work for
every family; where the family sums up a sequence (its first token, [CLS],
or its last, XLNet's <cls>) is the `summary` argument.
"""

import keras

from keras_bertology.errors import ConfigError
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.models.backbone import keep_policy

SUMMARY_POSITIONS = ("first", "last", "last_text", "mean")  # finetune.options keeps a copy free of Keras


def _dense(units, initializer_range, name, activation=None, dtype=None):
    return keras.layers.Dense(units, activation=activation, name=name, dtype=dtype,
                              kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))


class TaskModel(keras.Model):
    """A functional model over `backbone`; its config is the backbone plus the head's arguments."""

    def __init__(self, backbone, inputs, outputs, head_config, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        keep_policy(self, kwargs.get("dtype") or backbone.dtype_policy)  # its head's policy
        self.backbone = backbone
        self._head_config = dict(head_config)

    @classmethod
    def from_preset(cls, name_or_path, weights=None, **head_kwargs):
        """This task head on the backbone of a preset name (new weights; `weights="pretrained"`: its
        published ones), a run folder, a Hugging Face folder or `hf://ORG/NAME[@REVISION]` repository
        (their weights), with the head's arguments (`num_classes`, `num_tags`, ...); where the
        family sums up a sequence follows the family unless given.

        Example:
            >>> from keras_bertology.models.task_models import SequenceClassifier
            >>> model = SequenceClassifier.from_preset("xlnet-tiny", num_classes=3)
            >>> model.get_config()["summary"], tuple(model.output.shape)
            ('last', (None, 3))
        """
        from keras_bertology import preset_loading
        from keras_bertology.models.backbone import Backbone

        return preset_loading.task_model(cls, Backbone, name_or_path, weights=weights, **head_kwargs)

    @classmethod
    def family_defaults(cls, family):
        """Head arguments that follow the backbone's family (none here)."""
        return {}

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.saving.serialize_keras_object(self.backbone), **self._head_config}

    @classmethod
    def from_config(cls, config):
        return cls(**dict(config, backbone=keras.saving.deserialize_keras_object(config["backbone"])))


def _encode(backbone):
    if backbone.text_encoder() is not backbone:  # an encoder-decoder: its decoder would want inputs of its own
        raise ConfigError(f"a task head reads an encoder: this {type(backbone).__name__} also has a decoder; build "
                          "the task model on its encoder, e.g. SequenceClassifier(backbone.encoder_backbone(), "
                          "num_classes=2), as from_preset does")
    inputs = dict(backbone.input)
    return inputs, backbone(inputs)


def _initializer_range(backbone):
    return getattr(backbone, "initializer_range", 0.02)


def mean_real_state(sequence, padding_mask):
    """[B, H] mean of each row's real tokens' states (padding left out)."""
    weights = keras.ops.expand_dims(keras.ops.cast(padding_mask, sequence.dtype), -1)
    return keras.ops.sum(sequence * weights, axis=1) / keras.ops.maximum(keras.ops.sum(weights, axis=1), 1.0)


def last_real_state(sequence, padding_mask, back=0):
    """[B, H] state of each row's last real token (or the one `back` tokens before it), whichever side its
    padding is on (XLNet pads on the left, a causal LM's text on the right)."""
    positions = keras.ops.cumsum(keras.ops.ones_like(padding_mask), axis=1)
    last = keras.ops.max(positions * padding_mask, axis=1, keepdims=True)
    selector = keras.ops.cast(keras.ops.equal(positions, last - back), sequence.dtype)
    return keras.ops.sum(sequence * keras.ops.expand_dims(selector, -1), axis=1)


@keras.saving.register_keras_serializable(package="keras_bertology")
class SequenceClassifier(TaskModel):
    """Backbone inputs -> class logits [B, num_classes], for single texts and pairs.

    The summary is the backbone's `pooled_output` when it has one and
    `summary` is "first" (BERT's pretrained pooler); otherwise the state at
    the summary token (the first; the last real one; or, "last_text", the
    one before it: a causal LM's last text token, not the end token packing
    closes it with), or with "mean" the mean of the real tokens' states (what
    a small encoder's MLM trains, where its [CLS] learns little), through a
    new dense + tanh (XLNet's sequence summary).
    Then dropout and a linear layer.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.bert.backbone import BertBackbone
        >>> from keras_bertology.models.task_models import SequenceClassifier
        >>> backbone = BertBackbone(vocab_size=50, num_layers=1, num_heads=2, hidden_size=8, intermediate_size=16)
        >>> model = SequenceClassifier(backbone, num_classes=3)
        >>> inputs = {name: ops.ones((2, 6), "int32") for name in backbone.input}
        >>> tuple(model(inputs).shape)
        (2, 3)
    """

    @classmethod
    def family_defaults(cls, family):
        return {"summary": family.inputs.summary_position}

    def __init__(self, backbone, num_classes, summary="first", dropout=0.1, **kwargs):
        if summary not in SUMMARY_POSITIONS:
            raise ConfigError(f"summary must be one of {SUMMARY_POSITIONS} (got {summary!r})")
        inputs, encoded = _encode(backbone)
        dtype = backbone.dtype_policy
        if summary == "first" and "pooled_output" in encoded:
            pooled = encoded["pooled_output"]
        else:
            sequence = encoded["sequence_output"]
            if summary == "mean":
                state = mean_real_state(sequence, inputs["padding_mask"])
            else:
                state = sequence[:, 0, :] if summary == "first" else last_real_state(
                    sequence, inputs["padding_mask"], back=int(summary == "last_text"))
            pooled = _dense(sequence.shape[-1], _initializer_range(backbone), "summary", "tanh", dtype)(state)
        pooled = HashedDropout(dropout, name="summary_dropout")(pooled)
        logits = _dense(num_classes, _initializer_range(backbone), "logits", dtype="float32")(pooled)
        super().__init__(backbone, inputs, logits, dict(num_classes=num_classes, summary=summary, dropout=dropout),
                         **kwargs)


@keras.saving.register_keras_serializable(package="keras_bertology")
class TokenClassifier(TaskModel):
    """Backbone inputs -> tag logits at every position [B, L, num_tags] (dropout, then linear).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.bert.backbone import BertBackbone
        >>> from keras_bertology.models.task_models import TokenClassifier
        >>> backbone = BertBackbone(vocab_size=50, num_layers=1, num_heads=2, hidden_size=8, intermediate_size=16)
        >>> model = TokenClassifier(backbone, num_tags=5)
        >>> tuple(model({name: ops.ones((2, 6), "int32") for name in backbone.input}).shape)
        (2, 6, 5)
    """

    def __init__(self, backbone, num_tags, dropout=0.1, **kwargs):
        inputs, encoded = _encode(backbone)
        x = HashedDropout(dropout, name="tag_dropout")(encoded["sequence_output"])
        logits = _dense(num_tags, _initializer_range(backbone), "logits", dtype="float32")(x)
        super().__init__(backbone, inputs, logits, dict(num_tags=num_tags, dropout=dropout), **kwargs)


@keras.saving.register_keras_serializable(package="keras_bertology")
class SpanExtractor(TaskModel):
    """Backbone inputs -> {"start", "end"} logits [B, L] of the answer's first and last piece.

    One linear layer gives both (SQuAD-style); padding positions get a large
    negative logit so that neither the loss nor a decoder can pick them.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.bert.backbone import BertBackbone
        >>> from keras_bertology.models.task_models import SpanExtractor
        >>> backbone = BertBackbone(vocab_size=50, num_layers=1, num_heads=2, hidden_size=8, intermediate_size=16)
        >>> out = SpanExtractor(backbone)({name: ops.ones((2, 6), "int32") for name in backbone.input})
        >>> tuple(out["start"].shape), tuple(out["end"].shape)
        ((2, 6), (2, 6))
    """

    def __init__(self, backbone, **kwargs):
        inputs, encoded = _encode(backbone)
        logits = _dense(2, _initializer_range(backbone), "span_logits", dtype="float32")(encoded["sequence_output"])
        padding = keras.ops.cast(keras.ops.equal(inputs["padding_mask"], 0), "float32") * -1e9
        outputs = {
            "start": keras.layers.Identity(name="start")(logits[..., 0] + padding),
            "end": keras.layers.Identity(name="end")(logits[..., 1] + padding),
        }
        super().__init__(backbone, inputs, outputs, {}, **kwargs)
