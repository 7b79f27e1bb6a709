"""The layers between an ELECTRA-style generator and its discriminator: sample, replace, label."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_bertology")
class GumbelSampler(keras.layers.Layer):
    """One token id per row of logits, drawn from softmax(logits / temperature) by the Gumbel-max trick.

    The logits pass through stop_gradient: nothing downstream of the sample
    (the discriminator's loss) trains the generator.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import GumbelSampler
        >>> logits = ops.convert_to_tensor([[[0.0, 50.0, 0.0]]])
        >>> ops.convert_to_numpy(GumbelSampler()(logits)).tolist()
        [[1]]
    """

    def __init__(self, temperature=1.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, logits):
        logits = ops.stop_gradient(ops.cast(logits, "float32")) / self.temperature
        uniform = keras.random.uniform(ops.shape(logits), minval=1e-9, maxval=1.0, seed=self.seed_generator)
        return ops.cast(ops.argmax(logits - ops.log(-ops.log(uniform)), axis=-1), "int32")

    def compute_output_spec(self, logits):
        return keras.KerasTensor(logits.shape[:-1], dtype="int32")

    def get_config(self):
        return dict(super().get_config(), temperature=self.temperature, seed=self.seed)


@keras.saving.register_keras_serializable(package="keras_bertology")
class ReplaceTokens(keras.layers.Layer):
    """Writes sampled ids into the masked positions; labels each token replaced (1) or original (0).

    Inputs: `token_ids` [B, L] (masked), `mask_positions`, `mask_ids` (the
    originals there) and `mask_weights` [B, P], `samples` [B, P]. Returns
    `(corrupted ids [B, L] int32, labels [B, L, 1] float32)`; a sample equal to
    the original is labelled original, and filler prediction slots change nothing.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import ReplaceTokens
        >>> ids = ops.convert_to_tensor([[5, 3, 3, 8]])        # 3 is [MASK]
        >>> slots = ops.convert_to_tensor([[1, 2]])
        >>> ids_out, labels = ReplaceTokens()(ids, slots, ops.convert_to_tensor([[6, 7]]),
        ...                                   ops.ones((1, 2)), ops.convert_to_tensor([[6, 9]]))
        >>> ops.convert_to_numpy(ids_out).tolist(), ops.convert_to_numpy(labels)[0, :, 0].tolist()
        ([[5, 6, 9, 8]], [0.0, 0.0, 1.0, 0.0])
    """

    def call(self, token_ids, mask_positions, mask_ids, mask_weights, samples):
        token_ids = ops.cast(token_ids, "int32")
        length = ops.shape(token_ids)[1]
        # [B, P, L]: slot p writes position mask_positions[p] when it is a real prediction.
        writes = ops.one_hot(ops.cast(mask_positions, "int32"), length, dtype="int32")
        writes = writes * ops.cast(ops.expand_dims(mask_weights, -1) > 0, "int32")
        written = ops.max(writes, axis=1) > 0

        def scatter(values):
            placed = ops.sum(writes * ops.expand_dims(ops.cast(values, "int32"), -1), axis=1)
            return ops.where(written, placed, token_ids)

        corrupted, original = scatter(samples), scatter(mask_ids)
        labels = ops.cast(ops.not_equal(corrupted, original), "float32")
        return corrupted, ops.expand_dims(labels, -1)

    def compute_output_spec(self, token_ids, mask_positions, mask_ids, mask_weights, samples):
        return (keras.KerasTensor(token_ids.shape, dtype="int32"),
                keras.KerasTensor((*token_ids.shape, 1), dtype="float32"))


@keras.saving.register_keras_serializable(package="keras_bertology")
class ReplacedTokenHead(keras.layers.Layer):
    """ELECTRA's discriminator head: Dense(H) + activation, then one logit per token [B, L, 1] (float32).

    With `context_norm_epsilon` it first takes LayerNorm(each state + the first token's state), as
    DeBERTa-v3's head does, so that each verdict sees the sequence's summary.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import ReplacedTokenHead
        >>> tuple(ReplacedTokenHead()(ops.ones((2, 5, 8))).shape)
        (2, 5, 1)
    """

    def __init__(self, activation="gelu", initializer_range=0.02, context_norm_epsilon=None, **kwargs):
        super().__init__(**kwargs)
        self.activation = activation
        self.initializer_range = initializer_range
        self.context_norm_epsilon = context_norm_epsilon

    def build(self, hidden_shape):
        from keras_bertology.layers.activations import get_activation

        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.dense = keras.layers.Dense(hidden_shape[-1], activation=get_activation(self.activation),
                                        kernel_initializer=init, dtype=self.dtype_policy, name="dense")
        self.prediction = keras.layers.Dense(1, kernel_initializer=init, dtype=self.dtype_policy, name="prediction")
        self.dense.build(hidden_shape)
        self.prediction.build((*hidden_shape[:-1], hidden_shape[-1]))
        self.context_norm = None
        if self.context_norm_epsilon is not None:
            self.context_norm = keras.layers.LayerNormalization(epsilon=self.context_norm_epsilon,
                                                                dtype=self.dtype_policy, name="context_norm")
            self.context_norm.build(hidden_shape)
        self.built = True

    def call(self, hidden):
        if self.context_norm is not None:
            hidden = self.context_norm(hidden + hidden[:, :1])
        return ops.cast(self.prediction(self.dense(hidden)), "float32")

    def compute_output_spec(self, hidden):
        return keras.KerasTensor((*hidden.shape[:-1], 1), dtype="float32")

    def get_config(self):
        return dict(super().get_config(), activation=self.activation, initializer_range=self.initializer_range,
                    context_norm_epsilon=self.context_norm_epsilon)
