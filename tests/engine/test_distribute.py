"""Pretraining under tf.distribute: MirroredStrategy on two logical CPUs and two workers on localhost.

Each case runs in fresh processes: logical devices and cluster settings must
be fixed before TensorFlow starts.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.engine.checkpoints import RunCheckpoints

from forked_python import run_python

# One step sequence trained twice in one process: on the default strategy, then on MirroredStrategy over two
# logical CPUs with the same global batch. Dropout is 0: each replica draws its own masks. XLNet keeps
# Transformer-XL memory per replica (bi_data is off: with it, a replica's rows are laid out for its own
# forward and backward halves, so the batches of one device differ; tests/models/xlnet/test_xlnet_data.py checks that);
# so does Transformer-XL, with the count of each row's filled memory slots.
MIRRORED = """
import json, os, sys
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.models.registry import get_family
from keras_bertology.engine.distributed_fit import fit
from keras_bertology.engine.model_batches import micro_batches
from keras_bertology.engine.optimization import make_optimizer
from keras_bertology.engine.checkpoints import RunCheckpoints
from keras_bertology.engine.strategy import make_strategy

name, preset = sys.argv[1], sys.argv[2]
family = get_family(name)
tokenizer = type("T", (), dict(vocab_size=200, pad_id=0, cls_id=2, sep_id=3, mask_id=4, special_ids=[0, 1, 2, 3, 4],
                               word_start_table=np.ones(200, bool)))()
rng = np.random.default_rng(0)
GLOBAL_BATCH, STEPS = 16, 6
options = {key: value for key, value in (("mem_len", 8), ("bi_data", 0)) if key in family.option_values()} or None

def instances(replicas):
    if family.data.stream_batches:  # contiguous text: row r of each batch continues row r, for 8 batches
        documents = [[rng.integers(5, 200, 12).astype("int32") for _ in range(8)] for _ in range(12)]
        return family.build_instances(documents, 16, dict(cls_id=2, sep_id=3, pad_id=0), np.random.default_rng(0),
                                      options=options, batch_size=GLOBAL_BATCH, replicas=replicas)
    ids = rng.integers(5, 200, (64, 16)).astype("int32")
    ids[:, 0], ids[:, -1] = 2, 3
    return {"token_ids": ids, "segment_ids": np.zeros((64, 16), "int32"),
            "nsp_labels": rng.integers(0, 2, 64).astype("int32")}

# (replicas, losses, trainable weights) after STEPS steps (updates, of `accumulate` micro-batches each); with
# `stop_at`, the run is checkpointed there and goes on from the checkpoint, reloaded as a resumed run does.
def train(strategy_name, stop_at=None, checkpoints=None, accumulate=1):
    global rng
    rng = np.random.default_rng(0)
    strategy = make_strategy(strategy_name)
    replicas = strategy.num_replicas_in_sync
    keras.utils.set_random_seed(0)
    with strategy.scope():
        dropouts = {"dropout": 0.0} if family.data.stream_batches else {"dropout": 0.0, "attention_dropout": 0.0}
        backbone = family.backbone_cls(**family.backbone_config(preset, vocab_size=200, **dropouts))
        model = family.build_pretrainer(backbone, options, preset, GLOBAL_BATCH // replicas)
        model.compile(optimizer=make_optimizer("adamw", 1e-3, STEPS, accumulate=accumulate))
    masker = family.build_masker(tokenizer, 3, options=options, replicas=replicas)
    rows = instances(replicas)
    losses = []
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))
    start = 0
    for stop in ([stop_at] if stop_at else []) + [STEPS]:
        if start:
            checkpoints.save(model, start, [])
            with strategy.scope():
                model = checkpoints.load_model()[0]
        data = make_dataset(rows, GLOBAL_BATCH, masker=masker, seed=1, shuffle=not family.data.stream_batches,
                            start_step=start).map(model.split_features)
        fit(model, micro_batches(data, GLOBAL_BATCH, accumulate), strategy, global_batch=GLOBAL_BATCH // accumulate,
            epochs=stop, initial_step=start * accumulate, steps_per_epoch=accumulate, callbacks=[record], verbose=0)
        start = stop
    return replicas, losses, [np.asarray(v) for v in model.trainable_weights]

