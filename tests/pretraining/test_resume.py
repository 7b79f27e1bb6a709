"""An interrupted run resumes from its newest checkpoint: its weights, optimizer state and history."""

import json
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.corpus import default_corpus_paths
from keras_bertology.errors import CheckpointError, ConfigError, TrainingError
from keras_bertology.folder_lock import LOCK_FILE
from keras_bertology.models.roberta import ROBERTA
from keras_bertology.runs import MODEL_DIR, load_run_model
from keras_bertology.engine.callbacks import (
    CheckpointEveryWindow, MetricHistory, StopAtCheckpointOnSignal, StopOnNonFiniteLoss, StoppedBySignal)
from keras_bertology.engine.checkpoints import HISTORY_FILE, MODEL_FILE, RANDOM_STATE_FILE, RunCheckpoints
from keras_bertology.pretraining.pretrain import PretrainOptions, pretrain


# The kill test runs once per backend in CI: float32 on TensorFlow, bfloat16 under JAX (the Makefile's
# JAX_TESTS). What it checks is the checkpoint logic, the same code in both precisions;
# test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one_in_its_precision resumes bfloat16 on
# TensorFlow, and on JAX the bfloat16 kill test ends with an uninterrupted run's weights too. The stop
# inside a window is the callbacks' logic, backend-independent: it runs once, in the suite's float32.
ONE_PRECISION_PER_BACKEND = [
    pytest.param("float32", marks=pytest.mark.skipif(keras.backend.backend() == "jax", reason="CI runs bfloat16 on JAX")),
    pytest.param("mixed_bfloat16", marks=pytest.mark.skipif(keras.backend.backend() != "jax",
                                                           reason="CI runs it under JAX (Makefile JAX_TESTS)")),
]


