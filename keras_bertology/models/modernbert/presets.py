"""ModernBERT presets (Warner et al., 2024; AnswerDotAI/ModernBERT).

Parameter counts are `ModernBertModel`'s: the token table and its norm, the
blocks and the final norm, no masked-LM head (with it, base has 149,655,232
and large 395,881,664). Norms carry a scale and no bias; no dense layer has a
bias. Every third layer from the first attends globally with rotary base
160,000, the others within a window of 128 tokens (64 on each side) with base
10,000. `max_positions` is the longest text served (rotary embeddings have no
table).
"""

from keras_bertology.models.family import publish_weights

_MODERNBERT = dict(vocab_size=50368, max_positions=8192, activation="gelu", layer_norm_epsilon=1e-5,
                   local_window=128, global_every=3, rotary_base=10000.0, global_rotary_base=160000.0)


def _preset(num_layers, hidden_size, num_heads, intermediate_size, params, description, **config):
    return {
        "config": dict(_MODERNBERT, num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                       intermediate_size=intermediate_size, **config),
        "params": params,
        "description": description,
    }


MODERNBERT_PRESETS = {
    "modernbert-tiny": _preset(3, 128, 2, 192, 6_865_792, "ModernBERT at BERT-Tiny width, 3 layers (one global), "
                               "window 32 (no published checkpoint; for quick runs)", local_window=32),
    "modernbert-base": _preset(22, 768, 12, 1152, 149_014_272, "ModernBERT-base: 22 layers, hidden 768, 12 heads, "
                               "GeGLU 1152, window 128, global every 3rd"),
    "modernbert-large": _preset(28, 1024, 16, 2624, 394_781_696, "ModernBERT-large: 28 layers, hidden 1024, "
                                "16 heads, GeGLU 2624, window 128, global every 3rd"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(MODERNBERT_PRESETS, {
    "modernbert-base": "answerdotai/ModernBERT-base",
    "modernbert-large": "answerdotai/ModernBERT-large",
})
