"""GPT: parity with transformers' GPT-2, the causal mask, the next-token data stage, and serving."""

import json
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from counting import shapes_only
from hf_reference import save_hf_model
from keras_bertology.cli import main
from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.data.next_token import NextTokenTargets
from keras_bertology.models.gpt import GPT, GPTBackbone, GPTPretrainer
from keras_bertology.models.gpt.instances import block_instances
from keras_bertology.models.task_models import SequenceClassifier
from forked_python import run_python

EOT = "<|endoftext|>"
TEXTS = ["Now is the winter of our discontent", "made glorious summer by this sun of York;",
         "And all the clouds that lour'd upon our house", "In the deep bosom"]


def _hf_gpt2(cls=transformers.GPT2LMHeadModel, vocab_size=101):
    """A random GPT-2 of an odd shape (3 heads of 16, feed-forward 80) whose every weight matters:
    weights wide enough that GELU bends, LayerNorms and biases off their initial values."""
    config = transformers.GPT2Config(vocab_size=vocab_size, n_positions=48, n_embd=48, n_layer=2, n_head=3,
                                     n_inner=80, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     initializer_range=0.2, bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if ".ln_" in name or name.startswith(("ln_f", "transformer.ln_f")) or name.endswith("bias"):
                tensor.add_(0.2 * torch.randn_like(tensor))
    return model


def _padded(rows, width, left):
    """Token rows padded with 0 to `width` on the left or the right: (ids, mask) int arrays."""
    ids, mask = np.zeros((len(rows), width), np.int64), np.zeros((len(rows), width), np.int64)
    for index, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[index, span], mask[index, span] = row, 1
    return ids, mask


def _hf_logits(hf, ids, mask):
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)  # transformers numbers positions 0.. unless told
    with torch.no_grad():
        out = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                 position_ids=torch.tensor(positions), output_hidden_states=True)
    return out.logits.numpy(), out.hidden_states[-1].numpy()


@pytest.mark.parametrize("cls", [transformers.GPT2LMHeadModel, transformers.GPT2Model])
def test_converted_gpt2_matches_transformers_on_both_padding_sides(cls, tmp_path):
    hf = _hf_gpt2(cls)
    save_hf_model(hf, tmp_path)
    run, report = convert_hf_checkpoint(tmp_path)
    assert run.family == "gpt" and report.heads == ["clm"] and report.skipped == []
    lm = hf if cls is transformers.GPT2LMHeadModel else transformers.GPT2LMHeadModel(hf.config).eval()
    if lm is not hf:
        lm.transformer.load_state_dict(hf.state_dict())
    rng = np.random.default_rng(0)
    rows = [rng.integers(1, 101, size=n) for n in (9, 4, 7)]
    captured = []
    lm.transformer.h[0].mlp.c_fc.register_forward_hook(lambda module, args, output: captured.append(output))
    for left in (False, True):
        ids, mask = _padded(rows, 9, left)
        expected_logits, expected_states = _hf_logits(lm, ids, mask)
        inputs = {"token_ids": ids.astype("int32"), "padding_mask": mask.astype("int32")}
        logits = keras.ops.convert_to_numpy(run.pretrainer(inputs)["clm"])
        states = keras.ops.convert_to_numpy(run.backbone(inputs)["sequence_output"])
        real = mask.astype(bool)
        np.testing.assert_allclose(states[real], expected_states[real], atol=1e-5, rtol=0)
        np.testing.assert_allclose(logits[real], expected_logits[real], atol=1e-5, rtol=0)
    # The weights are wide enough that GELU's tanh form and others differ.
    assert (captured[0].abs() > 1).float().mean() > 0.2


def test_the_gpt2_presets_have_gpt2s_parameter_counts():
    """gpt2 with transformers' count (the tied head adds none); gpt-tiny with keras-hub's GPT2Backbone."""
    import keras_hub

    with shapes_only():
        hf_count = sum(p.numel() for p in transformers.GPT2LMHeadModel(transformers.GPT2Config()).parameters())
        assert GPT.presets["gpt2"]["params"] == hf_count == 124_439_808
        assert GPTBackbone(**GPT.backbone_config("gpt2")).count_params() == hf_count
    config = GPT.backbone_config("gpt-tiny")
    hub = keras_hub.models.GPT2Backbone(vocabulary_size=config["vocab_size"], num_layers=config["num_layers"],
                                        num_heads=config["num_heads"], hidden_dim=config["hidden_size"],
                                        intermediate_dim=config["intermediate_size"],
                                        max_sequence_length=config["max_positions"])
    assert GPTBackbone(**config).count_params() == hub.count_params() == GPT.presets["gpt-tiny"]["params"]
    # gpt2-medium: the same count rule (blocks of 12 H^2 + 13 H, tables, final norm) at 24 x 1024.
    width, layers = 1024, 24
    assert GPT.presets["gpt2-medium"]["params"] == (50257 + 1024) * width + layers * (12 * width ** 2 + 13 * width) \
        + 2 * width


