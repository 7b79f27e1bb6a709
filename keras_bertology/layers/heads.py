"""Pretraining output heads: masked-LM and pooled sequence(-pair) classification."""

import keras
from keras import ops

from keras_bertology.layers.activations import get_activation
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.layers.vocabulary_scores import scores_in_chunks


def gather_positions(sequence, positions):
    """Pick rows `positions` [B, P] out of `sequence` [B, L, H] -> [B, P, H]."""
    index = ops.expand_dims(ops.cast(positions, "int32"), axis=-1)
    return ops.take_along_axis(sequence, index, axis=1)


def decode_tokens(x, token_embedding, decoder_kernel, output_bias, targets=None, loss_chunk_size=0):
    """A token head's last step on its states `x` [B, P, E]: float32 logits over the vocabulary, from the
    tied `token_embedding` (when `decoder_kernel` is None) or `decoder_kernel`, plus `output_bias`; or, given
    `targets` [B, P], each target's (cross-entropy, 1.0 where it is the arg-max) [B, P, 2], computed
    `loss_chunk_size` positions at a time (`layers.vocabulary_scores`)."""
    if targets is not None:
        if not loss_chunk_size:
            raise ValueError("the head scores targets only with a loss_chunk_size")
        kernel = ops.transpose(token_embedding.embeddings) if decoder_kernel is None else decoder_kernel
        bias = ops.cast(output_bias, "float32")  # a tensor: the recomputed function takes no variable
        return scores_in_chunks(x, targets, ops.cast(kernel, x.dtype), loss_chunk_size, bias)
    if decoder_kernel is None:
        logits = token_embedding(x, reverse=True)
    else:
        logits = ops.matmul(x, ops.cast(decoder_kernel, x.dtype))
    return ops.cast(logits, "float32") + ops.cast(output_bias, "float32")


