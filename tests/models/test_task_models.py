"""Task heads on every backbone: they train with fit, round-trip through .keras, and read the right token."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.finetune.options import SUMMARY_POSITIONS as FINETUNE_SUMMARY_POSITIONS
from keras_bertology.models import FAMILIES
from keras_bertology.models.task_models import SUMMARY_POSITIONS, SequenceClassifier, SpanExtractor, TokenClassifier

SMALL = dict(num_layers=2, num_heads=2, hidden_size=16, intermediate_size=32)


def small_backbone(family):
    config = dict(family.presets[next(iter(family.presets))]["config"], vocab_size=60, **family.sized_config(SMALL))
    if "embedding_size" in config:
        config["embedding_size"] = 8
    # What fine-tuning puts a head on: the encoder alone (an encoder-decoder's encoder, see finetune.run).
    return family.backbone_cls(**config).encoder_backbone()


def _inputs(backbone, batch=4, length=10, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {"token_ids": rng.integers(5, 60, (batch, length)).astype("int32"),
              "padding_mask": np.ones((batch, length), "int32")}
    inputs["padding_mask"][0, 7:] = 0
    if "segment_ids" in backbone.input:
        inputs["segment_ids"] = np.zeros((batch, length), "int32")
    if "char_ids" in backbone.input:  # words spelled in characters (ELMo's), 0 where padding is
        characters = backbone.input["char_ids"].shape[-1]
        spelled = rng.integers(1, backbone.num_characters, (batch, length, characters)).astype("int32")
        inputs["char_ids"] = spelled * inputs["padding_mask"][:, :, None]
    return {name: value for name, value in inputs.items() if name in backbone.input}


def _heads(backbone, family):
    return {
        "classifier": (SequenceClassifier(backbone, 3, summary=family.inputs.summary_position),
                       lambda inputs: np.array([0, 1, 2, 1])),
        "tagger": (TokenClassifier(backbone, 5), lambda inputs: np.full(inputs["padding_mask"].shape, 2)),
        "spans": (SpanExtractor(backbone), lambda inputs: {"start": np.array([1, 2, 3, 4]),
                                                           "end": np.array([2, 3, 4, 5])}),
    }


# Their backbone is another's of the same class, pooler and summary, whose heads CI round-trips: ERNIE's and
# BigBird's BERT's, SpanBERT's ELECTRA's, DistilBERT's and Linformer's RoBERTa's, DeBERTa's DeBERTa-v3's (each
# backbone's own `.keras` round trip, bare and in its pretrainer, is the family harness's). `make test-all`'s.
SAME_BACKBONE_AS_ANOTHER = {"bigbird", "deberta", "distilbert", "ernie", "linformer", "spanbert"}


@pytest.mark.parametrize("family_name", [
    pytest.param(name, marks=[pytest.mark.extended] * (name in SAME_BACKBONE_AS_ANOTHER)) for name in sorted(FAMILIES)])
def test_every_head_builds_on_every_backbone_and_survives_a_keras_round_trip(family_name, tmp_path):
    family = FAMILIES[family_name]
    keras.utils.set_random_seed(0)
    for head, (model, _) in _heads(small_backbone(family), family).items():
        inputs = _inputs(model.backbone)
        path = tmp_path / f"{head}.keras"
        model.save(path)
        restored = keras.saving.load_model(path, compile=False)
        assert type(restored) is type(model) and type(restored.backbone) is type(model.backbone)
        # Called eagerly: `predict` would trace a function for each model of each family.
        np.testing.assert_allclose([np.asarray(x) for x in keras.tree.flatten(restored(inputs, training=False))],
                                   [np.asarray(x) for x in keras.tree.flatten(model(inputs, training=False))],
                                   atol=1e-6)


@pytest.mark.slow
def test_every_head_learns_with_compile_and_fit():
    """The tagger and the span head on XLNet; BERT's heads learn their rules through `bertology finetune` in
    tests/finetune/test_finetune.py's user-folders test, which fits them with compile and fit too, and XLNet's
    classifier (its summary its last real token) in that file's test of every family."""
    family = FAMILIES["xlnet"]
    keras.utils.set_random_seed(0)
    for head, (model, targets) in _heads(small_backbone(family), family).items():
        if head == "classifier":
            continue
        inputs = _inputs(model.backbone)
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        # Slots built before `fit`: built inside its first trace, they make TensorFlow trace the train step
        # twice (about 2 CPU-s a head on 2 cores; the span head's two per-output loss trackers still do).
        model.optimizer.build(model.trainable_variables)
        history = model.fit(inputs, targets(inputs), epochs=20, batch_size=4, verbose=0)
        assert history.history["loss"][-1] < 0.5 * history.history["loss"][0], head