def gap(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(a[2], b[2]))

def one_device():  # the one-device run, computed once per family and preset: argv[5] keeps it for the next case
    if os.path.exists(sys.argv[5]):
        saved = np.load(sys.argv[5])
        return 1, saved["losses"].tolist(), [saved[f"w{i}"] for i in range(len(saved.files) - 1)]
    single = train("default")
    np.savez(sys.argv[5] + ".tmp.npz", losses=np.array(single[1]), **{f"w{i}": w for i, w in enumerate(single[2])})
    os.replace(sys.argv[5] + ".tmp.npz", sys.argv[5])
    return single

single = one_device()
if sys.argv[4] == "accumulate":  # updates of two micro-batches of 8, each shared by the two replicas, resumed
    mirrored = train("mirrored", 3, RunCheckpoints(sys.argv[3]), accumulate=2)  # at step 3 from a checkpoint
else:  # (one mirrored strategy per process: another's collectives would take the same instance keys)
    mirrored = train("mirrored")
assert (single[0], mirrored[0]) == (1, 2), (single[0], mirrored[0])
report = {"single": single[1], "mirrored": mirrored[1], "weight_gap": gap(single, mirrored)}
if sys.argv[4] == "resume":  # a memory: each replica's own rows must survive a checkpoint
    report["resumed_gap"] = gap(mirrored, train("mirrored", 3, RunCheckpoints(sys.argv[3])))
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def one_device_runs(tmp_path_factory):
    """A folder where the first mirrored case of a preset keeps its one-device run (losses and weights) for the
    others: BERT-Tiny's cases share one."""
    return tmp_path_factory.mktemp("one-device-runs")


# Resumed too: Transformer-XL's run, whose memory is the layer XLNet's query stream keeps its own in
# (SegmentMemory), so one family's checkpoint round trip covers both.
@pytest.mark.slow
# XLNet keeps its memory in Transformer-XL's SegmentMemory: its case is `make test-all`'s. BERT's plain case is
# `make test-all`'s too: its accumulated case trains the same replicas, and Transformer-XL's trains without
# accumulation.
@pytest.mark.parametrize("name,preset,resume", [
    pytest.param("bert", "bert-tiny", "once", marks=pytest.mark.extended), ("bert", "bert-tiny", "accumulate"),
    pytest.param("xlnet", "xlnet-tiny", "once", marks=pytest.mark.extended),
    ("transformer-xl", "transformer-xl-tiny", "resume")])
