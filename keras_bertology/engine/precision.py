"""`--precision auto`: bfloat16 compute only on processors that do bfloat16 arithmetic natively.

Mixed bfloat16 halves activation memory and doubles matmul throughput on
TPUs, recent GPUs and CPUs with AMX or AVX512-BF16; on a CPU without them
every bfloat16 op is emulated (measured 2.4x slower than float32 on 2 cores
of an AVX2 machine). So auto picks mixed_bfloat16 on a TPU strategy, a GPU
of compute capability 8.0 or more, or such a CPU, and float32 elsewhere.
"""

from contextlib import contextmanager
from pathlib import Path

import keras
import tensorflow as tf

NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_flags(cpuinfo=Path("/proc/cpuinfo")):
    """The instruction-set flags of the first processor listed, or an empty set where none can be read."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def gpu_compute_capabilities():
    """(major, minor) of each GPU the Keras backend computes on: JAX's own devices on JAX, whose
    TensorFlow (only the input pipelines') is often a CPU-only build that sees no GPU."""
    if keras.config.backend() == "jax":
        import jax

        return [tuple(int(part) for part in str(device.compute_capability).split(".")[:2])
                for device in jax.devices() if device.platform == "gpu" and getattr(device, "compute_capability", None)]
    capabilities = []
    for device in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(device).get("compute_capability")
        if capability:
            capabilities.append(tuple(capability))
    return capabilities


def resolve_precision(precision, strategy, flags=None, gpus=None):
    """`precision` itself unless it is "auto"; then the dtype policy this device computes fastest in."""
    if precision != "auto":
        return precision
    if isinstance(strategy, tf.distribute.TPUStrategy) or getattr(strategy, "name", None) == "tpu":  # or JAX's
        return "mixed_bfloat16"
    gpus = gpu_compute_capabilities() if gpus is None else gpus
    if gpus:
        return "mixed_bfloat16" if min(gpus) >= (8, 0) else "float32"
    flags = cpu_flags() if flags is None else flags
    return "mixed_bfloat16" if flags & set(NATIVE_BF16_CPU_FLAGS) else "float32"


@contextmanager
def dtype_policy_scope(policy):
    """Build and load models under `policy` as the global dtype policy, then restore the previous one.

    Keras' Functional model ignores its `dtype` argument and takes the global policy, which its `get_config`
    records (a backbone keeps a `dtype` it is given, and its pretrainer takes it: models/backbone.py); so a
    model built or loaded without one takes this scope's policy for its own and its heads'."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
