"""BigBird: block-sparse attention against a dense oracle with the equivalent [L, L] block mask, the
random plan's rules and statistics, a traced graph free of [L, L] tensors, and transformers' BigBird
(random init, fp32, 1e-5) in block-sparse mode (its own random plan injected into ours, seq 256, block 16,
r 2) and in full mode, every checkpoint layout."""

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers
from keras import ops

from hf_reference import perturbed_hf_model
from keras_bertology.layers import BlockSparseSelfAttention, MultiHeadSelfAttention
from keras_bertology.layers.block_sparse_attention import dense_length_limit, random_plan
from keras_bertology.models.bigbird import BIGBIRD
from keras_bertology.models.bigbird.convert import convert

TOLERANCE = 1e-5


def allowed_blocks(plan, num_blocks):
    """[N, blocks, blocks] bool: the ITC pattern written out (global rows and columns, the 3-block window,
    the plan's random blocks)."""
    allowed = np.zeros((plan.shape[0], num_blocks, num_blocks), bool)
    allowed[:, [0, -1], :] = True
    allowed[:, :, [0, -1]] = True
    for query in range(1, num_blocks - 1):
        allowed[:, query, query - 1:query + 2] = True
        for head in range(plan.shape[0]):
            allowed[head, query, plan[head, query - 1]] = True
    return allowed


def dense_oracle(layer, x, padding_mask, plan):
    """Full attention in NumPy through `layer`'s projections, hidden keys masked by the [L, L] block mask."""
    batch, length, _ = x.shape
    size, heads = layer.block_size, layer.num_heads
    num_blocks = -(-length // size)
    mask = np.repeat(np.repeat(allowed_blocks(plan, num_blocks), size, 1), size, 2)[:, :length, :length]
    q, k, v = (np.asarray(dense(x)).reshape(batch, length, heads, -1)
               for dense in (layer.query_dense, layer.key_dense, layer.value_dense))
    scores = np.einsum("bqnd,bknd->bnqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(mask[None] & (padding_mask[:, None, None, :] > 0), scores, -1e9)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bnqk,bknd->bqnd", probs, v) * padding_mask[:, :, None, None]
    return np.asarray(layer.output_dense(context.reshape(batch, length, -1).astype("float32")))


def _inputs(length, batch=2, width=12, real=None, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, length, width)).astype("float32")
    mask = np.ones((batch, length), "int32")
    mask[-1, real or length:] = 0
    return x, mask


