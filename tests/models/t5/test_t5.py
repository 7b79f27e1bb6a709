"""T5's backbone against transformers' (fp32, 1e-5): the position buckets, the encoder's states and the
decoder's under teacher forcing, for v1.0 and v1.1 layouts, a head width other than d_model / heads, fewer
buckets and an odd max distance, and T5's exact parameter count."""

import keras
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


def _conditional_generation(config):
    """(transformers model, its tensors, tensors -> our converted pretrainer)."""
    hf = perturbed_hf_model(transformers.T5ForConditionalGeneration, config)
    with torch.no_grad():  # T5's table (stddev 1) makes logits of tens without v1.0's scale: a tenth of it
        hf.shared.weight.mul_(0.1)
    weights = {name: value.detach().numpy() for name, value in hf.state_dict().items()}
    return hf, weights, lambda weights: _pretrainer(weights, hf.config.to_dict())


def _pretrainer(weights, config):
    from keras_bertology.models.t5 import T5Pretrainer
    from keras_bertology.models.t5.convert import load_lm_head, pretrainer_kwargs

    source = WeightSource(weights, prefix="")
    backbone = T5Backbone(**backbone_kwargs(config))
    load_backbone(backbone, source)
    pretrainer = T5Pretrainer(backbone, **pretrainer_kwargs(config, source))
    load_lm_head(pretrainer, source)
    return pretrainer


@pytest.mark.parametrize("layout, tie", [("v1.0", None), ("v1.1", False)])
def test_teacher_forced_logits_match_t5_for_conditional_generation(layout, tie):
    """v1.0 scales the states before the tied head; a config with tie_word_embeddings false (v1.1's) does not."""
    options = {} if tie is None else {"tie_word_embeddings": tie}
    hf, weights, convert = _conditional_generation(transformers.T5Config(**CONFIGS[layout], **options))
    pretrainer = convert(weights)
    assert pretrainer.scale_logits == (layout == "v1.0") and pretrainer.tie_embeddings
    ids, mask = _batch(hf.config.vocab_size, [7, 4], seed=5)
    targets, target_mask = _batch(hf.config.vocab_size, [5, 3], seed=6)
    decoder_ids = np.pad(targets[:, :-1], [(0, 0), (1, 0)])  # shifted right after the start token (0)
    decoder_mask = np.pad(target_mask[:, :-1], [(0, 0), (1, 0)], constant_values=1)
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                      decoder_input_ids=torch.tensor(decoder_ids, dtype=torch.long),
                      decoder_attention_mask=torch.tensor(decoder_mask)).logits.numpy()
    logits = np.asarray(pretrainer({"token_ids": ids, "padding_mask": mask, "decoder_token_ids": decoder_ids,
                                    "decoder_padding_mask": decoder_mask})["spans"])
    real = decoder_mask.astype(bool)
    assert np.abs(logits - expected)[real].max() <= TOLERANCE, np.abs(logits - expected)[real].max()
    # T5 v1.1's own head: a saved lm_head.weight unlike the table is imported untied, the states unscaled.
    head = np.random.default_rng(7).normal(scale=0.1, size=weights["shared.weight"].shape).astype("float32")
    untied = convert(dict(weights, **{"lm_head.weight": head}))
    assert not untied.tie_embeddings
    states = hf.decoder(
        input_ids=torch.tensor(decoder_ids, dtype=torch.long), attention_mask=torch.tensor(decoder_mask),
        encoder_hidden_states=hf.encoder(input_ids=torch.tensor(ids, dtype=torch.long),
                                         attention_mask=torch.tensor(mask)).last_hidden_state,
        encoder_attention_mask=torch.tensor(mask)).last_hidden_state.detach().numpy()
    scale = hf.config.d_model ** -0.5 if untied.scale_logits else 1.0
    own = np.asarray(untied({"token_ids": ids, "padding_mask": mask, "decoder_token_ids": decoder_ids,
                             "decoder_padding_mask": decoder_mask})["spans"])
    assert np.abs(own - states * scale @ head.T)[real].max() <= TOLERANCE


def test_span_corruption_trains_the_pretrainer():
    """The masker's features feed the pretrainer as its objective declares; the loss falls on repeated text."""
    import keras

    from keras_bertology.data.span_corruption import SpanCorruptionMasker
    from keras_bertology.models.t5 import T5Pretrainer

    keras.utils.set_random_seed(0)
    backbone = T5Backbone(vocab_size=64, num_layers=1, num_heads=2, hidden_size=32, intermediate_size=64,
                          dropout=0.0)
    model = T5Pretrainer(backbone)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    masker = SpanCorruptionMasker(vocab_size=64, eos_id=1, inputs_length=24)
    rows = np.tile(np.arange(2, 2 + masker.tokens_length, dtype="int32") % 40 + 2, (8, 1))
    batches = [{name: np.asarray(value) for name, value in masker({"token_ids": rows}, seed=[0, step]).items()}
               for step in range(60)]  # the data stage's tensors as arrays, which JAX takes too
    losses = [model.train_on_batch(*model.split_features(batch), return_dict=True)["loss"] for batch in batches]
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5]), losses


