"""ERNIE's knowledge masking: units marked in raw text, carried to the tokens, and masked whole.

The statistics run on one large batch of synthetic instances whose phrases and entities are known, drawn
once per module, against an independent NumPy implementation of the selection rule (units in random
order, taken while their pieces fit the budget), at 5 standard errors.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.knowledge_units import (
    ENTITY, PHRASE, UnitMarker, capitalised_names, collocations, learn_marker, level_boundaries, marked_chunks,
    parse_units)
from keras_bertology.data.masking import DynamicMasker, MaskingConfig
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.data.recipe import tokenize_documents
from keras_bertology.data.unit_stages import UNIT_JOINS, UnitStage, split_unit_joins
from keras_bertology.errors import ConfigError

PAD, CLS, SEP, MASK, UNK = 0, 1, 2, 3, 4
VOCAB, FIRST_CONTINUATION = 100, 60  # ids 5..59 start words, 60..99 continue them
ROWS, LENGTH, SLOTS = 6000, 96, 16
Z = 5.0


# ---- marking raw text ----------------------------------------------------------------------------------

def test_collocations_are_the_pairs_whose_normalised_pmi_passes_and_never_cross_punctuation():
    rng = np.random.default_rng(0)
    filler = [f"w{i}" for i in range(200)]
    sentences = []
    for _ in range(2000):
        words = list(rng.choice(filler, 8))
        if rng.random() < 0.05:
            words[3:5] = ["ice", "cream"]
        if rng.random() < 0.05:
            words[5:7] = ["hot,", "dog"]  # always apart by a comma: never a phrase
        sentences.append(" ".join(words))
    found = collocations(sentences)
    assert ("ice", "cream") in found and ("hot", "dog") not in found
    assert not any(a.startswith("w") and b.startswith("w") for a, b in found)  # independent filler words
    # The statistic itself: a pair seen only together scores 1, independent words about 0.
    assert collocations(["a b"] * 5 + ["c d"] * 5, min_count=5, min_npmi=0.99) == {("a", "b"), ("c", "d")}


def test_names_are_words_capitalised_after_a_sentence_start_and_entities_are_titles_then_names():
    sentences = (["then came Falstaff home"] * 3 + ["and Sir John Falstaff spoke, And Henry wept"] * 3
                 + ["Sir said no", "yes sir, and so it goes", "I think I am"] + ["Yesterday it rained"] * 3)
    names = capitalised_names(sentences)
    # "Sir" and "And" also appear in lower case; never "I"; a sentence's first word does not vote.
    assert names == {"falstaff", "john", "henry"}
    marker = UnitMarker(frozenset(), None, names)
    assert marker.mark("and Sir John Falstaff spoke, And Henry wept") == [0, 0, ENTITY, ENTITY, 0, 0, ENTITY, 0]
    assert marker.mark("Sir John spoke") == [0, 0, 0]  # at a sentence's start only names begin an entity
    assert marker.mark("John Falstaff, Henry") == [0, ENTITY, 0]  # a comma ends an entity
    assert marker.mark("with John and Henry") == [0, 0, 0, 0]  # one name alone is a word


def test_gazetteers_match_with_case_phrase_lists_without_and_entities_come_first(tmp_path):
    (tmp_path / "phrases.txt").write_text("# kitchen\nice cream\nnew york city\nyork city\n")
    (tmp_path / "entities.txt").write_text("New York\n\nSan Francisco Bay\n")
    marker = learn_marker(["any text"], tmp_path / "phrases.txt", tmp_path / "entities.txt")
    assert marker.mark('ICE Cream in "New York" and new york city') == [0, PHRASE, 0, 0, ENTITY, 0, 0, PHRASE,
                                                                         PHRASE]
    # The entity takes "New York"; the phrase list cannot then take "York City".
    assert marker.mark("New York City") == [0, ENTITY, 0]
    assert marker.mark("San Francisco Bay area") == [0, ENTITY, ENTITY, 0]
    assert UnitMarker.from_json(marker.to_json()) == marker


@pytest.mark.parametrize("content, message", [
    (None, "is not a file"), ("\n# nothing\n", "has no entry"), ("one\nword\n", "has no entry"),
    (b"caf\xe9 au lait\n", "not UTF-8")])
def test_bad_lists_are_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "list.txt"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError, match=message):
        learn_marker(["a b"], gazetteer_file=path)


def test_chunks_split_at_units_and_give_the_words_back():
    sentence = "we ate ice cream in New York. today"
    joins = [0, 0, 0, PHRASE, 0, 0, ENTITY, 0]
    chunks = marked_chunks(sentence, joins)
    assert chunks == [("we ate", 0), ("ice cream", PHRASE), ("in", 0), ("New York.", ENTITY), ("today", 0)]
    assert " ".join(text for text, _ in chunks) == " ".join(sentence.split())


@pytest.fixture(scope="module")
def tokenizers():
    from keras_bertology.data.corpus import read_corpus
    from keras_bertology.models.registry import get_family

    text = [sentence for document in read_corpus(None) for sentence in document][:3000]
    return {name: get_family(name).train_tokenizer(text, 400) for name in ("bert", "roberta", "albert")}


@pytest.mark.parametrize("family", ["bert", "roberta", "albert"])
def test_marked_tokens_are_the_sentences_tokens_and_every_token_after_a_units_first_carries_its_code(
        tokenizers, family):
    tokenizer = tokenizers[family]
    marker = UnitMarker(frozenset({("ice", "cream")}), frozenset({("New", "York", "City")}))
    sentence = "the quick brown fox ate ice cream in New York City, and"
    [[plain]] = tokenize_documents([[sentence]], tokenizer)
    report = {}
    [[coded]] = tokenize_documents([[sentence]], tokenizer, marker, report)
    assert report == {"marked": 1, "unaligned": 0}
    instances = split_unit_joins({"token_ids": coded[None]}, tokenizer.vocab_size)
    np.testing.assert_array_equal(instances["token_ids"][0], plain)
    expected = []
    for text, code in marked_chunks(sentence, marker.mark(sentence)):
        [[piece]] = tokenize_documents([[(" " if expected else "") + text]], tokenizer)
        expected.extend([0] + [code] * (len(piece) - 1))
    np.testing.assert_array_equal(instances[UNIT_JOINS][0], expected)
    assert {PHRASE, ENTITY} <= set(expected)


# ---- masking whole units ---------------------------------------------------------------------------------

def _synthetic_rows(rng):
    """[ROWS, LENGTH] ids and joins: [CLS] units [SEP] pad; a unit is a word (1-3 pieces) or a phrase or
    entity of 2-3 words; also each row's units as (first token, tokens, kind) lists."""
    ids = np.full((ROWS, LENGTH), PAD, np.int32)
    joins = np.zeros((ROWS, LENGTH), np.int32)
    units = []
    for row in range(ROWS):
        position, row_units = 1, []
        ids[row, 0] = CLS
        end = LENGTH - 1 - int(rng.integers(0, 20))
        while True:
            kind = rng.choice([0, PHRASE, ENTITY], p=[0.7, 0.18, 0.12])
            words = 1 if kind == 0 else int(rng.integers(2, 4))
            pieces = [int(rng.integers(1, 4)) for _ in range(words)]
            if position + sum(pieces) > end:
                break
            start = position
            for count in pieces:
                ids[row, position] = rng.integers(5, FIRST_CONTINUATION)
                ids[row, position + 1:position + count] = rng.integers(FIRST_CONTINUATION, VOCAB, count - 1)
                position += count
            joins[row, start + 1:position] = kind
            row_units.append((start, position - start, int(kind), pieces))
        ids[row, position] = SEP
        units.append(row_units)
    return ids, joins, units


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(7)
    ids, joins, units = _synthetic_rows(rng)
    table = np.arange(VOCAB) < FIRST_CONTINUATION
    masker = DynamicMasker(MaskingConfig(max_predictions=SLOTS, whole_word=True), VOCAB, MASK, PAD,
                           [PAD, CLS, SEP, MASK, UNK], table)
    outputs = {}
    for level in ("words", "phrases", "entities"):
        stage = UnitStage(masker, table, (level,))
        out = stage({"token_ids": ids, UNIT_JOINS: joins}, seed=[3, 4])
        assert UNIT_JOINS not in out and "unit_starts" not in out
        chosen = np.zeros_like(ids, bool)
        positions, weights = out["mask_positions"].numpy(), out["mask_weights"].numpy() > 0
        for row in range(ROWS):
            chosen[row, positions[row][weights[row]]] = True
        outputs[level] = (chosen, out["token_ids"].numpy())
    return ids, units, outputs


