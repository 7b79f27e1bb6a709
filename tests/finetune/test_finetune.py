"""Fine-tuning: word and span alignment, the CLI on built-in and user data for every family, and exports
that answer raw strings in a TensorFlow-only process exactly as the Keras model does."""

import json
import os
import re
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from finetune_material import make_run, user_folders, write_file
from keras_bertology.cli import main
from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.finetune import encoding
from keras_bertology.finetune.datasets import load_task
from keras_bertology.finetune.tasks import TASK_KINDS
from keras_bertology.models import FAMILIES
from keras_bertology.runs import RunModel, load_run_model, save_run_model
from forked_python import run_python


WORDS = ("the rain in spain falls mainly on plain wherefore art thou Romeo , ! unbelievably "
         "antidisestablishmentarianism x 42 café").split()


@pytest.fixture(scope="module")
def sentences():
    return [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:3000]


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory, sentences):
    """A BERT run folder (make_run) that the tests fine-tune from and only read."""
    return make_run(tmp_path_factory.mktemp("bert") / "run", "bert", sentences)


@pytest.fixture(scope="module")
def tokenizers(sentences):
    return {name: FAMILIES[name].train_tokenizer(sentences, 600) for name in ("bert", "xlnet", "roberta")}


@pytest.mark.parametrize("family_name", ["bert", "xlnet", "roberta"])
def test_a_word_tokenized_alone_has_the_pieces_it_has_in_text(family_name, tokenizers):
    """A tagger tokenizes each word alone; byte-level BPE spells a word after a space apart ("Ġking"), so
    RoBERTa's words are tokenized after one, as in running text (Hugging Face's add_prefix_space)."""
    tokenizer = tokenizers[family_name]
    words = ["the", "king", "of", "Denmark", "hath", "Romeo's", "Montagues"]
    pieces, word_of_piece, _ = encoding.word_pieces(tokenizer, tf.ragged.constant([words]))
    in_text = tokenizer.tokenize(tf.constant([tokenizer.word_prefix + " ".join(words)]))[0].numpy().tolist()
    assert pieces[0].numpy().tolist() == in_text
    assert word_of_piece[0].numpy().tolist()[-1] == len(words) - 1


@pytest.mark.parametrize("family_name", ["bert", "xlnet"])
def test_word_labels_sit_on_the_first_piece_of_each_word(family_name, tokenizers):
    family, tokenizer = FAMILIES[family_name], tokenizers[family_name]
    rng = np.random.default_rng(0)
    rows = [list(rng.choice(WORDS, rng.integers(1, 14))) for _ in range(40)]
    seq_len = 16
    inputs, word_map = encoding.encode_words(family, tokenizer, seq_len, tf.ragged.constant(rows))
    token_ids, word_map = inputs["token_ids"].numpy(), word_map.numpy()
    for row, words in enumerate(rows):
        pieces = [tokenizer.tokenize(tf.constant([word]))[0].numpy().tolist() for word in words]
        positions = {int(word_map[row, p]): p for p in np.flatnonzero(word_map[row] >= 0)}
        assert list(positions) == sorted(positions), "words keep their order"
        room = seq_len - 2
        used = np.cumsum([len(p) for p in pieces])
        for index, word_pieces in enumerate(pieces):
            if used[index] - len(word_pieces) < room and word_pieces:  # its first piece fits
                assert token_ids[row, positions[index]] == word_pieces[0]
            else:
                assert index not in positions


@pytest.mark.parametrize("family_name", ["bert", "xlnet"])
def test_every_context_piece_knows_its_word_and_the_question_none(family_name, tokenizers):
    family, tokenizer = FAMILIES[family_name], tokenizers[family_name]
    questions = ["who art thou", "where falls the rain"]
    contexts = ["wherefore art thou Romeo ,  unbelievably", "the rain in spain falls mainly on the plain"]
    inputs, words, word_map = encoding.encode_question_context(family, tokenizer, 40, tf.constant(questions),
                                                               tf.constant(contexts))
    for row, context in enumerate(contexts):
        ids, mapping = inputs["token_ids"].numpy()[row], word_map.numpy()[row]
        assert [w.decode() for w in words[row].numpy()] == context.split()
        for index, word in enumerate(context.split()):
            expected = tokenizer.tokenize(tf.constant([word]))[0].numpy().tolist()
            assert ids[mapping == index].tolist() == expected
        question_ids = tokenizer.tokenize(tf.constant([questions[row]]))[0].numpy().tolist()
        assert (mapping >= 0).sum() == sum(len(tokenizer.tokenize(tf.constant([w]))[0]) for w in context.split())
        assert all(token in ids[mapping < 0] for token in question_ids)


