"""Pretraining with model.fit under tf.distribute.MirroredStrategy on two logical CPUs."""

import subprocess
import sys

import pytest

SCRIPT = """
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_bertology.models import BertBackbone, BertPretrainer
from keras_bertology.training.strategy import make_strategy
strategy = make_strategy("mirrored")
assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
with strategy.scope():
    model = BertPretrainer(BertBackbone(vocab_size=50, num_layers=1, num_heads=2, hidden_size=16,
                                        intermediate_size=32, max_positions=16))
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
rng = np.random.default_rng(0)
features = {"token_ids": rng.integers(5, 50, (64, 16)).astype("int32"),
            "segment_ids": np.zeros((64, 16), "int32"), "padding_mask": np.ones((64, 16), "int32"),
            "mask_positions": rng.integers(0, 16, (64, 3)).astype("int32"),
            "mask_ids": rng.integers(5, 50, (64, 3)).astype("int32"),
            "mask_weights": np.ones((64, 3), "float32"), "nsp_labels": rng.integers(0, 2, 64).astype("int32")}
data = tf.data.Dataset.from_tensor_slices(features).repeat().batch(16, drop_remainder=True)
history = model.fit(data.map(model.split_features), steps_per_epoch=8, epochs=3, verbose=0).history
assert history["mlm_loss"][-1] < history["mlm_loss"][0], history
print("ok", history["mlm_loss"])
"""


@pytest.mark.slow
def test_fit_under_mirrored_strategy_on_two_logical_cpus():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")
