"""An interrupted run resumes from its newest checkpoint: its weights, optimizer state and history."""

import json
import shutil

import keras
import numpy as np
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.errors import ConfigError
from keras_bertology.runs import load_run_model
from keras_bertology.training.checkpoints import HISTORY_FILE, MODEL_FILE, RunCheckpoints
from keras_bertology.training.pretrain import PretrainOptions, pretrain


def _options(tmp_path, **overrides):
    settings = dict(
        model="roberta", preset="roberta-tiny", corpus=[str(default_corpus_paths()[0])],
        steps=6, log_every=3, batch_size=8, seq_len=32, vocab_size=400,
        out=str(tmp_path / "run"), export=str(tmp_path / "export"), verbose=0,
    )
    return PretrainOptions(**dict(settings, **overrides))


def _assert_same_variables(model, reference):
    """Every weight and optimizer slot equal, name by name."""
    pairs = [(model.weights, reference.weights)]
    if getattr(model, "optimizer", None) is not None and getattr(reference, "optimizer", None) is not None:
        pairs.append((model.optimizer.variables, reference.optimizer.variables))
    for ours, theirs in pairs:
        assert [v.path for v in ours] == [v.path for v in theirs]
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("resume")
    metrics = pretrain(_options(tmp_path))
    return tmp_path, metrics


@pytest.mark.slow
def test_checkpoint_is_one_folder_with_its_history(finished):
    tmp_path, metrics = finished
    checkpoints = RunCheckpoints(tmp_path / "run")
    folder, step = checkpoints.latest()
    assert step == metrics["steps"] == 6
    assert sorted(p.name for p in folder.iterdir()) == [HISTORY_FILE, MODEL_FILE]
    assert checkpoints.load_history() == metrics["history"]
    assert len(list(checkpoints.directory.iterdir())) == 2  # the newest two are kept


@pytest.mark.slow
def test_load_model_returns_the_saved_weights(finished, tmp_path):
    run_tmp, _ = finished
    model, step = RunCheckpoints(run_tmp / "run").load_model()
    copy = RunCheckpoints(tmp_path / "copy")
    copy.save(model, step + 1, [])
    reloaded, reloaded_step = copy.load_model()
    assert reloaded_step == step + 1
    _assert_same_variables(reloaded, model)


@pytest.mark.slow
def test_resuming_a_finished_run_keeps_the_checkpoint_weights(finished):
    """A second run with --resume only re-exports: the model must be the checkpoint's, not fresh."""
    tmp_path, _ = finished
    checkpoints = RunCheckpoints(tmp_path / "run")
    checkpoint, _ = checkpoints.load_model()
    metrics = pretrain(_options(tmp_path, resume=True))
    assert [record["step"] for record in metrics["history"]] == list(range(1, 7))
    exported = load_run_model(tmp_path / "run").pretrainer
    _assert_same_variables(exported, checkpoint)
    keras.backend.clear_session()


@pytest.mark.slow
def test_resume_continues_after_the_newest_checkpoint(tmp_path):
    pretrain(_options(tmp_path))
    checkpoints = RunCheckpoints(tmp_path / "run")
    assert checkpoints.latest()[1] == 6

    # Simulate a crash during the last window: its checkpoint never landed.
    shutil.rmtree(checkpoints.latest()[0])
    assert checkpoints.latest()[1] == 5
    assert [record["step"] for record in checkpoints.load_history()] == [1, 2, 3, 4, 5]
    model, step = checkpoints.load_model()
    assert step == 5 and int(model.optimizer.iterations.numpy()) == 5
    keras.backend.clear_session()

    with pytest.raises(ConfigError, match="--resume"):
        pretrain(_options(tmp_path))
    with pytest.raises(ConfigError, match="changed: seq_len"):
        pretrain(_options(tmp_path, resume=True, seq_len=48))

    metrics = pretrain(_options(tmp_path, resume=True))
    assert [record["step"] for record in metrics["history"]] == [1, 2, 3, 4, 5, 6]
    resumed, step = checkpoints.load_model()
    assert step == 6 and int(resumed.optimizer.iterations.numpy()) == 6
    # The step it resumed from was trained from the checkpoint: only one step of change.
    before = model.get_layer("mlm_head").output_bias.numpy()
    after = resumed.get_layer("mlm_head").output_bias.numpy()
    assert 0 < np.abs(after - before).max() < 0.01
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == 6
