"""Our encoder and MLM head against randomly initialised Hugging Face models (fp32).

Weights use initializer_range 0.2 (not BERT's 0.02, where a hidden-64 model
stays in GELU's near-linear range and the tanh approximation would pass):
`test_activations_run_nonlinear` checks that premise.
"""

import numpy as np
import pytest
import torch
import transformers

from hf_reference import nonlinear_share, perturbed_hf_model, run_hf, save_hf_model
from keras_bertology.convert.hf_checkpoint import read_hf_checkpoint
from keras_bertology.models.bert.convert import (
    backbone_kwargs_from_hf,
    load_hf_pretrainer,
    load_hf_weights_into_backbone,
)
from keras_bertology.errors import CheckpointError
from keras_bertology.models import BertBackbone, BertPretrainer, RobertaPretrainer

TOLERANCE = 1e-5
SMALL = dict(vocab_size=211, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
             intermediate_size=96, max_position_embeddings=64, initializer_range=0.2)


def _random_batch(vocab_size, batch=3, length=24, seed=0, first_id=5):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(first_id, vocab_size, size=(batch, length)).astype("int32")
    lengths = np.array([length, length - 7, length - 15])[:batch]
    padding_mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    return token_ids, padding_mask, lengths


def _import(tmp_path, hf_model):
    save_hf_model(hf_model, tmp_path)
    config, weights = read_hf_checkpoint(tmp_path)
    _, kwargs = backbone_kwargs_from_hf(config)
    backbone = BertBackbone(**kwargs)
    load_hf_weights_into_backbone(backbone, weights, config)
    return backbone, config, weights


def _hf_model(cls, config_cls, **overrides):
    return perturbed_hf_model(cls, config_cls(**dict(SMALL, **overrides)))


def test_activations_run_nonlinear():
    hf = _hf_model(transformers.BertModel, transformers.BertConfig)
    token_ids, padding_mask, _ = _random_batch(SMALL["vocab_size"])
    batch = {"input_ids": torch.tensor(token_ids, dtype=torch.long),
             "attention_mask": torch.tensor(padding_mask, dtype=torch.long)}
    assert nonlinear_share(hf, batch) >= 0.3


def test_bert_hidden_states_and_pooler_match(tmp_path):
    hf = _hf_model(transformers.BertModel, transformers.BertConfig)
    backbone, _, _ = _import(tmp_path, hf)
    token_ids, padding_mask, lengths = _random_batch(SMALL["vocab_size"])
    segment_ids = (np.arange(token_ids.shape[1])[None, :] >= 10).astype("int32").repeat(3, 0)
    expected_seq, expected_pooled = run_hf(hf, token_ids, padding_mask, segment_ids)
    ours = backbone.predict(
        {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}, verbose=0
    )
    for row, length in enumerate(lengths):
        diff = np.abs(ours["sequence_output"][row, :length] - expected_seq[row, :length]).max()
        assert diff <= TOLERANCE, f"row {row}: max abs diff {diff}"
    assert np.abs(ours["pooled_output"] - expected_pooled).max() <= TOLERANCE


