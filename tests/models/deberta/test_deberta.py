"""DeBERTa's backbone against transformers' (fp32, 1e-5): the log buckets, and DebertaModel (v1) and
DebertaV2Model (v2/v3) states for c2p-only, p2c-only and both terms, shared and own position projections,
bucketed and plain relative positions, with and without v2's convolution, on padded batches longer than
the relative reach."""

import numpy as np
import tensorflow as tf
import pytest
import torch
import transformers
from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

from hf_reference import perturbed_hf_model
from keras_bertology.convert.hf_weights import WeightSource
from keras_bertology.layers.disentangled_attention import log_bucket_positions, relative_index_table
from keras_bertology.models.deberta.backbone import DebertaBackbone
from keras_bertology.models.deberta.convert import backbone_kwargs, load_backbone

TOLERANCE = 1e-5
# Heads 16 wide, an embedding narrower than the hidden size, weights large enough to bend the GELUs.
SMALL = dict(vocab_size=90, hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=80,
             max_position_embeddings=40, initializer_range=0.2, relative_attention=True, layer_norm_eps=1e-7,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=0,
             position_biased_input=False)
V2_CONFIGS = {
    # DeBERTa-v3's layout: both terms, shared keys, log buckets reached before the rows end, normed table.
    "v3": dict(SMALL, pos_att_type="p2c|c2p", share_att_key=True, position_buckets=8, max_relative_positions=12,
               norm_rel_ebd="layer_norm", embedding_size=32),
    # c2p alone, own position projections, no buckets, segments and absolute positions, the convolution.
    "c2p-own-conv": dict(SMALL, pos_att_type=["c2p"], share_att_key=False, max_relative_positions=9,
                         conv_kernel_size=3, conv_act="gelu", type_vocab_size=2, position_biased_input=True),
    # p2c alone, shared keys, buckets, an unnormed table, grouped convolution.
    "p2c-shared": dict(SMALL, pos_att_type="p2c", share_att_key=True, position_buckets=6, max_relative_positions=11,
                       conv_kernel_size=5, conv_groups=3),
}
V1_CONFIGS = {
    "v1": dict(SMALL, pos_att_type="c2p|p2c", max_relative_positions=7),
    "v1-c2p-absolute": dict(SMALL, pos_att_type="c2p", position_biased_input=True, type_vocab_size=2),
}


