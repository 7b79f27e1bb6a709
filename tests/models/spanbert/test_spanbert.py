"""SpanBERT: the span boundary head against a NumPy reference, its invariance, the pretrainer, the CLI."""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from cli_runs import pretrain_two_plays
from keras_bertology.data.builder_contexts import MaskingContext
from keras_bertology.layers import SpanBoundaryHead
from keras_bertology.models import BertBackbone
from keras_bertology.models.spanbert import SpanBertPretrainer
from keras_bertology.models.spanbert.masking import span_masker

VOCAB, HIDDEN, POSITIONS, WIDTH = 37, 12, 6, 5


def _head(seed=0):
    """A head with a tied embedding, its weights drawn large enough that GeLU and LayerNorm bend."""
    keras.utils.set_random_seed(seed)
    embedding = keras.layers.ReversibleEmbedding(VOCAB, HIDDEN)
    embedding.build((None,))
    head = SpanBoundaryHead(VOCAB, token_embedding=embedding, max_span_positions=POSITIONS,
                            position_embedding_size=WIDTH)
    head.build((None, None, HIDDEN))
    rng = np.random.default_rng(seed)
    for variable in [*head.weights, *embedding.weights]:
        variable.assign(rng.normal(0.0, 0.7, variable.shape).astype("float32"))
    return head, embedding


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _layer_norm(x, gamma, beta, epsilon=1e-12):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + epsilon) * gamma + beta


def _reference(head, embedding, hidden, left, right, offset):
    """y = LN(GeLU(W2 LN(GeLU(W1 [h_left; h_right; p_offset] + b1)) + b2)) E^T + bias, by hand."""
    table = head.position_embedding.embeddings.numpy()
    x = np.concatenate([np.take_along_axis(hidden, left[..., None], 1),
                        np.take_along_axis(hidden, right[..., None], 1),
                        table[np.minimum(offset, POSITIONS - 1)]], axis=-1)
    for dense, norm in zip(head.transforms, head.layer_norms):
        x = _layer_norm(_gelu(x @ dense.kernel.numpy() + dense.bias.numpy()), norm.gamma.numpy(), norm.beta.numpy())
    return x @ embedding.embeddings.numpy().T + head.output_bias.numpy()


def test_span_boundary_head_matches_a_numpy_reference():
    head, embedding = _head()
    rng = np.random.default_rng(1)
    hidden = rng.normal(size=(3, 16, HIDDEN)).astype("float32")
    left = rng.integers(0, 8, size=(3, 7)).astype("int32")
    right = left + rng.integers(2, 8, size=(3, 7)).astype("int32")
    offset = rng.integers(0, POSITIONS + 3, size=(3, 7)).astype("int32")  # some past the table
    ours = keras.ops.convert_to_numpy(head(hidden, left, right, offset))
    expected = _reference(head, embedding, hidden.astype("float64"), left, right, offset)
    assert np.abs(expected).max() > 5  # the check is not dominated by tiny values
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-5)


def test_span_boundary_logits_ignore_the_tokens_inside_the_span():
    head, _ = _head()
    rng = np.random.default_rng(2)
    hidden = rng.normal(size=(1, 12, HIDDEN)).astype("float32")
    left, right = np.array([[2, 2, 2]], "int32"), np.array([[6, 6, 6]], "int32")
    offset = np.array([[0, 1, 2]], "int32")
    before = keras.ops.convert_to_numpy(head(hidden, left, right, offset))
    inside = hidden.copy()
    inside[0, 3:6] = rng.normal(size=(3, HIDDEN))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(head(inside, left, right, offset)), before)
    for boundary in (2, 6):
        moved = hidden.copy()
        moved[0, boundary] += 1.0
        assert np.abs(keras.ops.convert_to_numpy(head(moved, left, right, offset)) - before).max() > 1e-3


def _tiny_backbone():
    return BertBackbone(vocab_size=VOCAB, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=32)


class _Tokenizer:
    """What a masking stage reads from a tokenizer: ids 5+ are words of one piece."""

    vocab_size, mask_id, pad_id, special_ids = VOCAB, 3, 0, [0, 1, 2, 3, 4]
    word_start_table = np.ones(VOCAB, bool)


def _span_batch(batch=16, seq_len=24, seed=3):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(batch, seq_len)).astype("int32")
    ids[:, 0], ids[:, -1] = 1, 2
    return span_masker(MaskingContext(_Tokenizer(), max_predictions=6))(
        {"token_ids": tf.constant(ids), "segment_ids": tf.zeros_like(ids)})


def test_pretrainer_trains_both_objectives():
    keras.utils.set_random_seed(0)
    model = SpanBertPretrainer(_tiny_backbone(), max_span_positions=8, position_embedding_size=8)
    assert model.objectives == ["mlm", "sbo"]
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    batch = _span_batch()
    data = tf.data.Dataset.from_tensors(batch).repeat().map(model.split_features)
    before = model.evaluate(data.take(1), return_dict=True, verbose=0)
    history = model.fit(data, epochs=1, steps_per_epoch=60, verbose=0).history
    after = model.evaluate(data.take(1), return_dict=True, verbose=0)
    for name in ("mlm_loss", "sbo_loss"):
        assert after[name] < before[name] - 1.0, (name, before[name], after[name])
    assert {"mlm_loss", "sbo_loss", "mlm_accuracy", "sbo_accuracy"} <= set(history)


def test_sbo_decoder_is_tied_to_the_token_embedding():
    model = SpanBertPretrainer(_tiny_backbone(), position_embedding_size=8)
    embedding = model.backbone.token_embedding
    assert model.get_layer("sbo_head").token_embedding is embedding
    assert not any("decoder" in w.path for w in model.get_layer("sbo_head").weights)


@pytest.mark.slow
def test_pretrain_spanbert_from_the_command_line(tmp_path, capsys):
    metrics, served = pretrain_two_plays(tmp_path, capsys, "spanbert", "spanbert-tiny", "--seq-len", "64",
                                         "--vocab-size", "800", "--max-span", "3")
    assert set(metrics["objectives"]) == {"mlm", "sbo"}
    assert metrics["family_options"] == {"span_p": 0.2, "max_span": 3, "loss_chunk_size": 0}
    assert metrics["instances"] == "packed_instances (doc-sentences)" and metrics["masking"] == "dynamic"
    assert metrics["objectives"]["sbo"]["chance"]["most_frequent_token"]
    out = served.mlm_logits(tf.constant(["To be, or not to [MASK]."]))
    description = json.loads((tmp_path / "export" / "assets" / "bertology.json").read_text())
    assert out["logits"].shape[-1] == description["vocab_size"] > 700
    assert (out["token_ids"].numpy() == description["mask_id"]).sum() == 1
    assert "pooled_output" not in description["serve_outputs"]


def test_family_options_reach_the_masking_stage():
    from keras_bertology.models.spanbert import SPANBERT

    rng = np.random.default_rng(4)
    ids = rng.integers(5, VOCAB, size=(64, 60)).astype("int32")
    ids[:, 0], ids[:, -1] = 1, 2
    for max_span in (1, 2):
        masker = SPANBERT.build_masker(_Tokenizer(), 9, options={"max_span": max_span, "span_p": 0.05})
        out = masker({"token_ids": tf.constant(ids)})
        used = out["mask_weights"].numpy() > 0
        lengths = (out["span_right"].numpy() - out["span_left"].numpy() - 1)[used]  # one-piece words
        assert lengths.max() == max_span
