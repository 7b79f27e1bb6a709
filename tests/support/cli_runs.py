"""A short `bertology pretrain` on two plays, the way the family tests run every family."""

import json

import tensorflow as tf

from keras_bertology import __version__
from keras_bertology.cli import main
from keras_bertology.data.corpus import default_corpus_paths


def pretrain_two_plays(tmp_path, capsys, model, preset, *flags, export=True):
    """(metrics.json, the loaded SavedModel or None without `export`) of a 4-step run of `model` with
    extra `flags`."""
    plays = [str(path) for path in default_corpus_paths()[:2]]
    exporting = ["--export", str(tmp_path / "export")] if export else ["--no-export"]
    argv = ["pretrain", "--model", model, "--preset", preset, "--corpus", *plays, "--steps", "4",
            "--batch-size", "8", "--out", str(tmp_path / "run"), *exporting, *flags]
    assert main(argv) == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["bertology_version"] == __version__  # every run says which version wrote it
    if export:
        assert json.loads((tmp_path / "export" / "assets" / "bertology.json").read_text())["bertology_version"] \
            == __version__
    return metrics, tf.saved_model.load(str(tmp_path / "export")) if export else None
