"""An interrupted run resumes from its newest checkpoint: its weights, optimizer state and history."""

import json
import shutil

import keras
import numpy as np
import pytest

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.errors import CheckpointError, ConfigError
from keras_bertology.models.roberta import ROBERTA
from keras_bertology.runs import MODEL_DIR, load_run_model
from keras_bertology.training.callbacks import CheckpointEveryWindow, MetricHistory
from keras_bertology.training.checkpoints import HISTORY_FILE, MODEL_FILE, RANDOM_STATE_FILE, RunCheckpoints
from keras_bertology.training.pretrain import PretrainOptions, pretrain


def _options(tmp_path, **overrides):
    settings = dict(
        model="roberta", preset="roberta-tiny", corpus=[str(default_corpus_paths()[0])],
        steps=6, log_every=3, batch_size=8, seq_len=32, vocab_size=400,
        out=str(tmp_path / "run"), export=str(tmp_path / "export"), verbose=0,
    )
    return PretrainOptions(**dict(settings, **overrides))


def _assert_same_variables(model, reference, optimizer=True):
    """Every weight (and with `optimizer`, every optimizer slot and the step counter) equal, name by name."""
    pairs = [(model.weights, reference.weights)]
    if optimizer:
        pairs.append((model.optimizer.variables, reference.optimizer.variables))
    for ours, theirs in pairs:
        assert [v.path for v in ours] == [v.path for v in theirs]
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)


def _trained_tiny_model(steps=2):
    """A small compiled model whose weights and Adam slots have moved away from their start."""
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(5, activation="relu")(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(8, 4)), rng.normal(size=(8, 3)), batch_size=4, epochs=steps // 2, verbose=0)
    return model


def _records(*steps):
    return [{"step": step, "loss": 1.0 / step} for step in steps]


def test_load_model_returns_the_saved_weights(tmp_path):
    """What load_model returns is what was saved: weights, optimizer slots and step counter."""
    model = _trained_tiny_model()
    assert int(model.optimizer.iterations.numpy()) == 2
    checkpoints = RunCheckpoints(tmp_path / "run")
    checkpoints.save(model, 2, _records(1, 2))
    loaded, step = checkpoints.load_model()
    assert step == 2
    _assert_same_variables(loaded, model)
    assert checkpoints.load_history() == _records(1, 2)


def test_only_the_newest_two_complete_checkpoints_count(tmp_path):
    model = _trained_tiny_model()
    checkpoints = RunCheckpoints(tmp_path / "run")
    checkpoints.start(PretrainOptions())
    assert checkpoints.latest() is None and checkpoints.load_history() == []
    for step in (1, 2, 3):
        checkpoints.save(model, step, _records(*range(1, step + 1)))
    assert sorted(p.name for p in checkpoints.directory.iterdir()) == ["step-0000002", "step-0000003"]
    # A later folder without its history, and a killed save's staging, are not checkpoints.
    (checkpoints.directory / "step-0000009").mkdir()
    shutil.copy(checkpoints.directory / "step-0000003" / MODEL_FILE, checkpoints.directory / "step-0000009")
    staging = checkpoints.directory / ".step-0000004.x1y2.tmp"
    shutil.copytree(checkpoints.directory / "step-0000003", staging)
    assert checkpoints.latest() == (checkpoints.directory / "step-0000003", 3)
    assert checkpoints.load_history() == _records(1, 2, 3)
    checkpoints.save(model, 4, _records(1, 2, 3, 4))  # retention keeps the newest complete ones
    assert [step for step, _ in checkpoints._complete()] == [3, 4]
    checkpoints.start(PretrainOptions(resume=True))  # a resumed run clears the staging
    assert not staging.exists()


def test_a_save_that_fails_half_way_keeps_the_previous_checkpoint(tmp_path):
    model = _trained_tiny_model()
    checkpoints = RunCheckpoints(tmp_path / "run")
    checkpoints.save(model, 2, _records(1, 2))

    class Unsavable:
        def save(self, path):
            path.write_bytes(b"PK truncated")
            raise KeyboardInterrupt("killed during the save")

    with pytest.raises(KeyboardInterrupt):
        checkpoints.save(Unsavable(), 3, _records(1, 2, 3))
    assert checkpoints.latest()[1] == 2 and checkpoints.load_history() == _records(1, 2)
    assert sorted(p.name for p in checkpoints.directory.iterdir()) == ["step-0000002"]


def test_each_window_checkpoint_holds_the_history_up_to_it(tmp_path):
    model = _trained_tiny_model()
    checkpoints = RunCheckpoints(tmp_path / "run")
    data = (np.ones((8, 4)), np.ones((8, 3)))

    def fit(callbacks):
        model.fit(*data, batch_size=4, epochs=2, steps_per_epoch=1, callbacks=callbacks, verbose=0)

    history = MetricHistory(steps_per_window=1, batch_size=4)
    fit([history, CheckpointEveryWindow(checkpoints, history)])
    assert checkpoints.latest()[1] == 2
    assert [record["step"] for record in checkpoints.load_history()] == [1, 2]
    history = MetricHistory(steps_per_window=1, batch_size=4)
    with pytest.raises(RuntimeError, match="must follow its MetricHistory"):
        fit([CheckpointEveryWindow(checkpoints, history), history])