@pytest.mark.parametrize("length, real", [(45, 37), (64, None), (53, 9)])
def test_block_sparse_equals_dense_attention_under_the_block_mask(length, real):
    """Lengths off the block grid (padded inside), padded rows whose last global block is all padding,
    and a row shorter than two blocks; padded queries get a zero context, as the original's."""
    layer = BlockSparseSelfAttention(num_heads=3, block_size=4, random_blocks=2, seed=5)
    x, mask = _inputs(length, real=real)
    got = np.asarray(layer(x, mask[:, None, :]))
    plan = np.asarray(random_plan(5, 3, -(-length // 4), 2))
    np.testing.assert_allclose(got, dense_oracle(layer, x, mask, plan), atol=TOLERANCE)
    padded = mask == 0
    if padded.any():
        np.testing.assert_allclose(got[padded], np.broadcast_to(layer.output_dense.bias.numpy(), got[padded].shape),
                                   atol=1e-6)


def test_at_and_below_the_limit_the_layer_attends_in_full():
    layer = BlockSparseSelfAttention(num_heads=2, block_size=4, random_blocks=1, dropout=0.0, initializer_range=0.5)
    limit = dense_length_limit(4, 1)
    assert limit == 28
    x, mask = _inputs(limit, width=8)
    got = np.asarray(layer(x, mask[:, None, :]))
    dense = MultiHeadSelfAttention(num_heads=2)
    dense.build(x.shape)
    dense.set_weights(layer.get_weights())
    np.testing.assert_allclose(got, np.asarray(dense(x, mask[:, None, :])), atol=1e-6)
    longer, longer_mask = _inputs(limit + 1, width=8)
    assert np.abs(np.asarray(layer(longer, longer_mask[:, None, :]))
                  - np.asarray(dense(longer, longer_mask[:, None, :]))).max() > 1e-3


def test_random_plans_keep_the_originals_rules_and_are_uniform():
    """Every draw lies in blocks 1..m-2 outside its window, distinct within a row; block 1 never draws
    m-2 nor m-2 block 1. Over 6 seeds x 12 heads the draws of each (query, key) pair are uniform:
    each cell's count is within 5 standard errors of its expectation r / candidates."""
    num_blocks, r, heads = 24, 3, 12
    counts = np.zeros((num_blocks - 2, num_blocks))
    for seed in range(6):
        plan = np.asarray(random_plan(seed, heads, num_blocks, r))
        assert plan.shape == (heads, num_blocks - 2, r)
        for query, row in zip(range(1, num_blocks - 1), plan.transpose(1, 0, 2)):
            assert (row >= 1).all() and (row <= num_blocks - 2).all() and (np.abs(row - query) > 1).all()
            assert all(len(set(draws)) == r for draws in row)
            if query == 1:
                assert (row != num_blocks - 2).all()
            if query == num_blocks - 2:
                assert (row != 1).all()
            np.add.at(counts[query - 1], row.ravel(), 1)
    draws = 6 * heads
    for query in range(1, num_blocks - 1):
        candidates = [key for key in range(1, num_blocks - 1) if abs(key - query) > 1
                      and not (query == 1 and key == num_blocks - 2) and not (query == num_blocks - 2 and key == 1)]
        p = r / len(candidates)
        expected, error = draws * p, np.sqrt(draws * p * (1 - p))
        assert np.abs(counts[query - 1, candidates] - expected).max() <= 5 * error
    assert not np.array_equal(np.asarray(random_plan(0, heads, num_blocks, r)),
                              np.asarray(random_plan(1, heads, num_blocks, r)))


def test_dynamic_lengths_take_the_same_paths_as_static_ones():
    """A graph traced for any length (serving) chooses full or block-sparse attention and the same plan
    when it runs."""
    layer = BlockSparseSelfAttention(num_heads=2, block_size=4, random_blocks=1, seed=3)
    traced = tf.function(lambda x, mask: layer(x, mask[:, None, :]),
                         input_signature=[tf.TensorSpec([None, None, 8]), tf.TensorSpec([None, None], tf.int32)])
    for length in (20, 28, 29, 61):
        x, mask = _inputs(length, width=8, real=length - 3)
        np.testing.assert_allclose(traced(x, mask).numpy(), np.asarray(layer(x, mask[:, None, :])), atol=1e-6)


def test_the_block_sparse_graph_holds_no_length_by_length_tensor():
    """Every tensor of a traced block-sparse layer has at most one axis as long as the sequence; the same
    check finds the [B, N, L, L] scores of full attention."""
    length = 512

    def long_axes(layer):
        traced = tf.function(lambda x, mask: layer(x, mask[:, None, :]))
        graph = traced.get_concrete_function(tf.TensorSpec([1, length, 16]),
                                             tf.TensorSpec([1, length], tf.int32)).graph
        return max(sum(1 for d in output.shape if d is not None and d >= length)
                   for op in graph.get_operations() for output in op.outputs if output.shape.rank)

    assert long_axes(BlockSparseSelfAttention(num_heads=2, block_size=16, random_blocks=2)) == 1
    assert long_axes(MultiHeadSelfAttention(num_heads=2)) == 2


def _hf_plans(model, length, block, r):
    """transformers' random plan of each layer at `length`, drawn as its forward draws it in training."""
    plans = []
    for layer in model.bert.encoder.layer:
        attention = layer.attention.self
        attention.train()
        np.random.seed(attention.seed)
        lengths, counts = attention._get_rand_attn_plan(length, block, r)
        plan = attention._bigbird_block_rand_mask_with_head(
            from_seq_length=length, to_seq_length=length, from_block_size=block, to_block_size=block,
            num_heads=attention.num_attention_heads, plan_from_length=lengths, plan_num_rand_blocks=counts)
        plans.append(np.stack(plan).tolist())
    return plans


SMALL = dict(vocab_size=90, hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=80,
             max_position_embeddings=300, initializer_range=0.2, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, block_size=16, num_random_blocks=2, hidden_act="gelu_new")


def _batch(length, real):
    rng = np.random.default_rng(0)
    mask = np.ones((2, length), "int64")
    mask[1, real:] = 0
    return {"input_ids": rng.integers(1, 90, (2, length)) * mask, "attention_mask": mask,
            "token_type_ids": rng.integers(0, 2, (2, length)) * mask}


def _ours(batch):
    return {"token_ids": batch["input_ids"].astype("int32"), "padding_mask": batch["attention_mask"].astype("int32"),
            "segment_ids": batch["token_type_ids"].astype("int32"), "mask_positions": np.asarray([[1, 5], [7, 3]],
                                                                                                 "int32")}


def _with_plans(backbone, plans):
    """`backbone` rebuilt with `plans` ([heads, blocks - 2, r] per layer) pinned, weights copied."""
    config = backbone.get_config()
    blocks = len(plans[0][0]) + 2
    config["attention_options"] = dict(config["attention_options"], layer_plans=[{blocks: plan} for plan in plans])
    pinned = type(backbone).from_config(config)
    pinned.set_weights(backbone.get_weights())
    return pinned


@pytest.mark.parametrize("cls, attention_type, length", [
    (transformers.BigBirdForPreTraining, "block_sparse", 250),  # padded to 256 inside: 16 blocks
    (transformers.BigBirdForMaskedLM, "block_sparse", 288),
    (transformers.BigBirdModel, "original_full", 70),
])
def test_converted_bigbird_matches_transformers(cls, attention_type, length):
    """States, pooler, MLM and NSP logits. transformers draws its random blocks in training mode only (in
    eval they are all block 0), so it runs in training mode with dropout 0 and its plan is pinned in ours."""
    hf = perturbed_hf_model(cls, transformers.BigBirdConfig(**SMALL, attention_type=attention_type))
    hf.train()
    batch = _batch(length, real=length - 47)
    with torch.no_grad():
        out = hf(**{name: torch.tensor(value) for name, value in batch.items()}, output_hidden_states=True)
    weights = {name: value.detach().numpy() for name, value in hf.state_dict().items()}
    backbone, pretrainer, heads, used, notes = convert(BIGBIRD, hf.config.to_dict(), weights)
    assert used == set(weights) and not notes
    sparse = attention_type == "block_sparse"
    assert backbone.get_config().get("attention_type", "full") == ("block_sparse" if sparse else "full")
    if sparse:  # pinned on the layers the pretrainer shares
        blocks = -(-length // 16)
        for index, plan in enumerate(_hf_plans(hf, blocks * 16, 16, 2)):
            backbone.get_layer(f"encoder_block_{index}").attention.random_plans = {blocks: plan}
    inputs = _ours(batch)
    states = out.hidden_states[-1].numpy()
    got = backbone({name: inputs[name] for name in backbone.input})
    assert np.abs(states).max() > 1
    np.testing.assert_allclose(np.asarray(got["sequence_output"]), states, atol=TOLERANCE)
    if cls is transformers.BigBirdModel:
        assert heads == ["pooler"]
        np.testing.assert_allclose(np.asarray(got["pooled_output"]), out.pooler_output.numpy(), atol=TOLERANCE)
        return
    logits = pretrainer(inputs)
    expected = out.logits if cls is transformers.BigBirdForMaskedLM else out.prediction_logits
    picked = np.take_along_axis(expected.numpy(), inputs["mask_positions"][:, :, None], axis=1)
    np.testing.assert_allclose(np.asarray(logits["mlm"]), picked, atol=TOLERANCE)
    if cls is transformers.BigBirdForPreTraining:
        assert heads == ["pooler", "mlm", "nsp"]
        np.testing.assert_allclose(np.asarray(logits["nsp"]), out.seq_relationship_logits.numpy(), atol=TOLERANCE)
    else:
        assert heads == ["pooler", "mlm"]


def test_the_plan_is_saved_with_the_model(tmp_path):
    """The seed (and any pinned plan) survives a .keras round trip: the reloaded encoder gives the same
    states at a block-sparse length."""
    import keras

    backbone = BIGBIRD.backbone_cls(**BIGBIRD.backbone_config("bigbird-tiny", vocab_size=60, max_positions=200))
    assert [backbone.get_layer(f"encoder_block_{i}").attention.seed for i in (0, 1)] == [0, 1]
    backbone = _with_plans(backbone, [np.asarray(random_plan(seed, 2, 11, 2)).tolist() for seed in (7, 9)])
    attention = backbone.get_layer("encoder_block_1").attention
    rng = np.random.default_rng(1)
    inputs = {"token_ids": rng.integers(0, 60, (1, 170)).astype("int32"), "padding_mask": np.ones((1, 170), "int32"),
              "segment_ids": np.zeros((1, 170), "int32")}
    backbone.save(tmp_path / "b.keras")
    again = keras.saving.load_model(tmp_path / "b.keras")
    assert again.get_layer("encoder_block_1").attention.random_plans == {11: attention.random_plans[11]}
    np.testing.assert_allclose(np.asarray(again(inputs)["sequence_output"]),
                               np.asarray(backbone(inputs)["sequence_output"]), atol=1e-6)


def test_bad_attention_inputs_are_refused():
    layer = BlockSparseSelfAttention(num_heads=2, block_size=4, random_blocks=1)
    x, mask = _inputs(40, width=8)
    with pytest.raises(ValueError, match="key padding mask"):
        layer(x, np.ones((2, 40, 40), "int32"))
    with pytest.raises(ValueError, match="causal"):
        BlockSparseSelfAttention(num_heads=2, causal=True)
    layer.random_plans = {10: [[[3, 4]] * 8] * 2}  # two draws per block; the layer draws one
    with pytest.raises(ValueError, match="pinned random plan"):
        layer(x, mask[:, None, :])
    assert ops.shape(layer(x[:, :28], mask[:, None, :28]))[1] == 28  # full attention: no plan needed


LONG_TEXT = " ".join(["Now is the winter of our discontent made glorious summer by this sun of York;"] * 30)
TEXTS = ["Now is the winter of our discontent.", "Café naïve ``quoted'' Text"]


def test_pretraining_bigbird_at_a_block_sparse_length_serves_and_exports_to_transformers(tmp_path, capsys):
    """Four steps at 256 tokens with --block-size 32 --random-blocks 1 (block-sparse above 224): a SavedModel
    whose graph picks the attention per request, giving a long text the states of the Keras encoder; `export --format hf` gives
    BigBirdForMaskedLM, whose states (its plan pinned in ours) and tokenizer ids are ours, and which
    converts back."""
    from cli_runs import pretrain_two_plays
    from keras_bertology.cli import main
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
    from keras_bertology.runs import load_run_model

    metrics, served = pretrain_two_plays(tmp_path, capsys, "bigbird", "bigbird-tiny", "--seq-len", "256",
                                         "--vocab-size", "400", "--block-size", "32", "--random-blocks", "1")
    assert metrics["steps"] == 4 and np.isfinite(metrics["history"][-1]["loss"])
    run = load_run_model(tmp_path / "run")
    assert run.backbone.get_config()["attention_options"] == {"block_size": 32, "random_blocks": 1}
    outputs = served.serve(tf.constant([LONG_TEXT, TEXTS[0]]))
    ids, mask = outputs["token_ids"].numpy(), outputs["padding_mask"].numpy()
    assert ids.shape[1] == 256 and mask[1].sum() < 224
    expected = run.backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)})
    np.testing.assert_allclose(outputs["sequence_output"].numpy(), np.asarray(expected["sequence_output"]),
                               atol=1e-5)

    out = tmp_path / "hf"
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "--out", str(out)]) == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    ours = run.tokenizer.tokenize(tf.constant(TEXTS)).to_list()
    assert type(tokenizer).__name__ in ("BigBirdTokenizer", "BigBirdTokenizerFast")
    assert tokenizer(TEXTS, add_special_tokens=False)["input_ids"] == ours
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(out)).train()  # dropout 0.1: off below
    for module in hf.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    for index, plan in enumerate(_hf_plans(hf, 256, 32, 1)):
        run.backbone.get_layer(f"encoder_block_{index}").attention.random_plans = {8: plan}
    with torch.no_grad():
        states = hf(input_ids=torch.tensor(ids[:1], dtype=torch.long), output_hidden_states=True).hidden_states[-1]
    got = run.backbone({"token_ids": ids[:1], "padding_mask": mask[:1], "segment_ids": np.zeros_like(ids[:1])})
    np.testing.assert_allclose(np.asarray(got["sequence_output"]), states.numpy(), atol=TOLERANCE)
    back, _ = convert_hf_checkpoint(out)
    assert back.family == "bigbird"
    assert back.tokenizer.tokenize(tf.constant(TEXTS)).to_list() == ours


