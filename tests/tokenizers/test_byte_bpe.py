"""RoBERTa's byte-level BPE in-graph: the same ids as Hugging Face's RobertaTokenizer.

The reference vocabulary is trained here with Hugging Face's `tokenizers` on
two Shakespeare plays (vocab.json + merges.txt, as roberta-base ships them)
and loaded into transformers' RobertaTokenizer; no hub access is needed.
"""

import json
import os
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import transformers

from keras_bertology.tokenizers.byte_bpe import ByteLevelBPETokenizer, byte_symbols
from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.data.packing import pack_text
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.errors import ConfigError
from test_tokenizers import _Exported
from forked_python import run_python

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
HARD_CASES = [
    "", " ", "   ", "\n", "a  b", "a \nb", "x\n\ny", "  leading spaces", "trailing spaces  ", "tab\there",
    "it's they're we've I'm you'll he'd", "'s 't 'S", "x 's", "Numbers 123 4567 and 3.14!", "1,000,000",
    "Café naïve résumé Ærø", "日本語のテキスト", "emoji 😀 here 👍🏽", "multiple   spaces\t\tand\ttabs",
    "end.\n", "Hello, World!!!", "a\u00a0b no-break space", "line\r\nbreak", "under_score-dash/slash",
    "\u3000ideographic space", "mixed123abc", "<b>html</b> tags", "«quotes» and “curly” ones", "\x07bell",
]


@pytest.fixture(scope="module")
def sentences():
    return [s for document in read_corpus(default_corpus_paths()[:3]) for s in document]


@pytest.fixture(scope="module")
def bpe_dir(sentences, tmp_path_factory):
    from tokenizers import ByteLevelBPETokenizer as Trainer

    trainer = Trainer()
    trainer.train_from_iterator(sentences[::2], vocab_size=1500, min_frequency=2, special_tokens=SPECIALS,
                                show_progress=False)
    folder = tmp_path_factory.mktemp("bpe")
    trainer.save_model(str(folder))
    return folder


@pytest.fixture(scope="module")
def reference(bpe_dir):
    from tokenizers import AddedToken

    return transformers.RobertaTokenizer.from_pretrained(
        str(bpe_dir), mask_token=AddedToken("<mask>", lstrip=True, rstrip=False))


@pytest.fixture(scope="module")
def tokenizer(bpe_dir):
    return ByteLevelBPETokenizer.from_files(bpe_dir)


def _ours(tokenizer, texts):
    return tokenizer.tokenize(tf.constant(texts)).to_list()


def test_ids_equal_hugging_face_on_real_and_hard_text(tokenizer, reference, sentences):
    texts = sentences[1::2][:1500] + HARD_CASES  # odd sentences: not seen by the BPE trainer
    expected = [reference(text, add_special_tokens=False)["input_ids"] for text in texts]
    ours = _ours(tokenizer, texts)
    mismatched = [(text, o, e) for text, o, e in zip(texts, ours, expected) if o != e]
    assert not mismatched, mismatched[:3]
    assert len(texts) > 1500


def test_byte_map_is_gpt2s():
    symbols = byte_symbols()
    assert len(set(symbols.values())) == 256
    assert symbols[ord(" ")] == "\u0120" and symbols[ord("\n")] == "\u010a" and symbols[ord("A")] == "A"
    assert symbols[0] == "\u0100" and symbols[255] == "\u00ff"


def test_mask_token_takes_the_spaces_before_it(tokenizer, reference):
    texts = ["Now is the <mask> of our discontent.", "<mask> at the start", "two   <mask> <mask>!",
             "glued<mask>word"]
    packed = pack_text(tokenizer, 24, tf.constant(texts))
    expected = reference(texts, padding="max_length", max_length=24, truncation=True)["input_ids"]
    np.testing.assert_array_equal(packed["token_ids"].numpy(), expected)
    plain = ByteLevelBPETokenizer.from_files(tokenizer_dir := reference.name_or_path, mask_lstrip=False)
    ids = pack_text(plain, 24, tf.constant(texts[:1]))["token_ids"].numpy()[0].tolist()
    space = plain.vocabulary.index("\u0120")
    assert ids[ids.index(plain.mask_id) - 1] == space, tokenizer_dir


