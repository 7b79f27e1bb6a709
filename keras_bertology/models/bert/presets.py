"""BERT architecture presets (google-research/bert sizes).

Parameter counts include the embeddings and the tanh pooler, and exclude the
MLM and NSP heads, with the 30,522-token uncased vocabulary. Pretraining on
a corpus with its own trained vocabulary replaces `vocab_size`.
"""

from keras_bertology.models.family import publish_weights, sized_preset

_BERT = dict(vocab_size=30522, max_positions=512, num_segments=2, use_pooler=True,
             layer_norm_epsilon=1e-12)

BERT_PRESETS = {
    "bert-tiny": sized_preset(_BERT, 2, 128, 4_385_920, "BERT-Tiny: 2 layers, hidden 128, 2 heads"),
    "bert-mini": sized_preset(_BERT, 4, 256, 11_170_560, "BERT-Mini: 4 layers, hidden 256, 4 heads"),
    "bert-small": sized_preset(_BERT, 4, 512, 28_763_648, "BERT-Small: 4 layers, hidden 512, 8 heads"),
    "bert-medium": sized_preset(_BERT, 8, 512, 41_373_184, "BERT-Medium: 8 layers, hidden 512, 8 heads"),
    "bert-base": sized_preset(_BERT, 12, 768, 109_482_240, "BERT-Base uncased: 12 layers, hidden 768, 12 heads"),
    "bert-large": sized_preset(_BERT, 24, 1024, 335_141_888, "BERT-Large uncased: 24 layers, hidden 1024, 16 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(BERT_PRESETS, {
    "bert-tiny": "google/bert_uncased_L-2_H-128_A-2",
    "bert-mini": "google/bert_uncased_L-4_H-256_A-4",
    "bert-small": "google/bert_uncased_L-4_H-512_A-8",
    "bert-medium": "google/bert_uncased_L-8_H-512_A-8",
    "bert-base": "google-bert/bert-base-uncased",
    "bert-large": "google-bert/bert-large-uncased",
})
