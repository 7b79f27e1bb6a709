"""DistilBERT: transformers' DistilBertModel / DistilBertForMaskedLM (random init, fp32, 1e-5), the preset
counts, the layer-spreading rule, the three losses against NumPy, the student's start from its teacher, a
frozen teacher without dropout, the frequency-smoothed masking at 5 standard errors, and a distillation
from a trained BERT through the CLI."""

import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from hf_reference import perturbed_hf_model
from keras_bertology.data.builder_contexts import MaskingContext
from keras_bertology.models import BertBackbone
from keras_bertology.models.bert.pretrainer import BertPretrainer
from keras_bertology.models.distilbert import DISTILBERT
from keras_bertology.models.distilbert.convert import convert
from keras_bertology.models.distilbert.masking import smoothed_masker
from keras_bertology.models.distilbert.pretrainer import DistilBertPretrainer, distilbert_pretrainer, spread_layers

TOLERANCE = 1e-5
# Heads 24 wide, an FFN unlike 4x, a vocabulary not a multiple of 8; the tanh GELU so a wrong
# activation shows (initializer_range 0.2: pre-activations well past +-1).
SMALL = dict(vocab_size=101, max_position_embeddings=40, n_layers=3, n_heads=3, dim=72, hidden_dim=100,
             activation="gelu_new", initializer_range=0.2, dropout=0.0, attention_dropout=0.0)


def _hf_batch(length=23, real=17):
    rng = np.random.default_rng(0)
    ids = rng.integers(3, SMALL["vocab_size"], (2, length))
    mask = np.ones((2, length), np.int64)
    mask[1, real:] = 0
    ids[1, real:] = 0
    return ids, mask


@pytest.mark.parametrize("cls", [transformers.DistilBertModel, transformers.DistilBertForMaskedLM])
def test_converted_distilbert_matches_transformers(cls):
    hf = perturbed_hf_model(cls, transformers.DistilBertConfig(**SMALL))
    ids, mask = _hf_batch()
    with torch.no_grad():
        out = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    weights = {name: value.detach().numpy() for name, value in hf.state_dict().items()}
    backbone, pretrainer, heads, used, notes = convert(DISTILBERT, hf.config.to_dict(), weights)
    assert used == set(weights) and not notes
    inputs = {"token_ids": ids.astype("int32"), "padding_mask": mask.astype(bool)}
    states = out.hidden_states[-1].numpy()
    assert np.abs(states).max() > 1
    got = backbone(inputs)["sequence_output"]
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(got)[real], states[real], atol=TOLERANCE)
    if cls is transformers.DistilBertModel:
        assert pretrainer is None and heads == []
        return
    assert heads == ["mlm"]
    positions = np.array([[0, 5, 16], [1, 2, 16]], np.int32)
    logits = pretrainer({**inputs, "mask_positions": positions})["mlm"]
    expected = np.take_along_axis(out.logits.numpy(), positions[:, :, None], axis=1)
    np.testing.assert_allclose(np.asarray(logits), expected, atol=TOLERANCE)


@pytest.mark.parametrize("name", sorted(DISTILBERT.presets))
def test_presets_count_what_transformers_builds(name):
    config = DISTILBERT.presets[name]["config"]
    hf = transformers.DistilBertConfig(vocab_size=config["vocab_size"], max_position_embeddings=config["max_positions"],
                                       n_layers=config["num_layers"], n_heads=config["num_heads"],
                                       dim=config["hidden_size"], hidden_dim=config["intermediate_size"])
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.DistilBertModel(hf).parameters())
    assert expected == DISTILBERT.presets[name]["params"]
    with keras.device("cpu"):
        ours = DISTILBERT.backbone_cls(**DISTILBERT.backbone_config(name))
    assert ours.count_params() == expected


