"""ELMo's encoder: preset sizes, every output against a torch composition of bilm-tf's parts, and its depths."""

import keras
import numpy as np
import pytest
from keras import ops

from counting import shapes_only
from elmo_reference import torch_elmo
from keras_bertology.models.elmo.backbone import ElmoBackbone
from keras_bertology.models.elmo.presets import ELMO_PRESETS

TOLERANCE = 1e-5
# An odd small encoder: three layers (residuals around two), cells unlike the projection, no clipping (torch's
# LSTM cannot clip; the clips are checked in test_elmo_layers), no dropout.
SMALL = dict(vocab_size=50, num_layers=3, projection_dim=6, lstm_units=7, filters=((1, 3), (2, 4), (3, 5)),
             num_highway=2, num_characters=40, max_characters=8, char_embedding_dim=4, cell_clip=None,
             projection_clip=None, dropout=0.0)
MIX_WEIGHTS = 4  # of the original: a weight per layer (the token layer and 2 LSTM layers) and a scale


@pytest.mark.parametrize("preset", sorted(ELMO_PRESETS))
def test_presets_have_their_stated_parameter_counts(preset):
    with shapes_only():
        backbone = ElmoBackbone(vocab_size=100, **ELMO_PRESETS[preset]["config"])
        count = backbone.count_params()
    assert count == ELMO_PRESETS[preset]["params"]
    if preset == "elmo-original":
        assert count - MIX_WEIGHTS == 93_600_864  # AllenNLP's count of the original biLM


def _randomized_backbone(seed):
    """SMALL with every weight drawn at scale 0.6, so that ReLUs cut, highway and LSTM gates saturate."""
    backbone = ElmoBackbone(**SMALL)
    rng = np.random.default_rng(seed)
    backbone.set_weights([(0.6 * rng.standard_normal(w.shape)).astype("float32") for w in backbone.get_weights()])
    return backbone


def _char_ids(seed, lengths, length=5):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, SMALL["num_characters"], (len(lengths), length, SMALL["max_characters"]))
    chars = rng.integers(SMALL["max_characters"] // 2, SMALL["max_characters"] + 1, (len(lengths), length))
    ids[np.arange(SMALL["max_characters"]) >= chars[..., None]] = 0
    padding = np.arange(length)[None, :] < np.array(lengths)[:, None]
    return ids.astype("int32"), padding.astype("int32")


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
def test_every_output_matches_torch_composition_of_bilm_parts():
    backbone = _randomized_backbone(seed=0)
    lengths = [5, 3, 1]
    char_ids, padding = _char_ids(seed=1, lengths=lengths)
    outputs = {name: ops.convert_to_numpy(value)
               for name, value in backbone({"char_ids": char_ids, "padding_mask": padding}).items()}
    expected = torch_elmo(backbone, char_ids, lengths)
    real = padding.astype(bool)
    for name, value in expected.items():
        rows = real if name != "token_output" else np.ones_like(real)  # the CNN reads padding tokens too
        assert np.abs(outputs[name][rows] - value[rows]).max() <= TOLERANCE, name
    for name in ("forward_output", "backward_output", "lstm_outputs_1", "lstm_outputs_3"):
        assert np.all(outputs[name][~real] == 0.0), name
    # The residual connections make the layers' states differ by more than one LSTM's bounded output.
    assert np.abs(outputs["lstm_outputs_3"]).max() > 1.0
    # ELMo's vector mixes [x; x] and every layer, by the mix's (here random) weights.
    layers = [np.concatenate([outputs["token_output"]] * 2, axis=-1)] + [
        outputs[f"lstm_outputs_{index}"] for index in (1, 2, 3)]
    weights, scale = (ops.convert_to_numpy(w) for w in backbone.get_layer("scalar_mix").weights)
    shares = np.exp(weights) / np.exp(weights).sum()
    assert np.abs(outputs["sequence_output"] - scale * np.tensordot(shares, layers, axes=1)).max() <= TOLERANCE


def test_each_direction_reads_only_its_own_side_of_a_token():
    backbone = _randomized_backbone(seed=2)
    char_ids, padding = _char_ids(seed=3, lengths=[5])
    changed = char_ids.copy()
    changed[0, 3] = np.random.default_rng(4).integers(1, SMALL["num_characters"], SMALL["max_characters"])
    first, second = ({name: ops.convert_to_numpy(value) for name, value in
                      backbone({"char_ids": ids, "padding_mask": padding}).items()} for ids in (char_ids, changed))
    # Token 3 changed: the forward LM before it and the backward LM after it cannot know.
    np.testing.assert_array_equal(first["forward_output"][0, :3], second["forward_output"][0, :3])
    np.testing.assert_array_equal(first["backward_output"][0, 4:], second["backward_output"][0, 4:])
    assert not np.allclose(first["forward_output"][0, 3:], second["forward_output"][0, 3:])
    assert not np.allclose(first["backward_output"][0, :4], second["backward_output"][0, :4])


def test_depths_put_both_directions_of_a_layer_together():
    backbone = ElmoBackbone(**SMALL)
    depths = backbone.variable_depths()
    by_depth = {}
    for path, depth in depths.items():
        by_depth.setdefault(depth, set()).add(path.split("/")[0])
    assert by_depth[0] == {"char_cnn"}
    for index in range(SMALL["num_layers"]):
        assert by_depth[index + 1] == {f"forward_lstm_{index}", f"backward_lstm_{index}"}
    assert by_depth[SMALL["num_layers"] + 1] == {"scalar_mix"}
    assert len(depths) == len(backbone.trainable_variables)


def test_config_and_keras_file_round_trip(tmp_path):
    backbone = _randomized_backbone(seed=5)
    char_ids, padding = _char_ids(seed=6, lengths=[4, 2])
    inputs = {"char_ids": char_ids, "padding_mask": padding}
    path = tmp_path / "elmo.keras"
    backbone.save(path)
    restored = keras.saving.load_model(path)
    assert restored.get_config() == backbone.get_config()
    for name, value in backbone(inputs).items():
        np.testing.assert_array_equal(ops.convert_to_numpy(value), ops.convert_to_numpy(restored(inputs)[name]))
    assert backbone.hidden_size == 2 * SMALL["projection_dim"]


def _bilm_spelling(word):
    """bilm-tf's UnicodeCharsVocabulary.word_to_char_ids, then the batcher's +1, written from its rule."""
    marks = {"<S>": 256, "</S>": 257}
    code = [260] * 50
    if word in marks:
        code[:3] = [258, marks[word], 259]
    else:
        encoded = word.encode("utf-8")[:48]
        code[0] = 258
        code[1:1 + len(encoded)] = list(encoded)
        code[len(encoded) + 1] = 259
    return [value + 1 for value in code]


def test_words_are_spelled_as_bilm_spells_them():
    import tensorflow as tf

    from keras_bertology.models.elmo.characters import word_characters

    words = ["a", "naïve", "東京", "x" * 47, "y" * 48, "z" * 49 + "é", "<S>", "</S>", "<s>", "broke."]
    got = word_characters(tf.constant(words)).numpy()
    assert got.tolist() == [_bilm_spelling(word) for word in words]
    ragged = word_characters(tf.ragged.constant([["The", "vase"], ["broke"]]))
    assert ragged.shape.as_list() == [2, None, 50]
    assert ragged[1].numpy().tolist() == [_bilm_spelling("broke")]
