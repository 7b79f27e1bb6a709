"""Helpers for tests that compare against Hugging Face transformers (PyTorch) models."""

import numpy as np
import torch
from safetensors.torch import save_file


def save_hf_model(model, directory):
    """Write `model` as config.json + model.safetensors, the layout our importer reads."""
    model.config.save_pretrained(directory)
    tensors = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    # Tied weights share storage; safetensors wants distinct tensors.
    save_file({name: tensor.clone() for name, tensor in tensors.items()}, f"{directory}/model.safetensors")


def run_hf(model, token_ids, padding_mask, segment_ids=None):
    """Last hidden state (and pooler output when the model has one) as NumPy."""
    with torch.no_grad():
        kwargs = dict(
            input_ids=torch.tensor(np.asarray(token_ids), dtype=torch.long),
            attention_mask=torch.tensor(np.asarray(padding_mask), dtype=torch.long),
        )
        if segment_ids is not None:
            kwargs["token_type_ids"] = torch.tensor(np.asarray(segment_ids), dtype=torch.long)
        output = model(**kwargs)
    pooled = getattr(output, "pooler_output", None)
    return output.last_hidden_state.numpy(), None if pooled is None else pooled.numpy()
