"""XLNet: parity with transformers (content and query streams, memory, bi_data), the layers' invariants."""

import keras
import numpy as np
import pytest
import torch
import transformers

from counting import shapes_only
from hf_reference import perturbed_hf_model
from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
from keras_bertology.layers import rel_shift, sinusoidal_relative_positions
from keras_bertology.models.xlnet import XLNetBackbone
from keras_bertology.models.xlnet.presets import XLNET_PRESETS
from forked_python import run_python

TOLERANCE = 1e-5
VOCAB = 89
LENGTH = 12


def _hf(cls, **overrides):
    config = transformers.XLNetConfig(vocab_size=VOCAB, d_model=64, n_layer=2, n_head=4, d_inner=96,
                                      initializer_range=0.2, **overrides)
    return perturbed_hf_model(cls, config)


def _batch(seed=0, batch=4):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(9, VOCAB, (batch, LENGTH)).astype("int32")
    # Left padding, as XLNet pads; one row without padding.
    lengths = np.array([LENGTH, LENGTH - 3, LENGTH - 5, LENGTH])[:batch]
    padding_mask = (np.arange(LENGTH)[None] >= LENGTH - lengths[:, None]).astype("int32")
    segment_ids = (np.arange(LENGTH)[None] >= 6).astype("int32").repeat(batch, 0)
    segment_ids[:, -1] = 2
    return token_ids, padding_mask, segment_ids


def _plm_features(seed=0, batch=4, slots=3):
    """A random factorization order per row: perm_mask (1: may not see) and one-hot targets."""
    rng = np.random.default_rng(seed)
    perm_mask = np.zeros((batch, LENGTH, LENGTH), "float32")
    target_mapping = np.zeros((batch, slots, LENGTH), "float32")
    for row in range(batch):
        order = rng.permutation(LENGTH)
        rank = np.argsort(order)
        targets = order[-slots:]
        perm_mask[row] = (rank[None, :] >= rank[:, None]) & np.isin(np.arange(LENGTH), targets)[None, :]
        target_mapping[row, np.arange(slots), targets] = 1.0
    return perm_mask, target_mapping


def _torch(token_ids, padding_mask, segment_ids, **extra):
    inputs = dict(input_ids=torch.tensor(token_ids, dtype=torch.long), attention_mask=torch.tensor(padding_mask),
                  token_type_ids=torch.tensor(segment_ids, dtype=torch.long))
    inputs.update({name: torch.tensor(value) for name, value in extra.items()})
    return inputs


def _run(hf, tmp_path):
    hf.save_pretrained(str(tmp_path))
    run, report = convert_hf_checkpoint(tmp_path)
    assert run.family == "xlnet" and report.skipped == []
    return run, report


@pytest.mark.parametrize("untie_r", [True, False])
def test_content_stream_matches_transformers(tmp_path, untie_r):
    hf = _hf(transformers.XLNetModel, untie_r=untie_r)
    if not untie_r:  # transformers keeps per-layer biases; a tied checkpoint has them equal
        with torch.no_grad():
            for layer in hf.layer[1:]:
                for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
                    getattr(layer.rel_attn, name).copy_(getattr(hf.layer[0].rel_attn, name))
    run, report = _run(hf, tmp_path)
    assert run.backbone.encoder.untie_r == untie_r and report.notes == []  # equal biases: one shared set
    token_ids, padding_mask, segment_ids = _batch()
    with torch.no_grad():
        expected = hf(**_torch(token_ids, padding_mask, segment_ids)).last_hidden_state.numpy()
    ours = run.backbone.predict({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask},
                                verbose=0)["sequence_output"]
    assert np.abs(expected).max() > 1.0  # LayerNorm outputs; nothing collapsed
    real = padding_mask.astype(bool)
    assert np.abs(ours[real] - expected[real]).max() <= TOLERANCE


def _tiny_spiece(directory):
    """A 150-piece unigram spiece.model with XLNet's specials, written to `directory`; its size."""
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus
    from keras_bertology.models.xlnet.tokenizer import XLNET_SPECIAL_TOKENS
    from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

    sentences = [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:2000]
    trained = train_sentencepiece(sentences, 150, model_type="unigram", byte_fallback=False,
                                  special_tokens=XLNET_SPECIAL_TOKENS)
    directory.mkdir()
    (directory / "spiece.model").write_bytes(trained.model_proto)
    return 150


