"""The ONNX export's string model (keras_bertology/export/onnx_text.py): raw texts through ONNX Runtime, in a
process that never imports TensorFlow, against the SavedModel's `serve` on the same texts: the same ids, the
same layout, the encoder's outputs within 1e-4."""

import importlib.util
import json
import random
import subprocess
import sys

import numpy as np
import pytest

from docs_clients import run_serving_docs_client
from family_harness import sentences_of_one_play
from onnx_clients import REFUSALS_CLIENT, check_task_models_onnx, served_by_onnx
from keras_bertology.export import onnx_text
from keras_bertology.export.onnx import export_onnx
from keras_bertology.export.onnx_graph import OnnxGraph
from keras_bertology.models.registry import get_family
from keras_bertology.runs import RunModel

SEQ_LEN = 96  # long enough that a word cut at its 101st character shows in the ids, short enough to fill
TOLERANCE = 1e-4


def _run(family_name, tmp_path):
    """A one-layer run of `family_name` at SEQ_LEN with a vocabulary of 300 learned from one play."""
    import keras

    family = get_family(family_name)
    keras.utils.set_random_seed(0)
    preset = min(family.presets, key=lambda name: family.presets[name]["params"])
    tokenizer = family.train_tokenizer(sentences_of_one_play(), 300)
    backbone = family.backbone_cls(**family.backbone_config(preset, vocab_size=tokenizer.vocab_size,
                                                            **family.sized_config({"num_layers": 1})))
    return RunModel(family.name, backbone, tokenizer, SEQ_LEN, preset=preset)


def _user_texts(tokenizer, seed=1, count=40):
    """Texts unlike the export's own check texts: random mixed-script ones, and ones a user sends."""
    rng = random.Random(seed)
    alphabet = ("abcdefghijklmnopqrstuvwxyz ABCDEFXYZ ,.;:!?'\"-()  éèàçñüößÅØ ǅǈ ΑΒΓαβγ абвгд שלום مرحبا "
                "नमस्ते 한국어 東京大阪 。、 😀🙈👩‍👩‍👧 \t\n\u00a0\u2003\u200b\ufeff")
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 90))) for _ in range(count)]
    texts += ["The quick brown fox.", "  leading and trailing spaces  ", "é" * 150 + " then words",
              "the" * 60 + " a word over the bound", " ".join(["long"] * 200), "日本語のテキストは空白なしで続きます" * 5, "mixed123numbers4567 and_under_scores"]
    texts += ["a <|endoftext|> b", "<|endoftext|>", "<s> and </s>, [CLS] or [SEP]", "private \ue000use  \ue000 x"]
    encoded = [text.encode() for text in texts] + [b"\xc0\x80 overlong", b"cut \xf0\x9f\x98", b"",
                                                    b"\xed\xa0\x80 surrogate", b"\xff"]
    if tokenizer.has_role("mask"):
        mask = tokenizer.vocabulary[tokenizer.mask_id]
        encoded += [f"The {mask} sat on the {mask}.".encode(), f"{mask}{mask} {mask},{mask}".encode()]
    if getattr(tokenizer, "sentinels", 0):
        encoded += [b"Thank you <extra_id_0> me to your party <extra_id_1>.", b"<extra_id_2>,<extra_id_3>x",
                    b"<extra_id_4><extra_id_5>y"]
    return encoded


# SentencePiece (DeBERTa-v3, BigBird; T5 with its sentinels), byte-level BPE (RoBERTa, DeBERTa, Linformer,
# ModernBERT; GPT, Transformer-XL without a mask token) and cased WordPiece (SpanBERT).
@pytest.mark.parametrize("family_name", ["deberta-v3", "t5", "roberta", "gpt", "spanbert"] + [
    pytest.param(name, marks=pytest.mark.extended)
    for name in ("bigbird", "deberta", "linformer", "modernbert", "transformer-xl")])
