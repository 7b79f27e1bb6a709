"""DeBERTa architecture presets: v1 (He et al. 2020, GPT-2's byte-level BPE) and DeBERTa-v3 (128K
SentencePiece, log-bucketed relative positions shared with the content projections).

Counts are the backbone's (transformers' DebertaModel / DebertaV2Model: the
token table, the relative table and its LayerNorm, the blocks; no pooler, no
pretraining head).
"""

from keras_bertology.models.family import publish_weights

_V1 = dict(vocab_size=50265, activation="gelu", max_positions=512, position_terms=("c2p", "p2c"),
           position_buckets=0, share_attention_key=False, norm_relative_embeddings=False, position_key_bias=False,
           content_key_bias=False, layer_norm_epsilon=1e-7)
_V3 = dict(vocab_size=128100, activation="gelu", max_positions=512, position_terms=("p2c", "c2p"),
           position_buckets=256, share_attention_key=True, norm_relative_embeddings=True, layer_norm_epsilon=1e-7)


def _preset(layout, num_layers, hidden_size, num_heads, params, description, **changes):
    return {"config": dict(layout, num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                           intermediate_size=4 * hidden_size, **changes),
            "params": params, "description": description}


DEBERTA_PRESETS = {
    "deberta-tiny": _preset(_V1, 2, 128, 2, 6_912_640, "DeBERTa v1 at BERT-Tiny size (for quick runs)",
                            max_relative_positions=64),
    "deberta-base": _preset(_V1, 12, 768, 12, 138_601_728, "DeBERTa base (v1): 12 layers, hidden 768, 12 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(DEBERTA_PRESETS, {
    "deberta-base": "microsoft/deberta-base",
})

DEBERTA_V3_PRESETS = {
    "deberta-v3-tiny": _preset(_V3, 2, 128, 2, 16_802_048, "DeBERTa-v3 at BERT-Tiny size (for quick runs)",
                               position_buckets=32, max_relative_positions=64),
    "deberta-v3-xsmall": _preset(_V3, 12, 384, 6, 70_682_112, "DeBERTa-v3 xsmall: 12 layers, hidden 384, 6 heads"),
    "deberta-v3-small": _preset(_V3, 6, 768, 12, 141_304_320, "DeBERTa-v3 small: 6 layers, hidden 768, 12 heads"),
    "deberta-v3-base": _preset(_V3, 12, 768, 12, 183_831_552, "DeBERTa-v3 base: 12 layers, hidden 768, 12 heads"),
    "deberta-v3-large": _preset(_V3, 24, 1024, 16, 434_012_160, "DeBERTa-v3 large: 24 layers, hidden 1024, 16 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(DEBERTA_V3_PRESETS, {
    "deberta-v3-xsmall": "microsoft/deberta-v3-xsmall",
    "deberta-v3-small": "microsoft/deberta-v3-small",
    "deberta-v3-base": "microsoft/deberta-v3-base",
    "deberta-v3-large": "microsoft/deberta-v3-large",
})
