"""Linformer architecture presets: RoBERTa's encoder (byte-level BPE of 50,265 tokens, no segments, no
pooler, LayerNorm epsilon 1e-5) with low-rank attention.

The position table and the projections' n are the preset's longest sequence.
Counts cover the embeddings, the encoder and the projections (one [k, n]
matrix with layerwise sharing), not the MLM head.
"""

from keras_bertology.models.family import sized_preset

_LINFORMER = dict(vocab_size=50265, num_segments=0, use_pooler=False, layer_norm_epsilon=1e-5,
                  attention_type="low_rank")


def _preset(num_layers, hidden_size, max_length, projected_length, params, description):
    layout = dict(_LINFORMER, max_positions=max_length, attention_options=dict(
        projected_length=projected_length, max_length=max_length, sharing="layerwise"))
    return sized_preset(layout, num_layers, hidden_size, params, description)


LINFORMER_PRESETS = {
    "linformer-tiny": _preset(2, 128, 4096, 128, 7_879_296, "Linformer at BERT-Tiny size: n 4,096, k 128, "
                              "layerwise sharing (for quick and long runs)"),
    "linformer-base": _preset(12, 768, 512, 256, 124_183_808, "Linformer base (the paper's): 12 layers, hidden 768, "
                              "n 512, k 256, layerwise sharing"),
}