def test_students_start_from_an_even_spread_of_the_teachers_layers():
    assert spread_layers(12, 6) == [0, 2, 4, 7, 9, 11]  # the original's choice
    assert spread_layers(2, 1) == [0] and spread_layers(4, 2) == [0, 3] and spread_layers(5, 5) == list(range(5))
    for teacher in range(1, 25):
        for student in range(2, teacher + 1):
            chosen = spread_layers(teacher, student)
            assert chosen[0] == 0 and chosen[-1] == teacher - 1 and np.all(np.diff(chosen) > 0)
            gaps = np.diff(chosen)
            assert gaps.max() - gaps.min() <= 1  # as even as whole layers allow
    with pytest.raises(ValueError, match="cannot start"):
        spread_layers(2, 3)


def _teacher_and_student(kl_positions="tokens", teacher_layers=3, dropout=0.1):
    keras.utils.set_random_seed(1)
    sizes = dict(vocab_size=61, num_heads=2, hidden_size=16, intermediate_size=24, max_positions=20,
                 initializer_range=0.5)
    teacher = BertPretrainer(BertBackbone(num_layers=teacher_layers, dropout=dropout, **sizes))
    for variable in teacher.weights:  # biases and LayerNorms off their (0, 1) start, so a swap shows
        variable.assign(np.asarray(variable) + np.random.default_rng(len(variable.path)).normal(
            0, 0.3, variable.shape).astype("float32"))
    student = BertBackbone(num_layers=2, num_segments=0, use_pooler=False, dropout=0.0, attention_dropout=0.0,
                           **sizes)
    return teacher, distilbert_pretrainer(student, teacher=teacher, kl_positions=kl_positions, temperature=1.7,
                                          alpha_kl=5.0, alpha_mlm=2.0, alpha_cos=1.0)


def _features(rng, batch=3, length=12, predictions=4):
    features = {"token_ids": rng.integers(5, 61, (batch, length)).astype("int32"),
                "padding_mask": np.ones((batch, length), bool),
                "mask_positions": np.tile(np.arange(1, predictions + 1), (batch, 1)).astype("int32"),
                "mask_ids": rng.integers(5, 61, (batch, predictions)).astype("int32"),
                "mask_weights": np.ones((batch, predictions), "float32")}
    features["padding_mask"][0, 7:] = False
    features["token_ids"][0, 7:] = 0
    features["mask_weights"][2, 3] = 0.0  # a filler slot
    return features


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _weighted_mean(values, weights):
    return float((values * weights).sum() / weights.sum())


@pytest.mark.parametrize("kl_positions", ["tokens", "masked"])
def test_the_loss_is_the_three_weighted_losses_written_out(kl_positions):
    """5 x KL(teacher || student at T) x T^2 over the KL's positions + 2 x MLM cross-entropy over the masked
    positions + 1 x (1 - cos) of the last states over the real tokens, from the model's own logits and
    states."""
    teacher, model = _teacher_and_student(kl_positions)
    model.compile()
    features = _features(np.random.default_rng(0))
    x, y, sample_weight = model.split_features(features)
    out = {name: np.asarray(value, np.float64) for name, value in model(x, training=False).items()}
    real = features["padding_mask"].astype(np.float64)
    slots = features["mask_weights"].astype(np.float64)
    teacher_probs = np.exp(_log_softmax(out["teacher_logits"] / 1.7))
    kl = (teacher_probs * (_log_softmax(out["teacher_logits"] / 1.7) - _log_softmax(out["kl"] / 1.7))).sum(-1)
    kl = _weighted_mean(kl * 1.7 ** 2, slots if kl_positions == "masked" else real)
    mlm = _weighted_mean(-np.take_along_axis(_log_softmax(out["mlm"]), features["mask_ids"][..., None], -1)[..., 0],
                         slots)
    cos = (out["cos"] * out["teacher_states"]).sum(-1) / (
        np.linalg.norm(out["cos"], axis=-1) * np.linalg.norm(out["teacher_states"], axis=-1))
    cos = _weighted_mean(1 - cos, real)
    assert kl > 1e-3 and cos > 1e-3  # the student is not its teacher: every term counts
    # The teacher's own logits and states, computed apart: the labels are the teacher's.
    alone = teacher.backbone({**{k: x[k] for k in ("token_ids", "padding_mask")},
                              "segment_ids": keras.ops.zeros_like(x["token_ids"])})["sequence_output"]
    np.testing.assert_allclose(out["teacher_states"], np.asarray(alone), atol=1e-5)
    loss = model.compute_loss(x, y, model(x, training=False), sample_weight, training=False)
    np.testing.assert_allclose(float(loss), 5.0 * kl + 2.0 * mlm + 1.0 * cos, rtol=2e-5)