def test_the_string_model_serves_texts_as_the_saved_model_does(family_name, tmp_path):
    import tensorflow as tf

    from keras_bertology.export.saved_model import export_saved_model

    run = _run(family_name, tmp_path)
    out = tmp_path / "onnx" / f"{family_name}-tiny-shakespeare"  # where docs/serving.md's client reads it
    description = export_onnx(run, out)
    assert description["text_model"]["model"] == onnx_text.TEXT_MODEL_FILE
    assert description["text_model"]["self_check"]["max_difference"] <= TOLERANCE
    reads_pairs = "segment_ids" in run.backbone.text_encoder().input  # the SavedModel has `serve_pairs`
    assert sorted(path.name for path in out.iterdir()) == sorted(["model.onnx", "model.text.onnx", "onnx.json"] +
                                                                 ["model.text_pairs.onnx"] * reads_pairs)
    assert ("text_pairs_model" in description) == reads_pairs
    texts = _user_texts(run.tokenizer)
    # What the ONNX tokenizer cannot read as ours does fails there, never gives other ids.
    unreadable = [text for text in texts if not run.tokenizer.onnx_reads(text)]
    assert ("unreadable" in description["text_model"]) == bool(unreadable)
    if unreadable:
        refused = served_by_onnx(out / onnx_text.TEXT_MODEL_FILE, unreadable, tmp_path, REFUSALS_CLIENT)["refused"]
        assert refused.all(), [text for text, no in zip(unreadable, refused) if not no]
    texts = [text for text in texts if text not in unreadable]
    # A batch of short texts takes the graph's branch without the word cut: the same ids as in a long batch.
    short = [text for text in texts if 0 < len(text) <= 101]
    alone = served_by_onnx(out / onnx_text.TEXT_MODEL_FILE, short, tmp_path)["token_ids"]
    served = served_by_onnx(out / onnx_text.TEXT_MODEL_FILE, texts, tmp_path)
    assert sorted(served) == description["text_model"]["outputs"]
    export_saved_model(run, tmp_path / "saved")
    serve = tf.saved_model.load(str(tmp_path / "saved")).signatures["serve"]
    expected = {name: value.numpy() for name, value in serve(text=tf.constant(texts)).items()}
    _assert_served_as(served, expected, texts)
    assert served["padding_mask"].sum(axis=1).max() == SEQ_LEN  # the long texts filled the length
    rows = [texts.index(text) for text in short]
    np.testing.assert_array_equal(alone, served["token_ids"][rows, :alone.shape[1]])
    if reads_pairs:
        _check_the_pairs_model(out, description["text_pairs_model"], texts, tmp_path)
    if family_name == "deberta-v3":  # the documented client, as written
        _check_the_docs_client(tmp_path, serve)


def _check_the_pairs_model(out, description, texts, folder):
    """The encoder's model.text_pairs.onnx serves each text beside another (the long ones beside short and
    empty ones: each trimming branch) as the SavedModel's `serve_pairs` does: the same ids and layout, the
    outputs within TOLERANCE on the real tokens."""
    import tensorflow as tf

    from onnx_clients import PAIRS_CLIENT

    assert description["model"] == onnx_text.TEXT_PAIRS_MODEL_FILE and description["inputs"] == ["text", "text_b"]
    assert description["self_check"]["max_difference"] <= TOLERANCE
    firsts, seconds = texts + [b"", b""], texts[::-1] + [b"", texts[0]]
    served = served_by_onnx(out / onnx_text.TEXT_PAIRS_MODEL_FILE, [firsts, seconds], folder, PAIRS_CLIENT)
    saved = tf.saved_model.load(str(folder / "saved"))  # kept: its functions read its variables
    expected = {name: value.numpy() for name, value in saved.serve_pairs(tf.constant(firsts),
                                                                         tf.constant(seconds)).items()}
    _assert_served_as(served, expected, list(zip(firsts, seconds)))
    assert (served["segment_ids"] == 1).any() and served["padding_mask"].sum(axis=1).max() == SEQ_LEN


def _assert_served_as(served, expected, rows):
    """The string model's outputs (`served`) against the SavedModel's on the same `rows` (texts or pairs, named
    in errors): the laid-out ids equal, the other outputs within TOLERANCE on the real tokens."""
    for name in onnx_text.LAID_OUT:
        assert served[name].shape == expected[name].shape, name
        differing = [rows[row] for row in range(len(rows)) if not np.array_equal(served[name][row],
                                                                                 expected[name][row])]
        assert not differing, (name, differing[:3])
    real = served["padding_mask"] == 1
    for name, value in served.items():
        if name not in onnx_text.LAID_OUT:
            np.testing.assert_allclose(value[real] if value.ndim == 3 else value, expected[name][real]
                                       if value.ndim == 3 else expected[name], atol=TOLERANCE, err_msg=name)


