"""What a family's instance builder and masking stage are built from: one object each, so that a builder
reads the settings it needs and a new setting is a new field, not a new argument of every builder."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InstanceContext:
    """The run's settings that an instance builder (`DataRecipe.instances_path`) lays documents out with.

    Attributes:
        seq_len: tokens per instance.
        specials: {"cls_id", "sep_id", "pad_id"}: the tokenizer's ids of those roles (None where it has none).
        rng: the generator of every random draw (pairs, split points); None for builders that draw nothing.
        copies: how many times the instances are built over the corpus.
        packing: one of the family's `packings`, None where it declares none.
        batch_size: the global batch, for builders of stream batches (a row continues the text of the same
            row of the batch before); None where the run gives none.
        replicas: how many replicas share each batch in equal slices.
    """

    seq_len: int
    specials: dict
    rng: np.random.Generator | None = None
    copies: int = 1
    packing: str | None = None
    batch_size: int | None = None
    replicas: int = 1


@dataclass(frozen=True)
class MaskingContext:
    """The run's settings that a masking stage builder (`DataRecipe.masker_path`) reads what it needs of.

    Attributes:
        tokenizer: the run's tokenizer (ids of its specials, word starts, vocabulary).
        max_predictions: masked-LM prediction slots per instance; None where the run sets none (a stage
            without slots).
        whole_word: mask whole words (the masking units are not tokens).
        seq_len: tokens per instance, for stages whose outputs have lengths of their own (T5's inputs and
            targets); None where the caller gives none.
        replicas: how many replicas share each batch (as a stream family's instances were laid out).
        token_counts: how often each id occurs in the corpus' instances ([vocab] ints), None where unknown,
            for a choice weighed by frequency (DistilBERT's smoothed masking).
    """

    tokenizer: object
    max_predictions: int | None = None
    whole_word: bool = False
    seq_len: int | None = None
    replicas: int = 1
    token_counts: np.ndarray | None = None