def _level_units(row_units, level):
    """The masking units of a row at a level: (first token, tokens, kind); other words stand alone."""
    code = {"words": -1, "phrases": PHRASE, "entities": ENTITY}[level]
    result = []
    for start, length, kind, pieces in row_units:
        if kind == code:
            result.append((start, length, kind))
        else:
            offset = start
            for count in pieces:
                result.append((offset, count, 0))
                offset += count
    return result


def _reference(units, level, rng, repeats):
    """NumPy: per row, the tokens masked and the units of each kind taken, `repeats` draws a row."""
    tokens, kinds = [], {0: 0, PHRASE: 0, ENTITY: 0}
    for row_units in units:
        level_units = _level_units(row_units, level)
        sizes = np.array([length for _, length, _ in level_units])
        budget = min(SLOTS, int(np.ceil(0.15 * sizes.sum() - 1e-9)))
        for _ in range(repeats):
            order = rng.permutation(len(level_units))
            taken = order[np.cumsum(sizes[order]) <= budget]
            tokens.append(sizes[taken].sum())
            for index in taken:
                kinds[level_units[index][2]] += 1 / repeats
    return np.array(tokens, float), kinds


def _observed(units, level, chosen):
    tokens, kinds, split = [], {0: 0, PHRASE: 0, ENTITY: 0}, 0
    for row, row_units in enumerate(units):
        tokens.append(chosen[row].sum())
        for start, length, kind in _level_units(row_units, level):
            taken = chosen[row, start:start + length].sum()
            split += 0 < taken < length
            kinds[kind] += taken == length
    return np.array(tokens, float), kinds, split