@pytest.mark.parametrize("buckets, max_position", [(256, 512), (8, 12), (6, 11), (7, 20), (32, 100)])
def test_log_buckets_are_the_originals(buckets, max_position):
    """transformers' (float32) and the original's NumPy float64 rule agree with ours everywhere."""
    distances = np.arange(-3000, 3001)
    ours = log_bucket_positions(distances, buckets, max_position)
    np.testing.assert_array_equal(ours, make_log_bucket_position(torch.tensor(distances), buckets,
                                                                 max_position).long().numpy())
    mid = buckets // 2
    absolute = np.where(np.abs(distances) < mid, mid - 1, np.abs(distances))
    logs = np.ceil(np.log(absolute / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    np.testing.assert_array_equal(ours, np.where(absolute <= mid, distances, logs * np.sign(distances)))
    if (buckets, max_position) == (256, 512):
        assert ours[3000 + 200] == 169 and ours[3000 + 511] == 255 and ours[3000 - 128] == -128
    table, reach = relative_index_table(buckets, buckets, max_position)
    assert table[0] == 0 and table[-1] == 2 * buckets - 1  # saturated at both ends: clipping is exact
    np.testing.assert_array_equal(table, np.clip(ours[3000 - reach:3000 + reach + 1] + buckets, 0, 2 * buckets - 1))


def _batch(vocab_size, lengths, seed, segments=0):
    rng = np.random.default_rng(seed)
    length = max(lengths)
    ids = rng.integers(1, vocab_size, (len(lengths), length)).astype("int32")
    mask = (np.arange(length)[None, :] < np.asarray(lengths)[:, None]).astype("int32")
    inputs = {"token_ids": ids * mask, "padding_mask": mask}
    if segments:
        inputs["segment_ids"] = (rng.integers(0, segments, ids.shape) * mask).astype("int32")
    return inputs


def _converted(hf):
    config = hf.config.to_dict()
    backbone = DebertaBackbone(**backbone_kwargs(config))
    load_backbone(backbone, WeightSource({k: v.detach().numpy() for k, v in hf.state_dict().items()}, prefix=""),
                  config)
    return backbone


def _assert_matches(hf, config):
    backbone = _converted(hf)
    inputs = _batch(config["vocab_size"], [23, 14], seed=3, segments=config["type_vocab_size"])
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                      attention_mask=torch.tensor(inputs["padding_mask"]),
                      token_type_ids=torch.tensor(inputs.get("segment_ids", np.zeros_like(inputs["token_ids"])),
                                                  dtype=torch.long)).last_hidden_state.numpy()
    got = np.asarray(backbone(inputs)["sequence_output"])
    real = inputs["padding_mask"].astype(bool)
    assert np.abs(got - expected)[real].max() <= TOLERANCE, np.abs(got - expected)[real].max()
    assert np.abs(expected[real]).max() > 1
    return backbone


@pytest.mark.parametrize("layout", sorted(V2_CONFIGS))
def test_v2_states_match_transformers(layout):
    config = V2_CONFIGS[layout]
    _assert_matches(perturbed_hf_model(transformers.DebertaV2Model, transformers.DebertaV2Config(**config)), config)


@pytest.mark.parametrize("layout", sorted(V1_CONFIGS))
def test_v1_states_match_transformers(layout):
    config = V1_CONFIGS[layout]
    backbone = _assert_matches(perturbed_hf_model(transformers.DebertaModel, transformers.DebertaConfig(**config)),
                               config)
    attention = backbone.get_layer("encoder_block_0").attention
    assert attention.key_dense.bias is None and (attention.position_key is None or attention.position_key.bias is None)


@pytest.mark.parametrize("name", ["deberta-tiny", "deberta-base", "deberta-v3-tiny", "deberta-v3-xsmall",
                                  "deberta-v3-small",
                                  pytest.param("deberta-v3-large", marks=pytest.mark.slow)])
def test_presets_count_the_published_parameters(name):
    """deberta-base 138,601,728 (v1, transformers' DebertaModel), deberta-v3-* as DebertaV2Model counts."""
    from counting import shapes_only
    from keras_bertology.models.deberta.presets import DEBERTA_PRESETS, DEBERTA_V3_PRESETS

    preset = {**DEBERTA_PRESETS, **DEBERTA_V3_PRESETS}[name]
    with shapes_only():
        assert DebertaBackbone(**preset["config"]).count_params() == preset["params"]


def test_v3_base_counts_as_keras_hub_and_transformers_count_it():
    import keras_hub

    from counting import shapes_only
    from keras_bertology.models.deberta.presets import DEBERTA_V3_PRESETS

    config = DEBERTA_V3_PRESETS["deberta-v3-base"]["config"]
    with shapes_only():
        hub = keras_hub.models.DebertaV3Backbone(
            vocabulary_size=config["vocab_size"], num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072,
            max_sequence_length=512, bucket_size=256).count_params()
        hf = transformers.DebertaV2Model(transformers.DebertaV2Config(
            vocab_size=config["vocab_size"], hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
            share_att_key=True, pos_att_type="p2c|c2p", position_biased_input=False, type_vocab_size=0))
        assert hub == sum(p.numel() for p in hf.parameters()) == 183_831_552


def test_a_backbone_survives_a_keras_round_trip(tmp_path):
    import keras

    backbone = DebertaBackbone(vocab_size=50, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=24,
                               position_buckets=6, max_relative_positions=11, conv_kernel_size=3,
                               position_terms=("c2p",), share_attention_key=False, content_key_bias=False,
                               dropout=0.0, attention_dropout=0.0)
    inputs = _batch(50, [9, 5], seed=1)
    backbone.save(tmp_path / "deberta.keras")
    loaded = keras.saving.load_model(tmp_path / "deberta.keras")
    assert loaded.get_layer("encoder_block_0").attention.key_dense.bias is None
    np.testing.assert_allclose(np.asarray(loaded(inputs)["sequence_output"]),
                               np.asarray(backbone(inputs)["sequence_output"]), atol=1e-6)


def _np_layer_norm(x, norm):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + norm.epsilon) * norm.gamma.numpy() + norm.beta.numpy()


