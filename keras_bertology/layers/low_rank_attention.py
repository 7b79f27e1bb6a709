"""Linformer's low-rank self-attention: keys and values projected along the sequence to k rows.

Each head attends to k projected keys instead of L keys (Wang et al. 2020):
head = softmax(Q (E K)^T / sqrt(d)) (F V), E and F [k, n] learned matrices
over positions, sliced to the first L columns for a sequence of L <= n
tokens. Scores are [B, N, L, k]: memory and time grow linearly in L.

Padding: the keys and values of padded positions are zeroed before E and F
mix them, so a batch's padding changes nothing in its real rows' outputs
beyond what a shorter sequence would (the paper's reference code applies no
mask inside linear attention; this is where the layer departs from it).

Sharing (the paper's section 4): "none" gives every head its own E and F,
"headwise" one E and one F for all heads, "key_value" one matrix for both,
"layerwise" one matrix for both in every layer of the encoder (built once by
`shared_score_terms` and handed to each layer as a `SequenceProjection`).
"""

import collections

import keras
from keras import ops

from keras_bertology.errors import ConfigError
from keras_bertology.layers.attention import MultiHeadSelfAttention
from keras_bertology.layers.dot_product import attend

SHARING = ("none", "headwise", "key_value", "layerwise")


class SequenceProjection(collections.namedtuple("SequenceProjection", ["matrix"])):
    """The [k, n] projection every layer of an encoder shares ("layerwise"), passed among `score_terms`."""


def _projection_initializer():
    """Xavier-uniform with gain 1/sqrt(2), as the reference implementation's."""
    return keras.initializers.VarianceScaling(scale=0.5, mode="fan_avg", distribution="uniform")


@keras.saving.register_keras_serializable(package="keras_bertology")
class SharedSequenceProjection(keras.layers.Layer):
    """The encoder-wide [k, n] projection of "layerwise" sharing; called on any tensor (for the graph), it
    returns the matrix in the compute dtype."""

    def __init__(self, projected_length, max_length, **kwargs):
        super().__init__(**kwargs)
        self.projected_length = projected_length
        self.max_length = max_length

    def build(self, input_shape):
        self.matrix = self.add_weight(name="matrix", shape=(self.projected_length, self.max_length),
                                      initializer=_projection_initializer())
        self.built = True

    def call(self, anchor):
        return ops.cast(self.matrix, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (self.projected_length, self.max_length)

    def get_config(self):
        return dict(super().get_config(), projected_length=self.projected_length, max_length=self.max_length)


@keras.saving.register_keras_serializable(package="keras_bertology")
class LowRankSelfAttention(MultiHeadSelfAttention):
    """Multi-head self-attention over keys and values projected along the sequence (Linformer).

    The query, key, value and output projections are `MultiHeadSelfAttention`'s. Sequences may be
    shorter than `max_length` (the first L columns of E and F); longer ones are an error.

    Args:
        num_heads, head_dim, dropout, initializer_range, use_bias: as `MultiHeadSelfAttention`.
        projected_length: int, k, the rows keys and values are projected to.
        max_length: int, n, the longest sequence (the columns of E and F).
        sharing: one of "none", "headwise", "key_value", "layerwise" (the module's docstring).

    Call args:
        x: [B, L, H], L <= max_length.
        attention_mask: optional [B, 1, L] (or [B, L]) key padding mask, 1 for real tokens.
        score_terms: with "layerwise" sharing, the encoder's `SequenceProjection`.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import LowRankSelfAttention
        >>> layer = LowRankSelfAttention(num_heads=2, projected_length=4, max_length=16)
        >>> tuple(layer(ops.ones((1, 10, 8))).shape)
        (1, 10, 8)
    """

    def __init__(self, num_heads, projected_length=256, max_length=512, sharing="headwise", **kwargs):
        if kwargs.get("causal"):
            raise ValueError("LowRankSelfAttention is bidirectional: causal=True is not supported")
        super().__init__(num_heads, **kwargs)
        if sharing not in SHARING:
            raise ConfigError(f"sharing must be one of {', '.join(SHARING)}; got {sharing!r}")
        if not 1 <= projected_length <= max_length:
            raise ConfigError(f"projected_length must be from 1 to max_length {max_length}; got {projected_length}")
        self.projected_length = int(projected_length)
        self.max_length = int(max_length)
        self.sharing = sharing

    @classmethod
    def shared_score_terms(cls, options, states):
        """The encoder-wide terms every layer receives: with "layerwise" sharing, the one projection."""
        if options.get("sharing", "headwise") != "layerwise":
            return ()
        projection = SharedSequenceProjection(options.get("projected_length", 256), options.get("max_length", 512),
                                              name="shared_sequence_projection")
        return (SequenceProjection(projection(states)),)

    def build(self, input_shape):
        super().build(input_shape)
        shape = (self.projected_length, self.max_length)
        if self.sharing == "none":
            shape = (self.num_heads,) + shape
        if self.sharing != "layerwise":
            self.key_projection = self.add_weight(name="key_projection", shape=shape,
                                                  initializer=_projection_initializer())
        if self.sharing in ("none", "headwise"):
            self.value_projection = self.add_weight(name="value_projection", shape=shape,
                                                    initializer=_projection_initializer())

    def _projections(self, score_terms):
        """(E, F) in the compute dtype: [k, n], or [N, k, n] without sharing."""
        if self.sharing == "layerwise":
            shared = [term for term in score_terms if isinstance(term, SequenceProjection)]
            if len(shared) != 1:
                raise ValueError("layerwise sharing needs the encoder's SequenceProjection among score_terms")
            return shared[0].matrix, shared[0].matrix
        key = ops.cast(self.key_projection, self.compute_dtype)
        value = key if self.sharing == "key_value" else ops.cast(self.value_projection, self.compute_dtype)
        return key, value

    def call(self, x, attention_mask=None, training=None, score_terms=(), **streams):
        keep = ops.cast(self._one_sequence(x, attention_mask, streams), x.dtype)[:, :, None, None]
        length = x.shape[1]
        if length is not None and length > self.max_length:
            raise ValueError(f"a sequence of {length} tokens is longer than this low-rank attention's max_length "
                             f"{self.max_length}")
        query = self._split_heads(self.query_dense(x)) * ops.cast(self._scale, x.dtype)
        key, value = self.key_value(x)
        key, value = key * keep, value * keep
        key_matrix, value_matrix = self._projections(score_terms)
        length = ops.shape(x)[1]
        key_matrix, value_matrix = key_matrix[..., :length], value_matrix[..., :length]
        pattern = "nkl,blnd->bknd" if self.sharing == "none" else "kl,blnd->bknd"
        key, value = ops.einsum(pattern, key_matrix, key), ops.einsum(pattern, value_matrix, value)
        context = attend(query, key, value, dropout=self._probability_dropout(training))
        context = ops.reshape(context, (ops.shape(x)[0], length, self.num_heads * self._head_dim))
        return self.output_dense(context)

    def get_config(self):
        config = super().get_config()
        config.update(projected_length=self.projected_length, max_length=self.max_length, sharing=self.sharing)
        return config
