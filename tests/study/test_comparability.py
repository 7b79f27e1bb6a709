"""A claim gets a verdict only where its two arms differ in nothing the study records but the factor it names:
two vocabularies apart in casing alone make a claim about objectives "not comparable"."""

import shutil

import pytest

from family_harness import sentences_of_one_play
from keras_bertology.models import FAMILIES
from keras_bertology.study.arms import CLAIMS, Claim
from keras_bertology.study.report import _judged, markdown
from keras_bertology.tokenizers.saved import describe_saved_tokenizer
from keras_bertology.tokenizers.wordpiece import train_wordpiece

SPAN_CLAIM = next(claim for claim in CLAIMS if (claim.arm, claim.against) == ("spanbert", "bert"))
WINS = [0.30, 0.31, 0.29, 0.32, 0.30], [0.20, 0.19, 0.21, 0.20, 0.22]  # a clear paired gain
BEATS_CONTROL = {"bbc-names": {"gate": {"difference": 0.05, "standard_error": 0.01, "pays": True}}}


def _arm(folder, control=BEATS_CONTROL):
    """An arm's record in results.json: its vocabulary and its control on bbc-names."""
    return {"tokenizer": describe_saved_tokenizer(folder), "control": control}


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory):
    """{name: saved tokenizer folder}: BERT's (lower-cased) and SpanBERT's (cased) vocabularies learned from the
    same sentences, as a study with native tokenizers trains them, and a copy of BERT's."""
    root, sentences = tmp_path_factory.mktemp("vocabularies"), sentences_of_one_play(2000)
    folders = {name: root / name for name in ("bert", "spanbert")}
    for name, folder in folders.items():
        FAMILIES[name].train_tokenizer(sentences, 600).save(folder)
    shutil.copytree(folders["bert"], root / "copy")
    folders["copy"] = root / "copy"
    return folders


def test_records_tell_casing_and_training_apart_and_copies_alike(vocabularies, tmp_path):
    bert, spanbert = (describe_saved_tokenizer(vocabularies[name]) for name in ("bert", "spanbert"))
    assert (bert["type"], bert["lower_case"], spanbert["lower_case"]) == ("wordpiece", True, False)
    assert describe_saved_tokenizer(vocabularies["copy"]) == bert
    # The same trainer, casing and size on other text: alike in words, told apart by the digest.
    other = tmp_path / "other"
    train_wordpiece(sentences_of_one_play(2000)[1000:], 600).save(other)
    retrained = describe_saved_tokenizer(other)
    assert (retrained["type"], retrained["lower_case"]) == ("wordpiece", True) and retrained["sha256"] != bert["sha256"]


def test_a_claim_across_cased_and_uncased_vocabularies_is_refused_with_the_reason(vocabularies):
    arms = {"spanbert": _arm(vocabularies["spanbert"]), "bert": _arm(vocabularies["bert"])}
    refused = _judged(SPAN_CLAIM, "bbc-names", arms, *WINS)
    assert refused["verdict"] == "not comparable" and refused["factor"] == "objective"
    (reason,) = refused["not_comparable"]
    assert reason.startswith("the vocabularies differ") and "spanbert: wordpiece, cased" in reason
    assert "bert: wordpiece, lower-cased" in reason
    # The same vocabulary on both sides: the paired gain is judged.
    arms["spanbert"] = _arm(vocabularies["copy"])
    assert _judged(SPAN_CLAIM, "bbc-names", arms, *WINS)["verdict"] == "reproduced"
    # Unless an arm does not beat its own control: then no verdict, and why.
    arms["bert"] = _arm(vocabularies["bert"], {"bbc-names": {"gate": {"difference": 0.001, "standard_error": 0.004,
                                                                       "pays": False}}})
    unjudged = _judged(SPAN_CLAIM, "bbc-names", arms, *WINS)
    assert unjudged["verdict"] == "no verdict" and unjudged["below_control"] == [
        "bert does not beat its control (+0.001 ± 0.004)"]
    arms["bert"] = _arm(vocabularies["bert"])
    # A claim about the tokenizer itself compares two vocabularies by design.
    arms["spanbert"] = _arm(vocabularies["spanbert"])
    about_casing = Claim("a cased vocabulary tags names better", "spanbert", "bert", "better", None, "tokenizer")
    assert _judged(about_casing, "bbc-names", arms, *WINS)["verdict"] == "reproduced"


