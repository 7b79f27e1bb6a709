"""Objectives are data: a new one is declared, and compile, split_features and metrics follow."""

import keras
import numpy as np
import pytest

from keras_bertology.layers import MaskedLMHead, PooledClassificationHead
from keras_bertology.models import BertBackbone
from keras_bertology.models.bert.pretrainer import MLM
from keras_bertology.models.pretrainer import Objective, Pretrainer
from keras_bertology.models.task_models import SequenceClassifier

ORDER = Objective("order", label_key="order_labels", loss_weight=2.0)


class OrderPretrainer(Pretrainer):
    """A pretrainer with an objective nothing in the library knows: sentence order from the pooler."""

    def __init__(self, backbone):
        inputs = dict(backbone.input)
        encoded = backbone(inputs)
        order = PooledClassificationHead(2, name="order_head")(encoded["pooled_output"])
        super().__init__(backbone, inputs, {"order": order}, [ORDER])


def _features(rows=32, length=8, seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, 50, (rows, length)).astype("int32")
    labels = rng.integers(0, 2, rows).astype("int32")
    token_ids[:, 1] = np.where(labels == 1, 7, 9)  # the label is readable from the input
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": np.ones_like(token_ids), "order_labels": labels}


def _backbone():
    return BertBackbone(vocab_size=50, num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32,
                        max_positions=16, dropout=0.0, attention_dropout=0.0)


def test_a_declared_objective_trains_and_reports_its_metrics():
    keras.utils.set_random_seed(0)  # the weights and fit's shuffling: unseeded, some starts learn too slowly
    model = OrderPretrainer(_backbone())
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    x, y, weights = model.split_features(_features())
    assert set(x) == {"token_ids", "segment_ids", "padding_mask"} and set(y) == {"order"}
    np.testing.assert_array_equal(np.asarray(weights["order"]), np.ones(32))
    history = model.fit(x, y, sample_weight=weights, epochs=40, verbose=0).history
    assert {"order_loss", "order_accuracy"} <= set(history)
    assert history["order_loss"][-1] < 0.5 * history["order_loss"][0]
    assert history["order_accuracy"][-1] == 1.0


def test_loss_weights_are_the_declared_ones():
    backbone = _backbone()

    class BothPretrainer(Pretrainer):
        def __init__(self):
            inputs = dict(backbone.input)
            inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
            encoded = backbone({k: v for k, v in inputs.items() if k != "mask_positions"})
            outputs = {
                "mlm": MaskedLMHead(50, token_embedding=backbone.token_embedding)(
                    encoded["sequence_output"], inputs["mask_positions"]),
                "order": PooledClassificationHead(2)(encoded["pooled_output"]),
            }
            super().__init__(backbone, inputs, outputs, [MLM, ORDER])

    model = BothPretrainer()
    model.compile(optimizer="adam")
    features = _features()
    features.update(mask_positions=np.tile([1, 3], (32, 1)).astype("int32"),
                    mask_ids=features["token_ids"][:, [1, 3]], mask_weights=np.ones((32, 2), "float32"))
    x, y, weights = model.split_features(features)
    result = model.evaluate(x, y, sample_weight=weights, verbose=0, return_dict=True)
    assert result["loss"] == pytest.approx(result["mlm_loss"] + 2.0 * result["order_loss"], rel=1e-4)


def test_an_objective_needs_its_output():
    backbone = _backbone()
    inputs = dict(backbone.input)
    with pytest.raises(ValueError, match="no model output"):
        Pretrainer(backbone, inputs, {"other": backbone(inputs)["pooled_output"]}, [ORDER])


def _binary_loss():
    return keras.losses.BinaryCrossentropy(from_logits=True, reduction="mean_with_sample_weight")


def _detection_metrics(prefix):
    return [keras.metrics.BinaryAccuracy(name=f"{prefix}accuracy", threshold=0.0),
            keras.metrics.Precision(name=f"{prefix}precision", thresholds=0.0),
            keras.metrics.Recall(name=f"{prefix}recall", thresholds=0.0)]


# A per-token binary objective with its own loss and metrics, as replaced-token detection declares.
DETECT = Objective("detect", label_key="is_seven", weight_key="padding_mask",
                   make_loss=_binary_loss, make_metrics=_detection_metrics)


class DetectPretrainer(Pretrainer):
    def __init__(self, backbone):
        inputs = dict(backbone.input)
        sequence = backbone(inputs)["sequence_output"]
        logits = keras.layers.Dense(1, name="detect_head")(sequence)  # [B, L, 1]: one binary decision a token
        super().__init__(backbone, inputs, {"detect": logits}, [DETECT])


