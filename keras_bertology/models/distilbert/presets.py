"""DistilBERT architecture presets (transformers' DistilBertConfig sizes).

DistilBERT is BERT's post-LN encoder without token types or pooler, half as
deep as its teacher: BERT-base's width (768, 12 heads, FFN 3,072) at 6 layers,
30,522-piece WordPiece vocabulary, 512 learned positions, exact GELU,
LayerNorm epsilon 1e-12. Counts are transformers' DistilBertModel (embeddings
and encoder; no masked-LM head). A student distilled from a teacher takes the
teacher's width and vocabulary and the preset's depth.
"""

from keras_bertology.models.family import publish_weights, sized_preset

_DISTILBERT = dict(vocab_size=30522, max_positions=512, num_segments=0, use_pooler=False, activation="gelu",
                   layer_norm_epsilon=1e-12)

DISTILBERT_PRESETS = {
    "distilbert-tiny": sized_preset(_DISTILBERT, 1, 128, 4_170_880,
                                    "a 1-layer student of BERT-Tiny's width (no published checkpoint; for "
                                    "quick runs)"),
    "distilbert-base": sized_preset(_DISTILBERT, 6, 768, 66_362_880,
                                    "DistilBERT base: 6 layers, hidden 768, 12 heads (half of BERT-base)"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(DISTILBERT_PRESETS, {
    "distilbert-base": "distilbert/distilbert-base-uncased",
})
