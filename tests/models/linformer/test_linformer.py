"""Linformer: low-rank attention against a NumPy reference of the paper's equations in every sharing mode
(weights large enough to bend the softmax), the padding rule, layerwise sharing across an encoder, a graph
free of [L, L] tensors, the presets' counts, and a short CLI run (transformers has no Linformer)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.errors import ConfigError
from keras_bertology.layers import LowRankSelfAttention
from keras_bertology.models import FAMILIES
from keras_bertology.models.bert.backbone import BertBackbone

TOLERANCE = 1e-5
LINFORMER = FAMILIES["linformer"]


def numpy_reference(layer, x, padding_mask, key_matrix, value_matrix):
    """head_i = softmax(Q_i (E_i K_i)^T / sqrt(d)) (F_i V_i), K and V zeroed at padding, E and F cut to L
    columns (per head [N, k, n], or one [k, n] for every head)."""
    batch, length, _ = x.shape
    heads = layer.num_heads
    q, k, v = (np.asarray(dense(x)).reshape(batch, length, heads, -1)
               for dense in (layer.query_dense, layer.key_dense, layer.value_dense))
    k, v = k * padding_mask[:, :, None, None], v * padding_mask[:, :, None, None]
    outputs = []
    for head in range(heads):
        e = key_matrix[head] if key_matrix.ndim == 3 else key_matrix
        f = value_matrix[head] if value_matrix.ndim == 3 else value_matrix
        projected_k = np.einsum("kl,bld->bkd", e[:, :length], k[:, :, head])
        projected_v = np.einsum("kl,bld->bkd", f[:, :length], v[:, :, head])
        scores = np.einsum("bqd,bkd->bqk", q[:, :, head], projected_k) / np.sqrt(q.shape[-1])
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        outputs.append(np.einsum("bqk,bkd->bqd", probs, projected_v))
    context = np.stack(outputs, axis=2).reshape(batch, length, -1)
    return np.asarray(layer.output_dense(context.astype("float32")))


def _inputs(length=21, width=12, real=15):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, length, width)).astype("float32")
    mask = np.ones((2, length), "int32")
    mask[1, real:] = 0
    return x, mask


@pytest.mark.parametrize("sharing", ["none", "headwise", "key_value"])
def test_low_rank_attention_matches_the_papers_equations(sharing):
    layer = LowRankSelfAttention(num_heads=3, projected_length=5, max_length=32, sharing=sharing,
                                 initializer_range=0.5)
    x, mask = _inputs()
    layer(x, mask[:, None, :])
    rng = np.random.default_rng(1)
    for weight in layer.weights:  # projections large enough that the softmax is far from uniform
        weight.assign(rng.normal(scale=0.4, size=weight.shape).astype("float32"))
    key = layer.key_projection.numpy()
    value = key if sharing == "key_value" else layer.value_projection.numpy()
    assert key.shape == ((3, 5, 32) if sharing == "none" else (5, 32))
    got = np.asarray(layer(x, mask[:, None, :]))
    expected = numpy_reference(layer, x, mask, key, value)
    assert np.abs(expected).max() > 1
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=TOLERANCE)  # outputs reach tens: float32 rounding


def test_padding_changes_nothing_at_the_real_tokens():
    """Zeroed before projection, padded keys and values add nothing: a padded row's real outputs are those
    of the row alone, at its own length."""
    layer = LowRankSelfAttention(num_heads=2, projected_length=4, max_length=32, initializer_range=0.5)
    x, mask = _inputs(length=21, real=15)
    padded = np.asarray(layer(x, mask[:, None, :]))[1, :15]
    alone = np.asarray(layer(x[1:, :15], np.ones((1, 1, 15), "int32")))[0]
    np.testing.assert_allclose(padded, alone, atol=1e-6)


def test_layerwise_sharing_gives_every_layer_one_matrix():
    """The encoder holds one [k, n] projection that every layer reads: the count grows by k x n once, and
    changing it changes the first layer's output."""
    sizes = dict(vocab_size=50, num_layers=3, num_heads=2, hidden_size=16, intermediate_size=32, max_positions=40,
                 num_segments=0, use_pooler=False)
    shared = BertBackbone(**sizes, attention_type="low_rank",
                          attention_options=dict(projected_length=6, max_length=40, sharing="layerwise"))
    full = BertBackbone(**sizes)
    assert shared.count_params() == full.count_params() + 6 * 40
    ids = np.arange(1, 31, dtype="int32")[None] % 50
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    before = np.asarray(shared(inputs)["sequence_output"])
    matrix = shared.get_layer("shared_sequence_projection").matrix
    matrix.assign(matrix.numpy()[:, ::-1])  # positions reordered (reordering its rows would change nothing)
    assert np.abs(np.asarray(shared(inputs)["sequence_output"]) - before).max() > 1e-3
    with pytest.raises(ValueError, match="SequenceProjection"):
        LowRankSelfAttention(num_heads=2, sharing="layerwise", max_length=40, projected_length=6)(np.ones((1, 5, 8)))