def test_best_spans_is_the_best_allowed_pair():
    rng = np.random.default_rng(1)
    rows = 200
    start, end = rng.normal(size=(rows, 12)).astype("float32"), rng.normal(size=(rows, 12)).astype("float32")
    word_map = np.where(rng.random((rows, 12)) < 0.7, rng.integers(0, 5, (rows, 12)), -1).astype("int32")
    word_map[-1] = -1  # no context left at all
    start_word, end_word, score = encoding.best_spans(tf.constant(start), tf.constant(end),
                                                      tf.constant(word_map), 4)
    for row in range(rows - 1):
        pairs = [(start[row, s] + end[row, e], s, e) for s in range(12) for e in range(s, min(12, s + 4))
                 if word_map[row, s] >= 0 and word_map[row, e] >= 0]
        best, s, e = max(pairs)
        assert (start_word[row], end_word[row]) == (word_map[row, s], word_map[row, e])
        np.testing.assert_allclose(score[row], best, rtol=1e-6)
    assert start_word[-1] == -1
    answers = encoding.join_words(tf.ragged.constant([["a", "b", "c"], ["d"]]), tf.constant([1, -1]),
                                  tf.constant([2, -1]))
    assert answers.numpy().tolist() == [b"b c", b""]


def test_span_targets_point_at_the_answer_words(tokenizers):
    family, tokenizer = FAMILIES["bert"], tokenizers["bert"]
    context = "Romeo , wherefore art thou Romeo ?"
    examples = [{"question": "who", "context": context, "answers": [{"text": text, "start": context.index(text)}]}
                for text in ("wherefore art", "thou Romeo", "efore", "Romeo")]
    long_context = "thou " * 30 + "Romeo"
    examples.append({"question": "who", "context": long_context,
                     "answers": [{"text": "Romeo", "start": long_context.index("Romeo")}]})
    encoded = TASK_KINDS["spans"].encode(None, examples, family, tokenizer, 24, ["token_ids"])
    word_map, targets = encoded["word_map"], encoded["targets"]
    words = context.split()
    for row, expected in enumerate(["wherefore art", "thou Romeo", "wherefore", "Romeo"]):
        start, end = targets["start"][row], targets["end"][row]
        assert encoded["weights"]["start"][row] == 1
        assert " ".join(words[word_map[row, start]:word_map[row, end] + 1]) == expected
        assert word_map[row, start - 1] != word_map[row, start] and word_map[row, end + 1] != word_map[row, end]
    assert encoded["weights"]["start"][4] == 0  # the answer is cut off at 24 tokens: not trained on


def test_a_vocabulary_without_a_leading_token_lays_out_words_and_questions(sentences):
    """T5's has no [CLS]: tagging and span layouts open with the first piece, as its text layout does."""
    family = FAMILIES["t5"]
    tokenizer = family.train_tokenizer(sentences[:600], 300)
    rows = [["the", "king", "of", "Denmark"], ["Romeo"]]
    inputs, word_map = encoding.encode_words(family, tokenizer, 16, tf.ragged.constant(rows))
    for row, words in enumerate(rows):
        assert [index for index in word_map.numpy()[row] if index >= 0] == list(range(len(words)))
        assert inputs["token_ids"].numpy()[row, 0] == tokenizer.tokenize(tf.constant([words[0]]))[0, 0]
    _, _, context_map = encoding.encode_question_context(family, tokenizer, 16, tf.constant(["who"]),
                                                         tf.constant(["the king"]))
    assert sorted(set(context_map.numpy()[0]) - {-1}) == [0, 1]


def _cli(argv):
    """`bertology` exit status, whether the parser or the command refused the input."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def _finetune(task, run, out, *flags):
    export = [] if "--no-export" in flags else ["--export", str(out) + "-export"]
    argv = ["finetune", "--task", str(task), "--from", str(run), "--epochs", "2", "--batch-size", "16",
            "--learning-rate", "5e-3", "--out", str(out), *export, *flags]
    return main(argv)


SERVE_SCRIPT = """
import json, sys
import tensorflow as tf, tensorflow_text  # noqa: F401
assert not [name for name in sys.modules if name.startswith("keras_bertology")]
answers = {}
for path, signature, inputs in json.loads(sys.argv[1]):
    model = tf.saved_model.load(path)  # kept alive while its functions run
    out = getattr(model, signature)(*[tf.constant(x) for x in inputs])
    answers[path] = {name: value.numpy().tolist() for name, value in out.items()}
    answers[path] = json.loads(json.dumps(answers[path], default=lambda b: b.decode()))
