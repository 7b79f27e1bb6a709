"""`--strategy` and `--model-parallel` on the JAX backend, through `keras.distribution`.

The strategy names mean what they mean on TensorFlow: `default` one device, `mirrored` data parallel over
every local device (GPUs, TPU cores, or the CPU devices that
`XLA_FLAGS=--xla_force_host_platform_device_count=N` makes), `multiworker` data parallel over every device
of several processes, started by `keras.distribution.initialize` from `KERAS_DISTRIBUTION_*` (CPU
collectives through gloo, so CPU-only hosts take part too), `tpu` a TPU's cores, `auto` the widest of
these. `--model-parallel N` lays the devices out as a (batch, model) mesh and splits the weights over its
`model` axis as the family declares (`TrainingDefaults.model_parallel_layout`, `keras.distribution.ModelParallel`).

The step's code sees whole global batches, which XLA partitions over the mesh: to the training loop a
run is one replica (`num_replicas_in_sync` 1) of `devices` data-parallel devices. Each process feeds its
own rows of every global batch (`process_batches`), so the batches, and the masks drawn for them, are a
one-device run's. jax is imported only when a JAX run asks for a distribution.
"""

import contextlib
import os
import time
from types import SimpleNamespace

import keras
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from keras_bertology.errors import ConfigError

PROCESS_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                     "KERAS_DISTRIBUTION_PROCESS_ID")


def make_keras_distribution(name):
    """The devices of strategy `name` on JAX; a multiworker run's processes are started here, before
    anything computes on JAX."""
    import jax

    if name == "auto":
        name = auto_name()
    if name == "multiworker":
        start_processes()
    if name == "default":
        devices = jax.devices()[:1]
    elif name == "mirrored":
        devices = jax.local_devices()
    elif name == "multiworker":
        devices = jax.devices()
    else:  # tpu
        devices = [device for device in jax.devices() if device.platform == "tpu"]
        if not devices:
            raise ConfigError(f"--strategy tpu: JAX sees no TPU here (its devices are {jax.devices()[0].platform})")
    return KerasDistribution(name, devices)


def auto_name():
    """What --strategy auto picks on JAX: several processes announced, else a TPU, else every local
    device when there are several, else one."""
    import jax

    if int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES") or 1) > 1:
        return "multiworker"
    if jax.default_backend() == "tpu":
        return "tpu"
    return "mirrored" if jax.local_device_count() > 1 else "default"