def _check_the_docs_client(folder, serve):
    """docs/serving.md's string-model client in a new process without TensorFlow serves its texts as `serve`."""
    run_serving_docs_client("### Raw strings in", "### int8", "np.savez('docs.npz', texts=np.array(texts), **served)\n",
                            folder)
    served = dict(np.load(folder / "docs.npz"))
    import tensorflow as tf

    expected = serve(text=tf.constant(served.pop("texts").tolist()))
    assert sorted(served) == sorted(expected)
    real = served["padding_mask"] == 1
    np.testing.assert_array_equal(served["token_ids"], expected["token_ids"].numpy())
    np.testing.assert_allclose(served["sequence_output"][real], expected["sequence_output"].numpy()[real],
                               atol=TOLERANCE)


def test_long_words_are_cut_as_the_saved_model_cuts_them(tmp_path):
    """`cut_long_words` against `saved_model.cut_words` on words at, under and over the bound, between the
    delimiters (spaces, punctuation, CJK) that end a word."""
    import onnx
    import tensorflow as tf
    from onnx import helper

    from keras_bertology.export.saved_model import MAX_WORD_CHARS, cut_words

    graph = OnnxGraph("test")
    cut = graph.op("Identity", onnx_text.cut_long_words(graph, onnx_text.TEXT_INPUT), output_names=["cut"])
    model = helper.make_model(
        helper.make_graph(graph.nodes, "cut", [helper.make_tensor_value_info("text", onnx.TensorProto.STRING, [None])],
                          [helper.make_tensor_value_info(cut, onnx.TensorProto.STRING, [None])], graph.initializers),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)], ir_version=8)
    onnx.save(model, tmp_path / "cut.onnx")
    rng = random.Random(0)
    texts = []
    for _ in range(200):
        words = ["".join(rng.choice("abéß😀") for _ in range(rng.choice([1, MAX_WORD_CHARS - 1, MAX_WORD_CHARS,
                                                                       MAX_WORD_CHARS + 1, 250])))
                 for _ in range(rng.randint(1, 4))]
        texts.append("".join(word + rng.choice([" ", ",", "、", "\n", "-"]) for word in words).encode())
    got = served_by_onnx(tmp_path / "cut.onnx", texts, tmp_path)["cut"]
    expected = cut_words(tf.constant(texts)).numpy()
    assert any(len(text) != len(value) for text, value in zip(texts, expected))  # some words were cut
    assert [bytes(value) for value in got] == list(expected)


def test_a_tokenizer_without_operators_gives_the_ids_model_and_says_why(tmp_path):
    """ALBERT's SentencePiece rewrites text (NFKD, lower-casing) as no ONNX operator can: the export writes the
    model on ids, and onnx.json says in one line why there is no string model."""
    description = export_onnx(_run("albert", tmp_path), tmp_path / "onnx")
    assert sorted(path.name for path in (tmp_path / "onnx").iterdir()) == ["model.onnx", "onnx.json"]
    why = json.loads((tmp_path / "onnx" / "onnx.json").read_text())["text_model"]["missing"]
    assert why == description["text_model"]["missing"] and "\n" not in why
    assert why.startswith("its text rewriting (lower_case, strip_accents, replace_quotes) has no ONNX")