def _tiny_backbone(**kwargs):
    keras.utils.set_random_seed(1)
    return GPTBackbone(vocab_size=50, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=32,
                       max_positions=16, dropout=0.0, attention_dropout=0.0, **kwargs)


def test_each_position_sees_only_itself_and_the_positions_before_it():
    backbone = _tiny_backbone()
    ids = np.array([[5, 6, 7, 8, 9, 10]], np.int32)
    changed = ids.copy()
    changed[0, 3:] = [20, 21, 22]
    mask = np.ones_like(ids)
    before = keras.ops.convert_to_numpy(backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    after = keras.ops.convert_to_numpy(backbone({"token_ids": changed, "padding_mask": mask})["sequence_output"])
    np.testing.assert_array_equal(before[0, :3], after[0, :3])
    assert np.abs(before[0, 3:] - after[0, 3:]).min() > 1e-3


def test_the_residual_projections_start_scaled_down_with_depth():
    backbone = _tiny_backbone()
    block = backbone.get_layer("encoder_block_1")
    expected = 0.02 / np.sqrt(2 * 2) * 0.88  # a truncated normal's stddev is 0.88 of its scale
    for dense in (block.attention.output_dense, block.output_dense):
        assert np.std(keras.ops.convert_to_numpy(dense.kernel)) == pytest.approx(expected, rel=0.25)
    assert np.std(keras.ops.convert_to_numpy(block.intermediate_dense.kernel)) == pytest.approx(0.02 * 0.88, rel=0.15)
    with pytest.raises(ValueError, match="causal=True only"):
        GPTBackbone(vocab_size=50, num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32, causal=False)


def test_next_token_targets_shift_by_one_and_weigh_real_pairs_only():
    ids = tf.constant([[7, 8, 9, 0, 0], [0, 0, 4, 5, 6]])
    mask = tf.constant([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1]])
    out = NextTokenTargets()({"token_ids": ids, "padding_mask": mask})
    assert out["next_token_ids"].numpy().tolist() == [[8, 9, 0, 0, 0], [0, 4, 5, 6, 0]]
    assert out["next_token_weights"].numpy().tolist() == [[1, 1, 0, 0, 0], [0, 0, 1, 1, 0]]
    whole = NextTokenTargets()({"token_ids": ids})
    assert whole["next_token_weights"].numpy().tolist() == [[1, 1, 1, 1, 0]] * 2


def test_perplexity_is_read_from_the_loss_metric_and_the_logits_are_scored_once_for_both():
    from keras_bertology.models.causal_lm import Perplexity
    from keras_bertology.models.registry import FAMILIES
    from tiny_steps import tiny_pretrainer

    pretrainer, (x, y, weights) = tiny_pretrainer(FAMILIES["gpt"])
    pretrainer.compile(optimizer=keras.optimizers.SGD(0.0))
    logs = pretrainer.test_on_batch(x, y, weights, return_dict=True)
    # What a Perplexity of its own computes from the same logits and weights.
    alone = Perplexity()
    alone.update_state(y["clm"], pretrainer(x)["clm"], weights["clm"])
    assert logs["clm_perplexity"] == pytest.approx(float(alone.result()), rel=1e-6)
    assert logs["clm_perplexity"] == pytest.approx(np.exp(logs["clm_loss"]), rel=1e-7)
    # The training step scores the logits once: the loss, its metric and the perplexity read that scoring.
    step = tf.function(pretrainer.train_step).get_concrete_function(
        keras.tree.map_structure(lambda a: tf.TensorSpec(a.shape, a.dtype), (x, y, weights)))
    scorings = [op for op in step.graph.get_operations() if op.type == "SparseSoftmaxCrossEntropyWithLogits"]
    assert len(scorings) == 1


def test_blocks_hold_the_corpus_as_one_stream_with_end_of_text_between_documents():
    documents = [[np.array([1, 2, 3]), np.array([4])], [np.array([5, 6])], [np.array([], np.int32)],
                 [np.array([7, 8, 9, 10, 11])]]
    blocks = block_instances(documents, InstanceContext(4, {"cls_id": 0, "sep_id": 99, "pad_id": 0}))
    assert blocks["token_ids"].tolist() == [[1, 2, 3, 4], [99, 5, 6, 99], [7, 8, 9, 10], [11, 99, 0, 0]]
    assert blocks["padding_mask"].tolist() == [[1] * 4, [1] * 4, [1] * 4, [1, 1, 0, 0]]