@keras.saving.register_keras_serializable(package="keras_bertology")
class MaskedLMHead(keras.layers.Layer):
    """BERT's MLM head: dense + activation + LayerNorm, tied (or own) decoder, output bias.

    Given `mask_positions` the head gathers those rows first and computes
    logits only there ([B, P, V] instead of [B, L, V]): with P = 20 of L = 128
    this saves most of the vocabulary matmul, the single biggest cost of MLM
    pretraining on small models. Logits are returned in float32 so the loss is
    stable under mixed precision.

    Args:
        vocab_size: int, output vocabulary.
        token_embedding: optional `keras.layers.ReversibleEmbedding` to tie
            the decoder to; it is not serialized, the owning model passes it
            again on reload. Without it the head has its own decoder kernel.
        tie_decoder: bool; False gives the head its own decoder kernel while
            `token_embedding` still sets its width (a checkpoint whose decoder
            differs from its word embeddings, which transformers computes with).
        activation: str, transform activation (a name from `layers.activations`).
        layer_norm_epsilon: float.
        initializer_range: float.
        transform_bias: bool, a bias on the transform (ModernBERT's head has none).
        layer_norm_bias: bool; False leaves the LayerNorm a scale and no bias.
        loss_chunk_size: int; given `targets` [B, P], the head returns each target's (cross-entropy,
            1.0 where it is the arg-max) [B, P, 2] instead of logits, that many positions' logits at a
            time, each chunk computed again for the gradient (`layers.vocabulary_scores`).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import MaskedLMHead
        >>> head = MaskedLMHead(vocab_size=50)
        >>> hidden = ops.ones((2, 8, 16))
        >>> tuple(head(hidden, ops.zeros((2, 3), "int32")).shape)
        (2, 3, 50)
    """

    def __init__(
        self,
        vocab_size,
        token_embedding=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        tie_decoder=True,
        transform_bias=True,
        layer_norm_bias=True,
        loss_chunk_size=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.loss_chunk_size = loss_chunk_size
        self.transform_bias = transform_bias
        self.layer_norm_bias = layer_norm_bias
        self.vocab_size = vocab_size
        self.token_embedding = token_embedding
        self.tie_decoder = tie_decoder
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        if token_embedding is not None and token_embedding.input_dim != vocab_size:
            raise ValueError(
                f"tied embedding has {token_embedding.input_dim} rows, head expects {vocab_size}"
            )

    def build(self, hidden_shape, mask_positions_shape=None, targets_shape=None):
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        width = self.token_embedding.output_dim if self.token_embedding else hidden_shape[-1]
        self.transform = keras.layers.Dense(
            width, activation=get_activation(self.activation), use_bias=self.transform_bias,
            kernel_initializer=init, dtype=self.dtype_policy, name="transform",
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, center=self.layer_norm_bias, dtype=self.dtype_policy, name="layer_norm"
        )
        self.transform.build(hidden_shape)
        self.layer_norm.build(tuple(hidden_shape[:-1]) + (width,))
        if not self._tied:
            self.decoder_kernel = self.add_weight(
                name="decoder_kernel", shape=(width, self.vocab_size), initializer=init
            )
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.vocab_size,), initializer="zeros"
        )
        self.built = True

    def call(self, hidden, mask_positions=None, targets=None):
        if mask_positions is not None:
            hidden = gather_positions(hidden, mask_positions)
        x = self.layer_norm(self.transform(hidden))
        return decode_tokens(x, self.token_embedding, None if self._tied else self.decoder_kernel, self.output_bias,
                             targets, self.loss_chunk_size)

    @property
    def _tied(self):
        return self.token_embedding is not None and self.tie_decoder

    def compute_output_shape(self, hidden_shape, mask_positions_shape=None, targets_shape=None):
        rows = mask_positions_shape[1] if mask_positions_shape is not None else hidden_shape[1]
        return (hidden_shape[0], rows, self.vocab_size if targets_shape is None else 2)

    def compute_output_spec(self, hidden, mask_positions=None, targets=None):
        shape = self.compute_output_shape(
            hidden.shape, None if mask_positions is None else mask_positions.shape,
            None if targets is None else targets.shape,
        )
        return keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            activation=self.activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
            tie_decoder=self.tie_decoder,
        )
        if not (self.transform_bias and self.layer_norm_bias):
            config.update(transform_bias=self.transform_bias, layer_norm_bias=self.layer_norm_bias)
        if self.loss_chunk_size:
            config.update(loss_chunk_size=self.loss_chunk_size)
        return config


@keras.saving.register_keras_serializable(package="keras_bertology")
class PooledClassificationHead(keras.layers.Layer):
    """Linear classifier on a pooled [B, H] vector: NSP, SOP or any sentence-pair label.

    Args:
        num_classes: int, 2 for next-sentence / sentence-order prediction.
        dropout: float, dropout on the pooled input (0 in BERT pretraining).
        initializer_range: float.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import PooledClassificationHead
        >>> tuple(PooledClassificationHead(2)(ops.ones((4, 16))).shape)
        (4, 2)
    """

    def __init__(self, num_classes=2, dropout=0.0, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.dropout = dropout
        self.initializer_range = initializer_range
        self.dropout_layer = HashedDropout(dropout, dtype=self.dtype_policy)
        self.classifier = keras.layers.Dense(
            num_classes,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy,
            name="classifier",
        )

    def build(self, pooled_shape):
        self.classifier.build(pooled_shape)
        self.built = True

    def call(self, pooled, training=None):
        return ops.cast(self.classifier(self.dropout_layer(pooled, training=training)), "float32")

    def compute_output_shape(self, pooled_shape):
        return (pooled_shape[0], self.num_classes)

    def compute_output_spec(self, pooled, training=None):
        return keras.KerasTensor(self.compute_output_shape(pooled.shape), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            dropout=self.dropout,
            initializer_range=self.initializer_range,
        )
        return config
