"""Multi-head scaled dot-product self-attention with padding and arbitrary masks."""

import math
import warnings

import keras
from keras import ops

from keras_bertology.layers import rotary
from keras_bertology.layers.dot_product import as_score_mask, attend
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.layers.sliding_window import windowed_attention

# A decoder's first position attends to one key: a softmax over one score, which Keras warns of.
warnings.filterwarnings("ignore", message=r"You are using a softmax over axis -1 of a tensor of shape .*This axis "
                        r"has size 1", category=UserWarning)


def merge_attention_masks(padding_mask, attention_mask=None):
    """Combine a [B, L] padding mask and an optional [B, Lq, Lk] (or [Lq, Lk]) mask into [B, Lq, Lk].

    Both use 1/True for "may attend". Keys that are padding are hidden from
    every query; the extra mask restricts further (causal, two-stream, ...).
    """
    mask = None
    if padding_mask is not None:
        mask = ops.expand_dims(ops.cast(padding_mask, "bool"), axis=1)
    if attention_mask is not None:
        extra = ops.cast(attention_mask, "bool")
        mask = extra if mask is None else ops.logical_and(mask, extra)
    return mask


def causal_mask(query_length, key_length=None):
    """[Lq, Lk] bool: query i may attend to key j iff j <= i + (Lk - Lq).

    The last Lq keys are the queries' own positions and any keys before them
    (a Transformer-XL memory of Lk - Lq states) are visible to every query.
    Merge it with a padding mask through `merge_attention_masks`.
    """
    key_length = query_length if key_length is None else key_length
    queries = ops.expand_dims(ops.arange(query_length, dtype="int32"), 1)
    keys = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    return ops.less_equal(keys, queries + (key_length - query_length))