def test_a_last_token_summary_reads_the_last_real_token_on_either_padding_side():
    backbone = _tiny_backbone()
    model = SequenceClassifier(backbone, 3, summary="last")
    ids, mask = np.array([[5, 6, 7, 0, 0]], np.int32), np.array([[1, 1, 1, 0, 0]], np.int32)
    left_ids, left_mask = np.roll(ids, 2, axis=1), np.roll(mask, 2, axis=1)
    right, left, alone = (keras.ops.convert_to_numpy(model({"token_ids": i, "padding_mask": m}))
                          for i, m in ((ids, mask), (left_ids, left_mask), (ids[:, :3], mask[:, :3])))
    np.testing.assert_allclose(right, alone, atol=1e-6)
    np.testing.assert_allclose(left, alone, atol=1e-6)


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A random GPT-2 with a byte-level BPE vocabulary trained on the corpus, as transformers saves it."""
    from tokenizers import ByteLevelBPETokenizer

    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    sentences = [s for document in read_corpus(default_corpus_paths()[:1]) for s in document]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(sentences, vocab_size=600, min_frequency=2, special_tokens=[EOT], show_progress=False)
    folder = tmp_path_factory.mktemp("gpt2")
    bpe.save_model(str(folder))
    hf = _hf_gpt2(vocab_size=bpe.get_vocab_size())
    hf.config.bos_token_id = hf.config.eos_token_id = bpe.token_to_id(EOT)
    save_hf_model(hf, folder)
    return folder, hf


@pytest.fixture(scope="module")
def gpt2_export(gpt2_folder, tmp_path_factory):
    """The random GPT-2 converted at 40 positions (`bertology convert`) and exported (`bertology export`)."""
    folder, _ = gpt2_folder
    path = tmp_path_factory.mktemp("gpt2_export")
    assert main(["convert", "--from-hf", str(folder), "--out", str(path / "run"), "--seq-len", "40"]) == 0
    assert main(["export", str(path / "run"), "--out", str(path / "export")]) == 0
    return path / "export"


def _hf_bpe(folder):
    """transformers' tokenizers library reading the folder's byte-level BPE as GPT-2's tokenizer does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    hf_tokenizer = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    hf_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf_tokenizer.decoder = decoders.ByteLevel()
    return hf_tokenizer


