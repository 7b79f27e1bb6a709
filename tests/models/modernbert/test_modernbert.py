"""ModernBERT: parity with transformers' ModernBertModel / ModernBertForMaskedLM on odd configurations, the
published parameter counts, tokenizer.json-only checkpoints, the refusals, and a run from the command line."""

import json

import numpy as np
import pytest
import tensorflow as tf
import torch
import transformers

from counting import shapes_only
from hf_reference import perturbed_hf_model, save_hf_model
from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
from keras_bertology.errors import CheckpointError
from keras_bertology.models.modernbert import MODERNBERT, ModernBertBackbone
from keras_bertology.models.modernbert.convert import backbone_kwargs

TOLERANCE = 1e-5
SPECIALS = dict(pad_token_id=0, cls_token_id=1, sep_token_id=2, bos_token_id=1, eos_token_id=2)
# Heads 20 wide, a window of 8 (4 on each side) on texts of 23 tokens, global every 2nd layer, bases unlike
# the defaults.
ODD = dict(vocab_size=97, hidden_size=60, num_hidden_layers=4, num_attention_heads=3, intermediate_size=44,
           local_attention=8, global_attn_every_n_layers=2, initializer_range=0.2, **SPECIALS,
           rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 333.0}})


def _perturbed(cls, **config):
    model = perturbed_hf_model(cls, transformers.ModernBertConfig(**config))
    with torch.no_grad():  # the norms have no bias to perturb: move their scales off 1
        for name, tensor in model.named_parameters():
            if "norm" in name:
                tensor.add_(0.2 * torch.randn_like(tensor))
    return model


def _batch(vocab_size, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, (2, 23)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 17:] = 0
    return ids, mask


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    """(transformers ModernBertForMaskedLM of the ODD config, our converted run)."""
    folder = tmp_path_factory.mktemp("modernbert")
    model = _perturbed(transformers.ModernBertForMaskedLM, **ODD)
    save_hf_model(model, folder)
    return model, convert_hf_checkpoint(folder)[0]