def test_the_student_starts_from_the_teachers_embeddings_layers_and_head():
    teacher, model = _teacher_and_student(teacher_layers=3)
    student, source = model.backbone, teacher.backbone
    for index, chosen in enumerate([0, 2]):
        for mine, theirs in zip(student.get_layer(f"encoder_block_{index}").weights,
                                source.get_layer(f"encoder_block_{chosen}").weights):
            np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs), err_msg=mine.path)
    for mine, theirs in zip(model.get_layer("mlm_head").weights, teacher.get_layer("mlm_head").weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    # The teacher adds its segment-0 row to every token: folded into the student's positions, the two
    # embedding layers give the same vectors.
    ids = np.random.default_rng(2).integers(5, 61, (2, 9)).astype("int32")
    ours = student.get_layer("embeddings")(ids, training=False)
    theirs = source.get_layer("embeddings")(ids, segment_ids=np.zeros_like(ids), training=False)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-6)


def test_only_the_student_trains_and_the_teacher_runs_without_dropout(tmp_path):
    teacher, model = _teacher_and_student(dropout=0.3)
    model.compile(optimizer=keras.optimizers.AdamW(1e-2))
    x, y, sample_weight = model.split_features(_features(np.random.default_rng(3)))
    first = model(x, training=True)
    np.testing.assert_array_equal(np.asarray(first["teacher_logits"]),
                                  np.asarray(model(x, training=True)["teacher_logits"]))
    before = {id(v): np.asarray(v) for v in model.weights}
    model.train_on_batch(x, y, sample_weight=sample_weight)
    teacher_ids = {id(v) for v in teacher.weights}
    assert {id(v) for v in model.trainable_weights}.isdisjoint(teacher_ids)
    for variable in model.weights:
        moved = not np.array_equal(before[id(variable)], np.asarray(variable))
        if id(variable) in teacher_ids:
            assert not moved, variable.path
    assert any(not np.array_equal(before[id(v)], np.asarray(v)) for v in model.trainable_weights)
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    assert len(reloaded.trainable_weights) == len(model.trainable_weights)
    assert len(reloaded.optimizer.variables) == len(model.optimizer.variables)
    for ours, theirs in zip(reloaded.weights, model.weights):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


class _Vocabulary:
    vocab_size, mask_id, pad_id, special_ids, word_start_table = 12, 3, 0, [1, 2, 3], None


def _chosen_share(masker, rows, seed):
    batch = masker({"token_ids": tf.constant(rows, tf.int32)}, seed=[seed, 0])
    positions, weights = batch["mask_positions"].numpy(), batch["mask_weights"].numpy()
    return np.take_along_axis(rows, positions, 1)[weights > 0]


@pytest.mark.parametrize("smoothing", [0.7, 0.0])
def test_masked_tokens_are_drawn_in_proportion_to_count_to_the_minus_smoothing(smoothing):
    """Rows of five common tokens (id 5, seen 1,000 times) and one rare (id 6, seen 10 times), one token
    masked per row (ceil(0.15 x 6) = 1): the rare one is chosen with probability w6 / (5 w5 + w6), w = count^-s.
    40,000 rows: 5 standard errors are about 0.012 at p = 0.5, 0.0035 at p = 0.017."""
    counts = np.ones(12, np.int64)
    counts[5], counts[6] = 1000, 10
    masker = smoothed_masker(MaskingContext(_Vocabulary(), 4, token_counts=counts), mlm_smoothing=smoothing)
    rows = np.tile(np.array([1, 5, 5, 6, 5, 5, 5, 2]), (40_000, 1))
    chosen = _chosen_share(masker, rows, seed=7)
    assert len(chosen) == len(rows)  # one each
    weights = counts.astype(float) ** -smoothing
    expected = weights[6] / (5 * weights[5] + weights[6])
    error = np.sqrt(expected * (1 - expected) / len(chosen))
    assert abs(np.mean(chosen == 6) - expected) < 5 * error, (np.mean(chosen == 6), expected)


