"""Every layer: shapes, masking behaviour, get_config and `.keras` round trips."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.layers import (
    MaskedLMHead,
    MultiHeadSelfAttention,
    PooledClassificationHead,
    TokenPositionSegmentEmbedding,
    TransformerEncoderBlock,
    merge_attention_masks,
)
from keras_bertology.models import BertBackbone, BertPretrainer, RobertaPretrainer

RNG = np.random.default_rng(0)


def _roundtrip(model, inputs, tmp_path):
    expected = model.predict(inputs, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    actual = restored.predict(inputs, verbose=0)
    for a, b in zip(keras.tree.flatten(expected), keras.tree.flatten(actual)):
        np.testing.assert_array_equal(a, b)
    return restored


def test_embedding_roundtrip_and_segments_matter(tmp_path):
    token_ids = keras.Input((None,), dtype="int32")
    segment_ids = keras.Input((None,), dtype="int32")
    layer = TokenPositionSegmentEmbedding(50, 8, max_positions=16, num_segments=2, dropout=0.0)
    model = keras.Model([token_ids, segment_ids], layer(token_ids, segment_ids))
    ids = RNG.integers(0, 50, (2, 6)).astype("int32")
    zeros, ones = np.zeros_like(ids), np.ones_like(ids)
    assert not np.allclose(model.predict([ids, zeros], verbose=0), model.predict([ids, ones], verbose=0))
    _roundtrip(model, [ids, zeros], tmp_path)
    assert TokenPositionSegmentEmbedding.from_config(layer.get_config()).get_config() == layer.get_config()


def test_attention_ignores_masked_keys():
    mha = MultiHeadSelfAttention(num_heads=2)
    x = RNG.normal(size=(1, 5, 8)).astype("float32")
    padding = np.array([[1, 1, 1, 0, 0]], "int32")
    mask = merge_attention_masks(padding)
    out = ops.convert_to_numpy(mha(x, attention_mask=mask))
    changed = x.copy()
    changed[:, 3:] = RNG.normal(size=(1, 2, 8))
    out_changed = ops.convert_to_numpy(mha(changed, attention_mask=mask))
    np.testing.assert_allclose(out[:, :3], out_changed[:, :3], atol=1e-6)


def test_causal_attention_mask_is_respected():
    mha = MultiHeadSelfAttention(num_heads=2)
    x = RNG.normal(size=(1, 6, 8)).astype("float32")
    causal = np.tril(np.ones((1, 6, 6), "int32"))
    mask = merge_attention_masks(np.ones((1, 6), "int32"), causal)
    out = ops.convert_to_numpy(mha(x, attention_mask=mask))
    changed = x.copy()
    changed[:, 4:] += 1.0
    out_changed = ops.convert_to_numpy(mha(changed, attention_mask=mask))
    np.testing.assert_allclose(out[:, :4], out_changed[:, :4], atol=1e-6)
    assert not np.allclose(out[:, 4:], out_changed[:, 4:])


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_roundtrip(tmp_path, norm_first):
    inputs = keras.Input((None, 16))
    block = TransformerEncoderBlock(num_heads=4, intermediate_size=32, norm_first=norm_first)
    model = keras.Model(inputs, block(inputs))
    _roundtrip(model, RNG.normal(size=(2, 7, 16)).astype("float32"), tmp_path)
    assert TransformerEncoderBlock.from_config(block.get_config()).get_config() == block.get_config()


def test_untied_mlm_head_roundtrip_and_gather(tmp_path):
    hidden = keras.Input((None, 16))
    positions = keras.Input((None,), dtype="int32")
    head = MaskedLMHead(vocab_size=30)
    model = keras.Model([hidden, positions], head(hidden, positions))
    h = RNG.normal(size=(2, 9, 16)).astype("float32")
    p = np.array([[0, 4, 8], [3, 3, 1]], "int32")
    restored = _roundtrip(model, [h, p], tmp_path)
    everywhere = ops.convert_to_numpy(restored.layers[-1](h))
    gathered = restored.predict([h, p], verbose=0)
    np.testing.assert_allclose(gathered, np.take_along_axis(everywhere, p[..., None], 1), atol=1e-5)


def test_pooled_head_roundtrip(tmp_path):
    pooled = keras.Input((16,))
    model = keras.Model(pooled, PooledClassificationHead(3)(pooled))
    _roundtrip(model, RNG.normal(size=(4, 16)).astype("float32"), tmp_path)


def _tiny_backbone(**overrides):
    config = dict(vocab_size=60, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=32,
                  max_positions=32)
    return BertBackbone(**dict(config, **overrides))


def _pretrainer_inputs(with_segments=True):
    ids = RNG.integers(5, 60, (2, 12)).astype("int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids),
              "mask_positions": np.array([[1, 2], [5, 0]], "int32")}
    if with_segments:
        inputs["segment_ids"] = np.zeros_like(ids)
    return inputs


def test_bert_pretrainer_roundtrip_keeps_tied_decoder(tmp_path):
    model = BertPretrainer(_tiny_backbone())
    restored = _roundtrip(model, _pretrainer_inputs(), tmp_path)
    assert restored.get_layer("mlm_head").token_embedding is restored.backbone.token_embedding
    embedding_ids = {id(v) for v in restored.backbone.token_embedding.weights}
    assert len([v for v in restored.weights if id(v) in embedding_ids]) == 1


def test_roberta_pretrainer_roundtrip(tmp_path):
    backbone = _tiny_backbone(num_segments=0, use_pooler=False, layer_norm_epsilon=1e-5)
    restored = _roundtrip(RobertaPretrainer(backbone), _pretrainer_inputs(False), tmp_path)
    assert restored.objectives == ["mlm"]


def test_pre_ln_backbone_roundtrip(tmp_path):
    backbone = _tiny_backbone(norm_first=True)
    inputs = {k: v for k, v in _pretrainer_inputs().items() if k != "mask_positions"}
    _roundtrip(backbone, inputs, tmp_path)
    assert backbone.get_layer("final_norm") is not None


def test_pretrainer_fit_reduces_loss_and_reports_each_objective():
    keras.utils.set_random_seed(0)  # not whatever ran before in the worker; 50 epochs fit seeds 0-5 (30 did barely)
    model = BertPretrainer(_tiny_backbone(dropout=0.0, attention_dropout=0.0))
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    inputs = _pretrainer_inputs()
    features = dict(inputs, mask_ids=np.array([[7, 8], [9, 10]], "int32"),
                    mask_weights=np.array([[1, 1], [1, 0]], "float32"),
                    nsp_labels=np.array([0, 1], "int32"))
    x, y, weights = model.split_features(features)
    history = model.fit(x, y, sample_weight=weights, epochs=50, verbose=0).history
    assert {"mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy"} <= set(history)
    assert history["mlm_loss"][-1] < 0.5 * history["mlm_loss"][0]
    # Three real predictions; the weight-0 slot never counts.
    assert history["mlm_accuracy"][-1] == pytest.approx(1.0)

