"""A few masked-LM training steps of a family's tiny preset with a given attention, compiled or not."""

import numpy as np


def train_steps(family, preset, attention_options, jit_compile, length=48, steps=3, **sizes):
    """Losses of `steps` steps on one fixed batch of `length` tokens (a padded row among them), dropout off."""
    import keras

    keras.utils.set_random_seed(0)
    backbone = family.backbone_cls(**family.backbone_config(
        preset, attention_options, vocab_size=100, hidden_size=32, num_heads=2, intermediate_size=64,
        dropout=0.0, attention_dropout=0.0, **sizes))
    model = family.build_pretrainer(backbone)
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), jit_compile=jit_compile)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, (4, length)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, length - 8:] = 0
    x = {"token_ids": ids * mask, "padding_mask": mask,
         "mask_positions": np.tile(np.arange(0, length, 6, dtype="int32"), (4, 1))}
    if "segment_ids" in backbone.input:
        x["segment_ids"] = np.zeros_like(ids)
    predictions = x["mask_positions"].shape[1]
    y = {"mlm": rng.integers(5, 100, (4, predictions)).astype("int32")}
    weights = {"mlm": np.ones((4, predictions), "float32")}
    return [model.train_on_batch(x, y, sample_weight=weights, return_dict=True)["loss"] for _ in range(steps)]
