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
