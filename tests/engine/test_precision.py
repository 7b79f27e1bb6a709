"""`--precision auto`: bfloat16 only where the processor computes it natively."""

import keras
import pytest
import tensorflow as tf

from keras_bertology.engine import precision
from keras_bertology.engine.precision import cpu_flags, dtype_policy_scope, resolve_precision

DEFAULT = tf.distribute.get_strategy()


@pytest.mark.parametrize("flags, gpus, expected", [
    ({"avx2", "fma"}, [], "float32"),                       # emulated bf16: 2.4x slower than float32
    ({"avx512f", "avx512_bf16"}, [], "mixed_bfloat16"),
    ({"amx_bf16", "amx_tile"}, [], "mixed_bfloat16"),
    ({"avx2"}, [(8, 0)], "mixed_bfloat16"),                 # A100 and later
    ({"avx512_bf16"}, [(7, 0)], "float32"),                 # V100: the GPU computes, without bf16
    ({"avx2"}, [(9, 0), (7, 5)], "float32"),                # the slowest GPU decides
])
def test_auto_picks_bfloat16_only_on_native_hardware(flags, gpus, expected):
    assert resolve_precision("auto", DEFAULT, flags=flags, gpus=gpus) == expected


def test_an_explicit_precision_is_kept():
    for precision in ("float32", "mixed_bfloat16"):
        assert resolve_precision(precision, DEFAULT, flags=set(), gpus=[]) == precision


def test_on_jax_the_gpus_are_jaxs_own(monkeypatch):
    """A JAX run's TensorFlow (the input pipelines') is often a CPU-only build that sees no GPU: the GPUs that
    decide are the ones JAX computes on (an H200 reports compute capability "9.0")."""
    import jax

    class Device:
        def __init__(self, platform, capability=None):
            self.platform, self.compute_capability = platform, capability

    monkeypatch.setattr(keras.config, "backend", lambda: "jax")
    monkeypatch.setattr(jax, "devices", lambda: [Device("gpu", "9.0"), Device("gpu", "7.5"), Device("cpu")])
    assert precision.gpu_compute_capabilities() == [(9, 0), (7, 5)]
    monkeypatch.setattr(jax, "devices", lambda: [Device("gpu", "8.0")])
    assert resolve_precision("auto", DEFAULT, flags=set()) == "mixed_bfloat16"
    monkeypatch.setattr(jax, "devices", lambda: [Device("cpu")])
    assert resolve_precision("auto", DEFAULT, flags=set()) == "float32"


def test_cpu_flags_read_the_first_processor(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_a_policy_scope_builds_in_its_policy_and_restores_the_previous_one():
    """A Functional model ignores its `dtype` argument: what it records is the global policy it was built in."""
    before = keras.config.dtype_policy()
    with pytest.raises(RuntimeError), dtype_policy_scope("mixed_bfloat16"):
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        raise RuntimeError("the scope ends however its block does")
    assert model.dtype_policy.name == "mixed_bfloat16" and keras.config.dtype_policy() is before