def test_unreadable_checkpoints_raise_checkpoint_errors(tmp_path):
    checkpoints = RunCheckpoints(tmp_path / "run")
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        checkpoints.load_model()
    checkpoints.save(_trained_tiny_model(), 2, _records(1, 2))
    folder, _ = checkpoints.latest()
    (folder / HISTORY_FILE).write_text("[{")
    with pytest.raises(CheckpointError, match="history.json"):
        checkpoints.load_history()
    (folder / MODEL_FILE).write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="model.keras"):
        checkpoints.load_model()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("resume")
    metrics = pretrain(_options(tmp_path))
    return tmp_path, metrics


def _steps(metrics):
    return [record["step"] for record in metrics["history"]]


@pytest.mark.slow
def test_checkpoint_is_one_folder_with_its_history(finished):
    tmp_path, metrics = finished
    checkpoints = RunCheckpoints(tmp_path / "run")
    folder, step = checkpoints.latest()
    assert step == _steps(metrics)[-1] == metrics["steps"] == 6
    assert sorted(p.name for p in folder.iterdir()) == [HISTORY_FILE, MODEL_FILE, RANDOM_STATE_FILE]
    assert checkpoints.load_history() == metrics["history"]
    kept = sorted(p.name for p in checkpoints.directory.iterdir())
    assert kept == [f"step-{step:07d}" for step in _steps(metrics)[-2:]]


@pytest.mark.slow
def test_resuming_a_finished_run_keeps_the_checkpoint_weights(finished):
    """A second run with --resume only re-exports: the model must be the checkpoint's, not fresh."""
    tmp_path, metrics = finished
    folder, step = RunCheckpoints(tmp_path / "run").latest()
    checkpoint = keras.saving.load_model(folder / MODEL_FILE)  # read directly, not through load_model
    assert int(checkpoint.optimizer.iterations.numpy()) == step
    resumed = pretrain(_options(tmp_path, resume=True))
    assert resumed["history"] == metrics["history"]
    _assert_same_variables(load_run_model(tmp_path / "run").pretrainer, checkpoint, optimizer=False)
    exported = keras.saving.load_model(tmp_path / "run" / MODEL_DIR / "pretrainer.keras")
    _assert_same_variables(exported, checkpoint)  # optimizer slots and iterations too
    keras.backend.clear_session()


@pytest.mark.slow
def test_resume_continues_after_the_newest_checkpoint(tmp_path):
    options = _options(tmp_path)
    steps = _steps(pretrain(options))
    checkpoints = RunCheckpoints(tmp_path / "run")
    assert checkpoints.latest()[1] == steps[-1]
    uninterrupted = [np.asarray(v) for v in checkpoints.load_model()[0].weights]

    # Simulate a crash during the last window: its checkpoint never landed.
    shutil.rmtree(checkpoints.latest()[0])
    assert checkpoints.latest()[1] == steps[-2]
    assert _steps({"history": checkpoints.load_history()}) == steps[:-1]
    model, step = checkpoints.load_model()
    assert step == steps[-2] and int(model.optimizer.iterations.numpy()) == steps[-2]
    keras.backend.clear_session()

    with pytest.raises(ConfigError, match="--resume"):
        pretrain(options)
    with pytest.raises(ConfigError, match="changed: seq_len"):
        pretrain(_options(tmp_path, resume=True, seq_len=48))

    metrics = pretrain(_options(tmp_path, resume=True))
    assert _steps(metrics) == steps
    resumed, step = checkpoints.load_model()
    assert step == steps[-1] and int(resumed.optimizer.iterations.numpy()) == steps[-1]
    # It went on from the checkpoint's weights: only the last window's updates apart.
    # Adam moves a weight by at most ~3 learning rates a step (plus weight decay);
    # a run restarted from fresh weights is off by the initializers' scale.
    bound = 4 * options.peak_learning_rate(ROBERTA) * (steps[-1] - steps[-2])
    for before, after in zip(model.trainable_weights, resumed.trainable_weights):
        change = np.abs(np.asarray(after) - np.asarray(before)).max()
        assert change <= bound, f"{after.path} moved {change:.4f} in {steps[-1] - steps[-2]} steps"
    assert any(np.any(np.asarray(a) != np.asarray(b))
               for a, b in zip(model.trainable_weights, resumed.trainable_weights))
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == steps[-1]
    # The same batches, masks and dropout as the uninterrupted run: the same weights.
    for variable, expected in zip(resumed.weights, uninterrupted):
        np.testing.assert_array_equal(np.asarray(variable), expected, err_msg=variable.path)
