"""Adaptive input embeddings and the adaptive softmax (Baevski & Auli; Grave et al.), with
Transformer-XL's projections.

The vocabulary is split at `cutoffs` into clusters by frequency rank: the
head (the most frequent tokens) is embedded at full width, cluster i at
`embedding_size / div_val**i`, each projected to the model width. The
softmax mirrors it: the head scores its tokens plus one logit per tail
cluster; a tail token's log-probability is its cluster's head
log-probability plus its log-probability inside the cluster. Tails reuse the
embedding tables (tied), and their projections where `tie_projections` says.

Which projections exist follows Transformer-XL: with `div_val` 1 one table
covers the whole vocabulary and one projection exists only when
`embedding_size` differs from the model width; with `div_val` > 1 every
cluster has its own table and projection. Without cutoffs both are a plain
embedding and a full softmax (with bias).
"""

import keras
from keras import ops


def cluster_bounds(vocab_size, cutoffs):
    """[(first id, end id)] of each cluster: the head first, then the tails in order."""
    edges = [0, *cutoffs, vocab_size]
    return list(zip(edges[:-1], edges[1:]))


def check_cutoffs(vocab_size, cutoffs, div_val, embedding_size):
    """Refuse cutoffs that are not increasing inside (0, vocab_size) and widths that reach zero."""
    cutoffs = list(cutoffs)
    if cutoffs != sorted(set(cutoffs)) or (cutoffs and (cutoffs[0] <= 0 or cutoffs[-1] >= vocab_size)):
        raise ValueError(f"cutoffs {cutoffs} must increase strictly inside (0, vocab_size={vocab_size})")
    if div_val < 1 or embedding_size // div_val ** len(cutoffs) < 1:
        raise ValueError(f"div_val={div_val} leaves a cluster of {embedding_size} // {div_val}**{len(cutoffs)} "
                         "= 0 dimensions")