def _np_dense(dense, x):
    return x @ dense.kernel.numpy() + (0 if dense.bias is None else dense.bias.numpy())


def _np_gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _np_block(block, states, queries, table, index, mask):
    """A post-LN DeBERTa layer in NumPy, queries asking the states (shared keys, both terms):
    A_ij = (q_i.k_j + q_i.pk[r(i, j)] + k_j.pq[r(i, j)]) / sqrt(3 D), keys masked, softmax, then BERT's
    residual branches on the queries."""
    attention = block.attention
    heads, width = attention.num_heads, attention._head_dim

    def split(x):
        return x.reshape(*x.shape[:-1], heads, width)

    q, k, v = (split(_np_dense(d, x)) for d, x in ((attention.query_dense, queries), (attention.key_dense, states),
                                                   (attention.value_dense, states)))
    pq, pk = split(_np_dense(attention.query_dense, table)), split(_np_dense(attention.key_dense, table))
    scores = (np.einsum("bind,bjnd->bnij", q, k) + np.einsum("bind,ijnd->bnij", q, pk[index])
              + np.einsum("bjnd,ijnd->bnij", k, pq[index])) / np.sqrt(3 * width)
    scores = np.where(mask[:, None, None, :] > 0, scores, -1e9)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bnij,bjnd->bind", probs, v).reshape(*queries.shape[:-1], heads * width)
    attended = _np_layer_norm(queries + _np_dense(attention.output_dense, context), block.attention_norm)
    inner = _np_gelu(_np_dense(block.intermediate_dense, attended))
    return _np_layer_norm(attended + _np_dense(block.output_dense, inner), block.output_norm)


def test_the_enhanced_mask_decoder_matches_a_numpy_reference():
    """He et al.'s EMD: queries = absolute positions + the states entering the last layer H; the last layer
    runs twice (keys and values H); the MLM head (BERT's, tied) reads the masked positions."""
    import keras

    from keras_bertology.models.deberta import DebertaPretrainer

    keras.utils.set_random_seed(4)
    backbone = DebertaBackbone(vocab_size=70, num_layers=2, num_heads=2, hidden_size=24, intermediate_size=40,
                               max_positions=30, position_buckets=6, max_relative_positions=11,
                               initializer_range=0.3, dropout=0.0, attention_dropout=0.0)
    model = DebertaPretrainer(backbone)
    rng = np.random.default_rng(5)
    for variable in model.weights:  # LayerNorms off (1, 0), biases off 0
        variable.assign(variable.numpy() + rng.normal(0, 0.1, variable.shape).astype("float32"))
    inputs = _batch(70, [17, 12], seed=6)
    positions = np.array([[0, 5, 16], [2, 11, 3]], dtype="int32")
    logits = np.asarray(model({**inputs, "mask_positions": positions})["mlm"])

    states = np.asarray(keras.Model(backbone.input, backbone.get_layer("encoder_block_1").input[0])(inputs))
    table_layer = backbone.get_layer("relative_embeddings")
    table = _np_layer_norm(table_layer.embeddings.numpy(), table_layer.norm)
    length = inputs["token_ids"].shape[1]
    index = np.clip(log_bucket_positions(np.arange(length)[:, None] - np.arange(length)[None, :], 6, 11) + 6, 0, 11)
    last, mask = backbone.get_layer("encoder_block_1"), inputs["padding_mask"]
    queries = states + model.get_layer("emd_positions").embeddings.numpy()[:length]
    for _ in range(2):
        queries = _np_block(last, states, queries, table, index, mask)
    head = model.get_layer("mlm_head")
    picked = np.take_along_axis(queries, positions[..., None], axis=1)
    transformed = _np_layer_norm(_np_gelu(_np_dense(head.transform, picked)), head.layer_norm)
    expected = transformed @ backbone.token_embedding.embeddings.numpy().T + head.output_bias.numpy()
    assert np.abs(logits - expected).max() <= TOLERANCE * max(1.0, np.abs(expected).max()), \
        np.abs(logits - expected).max()
    assert np.abs(expected).max() > 1


