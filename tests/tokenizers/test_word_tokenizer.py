"""The word-level tokenizer: splitting, the predicted and spelled-only words, saving, and bad word lists."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.tokenizers.word import WordTokenizer, split_words, train_word_tokenizer
from keras_bertology.errors import ConfigError

SENTENCES = ["The vase broke.", "Dawn broke over the hills.", "The news broke, and the vase fell.",
             "Rare words\tlike\u00a0zeugma appear once."]


def test_words_split_on_unicode_whitespace_and_punctuation_case_kept():
    words = split_words(tf.constant(["The news broke, \"again\"!", "a\u3000b\x00c"])).to_list()
    assert words == [[b"The", b"news", b"broke", b",", b'"', b"again", b'"', b"!"], [b"a", b"bc"]]


def test_the_most_frequent_words_are_predicted_and_every_word_has_an_id():
    tokenizer = train_word_tokenizer(SENTENCES, vocab_size=8)
    vocabulary = tokenizer.vocabulary
    assert vocabulary[:4] == ["<pad>", "<S>", "</S>", "<UNK>"]
    assert tokenizer.vocab_size == 8 and tokenizer.num_words == len(vocabulary)
    counts = collections.Counter(word.decode() for word in split_words(tf.constant(SENTENCES)).flat_values.numpy())
    assert sorted(vocabulary[4:]) == sorted(counts)  # every word of the text, once
    assert [counts[word] for word in vocabulary[4:]] == sorted(counts.values(), reverse=True)  # most frequent first
    assert set(vocabulary[4:7]) == {"The", ".", "broke"}  # "." 4 times, "broke" 3, "The" the first seen of those twice
    ids = tokenizer.tokenize(tf.constant(["The zeugma broke unseen"])).to_list()[0]
    assert ids[0] == vocabulary.index("The") and ids[2] == vocabulary.index("broke")
    assert ids[1] == vocabulary.index("zeugma") >= tokenizer.vocab_size  # spelled only, not predicted
    assert ids[3] == tokenizer.unk_id
    assert tokenizer.detokenize([ids[:3]]).numpy().tolist() == [b"The zeugma broke"]


def test_saved_and_loaded_it_gives_the_same_ids(tmp_path):
    tokenizer = train_word_tokenizer(SENTENCES, vocab_size=9)
    tokenizer.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    text = tf.constant(SENTENCES + ["never seen words"])
    assert loaded.tokenize(text).to_list() == tokenizer.tokenize(text).to_list()
    assert (loaded.vocab_size, loaded.num_words) == (tokenizer.vocab_size, tokenizer.num_words)
    assert np.all(loaded.word_start_table)


@pytest.mark.parametrize("words, message", [
    (["a", "b"], "begins with"),
    (["<pad>", "<S>", "</S>", "<UNK>"], "only its specials"),
    (["<pad>", "<S>", "</S>", "<UNK>", "a", "a"], "repeats 'a'"),
    (["<pad>", "<S>", "</S>", "<UNK>", "a b"], "with spaces at line 5"),
])
def test_bad_word_lists_are_refused_with_one_line(words, message):
    with pytest.raises(ConfigError, match=message):
        WordTokenizer(words)


def test_a_word_list_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "words.txt"
    path.write_bytes(b"<pad>\n<S>\n</S>\n<UNK>\n\xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        WordTokenizer(path)
