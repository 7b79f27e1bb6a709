"""RoBERTa architecture presets (fairseq sizes).

RoBERTa is the BERT encoder without segment embeddings or pooler and with
LayerNorm epsilon 1e-5. Parameter counts cover the embeddings (50,265-token
vocabulary, 512 usable positions: Hugging Face's two offset rows are dropped
on import) and the encoder, and exclude the MLM head.
"""

_ROBERTA = dict(vocab_size=50265, max_positions=512, num_segments=0, use_pooler=False,
                layer_norm_epsilon=1e-5)

ROBERTA_PRESETS = {
    "roberta-tiny": {
        "config": dict(_ROBERTA, num_layers=2, hidden_size=128, num_heads=2,
                       intermediate_size=512),
        "params": 6_896_256,
        "description": "RoBERTa at BERT-Tiny size (no published checkpoint; for quick runs)",
    },
    "roberta-mini": {
        "config": dict(_ROBERTA, num_layers=4, hidden_size=256, num_heads=4,
                       intermediate_size=1024),
        "params": 16_158_464,
        "description": "RoBERTa at BERT-Mini size (no published checkpoint; for quick runs)",
    },
    "roberta-base": {
        "config": dict(_ROBERTA, num_layers=12, hidden_size=768, num_heads=12,
                       intermediate_size=3072),
        "params": 124_052_736,
        "description": "RoBERTa-Base: 12 layers, hidden 768, 12 heads",
    },
    "roberta-large": {
        "config": dict(_ROBERTA, num_layers=24, hidden_size=1024, num_heads=16,
                       intermediate_size=4096),
        "params": 354_307_072,
        "description": "RoBERTa-Large: 24 layers, hidden 1024, 16 heads",
    },
}
