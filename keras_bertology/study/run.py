"""`bertology study`: every pretraining objective at equal compute, then fine-tuned with one recipe.

    STUDY/study.json                    the plan (options, FLOPs per step) and every finished run
    STUDY/pretraining_text.jsonl        the tasks' unlabeled training text, when no --corpus is given
    STUDY/tokenizers/<arm>/             each arm's vocabulary, trained once
    STUDY/pretrain/<arm>/               a `bertology pretrain` run folder (resumable), whose
        snapshots/step-N/               encoder is also kept at each share of the budget
    STUDY/finetune/<arm>/budget-<share>/<task>/labels-<n>/seed-<s>/   a `bertology finetune` results folder
    STUDY/finetune/random-init/<task>/labels-<n>/seed-<s>/            the encoder without pretraining
    STUDY/results.json, results.md, score_vs_compute.png

The gate's runs come first: the reference arm (the first) at its full
budget and random initialisation, on every task at each label count. The
other arms are fine-tuned only on the tasks where the reference beat random
initialisation (or on all with --all-tasks): elsewhere the budget is too
small for a verdict, and their runs would cost time and say nothing.

Fine-tuning runs are paired: seed s draws the same n labeled examples (and
starts the task head the same way) for every arm and for random init, so two
arms are compared seed by seed (see study/report.py).

Every run is a folder that is complete or resumable: an interrupted study,
started again with the same options, skips what is done, resumes a
pretraining run from its newest checkpoint and repeats an unfinished
fine-tuning run.
"""

import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path

import keras

from keras_bertology.atomic import atomic_file
from keras_bertology.errors import ConfigError
from keras_bertology.finetune.datasets import load_task
from keras_bertology.finetune.options import FinetuneOptions
from keras_bertology.finetune.shared_work import SharedWork
from keras_bertology.models.registry import get_family
from keras_bertology.output_paths import STUDY, claim_output_folder
from keras_bertology.study.arms import ARMS, arm_run_folder
from keras_bertology.study.compute import (PROBE_STEPS, arm_tokenizer, probe_step, read_documents,
                                           seed_run_folder, write_task_text)
from keras_bertology.study.options import StudyOptions  # noqa: F401  re-exported
from keras_bertology.study.report import finetune_key, gate, write_report
from keras_bertology.study.workers import Workers
from keras_bertology.training.options import PretrainOptions

STATE_FILE = "study.json"
RANDOM_INIT = "random-init"
# What this process keeps between runs (a worker's, or the study's own with one worker): the corpus read
# once, and the fine-tuning runs' SharedWork (a job's seeds share a traced model and encoded splits).
_SHARED = {}


def study(options):
    """Run (or resume) the study; returns the results dict also written to STUDY/results.json."""
    scale = options.validate()
    if keras.config.backend() != "tensorflow":
        raise ConfigError(f"a study runs on TensorFlow (this process runs Keras on {keras.config.backend()}): "
                          "it counts FLOPs in traced graphs and fine-tunes there; --backend jax pretrains on JAX")
    # The study builds dozens of models in one process; TensorFlow warns each time it traces one again.
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    out = Path(options.out)
    if options.batch_sizes:
        from keras_bertology.study.batch_sizes import check_runs

        check_runs(options, scale)
    with claim_output_folder(out, "--out", STUDY):
        return _study(options, scale, out)


