"""The data recipe of a pretraining run: documents -> ids -> the family's instances -> masked copies.

`bertology pretrain` runs it once over a corpus held in memory; `bertology
prepare` runs it on each shard's documents. Both call the same functions with
the same options, so they give instances of the same kind and statistics.
"""

import numpy as np
import tensorflow as tf

from keras_bertology.data.instances import coverage_counts
from keras_bertology.data.knowledge_units import learn_marker, marked_chunks, marks_units, needs_stage, parse_units
from keras_bertology.data.unit_stages import UnitStage, split_unit_joins


def tokenize_documents(documents, tokenizer, marker=None, report=None, batch_size=8192):
    """Documents of sentences -> documents of int32 id arrays, tokenized in large in-graph batches.

    With a `marker` (`knowledge_units.UnitMarker`), a token that continues a marked phrase or entity
    carries `id + vocab_size * code` (its kind's code) through instance building, which keeps ids
    as they are; `build_instances` splits them into ids and UNIT_JOINS. A `report` dict receives the
    count of sentences with units ("marked") and of those left unmarked ("unaligned").
    """
    sentences = [sentence for document in documents for sentence in document]
    ids = _tokenize(sentences, tokenizer, batch_size)
    if marker is not None:
        ids = _with_unit_codes(sentences, ids, tokenizer, marker, batch_size, {} if report is None else report)
    tokenized, offset = [], 0
    for document in documents:
        tokenized.append(ids[offset:offset + len(document)])
        offset += len(document)
    return tokenized


def _tokenize(texts, tokenizer, batch_size):
    ids = []
    for start in range(0, len(texts), batch_size):
        ragged = tokenizer.tokenize(tf.constant(texts[start:start + batch_size]))
        ids.extend(np.asarray(row, dtype=np.int32) for row in ragged.numpy())
    return ids


def _with_unit_codes(sentences, ids, tokenizer, marker, batch_size, report):
    """`ids` with the unit codes of the marked sentences. A marked sentence is tokenized again in
    chunks (`knowledge_units.marked_chunks`, each after a space), so that each unit's tokens are known;
    where the chunks' tokens differ from the sentence's (whitespace a tokenizer keeps), the sentence is
    left unmarked, and counted in `report`."""
    marked = [(index, chunks) for index, sentence in enumerate(sentences)
              for chunks in [marked_chunks(sentence, marker.mark(sentence))] if any(code for _, code in chunks)]
    texts = [(" " if position else "") + text for _, chunks in marked for position, (text, _) in enumerate(chunks)]
    chunk_ids = iter(_tokenize(texts, tokenizer, batch_size))
    ids, unaligned = list(ids), 0
    for index, chunks in marked:
        pieces = [(next(chunk_ids), code) for _, code in chunks]
        if not np.array_equal(np.concatenate([piece for piece, _ in pieces]), ids[index]):
            unaligned += 1
            continue
        ids[index] = np.concatenate([np.concatenate([piece[:1], piece[1:] + tokenizer.vocab_size * code])
                                     for piece, code in pieces]).astype(np.int32)
    report.update(marked=len(marked), unaligned=unaligned)
    return ids


def masking_of(family, options):
    """"static" or "dynamic": --masking, or the family's own."""
    return options.masking or family.data.masking


def copies_of(family, options):
    """How many times the instances are built: static masking follows create_pretraining_data, which
    builds the instances dupe_factor times (new pairs, split points, random-next draws), one mask each."""
    return options.dupe_factor if masking_of(family, options) == "static" else 1


def build_instances(family, tokenized, tokenizer, options, replicas=1, rng=None):
    """The family's instances of `tokenized` documents (`tokenize_documents`), `copies_of` times over;
    with UNIT_JOINS where the masking units need marked phrases and entities."""
    specials = {f"{role}_id": tokenizer.optional_id(role) for role in ("cls", "sep", "pad")}
    rng = np.random.default_rng(options.seed) if rng is None else rng
    instances = family.build_instances(tokenized, options.seq_len, specials, rng, copies_of(family, options),
                                       options.packing, options.family_options, options.batch_size, replicas)
    return split_unit_joins(instances, tokenizer.vocab_size) if marks_units(units_of(family, options)) else instances


def units_of(family, options):
    """The levels masked whole (`unit_stages.parse_units`): --masking-units, the family's, or tokens
    (words with --whole-word)."""
    return parse_units(options.masking_units or family.data.masking_units
                       or ("words" if options.whole_word else "tokens"))


def unit_marker(family, options, documents):
    """The phrases and entities of a corpus (`knowledge_units.learn_marker` over its sentences), for
    masking units that need them; None for the others."""
    if not marks_units(units_of(family, options)):
        return None
    return learn_marker((sentence for document in documents for sentence in document), options.phrases,
                        options.gazetteer)


def instance_coverage(family, instances, tokenized, tokenizer, options):
    """`coverage_counts` of instances built by `build_instances`."""
    return coverage_counts(instances, tokenized, copies_of(family, options),
                           [tokenizer.optional_id(role) for role in ("cls", "sep", "pad") if tokenizer.has_role(role)])


def build_masker(family, tokenizer, options, replicas=1, token_counts=None):
    """The run's masking stage: the family's, after a `unit_stages.UnitStage` where the masking units
    are phrases, entities or a schedule."""
    levels = units_of(family, options)
    masker = family.build_masker(tokenizer, options.prediction_slots(family), levels != ("tokens",),
                                 options.family_options, replicas, options.seq_len, token_counts)
    if not needs_stage(levels):
        return masker
    return UnitStage(masker, tokenizer.word_start_table, levels, options.windows * options.steps_per_window)


def corpus_token_counts(instances, tokenizer):
    """How often each id occurs in `instances` ([vocab] ints), for a masking stage that weighs tokens by
    frequency (`builder_contexts.MaskingContext.token_counts`)."""
    return np.bincount(np.asarray(instances["token_ids"]).ravel(), minlength=tokenizer.vocab_size)
