"""Injectable, factorized embeddings: two encoders on one set of embedding variables (ELECTRA's sharing)."""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.layers import TokenPositionSegmentEmbedding
from keras_bertology.models import BertBackbone

VOCAB, WIDTH = 50, 8


def _inputs():
    ids = np.random.default_rng(0).integers(1, VOCAB, (2, 6)).astype("int32")
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}


def _pair():
    shared = TokenPositionSegmentEmbedding(VOCAB, WIDTH, max_positions=16, num_segments=2, name="embeddings")
    small = BertBackbone(VOCAB, 1, 1, 16, 32, max_positions=16, embedding_size=WIDTH, embeddings=shared)
    large = BertBackbone(VOCAB, 2, 2, 32, 64, max_positions=16, embedding_size=WIDTH, embeddings=shared)
    return shared, small, large


def test_two_encoders_share_one_set_of_embedding_variables():
    shared, small, large = _pair()
    assert small.token_embedding is large.token_embedding is shared.token_embedding
    both = {id(v) for v in small.weights} & {id(v) for v in large.weights}
    assert both == {id(v) for v in shared.weights} and len(both) == 5  # token, position, segment, LN gamma/beta
    assert small.get_layer("embedding_projection").kernel.shape == (WIDTH, 16)


def test_the_shared_table_gets_the_sum_of_both_gradients():
    shared, small, large = _pair()
    x = _inputs()
    table = shared.token_embedding.embeddings

    def gradient(*models):
        with tf.GradientTape() as tape:
            loss = sum(tf.reduce_sum(m(x)["sequence_output"] ** 2) for m in models)
        return tf.convert_to_tensor(tape.gradient(loss, table)).numpy()  # IndexedSlices -> dense

    np.testing.assert_allclose(gradient(small, large), gradient(small) + gradient(large), rtol=1e-5, atol=1e-6)
    assert np.abs(gradient(small)).max() > 0 and np.abs(gradient(large)).max() > 0


def test_mismatched_shared_embeddings_are_refused():
    shared = TokenPositionSegmentEmbedding(VOCAB, WIDTH, max_positions=16, num_segments=2)
    with pytest.raises(ValueError, match="shared embeddings"):
        BertBackbone(VOCAB, 1, 1, 16, 32, max_positions=16, embedding_size=12, embeddings=shared)
    with pytest.raises(ValueError, match="shared embeddings"):
        BertBackbone(VOCAB + 1, 1, 1, 16, 32, max_positions=16, embedding_size=WIDTH, embeddings=shared)


def test_factorized_embeddings_count_like_keras_hub_electra():
    """ELECTRA-small's discriminator: 128-wide embeddings projected to 256, 13,548,800 parameters."""
    ours = BertBackbone(30522, 12, 4, 256, 1024, embedding_size=128)
    theirs = keras_hub.models.ElectraBackbone(vocab_size=30522, num_layers=12, num_heads=4, hidden_dim=256,
                                              embedding_dim=128, intermediate_dim=1024, max_sequence_length=512)
    assert ours.count_params() == theirs.count_params() == 13_548_800
    keras.backend.clear_session()


def test_factorized_backbone_round_trips(tmp_path):
    model = BertBackbone(VOCAB, 1, 2, 16, 32, max_positions=16, embedding_size=WIDTH)
    model.save(tmp_path / "m.keras")
    restored = keras.saving.load_model(tmp_path / "m.keras")
    x = _inputs()
    np.testing.assert_array_equal(restored.predict(x, verbose=0)["sequence_output"],
                                  model.predict(x, verbose=0)["sequence_output"])