print(json.dumps(answers))
"""


def _served(requests):
    """What the SavedModels answer in a fresh process that imports only tensorflow and tensorflow_text."""
    done = run_python([sys.executable, "-c", SERVE_SCRIPT, json.dumps(requests)])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _keras_predictions(out, task_path, max_examples=None):
    """The fine-tuned `.keras` model's test predictions, through the same encoding as training."""
    import keras

    results = json.loads((out / "results.json").read_text())
    task = load_task(task_path, max_examples)
    run = load_run_model(results["encoder"]["from"])
    kind = TASK_KINDS[task.kind]
    model = keras.saving.load_model(out / "model.keras", compile=False)
    encoded = kind.encode(task, task.splits["test"], FAMILIES[run.family], run.tokenizer,
                          results["recipe"]["seq_len"], run.backbone.input)
    return task, kind.predict(model, encoded, task, task.splits["test"], 16), model, encoded


@pytest.mark.slow
def test_user_folders_and_a_built_in_task_train_export_and_serve_like_the_keras_model(tmp_path, bert_run, capsys):
    """The three user folders (8 epochs), and BBC News by name; every export served in one fresh process (one
    TensorFlow start). WNUT-16's reading: tests/finetune/test_finetune_data.py."""
    folders = user_folders(tmp_path / "data")
    requests, expected = [], {}
    for name, folder in folders.items():
        out = tmp_path / f"ft-{name}"
        assert _finetune(folder, bert_run, out, "--epochs", "8") == 0, capsys.readouterr().err
        results = json.loads((out / "results.json").read_text())
        assert (out / "results.md").read_text().startswith(f"# {folder.name}")
        assert (out / "training_curve.png").read_bytes()[:4] == b"\x89PNG"
        assert set(results["test"]) <= {k.split(".", 1)[1] for k in results["scores"]}
        task, predictions, _, _ = _keras_predictions(out, folder)
        test = task.splits["test"]
        if name == "pairs":
            assert results["test"]["accuracy"] >= 0.9, results["history"]
            assert results["encoder"]["family"] == "bert"
            requests.append([f"{out}-export", "classify_pairs", [[e["text"] for e in test],
                                                                 [e["text_b"] for e in test]]])
            expected[f"{out}-export"] = ("label", predictions)
        elif name == "tags":
            assert results["test"]["f1"] >= 0.75, results["history"]  # always-O scores 0
            requests.append([f"{out}-export", "tag", [[" ".join(e["words"]) for e in test]]])
            expected[f"{out}-export"] = ("tags", predictions)
        else:
            assert results["test"]["exact_match"] >= 0.9, results["history"]
            requests.append([f"{out}-export", "answer", [[e["question"] for e in test],
                                                         [e["context"] for e in test]]])
            expected[f"{out}-export"] = ("answer", predictions)

    # A built-in task by name: BBC News.
    out = tmp_path / "ft-bbc"
    assert _finetune("bbc-news", bert_run, out, "--max-examples", "48", "--epochs", "1", "--layer-decay", "0.8",
                     "--remat") == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["recipe"]["layer_decay"] == 0.8 and results["recipe"]["remat"] is True
    assert results["examples"] == {"train": 48, "dev": 48, "test": 48}
    assert all(0 <= results["scores"][name] <= 1 for name in ("test.accuracy", "test.macro_f1"))
    bbc_data, bbc_predictions, bbc_model, bbc_encoded = _keras_predictions(out, "bbc-news", 48)
    requests.append([f"{out}-export", "classify", [[e["text"] for e in bbc_data.splits["test"]]]])

    served = _served(requests)
    for path, (key, predictions) in expected.items():
        got = served[path][key]
        if key == "tags":
            got = [[tag for tag in row if tag] for row in got]
        assert got == predictions, path
    bbc_served = served[f"{out}-export"]
    assert bbc_served["label"] == bbc_predictions, "bbc-news: the served labels are the Keras model's"
    probabilities = tf.nn.softmax(bbc_model.predict(bbc_encoded["inputs"], verbose=0)).numpy()
    np.testing.assert_allclose(bbc_served["probabilities"], probabilities, atol=1e-5,
                               err_msg="bbc-news: the served probabilities are the Keras model's")