@pytest.mark.parametrize("name", sorted(BIGBIRD.presets))
def test_presets_count_what_transformers_builds(name):
    """transformers' BigBirdModel of the preset's size (built on the meta device: shapes only)."""
    from counting import shapes_only

    config = BIGBIRD.presets[name]["config"]
    hf_config = transformers.BigBirdConfig(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"], num_hidden_layers=config["num_layers"],
        num_attention_heads=config["num_heads"], intermediate_size=config["intermediate_size"],
        max_position_embeddings=config["max_positions"], block_size=config["attention_options"]["block_size"],
        num_random_blocks=config["attention_options"]["random_blocks"])
    with torch.device("meta"):
        expected = sum(parameter.numel() for parameter in transformers.BigBirdModel(hf_config).parameters())
    with shapes_only():
        assert BIGBIRD.backbone_cls(**BIGBIRD.backbone_config(name)).count_params() == expected
    assert BIGBIRD.presets[name]["params"] == expected


def test_compiled_block_sparse_training_steps_match_the_uncompiled_ones():
    """48 tokens in blocks of 4 (block-sparse above 28): three steps under XLA (JAX's jit on that backend)
    give the losses of the uncompiled steps, and the loss falls."""
    from compiled_steps import train_steps

    options = {"block_size": 4, "random_blocks": 1}
    compiled, plain = (train_steps(BIGBIRD, "bigbird-tiny", options, jit, max_positions=64) for jit in (True, False))
    assert np.allclose(compiled, plain, rtol=1e-4) and compiled[-1] < compiled[0]