def test_a_run_trained_in_mixed_precision_exports_both_models_in_float32(tmp_path):
    """A run trained in mixed_bfloat16 (the default on a CPU with bf16 instructions): tf2onnx wrote its casts
    with float16 on one side and bfloat16 on the other, which ONNX Runtime refused; both models are made from a
    float32 copy of the same weights."""
    import keras

    from keras_bertology.export.onnx import _in_float32

    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        run = _run("roberta", tmp_path)
    finally:
        keras.config.set_dtype_policy("float32")
    assert {layer.dtype_policy.name for layer in run.backbone._flatten_layers()} >= {"mixed_bfloat16"}
    copy = _in_float32(run.backbone)
    assert {layer.dtype_policy.name for layer in copy._flatten_layers()} == {"float32"}
    for mine, theirs in zip(copy.weights, run.backbone.weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    description = export_onnx(run, tmp_path / "onnx")
    assert description["self_check"]["max_difference"] <= TOLERANCE
    assert description["text_model"]["self_check"]["max_difference"] <= TOLERANCE


def test_fine_tuned_classifiers_taggers_and_answer_models_get_string_models(tmp_path, capsys):
    """`bertology export FINETUNE_DIR --format onnx` of RoBERTa task models, in a process without TensorFlow:
    a classifier's model.text.onnx (the tokenizer read from the run it was tuned from) gives logits whose
    softmax is the SavedModel's `classify` (`classify_pairs`) probabilities, the pairs trimmed together as the
    SavedModel trims them; a tagger's gives `tag`'s words, tags and scores; an answer model's gives `answer`'s
    answers and scores."""
    import tensorflow as tf

    from family_harness import native_run
    from finetune_material import user_folders, write_file
    from keras_bertology.cli import main
    from keras_bertology.runs import load_run_tokenizer
    from onnx_clients import ANSWERS_CLIENT, PAIRS_CLIENT, refusals

    native_run(get_family("roberta"), tmp_path / "run", sentences_of_one_play(), perturb_seed=0)
    folders = user_folders(tmp_path / "data")
    for split in ("train", "dev", "test"):  # the pairs' label and second text alone
        rows = [row.split("\t") for row in (folders["pairs"] / f"{split}.tsv").read_text().splitlines()[1:]]
        write_file(tmp_path / "data" / "single", f"{split}.tsv",
                   "".join(f"{label}\t{text}\n" for label, _, text, _ in [["label", "", "text", ""], *rows]))
    printed = {}
    for name, folder in (("single", tmp_path / "data" / "single"), ("pairs", folders["pairs"]),
                         ("tags", folders["tags"]), ("spans", folders["spans"])):
        assert main(["finetune", "--task", str(folder), "--from", str(tmp_path / "run"), "--epochs", "1",
                     "--batch-size", "16", "--seq-len", "32", "--out", str(tmp_path / f"ft-{name}"),
                     "--export", str(tmp_path / f"saved-{name}")]) == 0
        capsys.readouterr()
        assert main(["export", str(tmp_path / f"ft-{name}"), "--format", "onnx", "--out",
                     str(tmp_path / f"onnx-{name}")]) == 0
        printed[name] = capsys.readouterr().out.strip().splitlines()[-1]
    check_task_models_onnx({name: (tmp_path / f"ft-{name}", tmp_path / f"onnx-{name}")
                            for name in ("single", "pairs", "tags", "spans")}, tmp_path, TOLERANCE)
    assert printed == {name: f"string model written to {tmp_path / f'onnx-{name}' / 'model.text.onnx'}: {inputs}, "
                             "raw strings (ONNX Runtime Extensions' operators)"
                       for name, inputs in (("single", "input text"), ("pairs", "inputs text, text_b"),
                                            ("tags", "input text"), ("spans", "inputs question, context"))}
    texts = [b"the rain art thou", b"the sun falls plain", b"", "Caf\u00e9 \u6771\u4eac \U0001F600".encode()]
    served = served_by_onnx(tmp_path / "onnx-single" / onnx_text.TEXT_MODEL_FILE, texts, tmp_path)
    probabilities = np.exp(served["logits"]) / np.exp(served["logits"]).sum(axis=-1, keepdims=True)
    saved = tf.saved_model.load(str(tmp_path / "saved-single"))  # kept: its functions read its variables
    expected = saved.classify(tf.constant(texts))["probabilities"]
    np.testing.assert_allclose(probabilities, expected.numpy(), atol=TOLERANCE)
    # Pairs: short, empty, and over the length on either side or both (each trimming branch).
    long = " ".join(["thou art the sun"] * 12).encode()
    firsts = [b"the rain art thou", b"", long, b"a short one", long, b"the sun"]
    seconds = [b"falls plain", b"", b"a short one", long, long, "Caf\u00e9 \U0001F600".encode()]
    served = served_by_onnx(tmp_path / "onnx-pairs" / onnx_text.TEXT_MODEL_FILE, [firsts, seconds], tmp_path,
                            PAIRS_CLIENT)
    saved = tf.saved_model.load(str(tmp_path / "saved-pairs"))
    expected = saved.classify_pairs(tf.constant(firsts), tf.constant(seconds))["probabilities"].numpy()
    probabilities = np.exp(served["logits"]) / np.exp(served["logits"]).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, atol=TOLERANCE)
    assert served["padding_mask"].sum(axis=1).max() == 32 and (served["segment_ids"] == 1).any()
    # A tagger: a tag per whitespace word, as the SavedModel's `tag` gives them (words past the length "O").
    texts = [b"the rain falls on Romeo", b"", "  Juliet\tand\u00a0Romeo  ".encode(),
             " ".join(["Juliet falls"] * 20).encode(),
             "Caf\u00e9 Romeo \U0001F600".encode()]
    served = served_by_onnx(tmp_path / "onnx-tags" / onnx_text.TEXT_MODEL_FILE, texts, tmp_path)
    saved = tf.saved_model.load(str(tmp_path / "saved-tags"))
    expected = saved.tag(tf.constant(texts))
    for name in ("tags", "words"):
        assert served[name].tolist() == expected[name].numpy().tolist(), name
    np.testing.assert_allclose(served["scores"], expected["scores"].numpy(), atol=TOLERANCE)
    assert served["words"].shape == (5, 40) and served["words"][2, :4].tolist() == [b"Juliet", b"and", b"Romeo", b""]
    assert set(served["tags"][0, :5].tolist()) <= {b"O", b"B-person"} and served["tags"][0, 5] == b""
    # An answer model: the context's words of the best span, as the SavedModel's `answer` gives them (accents,
    # CJK, emoji in either text, either one empty, a context over the length whose answer lies past it, a word over
    # 101 characters); a pair with bytes that are not UTF-8, which byte-level BPE's operator would read otherwise,
    # fails in ONNX Runtime.
    long = " ".join(["the rain falls on Romeo in spain"] * 12)
    pairs = [(b"on whom does the rain fall", b"the rain falls on Juliet in spain"),
             (b"", b"the rain falls on Tybalt in spain"), (b"on whom does the rain fall", b""),
             ("on whom, Caf\u00e9?".encode(), "the rain falls on Caf\u00e9 cr\u00e8me in spain".encode()),
             (b"on whom does the rain fall",
              "the rain  falls\u00a0on \u6771\u4eac\U0001F600 Romeo in spain \U0001F44D\U0001F3FD".encode()),
             ("\u6771\u4eac \U0001F600 on whom".encode(), b"the rain falls on Romeo"),
             (b"on whom does the rain fall", (long + " Tybalt").encode()),
             (long.encode(), ("the rain falls on " + "Romeo" * 30 + " in spain").encode()),
             (b"on whom \xff\xfe does it fall", b"the rain falls on Juliet"),
             (b"on whom does the rain fall", b"the rain \xc3 falls on Juliet \xe2\x82")]
    tokenizer = load_run_tokenizer(tmp_path / "run")
    readable = [pair for pair in pairs if all(map(tokenizer.onnx_reads, pair))]
    unreadable = [pair for pair in pairs if pair not in readable]
    refused = served_by_onnx(tmp_path / "onnx-spans" / onnx_text.TEXT_MODEL_FILE, list(zip(*unreadable)), tmp_path,
                             refusals(ANSWERS_CLIENT))["refused"]
    assert refused.tolist() == [True] * len(unreadable) == [True] * 2
    # The readable pairs through docs/serving.md's answer client, as written (on the model of `--out onnx/squad`),
    # then through its session (one process for both: each costs seconds to start).
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "squad").symlink_to(tmp_path / "onnx-spans")
    np.savez(tmp_path / "pairs.npz", **{name: np.array(column, dtype=f"S{max(map(len, column)) + 1}")
                                        for name, column in zip(("question", "context"), zip(*readable))})
    run_serving_docs_client("An answer model's client", "### int8", (
        "pairs = dict(np.load('pairs.npz'))\n"
        "answers, scores, mask = session.run(['answer', 'score', 'padding_mask'], pairs)\n"
        "np.savez('docs.npz', questions=questions, contexts=contexts, answer=answer.astype(str), score=score, "
        "answers=answers.astype(str), scores=scores, lengths=mask.sum(axis=1))\n"), tmp_path)
    served = np.load(tmp_path / "docs.npz")
    saved = tf.saved_model.load(str(tmp_path / "saved-spans"))
    for texts, answer, score in ((list(zip(served["questions"], served["contexts"])), "answer", "score"),
                                 (readable, "answers", "scores")):
        expected = saved.answer(*map(tf.constant, map(list, zip(*texts))))
        assert [text.encode() for text in served[answer]] == expected["answer"].numpy().tolist()
        np.testing.assert_allclose(served[score], expected["score"].numpy(), atol=TOLERANCE)
    assert served["lengths"].max() == 32 and served["answers"][2] == ""


