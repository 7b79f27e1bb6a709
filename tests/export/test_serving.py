"""Exported SavedModels as a server sees them: `saved_model_cli show` and `run`, pre-tokenized ids, odd input."""

import json
import re

import numpy as np
import pytest
import tensorflow as tf
import transformers

from bare_serving import saved_model_cli
from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.export import export_saved_model
from keras_bertology.models.registry import get_family
from keras_bertology.runs import RunModel

SEQ_LEN = 16


@pytest.fixture(scope="module")
def sentences():
    return [s for document in read_corpus([str(default_corpus_paths()[0])]) for s in document]


@pytest.fixture(scope="module")
def tokenizer(sentences):
    return get_family("bert").train_tokenizer(sentences[:2000], 300)


@pytest.fixture(scope="module")
def export(tmp_path_factory, tokenizer):
    """A BERT-Tiny export (random weights, a vocabulary trained on one play) and the model behind it."""
    family = get_family("bert")
    backbone = family.backbone_cls(**family.backbone_config("bert-tiny", vocab_size=tokenizer.vocab_size))
    pretrainer = family.build_pretrainer(backbone, None, "bert-tiny")
    path = tmp_path_factory.mktemp("serving") / "export"
    export_saved_model(RunModel("bert", backbone, tokenizer, SEQ_LEN, pretrainer, "bert-tiny"), path)
    return path, backbone


@pytest.fixture(scope="module")
def served(export):
    """The export, loaded once for the tests that call it here."""
    return tf.saved_model.load(str(export[0]))


@pytest.mark.slow
def test_saved_model_cli_shows_every_named_signature(export):
    path, _ = export
    shown = saved_model_cli("show", "--dir", str(path), "--all")
    for signature in ("serving_default", "serve", "serve_pairs", "serve_ids", "fill_mask", "fill_mask_top_k",
                      "mlm_logits"):
        assert f"signature_def['{signature}']" in shown
    ids_part = shown.split("signature_def['serve_ids']")[1].split("signature_def[")[0]
    for name in ("token_ids", "segment_ids", "padding_mask"):
        assert f"inputs['{name}'] tensor_info:" in ids_part
    assert "shape: (-1, -1)" in ids_part  # any batch, up to SEQ_LEN tokens
    assets = json.loads((path / "assets" / "bertology.json").read_text())
    assert "serve_ids" in assets["signatures"]


@pytest.mark.slow
def test_saved_model_cli_runs_raw_strings_and_ids_like_the_model(export, served, tmp_path):
    path, backbone = export
    texts = ["Now is the winter of our discontent.", ""]
    expected = served.serve(tf.constant(texts))
    saved_model_cli("run", "--dir", str(path), "--tag_set", "serve", "--signature_def", "serve",
         "--input_exprs", f"text={texts!r}", "--outdir", str(tmp_path / "strings"))
    np.testing.assert_allclose(np.load(tmp_path / "strings" / "sequence_output.npy"),
                               expected["sequence_output"].numpy(), atol=1e-6)

    ids = {name: expected[name].numpy().astype(np.int32) for name in ("token_ids", "segment_ids", "padding_mask")}
    for name, value in ids.items():
        np.save(tmp_path / f"{name}.npy", value)
    files = ";".join(f"{name}={tmp_path / name}.npy" for name in ids)
    saved_model_cli("run", "--dir", str(path), "--tag_set", "serve", "--signature_def", "serve_ids",
         "--inputs", files, "--outdir", str(tmp_path / "ids"))
    keras_outputs = backbone(ids, training=False)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(np.load(tmp_path / "ids" / f"{name}.npy"), np.asarray(keras_outputs[name]),
                                   atol=1e-6, err_msg=name)
        np.testing.assert_allclose(served.signatures["serve_ids"](**ids)[name].numpy(), expected[name].numpy(), atol=1e-6)


def test_odd_strings_are_served_with_defined_results(served):
    """Empty strings, invalid UTF-8, text far longer than the model and mixed lengths in one batch."""
    long_text = "words and more words " * 2000
    batch = tf.constant([b"", b"caf\xc3\xa9 \xff\xfe broken bytes", long_text.encode(), b"short"])
    out = served.serve(batch)
    assert out["sequence_output"].shape[:2] == (4, SEQ_LEN)
    assert np.isfinite(out["sequence_output"].numpy()).all()
    mask = out["padding_mask"].numpy()
    assert mask[0].sum() == 2  # [CLS] [SEP]: an empty string is a sequence of specials only
    assert mask[1].sum() > 2  # bytes that are not UTF-8 are not refused (per kind: test_tokenizers.py)
    assert mask[2].sum() == SEQ_LEN  # truncated to the model's length
    alone = served.serve(tf.constant([b"short"]))["sequence_output"].numpy()[0]  # padded to its own length
    np.testing.assert_allclose(out["sequence_output"].numpy()[3, :len(alone)], alone, atol=1e-5)
    with pytest.raises((ValueError, TypeError, tf.errors.InvalidArgumentError)):
        served.serve(tf.constant([[b"a", b"b"]]))  # a matrix of strings is not a batch of texts


