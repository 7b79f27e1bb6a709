"""GPT-2 architecture presets (OpenAI's sizes).

Parameter counts cover the token and position tables (50,257 tokens, 1,024
positions), the pre-LN blocks and the final LayerNorm; the LM head is tied to
the token table, so it adds nothing (GPT2LMHeadModel counts the same).
"""

from keras_bertology.models.family import publish_weights

_GPT2 = dict(vocab_size=50257, max_positions=1024, activation="gelu_approximate", layer_norm_epsilon=1e-5)


def _preset(num_layers, hidden_size, params, description):
    return {"config": dict(_GPT2, num_layers=num_layers, hidden_size=hidden_size, num_heads=hidden_size // 64,
                           intermediate_size=4 * hidden_size),
            "params": params, "description": description}


GPT_PRESETS = {
    "gpt-tiny": _preset(2, 128, 6_960_768, "GPT-2 at BERT-Tiny size (no published checkpoint; for quick runs)"),
    "gpt2": _preset(12, 768, 124_439_808, "GPT-2 small: 12 layers, hidden 768, 12 heads"),
    "gpt2-medium": _preset(24, 1024, 354_823_168, "GPT-2 medium: 24 layers, hidden 1024, 16 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(GPT_PRESETS, {
    "gpt2": "openai-community/gpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
})
