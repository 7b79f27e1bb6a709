"""T5's backbone against transformers' (fp32, 1e-5): the position buckets, the encoder's states and the
decoder's under teacher forcing, for v1.0 and v1.1 layouts, a head width other than d_model / heads, fewer
buckets and an odd max distance, and T5's exact parameter count."""

import numpy as np
import pytest
import torch
import transformers
from transformers.models.t5.modeling_t5 import T5Attention

from counting import shapes_only
from hf_reference import perturbed_hf_model
from keras_bertology.convert.hf_weights import WeightSource
from keras_bertology.errors import CheckpointError
from keras_bertology.layers import position_buckets
from keras_bertology.models.t5 import T5Backbone
from keras_bertology.models.t5.convert import backbone_kwargs, load_backbone

TOLERANCE = 1e-5
SMALL = dict(vocab_size=120, d_model=32, num_heads=4, num_layers=2, dropout_rate=0.0)
CONFIGS = {
    # v1.0: ReLU, d_kv = d_model / heads, the default buckets.
    "v1.0": dict(SMALL, d_kv=8, d_ff=48, feed_forward_proj="relu"),
    # v1.1: gated GELU, wider heads than d_model / heads, fewer buckets, an odd max distance, a deeper decoder.
    "v1.1": dict(SMALL, d_kv=12, d_ff=40, feed_forward_proj="gated-gelu", relative_attention_num_buckets=10,
                 relative_attention_max_distance=13, num_decoder_layers=3),
}


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (10, 13), (16, 37), (6, 9)])
def test_position_buckets_are_the_originals(bidirectional, num_buckets, max_distance):
    offsets = np.arange(-300, 301)
    expected = T5Attention._relative_position_bucket(torch.tensor(offsets), bidirectional=bidirectional,
                                                     num_buckets=num_buckets, max_distance=max_distance).numpy()
    np.testing.assert_array_equal(position_buckets(offsets, bidirectional, num_buckets, max_distance), expected)


def _batch(vocab_size, lengths, seed):
    """[B, L] ids and padding mask: row r holds lengths[r] real tokens, padding after them."""
    rng = np.random.default_rng(seed)
    length = max(lengths)
    ids = rng.integers(2, vocab_size, (len(lengths), length)).astype("int32")
    mask = (np.arange(length)[None, :] < np.asarray(lengths)[:, None]).astype("int32")
    return ids * mask, mask


def _converted(hf, encoder_only=False):
    config = hf.config.to_dict()
    backbone = T5Backbone(**backbone_kwargs(config, encoder_only=encoder_only))
    source = WeightSource({name: value.detach().numpy() for name, value in hf.state_dict().items()}, prefix="")
    load_backbone(backbone, source)
    return backbone, source


def _first_feed_forward_inputs(hf, ids, mask):
    """|pre-activations| of the encoder's first feed-forward layer on real tokens."""
    captured = []
    feed_forward = hf.encoder.block[0].layer[-1].DenseReluDense
    first = getattr(feed_forward, "wi", None) or feed_forward.wi_0
    handle = first.register_forward_hook(lambda module, args, output: captured.append(output))
    with torch.no_grad():
        hf.encoder(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    handle.remove()
    return np.abs(captured[0].numpy()[mask.astype(bool)])


@pytest.mark.parametrize("layout", sorted(CONFIGS))
def test_encoder_and_decoder_states_match_transformers(layout):
    hf = perturbed_hf_model(transformers.T5Model, transformers.T5Config(**CONFIGS[layout]))
    backbone, source = _converted(hf)
    ids, mask = _batch(hf.config.vocab_size, [9, 5, 7], seed=0)
    decoder_ids, decoder_mask = _batch(hf.config.vocab_size, [4, 6, 2], seed=1)
    # T5's own initialisation already runs the feed-forward nonlinear (a third of its inputs beyond 1); larger
    # factors make the unscaled attention so sharp that float32 rounding alone moves the decoder by 1e-4.
    assert (_first_feed_forward_inputs(hf, ids, mask) > 1).mean() > 0.25, "activations too small to be nonlinear"
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                      decoder_input_ids=torch.tensor(decoder_ids, dtype=torch.long),
                      decoder_attention_mask=torch.tensor(decoder_mask))
    ours = backbone({"token_ids": ids, "padding_mask": mask, "decoder_token_ids": decoder_ids,
                     "decoder_padding_mask": decoder_mask})
    real, decoder_real = mask.astype(bool), decoder_mask.astype(bool)
    encoder_diff = np.abs(np.asarray(ours["sequence_output"]) - expected.encoder_last_hidden_state.numpy())[real]
    decoder_diff = np.abs(np.asarray(ours["decoder_sequence_output"]) - expected.last_hidden_state.numpy())[decoder_real]
    assert encoder_diff.max() <= TOLERANCE and decoder_diff.max() <= TOLERANCE, (encoder_diff.max(), decoder_diff.max())
    assert source.used == set(hf.state_dict())  # every tensor read, the stacks' copies of the table included


def test_the_encoder_alone_matches_t5_encoder_model():
    hf = perturbed_hf_model(transformers.T5EncoderModel, transformers.T5Config(**CONFIGS["v1.1"]))
    backbone, _ = _converted(hf, encoder_only=True)
    assert list(backbone.input) == ["token_ids", "padding_mask"] and list(backbone.output) == ["sequence_output"]
    ids, mask = _batch(hf.config.vocab_size, [3, 8], seed=2)
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    ours = np.asarray(backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    assert np.abs(ours - expected.last_hidden_state.numpy())[mask.astype(bool)].max() <= TOLERANCE


def test_t5_small_has_t5_small_s_parameter_count():
    config = transformers.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8)
    with shapes_only():
        assert T5Backbone(**backbone_kwargs(config.to_dict())).count_params() == 60_506_624


@pytest.mark.parametrize("change, words", [
    ({"feed_forward_proj": "gated-gelu-tanh"}, "not T5's form"),
    ({"feed_forward_proj": "swiglu"}, "not supported"),
    ({"d_kv": 0}, "d_kv must be a positive integer"),
])
def test_configs_transformers_would_not_read_as_t5_are_refused(change, words):
    config = dict(transformers.T5Config(**CONFIGS["v1.0"]).to_dict(), **change)
    with pytest.raises(CheckpointError, match=words):
        backbone_kwargs(config)


def test_a_backbone_survives_a_keras_round_trip_and_its_decoder_reads_no_later_target(tmp_path):
    import keras

    backbone = T5Backbone(**backbone_kwargs(transformers.T5Config(**CONFIGS["v1.1"]).to_dict()))
    ids, mask = _batch(120, [6, 4], seed=3)
    decoder_ids, decoder_mask = _batch(120, [5, 5], seed=4)
    inputs = {"token_ids": ids, "padding_mask": mask, "decoder_token_ids": decoder_ids,
              "decoder_padding_mask": decoder_mask}
    backbone.save(tmp_path / "t5.keras")
    restored = keras.saving.load_model(tmp_path / "t5.keras")
    for name, value in backbone(inputs).items():
        np.testing.assert_array_equal(np.asarray(restored(inputs)[name]), np.asarray(value))
    changed = dict(inputs, decoder_token_ids=np.concatenate([decoder_ids[:, :3], decoder_ids[:, 3:] + 1], axis=1))
    before, after = (np.asarray(backbone(batch)["decoder_sequence_output"]) for batch in (inputs, changed))
    np.testing.assert_array_equal(after[:, :3], before[:, :3])
    assert not np.allclose(after[:, 3:], before[:, 3:])
