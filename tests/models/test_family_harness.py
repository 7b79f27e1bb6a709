"""Every registered family through the family harness (tests/support/family_harness.py): its parameter count,
`.keras` round trip, mixed precision, `from_preset`, transformers round trip where transformers has the model,
and, all families in one new process, loading its run folder and serving its export.

The per-family copies these replace: ALBERT's, ELMo's, SpanBERT's, ELECTRA's and DeBERTa-v3's `.keras` round
trips, ModernBERT's count of its tiny preset."""

import pytest

from family_harness import (check_from_preset, check_hf_round_trip, check_hidden_states, check_in_a_fresh_process,
                            check_keras_round_trip, check_mixed_precision, check_onnx, check_parameter_count,
                            family_case, one_per_serving_path, sentences_of_one_play)
from keras_bertology.models import FAMILIES

NAMES = sorted(FAMILIES)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """{family name: FamilyCase}, built once for all the checks."""
    sentences = sentences_of_one_play()
    root = tmp_path_factory.mktemp("families")
    return {name: family_case(FAMILIES[name], root / name, sentences) for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_the_smallest_preset_has_the_parameters_its_record_says(name):
    check_parameter_count(FAMILIES[name])


@pytest.mark.parametrize("name", NAMES)
def test_the_models_survive_a_keras_round_trip(cases, name, tmp_path):
    check_keras_round_trip(cases[name], tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_a_mixed_bfloat16_forward_is_finite(cases, name):
    check_mixed_precision(cases[name])


@pytest.mark.parametrize("name", NAMES)
def test_each_layers_states_are_read_for_probes(cases, name):
    check_hidden_states(cases[name])


@pytest.mark.parametrize("name", NAMES)
def test_from_preset_gives_the_run_back(cases, name):
    check_from_preset(cases[name])


@pytest.mark.parametrize("name", [name for name in NAMES if FAMILIES[name].conversion.hf_exporter_path])
def test_the_transformers_round_trip_computes_alike(cases, name, tmp_path):
    assert check_hf_round_trip(cases[name], tmp_path)


# In CI, one family of each way of attending (and ELMo's recurrence, an ONNX Loop); the others repeat a path.
# BigBird at the harness's 16 tokens attends in full (its block-sparse branch starts beyond 7 blocks).
ONNX_REPEATS = ("albert", "bigbird", "distilbert", "electra", "ernie", "roberta", "spanbert", "deberta-v3")


# Exported here as the encoder alone: the families whose string model (model.text.onnx, its build and its check
# against the SavedModel costing seconds a family) tests/export/test_onnx_text.py's
# test_the_string_model_serves_texts_as_the_saved_model_does checks on texts of its own, in CI for
# deberta-v3, gpt, roberta, spanbert and t5; extended there for bigbird (SentencePiece, as DeBERTa-v3's) and for
# deberta, linformer, modernbert (byte-level BPE laid out as RoBERTa's) and transformer-xl (GPT's tokenizer and
# layout). The others have none, and onnx.json's one line on why is checked here (the uncased WordPiece families',
# ALBERT's and XLNet's text rewriting, ELMo's characters).
STRING_MODEL_CHECKED_ELSEWHERE = ("bigbird", "deberta", "deberta-v3", "gpt", "linformer", "modernbert", "roberta",
                                  "spanbert", "t5", "transformer-xl")


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.extended] * (name in ONNX_REPEATS))
                                  for name in NAMES])
def test_the_onnx_export_computes_as_the_encoder_without_tensorflow(cases, name, tmp_path):
    check_onnx(cases[name], tmp_path, string_model=name not in STRING_MODEL_CHECKED_ELSEWHERE)


# Extended: in CI, test_fresh_process.py loads every family's run folder in a new process by every loading path
# and exports some, and test_family_plugin.py runs this whole check on its plug-in family.
@pytest.mark.extended
def test_every_family_loads_in_one_new_process_and_each_way_of_serving_serves(cases, tmp_path):
    """Every family's run folder loads in the new process; one family of each way of serving
    (`one_per_serving_path`) exports and serves there, the others in the extended test below (an export
    costs seconds a family)."""
    serving, _ = one_per_serving_path(list(cases.values()))
    results = check_in_a_fresh_process(list(cases.values()), tmp_path, exported=serving)
    assert {name for name, result in results.items() if "serve_ids" in result["signatures"]} == \
        {case.family.name for case in serving}


@pytest.mark.extended
def test_every_family_exports_and_serves_in_one_new_process(cases, tmp_path):
    _, others = one_per_serving_path(list(cases.values()))
    results = check_in_a_fresh_process(others, tmp_path)
    assert all("serve_ids" in result["signatures"] for result in results.values())