def test_the_report_shows_the_factor_and_why_a_claim_is_refused(vocabularies):
    summary = {"mean": 0.2, "std": 0.01, "n": 5, "seeds": WINS[1]}
    control = {"bbc-names": {"scores": summary, "gate": {"difference": 0.05, "standard_error": 0.01, "pays": True}}}
    arms = {name: _arm(vocabularies[name], control) for name in ("bert", "spanbert")}
    claim = _judged(SPAN_CLAIM, "bbc-names", arms, *WINS)
    results = {"scale": "tiny", "size": "2 layers", "pretraining_text": "text", "seeds": 5, "tasks": ["bbc-names"],
               "metrics": {"bbc-names": "f1"}, "verdict_labels": {"bbc-names": 32}, "reference_arm": "bert",
               "rows": [{"arm": name, "objective": "MLM", "budget": 1.0, "steps": 1, "pretrain_flops": 1.0,
                         "pretrain_seconds": 1.0, "scores": {"bbc-names": summary}} for name in ("bert", "spanbert")],
               "random_init": {"bbc-names": {"32": summary}}, "learning_curves": {"bert": {"bbc-names": {"32": summary}}},
               "gate": {"bbc-names": {"difference": 0.02, "standard_error": 0.005, "pays": True}},
               "decidable_difference": {"bbc-names": 0.01}, "arms": arms, "claims": [claim], "pretrain_seconds": 1,
               "finetune_seconds": 1, "finetune_runs": 1, "finetune_train_seconds": 1}
    row = next(line for line in markdown(results).splitlines() if line.startswith(f"| {SPAN_CLAIM.text}"))
    assert "| objective | bbc-names |" in row and "not comparable: the vocabularies differ (spanbert: wordpiece, cased" in row
    assert "| bert | bbc-names | 0.200 ± 0.010 | 0.200 ± 0.010 | +0.050 | 0.010 | given |" in markdown(results)


def test_arms_read_the_shared_vocabulary_unless_native_or_their_recipe_spells_words(tmp_path):
    from keras_bertology.pretraining.options import PretrainOptions
    from keras_bertology.study.compute import arm_tokenizer, shared_vocabulary
    from keras_bertology.study.options import StudyOptions

    sentences = sentences_of_one_play(1500)
    documents = [sentences[start:start + 50] for start in range(0, len(sentences), 50)]
    kinds = {}
    for tokenizers in ("shared", "native"):
        options = StudyOptions(vocab_size=700, tokenizers=tokenizers)
        shared = shared_vocabulary(options, tmp_path / tokenizers, documents)
        assert (shared is None) == (tokenizers == "native")
        for name in ("bert", "gpt", "elmo"):
            probe = PretrainOptions(model=name, vocab_size=700)
            folder = tmp_path / tokenizers / "tokenizers" / name
            kinds[tokenizers, name] = describe_saved_tokenizer(folder) if arm_tokenizer(
                FAMILIES[name], documents, probe, folder, shared=shared) else None
    assert kinds["shared", "bert"] == kinds["shared", "gpt"] != kinds["native", "bert"]
    assert kinds["shared", "bert"]["type"] == "sentencepiece" and not kinds["shared", "bert"]["lower_case"]
    assert (kinds["native", "bert"]["type"], kinds["native", "gpt"]["type"]) == ("wordpiece", "byte_bpe")
    assert kinds["shared", "elmo"] == kinds["native", "elmo"] and kinds["shared", "elmo"]["type"] == "word"