def test_a_learning_curve_point_draws_its_labels_and_keeps_the_last_epoch(tmp_path, bert_run, capsys,
                                                                         monkeypatch):
    out = tmp_path / "ft"
    traces, train_step = [], keras.Model.train_step
    monkeypatch.setattr(keras.Model, "train_step", lambda model, data: traces.append(1) or train_step(model, data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _finetune("bbc-news", bert_run, out, "--train-examples", "10", "--seed", "4", "--last-epoch",
                         "--epochs", "3", "--results-only", "--no-export", "--summary", "mean") == 0, \
            capsys.readouterr().err
    # The mean state, not BERT's pooler: the pooler trains no more, and that is no warning.
    assert not [str(w.message) for w in caught if "pooler" in str(w.message)]
    assert not (out / "model.keras").exists() and (out / "results.md").is_file()
    results = json.loads((out / "results.json").read_text())
    assert results["recipe"]["summary"] == "mean"
    assert results["examples"] == {"train": 10, "dev": 223, "test": 223}  # dev and test whole
    assert "10 training examples drawn with seed 4" in results["data"]
    # One fit of three epochs, dev scored once: the last epoch is the one kept.
    assert [record["epoch"] for record in results["history"]] == [3] and results["best_epoch"] == 3
    assert len(results["step_losses"]) == 3 * 1  # batches of 16: one step an epoch
    # Its variables made before the first step, tf.function traced the step once, not again after a trace
    # that created them.
    assert len(traces) == 1


def test_a_run_on_a_kept_compiled_model_computes_what_a_run_of_its_own_does(tmp_path, bert_run, sentences):
    from keras_bertology.finetune.shared_work import SharedWork
    from keras_bertology.finetune.run import FinetuneOptions, finetune

    other = make_run(tmp_path / "other", "bert", sentences)  # same shapes and vocabulary, other weights
    folder = user_folders(tmp_path / "data")["pairs"]
    kept = SharedWork()

    def fine_tune(name, seed, compiled, from_dir=bert_run, random_init=False, summary=None):
        return finetune(FinetuneOptions(
            task=str(folder), from_dir=str(from_dir), epochs=2, batch_size=8, learning_rate=5e-3, seed=seed,
            train_examples=24, last_epoch=True, random_init=random_init, out=str(tmp_path / name), no_export=True,
            summary=summary, verbose=0), compiled)

    fine_tune("fills", 0, kept)  # compiles and keeps its model
    # another encoder; re-initialised; another head (the mean state, not BERT's pooler: a recipe of its own)
    runs = ((2, other, False, None), (3, bert_run, True, None), (4, bert_run, False, "mean"))
    for seed, from_dir, random_init, summary in runs:
        lent = fine_tune(f"kept-{seed}", seed, kept, from_dir, random_init, summary)
        alone = fine_tune(f"alone-{seed}", seed, None, from_dir, random_init, summary)
        assert lent["step_losses"] == alone["step_losses"] and lent["test"] == alone["test"]
        assert len(set(lent["step_losses"])) > 1 and lent["recipe"]["summary"] == summary
    assert len(kept._models) == 2  # one traced model served every run of each recipe
    assert len(kept._encoded) == 4  # dev and test of each encoder folder, encoded once
    assert list(kept._tasks) == [(str(folder), None)]  # the task read once


@pytest.mark.slow
# BERT's: the user folders' pairs run; SpanBERT's encoder and packing are BERT's (its vocabulary keeps case).
# ALBERT's, ELECTRA's and RoBERTa's: BERT's head on a first-token summary of a BERT-like encoder (`make test-all`).
# ERNIE's: BERT's encoder class, packing, tokenizer and head, other config values only (`make test-all`).
# BigBird's at these lengths is BERT's full attention; Linformer's low-rank attention learns this 8-epoch pair
# task in some runs and stays at chance in others (`make test-all`). A random ELMo's mean over its words needs
# more than 8 epochs here: test_elmo.py fine-tunes a pretrained one.
# DeBERTa's: DeBERTa-v3's head and summary on a disentangled encoder; DistilBERT's: ModernBERT's inputs without
# segments and BERT's head; GPT's: Transformer-XL's last-text summary of a causal encoder (`make test-all`).
@pytest.mark.parametrize("family_name", [
    pytest.param(name, marks=pytest.mark.extended)
    if name in {"albert", "bigbird", "deberta", "distilbert", "electra", "ernie", "gpt", "linformer", "roberta"}
    else name
    for name in sorted(set(FAMILIES) - {"bert", "elmo", "spanbert"})])
def test_every_family_fine_tunes_from_its_run_folder(family_name, tmp_path, sentences, capsys):
    run = make_run(tmp_path / "run", family_name, sentences)
    folder = user_folders(tmp_path / "data")["pairs"]
    assert _finetune(folder, run, tmp_path / "ft", "--epochs", "8") == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert results["encoder"]["family"] == family_name
    assert results["test"]["accuracy"] >= 0.8, results["history"]


@pytest.mark.parametrize("flags, message", [
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--warmup", "1.5"], "--warmup"),
    (["--seq-len", "4096"], "positions"),
    (["--layer-decay", "2"], "--layer-decay"),
    (["--out", "/proc/bertology-out"], "--out"),
    (["--strategy", "multiworker"], "invalid choice: 'multiworker'"),
    (["--train-examples", "0"], "--train-examples"),
    (["--train-examples", "1000"], "cannot draw 1,000"),
    (["--results-only", "--export", "elsewhere"], "contradict"),
])
def test_bad_flags_fail_with_one_line(flags, message, tmp_path, bert_run, capsys):
    folder = user_folders(tmp_path / "data")["pairs"]
    code = _cli(["finetune", "--task", str(folder), "--from", str(bert_run), "--out", str(tmp_path / "ft"), *flags])
    error = capsys.readouterr().err
    assert code == 2 and message in error and len(error.strip().splitlines()) == 1, error
    assert not (tmp_path / "ft").exists()


def test_bad_data_and_run_folders_fail_with_one_line(tmp_path, bert_run, capsys):
    folder = user_folders(tmp_path / "data")["pairs"]
    (folder / "test.tsv").unlink()
    headless = tmp_path / "no-tokenizer"
    loaded = load_run_model(bert_run)
    save_run_model(headless, RunModel("bert", loaded.backbone, None, 32))
    tags = user_folders(tmp_path / "more")["tags"]
    cases = [(folder, bert_run, "test"), (tmp_path / "nowhere", bert_run, "nowhere"),
             (tags, tmp_path / "not-a-run", "not a finished run folder"), (tags, headless, "no tokenizer")]
    for task, run_dir, message in cases:
        code = _cli(["finetune", "--task", str(task), "--from", str(run_dir), "--out", str(tmp_path / "ft")])
        error = capsys.readouterr().err
        assert code == 2 and message in error and len(error.strip().splitlines()) == 1, error
        assert not (tmp_path / "ft").exists()


def test_results_are_written_before_an_export_that_fills_the_disk(tmp_path, bert_run, capsys, monkeypatch):
    """A full disk while the SavedModel is written is one line naming it; results and model are already saved.
    The data's one 'rare' example is carved into dev, which is reported, not refused."""
    rows = "".join(f"the {'rain' if i % 2 else 'sun'} {i}\t{'rare' if i == 19 else i % 2}\n" for i in range(20))
    write_file(tmp_path / "data", "train.tsv", "text\tlabel\n" + rows)
    write_file(tmp_path / "data", "test.tsv", "text\tlabel\nthe rain\t1\nthe sun\trare\n")

    def full_disk(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "savedmodels/x/variables: No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", full_disk)
    out = tmp_path / "ft"
    assert _finetune(tmp_path / "data", bert_run, out, "--epochs", "1") == 2
    captured = capsys.readouterr()
    error = captured.err.strip().splitlines()
    assert len(error) == 1 and "no space left" in error[0] and f".{out.name}-export." in error[0], captured.err
    assert "'rare'" in captured.out and "carved-out dev" in captured.out
    results = json.loads((out / "results.json").read_text())
    assert results["untrained_labels"] == ["rare"]
    assert (out / "results.md").exists() and (out / "model.keras").exists()
    assert not (tmp_path / "ft-export").exists()


def test_a_full_disk_under_out_names_the_path(tmp_path, bert_run, capsys, monkeypatch):
    """Writing the results into a full disk (an OSError that names no file) is one line naming the output."""
    import errno
    import pathlib

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    folder = user_folders(tmp_path / "data")["pairs"]
    out = tmp_path / "ft"
    monkeypatch.setattr(pathlib.Path, "write_text", full)
    assert _finetune(folder, bert_run, out, "--epochs", "1", "--no-export", "--max-examples", "8",
                     "--seq-len", "16") == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and re.fullmatch(f"bertology: error: {re.escape(str(out))}/[\\w.]+: No space left on "
                                            "device", error[0]), error


def test_step_losses_undo_the_running_mean_of_each_epoch():
    from keras_bertology.finetune.run import _StepLosses

    losses = _StepLosses()
    for batch, running_mean in [(0, 2.0), (1, 1.5), (2, 1.0), (0, 0.8), (1, 0.7)]:
        losses.on_train_batch_end(batch, {"loss": running_mean})
    np.testing.assert_allclose(losses.records, [2.0, 1.0, 0.0, 0.8, 0.6])
