"""The data recipe of a pretraining run: documents -> ids -> the family's instances -> masked copies.

`bertology pretrain` runs it once over a corpus held in memory; `bertology
prepare` runs it on each shard's documents. Both call the same functions with
the same options, so they give instances of the same kind and statistics.
"""

import numpy as np
import tensorflow as tf

from keras_bertology.data.instances import coverage_counts



def tokenize_documents(documents, tokenizer, batch_size=8192):
    """Documents of sentences -> documents of int32 id arrays, tokenized in large in-graph batches."""
    sentences = [sentence for document in documents for sentence in document]
    ids = []
    for start in range(0, len(sentences), batch_size):
        ragged = tokenizer.tokenize(tf.constant(sentences[start:start + batch_size]))
        ids.extend(np.asarray(row, dtype=np.int32) for row in ragged.numpy())
    tokenized, offset = [], 0
    for document in documents:
        tokenized.append(ids[offset:offset + len(document)])
        offset += len(document)
    return tokenized


def masking_of(family, options):
    """"static" or "dynamic": --masking, or the family's own."""
    return options.masking or family.masking


def copies_of(family, options):
    """How many times the instances are built: static masking follows create_pretraining_data, which
    builds the instances dupe_factor times (new pairs, split points, random-next draws), one mask each."""
    return options.dupe_factor if masking_of(family, options) == "static" else 1


def build_instances(family, tokenized, tokenizer, options, replicas=1, rng=None):
    """The family's instances of `tokenized` documents (`tokenize_documents`), `copies_of` times over."""
    specials = {f"{role}_id": tokenizer.optional_id(role) for role in ("cls", "sep", "pad")}
    rng = np.random.default_rng(options.seed) if rng is None else rng
    return family.build_instances(tokenized, options.seq_len, specials, rng, copies_of(family, options),
                                  options.packing, options.family_options, options.batch_size, replicas)


def instance_coverage(family, instances, tokenized, tokenizer, options):
    """`coverage_counts` of instances built by `build_instances`."""
    return coverage_counts(instances, tokenized, copies_of(family, options),
                           [tokenizer.optional_id(role) for role in ("cls", "sep", "pad") if tokenizer.has_role(role)])


def build_masker(family, tokenizer, options, replicas=1, token_counts=None):
    return family.build_masker(tokenizer, options.prediction_slots(family), options.whole_word,
                               options.family_options, replicas, options.seq_len, token_counts)


def corpus_token_counts(family, instances, tokenizer):
    """How often each id occurs in `instances` ([vocab] ints), for a family whose masking weighs tokens
    by frequency (`ModelFamily.masker_takes_token_counts`); None for the others."""
    if not family.masker_takes_token_counts:
        return None
    return np.bincount(np.asarray(instances["token_ids"]).ravel(), minlength=tokenizer.vocab_size)