def band_mask(length, window):
    """[L, L] bool: query i may attend to key j iff |i - j| <= window // 2 (a symmetric sliding window of
    `window` tokens besides the query's own, `window` / 2 on each side)."""
    index = ops.arange(length, dtype="int32")
    return ops.less_equal(ops.abs(ops.expand_dims(index, 1) - ops.expand_dims(index, 0)), window // 2)




@keras.saving.register_keras_serializable(package="keras_bertology")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention: separate query/key/value projections, softmax in float32.

    Scores are computed in the compute dtype (bf16 under mixed precision) but
    the masked softmax runs in float32, which keeps masked keys at exactly zero
    weight and matches the float32 reference to rounding.

    Four optional call arguments let other families reuse this layer, and the
    block around it, without forking them:
    - `memory`: states prepended to the keys and values only (Transformer-XL's
      and XLNet's cached segment);
    - `queries`: a second stream that asks while `x` answers (XLNet's query
      stream: queries from g, keys and values from [memory; h]);
    - `key_value`: the (key, value) heads of `key_value(x, memory)`, computed
      once for two streams that attend to the same states;
    - `score_terms`: terms added to the content scores q.k before scaling
      and masking (relative positions, relative segments, content biases):
      callables that get the query heads [B, Lq, N, D] and the key heads
      [B, Lk, N, D], unscaled, and return [B, N, Lq, Lk], or tensors that
      broadcast to it (T5's position bias, [1, N, Lq, Lk], computed once for
      the layers that share it).

    Args:
        num_heads: int, number of attention heads.
        head_dim: int, width of each head; defaults to hidden / num_heads.
        dropout: float, dropout on the attention probabilities.
        initializer_range: float, stddev of the truncated-normal initializer.
        use_bias: bool, biases on the four projections (XLNet has none).
        causal: bool, each query also hides the keys after its own position
            (`causal_mask`; memory keys stay visible): autoregressive models.
        score_scale: float, the factor of the scores q.k (with their terms)
            before the softmax; default 1 / sqrt(head width). T5's is 1: its
            initialisation folds the scale into the query projection.
        rotary_base: float, turn queries and keys by their positions with this
            rotary base (`layers.rotary`) before the scores; None for none.
        window: int, a sliding window: each query sees the keys at most
            `window` // 2 tokens away on either side (`band_mask`); None for all.
        global_every, global_options: a pattern over an encoder's layers: every
            `global_every`-th layer from the first takes `global_options` (e.g.
            `{"window": None, "rotary_base": 160000}`) over these options
            (`options_for_layer`); the stack, not the layer, reads them.

    Call args:
        x: [B, L, H] inputs.
        attention_mask: optional [B, Lq, Lk] 0/1 mask (see `merge_attention_masks`),
            Lk = M + L with memory of length M.
        memory: optional [B, M, H].
        queries: optional [B, Lq, H]; the output then has Lq rows.
        key_value: optional precomputed (key, value) heads, see above.
        score_terms: sequence of callables, see above.
        positions: optional [B, L] int32 positions of the rotary embedding
            (default 0 .. L-1; packed documents restart theirs).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import MultiHeadSelfAttention
        >>> mha = MultiHeadSelfAttention(num_heads=2)
        >>> tuple(mha(ops.ones((1, 4, 8))).shape)
        (1, 4, 8)
    """

    def __init__(self, num_heads, head_dim=None, dropout=0.0, initializer_range=0.02, use_bias=True, causal=False,
                 score_scale=None, rotary_base=None, window=None, **kwargs):
        super().__init__(**kwargs)
        if window is not None and window < 0:
            raise ValueError(f"window must be at least 0 tokens; got {window}")
        self.rotary_base = rotary_base
        self.window = window
        self.use_bias = use_bias
        self.causal = causal
        self.score_scale = score_scale
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout = dropout
        self.initializer_range = initializer_range
        self.dropout_layer = HashedDropout(dropout, dtype=self.dtype_policy)

    @staticmethod
    def options_for_layer(options, index):
        """The attention options of an encoder's layer `index`: `options`, with `global_options` over them
        on every `global_every`-th layer from the first when a pattern is given."""
        options = dict(options)
        every, overrides = options.pop("global_every", None), options.pop("global_options", {})
        if every and index % every == 0:
            options.update(overrides)
        return options

    @classmethod
    def shared_score_terms(cls, options, states):
        """`score_terms` an encoder builds once from its embedded `states` and hands every layer (none
        here; Linformer's layerwise projection)."""
        return ()

    def _one_sequence(self, x, attention_mask, streams):
        """For attentions over one sequence and its key padding only (block-sparse, low-rank): ValueError
        for any of `streams` given, and the [B, L] float32 key mask of `attention_mask` ([B, 1, L] or
        [B, L]; all ones without one; a mask that differs per query is refused)."""
        unsupported = sorted(name for name, value in streams.items() if value not in (None, ()))
        if unsupported:
            raise ValueError(f"{type(self).__name__} takes no {', '.join(unsupported)}: it is self-attention over "
                             "one sequence")
        if attention_mask is None:
            return ops.ones(ops.shape(x)[:2], "float32")
        if len(attention_mask.shape) == 3:
            if attention_mask.shape[1] != 1:
                raise ValueError(f"{type(self).__name__} takes a key padding mask [B, 1, L]; got a mask of shape "
                                 f"{tuple(attention_mask.shape)} that differs per query")
            attention_mask = attention_mask[:, 0]
        return ops.cast(attention_mask, "float32")

    def _dense(self, units, name):
        return keras.layers.Dense(
            units,
            use_bias=self._has_bias(name),
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
            dtype=self.dtype_policy,
            name=name,
        )

    def _has_bias(self, projection):
        """Whether the `projection` ("query", "key", "value", "output") has a bias: `use_bias`."""
        return self.use_bias

    def build(self, input_shape):
        hidden = input_shape[-1]
        if self.head_dim is None and hidden % self.num_heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {self.num_heads} heads")
        self._head_dim = self.head_dim or hidden // self.num_heads
        self._scale = 1.0 / math.sqrt(self._head_dim) if self.score_scale is None else self.score_scale
        inner = self.num_heads * self._head_dim
        self.query_dense = self._dense(inner, "query")
        self.key_dense = self._dense(inner, "key")
        self.value_dense = self._dense(inner, "value")
        self.output_dense = self._dense(hidden, "output")
        for layer in (self.query_dense, self.key_dense, self.value_dense):
            layer.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (inner,))
        self.built = True

    def _split_heads(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads, self._head_dim))

    def key_value(self, x, memory=None):
        """(key, value) heads [B, M + L, N, D] of [memory; x]."""
        answers = x if memory is None else ops.concatenate([ops.cast(memory, x.dtype), x], axis=1)
        return self._split_heads(self.key_dense(answers)), self._split_heads(self.value_dense(answers))

    def call(self, x, attention_mask=None, training=None, memory=None, queries=None, score_terms=(),
             key_value=None, positions=None):
        query = self._split_heads(self.query_dense(x if queries is None else queries))
        key, value = key_value if key_value is not None else self.key_value(x, memory)
        if self.rotary_base is not None:
            if queries is not None or memory is not None or key_value is not None:
                raise ValueError("rotary embeddings turn one sequence's own queries and keys: no memory, queries "
                                 "or key_value")
            if positions is None:
                positions = rotary.sequence_positions(ops.shape(x)[1])
            query = rotary.rotate(query, positions, self.rotary_base)
            key = rotary.rotate(key, positions, self.rotary_base)
        dropout = self._probability_dropout(training)
        if self.window is not None and self._in_blocks(query, score_terms):
            if self._scale != 1.0:
                query = query * ops.cast(self._scale, query.dtype)
            context = windowed_attention(query, key, value, attention_mask, self.window // 2, dropout=dropout)
            return self.output_dense(ops.reshape(context, (-1, ops.shape(query)[1], self.num_heads * self._head_dim)))
        if self.window is not None:
            band = band_mask(ops.shape(query)[1], self.window)
            attention_mask = band if attention_mask is None else ops.logical_and(
                ops.cast(attention_mask, "bool"), band)
        bias = None
        for term in score_terms:  # on the unscaled heads; the scale then multiplies their sum
            term = ops.cast(term(query, key) if callable(term) else term, "float32")
            bias = term if bias is None else bias + term
        if self._scale != 1.0:  # scaling the queries first is cheaper and BERT's order
            query = query * ops.cast(self._scale, query.dtype)
            bias = None if bias is None else bias * self._scale
        # The causal order as the kernel's own (top-left) when the queries are the keys' own positions.
        aligned = self.causal and memory is None and queries is None and key_value is None
        if self.causal and not aligned:
            order = causal_mask(ops.shape(query)[1], ops.shape(key)[1])
            attention_mask = order if attention_mask is None else ops.logical_and(
                ops.cast(attention_mask, "bool"), order)
        mask = None if attention_mask is None else as_score_mask(attention_mask)
        context = attend(query, key, value, bias, mask, is_causal=aligned, dropout=dropout)
        batch, length = ops.shape(context)[0], ops.shape(context)[1]
        context = ops.reshape(context, (batch, length, self.num_heads * self._head_dim))
        return self.output_dense(context)

    def _probability_dropout(self, training):
        """Dropout on the attention probabilities while it is active (training, a rate above 0), else None:
        `dot_product.attend` then uses the backend's fused kernel."""
        if not training or not self.dropout:
            return None
        return lambda probs: self.dropout_layer(probs, training=training)

    def _in_blocks(self, query, score_terms):
        """Whether a windowed layer computes in blocks (`sliding_window`): over a length longer than twice
        its window, or known only at run time (a served text of any length), without score terms or a
        causal order; else densely, banded."""
        length = query.shape[1]
        return (length is None or length > 2 * self.window) and not score_terms and not self.causal

    def compute_output_shape(self, x_shape, attention_mask_shape=None, memory_shape=None, queries_shape=None):
        return x_shape if queries_shape is None else queries_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            dropout=self.dropout,
            initializer_range=self.initializer_range,
            use_bias=self.use_bias,
            causal=self.causal,
            score_scale=self.score_scale,
        )
        if self.rotary_base is not None or self.window is not None:
            config.update(rotary_base=self.rotary_base, window=self.window)
        return config