def test_converted_masked_lm_matches_transformers(masked_lm):
    model, run = masked_lm
    ids, mask = _batch(97)
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
        states = model.model(input_ids=torch.tensor(ids, dtype=torch.long),
                             attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    real = mask.astype(bool)
    got = np.asarray(run.backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    assert np.abs(got - states)[real].max() <= TOLERANCE and np.abs(states).max() > 1
    positions = np.tile(np.arange(23, dtype="int32"), (2, 1))
    logits = np.asarray(run.pretrainer({"token_ids": ids, "padding_mask": mask, "mask_positions": positions})["mlm"])
    assert np.abs(logits - expected.logits.numpy())[real].max() <= TOLERANCE


def test_layers_follow_the_checkpoints_pattern_of_windows_and_bases(masked_lm):
    _, run = masked_lm
    attentions = [run.backbone.get_layer(f"encoder_block_{index}").attention for index in range(4)]
    assert [attention.window for attention in attentions] == [None, 8, None, 8]
    assert [attention.rotary_base for attention in attentions] == [5000.0, 333.0, 5000.0, 333.0]
    assert run.backbone.get_layer("encoder_block_0").attention_norm is None
    assert all(run.backbone.get_layer(f"encoder_block_{index}").attention_norm is not None for index in (1, 2, 3))


def test_a_bare_model_with_listed_layer_types_matches_transformers(tmp_path):
    config = dict(ODD, num_hidden_layers=5, layer_types=["full_attention", "sliding_attention", "sliding_attention",
                                                          "full_attention", "sliding_attention"], local_attention=6)
    model = _perturbed(transformers.ModernBertModel, **config)
    save_hf_model(model, tmp_path)
    run, report = convert_hf_checkpoint(tmp_path)
    assert run.pretrainer is None and report.heads == [] and run.backbone.global_every == 3
    ids, mask = _batch(97, seed=1)
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    got = np.asarray(run.backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    assert np.abs(got - expected.last_hidden_state.numpy())[mask.astype(bool)].max() <= TOLERANCE


@pytest.mark.parametrize("name,published,with_head", [("modernbert-base", 149_014_272, 149_655_232),
                                                       ("modernbert-large", 394_781_696, 395_881_664)])
def test_published_presets_have_the_published_counts(name, published, with_head):
    config = MODERNBERT.backbone_config(name)
    hf_config = transformers.ModernBertConfig(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"], num_hidden_layers=config["num_layers"],
        num_attention_heads=config["num_heads"], intermediate_size=config["intermediate_size"])
    with shapes_only():
        backbone = ModernBertBackbone(**config)
        assert backbone.count_params() == published == MODERNBERT.presets[name]["params"]
        assert MODERNBERT.build_pretrainer(backbone, preset=name).count_params() == with_head
        assert sum(p.numel() for p in transformers.ModernBertForMaskedLM(hf_config).parameters()) == with_head


TEXTS = ["Now is the winter of our discontent.", "Made glorious [MASK] by this sun of York!", "x  y"]


def test_a_checkpoint_with_only_tokenizer_json_tokenizes_as_transformers(tmp_path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # ModernBERT's [MASK] takes the spaces before it.
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", AddedToken("[MASK]", lstrip=True, special=True)]
    corpus = ["now is the winter of our discontent made glorious summer by this sun of york"] * 50
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    model = transformers.ModernBertModel(transformers.ModernBertConfig(
        **dict(ODD, vocab_size=tokenizer.get_vocab_size(), pad_token_id=tokenizer.token_to_id("[PAD]"))))
    save_hf_model(model, tmp_path)
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"), mask_token="[MASK]",
                                                  pad_token="[PAD]")
    assert not (tmp_path / "vocab.json").exists()
    ours = convert_hf_checkpoint(tmp_path)[0].tokenizer
    assert ours.mask_id == tokenizer.token_to_id("[MASK]") and ours.pad_id == tokenizer.token_to_id("[PAD]")
    plain = [text for text in TEXTS if "[MASK]" not in text]
    assert ours.tokenize(tf.constant(plain)).to_list() == theirs(plain, add_special_tokens=False)["input_ids"]
    packed = MODERNBERT.pack_text(ours, 16, tf.constant(TEXTS))  # what a SavedModel feeds the model
    expected = theirs(TEXTS, padding="max_length", max_length=16, truncation=True)
    assert packed["token_ids"].numpy().tolist() == expected["input_ids"]
    assert packed["padding_mask"].numpy().tolist() == expected["attention_mask"]


@pytest.mark.parametrize("change, words", [
    ({"attention_bias": True}, "attention_bias=True is not supported"),
    ({"norm_bias": True}, "norm_bias=True is not supported"),
    ({"layer_types": ["full_attention", "full_attention", "sliding_attention", "sliding_attention"]},
     "not one global layer every n"),
    ({"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1.0}}}, "rope_type 'linear'"),
])
def test_configs_of_another_computation_are_refused(change, words):
    config = dict(transformers.ModernBertConfig(**ODD).to_dict(), **change)
    with pytest.raises(CheckpointError, match=words):
        backbone_kwargs(config)


@pytest.mark.slow
def test_pretraining_modernbert_runs_serves_and_exports_to_transformers_and_back(tmp_path, capsys):
    """Four steps from the CLI, a SavedModel serving raw strings, `export --format hf` to a
    ModernBertForMaskedLM that computes our states, and that folder converting back to the same weights."""
    from cli_runs import pretrain_two_plays
    from keras_bertology.cli import main
    from keras_bertology.runs import load_run_model

    metrics, served = pretrain_two_plays(tmp_path, capsys, "modernbert", "modernbert-tiny", "--seq-len", "48",
                                         "--vocab-size", "400")
    assert metrics["steps"] == 4 and np.isfinite(metrics["history"][-1]["loss"])
    assert list(metrics["objectives"]) == ["mlm"]
    assert served.serve(tf.constant(["Now is the winter of our discontent.", ""]))["sequence_output"].shape[-1] == 128
    out = tmp_path / "hf"
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "--out", str(out)]) == 0
    run = load_run_model(tmp_path / "run")
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    assert type(hf).__name__ == "ModernBertForMaskedLM"
    ids = np.asarray(run.tokenizer.tokenize(tf.constant(TEXTS[:1])).to_list(), dtype="int32")
    with torch.no_grad():
        expected = hf.model(input_ids=torch.tensor(ids, dtype=torch.long)).last_hidden_state.numpy()
    got = np.asarray(run.backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"])
    assert np.abs(got - expected).max() <= TOLERANCE
    back, _ = convert_hf_checkpoint(out)
    assert all(np.array_equal(a, b) for a, b in zip(back.pretrainer.get_weights(), run.pretrainer.get_weights()))
    assert back.tokenizer.tokenize(tf.constant(TEXTS)).to_list() == run.tokenizer.tokenize(tf.constant(TEXTS)).to_list()

    # Whole BBC News articles: 2,048 tokens, where the local layers compute their window in blocks. Two
    # articles of each split (689 and 1,821 tokens: one padded, one past 1,024) cost half the CPU of twelve.
    from keras_bertology.finetune.datasets import load_task

    articles = [example["text"] for example in load_task("bbc-news", 2).splits["train"]]
    lengths = [len(ids) for ids in run.tokenizer.tokenize(tf.constant(articles)).to_list()]
    assert max(lengths) > 1024
    assert main(["finetune", "--task", "bbc-news", "--from", str(tmp_path / "run"), "--seq-len", "2048",
                 "--max-examples", "2", "--epochs", "1", "--out", str(tmp_path / "bbc"), "--no-export"]) == 0
    results = json.loads((tmp_path / "bbc" / "results.json").read_text())
    assert results["recipe"]["seq_len"] == 2048 and np.isfinite(results["step_losses"]).all()


# `make test-all`: test_init_from.py's second phase pretrains with --packing unpadded from the corpus and checks
# the same (test_resume.py's long-sequence test trains such a run on both backends and resumes it exactly).
@pytest.mark.extended
def test_pretraining_with_unpadded_packing_packs_documents_and_trains(tmp_path, capsys):
    from cli_runs import pretrain_two_plays

    metrics, _ = pretrain_two_plays(tmp_path, capsys, "modernbert", "modernbert-tiny", "--seq-len", "48",
                                    "--vocab-size", "400", "--packing", "unpadded", export=False)
    assert metrics["instances"] == "packed_instances (unpadded)" and np.isfinite(metrics["history"][-1]["loss"])
    assert json.loads((tmp_path / "run" / "model" / "run.json").read_text())["backbone"]["packed_documents"] is True


def test_the_family_masks_thirty_percent_with_bert_replacements():
    """Each row predicts exactly ceil(30% of its maskable tokens) (40 slots never cap 128 tokens), 80% of
    them [MASK], 10% a random id, 10% unchanged, each share within 5 standard errors over ~77,000 picks."""
    from types import SimpleNamespace

    from keras_bertology.data.random_draws import step_seed

    vocab, mask, pad = 1000, 4, 0
    tokenizer = SimpleNamespace(vocab_size=vocab, mask_id=mask, pad_id=pad, special_ids=[1, 2, 3],
                                word_start_table=np.ones(vocab, bool))
    masker = MODERNBERT.build_masker(tokenizer, max_predictions=40)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocab, (2000, 128)).astype("int32")
    ids[:, 0], ids[:, -1] = 1, 2
    out = {key: np.asarray(value) for key, value in masker({"token_ids": ids}, seed=step_seed(0, 0)).items()}
    maskable = (ids >= 5).sum(axis=1)
    counts = out["mask_weights"].sum(axis=1).astype(int)
    np.testing.assert_array_equal(counts, np.minimum(40, (maskable * 30 + 99) // 100))
    used = out["mask_weights"] > 0
    rows = np.nonzero(used)[0]
    now, original = out["token_ids"][rows, out["mask_positions"][used]], out["mask_ids"][used]
    picks = len(now)
    for observed, expected in [(np.mean(now == mask), 0.8 + 0.1 / vocab), (np.mean(now == original), 0.1 + 0.1 / vocab)]:
        assert abs(observed - expected) <= 5 * np.sqrt(expected * (1 - expected) / picks)