@keras.saving.register_keras_serializable(package="keras_bertology")
class AdaptiveEmbedding(keras.layers.Layer):
    """Token ids [B, L] -> [B, L, hidden_size] embeddings times sqrt(hidden_size) (Transformer-XL's scale).

    Weights: `embeddings_i` [rows of table i, width i] and `projection_i`
    [width i, hidden_size] where a projection exists (see the module).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers.adaptive_softmax import AdaptiveEmbedding
        >>> embedding = AdaptiveEmbedding(100, 16, cutoffs=[20, 60], div_val=2)
        >>> tuple(embedding(ops.convert_to_tensor([[1, 30, 99]])).shape)
        (1, 3, 16)
        >>> [tuple(weight.shape) for weight in embedding.weights]
        [(20, 16), (16, 16), (40, 8), (8, 16), (40, 4), (4, 16)]
    """

    def __init__(self, vocab_size, hidden_size, cutoffs=(), div_val=1, embedding_size=None,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.cutoffs = list(cutoffs)
        self.div_val = div_val
        self.embedding_size = embedding_size or hidden_size
        self.initializer_range = initializer_range
        check_cutoffs(vocab_size, self.cutoffs, div_val, self.embedding_size)

    @property
    def tables(self):
        """[(first id, end id, width)] of each embedding table."""
        if self.div_val == 1:
            return [(0, self.vocab_size, self.embedding_size)]
        return [(first, end, self.embedding_size // self.div_val ** index)
                for index, (first, end) in enumerate(cluster_bounds(self.vocab_size, self.cutoffs))]

    @property
    def projected(self):
        return self.div_val > 1 or self.embedding_size != self.hidden_size

    def build(self, input_shape=None):
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.embeddings, self.projections = [], []
        for index, (first, end, width) in enumerate(self.tables):
            self.embeddings.append(self.add_weight(shape=(end - first, width), initializer=init,
                                                   name=f"embeddings_{index}"))
            if self.projected:
                self.projections.append(self.add_weight(shape=(width, self.hidden_size), initializer=init,
                                                        name=f"projection_{index}"))
        self.built = True

    def call(self, token_ids):
        token_ids = ops.cast(token_ids, "int32")
        dtype = self.compute_dtype
        output = None
        for index, (first, end, width) in enumerate(self.tables):
            inside = ops.logical_and(token_ids >= first, token_ids < end)
            vectors = ops.take(ops.cast(self.embeddings[index], dtype), ops.clip(token_ids - first, 0, end - first - 1),
                               axis=0)
            if self.projected:
                vectors = ops.matmul(vectors, ops.cast(self.projections[index], dtype))
            vectors = ops.where(ops.expand_dims(inside, -1), vectors, ops.zeros_like(vectors))
            output = vectors if output is None else output + vectors
        return output * ops.cast(self.hidden_size ** 0.5, dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        return dict(super().get_config(), vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                    cutoffs=self.cutoffs, div_val=self.div_val, embedding_size=self.embedding_size,
                    initializer_range=self.initializer_range)


@keras.saving.register_keras_serializable(package="keras_bertology")
class AdaptiveSoftmax(keras.layers.Layer):
    """Hidden states [..., hidden_size] -> float32 log-probabilities [..., vocab_size] over the whole
    vocabulary (with no cutoffs: plain logits, which a softmax turns into the same thing).

    The output tables are `embedding`'s (tied). Weights of its own: `bias`
    [vocab_size], and with cutoffs `cluster_kernel` [clusters, width 0] and
    `cluster_bias` [clusters] (the head's logits of the tail clusters; tail i
    reads the i-th from the end, as Transformer-XL lays them out), and
    `projection_i` for the clusters whose projection is not tied.

    Every tail is scored for every position, so the cost is a full softmax's
    (less with `div_val` > 1); what it keeps of the adaptive softmax is its
    parameters and its numbers.

    Args:
        embedding: the `AdaptiveEmbedding` whose tables (and tied projections) it reads.
        tie_projections: per cluster (head first), whether its projection is the
            embedding's (with `div_val` 1 there is one: the embedding's only one).
    """

    def __init__(self, embedding, tie_projections=None, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding
        clusters = len(embedding.cutoffs) + 1
        self.tie_projections = [False] * clusters if tie_projections is None else [bool(t) for t in tie_projections]
        if len(self.tie_projections) != clusters:
            raise ValueError(f"tie_projections needs one entry per cluster ({clusters}), got "
                             f"{len(self.tie_projections)}")

    def build(self, hidden_shape=None):
        embedding = self.embedding
        clusters = len(embedding.cutoffs)
        self.bias = self.add_weight(shape=(embedding.vocab_size,), initializer="zeros", name="bias")
        if clusters:
            init = keras.initializers.TruncatedNormal(stddev=embedding.initializer_range)
            self.cluster_kernel = self.add_weight(shape=(clusters, embedding.embedding_size), initializer=init,
                                                  name="cluster_kernel")
            self.cluster_bias = self.add_weight(shape=(clusters,), initializer="zeros", name="cluster_bias")
        self.projections = []
        for index, tied in enumerate(self.tie_projections):
            if not embedding.projected:
                self.projections.append(None)
            elif tied:
                self.projections.append(embedding.projections[0 if embedding.div_val == 1 else index])
            else:
                width = embedding.tables[0 if embedding.div_val == 1 else index][2]
                self.projections.append(self.add_weight(
                    shape=(width, embedding.hidden_size), initializer=keras.initializers.TruncatedNormal(
                        stddev=embedding.initializer_range), name=f"projection_{index}"))
        self.built = True

    def _cluster_logits(self, hidden, index, first, end):
        """Logits of the tokens [first, end) of cluster `index` (plus the head's cluster logits)."""
        embedding = self.embedding
        table_index = 0 if embedding.div_val == 1 else index
        table_first = embedding.tables[table_index][0]
        dtype = hidden.dtype
        table = ops.cast(embedding.embeddings[table_index], dtype)[first - table_first:end - table_first]
        bias = ops.cast(self.bias, "float32")[first:end]
        if self.projections[index] is not None:
            hidden = ops.matmul(hidden, ops.transpose(ops.cast(self.projections[index], dtype)))
        if index == 0 and embedding.cutoffs:
            table = ops.concatenate([table, ops.cast(self.cluster_kernel, dtype)], axis=0)
            bias = ops.concatenate([bias, ops.cast(self.cluster_bias, "float32")], axis=0)
        return ops.cast(ops.matmul(hidden, ops.transpose(table)), "float32") + bias

    def call(self, hidden):
        hidden = ops.cast(hidden, self.compute_dtype)
        bounds = cluster_bounds(self.embedding.vocab_size, self.embedding.cutoffs)
        head = self._cluster_logits(hidden, 0, *bounds[0])
        if len(bounds) == 1:
            return head
        head = ops.log_softmax(head, axis=-1)
        shortlist = bounds[0][1]
        parts = [head[..., :shortlist]]
        for index, (first, end) in enumerate(bounds[1:], start=1):
            cluster = head[..., shortlist + len(bounds) - 1 - index:][..., :1]
            parts.append(cluster + ops.log_softmax(self._cluster_logits(hidden, index, first, end), axis=-1))
        return ops.concatenate(parts, axis=-1)

    def compute_output_shape(self, hidden_shape):
        return (*hidden_shape[:-1], self.embedding.vocab_size)

    def get_config(self):
        return dict(super().get_config(), tie_projections=self.tie_projections)