@pytest.mark.parametrize("name, value, allowed", [
    ("token_ids", -1, "in [0, {V})"), ("token_ids", "V", "in [0, {V})"),
    ("segment_ids", -1, "in [0, 2)"), ("segment_ids", 2, "in [0, 2)"), ("padding_mask", 2, "0 or 1")])
def test_serve_ids_refuses_ids_outside_their_tables(export, served, name, value, allowed):
    """An embedding lookup would wrap -1 round to the last row; the signature names the input and its range."""
    path, _ = export
    serve_ids = served.signatures["serve_ids"]
    vocab_size = json.loads((path / "assets" / "bertology.json").read_text())["vocab_size"]
    value, allowed = (vocab_size if value == "V" else value), allowed.format(V=vocab_size)
    ids = {"token_ids": np.full((2, SEQ_LEN), 5, np.int32), "segment_ids": np.zeros((2, SEQ_LEN), np.int32),
           "padding_mask": np.ones((2, SEQ_LEN), np.int32)}
    assert np.isfinite(serve_ids(**ids)["sequence_output"].numpy()).all()
    ids[name][1, 3] = value
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(f"every {name} value must be {allowed}")):
        serve_ids(**ids)


def test_strings_are_cut_to_the_token_budget_before_tokenizing(export, served, tokenizer, sentences):
    """Tokens of normal and of long texts are those of the whole text; past `max_text_chars` nothing is read."""
    path, _ = export
    max_chars = json.loads((path / "assets" / "bertology.json").read_text())["max_text_chars"]
    play = " ".join(sentences)
    texts = sentences[:3] + ["", play[:max_chars + 7], play[:100_000], "\u00e9" * (max_chars + 50)]
    family = get_family("bert")
    whole = family.pack_text(tokenizer, SEQ_LEN, tf.constant(texts))
    np.testing.assert_array_equal(served.serve(tf.constant(texts))["token_ids"].numpy(), whole["token_ids"].numpy())
    shorter = [text for text in texts if len(text) < 10_000]  # eager pair trimming is slow on 100 KB
    firsts, seconds = tf.constant(shorter), tf.constant(shorter[::-1])
    np.testing.assert_array_equal(served.serve_pairs(firsts, seconds)["token_ids"].numpy(),
                                  family.pack_text(tokenizer, SEQ_LEN, firsts, seconds)["token_ids"].numpy())
    past_the_bound = served.serve(tf.constant([" " * max_chars + "word"]))
    assert past_the_bound["padding_mask"].numpy().sum() == 2  # [CLS] [SEP]: "word" was never tokenized


def test_a_word_past_the_bound_is_read_as_transformers_reads_it_with_the_words_after_it(served, tokenizer,
                                                                                         tmp_path):
    """One unbroken word (a URL's path, a hash, base64) longer than `max_text_chars` (256) is one [UNK], as
    transformers' WordPiece reads it, and the words after it are read: each word is cut, not the text."""
    texts = ["The king " + "x" * 2100 + " loved the queen.", "see ab/" + "c" * 300 + "/d " + "9" * 900 + " then"]
    (tmp_path / "vocab.txt").write_text("".join(token + "\n" for token in tokenizer.vocabulary), encoding="utf-8")
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    out = served.serve(tf.constant(texts))
    for row, text in enumerate(texts):
        ids = out["token_ids"].numpy()[row][out["padding_mask"].numpy()[row] == 1].tolist()
        assert ids == hf(text, truncation=True, max_length=SEQ_LEN)["input_ids"]
    assert hf.convert_ids_to_tokens(ids[:2]) == ["[CLS]", "see"] and ids[-2] != tokenizer.unk_id  # "then"


@pytest.mark.parametrize("keep_end", [False, True])
def test_the_cut_keeps_whole_words_at_the_start_or_the_end_each_word_cut_first(keep_end):
    """A text past the bound (256 characters at 16 tokens) keeps its first or (a causal LM's prompt) its last
    characters, less the word the cut splits; a word over 101 characters is cut first, so the words after
    it stay within the bound."""
    from keras_bertology.export.saved_model import cut_text

    def expected(text):
        text = re.sub(r"\w{102,}", lambda word: word.group()[:101], text)
        if len(text) <= 256:
            return text
        kept, beside = (text[-256:], text[-257]) if keep_end else (text[:256], text[256])
        if beside.isspace() or kept[-1 if not keep_end else 0].isspace():  # the cut splits no word
            return kept
        return re.sub(r"^\S+", "", kept) if keep_end else re.sub(r"\s\S*$", "", kept)

    texts = ["alpha " + "beta " * 60 + "omega", "alpha " + "beta " * 60 + "omegas", "gamma " * 60 + "delta",
             "first " + "y" * 500 + " middle " + "z" * 300 + " last words", "short one", "",
             "a NUL\x00 byte " + "y" * 150 + "\x00and after it"]  # NUL: regex_split stops at one
    cut = [value.decode() for value in cut_text(tf.constant(texts), SEQ_LEN, keep_end).numpy()]
    assert cut == [expected(text) for text in texts]
    assert cut[3].endswith("z" * 101 + " last words") and cut[3].startswith("first " + "y" * 101 + " middle")