def test_tied_config_with_differing_layer_biases_converts_per_layer_and_serves(tmp_path, capsys):
    """untie_r=false in config.json, every layer's biases its own (as after training in transformers,
    which never reads untie_r): `bertology convert` follows the tensors, on either backend."""
    from keras_bertology.cli import main
    from keras_bertology.runs import load_run_model

    hf_dir, run_dir = tmp_path / "hf", tmp_path / "run"
    config = transformers.XLNetConfig(vocab_size=_tiny_spiece(hf_dir), d_model=24, n_layer=3, n_head=3, d_inner=40,
                                      initializer_range=0.2, untie_r=False, ff_activation="gelu_new", clamp_len=5)
    hf = perturbed_hf_model(transformers.XLNetLMHeadModel, config)  # every bias perturbed on its own
    biases = [layer.rel_attn.r_r_bias.detach().numpy() for layer in hf.transformer.layer]
    assert not np.array_equal(biases[0], biases[1]) and not np.array_equal(biases[1], biases[2])
    hf.save_pretrained(str(hf_dir))
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(run_dir), "--seq-len", str(LENGTH)]) == 0
    report = capsys.readouterr().out
    assert "untie_r=false but the layers' relative attention biases differ" in report and "skipped" not in report
    run = load_run_model(run_dir)
    assert run.backbone.encoder.untie_r

    token_ids, padding_mask, segment_ids = _batch(4)
    perm_mask, target_mapping = _plm_features(5)
    inputs = _torch(token_ids, padding_mask, segment_ids)
    reference = transformers.XLNetLMHeadModel.from_pretrained(str(hf_dir)).eval()  # what transformers runs
    with torch.no_grad():
        hidden = reference.transformer(**inputs).last_hidden_state.numpy()
        logits = reference(**inputs, perm_mask=torch.tensor(perm_mask),
                           target_mapping=torch.tensor(target_mapping)).logits
    features = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}
    ours = run.backbone.predict(features, verbose=0)["sequence_output"]
    real = padding_mask.astype(bool)
    assert np.abs(hidden).max() > 1.0 and np.abs(ours[real] - hidden[real]).max() <= TOLERANCE
    plm = run.pretrainer.predict(dict(features, perm_mask=perm_mask, target_mapping=target_mapping), verbose=0)["plm"]
    assert np.abs(logits.numpy()).max() > 1.0 and np.abs(plm - logits.numpy()).max() <= TOLERANCE

    if keras.config.backend() != "tensorflow":  # the SavedModel is written and served by TensorFlow
        return
    import tensorflow as tf

    assert main(["export", str(run_dir), "--out", str(tmp_path / "export")]) == 0
    saved_model = tf.saved_model.load(str(tmp_path / "export"))
    served = saved_model.serve(tf.constant(TEXTS))
    packed = {name: served[name].numpy() for name in features}
    expected = run.backbone.predict(packed, verbose=0)["sequence_output"]
    assert packed["padding_mask"].sum(axis=1).min() > 2  # real pieces besides <sep> <cls>
    assert np.abs(served["sequence_output"].numpy() - expected).max() <= TOLERANCE


def _encoder_outputs(run, token_ids, padding_mask, segment_ids, perm_mask, target_mapping, memory=None,
                     bi_data=False):
    encoder = run.backbone.encoder
    outputs = encoder(token_ids, segment_ids, padding_mask, perm_mask, target_mapping, memory=memory,
                      bi_data=bi_data, training=False)
    head = run.pretrainer.get_layer("plm_head")
    return outputs, keras.ops.convert_to_numpy(head(outputs["query"]))


