"""ELMo's building blocks: the character CNN and the projected LSTM against NumPy loops written from bilm-tf's
equations and against torch, and the scalar mix against its formula.

Weights are drawn at scale 1 (not the initialisers' small values) so that ReLUs cut, highway gates and LSTM
gates sit anywhere from shut to open, and the clips bite: a wrong gate or a missing bias shows.
"""

import numpy as np
import pytest
import keras
import torch
from keras import ops

from keras_bertology.layers import CharacterCNN, ProjectedLSTM, ScalarMix
from elmo_reference import torch_char_cnn, torch_lstm

TOLERANCE = 1e-5


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _randomize(layer, seed, scale=1.0):
    """Every weight of `layer` drawn from N(0, scale^2), biases included; returns them as NumPy arrays."""
    rng = np.random.default_rng(seed)
    layer.set_weights([(scale * rng.standard_normal(w.shape)).astype("float32") for w in layer.get_weights()])
    return [np.asarray(w) for w in layer.get_weights()]


# --- CharacterCNN -------------------------------------------------------------------------------------------

SMALL_CNN = dict(num_characters=30, char_embedding_dim=4, filters=((1, 3), (2, 4), (3, 5)), num_highway=2,
                 output_dim=6)


def _char_ids(seed, batch=2, length=4, max_chars=6):
    """Random ids with padding characters at the end of each token, and an all-padding last token per row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, SMALL_CNN["num_characters"], size=(batch, length, max_chars))
    chars = rng.integers(1, max_chars + 1, size=(batch, length))
    ids[np.arange(max_chars) >= chars[..., None]] = 0
    ids[:, -1] = 0
    return ids.astype("int32")


def _small_cnn(seed):
    cnn = CharacterCNN(**SMALL_CNN)
    cnn.build((None, None, 6))
    return cnn, _randomize(cnn, seed, scale=0.5)


def _cnn_weights(cnn):
    """(table, [(kernel [w, E, F], bias)], [((W_t, b_t), (W_g, b_g))], (W_p, b_p)) as NumPy arrays."""
    value = lambda variable: ops.convert_to_numpy(variable)  # noqa: E731
    convs = [(value(conv.kernel), value(conv.bias)) for conv in cnn.convolutions]
    highways = [((value(t.kernel), value(t.bias)), (value(g.kernel), value(g.bias)))
                for t, g in zip(cnn.highway_transforms, cnn.highway_gates)]
    return (value(cnn.char_embedding.embeddings), convs, highways,
            (value(cnn.projection.kernel), value(cnn.projection.bias)))


def _cnn_reference(ids, table, convs, highways, projection):
    """bilm-tf's CNN with explicit loops: each width slides over the characters, max, ReLU, highways, projection.
    Also returns the share of ReLU-cut features and the range of the highway gates, to show they bend."""
    chars = table[ids]  # [B, L, C, E]
    features, cut = [], []
    for kernel, bias in convs:
        width = kernel.shape[0]
        windows = [np.einsum("blwe,wef->blf", chars[:, :, start:start + width], kernel) + bias
                   for start in range(ids.shape[-1] - width + 1)]
        best = np.max(np.stack(windows), axis=0)
        cut.append(best < 0)
        features.append(np.maximum(best, 0.0))
    x = np.concatenate(features, axis=-1)
    gates = []
    for (w_t, b_t), (w_g, b_g) in highways:
        gate = _sigmoid(x @ w_g + b_g)
        gates.append(gate)
        x = gate * np.maximum(x @ w_t + b_t, 0.0) + (1.0 - gate) * x
    w_p, b_p = projection
    return x @ w_p + b_p, np.concatenate([c.ravel() for c in cut]).mean(), np.concatenate(gates)


def test_character_cnn_default_has_elmos_parameter_count():
    cnn = CharacterCNN()
    cnn.build((None, None, 50))
    embedding, convolutions, highways, projection = 262 * 16, 199_168, 16_785_408, 1_049_088
    assert cnn.char_embedding.count_params() == embedding
    assert sum(conv.count_params() for conv in cnn.convolutions) == convolutions
    assert sum(dense.count_params() for dense in cnn.highway_transforms + cnn.highway_gates) == highways
    assert cnn.projection.count_params() == projection
    assert cnn.count_params() == embedding + convolutions + highways + projection
    assert cnn.num_features == 2048
    # The highway gates start at -2: a new layer mostly carries its input.
    assert all(np.all(ops.convert_to_numpy(gate.bias) == -2.0) for gate in cnn.highway_gates)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_character_cnn_starts_as_bilm_tf_does(activation):
    """Characters uniform in +-1 (std 1/sqrt(3)); the filters uniform in +-0.05 under ReLU, normal with
    variance 1 / fan-in under tanh; the highways and projection normal with variance 1 / fan-in; biases 0 but
    the gates' -2. Sample sizes: 4,192 characters (a std's relative standard error 0.7%: 0.02 is 5 of it),
    >= 20,480 weights a kernel (0.5%: 2% is 4)."""
    cnn = CharacterCNN(activation=activation)
    cnn.build((None, None, 50))
    table = ops.convert_to_numpy(cnn.char_embedding.embeddings)
    assert table.min() >= -1.0 and table.max() <= 1.0 and abs(table.std() - 3 ** -0.5) < 0.02
    filters = [ops.convert_to_numpy(conv.kernel) for conv in cnn.convolutions[4:]]
    if activation == "relu":
        assert all(np.abs(kernel).max() <= 0.05 and kernel.std() == pytest.approx(0.05 / 3 ** 0.5, rel=0.02)
                   for kernel in filters)
    else:
        assert all(kernel.std() == pytest.approx((kernel.shape[0] * kernel.shape[1]) ** -0.5, rel=0.02)
                   for kernel in filters)
    kernels = [(dense.kernel, dense.kernel.shape[0])
               for dense in (*cnn.highway_transforms, *cnn.highway_gates, cnn.projection)]
    for kernel, fan_in in kernels:
        assert ops.convert_to_numpy(kernel).std() == pytest.approx(fan_in ** -0.5, rel=0.02), kernel.path
    biases = [conv.bias for conv in cnn.convolutions] + [dense.bias for dense in (*cnn.highway_transforms, cnn.projection)]
    assert all(not np.any(ops.convert_to_numpy(bias)) for bias in biases)


def test_character_cnn_matches_a_numpy_loop():
    cnn, _ = _small_cnn(seed=0)
    ids = _char_ids(seed=1)
    expected, cut_share, gates = _cnn_reference(ids, *_cnn_weights(cnn))
    assert 0.1 < cut_share < 0.9  # the ReLU after the max cuts some features and keeps others
    assert gates.min() < 0.1 and gates.max() > 0.9  # highway gates from nearly shut to nearly open
    got = ops.convert_to_numpy(cnn(ids))
    assert np.abs(got - expected).max() <= TOLERANCE
    assert ops.convert_to_numpy(cnn.compute_mask(ids)).tolist() == [[True, True, True, False]] * 2


def test_character_cnn_matches_torch():
    cnn, _ = _small_cnn(seed=2)
    ids = _char_ids(seed=3)
    assert np.abs(ops.convert_to_numpy(cnn(ids)) - torch_char_cnn(cnn, ids)).max() <= TOLERANCE


# --- ProjectedLSTM ------------------------------------------------------------------------------------------

INPUT_DIM, UNITS, PROJECTION = 5, 7, 4


def _lstm_pair(seed, **kwargs):
    """A forward and a backward layer sharing one set of weights drawn at scale 1 (gates saturate)."""
    forward = ProjectedLSTM(UNITS, PROJECTION, return_state=True, **kwargs)
    backward = ProjectedLSTM(UNITS, PROJECTION, go_backwards=True, return_state=True, **kwargs)
    forward.build((None, None, INPUT_DIM))
    backward.build((None, None, INPUT_DIM))
    weights = _randomize(forward, seed)
    backward.set_weights(weights)
    return forward, backward, weights


def _lstm_reference(x, kernel, bias, projection, forget_bias=1.0, cell_clip=None, projection_clip=None):
    """TF 1's LSTMCell step by step over one unpadded row x [T, D]: outputs [T, P], final (m, c), and the
    largest |c| and |m| before clipping."""
    m, c = np.zeros(projection.shape[1]), np.zeros(projection.shape[0])
    outputs, c_peak, m_peak = [], 0.0, 0.0
    for x_t in x:
        i, j, f, o = np.split(np.concatenate([x_t, m]) @ kernel + bias, 4)
        c = _sigmoid(f + forget_bias) * c + _sigmoid(i) * np.tanh(j)
        c_peak = max(c_peak, np.abs(c).max())
        if cell_clip is not None:
            c = np.clip(c, -cell_clip, cell_clip)
        m = (_sigmoid(o) * np.tanh(c)) @ projection
        m_peak = max(m_peak, np.abs(m).max())
        if projection_clip is not None:
            m = np.clip(m, -projection_clip, projection_clip)
        outputs.append(m)
    return np.array(outputs), (m, c), (c_peak, m_peak)


def _padded_batch(seed, lengths, length=6):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(lengths), length, INPUT_DIM)).astype("float32")
    mask = np.arange(length)[None, :] < np.array(lengths)[:, None]
    return x, mask


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
def test_projected_lstm_matches_torch_both_directions():
    forward, backward, (kernel, bias, projection) = _lstm_pair(seed=4)
    lengths = [6, 4, 1]
    x, mask = _padded_batch(seed=5, lengths=lengths)
    assert np.abs(x @ kernel[:INPUT_DIM] + bias).max() > 5  # gates driven into saturation
    reference = torch_lstm(kernel, bias, projection)
    worst = 0.0
    for layer in (forward, backward):
        outputs, m, c = (ops.convert_to_numpy(part) for part in layer(x, mask=mask))
        for row, length in enumerate(lengths):
            tokens = x[row, :length] if layer is forward else x[row, :length][::-1]
            with torch.no_grad():
                expected, (m_expected, c_expected) = reference(torch.from_numpy(tokens.copy())[None])
            expected = expected[0].numpy() if layer is forward else expected[0].numpy()[::-1]
            worst = max(worst, np.abs(outputs[row, :length] - expected).max(),
                        np.abs(m[row] - m_expected[0, 0].numpy()).max(), np.abs(c[row] - c_expected[0, 0].numpy()).max())
            assert np.all(outputs[row, length:] == 0.0)
    assert worst <= TOLERANCE


def test_projected_lstm_clips_like_the_numpy_reference():
    cell_clip, projection_clip = 0.8, 0.5
    forward, backward, (kernel, bias, projection) = _lstm_pair(
        seed=6, cell_clip=cell_clip, projection_clip=projection_clip)
    lengths = [6, 3]
    x, mask = _padded_batch(seed=7, lengths=lengths)
    peaks = np.zeros(2)
    for layer in (forward, backward):
        outputs, m, c = (ops.convert_to_numpy(part) for part in layer(x, mask=mask))
        for row, length in enumerate(lengths):
            tokens = x[row, :length] if layer is forward else x[row, :length][::-1]
            expected, (m_expected, c_expected), row_peaks = _lstm_reference(
                tokens, kernel, bias, projection, cell_clip=cell_clip, projection_clip=projection_clip)
            expected = expected if layer is forward else expected[::-1]
            peaks = np.maximum(peaks, row_peaks)
            assert np.abs(outputs[row, :length] - expected).max() <= TOLERANCE
            assert np.abs(m[row] - m_expected).max() <= TOLERANCE and np.abs(c[row] - c_expected).max() <= TOLERANCE
    assert peaks[0] > 1.2 * cell_clip and peaks[1] > 1.2 * projection_clip  # both clips cut in this data


def test_projected_lstm_ignores_what_the_padding_holds():
    forward, backward, _ = _lstm_pair(seed=8, cell_clip=3.0, projection_clip=3.0)
    x, mask = _padded_batch(seed=9, lengths=[6, 2])
    junk = x.copy()
    junk[1, 2:] = 100.0 * np.random.default_rng(10).standard_normal(junk[1, 2:].shape)
    for layer in (forward, backward):
        padded = [ops.convert_to_numpy(part) for part in layer(junk, mask=mask)]
        alone = [ops.convert_to_numpy(part) for part in layer(x[1:, :2])]
        assert np.abs(padded[0][1, :2] - alone[0][0]).max() <= TOLERANCE
        assert np.all(padded[0][1, 2:] == 0.0)
        for state, state_alone in zip(padded[1:], alone[1:]):  # the final state is the last real token's
            assert np.abs(state[1] - state_alone[0]).max() <= TOLERANCE


def test_projected_lstm_carries_its_state_across_batches():
    forward, backward, _ = _lstm_pair(seed=11)
    x, _ = _padded_batch(seed=12, lengths=[6])
    whole = ops.convert_to_numpy(forward(x)[0])
    _, m, c = forward(x[:, :4])
    rest = ops.convert_to_numpy(forward(x[:, 4:], initial_state=(m, c))[0])
    assert np.abs(rest - whole[:, 4:]).max() <= TOLERANCE
    # Backward: the last tokens first, then the earlier batch starts from their state.
    whole = ops.convert_to_numpy(backward(x)[0])
    _, m, c = backward(x[:, 4:])
    first = ops.convert_to_numpy(backward(x[:, :4], initial_state=(m, c))[0])
    assert np.abs(first - whole[:, :4]).max() <= TOLERANCE


def test_projected_lstm_traces_with_an_unknown_length():
    forward, backward, _ = _lstm_pair(seed=13, cell_clip=3.0)
    layer = ProjectedLSTM(UNITS, PROJECTION, cell_clip=3.0, go_backwards=True)
    layer.build((None, None, INPUT_DIM))
    layer.set_weights(backward.get_weights())
    if keras.config.backend() == "tensorflow":
        import tensorflow as tf

        run = tf.function(lambda x, mask: layer(x, mask=mask), input_signature=[
            tf.TensorSpec((None, None, INPUT_DIM), "float32"), tf.TensorSpec((None, None), "bool")])
    else:
        import jax

        run = jax.jit(lambda x, mask: layer(x, mask=mask))
    for lengths, length in (([5, 2], 5), ([3], 3)):
        x, mask = _padded_batch(seed=14, lengths=lengths, length=length)
        traced = ops.convert_to_numpy(run(ops.convert_to_tensor(x), ops.convert_to_tensor(mask)))
        assert np.abs(traced - ops.convert_to_numpy(layer(x, mask=mask))).max() <= TOLERANCE


# --- ScalarMix ----------------------------------------------------------------------------------------------

def test_scalar_mix_starts_as_the_mean():
    layers = [np.random.default_rng(seed).standard_normal((2, 3, 4)).astype("float32") for seed in range(3)]
    mixed = ops.convert_to_numpy(ScalarMix(num_layers=3)(layers))
    assert np.abs(mixed - np.mean(layers, axis=0)).max() <= TOLERANCE


def test_scalar_mix_matches_its_formula():
    rng = np.random.default_rng(15)
    layers = [rng.standard_normal((2, 3, 4)).astype("float32") for _ in range(3)]
    mix = ScalarMix(num_layers=3)
    mix.build([layer.shape for layer in layers])
    w, gamma = rng.standard_normal(3).astype("float32"), np.float32(1.7)
    mix.scalar_weights.assign(w)
    mix.gamma.assign(gamma)
    weights = np.exp(w) / np.exp(w).sum()
    expected = gamma * sum(weight * layer for weight, layer in zip(weights, layers))
    assert np.abs(ops.convert_to_numpy(mix(layers)) - expected).max() <= TOLERANCE
    assert len(mix.trainable_weights) == 2


# --- Serialization ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layer", [
    CharacterCNN(**SMALL_CNN, activation="tanh", name="cnn"),
    ProjectedLSTM(8, 3, cell_clip=3.0, projection_clip=2.0, forget_bias=0.5, go_backwards=True, return_state=True),
    ScalarMix(num_layers=4),
], ids=lambda layer: type(layer).__name__)
def test_configs_round_trip(layer):
    config = layer.get_config()
    assert type(layer).from_config(config).get_config() == config


def test_a_tiny_elmo_round_trips_through_a_keras_file(tmp_path):
    """Char ids -> CNN -> forward and backward LSTMs (the CNN's mask reaches them) -> scalar mix, saved and
    reloaded: the same outputs."""
    char_ids = keras.Input((None, 6), dtype="int32")
    tokens = CharacterCNN(**SMALL_CNN, name="cnn")(char_ids)
    width = SMALL_CNN["output_dim"]
    forward = ProjectedLSTM(UNITS, width, cell_clip=3.0, projection_clip=3.0, name="forward")(tokens)
    backward = ProjectedLSTM(UNITS, width, cell_clip=3.0, projection_clip=3.0, go_backwards=True,
                             name="backward")(tokens)
    both = keras.layers.Concatenate()([forward, backward])  # ELMo's layers: 0 = [x; x], 1 = [fwd; bwd]
    model = keras.Model(char_ids, ScalarMix(num_layers=2, name="mix")([keras.layers.Concatenate()([tokens, tokens]),
                                                                       both]))
    ids = _char_ids(seed=16)
    expected = ops.convert_to_numpy(model(ids))
    model.save(tmp_path / "elmo.keras")
    reloaded = keras.saving.load_model(tmp_path / "elmo.keras")
    assert np.array_equal(ops.convert_to_numpy(reloaded(ids)), expected)
    # The padding token's (last) outputs of the LSTMs are zeros: the CNN's mask reached them.
    lstm_outputs = keras.Model(char_ids, both)(ids)
    assert np.all(ops.convert_to_numpy(lstm_outputs)[:, -1] == 0.0)


def test_sampled_softmax_scores_the_target_and_the_drawn_words_less_their_log_expected_counts():
    from keras_bertology.layers.sampled_softmax import SampledSoftmax

    layer = SampledSoftmax(vocab_size=20, num_samples=5, seed=0)
    rng = np.random.default_rng(0)
    states = rng.normal(size=(2, 3, 4)).astype("float32")
    targets = np.array([[1, 7, 19], [0, 3, 3]], "int32")
    layer.build(states.shape)
    layer.kernel.assign(rng.normal(size=(4, 20)))
    layer.bias.assign(rng.normal(size=20))
    logits = states @ ops.convert_to_numpy(layer.kernel) + ops.convert_to_numpy(layer.bias)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(states)), logits, atol=1e-5)
    q = np.log((np.arange(20) + 2) / (np.arange(20) + 1)) / np.log(21)  # log-uniform, sums to 1
    assert q.sum() == pytest.approx(1.0)
    drawn = np.array([3, 0, 12, 3, 7], "int32")
    scores = ops.convert_to_numpy(layer.sampled_scores(states, targets, drawn))
    expected_true = np.take_along_axis(logits, targets[..., None], -1)[..., 0] - np.log(5 * q[targets])
    np.testing.assert_allclose(scores[..., 0], expected_true, atol=1e-5)
    expected_drawn = logits[..., drawn] - np.log(5 * q[drawn])
    hits = targets[..., None] == drawn
    np.testing.assert_allclose(scores[..., 1:][~hits], expected_drawn[~hits], atol=1e-5)
    assert np.all(scores[..., 1:][hits] == -1e9) and hits.sum() == 6  # 7 once, 0 once, each 3 twice
    # Training draws 5 and reads the scores against column 0; outside training, the full logits and the ids.
    sampled, labels = layer(states, targets, training=True)
    assert sampled.shape == (2, 3, 6) and not np.any(ops.convert_to_numpy(labels))
    full, ids = layer(states, targets)
    np.testing.assert_allclose(ops.convert_to_numpy(full), logits, atol=1e-5)
    np.testing.assert_array_equal(ops.convert_to_numpy(ids), targets)


def test_sampled_softmax_draws_ids_log_uniformly():
    """400,000 draws over 10 ids: each id's count within 5 standard errors (sqrt(n p (1 - p)) <= 316) of n p."""
    from keras_bertology.layers.sampled_softmax import SampledSoftmax, log_uniform_log_probabilities

    layer = SampledSoftmax(vocab_size=10, num_samples=400_000, seed=3)
    states, targets = np.zeros((1, 1, 2), "float32"), np.full((1, 1), 9, "int32")
    layer.build(states.shape)
    layer.kernel.assign(np.zeros((2, 10)))
    scores = ops.convert_to_numpy(layer(states, targets, training=True)[0])[0, 0, 1:]
    # Zero weights: a drawn id's score is -log(n q(id)), so the draws are read back from their scores.
    p = np.exp(ops.convert_to_numpy(log_uniform_log_probabilities(10)))
    drawn = [int(np.argmin(np.abs(-np.log(400_000 * p) - score))) for score in scores[scores > -1e8]]
    counts = np.bincount(drawn, minlength=10)
    counts[9] += int(np.sum(scores <= -1e8))  # the target's own draws were scored out
    n = 400_000
    assert np.all(np.abs(counts - n * p) <= 5 * np.sqrt(n * p * (1 - p))), (counts, n * p)