def test_mirrored_strategy_on_two_cpus_matches_one_device_with_the_same_global_batch(name, preset, resume,
                                                                                     tmp_path, one_device_runs):
    result = run_python([sys.executable, "-c", MIRRORED, name, preset, str(tmp_path), resume,
                         str(one_device_runs / f"{preset}.npz")], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # The two replicas each sum the gradients of half the batch and all-reduce them: the same numbers
    # added in another order, so float32 rounding (~1e-7 relative per operation) is all that differs.
    # Over 6 AdamW steps of lr <= 1e-3 that stays below 1e-5 in every weight (updates of two micro-batches
    # too: summed over micro-batches and replicas, clipped once), while a wrong split (each
    # replica training on the whole batch, or on the other half's labels; XLNet memory from the other
    # replica's rows) moves weights by ~1e-3.
    np.testing.assert_allclose(report["mirrored"], report["single"], rtol=1e-5)
    assert report["weight_gap"] < 1e-5, report
    assert report["single"][-1] < report["single"][0]  # and it trains
    if resume == "resume":  # checkpointed at step 3 with each replica's memory, reloaded: the same run
        assert report["resumed_gap"] == 0.0, report


# Accumulation's mean, seen in the optimizer's state: a tiny regression whose gradients stay far below the
# clip at norm 1 (above it, clipping makes a sum of the micro-batches' gradients and their mean the same
# update, and Adam's step barely depends on the gradient's scale, so weights cannot tell them apart; Adam's
# first moment, linear in the gradient, can). Two updates of a global batch of 8, on one device whole, on
# one device in two micro-batches of 4, and on two replicas in two micro-batches of 4 (the library's own
# cross-replica accumulation, OptimizerAdditions._accumulate_or_update).
ACCUMULATED_MOMENTS = """
import json
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_bertology.engine.distributed_fit import fit
from keras_bertology.engine.model_batches import micro_batches
from keras_bertology.engine.optimization import make_optimizer
from keras_bertology.engine.strategy import make_strategy

GLOBAL_BATCH, UPDATES = 8, 2
rng = np.random.default_rng(0)
features = rng.normal(size=(GLOBAL_BATCH * UPDATES, 4)).astype("float32")
targets = (0.05 * rng.normal(size=(GLOBAL_BATCH * UPDATES, 3))).astype("float32")

def train(strategy_name, accumulate):
    strategy = make_strategy(strategy_name)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, kernel_initializer="zeros")])
        model.compile(optimizer=make_optimizer("adamw", 1e-3, UPDATES, accumulate=accumulate), loss="mse")
    with tf.GradientTape() as tape:  # the first update's gradient, of the whole first batch
        loss = model.compute_loss(y=targets[:GLOBAL_BATCH], y_pred=model(features[:GLOBAL_BATCH]))
    norm = float(tf.linalg.global_norm(tape.gradient(loss, model.trainable_weights)))
    data = tf.data.Dataset.from_tensor_slices((features, targets)).batch(GLOBAL_BATCH)
    fit(model, micro_batches(data, GLOBAL_BATCH, accumulate), strategy, global_batch=GLOBAL_BATCH // accumulate,
        epochs=UPDATES, initial_step=0, steps_per_epoch=accumulate, callbacks=[], verbose=0)
    optimizer = model.optimizer
    return {"replicas": strategy.num_replicas_in_sync, "updates": int(optimizer.iterations), "first_norm": norm,
            "m": [np.asarray(m).tolist() for m in optimizer._momentums],
            "v": [np.asarray(v).tolist() for v in optimizer._velocities]}

print(json.dumps({"whole": train("default", 1), "accumulated": train("default", 2),
                  "mirrored": train("mirrored", 2)}))
"""


def test_accumulated_updates_average_the_micro_batches_on_one_device_and_across_replicas():
    """Accumulating two micro-batches gives Adam the moments of one update on the whole batch: their
    gradients' mean, not their sum (which would double the first moment and quadruple the second)."""
    result = run_python([sys.executable, "-c", ACCUMULATED_MOMENTS], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    whole = report["whole"]
    assert 2 * whole["first_norm"] < 1.0, whole  # even a sum of the two micro-batches would not be clipped
    for name in ("accumulated", "mirrored"):
        run = report[name]
        assert (run["replicas"], run["updates"]) == (2 if name == "mirrored" else 1, 2), (name, run)
        for moment in ("m", "v"):  # float32 rounding of the same sums in another order (~1e-7 relative)
            for got, expected in zip(run[moment], whole[moment]):
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-12, err_msg=f"{name} {moment}")


FINETUNE_MIRRORED = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from pathlib import Path
from keras_bertology.finetune.options import FinetuneOptions
from keras_bertology.finetune.run import finetune
work, run = Path(sys.argv[1]), sys.argv[2]
data = work / "data"
data.mkdir()
for split, rows in (("train", 42), ("test", 12)):
    lines = ["text\tlabel"] + [f"{'love and joy' if i % 2 else 'war and grief'} line {i}\t{i % 2}" for i in range(rows)]
    (data / f"{split}.tsv").write_text("\\n".join(lines) + "\\n")
results = finetune(FinetuneOptions(task=str(data), from_dir=run, epochs=1, batch_size=8, seq_len=32,
                                   learning_rate=1e-3, strategy="mirrored", out=str(work / "ft"),
                                   export=str(work / "ft-export"), verbose=0))
served = tf.saved_model.load(str(work / "ft-export"))
print(json.dumps({"train": results["examples"]["train"], "step_losses": len(results["step_losses"]),
                  "accuracy": results["test"]["accuracy"], "recipe": results["recipe"],
                  "served": [x.decode() for x in served.classify(tf.constant(["love and joy line 99"]))["label"].numpy()]}))
"""


@pytest.mark.slow
def test_fine_tuning_under_mirrored_strategy_on_two_cpus(two_worker_run, tmp_path):
    """Two replicas share each global batch of 8; the last partial batch of an epoch is dropped. The encoder
    is the one two workers pretrained."""
    result = run_python([sys.executable, "-c", FINETUNE_MIRRORED, str(tmp_path), str(two_worker_run[0] / "run")],
                        timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["recipe"]["strategy"] == "mirrored"
    assert report["step_losses"] == report["train"] // 8  # whole global batches only
    assert 0.0 <= report["accuracy"] <= 1.0 and report["served"][0] in ("0", "1")


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _worker_command(tmp_path, steps, log_every):
    return [sys.executable, "-m", "keras_bertology.cli", "pretrain", "--model", "bert", "--preset", "bert-tiny",
            "--corpus", *[str(p) for p in default_corpus_paths()[:2]], "--steps", str(steps),
            "--log-every", str(log_every), "--batch-size", "8", "--seq-len", "32", "--vocab-size", "400",
            "--dupe-factor", "1", "--strategy", "multiworker", "--out", str(tmp_path / "run"), "--resume",
            "--no-export"]


def _start_workers(command, workers):
    processes = []
    for index in range(len(workers)):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(config))
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return processes


def _finish(processes):
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
    return outputs


@pytest.fixture(scope="module")
def two_worker_run(tmp_path_factory):
    """(folder, outputs of both workers) of a 6-step RoBERTa-Tiny pretraining by two workers on localhost, from
    the shards of `bertology prepare` (the killed-worker test below trains from --corpus)."""
    from keras_bertology.prepare.options import PrepareOptions
    from keras_bertology.prepare.pipeline import prepare

    tmp_path = tmp_path_factory.mktemp("two-workers")
    prepare(PrepareOptions(out=str(tmp_path / "data"), model="roberta", preset="roberta-tiny", seq_len=32,
                           corpus=[str(p) for p in default_corpus_paths()[:2]], vocab_size=400, shards=2, workers=1,
                           verbose=0))
    command = [sys.executable, "-m", "keras_bertology.cli", "pretrain", "--data", str(tmp_path / "data"),
               "--preset", "roberta-tiny", "--steps", "6", "--log-every", "3", "--batch-size", "8",
               "--strategy", "multiworker", "--out", str(tmp_path / "run"), "--export", str(tmp_path / "export")]
    outputs = _finish(_start_workers(command, [f"127.0.0.1:{p}" for p in _free_ports(2)]))
    return tmp_path, outputs


@pytest.mark.slow
def test_two_workers_on_localhost_pretrain_to_identical_weights(two_worker_run):
    """MultiWorkerMirroredStrategy through `bertology pretrain --data ... --strategy multiworker`: each worker
    reads every other shard (its input context's share) and builds its half of each global batch; the chief
    writes the run folder and the export, the other worker only trains. Both end with bit-identical weights."""
    tmp_path, outputs = two_worker_run
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 6 and (tmp_path / "export" / "saved_model.pb").is_file()
    assert (metrics["strategy"], metrics["devices"]) == ("multiworker", 2)  # as on JAX
    assert f"weights sha256 {metrics['weights_sha256']}" in outputs[1][0]


@pytest.mark.slow
def test_a_worker_killed_mid_run_stops_the_job_which_resumes_to_completion(tmp_path):
    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    command = _worker_command(tmp_path, 8, 2)
    chief, other = _start_workers(command, workers)
    deadline = time.monotonic() + 300
    while _newest_step(tmp_path / "run") < 3 and chief.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert chief.poll() is None, chief.communicate()[1][-3000:]
    other.send_signal(signal.SIGKILL)
    _, err = chief.communicate(timeout=600)
    other.communicate()
    assert chief.returncode == 2, err[-3000:]  # the chief reports the lost worker in one line, no traceback
    assert "another worker of the cluster stopped" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert 3 <= _newest_step(tmp_path / "run") < 8

    outputs = _finish(_start_workers(command, [f"127.0.0.1:{p}" for p in _free_ports(2)]))  # the job restarted
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 8 and [r["step"] for r in metrics["history"]] == list(range(1, 9))  # windows of 1
    assert f"weights sha256 {metrics['weights_sha256']}" in outputs[1][0]


def _newest_step(run_dir):
    latest = RunCheckpoints(run_dir).latest()
    return latest[1] if latest else 0


def test_auto_picks_a_tpu_only_when_the_runtime_announces_one(monkeypatch):
    import pathlib

    from keras_bertology.engine import strategy

    for name in ("COLAB_TPU_ADDR", "TPU_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pathlib.Path, "glob", lambda self, pattern: iter(()))  # no /dev/accel*, /dev/vfio
    assert not strategy.tpu_reachable() and strategy.auto_strategy_name() == "default"  # no GPU here either
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
    assert strategy.tpu_reachable() and strategy.auto_strategy_name() == "tpu"
    assert strategy._tpu_address() == "grpc://10.0.0.2:8470"
    monkeypatch.delenv("COLAB_TPU_ADDR")
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert strategy.auto_strategy_name() == "tpu" and strategy._tpu_address() == "my-tpu"


def test_unusable_strategies_are_refused_with_one_clear_error(monkeypatch):
    from keras_bertology.errors import ConfigError
    from keras_bertology.engine.distributed_fit import replica_batch_size
    from keras_bertology.engine.strategy import make_strategy

    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}')
    with pytest.raises(ConfigError, match="TF_CONFIG must be JSON like"):
        make_strategy("multiworker")
    monkeypatch.setenv("TF_CONFIG", "not json")
    with pytest.raises(ConfigError, match="TF_CONFIG must be JSON like"):
        make_strategy("multiworker")
    three = type("ThreeReplicas", (), {"num_replicas_in_sync": 3})()
    with pytest.raises(ConfigError, match="--batch-size 32 .* multiple of the 3 replicas"):
        replica_batch_size(32, three)
    assert replica_batch_size(33, three) == 11


def test_a_tpu_strategy_without_a_tpu_is_refused_in_one_line(monkeypatch):
    """Without a TPU, `--strategy tpu` says so; a TPU announced but not initialised gives the first line of
    TensorFlow's error, not its dump of kernels and graph nodes."""
    import pathlib

    from keras_bertology.errors import ConfigError
    from keras_bertology.engine import strategy

    for name in ("COLAB_TPU_ADDR", "TPU_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pathlib.Path, "glob", lambda self, pattern: iter(()))
    with pytest.raises(ConfigError, match="no TPU here") as refused:
        strategy.make_strategy("tpu")
    assert "\n" not in str(refused.value)
    monkeypatch.setattr(strategy, "tpu_reachable", lambda: True)  # announced, but "local" has none: TF's error
    with pytest.raises(ConfigError, match="no TPU could be initialised at local") as refused:
        strategy.make_strategy("tpu")
    assert "\n" not in str(refused.value)