def test_an_objective_brings_its_own_loss_and_metrics():
    model = DetectPretrainer(_backbone())
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    features = _features(rows=64)
    features["is_seven"] = (features["token_ids"] == 7).astype("float32")[..., None]
    features["padding_mask"][:, -2:] = 0  # the last two positions do not count
    x, y, weights = model.split_features(features)
    before = model.evaluate(x, y, sample_weight=weights, verbose=0, return_dict=True)
    assert before["detect_loss"] == pytest.approx(before["loss"], rel=1e-5)
    history = model.fit(x, y, sample_weight=weights, epochs=30, verbose=0).history
    assert {"detect_loss", "detect_accuracy", "detect_precision", "detect_recall"} <= set(history)
    assert history["detect_loss"][-1] < 0.3 * history["detect_loss"][0]
    assert history["detect_recall"][-1] > 0.95 and history["detect_precision"][-1] > 0.95


def test_one_objective_reports_its_loss_from_the_loss_it_trains_on_and_scores_the_logits_once():
    """Keras reports each loss itself only where there are several; a pretrainer with one reports `<name>_loss`
    from the values its loss computed: each target's loss averaged with its weight over the batches."""
    keras.utils.set_random_seed(0)
    model = OrderPretrainer(_backbone())
    model.compile(optimizer=keras.optimizers.SGD(0.0))
    model.compile(optimizer=keras.optimizers.SGD(0.0))  # compiled again: still one report
    assert [metric.name for metric in model.metrics].count("order_loss") == 1
    x, y, weights = keras.tree.map_structure(keras.ops.convert_to_numpy, model.split_features(_features(rows=16)))
    weights["order"][:6] = 0.0  # the two batches of 8 weigh 2 and 8 rows: a mean of batch means would differ
    logs = model.evaluate(x, y, sample_weight=weights, batch_size=8, verbose=0, return_dict=True)
    per_row = keras.ops.convert_to_numpy(keras.losses.sparse_categorical_crossentropy(
        y["order"], model.predict(x, verbose=0)["order"], from_logits=True))
    expected = np.sum(weights["order"] * per_row) / np.sum(weights["order"])
    assert logs["order_loss"] == pytest.approx(expected, rel=1e-6)
    assert logs["order_accuracy"] == pytest.approx(
        np.sum(weights["order"] * (model.predict(x, verbose=0)["order"].argmax(-1) == y["order"])) / 10, rel=1e-6)
    if keras.config.backend() == "tensorflow":  # the traced step: the loss' scoring is the only one
        import tensorflow as tf

        step = tf.function(model.train_step).get_concrete_function(
            keras.tree.map_structure(lambda a: tf.TensorSpec(a.shape, a.dtype), (x, y, weights)))
        scorings = [op for op in step.graph.get_operations() if op.type == "SparseSoftmaxCrossEntropyWithLogits"]
        assert len(scorings) == 1


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="tf.function's tracing")
def test_one_device_traces_the_pretraining_step_once(monkeypatch):
    """The variables exist before the first step, so tf.function traces it once, not again after a first
    trace that created them (most of a short run's time)."""
    import tensorflow as tf

    from keras_bertology.engine.distributed_fit import fit

    model = OrderPretrainer(_backbone())
    model.compile(optimizer=keras.optimizers.AdamW(1e-2))
    traces = []
    train_step = model.train_step
    monkeypatch.setattr(model, "train_step", lambda data: traces.append(1) or train_step(data))
    dataset = tf.data.Dataset.from_tensor_slices(model.split_features(_features())).batch(8).repeat()
    fit(model, dataset, tf.distribute.get_strategy(), global_batch=8, epochs=2, initial_step=0,
        steps_per_epoch=2, callbacks=[], verbose=0)
    assert len(traces) == 1 and model.optimizer.iterations.numpy() == 4


@keras.saving.register_keras_serializable(package="test_pretrainer")
class ConfiglessPretrainer(Pretrainer):
    """A pretrainer with no config of its own: the base's saves and rebuilds it."""

    def __init__(self, backbone, **kwargs):
        inputs = dict(backbone.input)
        order = PooledClassificationHead(2, name="order_head")(backbone(inputs)["pooled_output"])
        super().__init__(backbone, inputs, {"order": order}, [ORDER], **kwargs)


def test_the_base_saves_and_rebuilds_a_pretrainer_and_its_backbone(tmp_path):
    model = ConfiglessPretrainer(_backbone(), name="configless")
    config = model.get_config()
    assert set(config) == {"name", "trainable", "backbone"}
    assert config["backbone"]["config"]["vocab_size"] == 50
    model.save(tmp_path / "model.keras")
    restored = keras.saving.load_model(tmp_path / "model.keras")
    assert type(restored) is ConfiglessPretrainer and type(restored.backbone) is BertBackbone
    assert restored.name == "configless"
    inputs = {name: value for name, value in _features(rows=2).items() if name != "order_labels"}
    np.testing.assert_allclose(np.asarray(restored(inputs)["order"]), np.asarray(model(inputs)["order"]), rtol=1e-6)