def test_roberta_hidden_states_match(tmp_path):
    hf = _hf_model(transformers.RobertaModel, transformers.RobertaConfig,
                   max_position_embeddings=66, type_vocab_size=1, layer_norm_eps=1e-5,
                   pad_token_id=1, add_pooling_layer=False)
    backbone, _, _ = _import(tmp_path, hf)
    assert backbone.max_positions == 64 and backbone.num_segments == 0
    token_ids, padding_mask, lengths = _random_batch(SMALL["vocab_size"], seed=1)
    token_ids = np.where(padding_mask == 1, token_ids, 1)  # RoBERTa's <pad> id
    expected, _ = run_hf(hf, token_ids, padding_mask)
    ours = backbone.predict({"token_ids": token_ids, "padding_mask": padding_mask}, verbose=0)
    for row, length in enumerate(lengths):
        diff = np.abs(ours["sequence_output"][row, :length] - expected[row, :length]).max()
        assert diff <= TOLERANCE, f"row {row}: max abs diff {diff}"


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_mlm_logits_match_at_masked_positions(tmp_path, family):
    if family == "bert":
        hf = _hf_model(transformers.BertForPreTraining, transformers.BertConfig)
        pretrainer_cls = BertPretrainer
    else:
        hf = _hf_model(transformers.RobertaForMaskedLM, transformers.RobertaConfig,
                       max_position_embeddings=66, type_vocab_size=1, layer_norm_eps=1e-5)
        pretrainer_cls = RobertaPretrainer
    backbone, config, weights = _import(tmp_path, hf)
    pretrainer, _, _ = load_hf_pretrainer(pretrainer_cls, backbone, weights, config)
    token_ids, _, _ = _random_batch(SMALL["vocab_size"], seed=2)
    padding_mask = np.ones_like(token_ids)
    positions = np.array([[1, 5, 9], [0, 2, 23], [7, 7, 12]], dtype="int32")
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask, "mask_positions": positions}
    if family == "bert":
        inputs["segment_ids"] = np.zeros_like(token_ids)
    ours = pretrainer.predict(inputs, verbose=0)
    with torch.no_grad():
        output = hf(input_ids=torch.tensor(token_ids, dtype=torch.long),
                    attention_mask=torch.tensor(padding_mask, dtype=torch.long))
    logits = (output.prediction_logits if family == "bert" else output.logits).numpy()
    expected = np.take_along_axis(logits, positions[..., None], axis=1)
    assert np.abs(ours["mlm"] - expected).max() <= TOLERANCE
    if family == "bert":
        assert np.abs(ours["nsp"] - output.seq_relationship_logits.numpy()).max() <= TOLERANCE


def test_mismatched_checkpoint_shape_is_a_clear_error(tmp_path):
    hf = _hf_model(transformers.BertModel, transformers.BertConfig)
    save_hf_model(hf, tmp_path)
    config, weights = read_hf_checkpoint(tmp_path)
    _, kwargs = backbone_kwargs_from_hf(config)
    backbone = BertBackbone(**dict(kwargs, intermediate_size=kwargs["intermediate_size"] + 1))
    with pytest.raises(CheckpointError, match="shape mismatch for encoder.layer.0.intermediate.dense.weight"):
        load_hf_weights_into_backbone(backbone, weights, config)


def test_missing_checkpoint_files_are_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        read_hf_checkpoint(tmp_path)


def _resave(directory, edit):
    """Rewrite a saved checkpoint's tensors: `edit(name -> array dict)` in place."""
    from safetensors.numpy import load_file, save_file

    weights = load_file(f"{directory}/model.safetensors")
    edit(weights)
    save_file(weights, f"{directory}/model.safetensors", metadata={"format": "pt"})


