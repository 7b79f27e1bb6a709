"""Transformer-XL: parity with an independent NumPy reference (through `convert`), the recurrence invariant,
the adaptive softmax against torch, the stream instances, and the CLI from pretraining to serving."""

import json
import sys

import keras
import numpy as np
import pytest
import torch
from keras import ops

import transformer_xl_reference as reference
from counting import shapes_only
from keras_bertology.cli import main
from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.layers.adaptive_softmax import AdaptiveEmbedding, AdaptiveSoftmax
from keras_bertology.models.transformer_xl import TRANSFORMER_XL, TransformerXLBackbone
from keras_bertology.models.transformer_xl.instances import stream_segments
from forked_python import run_python

# Odd shapes: 3 heads of 6, feed-forward 40; the switches on and off.
_BASE = dict(vocab_size=61, d_model=18, d_embed=18, n_head=3, d_head=6, d_inner=40, n_layer=2, mem_len=6,
             clamp_len=-1, same_length=False, layer_norm_epsilon=1e-5, pre_lnorm=False, attn_type=0)
CONFIGS = {
    "clusters-div2": dict(_BASE, cutoffs=[12, 30], div_val=2, untie_r=False, tie_projs=[False, True, False]),
    "full-softmax-untied": dict(_BASE, cutoffs=[], div_val=1, untie_r=True, clamp_len=4, tie_projs=[False]),
    "div1-projected": dict(_BASE, cutoffs=[20], div_val=1, d_embed=10, untie_r=False, tie_projs=[True, False]),
}


def _hf_layout(state):
    """The reference reads the head's cluster logits from the end (the original PyTorch code); transformers 4
    saved checkpoints read them in cutoff order: the same model with the cluster rows reversed."""
    state = dict(state)
    for name in ("crit.cluster_weight", "crit.cluster_bias"):
        if name in state:
            state[name] = state[name][::-1].copy()
    return state


def _convert(config, state):
    from keras_bertology.models.transformer_xl.convert import convert

    hf_config = dict(config, adaptive=True, dropout=0.0, dropatt=0.0)
    backbone, pretrainer, heads, used, _ = convert(TRANSFORMER_XL, hf_config, _hf_layout(state))
    return backbone, pretrainer, heads, used


def _ours(pretrainer, token_ids, memory=None, attention_window=None):
    outputs = pretrainer.backbone.encoder(ops.convert_to_tensor(token_ids), memory=memory,
                                          attention_window=attention_window, training=False)
    log_probs = ops.log_softmax(pretrainer.get_layer("clm_head")(outputs["sequence"]), axis=-1)
    return outputs, ops.convert_to_numpy(log_probs)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_convert_matches_the_numpy_reference_with_memory(name):
    """Two segments, the second reading the memory the first left: log-probabilities, hidden states and the
    memory itself within 1e-5 of the reference (float64), with weights large enough that ReLU, LayerNorm and
    the softmaxes bend; every tensor of the checkpoint is used."""
    config = CONFIGS[name]
    state = reference.random_state_dict(config, seed=1, scale=0.3)
    _, pretrainer, heads, used = _convert(config, state)
    assert heads == ["clm"]
    assert used == set(state), sorted(set(state) - used)
    rng = np.random.default_rng(0)
    first, second = (rng.integers(0, config["vocab_size"], (2, 5)) for _ in range(2))
    expected_first = reference.forward(config, state, first, mem_len=config["mem_len"])
    expected = reference.forward(config, state, second, mems=expected_first["new_mems"])
    outputs, log_probs = _ours(pretrainer, first)
    np.testing.assert_allclose(log_probs, expected_first["log_probs"], atol=1e-5)
    layer_inputs = ops.convert_to_numpy(outputs["layer_inputs"])
    np.testing.assert_allclose(layer_inputs, np.stack(expected_first["new_mems"][:-1]), atol=1e-5)
    memory = ops.convert_to_tensor(np.stack(expected_first["new_mems"][:-1]).astype("float32"))
    outputs, log_probs = _ours(pretrainer, second, memory)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs["sequence"]), expected["hidden"], atol=1e-5)
    np.testing.assert_allclose(log_probs, expected["log_probs"], atol=1e-5)