@pytest.mark.parametrize("with_memory", [False, True])
@pytest.mark.parametrize("bi_data", [False, True])
def test_query_stream_logits_match_transformers(tmp_path, with_memory, bi_data):
    hf = _hf(transformers.XLNetLMHeadModel, bi_data=bi_data, clamp_len=7)
    run, report = _run(hf, tmp_path)
    assert report.heads == ["plm"] and any("bi_data=true" in note for note in report.notes) == bi_data
    token_ids, padding_mask, segment_ids = _batch(1)
    perm_mask, target_mapping = _plm_features(2)
    memory = None
    if with_memory:
        memory = np.random.default_rng(3).normal(0, 1, (2, 4, 5, 64)).astype("float32")
    inputs = _torch(token_ids, padding_mask, segment_ids, perm_mask=perm_mask, target_mapping=target_mapping)
    if with_memory:
        inputs["mems"] = [torch.tensor(layer.transpose(1, 0, 2)) for layer in memory]
    with torch.no_grad():
        expected = hf(**inputs).logits.numpy()
    outputs, logits = _encoder_outputs(run, token_ids, padding_mask, segment_ids, perm_mask, target_mapping, memory,
                                       bi_data)
    assert np.abs(expected).max() > 1.0
    assert np.abs(logits - expected).max() <= TOLERANCE
    if not (with_memory or bi_data):  # the imported pretrainer model itself
        plm = run.pretrainer.predict({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask,
                                      "perm_mask": perm_mask, "target_mapping": target_mapping}, verbose=0)["plm"]
        assert np.abs(plm - expected).max() <= TOLERANCE
    with torch.no_grad():  # the content stream under the same masks
        content = hf.transformer(**{k: v for k, v in inputs.items() if k != "target_mapping"}).last_hidden_state
    real = padding_mask.astype(bool)
    assert np.abs(keras.ops.convert_to_numpy(outputs["content"])[real] - content.numpy()[real]).max() <= TOLERANCE


def test_untied_lm_head_matches_transformers(tmp_path):
    """tie_word_embeddings=false: transformers computes with lm_loss.weight, so does the import (its own
    decoder), through a run folder and back."""
    from keras_bertology.runs import load_run_model, save_run_model

    hf = _hf(transformers.XLNetLMHeadModel, tie_word_embeddings=False)
    converted, report = _run(hf, tmp_path / "hf")
    assert any("lm_loss.weight differs from the word embeddings" in note for note in report.notes)
    save_run_model(tmp_path / "run", converted)
    run = load_run_model(tmp_path / "run")
    assert not run.pretrainer.tie_decoder
    token_ids, padding_mask, segment_ids = _batch(6)
    perm_mask, target_mapping = _plm_features(7)
    reference = transformers.XLNetLMHeadModel.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        expected = reference(**_torch(token_ids, padding_mask, segment_ids, perm_mask=perm_mask,
                                      target_mapping=target_mapping)).logits.numpy()
    plm = run.pretrainer.predict({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask,
                                  "perm_mask": perm_mask, "target_mapping": target_mapping}, verbose=0)["plm"]
    assert np.abs(expected).max() > 1.0 and np.abs(plm - expected).max() <= TOLERANCE


def test_rel_shift_takes_each_query_its_distances():
    queries, keys = 5, 8  # 3 memory positions
    scores = np.random.default_rng(0).normal(size=(2, 3, queries, queries + keys)).astype("float32")
    shifted = keras.ops.convert_to_numpy(rel_shift(scores, keys))
    i, j = np.meshgrid(np.arange(queries), np.arange(keys), indexing="ij")
    # Column t holds distance keys - t; query i sits at keys - queries + i.
    assert np.array_equal(shifted, scores[:, :, i, queries - i + j])


def test_relative_positions_are_sinusoids_of_the_distances():
    hidden = 16
    encodings = keras.ops.convert_to_numpy(sinusoidal_relative_positions(3, 5, hidden, clamp_len=3, bi_data=True))
    distances = np.clip(np.arange(5, -3, -1), -3, 3)
    frequencies = 1 / 10000 ** (np.arange(0, hidden, 2) / hidden)
    angles = distances[:, None] * frequencies
    forward = np.concatenate([np.sin(angles), np.cos(angles)], -1)
    backward = np.concatenate([np.sin(-angles), np.cos(-angles)], -1)
    assert encodings.shape == (2, 8, hidden)  # forward, backward
    np.testing.assert_allclose(encodings[0], forward, atol=1e-6)
    np.testing.assert_allclose(encodings[1], backward, atol=1e-6)


@pytest.mark.parametrize("preset", [
    "xlnet-tiny", pytest.param("xlnet-base", marks=pytest.mark.slow), pytest.param("xlnet-large", marks=pytest.mark.slow)])
def test_preset_parameter_counts_equal_transformers(preset):
    config = XLNET_PRESETS[preset]["config"]
    with shapes_only():
        hf = transformers.XLNetModel(transformers.XLNetConfig(
            vocab_size=config["vocab_size"], d_model=config["hidden_size"], n_layer=config["num_layers"],
            n_head=config["num_heads"], d_inner=config["intermediate_size"]))
        assert sum(p.numel() for p in hf.parameters()) == XLNET_PRESETS[preset]["params"]
        assert XLNetBackbone(**config).count_params() == XLNET_PRESETS[preset]["params"]


