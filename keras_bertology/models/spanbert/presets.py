"""SpanBERT architecture presets: BERT's sizes with the 28,996-token cased vocabulary.

SpanBERT pretrains without a sentence-level objective, so there is no
pooler to train: counts cover the embeddings and the encoder (BERT-cased's
counts less the pooler) and exclude the MLM and span boundary heads.
"""

from keras_bertology.models.family import publish_weights, sized_preset

_SPANBERT = dict(vocab_size=28996, max_positions=512, num_segments=2, use_pooler=False,
                 layer_norm_epsilon=1e-12)

SPANBERT_PRESETS = {
    "spanbert-tiny": sized_preset(_SPANBERT, 2, 128, 4_174_080,
                                  "SpanBERT at BERT-Tiny size (no published checkpoint; for quick runs)"),
    "spanbert-base": sized_preset(_SPANBERT, 12, 768, 107_719_680,
                                  "SpanBERT-Base cased: 12 layers, hidden 768, 12 heads"),
    "spanbert-large": sized_preset(_SPANBERT, 24, 1024, 332_529_664,
                                   "SpanBERT-Large cased: 24 layers, hidden 1024, 16 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(SPANBERT_PRESETS, {
    "spanbert-base": "SpanBERT/spanbert-base-cased",
    "spanbert-large": "SpanBERT/spanbert-large-cased",
})