def test_same_length_window_matches_the_reference():
    """same_length with a full memory: every query sees mem_len keys, itself included."""
    config = CONFIGS["clusters-div2"]
    state = reference.random_state_dict(config, seed=2, scale=0.3)
    _, pretrainer, _, _ = _convert(config, state)
    rng = np.random.default_rng(3)
    first, second = rng.integers(0, 61, (2, 6)), rng.integers(0, 61, (2, 5))
    mems = reference.forward(config, state, first, mem_len=6)["new_mems"]
    expected = reference.forward(config, state, second, mems=mems, same_length=True, mem_len=6)
    memory = ops.convert_to_tensor(np.stack(mems[:-1]).astype("float32"))
    _, log_probs = _ours(pretrainer, second, memory, attention_window=6)
    np.testing.assert_allclose(log_probs, expected["log_probs"], atol=1e-5)
    _, without_window = _ours(pretrainer, second, memory)
    assert np.abs(without_window - expected["log_probs"]).max() > 1e-2  # the window changes the numbers


def _tiny_pretrainer(mem_len, batch_size=2, **config):
    backbone = TransformerXLBackbone(**dict(dict(vocab_size=50, num_layers=2, num_heads=2, hidden_size=12,
                                                 intermediate_size=20, cutoffs=[10, 30], div_val=2, dropout=0.0,
                                                 initializer_range=0.3),
                                            **config))
    return TRANSFORMER_XL.build_pretrainer(backbone, {"mem_len": mem_len}, batch_size=batch_size)


def test_training_steps_carry_the_memory_of_the_previous_segment():
    """The recurrence invariant through the training path: a training step leaves the last mem_len states each
    layer read; segment 2 scored with a memory holding all of segment 1 equals the segment-2 rows of one causal
    pass over both; with a shorter memory it equals the encoder given those last states; and `stream_start`
    clears a row's memory (its first segment sees none: not zeros)."""
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 50, (2, 14)).astype("int32")
    ones = np.ones((2, 7), "int32")
    for mem_len in (7, 3):
        model = _tiny_pretrainer(mem_len)
        encoder, head = model.backbone.encoder, model.get_layer("clm_head")
        step = {"token_ids": stream[:, :7], "padding_mask": ones, "stream_start": np.ones(2, "int32")}
        model(step, training=True)
        memory = ops.convert_to_numpy(model.get_layer("memory_stream").memory)
        first = ops.convert_to_numpy(encoder(ops.convert_to_tensor(stream[:, :7]))["layer_inputs"])
        np.testing.assert_allclose(memory, first[:, :, -mem_len:], atol=1e-6)
        second = {"token_ids": stream[:, 7:], "padding_mask": ones, "stream_start": np.array([0, 1], "int32")}
        scored = ops.convert_to_numpy(model(second, training=False)["clm"])
        if mem_len == 7:
            expected = model.causal_lm_model()({"token_ids": stream, "padding_mask": np.ones((2, 14), "int32")})
            expected = ops.convert_to_numpy(expected)[:, 7:]
        else:
            given = encoder(ops.convert_to_tensor(stream[:, 7:]), memory=ops.convert_to_tensor(memory))
            expected = ops.convert_to_numpy(head(given["sequence"]))
        np.testing.assert_allclose(scored[0], expected[0], atol=2e-5)
        alone = ops.convert_to_numpy(model.causal_lm_model()({"token_ids": stream[:, 7:], "padding_mask": ones}))
        np.testing.assert_allclose(scored[1], alone[1], atol=2e-5)  # row 1 started again: no memory
        assert np.abs(scored[0] - alone[0]).max() > 0.1
        keras.backend.clear_session()


