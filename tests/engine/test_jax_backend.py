"""`bertology pretrain --backend jax`: the model trains on JAX from the same tf.data pipelines, and the run is
exported by a TensorFlow process to a SavedModel that serves the JAX-trained weights."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from cli_in_one_process import run_in_one_process
from simulated_devices import FAST_COMPILE
from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.runs import load_run_model
from keras_bertology.engine.checkpoints import weights_digest

PLAYS = [str(path) for path in default_corpus_paths()[:2]]


def _bertology(*argv):
    # Every JAX step compiled, as users run it: conftest.py's BERTOLOGY_XLA=off is for TensorFlow, and
    # eager JAX runs op by op, several times slower.
    return subprocess.run([sys.executable, "-m", "keras_bertology.cli", *map(str, argv)], capture_output=True,
                          text=True, timeout=900, env={**os.environ, "BERTOLOGY_XLA": "auto"})


# `make test-all`: test_jax_distribution.py checks each part of it in CI on runs it makes anyway (a one-device run
# saved with the weights JAX trained; a JAX run's export, made by TensorFlow, serving its Keras model's states).
@pytest.mark.extended
def test_pretrain_on_jax_exports_the_weights_it_trained(tmp_path):
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    done = _bertology("pretrain", "--backend", "jax", "--model", "bert", "--preset", "bert-tiny", "--corpus", *PLAYS,
                      "--steps", "4", "--log-every", "2", "--batch-size", "8", "--seq-len", "32", "--vocab-size", "400",
                      "--out", run_dir, "--export", export_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["backend"] == "jax" and metrics["steps"] == 4
    assert all(np.isfinite(record["loss"]) for record in metrics["history"])
    assert metrics["fill_mask"]  # ranked by the export's `mlm` signature

    run = load_run_model(run_dir)  # here on TensorFlow: the run folder is backend-neutral
    assert weights_digest(run.pretrainer) == metrics["weights_sha256"]  # the very weights JAX trained
    served = tf.saved_model.load(str(export_dir))
    rng = np.random.default_rng(0)
    inputs = {"token_ids": rng.integers(5, run.tokenizer.vocab_size, (3, 32)).astype("int32"),
              "segment_ids": np.repeat([[0] * 16 + [1] * 16], 3, axis=0).astype("int32"),
              "padding_mask": np.ones((3, 32), "int32")}
    inputs["padding_mask"][1, 20:] = 0
    expected = run.backbone.predict(inputs, verbose=0)
    got = served.signatures["serve_ids"](**{name: tf.constant(value) for name, value in inputs.items()})
    np.testing.assert_allclose(got["sequence_output"].numpy(), expected["sequence_output"], atol=1e-5)


# `make test-all`: the JAX stage of `make test` trains these windows over packed documents on JAX and resumes
# them exactly (test_resume.py's long-sequence test), and test_jax_distribution.py serves a JAX run's export.
@pytest.mark.extended
def test_modernbert_pretrains_on_jax_in_windows_over_packed_documents_and_serves_what_it_trained(tmp_path):
    """Windows of 8 over 48 tokens are computed in blocks, rows hold several documents: JAX trains it under
    the warmup-stable-decay schedule, and TensorFlow's SavedModel serves the same states."""
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    done = _bertology("pretrain", "--backend", "jax", "--model", "modernbert", "--preset", "modernbert-tiny",
                      "--corpus", *PLAYS, "--steps", "4", "--log-every", "2", "--batch-size", "8", "--seq-len", "48",
                      "--vocab-size", "400", "--local-window", "8", "--packing", "unpadded", "--out", run_dir,
                      "--export", export_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["backend"] == "jax" and metrics["steps"] == 4 and metrics["schedule"] == "wsd"
    assert all(np.isfinite(record["loss"]) for record in metrics["history"])
    run = load_run_model(run_dir)
    assert weights_digest(run.pretrainer) == metrics["weights_sha256"]
    rng = np.random.default_rng(0)
    inputs = {"token_ids": rng.integers(5, run.tokenizer.vocab_size, (3, 48)).astype("int32"),
              "padding_mask": np.ones((3, 48), "int32")}
    inputs["padding_mask"][1, 30:] = 0
    expected = run.backbone.predict(inputs, verbose=0)
    got = tf.saved_model.load(str(export_dir)).signatures["serve_ids"](
        **{name: tf.constant(value) for name, value in inputs.items()})
    np.testing.assert_allclose(got["sequence_output"].numpy(), expected["sequence_output"], atol=1e-5)


CANNOT_WORK = {
    "no-tpu": (["--strategy", "tpu"], {}, "--strategy tpu: JAX sees no TPU here (its devices are cpu)"),
    "no-processes": (["--strategy", "multiworker"], {}, "KERAS_DISTRIBUTION_JOB_ADDRESSES, "
                                                        "KERAS_DISTRIBUTION_NUM_PROCESSES, KERAS_DISTRIBUTION_PROCESS_ID "
                                                        "not set"),
    "bad-process-id": (["--strategy", "multiworker"], {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1:1",
                                                       "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
                                                       "KERAS_DISTRIBUTION_PROCESS_ID": "2"},
                       "KERAS_DISTRIBUTION_PROCESS_ID=2 is not one of the 2 processes"),
    "model-axis": (["--strategy", "mirrored", "--model-parallel", "3"], {},
                   "--model-parallel 3 does not divide the 4 devices of --strategy mirrored"),
    "batch": (["--strategy", "mirrored", "--batch-size", "6"], {},
              "--batch-size 6 (the global batch) must be a multiple of the 4 data-parallel devices"),
}
# One fresh JAX process runs `bertology.cli.main` for every case, as `python -m keras_bertology.cli` would
# (its return value is the exit status; a SystemExit's code too; an exception escaping it is printed as the
# interpreter prints it, so "Traceback" shows; tests/support/cli_in_one_process.py): the multiworker cases
# first, whose main hands the command to the supervising parent's child process (keras_bertology.supervise)
# before this process imports Keras, then the others in this process, on the 4 CPU devices of XLA_FLAGS. Each
# case sees the environment of the test plus its own variables, as its own process did.


@pytest.fixture(scope="module")
def cannot_work(tmp_path_factory):
    """{case: (exit status, stderr, its --out)} of every CANNOT_WORK case, from one fresh process."""
    root = tmp_path_factory.mktemp("cannot-work")
    outs = {name: root / name / "run" for name in CANNOT_WORK}
    order = sorted(CANNOT_WORK, key=lambda name: "--strategy multiworker" not in " ".join(CANNOT_WORK[name][0]))
    cases = [[name, ["pretrain", "--backend", "jax", "--corpus", *PLAYS, "--out", str(outs[name]),
                     *CANNOT_WORK[name][0]], CANNOT_WORK[name][1]] for name in order]
    devices = f"{FAST_COMPILE} --xla_force_host_platform_device_count=4"
    results = run_in_one_process(cases, root, {**os.environ, "XLA_FLAGS": devices}, timeout=300)
    return {name: (*results[name], outs[name]) for name in CANNOT_WORK}


@pytest.mark.parametrize("case", list(CANNOT_WORK))
def test_distributions_that_cannot_work_on_jax_are_one_line(cannot_work, case):
    status, stderr, out = cannot_work[case]
    assert status == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert CANNOT_WORK[case][2] in stderr.strip().splitlines()[-1]
    assert not out.exists()


def test_model_parallel_is_refused_on_tensorflow(tmp_path, capsys):
    from keras_bertology.cli import main

    assert main(["pretrain", "--model-parallel", "2", "--corpus", *PLAYS, "--out", str(tmp_path / "run")]) == 2
    assert "--model-parallel 2 splits weights with keras.distribution, on --backend jax" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_process_already_running_keras_on_tensorflow_cannot_switch(monkeypatch, capsys):
    from keras_bertology.cli import main

    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # restored afterwards: main sets it from --backend
    assert main(["pretrain", "--backend", "jax", "--steps", "1"]) == 2
    assert "already runs Keras on tensorflow; run bertology in a fresh process" in capsys.readouterr().err


def test_a_backend_bertology_does_not_run_on_is_one_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "keras_bertology.cli", "presets"], capture_output=True, text=True,
                          env={**os.environ, "KERAS_BACKEND": "torch"}, timeout=300)
    assert done.returncode == 2 and done.stderr.strip() == "bertology: error: KERAS_BACKEND=torch: bertology runs on " \
                                                             "tensorflow or jax"
    done = _bertology("pretrain", "--backend", "numpy", "--out", tmp_path / "run")
    assert done.returncode == 2 and "invalid choice: 'numpy'" in done.stderr and "Traceback" not in done.stderr