@pytest.mark.parametrize("max_answer_pieces", [1, 3, 30])
def test_the_answer_models_span_is_the_one_best_spans_picks(max_answer_pieces):
    """`onnx_answers.best_spans` in ONNX Runtime against `encoding.best_spans` on logits of few values (ties,
    the first maximum wins), word maps with -1 inside and around the context, rows with no context, lengths
    under and over the band."""
    import onnx
    import onnxruntime
    import tensorflow as tf
    from onnx import helper

    from keras_bertology.export.onnx_answers import best_spans
    from keras_bertology.finetune import encoding

    graph = OnnxGraph("test")
    found = best_spans(graph, "start", "end", "word_map", max_answer_pieces)
    outputs = [graph.op("Identity", value, output_names=[name]) for name, value in
               zip(("start_word", "end_word", "score"), found)]
    model = helper.make_model(helper.make_graph(
        graph.nodes, "spans", [helper.make_tensor_value_info(name, element, [None, None]) for name, element in
                               (("start", onnx.TensorProto.FLOAT), ("end", onnx.TensorProto.FLOAT),
                                ("word_map", onnx.TensorProto.INT32))],
        [helper.make_tensor_value_info(name, element, [None]) for name, element in
         zip(outputs, (onnx.TensorProto.INT64, onnx.TensorProto.INT64, onnx.TensorProto.FLOAT))], graph.initializers),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(max_answer_pieces)
    for length in (1, 5, 40):
        start, end = (rng.integers(-2, 3, (12, length)).astype(np.float32) for _ in range(2))
        word_map = np.where(rng.random((12, length)) < 0.3, -1, np.arange(length) // 2).astype(np.int32)
        word_map[0] = -1  # no context
        word_map[1, : length // 2] = -1  # a question before the context
        got = session.run(None, {"start": start, "end": end, "word_map": word_map})
        expected = encoding.best_spans(tf.constant(start), tf.constant(end), tf.constant(word_map), max_answer_pieces)
        for mine, theirs in zip(got, expected):
            np.testing.assert_array_equal(mine, theirs.numpy())


def test_a_word_models_check_sends_words_onnx_runtime_can_return():
    """A tagger's and an answer model's check texts, for a tokenizer that reads bytes that are not UTF-8 (cased
    WordPiece): the words come back as strings, which ONNX Runtime's Python binding decodes as UTF-8, so the
    texts whose words they are (a tagger's, an answer model's contexts) are UTF-8; the questions need not be.
    (A fine-tuned SpanBERT tagger's export failed on them.)"""
    from keras_bertology.finetune.onnx_export import AnsweredQuestions, TaggedWords

    family = get_family("spanbert")
    tokenizer = family.train_tokenizer(sentences_of_one_play(), 300)

    def utf8(text):
        return text.decode("utf-8", "replace").encode() == text

    texts = [text for batch in TaggedWords(family, tokenizer, {"labels": ["O"]}).batches(SEQ_LEN)
             for text in batch[onnx_text.TEXT_INPUT]]
    pairs = [pair for batch in AnsweredQuestions(family, tokenizer, {"labels": []}).batches(SEQ_LEN)
             for pair in zip(batch["question"], batch["context"])]
    assert all(map(utf8, texts)) and all(utf8(context) for _, context in pairs)
    assert not all(utf8(question) for question, _ in pairs) and len(pairs) > 20


def _runner_module():
    """onnx_text_run.py read by path, as clients read it (importing the package would import TensorFlow)."""
    spec = importlib.util.spec_from_file_location("onnx_text_run", onnx_text.RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runner_finds_the_extensions_library_without_importing_the_package():
    """The library the package itself names, found in a new process that imports neither onnxruntime_extensions
    nor the transformers its `__init__` imports."""
    script = f"""
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("onnx_text_run", {str(onnx_text.RUNNER)!r})
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
found = runner.extensions_library()
assert "onnxruntime_extensions" not in sys.modules and "transformers" not in sys.modules
import onnxruntime_extensions
assert os.path.samefile(found, onnxruntime_extensions.get_library_path()), found
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_runner_without_the_extensions_names_them_in_one_line(monkeypatch):
    runner = _runner_module()
    monkeypatch.setitem(sys.modules, "onnxruntime_extensions", None)
    with pytest.raises(SystemExit, match="^the string model needs onnxruntime-extensions: pip install"):
        runner.extensions_library()