def test_the_low_rank_graph_holds_no_length_by_length_tensor():
    """Scores are [B, N, L, k]: no tensor of the traced layer has two sequence-long axes."""
    length = 512
    layer = LowRankSelfAttention(num_heads=2, projected_length=32, max_length=length)
    traced = tf.function(lambda x, mask: layer(x, mask[:, None, :]))
    graph = traced.get_concrete_function(tf.TensorSpec([1, length, 16]), tf.TensorSpec([1, length], tf.int32)).graph
    assert max(sum(1 for d in output.shape if d is not None and d >= length)
               for op in graph.get_operations() for output in op.outputs if output.shape.rank) == 1


def test_sequences_past_the_projections_and_bad_options_are_refused():
    layer = LowRankSelfAttention(num_heads=2, projected_length=4, max_length=16)
    with pytest.raises(ValueError, match="longer than this low-rank attention's max_length 16"):
        layer(np.ones((1, 17, 8), "float32"))
    with pytest.raises(ValueError, match="key padding mask"):
        layer(np.ones((1, 10, 8), "float32"), np.ones((1, 10, 10), "int32"))
    with pytest.raises(ConfigError, match="projected_length must be from 1 to max_length 16"):
        LowRankSelfAttention(num_heads=2, projected_length=17, max_length=16)
    with pytest.raises(ConfigError, match="sharing must be one of"):
        LowRankSelfAttention(num_heads=2, sharing="columnwise")


def test_presets_count_roberta_plus_the_longer_table_and_one_projection():
    """RoBERTa's presets (tested against transformers and keras-hub) at the same size, plus the position
    rows past 512 and the one layerwise [k, n] matrix."""
    roberta = FAMILIES["roberta"].presets
    for name, base in (("linformer-tiny", "roberta-tiny"), ("linformer-base", "roberta-base")):
        config = LINFORMER.presets[name]["config"]
        options = config["attention_options"]
        expected = (roberta[base]["params"] + (config["max_positions"] - 512) * config["hidden_size"]
                    + options["projected_length"] * options["max_length"])
        assert LINFORMER.presets[name]["params"] == expected
    from counting import shapes_only

    with shapes_only():
        for name in LINFORMER.presets:
            assert LINFORMER.backbone_cls(**LINFORMER.backbone_config(name)).count_params() == \
                LINFORMER.presets[name]["params"]


def test_pretraining_linformer_runs_and_serves_long_inputs(tmp_path, capsys):
    """Four steps at 512 tokens with --projected-length 32: the run's encoder has that k, and the SavedModel
    serves a long text with the Keras encoder's states."""
    from cli_runs import pretrain_two_plays
    from keras_bertology.runs import load_run_model

    metrics, served = pretrain_two_plays(tmp_path, capsys, "linformer", "linformer-tiny", "--seq-len", "512",
                                         "--vocab-size", "400", "--projected-length", "32")
    assert metrics["steps"] == 4 and np.isfinite(metrics["history"][-1]["loss"])
    run = load_run_model(tmp_path / "run")
    assert run.backbone.get_config()["attention_options"]["projected_length"] == 32
    text = " ".join(["Now is the winter of our discontent made glorious summer by this sun of York;"] * 40)
    outputs = served.serve(tf.constant([text, "A short one."]))
    ids, mask = outputs["token_ids"].numpy(), outputs["padding_mask"].numpy()
    assert ids.shape[1] == 512
    expected = run.backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"]
    np.testing.assert_allclose(outputs["sequence_output"].numpy(), np.asarray(expected), atol=1e-5)


def test_compiled_low_rank_training_steps_match_the_uncompiled_ones():
    """Three steps of layerwise low-rank attention (k 8 over 48 tokens) under XLA (JAX's jit on that
    backend) give the losses of the uncompiled steps, and the loss falls."""
    from compiled_steps import train_steps

    compiled, plain = (train_steps(LINFORMER, "linformer-tiny", {"projected_length": 8}, jit, max_positions=64)
                       for jit in (True, False))
    assert np.allclose(compiled, plain, rtol=1e-4) and compiled[-1] < compiled[0]


def test_the_family_offers_the_layers_sharing_modes():
    from keras_bertology.layers.low_rank_attention import SHARING

    assert dict((option.name, option.choices) for option in LINFORMER.options)["sharing"] == SHARING
