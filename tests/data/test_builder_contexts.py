"""A family's instance builder and masking stage are each built from one context object: the family record
hands every builder the run's settings in it and the family's own options by keyword, with no flag per
argument (`data.builder_contexts`)."""

import numpy as np
import pytest

from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.errors import ConfigError
from keras_bertology.models import FAMILIES
from keras_bertology.models.family import DataRecipe, FamilyOption, ModelFamily

BUILT = []


def recorded_instances(documents, context, **options):
    BUILT.append((documents, context, options))
    return {"token_ids": np.zeros((1, context.seq_len), np.int32)}


def recorded_masker(context, **options):
    BUILT.append((context, options))
    return "stage"


def _family(**data):
    return ModelFamily(
        name="recorded", presets={}, backbone_path="", pretrainer_path="", tokenizer_path="",
        data=DataRecipe(instances_path=f"{__name__}:recorded_instances", masker_path=f"{__name__}:recorded_masker",
                        **data),
        options=(FamilyOption("rate", float, 0.15, "masked share", minimum=0.0, maximum=1.0),
                 FamilyOption("width", int, 3, "row width", minimum=1, maximum=9, used_by=("instances",))))


@pytest.fixture(autouse=True)
def _fresh_record():
    BUILT.clear()


def test_the_masking_stage_gets_one_context_with_every_run_setting_and_its_options_by_keyword():
    counts = np.arange(5)
    stage = _family().build_masker("tokenizer", 7, whole_word=True, options={"rate": 0.2}, replicas=2, seq_len=32,
                                   token_counts=counts)
    [(context, options)] = BUILT
    assert stage == "stage" and options == {"rate": 0.2}
    assert (context.tokenizer, context.max_predictions, context.whole_word, context.seq_len, context.replicas) == (
        "tokenizer", 7, True, 32, 2)
    assert context.token_counts is counts


def test_the_instance_builder_gets_one_context_with_the_default_packing_and_its_options_by_keyword():
    rng, specials = np.random.default_rng(0), {"cls_id": 1, "sep_id": 2, "pad_id": 0}
    family = _family(packings=("full-sentences", "doc-sentences"))
    family.build_instances(["documents"], 16, specials, rng, copies=3, options={"width": 5}, batch_size=8,
                           replicas=2)
    [(documents, context, options)] = BUILT
    assert documents == ["documents"] and options == {"width": 5}
    assert context == InstanceContext(16, specials, rng, copies=3, packing="full-sentences", batch_size=8,
                                      replicas=2)


def test_a_stream_family_refuses_to_build_instances_without_a_batch_size():
    with pytest.raises(ConfigError, match="reads its corpus as batch_size streams: give the batch size"):
        _family(stream_batches=True).build_instances([], 16, {}, None)
    assert not BUILT


def test_a_stage_that_needs_the_sequence_length_refuses_a_context_without_it():
    """T5's span corruption gives inputs and targets of lengths of its own, read off the context's seq_len."""
    with pytest.raises(ConfigError, match="--model t5's masking stage needs the sequence length"):
        FAMILIES["t5"].build_masker(None, None)
