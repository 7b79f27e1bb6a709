"""ELECTRA discriminator presets (google-research/electra sizes), uncased 30,522-token vocabulary.

The discriminator is BERT's encoder with E-wide embeddings projected to H
when E < H; it has no pooler (nothing trains one). The published counts
(keras-hub's, which add a pooler) are the ones below plus H x H + H. The
generator is sized from the discriminator by `generator_fraction` (the
released small generator is as wide as its discriminator; base 1/3, large 1/4).
"""

from keras_bertology.models.family import publish_weights

_ELECTRA = dict(vocab_size=30522, max_positions=512, num_segments=2, use_pooler=False, layer_norm_epsilon=1e-12)


def _preset(num_layers, hidden, embedding, fraction, params, description):
    config = dict(_ELECTRA, num_layers=num_layers, hidden_size=hidden, num_heads=hidden // 64,
                  intermediate_size=4 * hidden, embedding_size=embedding)
    return {"config": config, "pretrainer": {"generator_fraction": fraction}, "params": params,
            "description": description}


ELECTRA_PRESETS = {
    "electra-tiny": _preset(2, 128, 64, 0.5, 2_391_296,
                            "ELECTRA at BERT-Tiny depth, embeddings 64 (no published checkpoint; for quick runs)"),
    "electra-small": _preset(12, 256, 128, 1.0, 13_483_008,
                             "ELECTRA-Small discriminator: 12 layers, hidden 256, embeddings 128"),
    "electra-base": _preset(12, 768, 768, 1 / 3, 108_891_648,
                            "ELECTRA-Base discriminator: 12 layers, hidden 768 (generator 256)"),
    "electra-large": _preset(24, 1024, 1024, 1 / 4, 334_092_288,
                             "ELECTRA-Large discriminator: 24 layers, hidden 1024 (generator 256)"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(ELECTRA_PRESETS, {
    "electra-small": "google/electra-small-discriminator",
    "electra-base": "google/electra-base-discriminator",
    "electra-large": "google/electra-large-discriminator",
})