def test_masked_lm_heads_match_deberta_for_masked_lm():
    """transformers' DebertaForMaskedLM (BERT's head on the last layer, no EMD) converted: the same logits."""
    from keras_bertology.models import get_family

    config = V1_CONFIGS["v1"]
    hf = perturbed_hf_model(transformers.DebertaForMaskedLM, transformers.DebertaConfig(**config))
    weights = {name: value.detach().numpy() for name, value in hf.state_dict().items()}
    backbone, pretrainer, heads, used, _ = get_family("deberta").convert_hf(hf.config.to_dict(), weights)
    assert heads == ["mlm"] and not pretrainer.enhanced_mask_decoder
    inputs = _batch(config["vocab_size"], [23, 14], seed=8)
    positions = np.tile(np.arange(23, dtype="int32"), (2, 1))
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                      attention_mask=torch.tensor(inputs["padding_mask"])).logits.numpy()
    logits = np.asarray(pretrainer({**inputs, "mask_positions": positions})["mlm"])
    real = inputs["padding_mask"].astype(bool)
    assert np.abs(logits - expected)[real].max() <= TOLERANCE * max(1.0, np.abs(expected).max())
    assert np.abs(expected).max() > 1


def test_pretraining_deberta_runs_end_to_end_and_serves(tmp_path, capsys):
    from cli_runs import pretrain_two_plays

    metrics, served = pretrain_two_plays(tmp_path, capsys, "deberta", "deberta-tiny", "--seq-len", "32",
                                         "--vocab-size", "400")
    assert metrics["steps"] == 4 and np.isfinite(metrics["history"][-1]["loss"])
    encoded = served.serve(tf.constant(["Now is the winter of our discontent.", ""]))
    assert encoded["sequence_output"].shape[-1] == 128
    assert metrics["fill_mask"]


def test_layer_wise_rates_count_the_embedding_norm_as_the_embeddings():
    backbone = DebertaBackbone(vocab_size=40, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=24,
                               position_buckets=6, max_relative_positions=11)
    depths = backbone.variable_depths()
    assert {depth for path, depth in depths.items() if path.startswith("embedding")} == {0}
    assert {depths[path] for path in depths if path.startswith("encoder_block_1/")} == {2}
    assert depths["relative_embeddings/embeddings"] == 3  # shared by every layer: the top group


@pytest.mark.parametrize("layout", ["v1", "v3"])
def test_a_length_known_in_advance_reads_only_the_rows_it_reaches(layout):
    """With the length static, the shared table is cut to the rows its distances reach (2 L - 1 rows for v1's
    plain distances); a graph whose length is unknown until run time reads the whole table; both compute
    the same states."""
    config = {"v1": V1_CONFIGS["v1"], "v3": V2_CONFIGS["v3"]}[layout]
    cls = transformers.DebertaModel if layout == "v1" else transformers.DebertaV2Model
    config_cls = transformers.DebertaConfig if layout == "v1" else transformers.DebertaV2Config
    backbone = _converted(perturbed_hf_model(cls, config_cls(**dict(config, max_relative_positions=30))))
    inputs = _batch(config["vocab_size"], [9, 6], seed=5)
    table_layer = backbone.get_layer("relative_embeddings")
    table, _ = table_layer(tf.zeros((2, 9, 1)))
    if layout == "v1":
        assert table.shape[0] == 2 * 9 - 1 < 2 * table_layer.span
    unknown = tf.function(lambda ids, mask: backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"],
                          input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2)
    assert unknown.get_concrete_function().structured_outputs.shape[1] is None
    np.testing.assert_allclose(unknown(inputs["token_ids"], inputs["padding_mask"]).numpy(),
                               np.asarray(backbone(inputs)["sequence_output"]), atol=TOLERANCE)