def start_processes():
    """keras.distribution.initialize from KERAS_DISTRIBUTION_*: one line when they are missing or wrong,
    or when the processes cannot meet."""
    import jax

    missing = [name for name in PROCESS_VARIABLES if not os.environ.get(name)]
    if missing:
        raise ConfigError(f"--strategy multiworker on --backend jax starts its processes from "
                          f"{', '.join(PROCESS_VARIABLES)} (the coordinator's host:port first); "
                          f"{', '.join(missing)} not set")
    try:
        count = int(os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"])
        index = int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"])
    except ValueError:
        raise ConfigError("KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID must be whole "
                          "numbers") from None
    if not (count >= 1 and 0 <= index < count):
        raise ConfigError(f"KERAS_DISTRIBUTION_PROCESS_ID={index} is not one of the {count} processes "
                          "(0 to KERAS_DISTRIBUTION_NUM_PROCESSES - 1)")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        keras.distribution.initialize()
    except (RuntimeError, ValueError) as error:
        raise ConfigError(f"--strategy multiworker: the {count} processes could not meet at "
                          f"{os.environ['KERAS_DISTRIBUTION_JOB_ADDRESSES']} ({str(error).splitlines()[0]})") from None
    if count > 1:
        watch_processes()


# A process whose sign of life is older than this has stopped: every process leaves one every second,
# from a thread of its own, whatever its training thread waits on (a compilation, a collective, a save).
SILENCE_BOUND_S = 20


def watch_processes(bound_s=SILENCE_BOUND_S, interval_s=1.0):
    """Stop this process with one line, within `bound_s`, once another process of the job has stopped.

    A collective whose peer died waits for it in native code, and JAX's own coordination service ends the
    survivors only after its heartbeat timeout, with a native stack trace. Here each process posts a
    counter to the coordination service's key-value store every `interval_s` and reads the others'; a
    counter that stops moving, or a coordinator that no longer answers, ends this process (exit 2), whose
    run resumes from its newest checkpoint once every process is started again."""
    import threading

    from jax._src.distributed import global_state  # the client keras.distribution.initialize started

    client, me, count = global_state.client, global_state.process_id, global_state.num_processes

    def stop(reason):
        os.write(2, (f"\nbertology: error: {reason}; this process stops too: start every process again with "
                     "the same command to resume from the newest checkpoint\n").encode())
        time.sleep(0.5)  # the line reaches the terminal through the log filter's thread
        os._exit(2)

    def sign_of(other):
        try:
            return client.key_value_try_get(f"bertology/alive/{other}")
        except Exception as error:  # jax's own error types
            if "NOT_FOUND" in str(error):  # its first sign is on the way
                return None
            raise

    def watch():
        others = [other for other in range(count) if other != me]
        seen, since, beat = dict.fromkeys(others), dict.fromkeys(others, time.monotonic()), 0
        while True:
            beat += 1
            try:
                client.key_value_set(f"bertology/alive/{me}", str(beat), allow_overwrite=True)
                signs = {other: sign_of(other) for other in others}
            except Exception:  # the coordination service (in process 0) no longer answers
                stop("process 0 of the job, its coordinator, stopped")
            now = time.monotonic()
            for other, sign in signs.items():
                if sign != seen[other]:
                    seen[other], since[other] = sign, now
                elif now - since[other] > bound_s:
                    stop(f"process {other} of the job stopped (no sign of life for {bound_s} s)")
            time.sleep(interval_s)

    threading.Thread(target=watch, name="bertology-process-watch", daemon=True).start()


class KerasDistribution:
    """What the training loop asks of a strategy, for a run that keras.distribution lays out on JAX."""

    num_replicas_in_sync = 1  # the step sees whole global batches

    def __init__(self, name, devices):
        import jax

        self.name, self._devices = name, list(devices)
        self.process_index, self.process_count = jax.process_index(), jax.process_count()
        self.devices, self.model_parallel = len(self._devices), 1  # data-parallel devices, model axis
        # One writer: process 0 writes checkpoints, metrics, logs and the export.
        self.extended = SimpleNamespace(should_checkpoint=self.process_index == 0)

    def lay_out(self, model_parallel, layout):
        """Set the run's keras.distribution: DataParallel over the devices, or with `model_parallel` > 1
        ModelParallel on a (batch, model) mesh whose `model` axis splits the weights as `layout` says."""
        count = len(self._devices)
        if count % model_parallel:
            raise ConfigError(f"--model-parallel {model_parallel} does not divide the {count} devices of "
                              f"--strategy {self.name}")
        self.devices, self.model_parallel = count // model_parallel, model_parallel
        if model_parallel > 1 and self.process_count > 1:
            raise ConfigError("--model-parallel splits weights within one process here: with several processes "
                              "train data parallel (--model-parallel 1)")
        if count == 1:
            keras.distribution.set_distribution(None)  # one device: nothing to lay out
            return
        if model_parallel == 1:
            distribution = keras.distribution.DataParallel(devices=self._devices, auto_shard_dataset=False)
        else:
            mesh = keras.distribution.DeviceMesh((self.devices, model_parallel), ("batch", "model"), self._devices)
            layout_map = keras.distribution.LayoutMap(mesh)
            for pattern, axes in layout:
                layout_map[pattern] = axes
            distribution = _DivisibleModelParallel(layout_map=layout_map, batch_dim_name="batch",
                                                   auto_shard_dataset=False)
        keras.distribution.set_distribution(distribution)

    @contextlib.contextmanager
    def peers_watched(self):
        """Training of several processes: an error out of a collective whose peer died (gloo's closed
        connection, a failed gather) waits for the watch (`watch_processes`), which ends this process with
        its one line within the bound; an error of anything else goes on up after that wait."""
        try:
            yield
        except Exception:
            if self.process_count > 1:
                time.sleep(SILENCE_BOUND_S + 2)
            raise

    def split_weights(self, model):
        """How many of `model`'s weights are split over devices (not replicated), for metrics.json."""
        return sum(any(axis is not None for axis in getattr(variable.value.sharding, "spec", ()))
                   for variable in model.weights)

    def scope(self):
        return contextlib.nullcontext()  # the distribution is set for the whole run

    def check_batch(self, global_batch, accumulate=1):
        """A global batch (of one step) that the data-parallel devices and the processes share evenly."""
        for count, what in ((self.devices, "data-parallel devices"), (self.process_count, "processes")):
            if global_batch % count:
                raise ConfigError(f"{batch_flags(global_batch, accumulate)} must be a multiple of the "
                                  f"{count} {what}, which share each batch evenly")

    def process_batches(self, dataset, global_batch, own_dataset=None):
        """This process's rows of each global batch: `own_dataset(InputContext)` where the process reads
        its own files (prepared shards), else its slice of the global batches every process builds."""
        if self.process_count == 1:
            return dataset
        if own_dataset is not None:
            return own_dataset(tf.distribute.InputContext(self.process_count, self.process_index,
                                                          self.process_count))
        return own_rows(dataset, global_batch, self.process_index, self.process_count)


@contextlib.contextmanager
def outside_distribution():
    """Work of one process alone (process 0 saving a checkpoint or the run), outside the run's
    distribution: Keras' saver makes variables on the way (a throwaway optimizer), and a variable made
    under a distribution of several processes is a collective that the other processes never join."""
    current = keras.distribution.distribution()
    if current is None:
        yield
        return
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(current)


def batch_flags(global_batch, accumulate):
    """The flags that make a step's global batch, for messages."""
    if accumulate == 1:
        return f"--batch-size {global_batch} (the global batch)"
    return (f"the micro-batch of {global_batch} (--batch-size {global_batch * accumulate} / --accumulate "
            f"{accumulate})")


def own_rows(dataset, global_batch, pipeline, pipelines):
    """Rows pipeline * global_batch / pipelines ... of every batch of `dataset`."""
    rows = global_batch // pipelines
    first = pipeline * rows

    @do_not_convert
    def keep(*batch):
        return tf.nest.map_structure(lambda tensor: tensor[first:first + rows], batch)

    return dataset.map(keep)


class _DivisibleModelParallel(keras.distribution.ModelParallel):
    """ModelParallel that replicates a weight whose split dimension the mesh does not divide (a
    vocabulary of 30,522 rows over 4 devices), where jax would refuse the layout."""

    def get_variable_layout(self, variable):
        layout = super().get_variable_layout(variable)
        sizes = dict(zip(self.device_mesh.axis_names, self.device_mesh.shape))
        if any(axis is not None and dimension % sizes[axis] for dimension, axis in zip(variable.shape, layout.axes)):
            return keras.distribution.TensorLayout([None] * len(variable.shape), self.device_mesh)
        return layout
