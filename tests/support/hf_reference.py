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


def perturbed_hf_model(cls, config, **kwargs):
    """A random-init transformers model in eval mode, with every parameter made to matter.

    Random init leaves LayerNorm at (1, 0) and biases at 0: they are perturbed
    so a mapping mistake on any tensor shows up. Use a config with a large
    `initializer_range` (0.2 for hidden 64) so activations run nonlinear.
    """
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = cls(config, **kwargs).eval()
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                tensor.add_(0.1 * torch.randn_like(tensor))
    return model


def nonlinear_share(model, batch):
    """Share of first-layer feed-forward pre-activations with |x| > 1 on real tokens.

    GELU's exact and tanh forms, or GELU and ReLU, only differ visibly there:
    a parity test whose activations stay near 0 cannot tell them apart.
    """
    captured = []
    base = getattr(model, model.base_model_prefix, model)
    if hasattr(base.encoder, "layer"):
        dense = base.encoder.layer[0].intermediate.dense
    else:  # ALBERT: the first group's first layer
        dense = base.encoder.albert_layer_groups[0].albert_layers[0].ffn
    handle = dense.register_forward_hook(lambda module, args, output: captured.append(output))
    with torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    handle.remove()
    real = batch["attention_mask"].bool()
    return float((captured[0][real].abs() > 1).float().mean())


def roberta_bpe_files(sentences, vocab_size, folder, special_tokens=("<s>", "<pad>", "</s>", "<unk>", "<mask>")):
    """A byte-level BPE vocabulary trained by the `tokenizers` library as RoBERTa's (or with other
    `special_tokens`: GPT-2's, DeBERTa's), saved in `folder` as vocab.json + merges.txt (the files
    roberta-base ships)."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(sentences, vocab_size=vocab_size, min_frequency=2,
                            special_tokens=list(special_tokens), show_progress=False)
    bpe.save_model(str(folder))
    return folder
