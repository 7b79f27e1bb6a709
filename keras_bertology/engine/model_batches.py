"""Feature batches -> a pretrainer's `(x, y, sample_weight)`, inside tf.data whatever the Keras backend."""

import types

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

# The keras.ops that `Pretrainer.split_features` uses, as TensorFlow ops: tf.data runs TensorFlow even
# when the model runs on JAX, whose keras.ops cannot take a pipeline's symbolic tensors.
TF_OPS = types.SimpleNamespace(cast=tf.cast, mean=tf.reduce_mean, divide_no_nan=tf.math.divide_no_nan,
                               ones_like=tf.ones_like)


def model_batches(dataset, pretrainer):
    """`dataset` of feature dicts mapped to the pretrainer's inputs, labels and weights."""
    return dataset.map(do_not_convert(lambda features: pretrainer.split_features(features, TF_OPS)))


def micro_batches(dataset, batch_size, accumulate):
    """Each batch of `batch_size` rows as `accumulate` micro-batches of its rows in order, which the
    optimizer's gradient accumulation turns back into one update. The weights that `split_features`
    normalised over the whole batch stay so: the micro-batches' averaged gradients are the batch's."""
    if accumulate == 1:
        return dataset
    return dataset.rebatch(batch_size // accumulate, drop_remainder=True)