@pytest.mark.parametrize("name", ["t5-tiny", "t5-small", pytest.param("t5-base", marks=pytest.mark.slow),
                                  "t5-v1_1-small", pytest.param("t5-v1_1-base", marks=pytest.mark.slow)])
def test_presets_count_the_published_parameters(name):
    """t5-small 60,506,624 (tied head), t5-v1_1-small 76,961,152 (its own head), as transformers counts them."""
    from keras_bertology.models.t5 import T5Pretrainer
    from keras_bertology.models.t5.presets import T5_PRESETS

    preset = T5_PRESETS[name]
    with shapes_only():
        model = T5Pretrainer(T5Backbone(**preset["config"]), **preset["pretrainer"])
    assert model.count_params() == preset["params"]


def test_the_encoder_alone_serves_and_fine_tunes_with_the_encoders_weights():
    """`text_encoder` (serving's, the same layers) and `encoder_backbone` (fine-tuning's, a T5EncoderModel-like
    backbone of its own with copied weights) give the full model's encoder states."""
    from keras_bertology.models.task_models import SequenceClassifier

    backbone = T5Backbone(vocab_size=60, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=24,
                          num_decoder_layers=1, dropout=0.0)
    ids, mask = _batch(60, [6, 3], seed=2)
    expected = np.asarray(backbone({"token_ids": ids, "padding_mask": mask, "decoder_token_ids": ids[:, :2],
                                    "decoder_padding_mask": mask[:, :2]})["sequence_output"])
    encoder = backbone.encoder_backbone()
    assert encoder.num_decoder_layers == 0 and sorted(encoder.input) == ["padding_mask", "token_ids"]
    assert encoder.count_params() < backbone.count_params()
    for model in (encoder, backbone.text_encoder()):
        np.testing.assert_array_equal(np.asarray(model({"token_ids": ids, "padding_mask": mask})["sequence_output"]),
                                      expected)
    assert tuple(SequenceClassifier(encoder, 3, summary="mean")({"token_ids": ids, "padding_mask": mask}).shape) \
        == (2, 3)


@pytest.mark.parametrize("layout", ["v1.0", "v1.1"])
def test_decoding_one_position_a_step_gives_the_teacher_forced_logits(layout):
    """`decode_step` from the key/value cache (generation's) equals the whole-sequence decoder at every
    position, past the max distance of the buckets."""
    from keras_bertology.models.t5 import T5Pretrainer

    v1_0 = layout == "v1.0"
    keras.utils.set_random_seed(11)  # the same weights whichever tests ran before in this process
    backbone = T5Backbone(vocab_size=50, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=24,
                          head_dim=12, num_decoder_layers=3, num_buckets=6, max_distance=9, dropout=0.0,
                          activation="relu" if v1_0 else "gelu_approximate", gated_feed_forward=not v1_0)
    pretrainer = T5Pretrainer(backbone, tie_embeddings=v1_0, scale_logits=v1_0)
    ids, mask = _batch(50, [7, 4], seed=3)
    decoder_ids = np.random.default_rng(4).integers(0, 50, (2, 12)).astype("int32")
    full = np.asarray(pretrainer({"token_ids": ids, "padding_mask": mask, "decoder_token_ids": decoder_ids,
                                  "decoder_padding_mask": np.ones_like(decoder_ids)})["spans"])
    states = backbone.text_encoder()({"token_ids": ids, "padding_mask": mask})["sequence_output"]
    encoder_heads = pretrainer.start_decoding(states)
    past = [(key[:, :0], value[:, :0]) for key, value in encoder_heads]
    # Two float32 computations of one function in other orders (a cache grown a key at a time against one
    # masked attention): their gap grows with the logits' size, 1.5e-7 to 5e-7 of the largest over twelve
    # seeds on both backends, so the bound is 2e-6 of it (v1.1's untied logits reach about 20, where an
    # absolute 1e-5 failed on JAX); a wrong position or cached key moves logits by tenths.
    bound = 2e-6 * np.abs(full).max()
    for step in range(decoder_ids.shape[1]):
        logits, past = pretrainer.decode_step(decoder_ids[:, step:step + 1], step, past, encoder_heads, mask)
        np.testing.assert_allclose(np.asarray(logits), full[:, step], atol=bound, err_msg=f"position {step}")
    assert past[0][0].shape[1] == decoder_ids.shape[1]