def test_several_tokens_a_row_are_drawn_without_replacement_in_weight_order():
    """Two of twelve tokens a row: successive draws by weight. Three kinds of token (weights 1, 4, 16 by
    counts 1, 1/4^(1/s), ...): every pair's share against the sampling-without-replacement formula."""
    counts = np.ones(12, np.int64)
    counts[[5, 6, 7]] = [1, 16, 256]  # weights at s 0.5: 1, 1/4, 1/16
    masker = smoothed_masker(MaskingContext(_Vocabulary(), 4, token_counts=counts), mlm_smoothing=0.5)
    tokens = np.array([5, 6, 7] * 4)
    rows = np.tile(np.concatenate([[1], tokens, [2]]), (30_000, 1))
    batch = masker({"token_ids": tf.constant(rows, tf.int32)}, seed=[11, 0])
    positions = batch["mask_positions"].numpy()[:, :2]
    assert np.all(batch["mask_weights"].numpy().sum(1) == 2) and np.all(positions[:, 0] != positions[:, 1])
    weight = {5: 1.0, 6: 0.25, 7: 0.0625}
    total = 4 * sum(weight.values())
    # P(a given position is among the two) = p_first + sum over other positions q of p(q) p(this | q first).
    weights = np.array([weight[t] for t in tokens])
    inclusion = weights / total + sum(weights[q] / total * weights / (total - weights[q]) * (np.arange(12) != q)
                                      for q in range(12))
    picked = np.zeros(12)
    np.add.at(picked, positions.ravel() - 1, 1)
    share = picked / len(rows)
    error = np.sqrt(inclusion * (1 - inclusion) / len(rows))
    assert np.all(np.abs(share - inclusion) < 5 * error), (share, inclusion)


