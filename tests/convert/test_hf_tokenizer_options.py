"""`convert` honours every BERT tokenizer option the way transformers 5 reads it, or refuses it in one line.

A BERT tokenizer class rebuilds its normaliser from tokenizer_config.json;
the generic class runs tokenizer.json's normalizer as written (the only way
to turn clean_text off). For each combination of options, the converted
in-graph tokenizer must give transformers' ids on multilingual text.
"""

import itertools
import json
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
import transformers

from keras_bertology.cli import main
from keras_bertology.convert.hf_tokenizer import load_hf_tokenizer
from keras_bertology.tokenizers.sentencepiece import train_sentencepiece
from keras_bertology.tokenizers.wordpiece import WORDPIECE_SPECIAL_TOKENS
from keras_bertology.errors import CheckpointError, ConfigError

SENTENCES = [
    "Résumé au café: naïve Ünïcödé, déjà vu, İstanbul, ÀÉÎÕÜ x\u0301y.",
    "中文字符 日本語 한국어 mixed中文text 𠀀 Ελληνικά Русский",
    "emoji 😀 👍🏽 text ＡＢＣ ﬁ ½ 𝔘𝔫𝔦",
    "control\x00char \ufffd repl \x7f del \x1b esc \x85 nel a\x01b\u200bc soft\u00adhyphen",
    "tabs\tand\nnewlines\r\nand\u00a0nbsp\u3000ideographic\u2009thin  spaces",
    "Punctuation: «guillemets» „low“ ¿Qué? ¡Hola! it's 3.14 $100 a_b #hash",
]
# Whole words whose accented, cased and CJK forms differ, so that every option changes some ids.
WORDS = ["résumé", "resume", "Résumé", "Resume", "café", "cafe", "Café", "naïve", "naive", "中文字符", "中文",
         "##文", "日本語", "control", "char", "ab", "abc", "istanbul", "İstanbul", "text", "mixed", "##text"]
OPTIONS = list(itertools.product([True, False], [None, True, False], [True, False]))  # lower, strip, CJK


def _vocab():
    """Specials, the words, and every character of the sentences (as written, lower-cased, NFD) alone and
    after ##: whatever the options leave, WordPiece can spell it."""
    text = "".join(SENTENCES)
    chars = set(text) | set(text.lower()) | set(unicodedata.normalize("NFD", text))
    chars = sorted(c for c in chars if unicodedata.category(c)[0] not in "CZ")
    tokens = list(WORDPIECE_SPECIAL_TOKENS) + WORDS + chars + ["##" + c for c in chars]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


@pytest.fixture(scope="module")
def vocab():
    return _vocab()


def _ours(folder, vocab):
    """The converted tokenizer's ids, its graph run eagerly: tracing `tokenize` costs 0.3 s a tokenizer, and
    the traced graph is checked by the save/load and export tests."""
    tokenizer = load_hf_tokenizer(folder, len(vocab))
    return tokenizer._tokenize(tf.constant(SENTENCES)).to_list()


def _hf_ids(tokenizer):
    return tokenizer(SENTENCES, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("lower,strip,chinese", OPTIONS)
def test_tokenizer_config_options_match_transformers(tmp_path, vocab, lower, strip, chinese):
    """BertTokenizer's options, saved by transformers (tokenizer.json + tokenizer_config.json) and reloaded."""
    made = transformers.BertTokenizer(vocab=dict(vocab), do_lower_case=lower, strip_accents=strip,
                                      tokenize_chinese_chars=chinese)
    made.save_pretrained(str(tmp_path))
    expected = _hf_ids(transformers.AutoTokenizer.from_pretrained(str(tmp_path)))
    assert expected == _hf_ids(made)
    assert _ours(tmp_path, vocab) == expected


@pytest.mark.parametrize("lower,strip,chinese", OPTIONS)
@pytest.mark.parametrize("clean", [True, False])
def test_tokenizer_json_normalizer_options_match_transformers(tmp_path, vocab, lower, strip, chinese, clean):
    """The generic tokenizer class runs tokenizer.json's BertNormalizer, clean_text included, even beside a
    vocab.txt (which older transformers saved too, and which it then leaves unread)."""
    transformers.BertTokenizer(vocab=dict(vocab)).save_pretrained(str(tmp_path))
    (tmp_path / "vocab.txt").write_text("".join(f"{token}\n" for token in vocab), encoding="utf-8")
    spec = json.loads((tmp_path / "tokenizer.json").read_text())
    spec["normalizer"].update(lowercase=lower, strip_accents=strip, handle_chinese_chars=chinese, clean_text=clean)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(config, tokenizer_class="TokenizersBackend")))
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert json.loads(reference.backend_tokenizer.to_str())["normalizer"] == spec["normalizer"]
    assert _ours(tmp_path, vocab) == _hf_ids(reference)


