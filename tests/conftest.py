"""Shared test set-up: quiet TensorFlow, CPU only, Keras on the TensorFlow backend."""

import gc
import os
import shutil
import sys
import tempfile
import time

STARTED = time.monotonic()  # a stage's wall time (stage_budget.py) counts from here, TensorFlow's import included

import pytest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))  # helpers: `from family_harness import ...`

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Parity tests hold float32 outputs to 1e-5 of transformers'. oneDNN's reordered CPU kernels, on by
# default on some processors, move logits of magnitude ~7 by up to 1.4e-6 relative (1.01e-5 absolute
# in test_hf_convert); TensorFlow's own kernels keep every parity test inside the bound on any CPU.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# `--precision auto` would train in bfloat16 on a CI machine with AMX or AVX512-BF16: the tests pin float32
# (subprocesses inherit it), so that what they compare does not depend on the processor.
os.environ.setdefault("BERTOLOGY_PRECISION", "float32")
# `--xla auto` compiles every train step with XLA on one device: on TensorFlow, seconds of compilation per
# run, which the suite's tiny runs of a few steps never win back, so TensorFlow tests run without it
# (test_xla.py and one CLI run, test_cli.py, train with it). On JAX `auto` compiles every step, as Keras
# does there, and that is the suite's fast path too: eager JAX runs op by op (the bfloat16 kill-and-resume
# test: 208 s eager, 71 s compiled, on 2 cores).
os.environ.setdefault("BERTOLOGY_XLA", "auto" if os.environ["KERAS_BACKEND"] == "jax" else "off")
# Two pytest workers (and the processes they start) share the CI machine's two cores: one TensorFlow
# thread each instead of a pool per core that spins against the other worker's. The suite's models are
# tiny; measured on the two-core machine, test_electra + test_albert under `-n 2`: 157 s -> 127 s.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# JAX compiles each process's steps again, seconds each on 2 cores, and the suite starts the same bert-tiny
# steps in many processes (a killed job started again on the same mesh, the same tiny model in each): one
# compilation cache for this test run, which every worker and the processes they start share (they inherit
# the variable; the cache is keyed on the program, so nothing else is reused). Measured on the 2-core machine
# under load, a 20-step JAX run of bert-tiny: 49 s without, 34 s with the cache warm.
MADE_JAX_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if MADE_JAX_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="bertology-jax-cache-")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# XLA's back end at -O0, in TensorFlow's XLA and JAX's alike (tests/support/simulated_devices.py says why and
# what it saves); added to flags the environment already sets.
from simulated_devices import FAST_COMPILE  # noqa: E402

if FAST_COMPILE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{FAST_COMPILE} {os.environ.get('XLA_FLAGS', '')}".strip()

import stage_budget  # noqa: E402
from benchmarks.bench_mlm import _current_rss_mib  # noqa: E402  (the benchmarks' reading: standard library only)
import tensorflow as tf  # noqa: E402  (after the environment above, which TensorFlow reads on import)
from keras.src.saving import saving_lib  # noqa: E402

# Grappler rewrites every tf.function graph the first time it runs: for the suite's tiny models that costs
# more than the run (a SavedModel's endpoints, each a tokenizer graph of thousands of ops, executed by its
# warm-up requests). Measured on 2 cores beside other work, tests/models/test_task_models.py: 240 s -> 177 s.
# Only this process: the commands and serving scripts the tests start run TensorFlow as users do.
tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


@pytest.fixture
def graph_rewrites_as_in_commands():
    """Grappler on for a test whose run here must equal, bit for bit, a command's in a process of its own:
    the rewrites change float rounding."""
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    yield
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


# A worker's Keras models sit in reference cycles, which Python frees only on its rare full collections:
# between two of them a worker held 14 GB, and the two workers and the processes they start share the CI
# machine's 24 GiB; a worker the kernel kills for memory fails its test and slows the rest of the stage.
# After each test file, a worker holding more than this collects (about a second, so only when it has grown).
COLLECT_ABOVE_MIB = 6144


@pytest.fixture(autouse=True, scope="module")
def _collect_when_grown():
    yield
    if (_current_rss_mib() or 0) > COLLECT_ABOVE_MIB:  # None where the system does not say (not Linux)
        gc.collect()


# After collection a worker holds some 600,000 objects that live as long as it does (TensorFlow, torch,
# transformers, the test modules), and every full collection walked them all again: 7-8% of a worker's time,
# since building graphs allocates fast enough to start one every few seconds. Frozen, the collector skips
# them; a larger first threshold starts the collections less often (a cycle is freed some 10,000 allocations
# later; a worker over COLLECT_ABOVE_MIB still collects after each file). Measured on 2 cores,
# test_hf_export.py and test_task_models.py in one process: 89.5 s of CPU (twice) -> 81.8-85.1 s, peak memory
# 1.80 -> 1.94 GB (docs/numerics-and-tests.md).
GC_FIRST_THRESHOLD = 10_000


def pytest_collection_finish(session):
    gc.freeze()
    gc.set_threshold(GC_FIRST_THRESHOLD, *gc.get_threshold()[1:])


# Keras 3.15.1's `.keras` saving reads its per-type attribute skip-sets under one key and stores them under another
# ("saving_attr_skiplist_" against "saving_attr_skipset_"), so every layer saved or loaded builds a throwaway Layer
# to list its attributes again: 9.5 s of 575 s of CPU in four files that save and load archives; a bert-tiny run
# loaded and saved, 0.59-0.66 -> 0.48-0.56 CPU-s; the 10 checkpoints of a 10-step run, 3.7 -> 2.5 s. The workers
# keep each set once (the same set Keras builds: the attributes of a bare instance of the type). A fix in Keras
# shows in tests/project/test_keras_skipsets.py, which then says to remove this.
KERAS_SKIPSETS = {}


def _kept_skipset(obj_type, _build=saving_lib.get_attr_skipset):
    if obj_type not in KERAS_SKIPSETS:
        KERAS_SKIPSETS[obj_type] = _build(obj_type)
    return KERAS_SKIPSETS[obj_type]


saving_lib.get_attr_skipset = _kept_skipset


# The two workers take whole files (`--dist loadfile --no-loadscope-reorder`, see the Makefile) in collection
# order, the longest first by tests/support/durations.json; `make test` holds each stage to its budget there.
def pytest_configure(config):
    stage_budget.register(config, STARTED)


def pytest_unconfigure(config):
    # The process that made the cache removes it; an xdist worker inherited it and leaves it to that one.
    if MADE_JAX_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