def _study(options, scale, out):
    state = _State.open(out, options)
    # a bad task folder stops the study before any training
    tasks = {task: load_task(task, scale.finetune_max_examples) for task in options.tasks}
    label_counts = {task: _label_counts(scale, data) for task, data in tasks.items()}
    given = options
    if options.corpus is None:
        options = dataclasses.replace(options, corpus=[str(write_task_text(tasks.values(), out))],
                                      corpus_format="jsonl", text_field="text")
    if options.backend != "tensorflow":
        _share_gpus()
    if options.batch_sizes:
        from keras_bertology.study.batch_sizes import batch_study

        with Workers(options.workers) as workers:
            return batch_study(options, given, scale, out, state, label_counts, workers)
    arms = sorted((arm for arm in ARMS if arm.name in options.arms), key=lambda arm: options.arms.index(arm.name))
    with Workers(options.workers) as workers:
        runs = {}
        # Arms that learn from another arm's run (a teacher) count their FLOPs and train once it is done.
        for wave in (tuple(arm for arm in arms if not arm.depends_on), tuple(arm for arm in arms if arm.depends_on)):
            count_flops(options, scale, wave, state, out, workers)
            budget = scale.reference_steps * state["flops_per_step"][arms[0].name]["average"]
            if not runs:
                say(options, f"budget: {budget:.3g} FLOPs ({scale.reference_steps} steps of {arms[0].name}); "
                             f"{scale.describe()}")
            wave_runs = [ArmRun(arm, budget, state["flops_per_step"][arm.name], scale) for arm in wave]
            runs.update({run.arm.name: run for run in wave_runs})
            if options.backend == "tensorflow":
                _pretrain_all(options, scale, wave_runs, state, out, workers)
            else:  # closed after pretraining: the pretraining processes give their memory back to fine-tuning
                with Workers(options.workers, backend=options.backend) as pretraining:
                    _pretrain_all(options, scale, wave_runs, state, out, pretraining)
        runs = [runs[arm.name] for arm in arms]
        points = [point for run in runs for point in run.points]
        reference = runs[0].points[-1]
        finetuned = finetune_all(options, scale, _gate_jobs(reference, label_counts, out), state, out, workers)
        gated = {task: gate(state, reference.key, RANDOM_INIT, task, counts["verdict"], options.seed_count)
                 for task, counts in label_counts.items()}
        compared = [task for task in label_counts if gated[task]["pays"] or options.all_tasks]
        for task in label_counts:
            if not gated[task]["pays"]:
                say(options, f"{Path(task).name}: {reference.arm.name} does not beat random initialisation "
                             f"({gated[task]['difference']:+.3f}); " + ("its runs go on (--all-tasks)"
                             if options.all_tasks else "no other arm is fine-tuned on it (--all-tasks would)"))
        finetuned += finetune_all(options, scale, _arm_jobs(points, reference, label_counts, compared, out), state,
                                  out, workers)

    results = write_report(out, given, scale, points, state, RANDOM_INIT, label_counts, compared, finetuned)
    say(options, f"study done: {out}/results.md, results.json, score_vs_compute.png")
    return results


def _share_gpus():
    """TensorFlow takes a GPU's whole memory at its first operation unless told to grow into it: the
    pretraining processes on another backend need theirs."""
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)


def count_flops(options, scale, arms, state, out, workers):
    """The cost of a step of each arm, on its own data (its tokenizer is kept for its run)."""
    todo = [arm for arm in arms if arm.name not in state["flops_per_step"]]
    if todo:
        say(options, f"counting the FLOPs of a training step of {len(todo)} arms (each trains its tokenizer)")

    def done(job, result):
        state["flops_per_step"][job[2].name] = result
        state.save()
        say(options, f"    {job[2].name}: {result['average']:.3g} FLOPs a step")

    workers.run_all(_arm_flops, [(quiet(options), scale, arm, out) for arm in todo], done)
    _SHARED.pop("documents", None)


def _arm_flops(options, scale, arm, out):
    family = get_family(arm.model)
    if "documents" not in _SHARED:  # read once per process
        _SHARED["documents"] = read_documents(options)
    documents = _SHARED["documents"]
    probe = arm_pretrain_options(options, scale, arm, steps=PROBE_STEPS, out=None, study_dir=out)
    context = family.run_context(probe.family_options)
    tokenizer = arm_tokenizer(family, documents, probe, out / "tokenizers" / arm.name, context.tokenizer)
    average, stages, _ = probe_step(family, tokenizer, documents, probe, context)
    keras.backend.clear_session()
    return {"average": average, "stages": stages}


def _pretrain_all(options, scale, runs, state, out, workers):
    todo = [run for run in runs if run.arm.name not in state["pretrain"]]
    progress = _Progress(len(todo), "pretraining")
    if todo and options.workers > 1:
        say(options, f"arms to pretrain: {len(todo)}, {min(options.workers, len(todo))} at a time")

    def done(job, result):
        run = job[2]
        state["pretrain"][run.arm.name] = result
        state.save()
        say(options, f"[pretrain {progress.done + 1}/{len(todo)}] {run.arm.name}: {run.steps} steps, "
                     f"{run.flops:.3g} FLOPs, done in {result['seconds']:.0f} s{progress.step()}")

    workers.run_all(_pretrain, [(quiet(options), scale, run, out) for run in todo], done)


