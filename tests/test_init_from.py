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
    from keras_bertology.training.options import PretrainOptions

    source = tmp_path / "mini"
    (source / "model").mkdir(parents=True)
    (source / "model" / "run.json").write_text(json.dumps({"family": "bert", "preset": "bert-mini", "backbone": {
        "num_layers": 4, "hidden_size": 256, "num_heads": 4, "intermediate_size": 1024}}))
    options = PretrainOptions(init_from=str(source)).with_init_source()
    assert options.preset == "bert-mini" and options.validate().name == "bert"
    with pytest.raises(ConfigError, match=r"--preset bert-tiny \(num_layers 2, .*\) disagrees with the bert-mini "
                                          r"model of --init-from .* or give --preset bert-mini$"):
        PretrainOptions(preset="bert-tiny", init_from=str(source)).with_init_source().validate()