def test_the_export_scores_and_generates_as_transformers_does(gpt2_folder, gpt2_export, tmp_path):
    folder, hf = gpt2_folder
    assets = json.loads((gpt2_export / "assets" / "bertology.json").read_text())
    assert {"score", "generate", "generate_sampling"} <= set(assets["signatures"]) and assets["eot_token"] == EOT
    hf_tokenizer = _hf_bpe(folder)
    eot = hf_tokenizer.token_to_id(EOT)
    # Of different lengths, the fourth cut to fit; the last two run past the export's character bound (16 per
    # token: 640) and differ only in their last sentence, which the model must read.
    long = " ".join(TEXTS * 12)
    prompts = TEXTS[:3] + [" ".join(TEXTS), f"{long} Now the winter", f"{long} Upon our house"]
    script = (
        "import json, sys\nimport tensorflow as tf, tensorflow_text  # noqa: F401\n"
        "model = tf.saved_model.load(sys.argv[1])\n"
        "assert not [name for name in sys.modules if name.startswith('keras_bertology')]\n"
        "texts = tf.constant(json.loads(sys.argv[2]))\n"
        "scored = model.score(texts)\n"
        "greedy = model.generate(texts)\n"
        "drawn = [model.generate_sampling(texts, max_new_tokens=6, temperature=0.9, top_k=20, seed=s)\n"
        "         ['generated_ids'].numpy().tolist() for s in (3, 3, 4)]\n"
        "print(json.dumps({'ll': scored['log_likelihood'].numpy().tolist(),\n"
        "                  'n': scored['num_tokens'].numpy().tolist(),\n"
        "                  'ids': greedy['generated_ids'].numpy().tolist(),\n"
        "                  'text': [t.decode() for t in greedy['text'].numpy()], 'drawn': drawn}))\n")
    done = run_python([sys.executable, "-c", script, str(gpt2_export), json.dumps(prompts)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    served = json.loads(done.stdout.strip().splitlines()[-1])
    for row, prompt in enumerate(prompts):
        ids = [eot] + hf_tokenizer.encode(prompt).ids
        scored = ids[-40:]  # the text as `score` reads it: the last 40 of <|endoftext|> and its pieces
        with torch.no_grad():
            log_probs = torch.log_softmax(hf(input_ids=torch.tensor([scored])).logits[0], -1)
        expected = sum(float(log_probs[t - 1, scored[t]]) for t in range(1, len(scored)))
        assert served["n"][row] == len(scored) - 1
        assert served["ll"][row] == pytest.approx(expected, abs=1e-4)
        context = ids[-(40 - 20):]  # a prompt keeps the tokens that leave room for the new ones
        continued = hf.generate(torch.tensor([context]), attention_mask=torch.ones(1, len(context), dtype=torch.long),
                                max_new_tokens=20, do_sample=False, eos_token_id=eot, pad_token_id=eot)
        new = continued[0, len(context):].tolist()
        ours = [t for t in served["ids"][row] if t >= 0]
        # `generate` continues by half the sequence length (40) at most, or up to end-of-text.
        assert ours == new and (len(ours) == 20 or ours[-1] == eot), (ours, new)
        assert served["text"][row] == hf_tokenizer.decode([t for t in ours if t != eot])
    assert served["ids"][-1] != served["ids"][-2]  # continuations of the two ends, not of a common start
    assert served["drawn"][0] == served["drawn"][1] != served["drawn"][2]  # seeded draws
    assert all(len(row) <= 6 for row in served["drawn"][0])


def test_sampling_draws_only_among_the_top_k_likeliest_tokens(gpt2_folder, gpt2_export):
    """At a high temperature, top_k=2 draws each first token among transformers' two likeliest (both come
    out), and top_k=1 is greedy: sampling from the whole vocabulary would fail both."""
    folder, hf = gpt2_folder
    served = tf.saved_model.load(str(gpt2_export))
    texts = tf.constant(TEXTS)
    firsts = np.stack([served.generate_sampling(texts, max_new_tokens=1, temperature=8.0, top_k=2, seed=seed)
                       ["generated_ids"].numpy()[:, 0] for seed in range(40)])
    hf_tokenizer = _hf_bpe(folder)
    eot = hf_tokenizer.token_to_id(EOT)
    for row, text in enumerate(TEXTS):
        with torch.no_grad():
            logits = hf(input_ids=torch.tensor([[eot] + hf_tokenizer.encode(text).ids])).logits[0, -1].numpy()
        assert set(firsts[:, row]) == set(np.argsort(-logits)[:2].tolist())
    greedy = served.generate(texts)["generated_ids"].numpy()
    for seed in (0, 1):
        drawn = served.generate_sampling(texts, max_new_tokens=greedy.shape[1], temperature=8.0, top_k=1,
                                         seed=seed)["generated_ids"].numpy()
        np.testing.assert_array_equal(drawn, greedy)
    # Settings out of range are refused, each by name and range.
    for settings, message in ((dict(max_new_tokens=0), r"max_new_tokens must be in \[1, 39\]; got\] \[0\]"),
                              (dict(temperature=-1.0), r"temperature must be finite and >= 0"),
                              (dict(top_k=-2), r"top_k must be in \[0, ")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            served.generate_sampling(texts, **dict(dict(max_new_tokens=2, temperature=1.0, top_k=0, seed=0),
                                                   **settings))


def test_pretraining_gpt_falls_below_the_unigram_level_and_serves(tmp_path, capsys):
    run, export = tmp_path / "run", tmp_path / "export"
    from keras_bertology.data.corpus import default_corpus_paths

    plays = [str(path) for path in default_corpus_paths()[:6]]  # 150 steps read a fraction of one play
    assert main(["pretrain", "--model", "gpt", "--preset", "gpt-tiny", "--steps", "150", "--batch-size", "16",
                 "--seq-len", "32", "--vocab-size", "600", "--corpus", *plays, "--out", str(run),
                 "--export", str(export)]) == 0
    out = capsys.readouterr().out
    metrics = json.loads((run / "metrics.json").read_text())
    clm = metrics["objectives"]["clm"]
    assert clm["last"]["loss"] < clm["chance"]["loss"] < clm["first"]["loss"]
    assert clm["last"]["perplexity"] == pytest.approx(np.exp(clm["last"]["loss"]), rel=0.05)
    assert metrics["held_out_perplexity"] < clm["chance"]["perplexity"]
    assert len(metrics["continuations"]) >= 3 and "continuations of their first halves" in out
    served = tf.saved_model.load(str(export))
    assert served.generate(tf.constant(["the king"]))["text"].shape == (1,)
    assert main(["pretrain", "--model", "gpt", "--preset", "gpt-tiny", "--whole-word",
                 "--out", str(tmp_path / "never")]) == 2
    assert "--whole-word does not apply to --model gpt" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
