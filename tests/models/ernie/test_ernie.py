"""ERNIE: the preset counts against transformers' ErnieModel, converted ErnieForPreTraining /
ErnieForMaskedLM / ErnieModel checkpoints against transformers (random init, fp32, 1e-5; the task-type
table of `use_task_id` folded into the token-type rows), the configs that cannot fold refused, and the
export back to transformers (`bertology export --format hf`) with its BertTokenizer vocabulary."""

import json

import keras
import numpy as np
import pytest
import torch
import transformers

from hf_reference import nonlinear_share, perturbed_hf_model
from keras_bertology.cli import main
from keras_bertology.convert import convert_hf_checkpoint
from keras_bertology.errors import CheckpointError, ConfigError
from keras_bertology.models.ernie import ERNIE
from keras_bertology.models.ernie.convert import convert
from keras_bertology.runs import save_run_model

TOLERANCE = 1e-5
# Heads 16 wide, an FFN unlike 4x, a vocabulary not a multiple of 8, LayerNorm epsilon not BERT's;
# initializer_range 0.2 (and perturbed LayerNorms and biases) so the activations run nonlinear.
SMALL = dict(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=80,
             max_position_embeddings=40, layer_norm_eps=1e-5, initializer_range=0.2, task_type_vocab_size=3)
WORDS = ["now", "is", "the", "winter", "of", "our", "discontent", "made", "glorious", "summer", "by", "this",
         "sun", "york", "to", "be", "or", "not", "that", "question", "hi", "ho", ".", ",", "!", "?"]