def _options(tmp_path, **overrides):
    settings = dict(
        model="roberta", preset="roberta-tiny", corpus=[str(default_corpus_paths()[0])],
        steps=6, log_every=3, batch_size=8, seq_len=32, vocab_size=400,
        out=str(tmp_path / "run"), no_export=True, verbose=0,
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


def test_a_non_finite_loss_stops_the_run_before_its_weights_reach_a_checkpoint(tmp_path):
    model = _trained_tiny_model()
    checkpoints = RunCheckpoints(tmp_path / "run")
    x = np.ones((24, 4), np.float32)
    x[16:] = np.nan  # from the fifth batch of 4 on: the third window (steps 5-6) reads NaN inputs
    history = MetricHistory(steps_per_window=2, batch_size=4)
    callbacks = [StopOnNonFiniteLoss(2, checkpoints), history, CheckpointEveryWindow(checkpoints, history)]
    with pytest.raises(TrainingError, match=r"loss became nan between steps 5 and 6.*step-0000004.*step 4"):
        model.fit(tf.data.Dataset.from_tensor_slices((x, np.ones((24, 3), np.float32))).batch(4), epochs=3,
                  steps_per_epoch=2, callbacks=callbacks, verbose=0)
    assert checkpoints.latest()[1] == 4
    assert all(np.isfinite(np.asarray(v)).all() for v in checkpoints.load_model()[0].weights)
    with pytest.raises(TrainingError, match="no checkpoint was written"):
        StopOnNonFiniteLoss(2, RunCheckpoints(tmp_path / "empty")).on_epoch_end(0, {"loss": float("inf")})


# `bertology` with the optimizer's rate 1e29 times the flag's: --learning-rate refuses rates above 10, at
# which a tiny run's loss stays finite, but 1e30 makes it NaN within the first window.
@pytest.mark.slow
def test_a_diverging_pretraining_ends_with_one_line_and_a_non_zero_exit(tmp_path, monkeypatch, capsys):
    from keras_bertology.cli import main
    from keras_bertology.pretraining import pretrain

    make = pretrain.make_optimizer
    monkeypatch.setattr(pretrain, "make_optimizer",
                        lambda kind, rate, *args, **kwargs: make(kind, rate * 1e29, *args, **kwargs))
    status = main(["pretrain", "--model", "roberta", "--preset", "roberta-tiny", "--corpus",
                   str(default_corpus_paths()[0]), "--steps", "6", "--log-every", "3", "--batch-size", "8",
                   "--seq-len", "32", "--vocab-size", "400", "--learning-rate", "10", "--out", str(tmp_path / "run"),
                   "--export", str(tmp_path / "export")])
    stderr = capsys.readouterr().err
    assert status == 2  # the CLI's status for every error it explains
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("bertology: error: the loss became") and "--learning-rate" in error
    assert "Traceback" not in stderr
    assert not (tmp_path / "export").exists()


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


def test_a_random_state_of_another_version_of_the_layers_is_drawn_anew(tmp_path, capsys):
    """A run started before its layers' seeds changed (the blocks' dropout seeds) resumes, its dropout drawn
    anew, instead of stopping: the weights of model.keras say it is the same model."""
    checkpoints = RunCheckpoints(tmp_path / "run")
    model = _trained_tiny_model()
    checkpoints.save(model, 2, _records(1, 2))
    folder, _ = checkpoints.latest()
    np.savez(folder / RANDOM_STATE_FILE, np.zeros(2, "int64"))
    loaded, step = checkpoints.load_model()
    assert step == 2
    _assert_same_variables(loaded, model)
    assert "holds the random state of another version" in capsys.readouterr().err


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
def test_an_export_into_a_full_disk_keeps_metrics_and_plot_and_resume_exports(finished, tmp_path, monkeypatch):
    """metrics.json and the loss plot are written before the export; the export's full-disk error says that
    --resume exports, and it does."""
    run = tmp_path / "run"
    shutil.copytree(finished[0] / "run", run)
    for name in ("metrics.json", "loss_curve.png"):
        (run / name).unlink()
    save = tf.saved_model.save

    def full_disk(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "variables: No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", full_disk)
    options = _options(tmp_path, resume=True, no_export=False, export=str(tmp_path / "export"))
    with pytest.raises(OSError, match="--resume exports it") as full:
        pretrain(options)
    assert "\n" not in str(full.value) and str(run) in full.value.strerror
    assert json.loads((run / "metrics.json").read_text())["fill_mask"] == []
    assert (run / "loss_curve.png").is_file() and not (tmp_path / "export").exists()
    monkeypatch.setattr(tf.saved_model, "save", save)
    assert pretrain(options)["fill_mask"] and (tmp_path / "export" / "saved_model.pb").is_file()
    assert json.loads((run / "metrics.json").read_text())["fill_mask"]  # rewritten with the export's examples
    keras.backend.clear_session()


@pytest.mark.slow
def test_resume_continues_after_the_newest_checkpoint(finished, tmp_path):
    options = _options(tmp_path)
    shutil.copytree(finished[0] / "run", tmp_path / "run")  # a copy of the finished run of the same options
    steps = _steps(finished[1])
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


@pytest.mark.slow
@pytest.mark.parametrize("model, family_options, packing", [
    ("bigbird", {"block_size": 8, "random_blocks": 1}, None), ("linformer", {"projected_length": 16}, None),
    ("modernbert", {"local_window": 8}, "unpadded")], ids=["bigbird", "linformer", "modernbert"])
def test_the_long_sequence_attentions_resume_exactly(tmp_path, model, family_options, packing):
    """At 64 tokens, block-sparse (above BigBird's 56), projected to 16 rows, and in windows of 8 computed
    in blocks over rows of packed documents: a checkpoint holds the plans' seeds, the projections and the
    schedule, so the resumed run's weights are the uninterrupted run's."""
    options = dict(model=model, preset=f"{model}-tiny", seq_len=64, family_options=family_options, packing=packing)
    pretrain(_options(tmp_path, **options))
    checkpoints = RunCheckpoints(tmp_path / "run")
    uninterrupted = [np.asarray(v) for v in checkpoints.load_model()[0].weights]
    shutil.rmtree(checkpoints.latest()[0])
    keras.backend.clear_session()
    pretrain(_options(tmp_path, resume=True, **options))
    resumed, step = checkpoints.load_model()
    config = resumed.backbone.get_config()
    assert step == 6 and family_options.items() <= {**config, **config.get("attention_options", {})}.items()
    for variable, expected in zip(resumed.weights, uninterrupted):
        np.testing.assert_array_equal(np.asarray(variable), expected, err_msg=variable.path)


def _complete_checkpoints_only(run_dir):
    """Every visible checkpoint folder holds all of its files: a save cut by a kill stays hidden."""
    for folder in (run_dir / "checkpoints").glob("step-*"):
        assert sorted(p.name for p in folder.iterdir()) == [HISTORY_FILE, MODEL_FILE, RANDOM_STATE_FILE], folder


# Steps of the killed run: the second kill comes up to 0.4 s after step 6's checkpoint. At 12 steps (a save
# after each) JAX once ran the six steps left and their six saves in less; at 40, 34 steps and 17 saves
# (logged every 2) take about three times as long.
STEPS = 40


@pytest.mark.slow
@pytest.mark.parametrize("precision", ONE_PRECISION_PER_BACKEND)
@pytest.mark.usefixtures("graph_rewrites_as_in_commands")
def test_runs_killed_at_random_moments_end_with_the_weights_of_an_uninterrupted_run(tmp_path, precision):
    """kill -9 in the middle of a run, twice at random moments (before the first checkpoint, then at a
    random point of a later window, saves included), then --resume: the final weights are exactly those
    of a run never interrupted (float32 on TensorFlow, mixed_bfloat16 under JAX).
    BERT-Tiny: static masking (its file written once), NSP, dropout."""
    corpus = [str(path) for path in default_corpus_paths()[:2]]  # NSP draws its random B from another document
    settings = dict(model="bert", preset="bert-tiny", steps=STEPS, log_every=2, corpus=corpus, dupe_factor=2,
                    precision=precision)
    reference = pretrain(_options(tmp_path / "reference", **settings))
    expected = [np.asarray(v) for v in RunCheckpoints(tmp_path / "reference" / "run").load_model()[0].weights]
    keras.backend.clear_session()

    run_dir = tmp_path / "killed" / "run"
    command = [sys.executable, "-m", "keras_bertology.cli", "pretrain", "--model", "bert", "--preset", "bert-tiny",
               "--corpus", *corpus, "--steps", str(STEPS), "--log-every", "2",
               "--batch-size", "8", "--seq-len", "32", "--vocab-size", "400", "--dupe-factor", "2",
               "--out", str(run_dir), "--precision", precision,
               "--no-export", "--resume"]
    rng = np.random.default_rng(1)
    kills = [(0, rng.uniform(2.0, 6.0)), (6, rng.uniform(0.0, 0.4))]
    for reached, delay in kills:  # kill `delay` seconds after the checkpoint of step `reached`
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while reached and _newest_step(run_dir) < reached and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        assert process.poll() is None, "the run ended before it could be killed"
        if reached:  # a run past its first checkpoint holds its folder; the kill below frees it for --resume
            assert (run_dir / LOCK_FILE).read_text() == f"{process.pid}\n"
        process.send_signal(signal.SIGKILL)
        process.wait()
        _complete_checkpoints_only(run_dir)
    assert _newest_step(run_dir) < STEPS
    # The resume needs no process of its own (the kills did): in this one, with the command's graph rewrites.
    pretrain(_options(tmp_path / "killed", resume=True, **settings))
    _complete_checkpoints_only(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert _steps(metrics) == _steps(reference)
    final, step = RunCheckpoints(run_dir).load_model()
    assert step == STEPS
    for variable, value in zip(final.weights, expected):
        np.testing.assert_array_equal(np.asarray(variable), value, err_msg=variable.path)


def _newest_step(run_dir):
    latest = RunCheckpoints(run_dir).latest()
    return latest[1] if latest else 0


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("damaged", [RANDOM_STATE_FILE, MODEL_FILE])
def test_a_damaged_newest_checkpoint_is_named_and_passed_over(tmp_path, capsys, damaged):
    """A truncated file (a full disk, a copy cut short) in the newest checkpoint: one line names it, and the
    run resumes from the newest intact one; where none is intact, one line refuses."""
    model = _trained_tiny_model()
    checkpoints = RunCheckpoints(tmp_path / "run")
    for step in (2, 3):
        checkpoints.save(model, step, _records(*range(1, step + 1)))
    _truncate(checkpoints.directory / "step-0000003" / damaged)
    loaded, step = checkpoints.load_model()
    assert step == 2 and checkpoints.load_history() == _records(1, 2)
    _assert_same_variables(loaded, model)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"bertology: {checkpoints.directory / 'step-0000003' / damaged} is damaged "
                     f"(File is not a zip file); resuming from step-0000002"]
    _truncate(checkpoints.directory / "step-0000002" / damaged)
    with pytest.raises(CheckpointError, match=r"^no intact checkpoint to resume from: .*step-0000003.*step-0000002"):
        RunCheckpoints(tmp_path / "run").load_model()


@pytest.mark.slow
def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one_in_its_precision(tmp_path):
    """Copy a finished bfloat16 run, delete the copy's newest checkpoint, resume it: the same weights, bit for
    bit. The checkpoint reloads in the policy it trained in (reloaded in float32, its matmuls would give
    other updates), a resume in another precision is refused, and the policy that ran is what the run records.
    (float32 runs resume exactly in the kill, SIGTERM and stop-in-window tests.)"""
    precision = "mixed_bfloat16"
    metrics = pretrain(_options(tmp_path / "a", steps=4, log_every=2, batch_size=4, precision=precision))
    assert metrics["precision"] == precision
    assert json.loads((tmp_path / "a" / "run" / MODEL_DIR / "run.json").read_text())["precision"] == precision
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    checkpoints = RunCheckpoints(tmp_path / "b" / "run")
    shutil.rmtree(checkpoints.latest()[0])
    other = "float32"
    with pytest.raises(ConfigError, match=f"^this run trained in {precision} and --precision gives {other}; "):
        pretrain(_options(tmp_path / "b", steps=4, log_every=2, batch_size=4, precision=other, resume=True))
    resumed = pretrain(_options(tmp_path / "b", steps=4, log_every=2, batch_size=4, precision=precision,
                                resume=True))
    assert resumed["weights_sha256"] == metrics["weights_sha256"]
    assert resumed["precision"] == precision and resumed["history"][:1] == metrics["history"][:1]
    assert {layer.dtype_policy.name for layer in checkpoints.load_model()[0]._flatten_layers()} == {precision}


# 48 steps in windows of 4: one uninterrupted run of them, made with a command's graph rewrites (the SIGTERM
# test's stopped run is a command; the rewrites change float rounding), is the reference of the SIGTERM test and
# of the stop inside a window without accumulation, which runs with those rewrites too.
WINDOWED = dict(steps=48, log_every=4)


@pytest.fixture(scope="module")
def windowed_reference(tmp_path_factory):
    """metrics of the uninterrupted run of `WINDOWED`, with the rewrites of `graph_rewrites_as_in_commands`."""
    rewrites = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
    try:
        return pretrain(_options(tmp_path_factory.mktemp("windowed-reference"), **WINDOWED))
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": rewrites})
        keras.backend.clear_session()


# Without accumulation the stop comes at a step's end, which the SIGTERM test below checks on the same windows;
# CI runs the window cut between two micro-batches (`make test-all` both).
@pytest.mark.parametrize("accumulate", [pytest.param(1, marks=pytest.mark.extended), 2])
@pytest.mark.usefixtures("graph_rewrites_as_in_commands")
def test_a_stop_requested_inside_a_window_ends_it_at_the_next_step_and_resume_goes_on_exactly(
        tmp_path, monkeypatch, request, accumulate):
    """SIGTERM's stop arrives during step 7 of windows of 4: the run ends after step 7 with its checkpoint,
    and --resume trains the rest of that window, then whole windows: the weights, the logged windows and
    the loss (weighted over the two parts of the cut window) of an uninterrupted run. With --accumulate 2
    the stop arrives after the first micro-batch of step 7, and waits for its second, which applies the
    update: a checkpoint between the two would lose the first's gradient."""
    settings = dict(WINDOWED, accumulate=accumulate)
    reference = (request.getfixturevalue("windowed_reference") if accumulate == 1
                 else pretrain(_options(tmp_path / "reference", **settings)))
    keras.backend.clear_session()
    stop_during = 7
    batch_end = StopAtCheckpointOnSignal.on_train_batch_end

    def signal_during_step(callback, batch, logs=None):
        # What the CLI's SIGTERM handler does, after micro-batch `batch` (Keras counts micro-batches).
        if callback.history.step * accumulate + batch + 1 == (stop_during - 1) * accumulate + 1:
            assert StopAtCheckpointOnSignal.request(signal.SIGTERM)
        batch_end(callback, batch, logs)

    monkeypatch.setattr(StopAtCheckpointOnSignal, "on_train_batch_end", signal_during_step)
    with pytest.raises(StoppedBySignal, match=f"^stopped by SIGTERM after step {stop_during}; checkpoint saved"):
        pretrain(_options(tmp_path / "stopped", **settings))
    checkpoints = RunCheckpoints(tmp_path / "stopped" / "run")
    assert checkpoints.latest()[1] == stop_during and _steps({"history": checkpoints.load_history()}) == [4, 7]
    monkeypatch.undo()
    keras.backend.clear_session()
    resumed = pretrain(_options(tmp_path / "stopped", resume=True, **settings))
    assert resumed["weights_sha256"] == reference["weights_sha256"]
    assert _steps(resumed) == _steps(reference) == list(range(4, 49, 4))
    for ours, theirs in zip(resumed["history"], reference["history"]):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5)


