"""A new family costs its own record: one defined here, outside the library, trains, exports
and serves through the generic path and the command line, which never name a family; so does a new
output kind, which its pretrainer declares (tests/project/test_import_structure.py checks that generic code names no
family)."""

import keras
import numpy as np
import pytest

from cli_runs import pretrain_two_plays
from family_harness import (check_from_preset, check_hf_round_trip, check_in_a_fresh_process, check_keras_round_trip,
                            check_mixed_precision, check_parameter_count, family_case, sentences_of_one_play)
from keras_bertology.data.instances import pack_sentences
from keras_bertology.errors import ConfigError
from keras_bertology.layers import MaskedLMHead, PooledClassificationHead
from keras_bertology.models import FAMILIES, register_family
from keras_bertology.models.bert.pretrainer import MLM
from keras_bertology.models.family import DataRecipe, FamilyOption, InputLayout, ModelFamily
from keras_bertology.models.pretrainer import Objective, Pretrainer
from keras_bertology.outputs import OUTPUT_KINDS, Endpoints, OutputKind, kinds_of, register_output_kind

LONG = Objective("long", label_key="long_labels")
LONG_SENTENCE = 12  # tokens


def single_sentence_instances(documents, context):
    """One sentence per row, labelled 1 when it has more than LONG_SENTENCE tokens."""
    sentences = [[sentence] for document in documents for sentence in document]
    packed = pack_sentences(sentences, context.seq_len, cross_documents=False, **context.specials)
    lengths = np.sum(packed["token_ids"] != context.specials["pad_id"], axis=1) - 2
    packed["long_labels"] = (lengths > LONG_SENTENCE).astype(np.int32)
    return {key: np.concatenate([value] * context.copies) for key, value in packed.items()}


def toy_masker(context, toy_rate=0.15):
    """BERT's masking at the family's own rate (its option --toy-rate)."""
    from keras_bertology.data.masking import DynamicMasker, MaskingConfig

    tokenizer = context.tokenizer
    return DynamicMasker(MaskingConfig(mask_rate=toy_rate, max_predictions=context.max_predictions),
                         tokenizer.vocab_size, tokenizer.mask_id, tokenizer.pad_id, tokenizer.special_ids)


def toy_pack_segments(segments, seq_len, cls_id, sep_id, pad_id):
    """The family serves text its own way: here every real token is in segment 1."""
    from keras_bertology.data.packing import pack_segments

    packed = pack_segments(segments, seq_len, cls_id, sep_id, pad_id)
    return dict(packed, segment_ids=packed["padding_mask"])


