"""Pretraining under tf.distribute: MirroredStrategy on two logical CPUs and two workers on localhost.

Each case runs in fresh processes: logical devices and cluster settings must
be fixed before TensorFlow starts.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from keras_bertology.data.corpus import default_corpus_paths

# One step sequence trained twice in one process: on the default strategy, then on MirroredStrategy over two
# logical CPUs with the same global batch. Dropout is 0: each replica draws its own masks.
MIRRORED = """
import json, sys
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.models.registry import get_family
from keras_bertology.training.distributed_fit import fit
from keras_bertology.training.optimization import bert_adamw
from keras_bertology.training.strategy import make_strategy

family = get_family("bert")
tokenizer = type("T", (), dict(vocab_size=200, pad_id=0, cls_id=2, sep_id=3, mask_id=4, special_ids=[0, 1, 2, 3, 4],
                               word_start_table=np.ones(200, bool)))()
rng = np.random.default_rng(0)
instances = {"token_ids": rng.integers(5, 200, (64, 16)).astype("int32"),
             "segment_ids": np.zeros((64, 16), "int32"), "nsp_labels": rng.integers(0, 2, 64).astype("int32")}
instances["token_ids"][:, 0], instances["token_ids"][:, -1] = 2, 3

def train(strategy_name):
    strategy = make_strategy(strategy_name)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        backbone = family.backbone_cls(**family.backbone_config("bert-tiny", vocab_size=200, dropout=0.0,
                                                                    attention_dropout=0.0))
        model = family.build_pretrainer(backbone, None, "bert-tiny")
        model.compile(optimizer=bert_adamw(1e-3, 6))
    data = make_dataset(instances, 16, masker=family.build_masker(tokenizer, 3), seed=1).map(model.split_features)
    losses = []
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))
    fit(model, data, strategy, global_batch=16, epochs=6, initial_epoch=0, steps_per_epoch=1,
        callbacks=[record], verbose=0)
    return strategy.num_replicas_in_sync, losses, [np.asarray(v) for v in model.weights]

single, mirrored = train("default"), train("mirrored")
assert (single[0], mirrored[0]) == (1, 2), (single[0], mirrored[0])
weight_gap = max(float(np.abs(a - b).max()) for a, b in zip(single[2], mirrored[2]))
moved = max(float(np.abs(a - b).max()) for a, b in zip(single[2], train("default")[2]))
print(json.dumps({"single": single[1], "mirrored": mirrored[1], "weight_gap": weight_gap, "rerun_gap": moved}))
"""


@pytest.mark.slow
def test_mirrored_strategy_on_two_cpus_matches_one_device_with_the_same_global_batch():
    result = subprocess.run([sys.executable, "-c", MIRRORED], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # The two replicas each sum the gradients of half the batch and all-reduce them: the same numbers
    # added in another order, so float32 rounding (~1e-7 relative per operation) is all that differs.
    # Over 6 AdamW steps of lr <= 1e-3 that stays below 1e-5 in every weight, while a wrong split (each
    # replica training on the whole batch, or on the other half's labels) moves weights by ~1e-3.
    np.testing.assert_allclose(report["mirrored"], report["single"], rtol=1e-5)
    assert report["weight_gap"] < 1e-5, report
    assert report["rerun_gap"] == 0.0  # the single-device run itself is deterministic
    assert report["single"][-1] < report["single"][0]  # and it trains


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@pytest.mark.slow
def test_two_workers_on_localhost_pretrain_to_identical_weights(tmp_path):
    """MultiWorkerMirroredStrategy through `bertology pretrain --strategy multiworker`: the chief writes the
    run folder and the export; the other worker only trains. Both end with bit-identical weights."""
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    command = [sys.executable, "-m", "keras_bertology.cli", "pretrain", "--model", "bert", "--preset", "bert-tiny",
               "--corpus", *[str(p) for p in default_corpus_paths()[:2]], "--steps", "6", "--log-every", "3",
               "--batch-size", "8", "--seq-len", "32", "--vocab-size", "400", "--strategy", "multiworker",
               "--out", str(tmp_path / "run"), "--export", str(tmp_path / "export")]
    processes = []
    for index in range(2):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(config))
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 6 and (tmp_path / "export" / "saved_model.pb").is_file()
    assert f"weights sha256 {metrics['weights_sha256']}" in outputs[1][0]
