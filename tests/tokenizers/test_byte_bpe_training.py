"""Byte-level BPE training: Hugging Face's ids from the saved files, its trainer's merges, the BPE rule by hand."""

import json

import pytest
import tensorflow as tf

from keras_bertology.tokenizers.byte_bpe import ByteLevelBPETokenizer, byte_symbols
from keras_bertology.tokenizers.byte_bpe_training import train_byte_level_bpe
from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.errors import ConfigError, CorpusError

EOT = "<|endoftext|>"
GPT2_SPECIALS = {"eot": EOT, "cls": EOT, "sep": EOT, "pad": EOT}
VOCAB_SIZE = 1000
ODD_TEXTS = [
    "", " ", "   ", "\n", "\t", " \t\n ", "a  b", "a \nb", "x\n\ny", "  leading spaces", "trailing spaces  ",
    "tabs\tand\t\ttabs", "line\r\nbreak", "Café naïve résumé Ærø Übermaß", "日本語のテキスト 中文", "emoji 😀 👍🏽 here",
    "Numbers 123 4567 and 3.14, 1,000,000!", "it's they're we've I'm you'll he'd", "a\u00a0b \u3000wide space",
    "«quotes» “curly” — dash…", "\x07bell \x7fdel", "mixed123abc under_score-dash/slash",
]


@pytest.fixture(scope="module")
def sentences():
    return [s for document in read_corpus(default_corpus_paths()[:8]) for s in document]


@pytest.fixture(scope="module")
def training(sentences):
    return sentences[::2][:5000]


@pytest.fixture(scope="module")
def held_out(sentences):
    return sentences[1::2][:300] + ODD_TEXTS


@pytest.fixture(scope="module")
def tokenizer(training):
    return train_byte_level_bpe(training, VOCAB_SIZE, GPT2_SPECIALS)