def quiet(options):
    """The options a run gets: progress bars of runs side by side would interleave, so a worker's run
    reports only its end."""
    return dataclasses.replace(options, verbose=0) if options.workers > 1 else options


def _label_counts(scale, task):
    """{"all": the scale's label counts a task has room for, "verdict": the one verdicts are made at}:
    a count above the task's training examples becomes all of them."""
    available = len(task.splits["train"])
    verdict = min(scale.verdict_labels_of(task.kind), available)
    return {"all": sorted({min(count, available) for count in scale.label_counts} | {verdict}), "verdict": verdict}


def _gate_jobs(reference, label_counts, out):
    """[(key, run folder, random init, task, label count)]: the reference arm at its full budget and
    random initialisation (of its encoder) on every task at each label count: the gate at the verdict
    count, and the learning curves that show where pretraining pays."""
    return [(key, reference.folder(out), random_init, task, labels) for task, counts in label_counts.items()
            for key, random_init in ((reference.key, False), (RANDOM_INIT, True)) for labels in counts["all"]]


def _arm_jobs(points, reference, label_counts, tasks, out):
    """Every other point (each arm at each share of the budget) on `tasks`, at their verdict count."""
    return [(point.key, point.folder(out), False, task, label_counts[task]["verdict"])
            for task in tasks for point in points if point is not reference]


def finetune_all(options, scale, jobs, state, out, workers):
    """Every seed of `jobs` [(key, run folder, random init, task, label count)] not done yet; returns the
    study.json keys of all of them, done before or now."""
    every = [(finetune_key(key, task, labels, seed), run_dir, random_init, task, labels, seed)
             for key, run_dir, random_init, task, labels in jobs for seed in range(options.seed_count)]
    todo = [job for job in every if job[0] not in state["finetune"]]
    progress = _Progress(len(todo), "fine-tuning")

    def done(job, result):
        key = job[1]
        state["finetune"][key] = result
        state.save()
        say(options, f"[finetune {progress.done + 1}/{len(todo)}] {key}: test {result['metric']} "
                     f"{result['score']:.4f} ({result['wall_seconds']:.0f} s){progress.step()}")

    workers.run_all(_finetune, [(scale, *job, out) for job in todo], done)
    _SHARED.clear()
    keras.backend.clear_session()
    return [job[0] for job in every]


class _Progress:
    """The time left of `total` runs to do in this process, from the pace of the ones done so far."""

    def __init__(self, total, what):
        self.total, self.what, self.done, self.started = total, what, 0, time.perf_counter()

    def step(self):
        self.done += 1
        if self.done >= self.total:
            return ""
        left = (time.perf_counter() - self.started) / self.done * (self.total - self.done)
        return f"; {self.what} left: about {left / 60:.0f} min"


class ArmRun:
    """The pretraining run of one arm: the budget's worth of its steps, in whole logged windows, with
    the encoder kept at each share of `scale.budgets` (a point of the score-against-compute curve)."""

    def __init__(self, arm, budget, cost, scale):
        self.arm = arm
        steps = max(1, round(budget / cost["average"]))
        window = PretrainOptions(steps=steps).steps_per_window
        self.steps = max(1, round(steps / window)) * window  # the nearest whole windows: equal within half one
        self.window = window
        self.points = [_Point(self, share, max(1, round(share * self.steps / window)) * window, cost["stages"])
                       for share in scale.budgets]
        self.flops = self.points[-1].flops

    @property
    def snapshots(self):
        return tuple(point.steps for point in self.points if point.steps < self.steps)