def _tiny_encoder(seed=0, **overrides):
    from keras_bertology.models.xlnet.encoder import XLNetEncoder

    keras.utils.set_random_seed(seed)
    config = dict(vocab_size=VOCAB, num_layers=2, num_heads=2, hidden_size=32, intermediate_size=48, dropout=0.0,
                  initializer_range=0.3)
    encoder = XLNetEncoder(**dict(config, **overrides))
    encoder.build()
    return encoder


def _query_logits(encoder, token_ids, segment_ids, perm_mask, target_mapping):
    outputs = encoder(token_ids, segment_ids, np.ones_like(token_ids), perm_mask, target_mapping)
    return keras.ops.convert_to_numpy(outputs["query"]), keras.ops.convert_to_numpy(outputs["content"])


def test_query_stream_is_blind_to_its_target_and_what_follows_it_in_the_order():
    encoder = _tiny_encoder()
    token_ids, _, segment_ids = _batch(5)
    perm_mask, target_mapping = _plm_features(6, slots=4)
    query, _ = _query_logits(encoder, token_ids, segment_ids, perm_mask, target_mapping)
    rng = np.random.default_rng(7)
    for row in range(len(token_ids)):
        for slot in range(target_mapping.shape[1]):
            position = int(target_mapping[row, slot].argmax())
            hidden = perm_mask[row, position].astype(bool)
            assert hidden[position]  # a target never sees itself
            changed = token_ids.copy()
            changed[row, hidden] = rng.integers(9, VOCAB, hidden.sum())
            assert np.any(changed[row] != token_ids[row])
            again, _ = _query_logits(encoder, changed, segment_ids, perm_mask, target_mapping)
            assert np.abs(again[row, slot] - query[row, slot]).max() <= 1e-6
            if (~hidden).any():  # what it may see does matter
                seen = token_ids.copy()
                seen[row, ~hidden] = (seen[row, ~hidden] + 1 - 9) % (VOCAB - 9) + 9
                moved, _ = _query_logits(encoder, seen, segment_ids, perm_mask, target_mapping)
                assert np.abs(moved[row, slot] - query[row, slot]).max() > 1e-3


def test_content_stream_sees_itself_even_when_the_order_hides_it():
    encoder = _tiny_encoder(1)
    token_ids, _, segment_ids = _batch(8)
    perm_mask, target_mapping = _plm_features(9, slots=4)
    _, content = _query_logits(encoder, token_ids, segment_ids, perm_mask, target_mapping)
    position = int(target_mapping[0, 0].argmax())
    assert perm_mask[0, position, position] == 1
    changed = token_ids.copy()
    changed[0, position] = (changed[0, position] + 1 - 9) % (VOCAB - 9) + 9
    _, again = _query_logits(encoder, changed, segment_ids, perm_mask, target_mapping)
    assert np.abs(again[0, position] - content[0, position]).max() > 1e-3


def test_memory_equals_attending_to_the_previous_segment_in_one_pass():
    encoder = _tiny_encoder(2)
    rng = np.random.default_rng(10)
    first, second = rng.integers(9, VOCAB, (2, 7)), rng.integers(9, VOCAB, (2, 5))
    second_segments = np.array([[0, 0, 1, 1, 2], [0, 1, 1, 1, 2]])
    # One pass over both, the first segment blind to the second (as when it was run alone).
    both = np.concatenate([first, second], axis=1)
    segments = np.concatenate([np.zeros_like(first), second_segments], axis=1)
    perm_mask = np.zeros((2, 12, 12), "float32")
    perm_mask[:, :7, 7:] = 1.0
    joint = encoder(both, segments, np.ones_like(both), perm_mask)["content"]
    alone = encoder(first, np.zeros_like(first), np.ones_like(first))
    with_memory = encoder(second, second_segments, np.ones_like(second), memory=alone["layer_inputs"])["content"]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(with_memory), keras.ops.convert_to_numpy(joint)[:, 7:],
                               atol=1e-5)


