"""ERNIE architecture presets.

ERNIE 1.0 is BERT's encoder trained with knowledge masking: `ernie-base` is
its published size (transformers' ErnieConfig of ernie-1.0-base-zh: 12
layers, hidden 768, 12 heads, FFN 3,072 with ReLU, 18,000-piece vocabulary,
513 learned positions, 2 token types, LayerNorm epsilon 1e-5). Counts include
the embeddings and the tanh pooler and exclude the MLM and NSP heads.
Pretraining on a corpus with its own trained vocabulary replaces `vocab_size`.
"""

from keras_bertology.models.family import publish_weights, sized_preset

_ERNIE = dict(vocab_size=18000, max_positions=513, num_segments=2, use_pooler=True, activation="relu",
              layer_norm_epsilon=1e-5)

ERNIE_PRESETS = {
    "ernie-tiny": sized_preset(_ERNIE, 2, 128, 2_783_232,
                               "ERNIE-Tiny: 2 layers, hidden 128, 2 heads (no published checkpoint; for quick runs)"),
    "ernie-base": sized_preset(_ERNIE, 12, 768, 99_866_112, "ERNIE 1.0 base: 12 layers, hidden 768, 12 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(ERNIE_PRESETS, {
    "ernie-base": "nghuyong/ernie-1.0-base-zh",
})
