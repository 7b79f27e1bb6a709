"""Cross-entropy over a vocabulary, a chunk of positions at a time (`--loss-chunk-size`).

A language model's loss over a large vocabulary is the one place where a
step holds a [positions, vocabulary] float32 tensor for its backward pass:
GPT-2's head at 2,048 positions is 103 M logits, 412 MB, kept from the
forward pass until the gradient reads their softmax. Here each chunk of
positions computes its logits, their log-sum-exp, the target's logit and
whether the target is the arg-max, keeps only those two numbers per position,
and computes its logits again in the backward pass (`keras.remat`): memory
for one chunk's logits instead of all of them, for one more head matmul.
`TokenScoresInChunks` scores a causal LM's tied table (GPT); `MaskedLMHead`
calls `scores_in_chunks` with its own transform, decoder and bias.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_bertology")
class TokenScoresInChunks(keras.layers.Layer):
    """Per position: the cross-entropy of the target under `states` times the token table, and whether
    the target has the largest logit; `chunk_size` positions at a time.

    The logits are those of `token_embedding(states, reverse=True)` cast to float32, exactly: the table
    in the states' compute dtype, the product cast to float32 before the softmax.

    Args:
        token_embedding: the backbone's tied `keras.layers.ReversibleEmbedding` (not serialized: the
            owning model passes it again on reload).
        chunk_size: positions whose logits exist at once.

    Call: `states` [B, L, H] and `targets` [B, L] int -> [B, L, 2] float32, (cross-entropy, 1.0 where the
    target is the arg-max else 0.0).

    Example:
        >>> import keras
        >>> from keras import ops
        >>> from keras_bertology.layers import TokenScoresInChunks
        >>> table = keras.layers.ReversibleEmbedding(50, 8)
        >>> table.build((None,))
        >>> scores = TokenScoresInChunks(table, chunk_size=4)(ops.ones((2, 3, 8)), ops.zeros((2, 3), "int32"))
        >>> tuple(scores.shape)
        (2, 3, 2)
    """

    def __init__(self, token_embedding, chunk_size, **kwargs):
        super().__init__(**kwargs)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        if getattr(token_embedding, "logit_soft_cap", None) is not None:
            raise ValueError("a token table with a logit soft cap cannot be scored in chunks")
        self.token_embedding = token_embedding
        self.chunk_size = chunk_size

    def build(self, states_shape, targets_shape=None):
        self.built = True

    def call(self, states, targets):
        return scores_in_chunks(states, targets, self._kernel(states.dtype), self.chunk_size)

    def _kernel(self, dtype):
        """The [H, V] table the embedding's reverse call multiplies by, as a tensor in `dtype`: passed
        into the recomputed function rather than read there (TensorFlow's `recompute_grad` inside a loop
        cannot capture a variable)."""
        embedding = self.token_embedding
        table = ops.transpose(embedding.embeddings) if embedding.tie_weights else embedding.reverse_embeddings
        return ops.cast(table, embedding.reverse_dtype or dtype)

    def compute_output_shape(self, states_shape, targets_shape=None):
        return (*states_shape[:-1], 2)

    def compute_output_spec(self, states, targets):
        return keras.KerasTensor(self.compute_output_shape(states.shape), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "chunk_size": self.chunk_size}


def scores_in_chunks(states, targets, kernel, chunk_size, bias=None):
    """[..., H] states and [...] targets -> [..., 2] float32 (cross-entropy, target is the arg-max) of the
    logits `float32(states @ kernel) + bias`, `chunk_size` positions at a time, each chunk's logits computed
    again for the gradient. `kernel` [H, V] and `bias` [V] are tensors (TensorFlow's `recompute_grad`
    inside a loop cannot capture a variable); `bias` None adds nothing."""
    width = ops.shape(states)[-1]
    rows = ops.shape(targets)
    flat_states = ops.reshape(states, (-1, width))
    flat_targets = ops.reshape(ops.cast(targets, "int32"), (-1,))
    count = ops.shape(flat_targets)[0]
    padding = (-count) % chunk_size
    chunked_states = ops.reshape(ops.pad(flat_states, [[0, padding], [0, 0]]), (-1, chunk_size, width))
    chunked_targets = ops.reshape(ops.pad(flat_targets, [[0, padding]]), (-1, chunk_size))
    if bias is None:
        bias = ops.zeros((ops.shape(kernel)[-1],), "float32")
    score = keras.remat(_chunk_scores)
    # A map, not a scan: TensorFlow's map bounds its loop, which XLA needs to differentiate it.
    scores = ops.map(lambda chunk: score(chunk[0], chunk[1], kernel, bias), (chunked_states, chunked_targets))
    return ops.reshape(ops.reshape(scores, (-1, 2))[:count], (*rows, 2))


def _chunk_scores(states, targets, kernel, bias):
    """[C, H] states, [C] targets -> [C, 2] (cross-entropy, target is the arg-max)."""
    logits = ops.cast(ops.matmul(ops.cast(states, kernel.dtype), kernel), "float32") + ops.cast(bias, "float32")
    target_logits = ops.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
    losses = ops.logsumexp(logits, axis=-1) - target_logits
    correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), targets), "float32")
    return ops.stack([losses, ops.stop_gradient(correct)], axis=-1)
