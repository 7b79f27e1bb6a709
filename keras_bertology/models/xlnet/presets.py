"""XLNet presets (zihangdai/xlnet sizes), cased 32,000-piece SentencePiece vocabulary.

Counts are the encoder's (XLNetModel: word embeddings, mask embedding, and
per layer the q/k/v/o/r projections, untied relative biases, segment vectors,
two LayerNorms and the feed-forward); the LM head adds only its 32,000 biases
(its matrix is the word embeddings).
"""

from keras_bertology.models.family import publish_weights

_XLNET = dict(vocab_size=32000, activation="gelu", dropout=0.1, layer_norm_epsilon=1e-12, untie_r=True,
              clamp_len=-1, max_positions=512)


def _preset(num_layers, hidden, params, description):
    config = dict(_XLNET, num_layers=num_layers, hidden_size=hidden, num_heads=hidden // 64,
                  intermediate_size=4 * hidden)
    return {"config": config, "params": params, "description": description}


XLNET_PRESETS = {
    "xlnet-tiny": _preset(2, 128, 4_525_696, "XLNet at BERT-Tiny size: 2 layers, hidden 128 (for quick runs)"),
    "xlnet-base": _preset(12, 768, 116_718_336, "XLNet-Base cased: 12 layers, hidden 768, 12 heads"),
    "xlnet-large": _preset(24, 1024, 360_268_800, "XLNet-Large cased: 24 layers, hidden 1024, 16 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(XLNET_PRESETS, {
    "xlnet-base": "xlnet/xlnet-base-cased",
    "xlnet-large": "xlnet/xlnet-large-cased",
})
