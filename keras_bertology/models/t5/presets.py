"""T5 architecture presets (Raffel et al.'s sizes, and T5 v1.1's).

Counts are the pretrainer's at T5's 32,128-entry table (32,100 SentencePiece
pieces with their 100 sentinels, padded): both stacks, the shared table, and
v1.1's own LM head (v1.0 ties its head to the table, so it adds nothing).
"""

from keras_bertology.models.family import publish_weights

_V1_0 = dict(vocab_size=32128, head_dim=64, activation="relu", gated_feed_forward=False)
_V1_1 = dict(vocab_size=32128, head_dim=64, activation="gelu_approximate", gated_feed_forward=True)
_TIED = dict(tie_embeddings=True, scale_logits=True)
_OWN_HEAD = dict(tie_embeddings=False, scale_logits=False)


def _preset(layout, head, num_layers, hidden_size, num_heads, intermediate_size, params, description):
    return {"config": dict(layout, num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                           intermediate_size=intermediate_size),
            "pretrainer": head, "params": params, "description": description}


T5_PRESETS = {
    "t5-tiny": _preset(dict(_V1_0, head_dim=32), _TIED, 2, 128, 4, 512, 5_031_680,
                       "T5 v1.0 at BERT-Tiny size (no published checkpoint; for quick runs)"),
    "t5-small": _preset(_V1_0, _TIED, 6, 512, 8, 2048, 60_506_624, "T5 small: 6 + 6 layers, d_model 512, 8 heads"),
    "t5-base": _preset(_V1_0, _TIED, 12, 768, 12, 3072, 222_903_552,
                       "T5 base: 12 + 12 layers, d_model 768, 12 heads"),
    "t5-v1_1-small": _preset(_V1_1, _OWN_HEAD, 8, 512, 6, 1024, 76_961_152,
                             "T5 v1.1 small: gated GELU, own LM head, 8 + 8 layers, d_model 512, 6 heads"),
    "t5-v1_1-base": _preset(_V1_1, _OWN_HEAD, 12, 768, 12, 2048, 247_577_856,
                            "T5 v1.1 base: gated GELU, own LM head, 12 + 12 layers, d_model 768, 12 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(T5_PRESETS, {
    "t5-small": "google-t5/t5-small",
    "t5-base": "google-t5/t5-base",
    "t5-v1_1-small": "google/t5-v1_1-small",
    "t5-v1_1-base": "google/t5-v1_1-base",
})