class _Point:
    """An arm's encoder after `steps` of its run, `share` of the budget."""

    def __init__(self, run, share, steps, stages):
        self.run, self.arm, self.share, self.steps = run, run.arm, share, steps
        self.key = f"{run.arm.name}/budget-{share:g}"
        counts = [round(stage_share * run.steps) for stage_share, _ in stages[:-1]]  # as the run spends them
        counts.append(run.steps - sum(counts))
        self.flops, left = 0.0, steps
        for count, (_, flops) in zip(counts, stages):
            self.flops += min(left, count) * flops
            left -= min(left, count)

    def folder(self, out):
        run_dir = out / "pretrain" / self.arm.name
        return run_dir if self.steps == self.run.steps else run_dir / "snapshots" / f"step-{self.steps:07d}"


def arm_pretrain_options(options, scale, arm, steps, out, snapshots=(), study_dir=None):
    """The `PretrainOptions` of an arm's run of `steps` steps into `out` (None for a probe), in the study
    folder `study_dir`."""
    return PretrainOptions(
        model=arm.model, preset=arm.preset, corpus=options.corpus, corpus_format=options.corpus_format,
        text_field=options.text_field, steps=steps, batch_size=scale.batch_size, seq_len=scale.seq_len,
        out=out, no_export=True, vocab_size=options.vocab_size, masking=arm.masking,
        masking_units=arm.masking_units, seed=options.seed,
        resume=True, family_options=arm.options_for(steps, study_dir), encoder=arm.encoder_for(scale.encoder),
        snapshots=snapshots,
        verbose=options.verbose)


def _pretrain(options, scale, run, out):
    from keras_bertology.training.pretrain import pretrain

    _SHARED.pop("documents", None)  # a worker's copy of the corpus, read to count FLOPs
    started = time.perf_counter()
    run_dir = arm_run_folder(out, run.arm.name)
    seed_run_folder(run_dir, out / "tokenizers" / run.arm.name)
    metrics = pretrain(arm_pretrain_options(options, scale, run.arm, run.steps, str(run_dir), run.snapshots, out))
    keras.backend.clear_session()
    return {"steps": metrics["steps"], "train_seconds": metrics["train_seconds"], "backend": keras.config.backend(),
            "samples_per_second": metrics["samples_per_second"], "precision": metrics["precision"],
            "objectives": {name: {"first": summary["first"], "last": summary["last"]}
                           for name, summary in metrics["objectives"].items()},
            "seconds": time.perf_counter() - started}


def _finetune(scale, key, run_dir, random_init, task, labels, seed, out):
    """One fine-tuning run on `labels` examples drawn by `seed`, into out/finetune/`key`; a folder an
    interrupted run left is cleared first."""
    from keras_bertology.finetune.run import finetune

    started = time.perf_counter()
    folder = out / "finetune" / key
    if folder.exists():
        shutil.rmtree(folder)
    batch_size, epochs = scale.finetune_recipe(labels)
    results = finetune(FinetuneOptions(
        task=task, from_dir=str(run_dir), epochs=epochs, batch_size=batch_size,
        learning_rate=scale.finetune_learning_rate, seq_len=scale.finetune_seq_len, seed=seed, out=str(folder),
        results_only=True, max_examples=scale.finetune_max_examples, train_examples=labels, last_epoch=True,
        random_init=random_init, summary=scale.finetune_summary, verbose=0), _SHARED.setdefault("work", SharedWork()))
    metric = results["primary_metric"]
    return {"metric": metric, "score": results["test"][metric], "dev": results["dev"][metric],
            "seconds": results["train_seconds"], "wall_seconds": time.perf_counter() - started}


class _State(dict):
    """study.json: the plan the folder holds and what is done, written atomically after every run."""

    @classmethod
    def open(cls, out, options):
        path = out / STATE_FILE
        key = options.plan_key()
        if path.is_file():
            try:
                state = cls(json.loads(path.read_text(encoding="utf-8")))
            except ValueError as error:
                raise ConfigError(f"{path} is damaged ({error}); remove it to start the study again") from None
            changed = sorted(name for name in key if state.get("options", {}).get(name) != key[name])
            if changed:
                raise ConfigError(f"{out} holds a study with other options (changed: {', '.join(changed)}); "
                                  "resume it with the same options, or choose another --out")
        else:
            state = cls(options=key, flops_per_step={}, pretrain={}, finetune={})
        state.path = path
        return state

    def save(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(self.path) as staging:
            staging.write_text(json.dumps(self, indent=2))


def say(options, message):
    if options.verbose:
        print(message, flush=True)