def test_a_restarted_row_counts_only_its_new_stream_in_a_memory_longer_than_a_segment():
    """mem_len 10, segments of 7: a row that starts again at segment 2 holds 7 states of it after that step
    and 3 emptied slots, which must stay hidden: its segment 3 scores as one causal pass over segments 2 and
    3. (Where segments fill the whole memory, a count kept from the old stream is capped at mem_len
    either way, and the restart looks right.)"""
    rng = np.random.default_rng(1)
    stream = rng.integers(0, 50, (2, 21)).astype("int32")
    ones = np.ones((2, 7), "int32")
    model = _tiny_pretrainer(10)
    for start, stream_start in ((0, [1, 1]), (7, [0, 1])):
        model({"token_ids": stream[:, start:start + 7], "padding_mask": ones,
               "stream_start": np.array(stream_start, "int32")}, training=True)
    assert ops.convert_to_numpy(model.get_layer("memory_stream").filled).tolist() == [10.0, 7.0]
    scored = ops.convert_to_numpy(model({"token_ids": stream[:, 14:], "padding_mask": ones,
                                         "stream_start": np.zeros(2, "int32")}, training=False)["clm"])
    expected = model.causal_lm_model()({"token_ids": stream[:, 7:], "padding_mask": np.ones((2, 14), "int32")})
    np.testing.assert_allclose(scored[1], ops.convert_to_numpy(expected)[1, 7:], atol=1e-5)
    keras.backend.clear_session()


def test_adaptive_softmax_matches_torch_where_their_options_coincide():
    """div_val 1, no projections: torch's AdaptiveLogSoftmaxWithLoss with its tail projections set to the
    identity, tail biases zero, and the cluster rows in its order (ours reads them from the end)."""
    vocab, width, cutoffs = 40, 8, [10, 25]
    embedding = AdaptiveEmbedding(vocab, width, cutoffs, div_val=1)
    embedding.build()
    head = AdaptiveSoftmax(embedding)
    head.build((None, width))
    rng = np.random.default_rng(0)
    table, cluster, cluster_bias, shortlist_bias = (rng.normal(0, 0.8, shape).astype("float32") for shape in
                                                    ((vocab, width), (2, width), (2,), (10,)))
    embedding.embeddings[0].assign(table)
    head.cluster_kernel.assign(cluster)
    head.cluster_bias.assign(cluster_bias)
    head.bias.assign(np.concatenate([shortlist_bias, np.zeros(vocab - 10, "float32")]))
    hidden = rng.normal(0, 1.5, (6, width)).astype("float32")
    torch_head = torch.nn.AdaptiveLogSoftmaxWithLoss(width, vocab, cutoffs, div_value=1.0, head_bias=True)
    with torch.no_grad():
        torch_head.head.weight.copy_(torch.tensor(np.concatenate([table[:10], cluster[::-1]])))
        torch_head.head.bias.copy_(torch.tensor(np.concatenate([shortlist_bias, cluster_bias[::-1]])))
        for index, (first, end) in enumerate(((10, 25), (25, 40))):
            torch_head.tail[index][0].weight.copy_(torch.eye(width))
            torch_head.tail[index][1].weight.copy_(torch.tensor(table[first:end]))
        expected = torch_head.log_prob(torch.tensor(hidden)).numpy()
    np.testing.assert_allclose(ops.convert_to_numpy(head(hidden)), expected, atol=1e-5)


