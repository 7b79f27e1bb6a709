"""One vocabulary read by every family that takes one: the same pieces and ids for the same text, case kept, each
family's special roles where its data and layouts look for them, and runs that train on it."""

import numpy as np
import pytest
import tensorflow as tf

from family_harness import sentences_of_one_play, smallest_preset
from keras_bertology.models import FAMILIES
from keras_bertology.tokenizers.saved import describe_saved_tokenizer, load_tokenizer
from keras_bertology.tokenizers.shared_vocabulary import train_shared_vocabulary

TEXTS = ["Now is the winter of our discontent, made glorious summer by this son of York.",
         "LONDON: Élodie's café reopened; naïve critics were wrong.", "🙂 东京 x", ""]
TAKERS = sorted(name for name, family in FAMILIES.items() if family.shared_tokenizer_path)


@pytest.fixture(scope="module")
def shared():
    return train_shared_vocabulary(sentences_of_one_play(3000), 1200)


def test_every_family_but_elmo_takes_the_shared_vocabulary():
    assert set(FAMILIES) - set(TAKERS) == {"elmo"}  # its words, spelled in characters, are its recipe


def test_every_family_splits_text_into_the_same_pieces_and_ids(shared, tmp_path):
    expected = shared.tokenize(tf.constant(TEXTS)).to_list()
    assert expected[-1] == [] and all(expected[:-1])
    records = set()
    for name in TAKERS:
        tokenizer = FAMILIES[name].tokenizer_over(shared)
        assert tokenizer.tokenize(tf.constant(TEXTS)).to_list() == expected, name
        tokenizer.save(tmp_path / name)  # and as a run keeps it
        assert load_tokenizer(tmp_path / name).tokenize(tf.constant(TEXTS)).to_list() == expected, name
        records.add(tuple(sorted(describe_saved_tokenizer(tmp_path / name).items())))
    (record,) = records  # one vocabulary, whatever specials each family reads it with
    assert dict(record)["lower_case"] is False and dict(record)["type"] == "sentencepiece"


def test_the_shared_vocabulary_keeps_case_and_every_character(shared):
    upper, lower, emoji = shared.tokenize(tf.constant(["London", "london", "🙂"])).to_list()
    assert upper != lower
    assert shared.unk_id not in emoji  # byte fallback: an unseen character is its bytes


def test_each_family_finds_its_special_roles(shared):
    gpt, t5, bert = (FAMILIES[name].tokenizer_over(shared) for name in ("gpt", "t5", "bert"))
    assert gpt.eot_id == gpt.sep_id == gpt.cls_id != gpt.pad_id  # GPT's one end-of-text token, padding apart
    assert t5.optional_id("cls") is None and t5.sentinels == 100 and t5.vocab_size == shared.vocab_size + 100
    assert t5.vocabulary[-1] == "<extra_id_0>" and t5.vocabulary[:shared.vocab_size] == shared.vocabulary
    assert len({bert.cls_id, bert.sep_id, bert.pad_id, bert.mask_id, bert.unk_id}) == 5
    assert np.array_equal(bert.word_start_table, shared.word_start_table)


# GPT's end-of-text roles, T5's sentinels, XLNet's layout with <cls> last: each a way of reading the vocabulary that
# the others do not share. The encoders read it as BERT's data does (`make test-all`); DistilBERT reads its
# teacher's vocabulary, whichever it is.
@pytest.mark.parametrize("name", [name if name in ("gpt", "t5", "xlnet") else
                                  pytest.param(name, marks=pytest.mark.extended)
                                  for name in TAKERS if name != "distilbert"])
def test_a_run_trains_on_the_shared_vocabulary(shared, name, tmp_path):
    from keras_bertology.data.corpus import default_corpus_paths
    from keras_bertology.pretraining.options import PretrainOptions
    from keras_bertology.pretraining.pretrain import pretrain

    family = FAMILIES[name]
    family.tokenizer_over(shared).save(tmp_path / "run" / "tokenizer")  # as the study seeds a run folder
    metrics = pretrain(PretrainOptions(model=name, preset=smallest_preset(family), corpus=[str(path) for path in default_corpus_paths()[:2]],
                                       steps=2, log_every=1, batch_size=4, seq_len=32, out=str(tmp_path / "run"),
                                       resume=True, no_export=True, verbose=0))
    assert all(np.isfinite(record["loss"]) for record in metrics["history"])
    assert load_tokenizer(tmp_path / "run" / "tokenizer").vocabulary == family.tokenizer_over(shared).vocabulary
