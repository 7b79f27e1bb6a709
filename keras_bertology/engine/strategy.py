"""tf.distribute strategies by name: one switch for CPU, multi-GPU, multi-worker and Colab TPU runs."""

import json
import os

import keras
import tensorflow as tf

from keras_bertology.errors import ConfigError
from keras_bertology.runtime import tpu_reachable
from keras_bertology.engine.keras_distribution import KerasDistribution, make_keras_distribution
from keras_bertology.engine.choices import STRATEGIES


def make_strategy(name="default"):
    """Return the tf.distribute strategy called `name`; on JAX, its keras.distribution counterpart
    (`keras_distribution.make_keras_distribution`).

    auto: a TPU when one is reachable, else every local GPU when there are
    several, else the default; default: the current (single-device) strategy;
    mirrored: every local GPU (or the logical CPUs configured before);
    multiworker: MultiWorkerMirroredStrategy over the cluster of TF_CONFIG;
    tpu: the TPU of a Colab runtime, a TPU VM or TPU_NAME, initialised here.
    """
    if keras.config.backend() == "jax":
        return make_keras_distribution(name)
    if name == "auto":
        name = auto_strategy_name()
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        if "TF_CONFIG" not in os.environ:  # the strategy would train this process alone
            raise ConfigError("--strategy multiworker: TF_CONFIG is not set, so this process would train alone; "
                              "set it in every worker's environment (docs/distributed.md), or use --strategy "
                              "mirrored for the devices of one machine")
        _check_tf_config(os.environ["TF_CONFIG"])
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        if not tpu_reachable():
            raise ConfigError("--strategy tpu: no TPU here (no /dev/accel* device, and neither COLAB_TPU_ADDR nor "
                              "TPU_NAME is set)")
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=_tpu_address())
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.OpError) as error:  # TensorFlow's text runs on with kernels and graph nodes
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigError(f"--strategy tpu: no TPU could be initialised at {_tpu_address()} ({reason})") from None
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(f"unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}")


def auto_strategy_name():
    """What --strategy auto picks here: tpu, mirrored (several GPUs) or default."""
    if tpu_reachable():
        return "tpu"
    return "mirrored" if len(tf.config.list_physical_devices("GPU")) > 1 else "default"


def _tpu_address():
    """The resolver's `tpu` argument: Colab's address, TPU_NAME, or "local" on a TPU VM."""
    if os.environ.get("COLAB_TPU_ADDR"):
        return "grpc://" + os.environ["COLAB_TPU_ADDR"]
    return os.environ.get("TPU_NAME") or "local"


def _check_tf_config(text):
    """TF_CONFIG must name this task within a cluster of workers, or the strategy fails obscurely."""
    try:
        config = json.loads(text)
        task = config["task"]
        if not 0 <= int(task["index"]) < len(config["cluster"][task["type"]]):
            raise ValueError("the task is not one of the cluster's")
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            "--strategy multiworker: TF_CONFIG must be JSON like {\"cluster\": {\"worker\": [\"host:port\", "
            f"...]}}, \"task\": {{\"type\": \"worker\", \"index\": 0}}}} ({error})") from None


def strategy_name(strategy):
    """The name of `strategy` as --strategy takes it (what auto picked), for metrics.json."""
    if isinstance(strategy, KerasDistribution):
        return strategy.name
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multiworker"
    return "mirrored" if isinstance(strategy, tf.distribute.MirroredStrategy) else "default"


def data_parallel_devices(strategy):
    """The devices that share each global batch: a keras.distribution run's batch axis, or the replicas."""
    return strategy.devices if isinstance(strategy, KerasDistribution) else strategy.num_replicas_in_sync


def lay_out(strategy, model_parallel, layout):
    """Lay a JAX run's devices out (`KerasDistribution.lay_out`); --model-parallel is JAX's alone."""
    if isinstance(strategy, KerasDistribution):
        strategy.lay_out(model_parallel, layout)
    elif model_parallel > 1:
        raise ConfigError(f"--model-parallel {model_parallel} splits weights with keras.distribution, on "
                          "--backend jax; tf.distribute replicates them whole")


def is_chief(strategy):
    """Whether this process writes the run's files: every strategy says so (`should_checkpoint`), and only
    the chief of a multi-worker cluster does."""
    return strategy.extended.should_checkpoint
