"""Layer-wise learning-rate decay: ELECTRA's factors, applied per variable by the optimizer, for every encoder."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.models import BertBackbone, BertPretrainer
from keras_bertology.models.albert.backbone import AlbertBackbone
from keras_bertology.engine.optimization import LayerwiseAdamW, WarmupLinearDecay, bert_adamw, layerwise_decay


def _bert():
    keras.utils.set_random_seed(0)
    backbone = BertBackbone(vocab_size=60, num_layers=3, num_heads=2, hidden_size=16, intermediate_size=32,
                            max_positions=16, embedding_size=8, dropout=0.0, attention_dropout=0.0)
    return backbone, BertPretrainer(backbone)


def test_factors_follow_electra():
    backbone, _ = _bert()
    factors = layerwise_decay(backbone, 0.5)
    assert factors["embeddings/token_embedding/embeddings"] == 0.5 ** 5  # N + 2
    assert factors["embedding_projection/kernel"] == 0.5 ** 5
    assert factors["encoder_block_0/attention/query/kernel"] == 0.5 ** 4  # N + 1 - 0
    assert factors["encoder_block_2/output_norm/gamma"] == 0.5 ** 2
    assert factors["pooler/kernel"] == 0.5
    assert set(factors) == {v.path for v in backbone.trainable_variables}
    albert = AlbertBackbone(vocab_size=60, num_layers=4, num_heads=2, hidden_size=16, intermediate_size=32,
                            embedding_size=8)
    shared = layerwise_decay(albert, 0.5)
    assert shared["embeddings/token_embedding/embeddings"] == 0.5 ** 6
    assert shared["encoder/group_0_block_0/attention/query/kernel"] == 0.5  # one block for every layer
    from keras_bertology.models.xlnet import XLNetBackbone

    xlnet = XLNetBackbone(vocab_size=60, num_layers=3, num_heads=2, hidden_size=16, intermediate_size=32)
    streams = layerwise_decay(xlnet, 0.5)
    assert streams["encoder/word_embedding/embeddings"] == streams["encoder/mask_embedding"] == 0.5 ** 5
    assert streams["encoder/layer_0/block/attention/query/kernel"] == 0.5 ** 4
    assert streams["encoder/layer_2/relative/position_kernel"] == 0.5 ** 2
    assert streams["encoder/relative_biases"] == 0.5  # one variable for all layers
    assert set(streams) == {v.path for v in xlnet.trainable_variables}


def _first_step_sizes(optimizer, model):
    """|change| of each variable after one step: Adam's first step is lr x sign(gradient) per element."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 60, (4, 12)).astype("int32")
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids),
         "mask_positions": np.tile([1, 4, 7], (4, 1)).astype("int32")}
    before = [v.numpy().copy() for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        loss = tf.reduce_sum(out["mlm"] ** 2) + tf.reduce_sum(out["nsp"] ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return {v.path: np.abs(v.numpy() - b).max() for v, b in zip(model.trainable_variables, before)}


def test_each_variable_steps_at_its_own_rate():
    """Against the same first step without factors: every variable's step shrinks by exactly its factor."""
    backbone, model = _bert()
    factors = layerwise_decay(backbone, 0.5)
    initial = [v.numpy().copy() for v in model.trainable_variables]
    plain = _first_step_sizes(LayerwiseAdamW(learning_rate=1e-2, weight_decay=0.0, epsilon=1e-12), model)
    for variable, value in zip(model.trainable_variables, initial):
        variable.assign(value)
    decayed = _first_step_sizes(LayerwiseAdamW(lr_multipliers=factors, learning_rate=1e-2, weight_decay=0.0,
                                               epsilon=1e-12), model)
    for path, size in decayed.items():
        assert size == pytest.approx(plain[path] * factors.get(path, 1.0), rel=1e-3), path
    assert plain["encoder_block_1/intermediate/kernel"] == pytest.approx(1e-2, rel=1e-3)  # Adam's first step
    assert decayed["mlm_head/transform/kernel"] == pytest.approx(1e-2, rel=1e-3)  # heads keep the full rate


def test_optimizer_round_trips_with_its_factors(tmp_path):
    backbone, model = _bert()
    model.compile(optimizer=bert_adamw(1e-3, 100, lr_multipliers=layerwise_decay(backbone, 0.8)))
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(model.optimizer))
    assert isinstance(restored, LayerwiseAdamW)
    assert restored.lr_multipliers == layerwise_decay(backbone, 0.8)


def test_without_factors_each_traced_step_equals_keras_adamw_to_the_bit():
    """The optimizer's own update (step scalars made once, weight decay but not on norms and biases) against
    Keras's AdamW with the same schedule, clipping and exclusions, over steps whose rate rises and falls."""
    rng = np.random.default_rng(0)
    shapes = {"dense_kernel": (8, 6), "dense_bias": (6,), "norm_gamma": (6,), "other_kernel": (6, 3)}
    initial = [rng.normal(size=shape).astype("float32") for shape in shapes.values()]
    steps = 6
    gradients = [[rng.normal(scale=3.0, size=shape).astype("float32") for shape in shapes.values()]
                 for _ in range(steps)]

    def trained(optimizer):
        variables = [keras.Variable(value, name=name) for name, value in zip(shapes, initial)]
        optimizer.build(variables)
        step = tf.function(lambda grads: optimizer.apply(grads, variables))
        for grads in gradients:
            step([tf.constant(g) for g in grads])
        return [v.numpy() for v in variables]

    ours = trained(bert_adamw(1e-2, steps, warmup_fraction=0.5))
    reference = keras.optimizers.AdamW(learning_rate=WarmupLinearDecay(1e-2, steps // 2, steps), weight_decay=0.01,
                                       beta_1=0.9, beta_2=0.999, epsilon=1e-6, global_clipnorm=1.0)
    reference.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    for name, got, want, before in zip(shapes, ours, trained(reference), initial):
        np.testing.assert_array_equal(got, want, err_msg=name)
        assert (got != before).all(), name  # every weight moved