def test_distilling_the_main_jobs_kind_of_run_through_the_cli(tmp_path, capsys, monkeypatch):
    """A BERT-Tiny teacher pretrained on two plays, then `--model distilbert --teacher RUN --alpha-mlm 0`:
    the student reads the teacher's vocabulary, starts from its first layer, and the two losses that pull
    it toward the teacher fall (a teacher this short-trained predicts little beyond the unigram, so with
    the masked-LM loss on, rare masked tokens pull the student off it: docs/families/distilbert.md has
    the full recipe from the main job's run); only the student is exported and served; metrics.json names
    the teacher."""
    from cli_runs import pretrain_two_plays
    from keras_bertology.cli import main
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
    from keras_bertology.runs import load_run_model

    plays = [str(path) for path in __import__("keras_bertology.data.corpus", fromlist=["x"]).default_corpus_paths()[:2]]
    teacher_dir = tmp_path / "teacher"
    assert main(["pretrain", "--model", "bert", "--preset", "bert-tiny", "--corpus", *plays, "--steps", "60",
                 "--batch-size", "16", "--seq-len", "32", "--vocab-size", "400", "--learning-rate", "3e-3",
                 "--out", str(teacher_dir), "--no-export"]) == 0, capsys.readouterr().err
    from keras_bertology.pretraining import pretrain as pretrain_module

    counts_given = []  # what the run hands its masking stage, which weighs tokens by count^-0.7 with them

    def spying_build_masker(*args, **kwargs):
        counts_given.append(args[4] if len(args) > 4 else kwargs.get("token_counts"))
        return build_masker(*args, **kwargs)

    build_masker = pretrain_module.build_masker
    monkeypatch.setattr(pretrain_module, "build_masker", spying_build_masker)
    metrics, served = pretrain_two_plays(tmp_path, capsys, "distilbert", "distilbert-tiny", "--teacher",
                                         str(teacher_dir), "--seq-len", "32", "--steps", "40", "--log-every", "10",
                                         "--alpha-mlm", "0")
    assert metrics["teacher"] == str(teacher_dir) and metrics["teacher_family"] == "bert"
    assert counts_given and all(counts is not None and counts.sum() > 0 for counts in counts_given)
    for name in ("kl", "cos"):
        summary = metrics["objectives"][name]
        assert summary["last"]["loss"] < summary["first"]["loss"], (name, summary)
    run, teacher = load_run_model(tmp_path / "run"), load_run_model(teacher_dir)
    assert run.tokenizer.vocab_size == teacher.tokenizer.vocab_size == run.backbone.vocab_size
    assert run.backbone.num_layers == 1 and run.backbone.hidden_size == teacher.backbone.hidden_size
    outputs = served.serve(tf.constant(["Now is the winter of our discontent."]))
    assert outputs["sequence_output"].shape[-1] == 128
    shapes = tf.train.load_checkpoint(str(tmp_path / "export" / "variables" / "variables")).get_variable_to_shape_map()
    served_params = sum(int(np.prod(shape)) for shape in shapes.values())
    assert served_params < teacher.backbone.count_params()  # the student alone
    finished = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert finished["teacher_layers"] == 2

    # `export --format hf`: DistilBertForMaskedLM with DistilBertTokenizer, the student's logits and ids.
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(hf).__name__ == "DistilBertForMaskedLM" and "DistilBert" in type(tokenizer).__name__
    texts = ["Now is the winter of our discontent.", "Made glorious summer by this sun of York"]
    ids = run.tokenizer.tokenize(tf.constant(texts)).to_list()
    assert tokenizer(texts, add_special_tokens=False)["input_ids"] == ids
    row = np.array([[run.tokenizer.cls_id, *ids[0], run.tokenizer.sep_id]], np.int32)
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(row, dtype=torch.long)).logits.numpy()
    positions = np.arange(row.shape[1], dtype=np.int32)[None]
    got = run.pretrainer.masked_lm_model()({"token_ids": row, "padding_mask": np.ones_like(row, bool),
                                            "mask_positions": positions})
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-4)
    back, report = convert_hf_checkpoint(tmp_path / "hf")
    assert back.family == "distilbert" and report.heads == ["mlm"] and not report.skipped
    assert back.tokenizer.tokenize(tf.constant(texts)).to_list() == ids

    # Resumed from the checkpoint before the last, the teacher's folder gone: the same weights.
    shutil.rmtree(sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1])
    teacher_dir.rename(tmp_path / "moved")
    argv = ["pretrain", "--model", "distilbert", "--preset", "distilbert-tiny", "--teacher", str(teacher_dir),
            "--corpus", *plays, "--seq-len", "32", "--steps", "40", "--log-every", "10", "--batch-size", "8",
            "--alpha-mlm", "0", "--out", str(tmp_path / "run"), "--no-export", "--resume"]
    assert main(argv) == 0, capsys.readouterr().err
    resumed = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert resumed["weights_sha256"] == finished["weights_sha256"]

    # Prepared shards are tokenized with the teacher's vocabulary, and a run from them checks it.
    (tmp_path / "moved").rename(teacher_dir)
    assert main(["prepare", "--model", "distilbert", "--preset", "distilbert-tiny", "--teacher", str(teacher_dir),
                 "--corpus", *plays, "--seq-len", "32", "--shards", "1", "--workers", "1",
                 "--out", str(tmp_path / "data")]) == 0, capsys.readouterr().err
    assert main(["pretrain", "--data", str(tmp_path / "data"), "--preset", "distilbert-tiny", "--teacher",
                 str(teacher_dir), "--steps", "2", "--batch-size", "8", "--out", str(tmp_path / "from-data"),
                 "--no-export"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "from-data" / "metrics.json").read_text())["objectives"].keys() == {
        "mlm", "kl", "cos"}


