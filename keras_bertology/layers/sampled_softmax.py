"""A word softmax that scores a sample of the vocabulary while training (Jean et al., 2015), as ELMo's
biLM trained over the One Billion Word Benchmark's 793,471 words with 8,192 samples a batch."""

import math

import keras
from keras import ops

# Added to the score of a sampled word that is the position's own target, so that it does not compete
# with itself (TensorFlow's `remove_accidental_hits`); finite, so that a sum over scores stays finite.
_HIT_PENALTY = -1e9


def log_uniform_log_probabilities(vocab_size):
    """log P(id) [V] of the log-uniform (Zipfian) distribution over ids 0..V-1, P(k) = log((k + 2) / (k + 1))
    / log(V + 1): TensorFlow's `log_uniform_candidate_sampler`, right for a vocabulary sorted by frequency."""
    ids = ops.arange(vocab_size, dtype="float32")
    return ops.log(ops.log((ids + 2.0) / (ids + 1.0)) / math.log(vocab_size + 1.0))


@keras.saving.register_keras_serializable(package="keras_bertology")
class SampledSoftmax(keras.layers.Layer):
    """States [B, L, D] (and target ids [B, L]) -> scores (and targets).

    Without targets: the full softmax's logits [B, L, V]. With them, outside
    training or with `num_samples` 0, the same logits and the ids. While training with
    `num_samples` > 0, `num_samples` ids are drawn for the whole batch from the
    log-uniform distribution (with replacement); the scores are [B, L, 1 +
    num_samples]: the position's own target first, then the drawn words, each
    less the log of its expected count in the draw (the sampled softmax's
    correction, so that its loss estimates the full softmax's), a drawn word
    that is the position's target scored out; and the targets are 0 (the first
    column). A cross-entropy of scores and targets is then the full softmax's
    loss or its sampled estimate. The draw costs D x (1 + num_samples) a
    position in place of D x V.

    Weights: `kernel` [D, V] (normal with a standard deviation of 1/sqrt(D)), `bias` [V].

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import SampledSoftmax
        >>> layer = SampledSoftmax(vocab_size=50, num_samples=8, seed=0)
        >>> states, targets = ops.ones((2, 3, 4)), ops.ones((2, 3), "int32")
        >>> scores, labels = layer(states, targets, training=True)
        >>> tuple(scores.shape), int(ops.convert_to_numpy(labels).max())
        ((2, 3, 9), 0)
        >>> tuple(layer(states, targets)[0].shape)
        (2, 3, 50)
    """

    def __init__(self, vocab_size, num_samples=0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_samples = num_samples
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True  # every position is scored; the loss's weights leave padding out

    def compute_mask(self, states, targets=None, mask=None):
        return None if targets is None else (None, None)

    def build(self, states_shape, targets_shape=None):
        self.kernel = self.add_weight(name="kernel", shape=(states_shape[-1], self.vocab_size),
                                      initializer=keras.initializers.RandomNormal(stddev=states_shape[-1] ** -0.5))
        self.bias = self.add_weight(name="bias", shape=(self.vocab_size,), initializer="zeros")
        self.built = True

    def call(self, states, targets=None, training=None):
        if targets is None:
            return self.logits(states)
        targets = ops.cast(targets, "int32")
        if not (training and self.num_samples):
            return self.logits(states), targets
        log_q = log_uniform_log_probabilities(self.vocab_size)
        drawn = keras.random.categorical(log_q[None], self.num_samples, seed=self.seed_generator)[0]  # [S]
        return self.sampled_scores(states, targets, ops.cast(drawn, "int32")), ops.zeros_like(targets)

    def logits(self, states):
        """The full softmax's logits [B, L, V]."""
        return ops.matmul(states, ops.cast(self.kernel, self.compute_dtype)) + ops.cast(self.bias, self.compute_dtype)

    def sampled_scores(self, states, targets, drawn):
        """Scores [B, L, 1 + S] of each position's target and of the drawn ids [S], corrected by the log of
        their expected counts in a draw of S, a drawn id equal to the target scored out."""
        kernel, bias = ops.cast(self.kernel, self.compute_dtype), ops.cast(self.bias, self.compute_dtype)
        log_count = log_uniform_log_probabilities(self.vocab_size) + math.log(ops.shape(drawn)[0])
        true_weights = ops.take(ops.transpose(kernel), targets, axis=0)  # [B, L, D]
        true_scores = (ops.sum(ops.cast(states * true_weights, "float32"), axis=-1)
                       + ops.cast(ops.take(bias, targets), "float32") - ops.take(log_count, targets))
        drawn_scores = (ops.cast(ops.matmul(states, ops.take(kernel, drawn, axis=1)) + ops.take(bias, drawn),
                                 "float32") - ops.take(log_count, drawn))
        hits = ops.equal(targets[:, :, None], drawn[None, None, :])
        drawn_scores = ops.where(hits, _HIT_PENALTY, drawn_scores)
        scores = ops.concatenate([true_scores[:, :, None], drawn_scores], axis=-1)
        return ops.cast(scores, self.compute_dtype)

    def compute_output_spec(self, states, targets=None, training=None):
        # The width of the sampled scores is the training step's; a functional model's graph is traced
        # outside it, so its scores are declared of unknown width.
        width = self.vocab_size if not self.num_samples else None
        scores = keras.KerasTensor((*states.shape[:-1], width), dtype=self.compute_dtype)
        return scores if targets is None else (scores, keras.KerasTensor(targets.shape, dtype="int32"))

    def get_config(self):
        return dict(super().get_config(), vocab_size=self.vocab_size, num_samples=self.num_samples, seed=self.seed)