@pytest.mark.slow
@pytest.mark.usefixtures("graph_rewrites_as_in_commands")
def test_sigterm_saves_a_checkpoint_and_resume_goes_on_exactly(tmp_path, windowed_reference):
    """What schedulers and preemptible machines send before a kill: the run ends at its next checkpoint, says
    so in one line, exits 143 (128 + SIGTERM), and --resume ends with the weights of an uninterrupted run."""
    settings, reference = WINDOWED, windowed_reference
    run_dir = tmp_path / "stopped" / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_bertology.cli", "pretrain", "--model", "roberta", "--preset", "roberta-tiny",
         "--corpus", str(default_corpus_paths()[0]), "--steps", "48", "--log-every", "4", "--batch-size", "8",
         "--seq-len", "32", "--vocab-size", "400", "--out", str(run_dir), "--no-export"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not _newest_step(run_dir) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate()[1]
    assert process.returncode == 143, stderr[-3000:]
    stopped = _newest_step(run_dir)
    assert 4 <= stopped < 48 and stderr.strip().splitlines()[-1] == (
        f"bertology: stopped by SIGTERM after step {stopped}; checkpoint saved, --resume continues")
    resumed = pretrain(_options(tmp_path / "stopped", resume=True, **settings))
    assert resumed["weights_sha256"] == reference["weights_sha256"]
    assert _steps(resumed) == _steps(reference)
