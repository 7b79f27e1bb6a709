"""`--strategy` and `--model-parallel` on the JAX backend (keras.distribution): every local device, several
processes on the loopback interface, weights split over a mesh; each the same training as one device."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from cli_in_one_process import run_in_one_process
from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.engine.checkpoints import weights_digest
from keras_bertology.runs import load_run_model
from simulated_devices import xla_flags

PLAYS = [str(path) for path in default_corpus_paths()[:2]]
STEPS = 20
RUN = ["pretrain", "--backend", "jax", "--model", "bert", "--preset", "bert-tiny", "--corpus", *PLAYS,
       "--steps", str(STEPS), "--log-every", "10", "--batch-size", "16", "--seq-len", "32", "--vocab-size", "400",
       "--no-export"]
# Dropout stays on: HashedDropout draws each mask from the positions of the global batch, wherever they run.
ENV = {**os.environ, "KERAS_BACKEND": "jax", "BERTOLOGY_PRECISION": "float32", "BERTOLOGY_XLA": "auto"}


def _devices(count):
    return {**ENV, "XLA_FLAGS": xla_flags(count)}


def _bertology(argv, env, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "keras_bertology.cli", *map(str, argv)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _finish(*processes, timeout=600):
    outputs = [process.communicate(timeout=timeout) for process in processes]
    for process, (_, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
    return outputs


def _weights(run_dir):
    return [np.asarray(weight) for weight in load_run_model(run_dir).pretrainer.weights]


def _gap(run_dir, reference):
    return max(float(np.abs(got - expected).max()) for got, expected in zip(_weights(run_dir), reference))


# The runs of one process on 4 CPU devices, one import of TensorFlow, Keras and JAX for the three.
ONE_PROCESS_RUNS = {"one-device": ["--strategy", "default"], "mirrored": ["--strategy", "mirrored"],
                    "model-parallel": ["--strategy", "mirrored", "--model-parallel", "2"]}


@pytest.fixture(scope="module")
def one_process_runs(tmp_path_factory):
    """{name: run folder} of ONE_PROCESS_RUNS, each trained to the end (exit status 0)."""
    root = tmp_path_factory.mktemp("one-process")
    runs = {name: root / name / "run" for name in ONE_PROCESS_RUNS}
    cases = [[name, [*map(str, RUN), *flags, "--out", str(runs[name])], {}] for name, flags in ONE_PROCESS_RUNS.items()]
    for name, (status, err) in run_in_one_process(cases, root, _devices(4), timeout=900).items():
        assert status == 0, f"{name}: {err[-3000:]}"
    return runs


@pytest.fixture(scope="module")
def one_device(one_process_runs):
    run_dir = one_process_runs["one-device"]
    return json.loads((run_dir / "metrics.json").read_text()), _weights(run_dir)


def test_a_run_trained_on_jax_is_saved_with_the_very_weights_it_trained(one_process_runs, one_device):
    """The one-device run (`--strategy default`), read here on TensorFlow: the run folder is backend-neutral."""
    metrics, _ = one_device
    assert metrics["backend"] == "jax" and metrics["steps"] == STEPS
    assert all(np.isfinite(record["loss"]) for record in metrics["history"])
    assert weights_digest(load_run_model(one_process_runs["one-device"]).pretrainer) == metrics["weights_sha256"]


# The devices each sum the gradients of their rows, then all-reduce them: the same numbers added in
# another order, so float32 rounding (~1e-7 relative per operation) is all that differs. Over 20 AdamW
# steps at 1e-3 that stays below 1e-5 in weights of size ~1 (measured: 1.2e-7), while a wrong split (a
# device or process training on rows not its own, a batch counted twice) moves them by ~1e-3.
TOLERANCE = 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("name, devices, model_axis", [("mirrored", 4, 1), ("model-parallel", 2, 2)],
                         ids=["mirrored", "model-parallel"])
def test_four_devices_train_as_one_device_with_the_same_global_batch(one_process_runs, one_device, name, devices,
                                                                     model_axis):
    reference_metrics, reference = one_device
    run_dir = one_process_runs[name]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["devices"]) == ("mirrored", devices)
    # Split over the model axis: in each of bert-tiny's 2 blocks the query, key, value, attention output
    # and both feed-forward kernels, and the query, key, value and first feed-forward biases; the token
    # table too where the axis divides its rows (else it is replicated).
    vocab_size = load_run_model(run_dir).tokenizer.vocab_size
    expected = 0 if model_axis == 1 else 2 * 10 + (vocab_size % model_axis == 0)
    assert metrics["model_parallel"] == {"devices": model_axis, "split_weights": expected}
    np.testing.assert_allclose([r["loss"] for r in metrics["history"]],
                               [r["loss"] for r in reference_metrics["history"]], rtol=TOLERANCE)
    assert _gap(run_dir, reference) < TOLERANCE
    assert metrics["history"][-1]["loss"] < metrics["history"][0]["loss"]


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _processes(argv, count=2, devices=2):
    address = f"127.0.0.1:{_free_port()}"
    return [_bertology(argv, {**_devices(devices), "KERAS_DISTRIBUTION_JOB_ADDRESSES": address,
                              "KERAS_DISTRIBUTION_NUM_PROCESSES": str(count),
                              "KERAS_DISTRIBUTION_PROCESS_ID": str(index)})
            for index in range(count)]


@pytest.mark.slow
def test_a_process_killed_mid_run_stops_the_other_which_resumes_to_the_uninterrupted_weights(one_device, tmp_path):
    """Process 1 killed after the checkpoint of step 6: process 0 sees it go silent and stops within the
    bound with one line (exit 2), never waiting in a collective; both started again, the run resumes from
    its newest checkpoint and ends with the weights of the uninterrupted one-device run. The two processes
    of 2 CPU devices each (gloo collectives) train as that one process: each builds the global batches and
    feeds its own rows; process 0 alone writes the run and the export, the other says its weights."""
    import time

    from keras_bertology.engine.checkpoints import RunCheckpoints
    from keras_bertology.engine.keras_distribution import SILENCE_BOUND_S

    _, reference = one_device
    run_dir = tmp_path / "run"
    argv = [*RUN, "--strategy", "multiworker", "--log-every", "2", "--out", run_dir, "--resume"]
    chief, other = _processes(argv)
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "step-0000006").is_dir() and chief.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert chief.poll() is None, chief.communicate()[1][-3000:]
    other.kill()
    killed = time.monotonic()
    _, err = chief.communicate(timeout=600)
    other.communicate()
    assert time.monotonic() - killed < SILENCE_BOUND_S + 15
    assert chief.returncode == 2 and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("bertology: error: process 1 of the job stopped")
    assert 6 <= RunCheckpoints(run_dir).latest()[1] < STEPS

    # The job started again, exporting this time (free on resume).
    export_dir = tmp_path / "export"
    outputs = _finish(*_processes([*argv[:argv.index("--no-export")], *argv[argv.index("--no-export") + 1:],
                                   "--export", export_dir]))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["devices"], metrics["steps"]) == ("multiworker", 4, STEPS)
    assert [r["step"] for r in metrics["history"]] == list(range(2, STEPS + 1, 2))
    assert _gap(run_dir, reference) < TOLERANCE
    assert f"weights sha256 {metrics['weights_sha256']}" in outputs[1][0]
    assert (export_dir / "saved_model.pb").is_file() and metrics["fill_mask"]  # ranked by the export's `mlm`
    # TensorFlow's SavedModel of the JAX-trained run serves the states its Keras model computes.
    run = load_run_model(run_dir)
    rng = np.random.default_rng(0)
    inputs = {"token_ids": rng.integers(5, run.tokenizer.vocab_size, (3, 32)).astype("int32"),
              "segment_ids": np.repeat([[0] * 16 + [1] * 16], 3, axis=0).astype("int32"),
              "padding_mask": np.ones((3, 32), "int32")}
    inputs["padding_mask"][1, 20:] = 0
    served = tf.saved_model.load(str(export_dir)).signatures["serve_ids"](
        **{name: tf.constant(value) for name, value in inputs.items()})
    np.testing.assert_allclose(served["sequence_output"].numpy(),
                               run.backbone.predict(inputs, verbose=0)["sequence_output"], atol=1e-5)


def test_each_process_reads_its_own_shards_or_feeds_its_own_rows_of_each_global_batch():
    """Process 1 of 2 asks the shards' reader for input pipeline 1 of 2, or keeps rows 4-7 of each global batch
    of 8 that every process builds (test_prepare.py checks which shards a pipeline reads)."""
    from keras_bertology.engine.keras_distribution import KerasDistribution

    distribution = object.__new__(KerasDistribution)  # what jax.process_index() and process_count() give
    distribution.process_index, distribution.process_count = 1, 2
    contexts = []
    distribution.process_batches(None, 8, own_dataset=contexts.append)
    assert [(context.input_pipeline_id, context.num_input_pipelines) for context in contexts] == [(1, 2)]
    ids = tf.range(16)
    batches = tf.data.Dataset.from_tensor_slices(({"token_ids": ids}, -ids)).batch(8)  # (inputs, targets)
    kept = [(x["token_ids"].numpy().tolist(), y.numpy().tolist())
            for x, y in distribution.process_batches(batches, 8)]
    assert kept == [([4, 5, 6, 7], [-4, -5, -6, -7]), ([12, 13, 14, 15], [-12, -13, -14, -15])]


# `make test-all`: which shards a process reads is the test above's and test_prepare.py's; two JAX processes
# training as one is the killed-process test's.
@pytest.mark.extended
def test_two_processes_each_read_their_own_share_of_prepared_shards(tmp_path):
    """From `bertology prepare` shards each process reads every other shard and feeds those rows; the two
    end with the same weights (process 1 prints their digest, process 0 records it)."""
    from keras_bertology.prepare.options import PrepareOptions
    from keras_bertology.prepare.pipeline import prepare

    prepare(PrepareOptions(out=str(tmp_path / "data"), model="roberta", preset="roberta-tiny", seq_len=32,
                           corpus=PLAYS, vocab_size=400, shards=2, workers=1, verbose=0))
    run_dir = tmp_path / "run"
    outputs = _finish(*_processes(["pretrain", "--backend", "jax", "--data", tmp_path / "data", "--preset",
                                   "roberta-tiny", "--steps", "4", "--log-every", "2", "--batch-size", "8",
                                   "--strategy", "multiworker", "--out", run_dir, "--no-export"]))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["devices"], metrics["steps"]) == ("multiworker", 4, 4)
    assert f"weights sha256 {metrics['weights_sha256']}" in outputs[1][0]
    assert all(np.isfinite(record["loss"]) for record in metrics["history"])