# (class, config class, overrides, head prefix or None, decoder name, word embeddings name)
UNTIED_HEADS = {
    "bert": (transformers.BertForMaskedLM, transformers.BertConfig, {}, "cls.predictions",
             "cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
    "roberta": (transformers.RobertaForMaskedLM, transformers.RobertaConfig,
                dict(max_position_embeddings=66, type_vocab_size=1, layer_norm_eps=1e-5), "lm_head",
                "lm_head.decoder.weight", "roberta.embeddings.word_embeddings.weight"),
    "albert": (transformers.AlbertForMaskedLM, transformers.AlbertConfig, dict(embedding_size=24), "predictions",
               "predictions.decoder.weight", "albert.embeddings.word_embeddings.weight"),
    "electra": (transformers.ElectraForMaskedLM, transformers.ElectraConfig, dict(embedding_size=24), None,
                "generator_lm_head.weight", "electra.embeddings.word_embeddings.weight"),
}


@pytest.mark.parametrize("family,tie_word_embeddings", [
    ("bert", True), ("roberta", False), ("albert", True), ("electra", False)])
def test_untied_decoder_matches_what_transformers_loads(tmp_path, family, tie_word_embeddings):
    """A decoder (and decoder bias) that differ from what they would be tied to: transformers computes
    with them whatever tie_word_embeddings says (set, it ties only equal tensors); so does the import,
    through a run folder and back (the head's own decoder survives get_config)."""
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
    from keras_bertology.runs import load_run_model, save_run_model

    cls, config_cls, overrides, head, decoder, embeddings = UNTIED_HEADS[family]
    hf = _hf_model(cls, config_cls, num_hidden_layers=2, tie_word_embeddings=tie_word_embeddings, **overrides)
    hf_dir = tmp_path / "hf"
    hf.save_pretrained(str(hf_dir))
    rng = np.random.default_rng(3)

    def untie(weights):  # what a head trained apart from the embeddings holds
        weights[decoder] = (weights[embeddings] + rng.normal(0, 0.2, weights[embeddings].shape)).astype("float32")
        if head:
            weights[f"{head}.decoder.bias"] = rng.normal(0, 0.5, weights[f"{head}.bias"].shape).astype("float32")
    if tie_word_embeddings:  # save_pretrained wrote neither
        _resave(hf_dir, untie)
    reference = cls.from_pretrained(str(hf_dir), attn_implementation="eager").eval()
    assert not torch.equal(reference.get_output_embeddings().weight, reference.get_input_embeddings().weight)

    run, report = convert_hf_checkpoint(hf_dir)
    assert report.heads[-1] == "mlm" and any("untied decoder" in note for note in report.notes)
    if head:  # transformers never adds {head}.bias to the logits when the decoder's own differs
        assert report.skipped == [f"{head}.bias"], report.skipped
    else:
        assert report.skipped == []
    save_run_model(tmp_path / "run", run)
    pretrainer = load_run_model(tmp_path / "run").pretrainer
    assert not pretrainer.get_layer("mlm_head").tie_decoder

    token_ids, _, _ = _random_batch(SMALL["vocab_size"], seed=4)
    inputs = {"token_ids": token_ids, "padding_mask": np.ones_like(token_ids),
              "mask_positions": np.array([[1, 5, 9], [0, 2, 23], [7, 7, 12]], dtype="int32")}
    if "segment_ids" in pretrainer.input:
        inputs["segment_ids"] = np.zeros_like(token_ids)
    ours = pretrainer.predict(inputs, verbose=0)["mlm"]
    with torch.no_grad():
        logits = reference(input_ids=torch.tensor(token_ids, dtype=torch.long)).logits.numpy()
    expected = np.take_along_axis(logits, inputs["mask_positions"][..., None], axis=1)
    assert np.abs(expected).max() > 1.0
    assert np.abs(ours - expected).max() <= TOLERANCE


@pytest.mark.parametrize("missing", ["cls.predictions.decoder.weight", "cls.predictions.decoder.bias"])
def test_untied_config_without_its_decoder_is_a_clear_error(tmp_path, missing):
    """tie_word_embeddings=false and no decoder tensor: transformers would compute with random initial values."""
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint

    hf = _hf_model(transformers.BertForMaskedLM, transformers.BertConfig, num_hidden_layers=1,
                   tie_word_embeddings=False)
    hf.save_pretrained(str(tmp_path))
    _resave(tmp_path, lambda weights: weights.pop(missing))
    with pytest.raises(CheckpointError, match=f"tie_word_embeddings=false but the checkpoint has no {missing}"):
        convert_hf_checkpoint(tmp_path)


def test_electra_embedding_size_defaults_to_transformers_default(tmp_path):
    """A config.json without embedding_size: transformers' ElectraConfig takes 128, not the hidden size."""
    import json

    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint

    hf = _hf_model(transformers.ElectraModel, transformers.ElectraConfig, num_hidden_layers=1)
    hf.save_pretrained(str(tmp_path))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config.pop("embedding_size") == 128 != config["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    run, report = convert_hf_checkpoint(tmp_path)
    assert report.skipped == [] and run.backbone.get_layer("embedding_projection") is not None
    token_ids, padding_mask, lengths = _random_batch(SMALL["vocab_size"], seed=5)
    expected, _ = run_hf(hf, token_ids, padding_mask)
    ours = run.backbone.predict({"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                                 "padding_mask": padding_mask}, verbose=0)["sequence_output"]
    real = padding_mask.astype(bool)
    assert np.abs(ours[real] - expected[real]).max() <= TOLERANCE


def test_causal_bert_config_is_a_clear_error():
    """is_decoder=true makes transformers' BERT, RoBERTa and ELECTRA attend causally."""
    from keras_bertology.models.bert.convert import encoder_kwargs

    with pytest.raises(CheckpointError, match="is_decoder=true"):
        encoder_kwargs(dict(SMALL, is_decoder=True), use_pooler=False)