def test_memory_is_carried_between_training_steps_and_reset_at_a_stream_start():
    from keras_bertology.models.xlnet.pretrainer import XLNetPretrainer

    backbone = XLNetBackbone(vocab_size=VOCAB, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=24,
                             dropout=0.0)
    model = XLNetPretrainer(backbone, mem_len=6, batch_size=2, reuse_len=4)
    layer = model.get_layer("query_stream")
    token_ids = np.random.default_rng(11).integers(9, VOCAB, (2, 8)).astype("int32")
    perm_mask, target_mapping = np.zeros((2, 8, 8), "float32"), np.eye(8, dtype="float32")[None, :2].repeat(2, 0)
    inputs = dict(token_ids=token_ids, segment_ids=np.zeros_like(token_ids), padding_mask=np.ones_like(token_ids),
                  perm_mask=perm_mask, target_mapping=target_mapping, stream_start=np.array([1, 1], "int32"))
    model(inputs, training=True)
    states = backbone.encoder(token_ids, np.zeros_like(token_ids), np.ones_like(token_ids),
                              memory=np.zeros((2, 2, 6, 16), "float32"))["layer_inputs"]
    memory = keras.ops.convert_to_numpy(layer.memory)
    np.testing.assert_allclose(memory[:, :, 2:], keras.ops.convert_to_numpy(states)[:, :, :4], atol=1e-6)
    assert not memory[:, :, :2].any()
    model(dict(inputs, stream_start=np.array([0, 1], "int32")), training=True)
    carried = keras.ops.convert_to_numpy(layer.memory)
    np.testing.assert_allclose(carried[:, 0, :2], memory[:, 0, 4:], atol=1e-6)  # row 0 kept its old states
    assert not carried[:, 1, :2].any()  # row 1 began again: its old states are gone
    before = keras.ops.convert_to_numpy(layer.memory)
    model(inputs, training=False)
    assert np.array_equal(keras.ops.convert_to_numpy(layer.memory), before)  # inference leaves it alone


