"""RoBERTa architecture presets (fairseq sizes).

RoBERTa is the BERT encoder without segment embeddings or pooler and with
LayerNorm epsilon 1e-5. Parameter counts cover the embeddings (50,265-token
vocabulary, 512 usable positions: Hugging Face's two offset rows are dropped
on import) and the encoder, and exclude the MLM head.
"""

from keras_bertology.models.family import publish_weights, sized_preset

_ROBERTA = dict(vocab_size=50265, max_positions=512, num_segments=0, use_pooler=False,
                layer_norm_epsilon=1e-5)

ROBERTA_PRESETS = {
    "roberta-tiny": sized_preset(_ROBERTA, 2, 128, 6_896_256,
                                 "RoBERTa at BERT-Tiny size (no published checkpoint; for quick runs)"),
    "roberta-mini": sized_preset(_ROBERTA, 4, 256, 16_158_464,
                                 "RoBERTa at BERT-Mini size (no published checkpoint; for quick runs)"),
    "roberta-base": sized_preset(_ROBERTA, 12, 768, 124_052_736, "RoBERTa-Base: 12 layers, hidden 768, 12 heads"),
    "roberta-large": sized_preset(_ROBERTA, 24, 1024, 354_307_072, "RoBERTa-Large: 24 layers, hidden 1024, 16 heads"),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(ROBERTA_PRESETS, {
    "roberta-base": "FacebookAI/roberta-base",
    "roberta-large": "FacebookAI/roberta-large",
})