@pytest.fixture(scope="module")
def saved(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("byte_bpe")
    tokenizer.save(folder)
    return folder


def _ids(tokenizer, texts):
    return tokenizer.tokenize(tf.constant(texts)).to_list()


def test_ids_equal_hugging_face_from_the_saved_files(tokenizer, saved, held_out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reference = Tokenizer(models.BPE.from_file(str(saved / "vocab.json"), str(saved / "merges.txt")))
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    reference.decoder = decoders.ByteLevel()
    reference.add_special_tokens([EOT])
    assert reference.encode(f"a{EOT}b").ids == [*_ids(tokenizer, ["a"])[0], 0, *_ids(tokenizer, ["b"])[0]]
    expected = [encoding.ids for encoding in reference.encode_batch(held_out)]
    ours = _ids(tokenizer, held_out)
    mismatched = [(text, o, e) for text, o, e in zip(held_out, ours, expected) if o != e]
    assert not mismatched, mismatched[:3]
    assert sum(map(len, ours)) > 3000


def test_merges_equal_hugging_faces_trainer(tokenizer, training):
    """Same pre-tokens, counts, merge rule and tie-break: the same merges, down to the last tie."""
    from tokenizers import ByteLevelBPETokenizer as Trainer

    trainer = Trainer()
    trainer.train_from_iterator(training, vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[EOT],
                                show_progress=False)
    merges = [tuple(merge) for merge in json.loads(trainer.to_str())["model"]["merges"]]
    assert tokenizer._merges == merges
    assert sorted(tokenizer.vocabulary) == sorted(trainer.get_vocab())


def test_merge_order_by_hand():
    """Sennrich's example counted by hand, with "aaaaa" (twice) and "xy" (once).

    es 9 and st 9 tie: e < s, so es, then est 9. a+a 8 (4 a-a pairs a word), merged left to right
    without overlap: "aa aa a". lo 7, low 7. Then ew, n+ew, new+est (6), d+est, i+dest, w+idest (3).
    The 2s tie: e+r, aa+a, aa+aa, low+e. Older tokens win, bytes first: e+r, then aa+a (a is older than
    aa), which leaves aa+aaa, then low+er. xy needs min_frequency 1.
    """
    corpus = ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3 + ["aaaaa"] * 2 + ["xy"]
    expected = [("e", "s"), ("es", "t"), ("a", "a"), ("l", "o"), ("lo", "w"), ("e", "w"), ("n", "ew"),
                ("new", "est"), ("d", "est"), ("i", "dest"), ("w", "idest"), ("e", "r"), ("aa", "a"),
                ("aa", "aaa"), ("low", "er")]
    trained = train_byte_level_bpe(corpus, 300, GPT2_SPECIALS)
    assert trained._merges == expected
    assert train_byte_level_bpe(corpus, 300, GPT2_SPECIALS, min_frequency=1)._merges == [*expected, ("x", "y")]
    assert train_byte_level_bpe(corpus, 259, GPT2_SPECIALS)._merges == expected[:2]
    words = ["lower", "newest", "widest", "aaaaa", "aaaa", "xy"]
    assert [[trained.vocabulary[i] for i in row] for row in _ids(trained, words)] == [
        ["lower"], ["newest"], ["widest"], ["aaaaa"], ["aa", "aa"], ["x", "y"]]


def test_detokenize_gives_the_text_back(tokenizer, held_out):
    decoded = tokenizer.detokenize(tokenizer.tokenize(tf.constant(held_out))).numpy()
    assert [text.decode("utf-8") for text in decoded] == held_out


def test_save_and_load(tokenizer, saved, held_out):
    loaded = load_tokenizer(saved)
    assert isinstance(loaded, ByteLevelBPETokenizer)
    assert loaded.special_tokens == GPT2_SPECIALS and (loaded.eot_id, loaded.pad_id) == (0, 0)
    assert not loaded.has_role("mask")
    assert _ids(loaded, held_out) == _ids(tokenizer, held_out)


def test_training_is_deterministic(tokenizer, training):
    """Sentence order does not matter either: only counts and the tie-break decide."""
    again = train_byte_level_bpe(training[::-1], VOCAB_SIZE, GPT2_SPECIALS)
    assert again.vocabulary == tokenizer.vocabulary and again._merges == tokenizer._merges


def test_vocabulary_layout(tokenizer):
    symbols = byte_symbols()
    assert tokenizer.vocab_size == VOCAB_SIZE and len(tokenizer._merges) == VOCAB_SIZE - 257
    assert tokenizer.vocabulary[:257] == [EOT, *(symbols[byte] for byte in range(256))]
    assert tokenizer.special_ids == [0]
    roberta = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}
    small = train_byte_level_bpe(["low lower lowest"] * 3, 270, roberta)
    assert small.vocabulary[:5] == list(roberta.values())
    assert (small.cls_id, small.pad_id, small.sep_id, small.unk_id, small.mask_id) == (0, 1, 2, 3, 4)
    assert small.vocabulary[5:261] == [symbols[byte] for byte in range(256)]


def test_bad_input_is_a_clear_error():
    with pytest.raises(ConfigError, match="vocab_size must be at least 257 .*got 256"):
        train_byte_level_bpe(["some text"], 256, GPT2_SPECIALS)
    with pytest.raises(ConfigError, match="vocab_size must be at least 261 "):
        train_byte_level_bpe(["some text"], 260, {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>",
                                                  "mask": "<mask>"})
    with pytest.raises(ConfigError, match="must not be empty strings"):
        train_byte_level_bpe(["some text"], 500, {"eot": EOT, "pad": ""})
    for empty in ([], ["", ""], iter([])):
        with pytest.raises(CorpusError, match="needs text, but the sentences are all empty"):
            train_byte_level_bpe(empty, 500, GPT2_SPECIALS)
    with pytest.raises(CorpusError, match="not one string"):
        train_byte_level_bpe("one long string", 500, GPT2_SPECIALS)