def test_a_teacher_is_a_masked_lm_of_a_bert_shaped_family_from_a_hugging_face_folder_too(tmp_path):
    from keras_bertology.errors import ConfigError
    from keras_bertology.models.distilbert.teacher import teacher_context

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
    bert = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=24, max_position_embeddings=32)
    transformers.BertForMaskedLM(bert).save_pretrained(str(tmp_path / "bert"))
    (tmp_path / "bert" / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    context = teacher_context(str(tmp_path / "bert"))
    assert context.record["teacher_family"] == "bert" and context.tokenizer.vocab_size == 64
    assert context.backbone_overrides["hidden_size"] == 16 and context.backbone_overrides["max_positions"] == 32
    assert "mlm" in context.pretrainer_kwargs["teacher"].objectives
    albert = transformers.AlbertConfig(vocab_size=64, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=24, max_position_embeddings=32)
    transformers.AlbertForMaskedLM(albert).save_pretrained(str(tmp_path / "albert"))
    with pytest.raises(ConfigError, match="holds a model of the albert family; a DistilBERT student learns"):
        teacher_context(str(tmp_path / "albert"))


def test_a_whole_word_is_drawn_with_the_weight_of_its_heaviest_piece():
    """Whole words: [CLS] A=(5, ##8) 6 6 6 6 6 [SEP], a budget of 2 tokens (ceil(0.15 x 7)). A is masked exactly
    when it comes first in the race: probability w_A / (w_A + 5 w_6), w_A that of its rare continuation."""
    class Words(_Vocabulary):
        word_start_table = np.array([True] * 8 + [False] + [True] * 3)

    counts = np.ones(12, np.int64)
    counts[[5, 6, 8]] = [1000, 100, 1]  # at s 0.7: the continuation piece outweighs its word start 125x
    masker = smoothed_masker(MaskingContext(Words(), 4, whole_word=True, token_counts=counts), mlm_smoothing=0.7)
    rows = np.tile(np.array([1, 5, 8, 6, 6, 6, 6, 6, 2]), (30_000, 1))
    batch = masker({"token_ids": tf.constant(rows, tf.int32)}, seed=[5, 0])
    positions, weights = batch["mask_positions"].numpy(), batch["mask_weights"].numpy()
    word_masked = (positions[:, 0] == 1) & (weights[:, 0] > 0)
    assert np.all(word_masked == ((positions[:, 1] == 2) & (weights[:, 1] > 0)))  # never split
    weight = counts.astype(float) ** -0.7
    expected = weight[8] / (weight[8] + 5 * weight[6])
    error = np.sqrt(expected * (1 - expected) / len(rows))
    assert abs(word_masked.mean() - expected) < 5 * error, (word_masked.mean(), expected)


def test_a_distillation_step_counts_the_teachers_forward_and_no_teacher_gradients():
    """The study charges a student its teacher's forward passes (`pretraining.flops` reads the traced step):
    one teacher layer more adds exactly that layer's forward, not its backward."""
    from keras_bertology.pretraining.flops import step_flops

    batch, length, hidden, ffn = 3, 12, 16, 24
    counts = []
    for layers in (2, 3):
        _, model = _teacher_and_student(teacher_layers=layers)
        model.compile()
        x, y, weights = model.split_features(_features(np.random.default_rng(0), batch, length))
        counts.append(step_flops(model, ({k: tf.constant(v) for k, v in x.items()}, y, weights)))
    tokens = batch * length
    layer = tokens * (2 * hidden * 3 * hidden + 2 * hidden * hidden + 2 * 2 * hidden * ffn) \
        + 2 * 2 * batch * length * length * hidden
    assert counts[1] - counts[0] == layer


def test_compiled_distillation_steps_match_the_uncompiled_ones():
    """Three steps with the teacher inside the step, compiled by XLA (JAX's jit on that backend) or not: the
    same three steps, and the total loss falls. Uncompiled, the step runs its ops eagerly (no graph to trace)."""
    logs = []
    for jit_compile in (True, False):
        _, model = _teacher_and_student(dropout=0.0)
        model.compile(optimizer=keras.optimizers.AdamW(1e-2), jit_compile=jit_compile, run_eagerly=not jit_compile)
        x, y, weights = model.split_features(_features(np.random.default_rng(4)))
        batch = keras.tree.map_structure(keras.ops.convert_to_numpy, (x, y, weights))
        logs.append([model.train_on_batch(*batch, return_dict=True) for _ in range(3)])
    for compiled, plain in zip(*logs):
        assert compiled == pytest.approx(plain, rel=1e-4, abs=1e-5)
    assert logs[0][-1]["loss"] < logs[0][0]["loss"] and set(logs[0][0]) >= {"kl_loss", "mlm_loss", "cos_loss"}
