"""tf.distribute strategies by name: one switch for CPU, multi-GPU and Colab TPU runs."""

import tensorflow as tf

from keras_bertology.errors import ConfigError
from keras_bertology.training.options import STRATEGIES


def make_strategy(name="default"):
    """Return the tf.distribute strategy called `name`.

    default: the current (single-device) strategy; mirrored: every local GPU
    (or the logical CPUs configured before); tpu: the TPU of a Colab runtime
    or of TPU_NAME, initialised here.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.OpError) as error:
            raise ConfigError(f"--strategy tpu: no TPU could be initialised ({error})") from None
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(f"unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}")