def test_a_backbone_keeps_the_policy_it_is_built_in_and_its_pretrainer_and_heads_take_it(tmp_path):
    """`dtype=` on a backbone, under another global policy: Keras' Functional alone would record the global
    float32, so the heads built on `backbone.dtype_policy` computed in float32 and a reload lost the policy."""
    from keras_bertology.models import BertPretrainer

    assert keras.config.dtype_policy().name == "float32"
    backbone = BertBackbone(vocab_size=50, num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32,
                            max_positions=16, dtype="mixed_bfloat16")
    model = BertPretrainer(backbone)
    assert backbone.dtype_policy.name == model.dtype_policy.name == "mixed_bfloat16"
    assert {model.get_layer(name).dtype_policy.name for name in ("mlm_head", "nsp_head")} == {"mixed_bfloat16"}
    inputs = {name: value for name, value in _features(rows=2).items() if name != "order_labels"}
    inputs["mask_positions"] = np.array([[1, 2], [3, 4]], "int32")
    head = model.get_layer("mlm_head")
    assert keras.ops.convert_to_numpy(head.transform(np.ones((1, 16), "float32"))).dtype.name == "bfloat16"
    model.save(tmp_path / "model.keras")
    restored = keras.saving.load_model(tmp_path / "model.keras")
    assert restored.backbone.dtype_policy.name == restored.get_layer("mlm_head").dtype_policy.name == "mixed_bfloat16"
    assert BertBackbone.from_config(backbone.get_config()).get_layer("encoder_block_0").dtype_policy.name == \
        "mixed_bfloat16"
    np.testing.assert_array_equal(np.asarray(restored(inputs)["mlm"]), np.asarray(model(inputs)["mlm"]))
    # A fine-tuning head takes the backbone's policy too; a `dtype` given to either model is kept.
    assert SequenceClassifier(backbone, num_classes=2).dtype_policy.name == "mixed_bfloat16"
    assert SequenceClassifier(backbone, num_classes=2, dtype="float32").dtype_policy.name == "float32"
    assert BertPretrainer(backbone, dtype="float32").dtype_policy.name == "float32"


def _tied_head_case(family):
    """(a pretrainer of `family` built in mixed_bfloat16 under the float32 global policy, its vocabulary logits'
    output name, inputs for it)."""
    from keras_bertology.models import BertPretrainer
    from keras_bertology.models.gpt import GPTBackbone, GPTPretrainer
    from keras_bertology.models.t5 import T5Backbone, T5Pretrainer

    sizes = dict(vocab_size=50, num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32,
                 dtype="mixed_bfloat16")
    rng = np.random.default_rng(3)
    ids = rng.integers(5, 50, (2, 8)).astype("int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    if family == "bert":
        model = BertPretrainer(BertBackbone(max_positions=16, **sizes))
        return model, "mlm", {**inputs, "segment_ids": np.zeros_like(ids),
                              "mask_positions": np.array([[1, 2], [3, 6]], "int32")}
    if family == "gpt":
        return GPTPretrainer(GPTBackbone(max_positions=16, **sizes)), "clm", inputs
    if family == "xlnet":
        from keras_bertology.models.xlnet import XLNetBackbone, XLNetPretrainer

        targets = np.eye(8, dtype="float32")[[[1, 2], [3, 6]]]  # [B, P, L]: the positions each row predicts
        return XLNetPretrainer(XLNetBackbone(**sizes)), "plm", {
            **inputs, "segment_ids": np.zeros_like(ids), "perm_mask": np.zeros((2, 8, 8), "float32"),
            "target_mapping": targets}
    model = T5Pretrainer(T5Backbone(**sizes))
    return model, "spans", {**inputs, "decoder_token_ids": ids[:, ::-1].copy(), "decoder_padding_mask": inputs[
        "padding_mask"]}


@pytest.mark.parametrize("family", ["bert", "gpt", "t5", "xlnet"])
def test_a_tied_vocabulary_projection_computes_in_bfloat16_under_mixed_precision_as_it_is_served(family):
    """The product of the states and the tied token table in the compute dtype (what torch's autocast computes),
    in training as in serving: Keras' reversed `ReversibleEmbedding` read its table in float32 inside a
    mixed-precision pretrainer's autocast scope (GPT's step 1.3x slower) and in bfloat16 outside one. The
    head's bias starts at zero, so its logits are bfloat16 values exactly; a float32 product's are not."""
    model, output, inputs = _tied_head_case(family)
    assert set(inputs) == set(model.input)
    logits = keras.ops.convert_to_numpy(model(inputs, training=False)[output])
    assert logits.dtype == np.float32 and np.ptp(logits) > 0.1
    as_bfloat16 = keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.cast(logits, "bfloat16"), "float32"))
    np.testing.assert_array_equal(logits, as_bfloat16)
    if family == "gpt":  # serving's model of the same layers, outside the pretrainer's scope
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.causal_lm_model()(inputs)), logits)