@pytest.mark.parametrize("name", sorted(TRANSFORMER_XL.presets))
def test_presets_count_the_original_parameters(name):
    """The original PyTorch code's counts (REFERENCE-2): the backbone plus the softmax's own weights."""
    preset = TRANSFORMER_XL.presets[name]
    with shapes_only():
        backbone = TransformerXLBackbone(**preset["config"])
        pretrainer = TRANSFORMER_XL.build_pretrainer(backbone, {"mem_len": 0}, preset=name, batch_size=1)
        trainable = sum(int(np.prod(variable.shape)) for variable in pretrainer.trainable_weights)
        assert trainable == preset["params"]
        vocab, cutoffs = preset["config"]["vocab_size"], preset["config"]["cutoffs"]
        own_head = vocab + (len(cutoffs) * (preset["config"]["hidden_size"] + 1) if cutoffs else 0)
        own_head += 1024 * 1024 if name.endswith("large") else 0  # the untied head projection
        assert backbone.count_params() == preset["params"] - own_head


def test_stream_segments_walk_each_row_of_one_stream_in_order():
    """Concatenating row r's segments over the batches gives row r of the stream; every target is the token
    after its position, across segment borders; `copies` start the streams again."""
    rng = np.random.default_rng(0)
    documents = [[rng.integers(5, 90, rng.integers(3, 20)) for _ in range(rng.integers(1, 6))] for _ in range(40)]
    out = stream_segments(documents, InstanceContext(7, {"sep_id": 1, "pad_id": 0}, copies=2, batch_size=4))
    stream = np.concatenate([piece for document in documents for piece in (*document, [1])])
    row_length = len(stream) // 4
    batches = (row_length - 1) // 7
    assert out["token_ids"].shape == (2 * batches * 4, 7)
    tokens = out["token_ids"][:batches * 4].reshape(batches, 4, 7).transpose(1, 0, 2).reshape(4, -1)
    targets = out["next_token_ids"][:batches * 4].reshape(batches, 4, 7).transpose(1, 0, 2).reshape(4, -1)
    rows = stream[:4 * row_length].reshape(4, row_length)
    np.testing.assert_array_equal(tokens, rows[:, :batches * 7])
    np.testing.assert_array_equal(targets, rows[:, 1:batches * 7 + 1])
    assert out["stream_start"].reshape(2, batches, 4)[:, 0].all() and out["stream_start"].sum() == 8
    np.testing.assert_array_equal(out["token_ids"][:batches * 4], out["token_ids"][batches * 4:])


def test_pretraining_falls_below_the_unigram_level_and_serves(tmp_path, capsys):
    run, export = tmp_path / "run", tmp_path / "export"
    from keras_bertology.data.corpus import default_corpus_paths

    plays = [str(path) for path in default_corpus_paths()[:6]]  # 150 steps read a fraction of one play
    assert main(["pretrain", "--model", "transformer-xl", "--preset", "transformer-xl-tiny", "--steps", "150",
                 "--batch-size", "16", "--seq-len", "32", "--vocab-size", "600", "--mem-len", "32",
                 "--corpus", *plays, "--out", str(run), "--export", str(export)]) == 0
    out = capsys.readouterr().out
    metrics = json.loads((run / "metrics.json").read_text())
    clm = metrics["objectives"]["clm"]
    assert clm["last"]["loss"] < clm["chance"]["loss"] < clm["first"]["loss"]
    assert metrics["held_out_perplexity"] < clm["chance"]["perplexity"]
    stream = metrics["held_out_stream"]
    assert stream["with_memory"]["mem_len"] == 32 and stream["without_memory"]["mem_len"] == 0
    assert stream["with_memory"]["tokens"] == stream["without_memory"]["tokens"] > 100
    assert stream["with_memory"]["perplexity"] != stream["without_memory"]["perplexity"]
    assert "with a memory of 32 states" in out and "continuations of their first halves" in out
    script = (f"import tensorflow as tf, tensorflow_text; m = tf.saved_model.load({str(export)!r}); "
              "print(m.generate(tf.constant(['the king']))['text'].shape, "
              "m.score(tf.constant(['the king is dead']))['num_tokens'].numpy().tolist())")
    served = run_python([sys.executable, "-c", script], check=True).stdout
    assert served.split()[:2] == ["(1,)", "[4]"] or "(1,)" in served, served