def _agree(observed, expected, expected_se):
    se = np.hypot(np.std(observed, ddof=1) / np.sqrt(len(observed)), expected_se)
    assert abs(np.mean(observed) - expected) < Z * se, (np.mean(observed), expected, se)


@pytest.mark.parametrize("level", ["words", "phrases", "entities"])
def test_units_are_never_split_and_the_rate_and_kinds_follow_the_numpy_rule(batch, level):
    ids, units, outputs = batch
    chosen = outputs[level][0]
    tokens, kinds, split = _observed(units, level, chosen)
    assert split == 0  # every unit of the level is masked whole or not at all
    reference, reference_kinds = _reference(units, level, np.random.default_rng(11), repeats=3)
    _agree(tokens, reference.mean(), reference.std(ddof=1) / np.sqrt(len(reference)))
    if level == "words":
        return
    # The share of taken units that are of the level's kind: a proportion over the units taken.
    code = {"phrases": PHRASE, "entities": ENTITY}[level]
    taken, reference_taken = sum(kinds.values()), sum(reference_kinds.values())
    share, expected = kinds[code] / taken, reference_kinds[code] / reference_taken
    se = np.sqrt(expected * (1 - expected) * (1 / taken + 1 / (reference_taken * 3)))
    assert abs(share - expected) < Z * se, (share, expected, se)
    assert 0.03 < share < 0.5  # phrases and entities are taken, not only their words


def test_the_other_kind_is_split_into_words_at_each_level(batch):
    ids, units, outputs = batch
    for level, other in (("phrases", "entities"), ("entities", "phrases"), ("words", "phrases")):
        assert _observed(units, other, outputs[level][0])[2] > 100  # masked in part: its words stand alone


def test_each_unit_is_masked_replaced_or_kept_whole_eighty_ten_ten(batch):
    ids, units, outputs = batch
    chosen, masked = outputs["phrases"]
    outcomes, mixed = [], 0
    for row, row_units in enumerate(units):
        for start, length, kind in _level_units(row_units, "phrases"):
            if kind and chosen[row, start]:
                is_mask = masked[row, start:start + length] == MASK
                mixed += is_mask.any() and not is_mask.all()
                kept = np.array_equal(masked[row, start:start + length], ids[row, start:start + length])
                outcomes.append(0 if is_mask.all() else 2 if kept else 1)
    outcomes = np.array(outcomes)
    n = len(outcomes)
    # One draw per unit: a unit is partly [MASK] only where a random id happens to be the mask id (about
    # 0.1 x 2.5 tokens / 100 ids of the units); a draw per token would leave about half of them mixed.
    assert mixed / n < 0.01, mixed / n
    for outcome, p in ((0, 0.8), (1, 0.1), (2, 0.1)):
        assert abs(np.mean(outcomes == outcome) - p) < Z * np.sqrt(p * (1 - p) / n), outcome


def test_a_schedule_masks_each_level_in_its_share_of_the_steps_and_a_resumed_pipeline_agrees():
    assert parse_units("words, phrases,entities") == ("words", "phrases", "entities")
    with pytest.raises(ConfigError, match="--masking-units must be one of"):
        parse_units("words,clauses")
    assert level_boundaries(("words", "phrases", "entities"), 60) == [20, 40]
    ids, joins, units = _synthetic_rows(np.random.default_rng(5))
    table = np.arange(VOCAB) < FIRST_CONTINUATION
    masker = DynamicMasker(MaskingConfig(max_predictions=SLOTS, whole_word=True), VOCAB, MASK, PAD,
                           [PAD, CLS, SEP, MASK, UNK], table)
    stage = UnitStage(masker, table, ("words", "phrases", "entities"), total_steps=6)
    assert stage.takes_step
    instances = {"token_ids": ids[:512], UNIT_JOINS: joins[:512]}
    batches = list(make_dataset(instances, 512, masker=stage, seed=1, shuffle=False).take(6))
    for step, level, never_split in ((0, "words", None), (2, "phrases", "phrases"), (4, "entities", "entities"),
                                     (5, "entities", "entities")):
        out = batches[step]
        chosen = np.zeros((512, LENGTH), bool)
        for row in range(512):
            chosen[row, out["mask_positions"][row].numpy()[out["mask_weights"][row].numpy() > 0]] = True
        if never_split:
            assert _observed(units[:512], never_split, chosen)[2] == 0, step
        other = "phrases" if level != "phrases" else "entities"
        assert _observed(units[:512], other, chosen)[2] > 0, step
    resumed = next(iter(make_dataset(instances, 512, masker=stage, seed=1, shuffle=False, start_step=4)))
    for key in ("token_ids", "mask_positions"):
        np.testing.assert_array_equal(resumed[key].numpy(), batches[4][key].numpy())