def _batch(length=19, real=13, first=10):
    """Two rows, the second padded after `real` tokens; segment B from position `first` (padding: 0)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, SMALL["vocab_size"], (2, length))
    mask = np.ones((2, length), np.int64)
    mask[1, real:] = 0
    ids[1, real:] = 0
    segments = (np.arange(length)[None, :] >= first) * mask
    return ids, mask, segments


def _hf_model(cls, **overrides):
    config = transformers.ErnieConfig(**dict(SMALL, **overrides))
    return perturbed_hf_model(cls, config)


@pytest.mark.parametrize("name", sorted(ERNIE.presets))
def test_presets_count_what_transformers_builds(name):
    config = ERNIE.presets[name]["config"]
    hf = transformers.ErnieConfig(vocab_size=config["vocab_size"], max_position_embeddings=config["max_positions"],
                                  num_hidden_layers=config["num_layers"], num_attention_heads=config["num_heads"],
                                  hidden_size=config["hidden_size"], intermediate_size=config["intermediate_size"],
                                  type_vocab_size=config["num_segments"])
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.ErnieModel(hf).parameters())
    assert expected == ERNIE.presets[name]["params"]
    with keras.device("cpu"):
        ours = ERNIE.backbone_cls(**ERNIE.backbone_config(name))
    assert ours.count_params() == expected


CASES = [("ErnieForPreTraining", "relu", True), ("ErnieForPreTraining", "gelu", False),
         ("ErnieForMaskedLM", "gelu_new", True), ("ErnieModel", "relu", True)]


@pytest.mark.parametrize("cls_name,hidden_act,use_task_id", CASES)
def test_converted_ernie_matches_transformers(tmp_path, cls_name, hidden_act, use_task_id):
    hf = _hf_model(getattr(transformers, cls_name), hidden_act=hidden_act, use_task_id=use_task_id)
    hf.save_pretrained(str(tmp_path))
    run, report = convert_hf_checkpoint(tmp_path)
    pretrainer = run.pretrainer
    heads = {"ErnieForPreTraining": ["pooler", "mlm", "nsp"], "ErnieForMaskedLM": ["mlm"], "ErnieModel": ["pooler"]}
    assert run.family == "ernie" and report.heads == heads[cls_name] and report.skipped == []
    assert bool(report.notes) == use_task_id  # the two task-type rows dropped
    assert run.backbone.activation == hidden_act.replace("gelu_new", "gelu_approximate")
    ids, mask, segments = _batch()
    batch = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
    assert nonlinear_share(hf, batch) >= 0.3
    with torch.no_grad():
        out = hf(**batch, token_type_ids=torch.tensor(segments), output_hidden_states=True)
    inputs = {"token_ids": ids.astype("int32"), "segment_ids": segments.astype("int32"),
              "padding_mask": mask.astype("int32")}
    ours = run.backbone(inputs)
    real = mask.astype(bool)
    expected = out.hidden_states[-1].numpy()
    assert np.abs(expected).max() > 1
    np.testing.assert_allclose(np.asarray(ours["sequence_output"])[real], expected[real], rtol=0, atol=TOLERANCE)
    if cls_name == "ErnieModel":
        assert pretrainer is None
        np.testing.assert_allclose(np.asarray(ours["pooled_output"]), out.pooler_output.numpy(), rtol=0,
                                   atol=TOLERANCE)
        return
    positions = np.array([[0, 4, 11, 18], [1, 9, 10, 12]], np.int32)
    got = pretrainer({**inputs, "mask_positions": positions})
    logits = out.prediction_logits if cls_name == "ErnieForPreTraining" else out.logits
    expected = np.take_along_axis(logits.numpy(), positions[:, :, None], axis=1)
    np.testing.assert_allclose(np.asarray(got["mlm"]), expected, rtol=0, atol=TOLERANCE)
    if cls_name == "ErnieForPreTraining":
        np.testing.assert_allclose(np.asarray(got["nsp"]), out.seq_relationship_logits.numpy(), rtol=0,
                                   atol=TOLERANCE)
    else:
        assert "nsp" not in got


def _weights(hf):
    return {name: value.detach().numpy() for name, value in hf.state_dict().items()}


@pytest.mark.parametrize("overrides", [dict(type_vocab_size=0), dict(task_type_vocab_size=0)])
def test_a_config_without_rows_to_fold_is_refused(overrides):
    hf = _hf_model(transformers.ErnieModel, use_task_id=True)
    config = dict(hf.config.to_dict(), **overrides)
    with pytest.raises(ConfigError, match="use_task_id=true needs type_vocab_size and task_type_vocab_size >= 1"):
        convert(ERNIE, config, _weights(hf))


def test_a_task_type_table_missing_from_the_checkpoint_is_refused():
    """transformers would build it randomly initialised."""
    hf = _hf_model(transformers.ErnieModel, use_task_id=True)
    weights = {name: value for name, value in _weights(hf).items() if "task_type" not in name}
    with pytest.raises(CheckpointError, match="no tensor 'embeddings.task_type_embeddings.weight'"):
        convert(ERNIE, hf.config.to_dict(), weights)


def _vocab_file(folder):
    """A BERT WordPiece vocabulary of exactly SMALL's size: the specials, words, pieces, fillers."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    tokens += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz")
    tokens += [f"[unused{i}]" for i in range(SMALL["vocab_size"] - len(tokens))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


def test_export_round_trip(tmp_path, capsys):
    """Convert an ErnieForPreTraining with task types, export the run: AutoModelForPreTraining loads
    ErnieForPreTraining (use_task_id off, the fold kept) computing the original's numbers and ours,
    ErnieForMaskedLM its MLM logits, and AutoTokenizer the vocabulary as BertTokenizer, with the original's ids."""
    hf = _hf_model(transformers.ErnieForPreTraining, hidden_act="relu", use_task_id=True)
    hf_dir, run_dir, out = tmp_path / "hf", tmp_path / "run", tmp_path / "export"
    hf.save_pretrained(str(hf_dir))
    _vocab_file(hf_dir)
    run, _ = convert_hf_checkpoint(hf_dir)
    save_run_model(run_dir, run)
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"ErnieForPreTraining written to {out}")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "ernie" and config["architectures"] == ["ErnieForPreTraining"]
    assert not config.get("use_task_id") and config["hidden_act"] == "relu" and config["layer_norm_eps"] == 1e-5

    texts, second = ["Now is the winter of our discontent.", "To be?"], ["Made glorious summer!", "Hi, ho."]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert type(tokenizer).__name__.removesuffix("Fast") == "BertTokenizer"
    batch = tokenizer(texts, second, padding="longest", return_tensors="pt")
    original = transformers.BertTokenizer(str(hf_dir / "vocab.txt"))(texts, second, padding="longest",
                                                                       return_tensors="pt")
    for key, value in original.items():
        np.testing.assert_array_equal(batch[key].numpy(), value.numpy(), err_msg=key)
    assert batch["token_type_ids"].numpy().any() and not batch["attention_mask"].numpy().all()

    with torch.no_grad():
        expected = hf(**batch)
        loaded = transformers.AutoModelForPreTraining.from_pretrained(str(out), attn_implementation="eager").eval()
        assert type(loaded).__name__ == "ErnieForPreTraining"
        got = loaded(**batch)
        masked_lm = transformers.ErnieForMaskedLM.from_pretrained(str(out), attn_implementation="eager").eval()
        mlm_logits = masked_lm(**batch).logits
    ids = batch["input_ids"].numpy().astype("int32")
    ours = run.pretrainer({"token_ids": ids, "segment_ids": batch["token_type_ids"].numpy().astype("int32"),
                           "padding_mask": batch["attention_mask"].numpy().astype("int32"),
                           "mask_positions": np.tile(np.arange(ids.shape[1], dtype="int32"), (len(ids), 1))})
    real = batch["attention_mask"].numpy().astype(bool)
    for name, value in (("prediction_logits", got.prediction_logits), ("masked_lm", mlm_logits),
                        ("ours", ours["mlm"])):
        np.testing.assert_allclose(np.asarray(value)[real], expected.prediction_logits.numpy()[real], rtol=0,
                                   atol=TOLERANCE, err_msg=name)
    for name, value in (("seq_relationship_logits", got.seq_relationship_logits), ("ours", ours["nsp"])):
        np.testing.assert_allclose(np.asarray(value), expected.seq_relationship_logits.numpy(), rtol=0,
                                   atol=TOLERANCE, err_msg=name)
    assert np.abs(expected.prediction_logits.numpy()).max() > 1