@pytest.mark.parametrize("family_name, back, left_padded", [
    ("xlnet", 0, False), ("xlnet", 0, True), ("gpt", 1, False), ("gpt", 1, True), ("transformer-xl", 1, False)])
def test_classifier_sums_up_at_the_family_summary_token(family_name, back, left_padded):
    """XLNet's summary is its last real token (`<cls>`), a causal LM's the one before it (the text's last,
    not the closing end token), whichever side the row is padded on: through a new dense + tanh, then the
    logits layer."""
    family = FAMILIES[family_name]
    backbone = small_backbone(family)
    model = SequenceClassifier(backbone, 3, summary=family.inputs.summary_position, dropout=0.0)
    inputs = _inputs(backbone)
    if left_padded:
        inputs = {name: np.roll(value, 3, axis=1) for name, value in inputs.items()}
    sequence = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    summary, logits = model.get_layer("summary"), model.get_layer("logits")
    mask = ops.convert_to_numpy(inputs["padding_mask"])
    last = [np.flatnonzero(row)[-1 - back] for row in mask]
    expected = logits(summary(sequence[np.arange(len(last)), last, :]))
    np.testing.assert_allclose(ops.convert_to_numpy(model(inputs)), ops.convert_to_numpy(expected), atol=1e-5)


def test_classifier_uses_the_pretrained_pooler_when_the_backbone_has_one():
    backbone = small_backbone(FAMILIES["bert"])
    model = SequenceClassifier(backbone, 3, dropout=0.0)
    inputs = _inputs(backbone)
    pooled = backbone(inputs)["pooled_output"]
    np.testing.assert_allclose(ops.convert_to_numpy(model(inputs)),
                               ops.convert_to_numpy(model.get_layer("logits")(pooled)), atol=1e-6)
    assert "summary" not in [layer.name for layer in model.layers]


@pytest.mark.parametrize("family_name", ["bert", "xlnet"])
def test_a_mean_summary_averages_the_real_tokens_only(family_name):
    """`summary="mean"` (a small encoder's choice: its MLM trains every state, its [CLS] little): the mean of
    the real tokens' states, padding left out on either side, through a new dense + tanh, then the logits."""
    backbone = small_backbone(FAMILIES[family_name])
    model = SequenceClassifier(backbone, 3, summary="mean", dropout=0.0)
    inputs = _inputs(backbone)
    inputs = {name: np.concatenate([value, np.roll(value[:1], 3, axis=1)]) for name, value in inputs.items()}
    sequence = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    mask = ops.convert_to_numpy(inputs["padding_mask"]).astype(bool)
    means = np.stack([row[real].mean(axis=0) for row, real in zip(sequence, mask)])
    expected = model.get_layer("logits")(model.get_layer("summary")(means))
    np.testing.assert_allclose(ops.convert_to_numpy(model(inputs)), ops.convert_to_numpy(expected), atol=1e-5)
    assert set(SUMMARY_POSITIONS) == set(FINETUNE_SUMMARY_POSITIONS)  # the CLI's copy, free of Keras


def test_span_logits_never_point_at_padding():
    backbone = small_backbone(FAMILIES["bert"])
    inputs = _inputs(backbone)
    out = SpanExtractor(backbone)(inputs)
    for name in ("start", "end"):
        logits = ops.convert_to_numpy(out[name])
        assert (logits[0, 7:] < -1e8).all() and (np.abs(logits[0, :7]) < 1e3).all()
        assert logits[0].argmax() < 7


def test_unknown_summary_position_is_refused():
    from keras_bertology.errors import ConfigError

    with pytest.raises(ConfigError, match="summary"):
        SequenceClassifier(small_backbone(FAMILIES["bert"]), 2, summary="middle")


def test_a_head_on_an_encoder_decoder_is_refused_with_the_encoder_to_use():
    from keras_bertology.errors import ConfigError
    from keras_bertology.models.t5 import T5Backbone

    backbone = T5Backbone(vocab_size=60, num_layers=1, num_heads=2, hidden_size=8, intermediate_size=16)
    with pytest.raises(ConfigError, match=r"encoder_backbone\(\)"):
        SequenceClassifier(backbone, 3)
    assert tuple(SequenceClassifier(backbone.encoder_backbone(), 3, summary="mean")(_inputs(
        backbone.encoder_backbone())).shape) == (4, 3)
