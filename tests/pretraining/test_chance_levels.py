"""The unigram level a language model's loss is read against counts what it predicts: every next (or previous)
word of a real row, ends of sentences and of texts among them, and for ELMo the words beyond its softmax as the
unknown word. The references below are written from the data stages' docstrings, in NumPy."""

import math

import numpy as np
import pytest

from family_harness import sentences_of_one_play
from keras_bertology.data.recipe import build_instances, tokenize_documents
from keras_bertology.models import FAMILIES
from keras_bertology.models.causal_lm import CLM
from keras_bertology.models.elmo.pretrainer import BACKWARD_LM, FORWARD_LM
from keras_bertology.pretraining.options import PretrainOptions
from keras_bertology.pretraining.report import chance_levels, labelling_stage


def _unigram_loss(targets):
    shares = np.bincount(targets) / len(targets)
    shares = shares[shares > 0]
    return float(-(shares * np.log(shares)).sum())


def _pairs(instances):
    """(token ids, whether position t and t + 1 are both real) of every row."""
    ids, mask = instances["token_ids"], instances["padding_mask"].astype(bool)
    return ids, mask[:, :-1] & mask[:, 1:]


def _run(name, vocab_size, seq_len=32):
    family = FAMILIES[name]
    documents = [sentences_of_one_play(400)[start:start + 20] for start in range(0, 400, 20)]
    tokenizer = family.train_tokenizer([s for document in documents for s in document], vocab_size)
    options = PretrainOptions(model=name, preset=min(family.presets), seq_len=seq_len, batch_size=8,
                              dupe_factor=1, vocab_size=vocab_size)
    instances = build_instances(family, tokenize_documents(documents, tokenizer), tokenizer, options)
    return family, tokenizer, instances, labelling_stage(family, tokenizer, options)


def test_a_causal_lm_is_read_against_every_next_token_end_of_text_included():
    _, tokenizer, instances, stage = _run("gpt", 300)
    levels = chance_levels(instances, tokenizer, [CLM], stage=stage)["clm"]
    ids, follows = _pairs(instances)
    targets = ids[:, 1:][follows]
    assert levels["loss"] == pytest.approx(_unigram_loss(targets), rel=1e-12)
    assert levels["perplexity"] == pytest.approx(math.exp(_unigram_loss(targets)), rel=1e-12)
    end_of_text = tokenizer.optional_id("sep")
    assert end_of_text in targets  # a special the model must predict, so the level counts it


def test_elmo_is_read_against_its_neighbours_with_the_words_beyond_its_softmax_unknown():
    family, tokenizer, instances, stage = _run("elmo", 400)
    ids, follows = _pairs(instances)
    assert (ids >= tokenizer.vocab_size).any()  # the tokenizer spells words the softmax does not hold
    targets = np.where(ids < tokenizer.vocab_size, ids, tokenizer.unk_id)
    levels = chance_levels(instances, tokenizer, [FORWARD_LM, BACKWARD_LM], stage=stage)
    assert levels["forward_lm"]["loss"] == pytest.approx(_unigram_loss(targets[:, 1:][follows]), rel=1e-12)
    assert levels["backward_lm"]["loss"] == pytest.approx(_unigram_loss(targets[:, :-1][follows]), rel=1e-12)
    # Counted over the tokens alone, specials out and the words beyond the softmax as themselves, the bar was
    # easier to pass than the model's real targets make it.
    tokens_alone = chance_levels(instances, tokenizer, [FORWARD_LM])["forward_lm"]
    assert tokens_alone["perplexity"] > levels["forward_lm"]["perplexity"]