def test_detokenize_gives_the_text_back(tokenizer, sentences):
    texts = sentences[:50] + HARD_CASES
    decoded = tokenizer.detokenize(tokenizer.tokenize(tf.constant(texts))).numpy()
    assert [text.decode("utf-8") for text in decoded] == texts


def test_word_starts(tokenizer):
    table = tokenizer.word_start_table
    assert table.shape == (tokenizer.vocab_size,) and table.dtype == bool
    assert all(table[i] == token.startswith("\u0120") for i, token in enumerate(tokenizer.vocabulary)
               if i not in tokenizer.special_ids)
    assert table[tokenizer.special_ids].all()


def test_save_load_tf_data_and_tf_function(tokenizer, sentences, tmp_path):
    tokenizer.save(tmp_path / "saved")
    loaded = load_tokenizer(tmp_path / "saved")
    assert isinstance(loaded, ByteLevelBPETokenizer) and loaded.mask_lstrip
    texts = sentences[:40] + HARD_CASES
    expected = _ours(tokenizer, texts)
    assert _ours(loaded, texts) == expected
    mapped = tf.data.Dataset.from_tensor_slices(texts).batch(16).map(loaded.tokenize)
    assert [row for batch in mapped for row in batch.to_list()] == expected

    @tf.function
    def lengths(strings):
        return loaded.tokenize(strings).row_lengths()

    assert lengths(tf.constant(texts)).numpy().tolist() == [len(row) for row in expected]


@pytest.mark.slow
def test_saved_model_tokenizes_with_only_tensorflow(tokenizer, sentences, tmp_path):
    texts = sentences[:30] + HARD_CASES
    tf.saved_model.save(_Exported(tokenizer), str(tmp_path / "model"))
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # noqa: F401
        texts = tf.constant(json.load(open({str(tmp_path / "texts.json")!r})))
        ids = tf.saved_model.load({str(tmp_path / "model")!r})(texts).to_list()
        assert not [m for m in sys.modules if m.startswith("keras_bertology")]
        print(json.dumps(ids))
    """)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = run_python([sys.executable, "-c", script], env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == _ours(tokenizer, texts)


def _write(folder, vocab=None, merges=None):
    folder.mkdir(exist_ok=True)
    if vocab is not None:
        (folder / "vocab.json").write_text(vocab if isinstance(vocab, str) else json.dumps(vocab))
    if merges is not None:
        (folder / "merges.txt").write_text(merges)
    return folder


@pytest.mark.parametrize(
    "vocab,merges,message",
    [
        (None, "#version: 0.2\n", "not found"),
        ("{not json", "#version: 0.2\n", "not valid JSON"),
        ({"a": 0, "b": 1}, "#version: 0.2\n", "lacks the special tokens"),
        ({**{t: i for i, t in enumerate(SPECIALS)}, "a": 7}, "", "without gaps"),
        ({**{t: i for i, t in enumerate(SPECIALS)}, "a": 5, "b": 6}, "#version: 0.2\na b c\n",
         "line 2 is not a pair"),
        ({**{t: i for i, t in enumerate(SPECIALS)}, "a": 5, "b": 6}, "#version: 0.2\na b\n",
         "'ab', which is not in the vocabulary"),
        ({**{t: i for i, t in enumerate(SPECIALS)}, "a": 5}, None, "merges not found"),
    ],
)
def test_bad_files_are_clear_errors(tmp_path, vocab, merges, message):
    with pytest.raises(ConfigError, match=message):
        ByteLevelBPETokenizer.from_files(_write(tmp_path / "bpe", vocab, merges))
