"""ALBERT architecture presets (google-research/albert v2 sizes).

Parameter counts include the embeddings (30,000-token SentencePiece
vocabulary, E = 128), the E -> H projection, the shared layers and the tanh
pooler, and exclude the MLM and SOP heads. Pretraining on a corpus with its
own vocabulary replaces `vocab_size`.
"""

from keras_bertology.models.family import publish_weights

_ALBERT = dict(vocab_size=30000, embedding_size=128, max_positions=512, num_segments=2, num_groups=1,
               inner_group_num=1, activation="gelu_approximate", layer_norm_epsilon=1e-12)


def _preset(num_layers, hidden_size, num_heads, params, description):
    return {
        "config": dict(_ALBERT, num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                       intermediate_size=4 * hidden_size),
        "params": params,
        "description": description,
    }


ALBERT_PRESETS = {
    "albert-tiny": _preset(4, 128, 2, 4_137_344, "ALBERT at BERT-Tiny width, 4 shared layers (for quick runs)"),
    "albert-base": _preset(12, 768, 12, 11_683_584, "ALBERT-Base: 12 shared layers, hidden 768, E 128"),
    "albert-large": _preset(24, 1024, 16, 17_683_968, "ALBERT-Large: 24 shared layers, hidden 1024, E 128"),
    "albert-xlarge": _preset(24, 2048, 16, 58_724_864, "ALBERT-xLarge: 24 shared layers, hidden 2048, E 128"),
    "albert-xxlarge": _preset(12, 4096, 64, 222_595_584, "ALBERT-xxLarge: 12 shared layers, hidden 4096, E 128"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(ALBERT_PRESETS, {
    "albert-base": "albert/albert-base-v2",
    "albert-large": "albert/albert-large-v2",
    "albert-xlarge": "albert/albert-xlarge-v2",
    "albert-xxlarge": "albert/albert-xxlarge-v2",
})
