"""Shared test set-up: quiet TensorFlow, CPU only, Keras on the TensorFlow backend."""

import os

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
# Two pytest workers (and the processes they start) share the CI machine's two cores: one TensorFlow
# thread each instead of a pool per core that spins against the other worker's. The suite's models are
# tiny; measured on the two-core machine, test_electra + test_albert under `-n 2`: 157 s -> 127 s.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