@keras.saving.register_keras_serializable(package="toy_family")
class ToyPretrainer(Pretrainer):
    """MLM plus a sentence-length objective nothing in the library knows, served and shown by an output
    kind of its own. Its config is the base's: the backbone alone."""

    output_kinds = ("fill_in", "long_lines")

    def __init__(self, backbone, **kwargs):
        inputs = dict(backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        encoded = backbone({k: v for k, v in inputs.items() if k in backbone.input})
        outputs = {
            "mlm": MaskedLMHead(backbone.vocab_size, token_embedding=backbone.token_embedding, name="mlm_head")(
                encoded["sequence_output"], inputs["mask_positions"]),
            "long": PooledClassificationHead(2, name="long_head")(encoded["pooled_output"]),
        }
        super().__init__(backbone, inputs, outputs, [MLM, LONG], **kwargs)


class LongLines(OutputKind):
    """How likely the model finds each held-out line long: a `long_probability` endpoint, the held-out
    lines' probabilities from the export, and a summary line."""

    name = "long_lines"

    def endpoints(self, serving):
        import tensorflow as tf

        pretrainer = serving.pretrainer
        long_head = keras.Model({name: pretrainer.input[name] for name in pretrainer.backbone.input},
                                pretrainer.output["long"])
        judge = serving.compile(long_head)

        def long_probability(text):
            packed = serving.pack(text)
            logits = judge({name: packed[name] for name in serving.input_names})
            return {"probability": tf.nn.softmax(tf.cast(logits, tf.float32))[:, 1]}

        return Endpoints({"long_probability": (long_probability, [serving.strings])}, model=long_head)

    def examples(self, run):
        import tensorflow as tf

        served = tf.saved_model.load(str(run.export_dir))
        probabilities = served.long_probability(tf.constant(run.held_out))["probability"].numpy()
        return {"long_lines": [{"text": text, "probability": float(p)} for text, p in zip(run.held_out, probabilities)]}

    def summary_lines(self, metrics):
        lines = metrics.get("long_lines", [])
        return [f"long lines: {sum(line['probability'] > 0.5 for line in lines)} of {len(lines)} held-out lines"]


TOY = ModelFamily(
    name="toy",
    presets={"toy-tiny": {"config": dict(vocab_size=30522, num_layers=1, num_heads=2, hidden_size=32,
                                         intermediate_size=64, max_positions=64),
                          "params": 988_480, "description": "a test family"}},
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path=f"{__name__}:ToyPretrainer",
    tokenizer_path="keras_bertology.tokenizers.wordpiece:train_wordpiece",
    data=DataRecipe(
        instances_path=f"{__name__}:single_sentence_instances",
        masker_path=f"{__name__}:toy_masker",
    ),
    inputs=InputLayout(segment_packer_path=f"{__name__}:toy_pack_segments"),
    options=(FamilyOption("toy_rate", float, 0.15, "share of tokens masked", minimum=0.05, maximum=0.5),),
)


def register_toy():
    """What a user of the plug-in runs before using it (the harness's new process too)."""
    register_family(TOY)
    register_output_kind(LongLines())


@pytest.fixture
def toy_family():
    register_toy()
    yield TOY
    FAMILIES.pop("toy")
    OUTPUT_KINDS.pop("long_lines")


@pytest.mark.slow
def test_a_family_defined_outside_trains_exports_and_serves(toy_family, tmp_path, capsys):
    import tensorflow as tf

    metrics, served = pretrain_two_plays(tmp_path, capsys, "toy", "toy-tiny", "--seq-len", "32",
                                         "--vocab-size", "600", "--toy-rate", "0.3")
    assert metrics["family_options"] == {"toy_rate": 0.3}
    assert set(metrics["objectives"]) == {"mlm", "long"}
    assert metrics["instances"] == "single_sentence_instances"
    assert 0.5 <= metrics["objectives"]["long"]["chance"]["accuracy"] < 1.0
    out_text = capsys.readouterr().out
    assert "long accuracy" in out_text
    assert served.mlm_logits(tf.constant(["To be, or not to [MASK]."]))["logits"].shape[-1] <= 600
    out = served.serve(tf.constant(["To be, or not to be."]))
    np.testing.assert_array_equal(out["segment_ids"].numpy(), out["padding_mask"].numpy())
    # The plug-in's own output kind: its endpoint, its examples (computed by that endpoint) and its line.
    examples = metrics["long_lines"]
    assert examples and metrics["fill_mask"]  # beside the fill-in kind it also declares
    served_probabilities = served.long_probability(tf.constant([line["text"] for line in examples]))["probability"]
    np.testing.assert_allclose(served_probabilities.numpy(), [line["probability"] for line in examples], rtol=1e-5)
    assert f"long lines: {sum(line['probability'] > 0.5 for line in examples)} of {len(examples)} held-out lines" \
        in out_text


def test_a_pretrainer_declaring_an_unregistered_kind_is_refused_naming_it():
    class Declares:
        output_kinds = ("fill_in", "long_lines")

    with pytest.raises(ConfigError, match="declares the output kinds long_lines, which are not registered"):
        kinds_of(Declares())


def test_each_family_reads_its_default_tokenizer_class_with_its_own_format():
    """A class two families declared differently would be read with either's format; the class AutoTokenizer
    builds for a family's models is read as that family declares."""
    from keras_bertology.convert.hf_tokenizer import declared_formats

    formats = declared_formats()
    declaring = [family for family in FAMILIES.values() if family.hf_tokenizer is not None]
    assert len(declaring) >= 12
    for family in declaring:
        assert all(formats[name] is family.hf_tokenizer for name in family.hf_tokenizer.classes), family.name


def test_a_family_defined_outside_passes_the_family_harness(toy_family, tmp_path):
    """The checks every registered family passes (tests/models/test_family_harness.py), the new process
    registering the plug-in as its user would; transformers has no toy model, so no round trip there."""
    case = family_case(toy_family, tmp_path / "run", sentences_of_one_play())
    check_parameter_count(toy_family)
    check_keras_round_trip(case, tmp_path)
    check_mixed_precision(case)
    check_from_preset(case)
    assert not check_hf_round_trip(case, tmp_path)
    (tmp_path / "fresh").mkdir()
    results = check_in_a_fresh_process([case], tmp_path / "fresh", plugins=[f"{__name__}:register_toy"])
    assert "long_probability" in results["toy"]["signatures"]