def test_convert_reads_a_transformers_4_folder_from_the_command_line(tmp_path, capsys):
    """A `TransfoXLLMHeadModel` folder as transformers 4 saved it (tied copies dropped): the CLI converts it,
    and the converted run scores like the reference."""
    from safetensors.numpy import save_file

    from keras_bertology.runs import load_run_model

    config = CONFIGS["clusters-div2"]
    state = reference.random_state_dict(config, seed=4, scale=0.3)
    saved = {name: np.ascontiguousarray(value) for name, value in _hf_layout(state).items()
             if not name.startswith(("crit.out_layers.", "crit.out_projs.1")) or name.endswith("bias")}
    folder = tmp_path / "hf"
    folder.mkdir()
    save_file(saved, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(dict(config, model_type="transfo-xl", adaptive=True,
                                                        architectures=["TransfoXLLMHeadModel"])))
    assert main(["convert", "--from-hf", str(folder), "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    run = load_run_model(tmp_path / "run")
    tokens = np.random.default_rng(5).integers(0, 61, (2, 6))
    logits = run.pretrainer.causal_lm_model()({"token_ids": tokens, "padding_mask": np.ones_like(tokens)})
    np.testing.assert_allclose(ops.convert_to_numpy(logits), reference.forward(config, state, tokens)["log_probs"],
                               atol=1e-5)


def test_a_resumed_run_goes_on_with_the_memory_it_stopped_with(tmp_path):
    """Delete the newest checkpoint of a finished run and resume: the memory (and how much of it is filled)
    comes back from the checkpoint, so the weights end bit for bit as the uninterrupted run's."""
    import shutil

    from keras_bertology.data.corpus import default_corpus_paths
    from keras_bertology.engine.checkpoints import RunCheckpoints
    from keras_bertology.pretraining.options import PretrainOptions
    from keras_bertology.pretraining.pretrain import pretrain

    def options(folder, **extra):
        return PretrainOptions(model="transformer-xl", preset="transformer-xl-tiny", steps=6, log_every=3,
                               corpus=[str(default_corpus_paths()[0])], batch_size=4, seq_len=16, vocab_size=400,
                               out=str(folder / "run"), no_export=True, verbose=0, family_options={"mem_len": 24},
                               **extra)

    finished = pretrain(options(tmp_path / "a"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(RunCheckpoints(tmp_path / "b" / "run").latest()[0])
    resumed = pretrain(options(tmp_path / "b", resume=True))
    assert resumed["weights_sha256"] == finished["weights_sha256"]
    stream = RunCheckpoints(tmp_path / "b" / "run").load_model()[0].get_layer("memory_stream")
    assert ops.convert_to_numpy(stream.filled).tolist() == [24.0] * 4
    keras.backend.clear_session()


def test_stream_perplexity_with_a_long_memory_equals_one_pass_over_the_stream():
    """The paper's evaluation: segments read with the memory of all before them score the stream as one causal
    pass does; without memory each segment starts blind, and the numbers differ."""
    model = _tiny_pretrainer(0, batch_size=1)
    stream = np.random.default_rng(6).integers(0, 50, 23).astype("int32")
    carried = model.stream_perplexity(stream, 5, mem_len=30)
    log_probs = ops.convert_to_numpy(ops.log_softmax(model.causal_lm_model()(
        {"token_ids": stream[None, :-1], "padding_mask": np.ones((1, 22), "int32")}), axis=-1))[0]
    expected = np.exp(-log_probs[np.arange(22), stream[1:]].mean())
    assert carried == {"perplexity": pytest.approx(expected, rel=1e-5), "tokens": 22, "segment_length": 5,
                       "mem_len": 30}
    assert model.stream_perplexity(stream, 5, mem_len=0)["perplexity"] != pytest.approx(expected, rel=1e-3)
