"""RoBERTa architecture presets (fairseq sizes).

RoBERTa is the BERT encoder without segment embeddings or pooler and with
LayerNorm epsilon 1e-5. Parameter counts cover the embeddings (50,265-token
vocabulary, 512 usable positions: Hugging Face's two offset rows are dropped
on import) and the encoder, and exclude the MLM head.
"""

_ROBERTA = dict(vocab_size=50265, max_positions=512, num_segments=0, use_pooler=False,
                layer_norm_epsilon=1e-5)


def _roberta(num_layers, hidden_size, params, description):
    return {
        "config": dict(_ROBERTA, num_layers=num_layers, hidden_size=hidden_size,
                       num_heads=hidden_size // 64, intermediate_size=4 * hidden_size),
        "params": params,
        "description": description,
    }


ROBERTA_PRESETS = {
    "roberta-tiny": _roberta(2, 128, 6_896_256,
                             "RoBERTa at BERT-Tiny size (no published checkpoint; for quick runs)"),
    "roberta-mini": _roberta(4, 256, 16_158_464,
                             "RoBERTa at BERT-Mini size (no published checkpoint; for quick runs)"),
    "roberta-base": _roberta(12, 768, 124_052_736, "RoBERTa-Base: 12 layers, hidden 768, 12 heads"),
    "roberta-large": _roberta(24, 1024, 354_307_072, "RoBERTa-Large: 24 layers, hidden 1024, 16 heads"),
}
