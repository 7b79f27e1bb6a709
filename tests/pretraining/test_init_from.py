"""`pretrain --init-from RUN_DIR`: a second phase that starts from a finished run (ModernBERT's context
extension: longer sequences, the global rotary base raised)."""

import json

import numpy as np
import pytest

from keras_bertology.cli import main
from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.runs import load_run_model


def _pretrain(tmp_path, capsys, out, *flags):
    plays = [str(path) for path in default_corpus_paths()[:2]]
    argv = ["pretrain", "--model", "modernbert", "--preset", "modernbert-tiny", "--corpus", *plays, "--steps", "4",
            "--batch-size", "8", "--vocab-size", "400", "--no-export", "--out", str(tmp_path / out), *flags]
    code = main(argv)
    return code, capsys.readouterr()


@pytest.mark.slow
def test_a_second_phase_starts_from_the_first_runs_weights_and_vocabulary(tmp_path, capsys):
    code, printed = _pretrain(tmp_path, capsys, "short", "--seq-len", "32", "--global-rotary-base", "10000",
                              "--local-window", "8")
    assert code == 0, printed.err
    code, printed = _pretrain(tmp_path, capsys, "long", "--seq-len", "96", "--init-from", str(tmp_path / "short"),
                              "--learning-rate", "1e-9", "--packing", "unpadded", "--global-rotary-base", "160000")
    assert code == 0, printed.err
    first, second = load_run_model(tmp_path / "short"), load_run_model(tmp_path / "long")
    config = second.backbone.get_config()
    assert config["global_rotary_base"] == 160000.0 and config["packed_documents"] is True  # this run's options
    assert config["local_window"] == 8  # the first run's, not given again
    assert config["vocab_size"] == first.backbone.vocab_size and second.seq_len == 96
    assert (tmp_path / "long" / "tokenizer" / "tokenizer.json").read_text() == \
        (tmp_path / "short" / "tokenizer" / "tokenizer.json").read_text()
    moved = [np.abs(a - b).max() for a, b in zip(second.pretrainer.get_weights(), first.pretrainer.get_weights())]
    assert max(moved) < 1e-6  # four steps at 1e-9 from the first run's weights
    metrics = json.loads((tmp_path / "long" / "metrics.json").read_text())
    assert metrics["init_from"] == str((tmp_path / "short").resolve()) and metrics["schedule"] == "wsd"
    assert metrics["instances"] == "packed_instances (unpadded)" and np.isfinite(metrics["history"][-1]["loss"])


def test_what_a_run_cannot_start_from_is_refused_in_one_line(tmp_path, capsys):
    code, printed = _pretrain(tmp_path, capsys, "a", "--init-from", str(tmp_path / "missing"))
    assert code == 2 and "is not a finished run folder" in printed.err
    other = tmp_path / "bert-run" / "model"
    other.mkdir(parents=True)
    (other / "run.json").write_text(json.dumps({"family": "bert"}))
    code, printed = _pretrain(tmp_path, capsys, "b", "--init-from", str(tmp_path / "bert-run"))
    assert code == 2 and "holds a bert model, not --model modernbert" in printed.err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_run_is_named_by_the_preset_of_the_run_it_starts_from(tmp_path):
    """The run keeps its source's shape: without --preset it takes the source's preset, and a preset of
    other sizes is refused (it named bert-tiny's shape bert-mini in run.json and the export)."""
    from keras_bertology.errors import ConfigError
    from keras_bertology.pretraining.options import PretrainOptions

    source = tmp_path / "mini"
    (source / "model").mkdir(parents=True)
    (source / "model" / "run.json").write_text(json.dumps({"family": "bert", "preset": "bert-mini", "backbone": {
        "num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024}}))
    options = PretrainOptions(init_from=str(source)).with_init_source()
    assert options.preset == "bert-mini" and options.validate().name == "bert"
    with pytest.raises(ConfigError, match=r"--preset bert-tiny \(num_layers 2, .*\) disagrees with the bert-mini "
                                          r"model of --init-from .* or give --preset bert-mini$"):
        PretrainOptions(preset="bert-tiny", init_from=str(source)).with_init_source().validate()


def test_a_masked_lm_checkpoint_without_a_pooler_gets_one_for_next_sentence_prediction(tmp_path, capsys):
    """transformers' BertForMaskedLM has no pooler, which BERT's next-sentence head needs: the run builds
    it (and the head) freshly initialised, as BertForPreTraining.from_pretrained does, and says so."""
    import transformers

    words = "the king loved queen it was a dark night wind blew hard second document begins ends here".split()
    config = transformers.BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=24, max_position_embeddings=32)
    transformers.BertForMaskedLM(config).save_pretrained(str(tmp_path / "hf"))
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mlm")]) == 0
    (tmp_path / "corpus.txt").write_text("It was a dark night. The wind blew hard.\n\nA second document begins. "
                                         "It ends here.\n\n" * 8)
    code = main(["pretrain", "--init-from", str(tmp_path / "mlm"), "--corpus", str(tmp_path / "corpus.txt"),
                 "--steps", "1", "--batch-size", "4", "--seq-len", "16", "--dupe-factor", "1", "--learning-rate", "1e-9",
                 "--xla", "off", "--precision", "float32", "--no-export", "--out", str(tmp_path / "run")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert f"bertology: warning: --init-from {tmp_path / 'mlm'} has no pooler, nsp_head: freshly initialised" \
        in printed.err.splitlines()
    assert f"model: bert as {tmp_path / 'mlm'}," in printed.out  # a converted model has no preset
    source, run = load_run_model(tmp_path / "mlm"), load_run_model(tmp_path / "run")
    assert run.preset is None and run.backbone.get_config()["use_pooler"] and "nsp" in run.pretrainer.objectives
    for name in ("embeddings", "encoder_block_0"):  # the checkpoint's weights, one step at 1e-9 on
        for ours, theirs in zip(run.backbone.get_layer(name).get_weights(),
                                source.backbone.get_layer(name).get_weights()):
            assert np.abs(ours - theirs).max() < 1e-6