def test_options_survive_save_and_load(tmp_path, vocab):
    """The run folder keeps the options: a reloaded tokenizer gives the same ids."""
    from keras_bertology.tokenizers.saved import load_tokenizer

    transformers.BertTokenizer(vocab=dict(vocab), strip_accents=False, tokenize_chinese_chars=False) \
        .save_pretrained(str(tmp_path / "hf"))
    ours = load_hf_tokenizer(tmp_path / "hf", len(vocab))
    ours.save(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    assert again.tokenize(tf.constant(SENTENCES)).to_list() == ours.tokenize(tf.constant(SENTENCES)).to_list()


def test_exported_uncased_accented_model_serves_transformers_ids(tmp_path, capsys, vocab):
    """Issue 43: do_lower_case=True, strip_accents=False keeps "résumé" apart from "resume" once exported."""
    hf_dir, seq_len = tmp_path / "hf", 48
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=24, max_position_embeddings=seq_len)
    transformers.BertForMaskedLM(config).save_pretrained(str(hf_dir))
    tokenizer = transformers.BertTokenizer(vocab=dict(vocab), do_lower_case=True, strip_accents=False)
    tokenizer.save_pretrained(str(hf_dir))
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")]) == 0
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "export")]) == 0
    capsys.readouterr()
    served = tf.saved_model.load(str(tmp_path / "export"))
    texts = ["Résumé au café", "resume au cafe"] + SENTENCES
    expected = tokenizer(texts, padding="max_length", max_length=seq_len, truncation=True)["input_ids"]
    ids = served.serve(tf.constant(texts))["token_ids"].numpy()
    np.testing.assert_array_equal(ids, np.array(expected))
    assert vocab["résumé"] in ids[0] and vocab["resume"] in ids[1]


def _folder(tmp_path, vocab, config=None, spec=None):
    """A transformers-saved BERT tokenizer folder with tokenizer_config.json / tokenizer.json entries changed."""
    transformers.BertTokenizer(vocab=dict(vocab)).save_pretrained(str(tmp_path))
    for name, changes in (("tokenizer_config.json", config), ("tokenizer.json", spec)):
        data = json.loads((tmp_path / name).read_text())
        (tmp_path / name).write_text(json.dumps(dict(data, **(changes or {}))))
    return tmp_path


GENERIC = {"tokenizer_class": "TokenizersBackend"}
REFUSED = [
    ({"unk_token": "<unk>"}, None, "tokenizer_config.json's unk_token '<unk>' is not supported: only BERT's '[UNK]'"),
    ({"mask_token": {"content": "<mask>"}}, None, "mask_token '<mask>' is not supported"),
    ({"do_lower_case": "yes"}, None, "tokenizer_config.json has do_lower_case 'yes'; it must be true or false"),
    (GENERIC, {"normalizer": {"type": "NFKC"}},
     "tokenizer.json's normalizer 'NFKC' is not supported: only BertNormalizer"),
    (GENERIC, {"pre_tokenizer": {"type": "Whitespace"}}, "pre_tokenizer 'Whitespace' is not supported"),
    (GENERIC, {"normalizer": {"type": "BertNormalizer", "clean_text": None}},
     "tokenizer.json's normalizer has clean_text None; it must be true or false"),
]


@pytest.mark.parametrize("config,spec,message", REFUSED, ids=[case[2][:40] for case in REFUSED])
def test_options_that_cannot_be_honoured_are_refused(tmp_path, vocab, config, spec, message):
    with pytest.raises(CheckpointError, match="^the tokenizer in .* cannot be read: ") as error:
        load_hf_tokenizer(_folder(tmp_path, vocab, config, spec), len(vocab))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_tokenizer_json_of_special_tokens_only_is_refused_in_one_line(tmp_path, capsys):
    """transformers' BertTokenizer() without a vocabulary saves just the specials: every word would be [UNK]."""
    config = transformers.BertConfig(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=24, max_position_embeddings=16)
    transformers.BertModel(config).save_pretrained(str(tmp_path / "hf"))
    transformers.BertTokenizer().save_pretrained(str(tmp_path / "hf"))
    capsys.readouterr()
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds only the special tokens" in err[0], err
    assert not (tmp_path / "run").exists()


def test_sentencepiece_training_errors_name_the_flag():
    """SentencePiece's internal checks, in either direction, become the --vocab-size to pass."""
    text = ["It was a dark night. The wind blew hard."] * 20
    with pytest.raises(ConfigError, match=r"^SentencePiece training failed: this corpus gives at most (\d+) "
                                          r"pieces, not 8000; pass --vocab-size \1 or less\.$"):
        train_sentencepiece(text, 8000)
    ideographs = ["".join(chr(0x4E00 + 7 * i + j) for j in range(7)) for i in range(60)]
    with pytest.raises(ConfigError, match=r"^SentencePiece training failed: this corpus needs at least (\d+) "
                                          r"pieces for its characters, not 200; pass --vocab-size \1 or more\.$"):
        train_sentencepiece(ideographs, 200)


@pytest.mark.parametrize("file,tokenizer_class,specials", [
    ("spm.model", "DebertaV2Tokenizer", {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "unk": "<unk>"}),
    ("spiece.model", "AlbertTokenizer", {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                                         "mask": "[MASK]"})])
def test_configured_specials_a_sentencepiece_model_lacks_join_it_as_transformers_adds_them(tmp_path, file,
                                                                                        tokenizer_class, specials):
    """tokenizer_config.json names [UNK] (and DeBERTa's default [MASK]) over a model whose unknown piece is
    <unk>: each joins after the model's pieces in transformers' order, and text reads to transformers' ids,
    unknown characters to <unk>."""
    texts = ["Now is the winter of our discontent.", "東京 and ☃ are outside the vocabulary"]
    trained = train_sentencepiece([text.lower() for text in SENTENCES[-1:] + texts] * 30, 50, model_type="unigram",
                                  byte_fallback=False, special_tokens=specials)
    (tmp_path / file).write_bytes(trained.model_proto)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer_class,
                                                                "unk_token": "[UNK]"}))
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    ours = load_hf_tokenizer(tmp_path, model_vocab_size=len(theirs))
    assert ours.vocab_size == len(theirs) > trained.vocab_size
    assert [ours.unk_id, ours.mask_id] == theirs.convert_tokens_to_ids(["[UNK]", "[MASK]"])
    assert ours.tokenize(tf.constant(texts)).to_list() == theirs(texts, add_special_tokens=False)["input_ids"]