def test_pretrain_xlnet_from_the_command_line(tmp_path, capsys):
    import tensorflow as tf

    from cli_runs import pretrain_two_plays

    metrics, served = pretrain_two_plays(tmp_path, capsys, "xlnet", "xlnet-tiny", "--seq-len", "48",
                                         "--vocab-size", "800", "--mem-len", "16", "--precision", "float32",
                                         "--xla", "auto", "--remat")
    assert set(metrics["objectives"]) == {"plm"} and metrics["max_predictions"] == 8  # 48 / 6
    assert metrics["xla"] is True  # --xla auto on a CPU compiles XLNet's float32 step as every family's
    assert metrics["remat"] is True  # recomputed two-stream blocks, under XLA
    plm = metrics["objectives"]["plm"]
    assert {"loss", "accuracy"} <= set(plm["last"]) and "most_frequent_token" in plm["chance"]
    assert metrics["family_options"] == {"mem_len": 16, "reuse_len": None, "perm_size": None, "partial_k": 6.0,
                                         "bi_data": 1, "loss_chunk_size": 0}
    assert metrics["fill_mask"] and all(len(example["top"]) == 5 for example in metrics["fill_mask"])
    # Fill-in from the query stream: the blank is last in the order, so whatever token stands there,
    # the pretrained query stream predicts the same as the served signature.
    blank = served.mlm_logits(tf.constant(["To be, or <mask> to be."]))
    token_ids = blank["token_ids"].numpy()
    position = int(np.flatnonzero(token_ids[0] == 4)[0])  # <mask> is id 4
    model = keras.saving.load_model(tmp_path / "run" / "model" / "pretrainer.keras")
    length = token_ids.shape[1]  # the served batch's own length: its longest input
    perm_mask = np.zeros((1, length, length), "float32")
    perm_mask[0, :, position] = 1.0
    token_ids[0, position] = 300  # any word: nobody sees it
    query = model.backbone.encoder(token_ids, blank["segment_ids"].numpy(), blank["padding_mask"].numpy(), perm_mask,
                                   np.eye(length, dtype="float32")[None, [position]])["query"]
    logits = keras.ops.convert_to_numpy(model.get_layer("plm_head")(query))
    np.testing.assert_allclose(logits[0, 0], blank["logits"].numpy()[0, position], atol=1e-4)
    out = served.serve(tf.constant(["To be, or not to be.", "Ay."]))
    assert out["sequence_output"].shape == (2, out["padding_mask"].numpy().sum(axis=1).max(), 128)
    # XLNet's layout: padding first, <sep> <cls> last.
    assert out["padding_mask"].numpy()[1, 0] == 0 and out["padding_mask"].numpy()[:, -1].tolist() == [1, 1]
    memory = keras.ops.convert_to_numpy(model.get_layer("query_stream").memory)
    assert memory.shape == (2, 8, 16, 128) and np.abs(memory).max() > 0  # the memory is saved with the model
    # A fresh process resumes from the checkpoint (its classes registered before loading).
    import sys

    from keras_bertology.data.corpus import default_corpus_paths

    argv = ["pretrain", "--model", "xlnet", "--preset", "xlnet-tiny", "--corpus",
            *[str(path) for path in default_corpus_paths()[:2]], "--steps", "4", "--batch-size", "8",
            "--out", str(tmp_path / "run"), "--no-export", "--seq-len", "48",  # the export above is the run's
            "--vocab-size", "800", "--mem-len", "16", "--precision", "float32", "--xla", "auto", "--resume"]
    proc = run_python([sys.executable, "-c", "import sys; from keras_bertology.cli import main; "
                       "sys.exit(main(sys.argv[1:]))", *argv], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_odd_batches_are_refused_when_half_of_each_batch_reads_backwards(tmp_path, capsys):
    from keras_bertology.cli import main

    from keras_bertology.data.corpus import default_corpus_paths

    argv = ["pretrain", "--model", "xlnet", "--preset", "xlnet-tiny", "--steps", "2", "--batch-size", "7",
            "--corpus", str(default_corpus_paths()[0]), "--vocab-size", "400",
            "--out", str(tmp_path / "run"), "--export", str(tmp_path / "export")]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "batch" in err and "even" in err and "Traceback" not in err
    assert not (tmp_path / "export").exists()


# Cased text, accents, TeX quotes, runs of spaces and the mask: XLNet's tokenizer preprocessing at work.
TEXTS = ["``Café'' is NOT   naïve, Ünïcödé!", "Now is the winter of our <mask>.", "Hi."]
SECONDS = ["To be, or not to be.", "Ay.", "What light through yonder window breaks?"]


@pytest.mark.slow
def test_converted_checkpoint_with_spiece_serves_like_transformers(tmp_path, capsys):
    import tensorflow as tf

    from keras_bertology.cli import main
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus
    from keras_bertology.models.xlnet.tokenizer import XLNET_SPECIAL_TOKENS
    from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

    sentences = [s for document in read_corpus(default_corpus_paths()[:2]) for s in document]
    trained = train_sentencepiece(sentences, 1200, model_type="unigram", byte_fallback=False,
                                  special_tokens=XLNET_SPECIAL_TOKENS)
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "spiece.model").write_bytes(trained.model_proto)  # no tokenizer_config.json: XLNet's defaults
    tokenizer = transformers.XLNetTokenizer.from_pretrained(str(hf_dir))
    hf = perturbed_hf_model(transformers.XLNetModel, transformers.XLNetConfig(
        vocab_size=len(tokenizer), d_model=64, n_layer=2, n_head=4, d_inner=96, initializer_range=0.2))
    hf.save_pretrained(str(hf_dir))
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run"), "--seq-len", "24"]) == 0
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "export")]) == 0
    served = tf.saved_model.load(str(tmp_path / "export"))
    for out, batch in [
        (served.serve(tf.constant(TEXTS)), tokenizer(TEXTS, padding="longest", max_length=24, truncation=True,
                                                      return_tensors="pt", return_token_type_ids=True)),
        (served.serve_pairs(tf.constant(TEXTS), tf.constant(SECONDS)),
         tokenizer(TEXTS, SECONDS, padding="longest", max_length=24, truncation=True, return_tensors="pt",
                   return_token_type_ids=True)),
    ]:
        np.testing.assert_array_equal(out["token_ids"].numpy(), batch["input_ids"].numpy())
        np.testing.assert_array_equal(out["padding_mask"].numpy(), batch["attention_mask"].numpy())
        real = batch["attention_mask"].numpy().astype(bool)
        # Padding takes the original's segment id 3 (transformers 5 writes 0; no real token sees it).
        np.testing.assert_array_equal(out["segment_ids"].numpy()[real], batch["token_type_ids"].numpy()[real])
        assert np.all(out["segment_ids"].numpy()[~real] == 3)
        with torch.no_grad():
            expected = hf(**batch).last_hidden_state.numpy()
        assert np.abs(out["sequence_output"].numpy()[real] - expected[real]).max() <= TOLERANCE
