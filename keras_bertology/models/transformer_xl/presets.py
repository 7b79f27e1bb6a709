"""Transformer-XL presets (kimiyoung/transformer-xl sizes).

Counts are the language model's as the original PyTorch code builds it: the
adaptive input, the blocks, the shared u and v biases, and the adaptive
softmax's own weights (its tables are the input's, tied: it adds the
vocabulary biases, the cluster logits and the untied head projection). The
backbone alone has the softmax's share fewer (tested).

- transformer-xl-wt103-base: 151,107,538 (WikiText-103's 267,735-word
  vocabulary, cutoffs 20,000 / 40,000 / 200,000, div_val 1: one table, no
  projections); trained with 150-token segments and a 150-state memory.
- transformer-xl-wt103-large: 285,170,506 (div_val 4: widths 1024, 256, 64,
  16, each projected; the softmax shares every projection but the head's);
  trained with 384-token segments and a 384-state memory.
- transformer-xl-tiny: 6,911,697 at GPT-2's 50,257 tokens (no cutoffs: a
  full softmax), for quick runs.
"""

from keras_bertology.models.family import publish_weights

_WT103 = dict(vocab_size=267735, cutoffs=[20000, 40000, 200000], activation="relu", layer_norm_epsilon=1e-5,
              untie_r=False, clamp_len=-1, max_positions=1024)


def _preset(config, params, description, mem_len, tie_projections=None):
    pretrainer = {"mem_len": mem_len}
    if tie_projections is not None:
        pretrainer["tie_projections"] = tie_projections
    return {"config": config, "params": params, "description": description, "pretrainer": pretrainer}


TRANSFORMER_XL_PRESETS = {
    "transformer-xl-tiny": _preset(
        dict(vocab_size=50257, cutoffs=[], num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512,
             activation="relu", dropout=0.1, attention_dropout=0.0, layer_norm_epsilon=1e-5, untie_r=False,
             clamp_len=-1, max_positions=1024),
        6_911_697, "Transformer-XL at BERT-Tiny size (no published checkpoint; for quick runs)", mem_len=128),
    "transformer-xl-wt103-base": _preset(
        dict(_WT103, num_layers=16, hidden_size=410, num_heads=10, intermediate_size=2100, div_val=1,
             dropout=0.1, attention_dropout=0.0),
        151_107_538, "Transformer-XL base on WikiText-103: 16 layers, hidden 410, 10 heads of 41", mem_len=150),
    "transformer-xl-wt103-large": _preset(
        dict(_WT103, num_layers=18, hidden_size=1024, num_heads=16, intermediate_size=4096, div_val=4,
             dropout=0.2, attention_dropout=0.2),
        285_170_506, "Transformer-XL large on WikiText-103: 18 layers, hidden 1024, 16 heads, div_val 4",
        mem_len=384, tie_projections=[False, True, True, True]),
}

# Where the presets' published weights are: from_preset(name, weights="pretrained").
publish_weights(TRANSFORMER_XL_PRESETS, {
    "transformer-xl-wt103-large": "transfo-xl/transfo-xl-wt103",
})
