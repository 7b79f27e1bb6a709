"""BigBird architecture presets (transformers' BigBirdConfig sizes, ITC block-sparse attention).

BigBird-RoBERTa is BERT's post-LN encoder with the tanh GELU, 4,096 learned
positions, two token types, a pooler and a 50,358-piece SentencePiece
vocabulary; its attention is block-sparse (block 64, 3 random blocks) above
(5 + 2 x 3) x 64 = 704 tokens and full below. Counts are transformers'
BigBirdModel (embeddings, encoder and pooler; no pretraining head).
"""

from keras_bertology.models.family import publish_weights, sized_preset

_BIGBIRD = dict(vocab_size=50358, max_positions=4096, num_segments=2, use_pooler=True, activation="gelu_approximate",
                layer_norm_epsilon=1e-12, attention_type="block_sparse")


def _preset(num_layers, hidden_size, params, description, block_size=64, random_blocks=3):
    layout = dict(_BIGBIRD, attention_options=dict(block_size=block_size, random_blocks=random_blocks))
    return sized_preset(layout, num_layers, hidden_size, params, description)


BIGBIRD_PRESETS = {
    "bigbird-tiny": _preset(2, 128, 7_383_680, "BigBird at BERT-Tiny size, block 16, 2 random blocks "
                            "(block-sparse above 144 tokens; for quick runs)", block_size=16, random_blocks=2),
    "bigbird-roberta-base": _preset(12, 768, 127_468_800, "BigBird-RoBERTa base: 12 layers, hidden 768, 12 "
                                    "heads, block 64, 3 random blocks, 4,096 positions"),
    "bigbird-roberta-large": _preset(24, 1024, 359_123_968, "BigBird-RoBERTa large: 24 layers, hidden 1024, 16 "
                                     "heads, block 64, 3 random blocks, 4,096 positions"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(BIGBIRD_PRESETS, {
    "bigbird-roberta-base": "google/bigbird-roberta-base",
    "bigbird-roberta-large": "google/bigbird-roberta-large",
})
