"""`bertology study`: every pretraining objective at equal compute, then fine-tuned with one recipe.

    STUDY/study.json                    the plan (options, FLOPs per step) and every finished run
    STUDY/pretraining_text.jsonl        the tasks' unlabeled training text, when no --corpus is given
    STUDY/tokenizers/shared-vocabulary/ the vocabulary the arms share (--tokenizers shared), trained once
    STUDY/tokenizers/<arm>/             each arm's tokenizer: the shared vocabulary as its family reads it,
                                        or its family's own (--tokenizers native, and ELMo's words)
    STUDY/pretrain/<arm>/               a `bertology pretrain` run folder (resumable), whose
        snapshots/step-N/               encoder is also kept at each share of the budget
    STUDY/finetune/<arm>/budget-<share>/<task>/labels-<n>/seed-<s>/   a `bertology finetune` results folder
    STUDY/finetune/random-init/<task>/labels-<n>/seed-<s>/            the reference's encoder without pretraining
    STUDY/finetune/<arm>/random-init/<task>/labels-<n>/seed-<s>/      each other arm's control: its own encoder
                                                                      and vocabulary without pretraining
    STUDY/results.json, results.md, score_vs_compute.png

The gate's runs come first: the reference arm (the first) at its full
budget and random initialisation, on every task at each label count. The
other arms are fine-tuned, at their full budget, only on the tasks where the
reference beat random initialisation (or on all with --all-tasks): elsewhere
the budget is too small for a verdict, and their runs would cost time and
say nothing. The earlier shares of the budget (the score-against-compute
curve) are read by the linear probes, which cost seconds. There each arm
also has a control: its own encoder and vocabulary without
pretraining, fine-tuned with the same seeds and examples; an arm that does
not beat its control gets no verdict (study/report.py).

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
import time
from pathlib import Path

import keras

from keras_bertology.atomic import atomic_file
from keras_bertology.errors import ConfigError
from keras_bertology.finetune.datasets import load_task
from keras_bertology.output_paths import STUDY, claim_output_folder
from keras_bertology.study.arms import ARMS, arm_run_folder
from keras_bertology.study.batch_sizes import batch_study, check_runs
from keras_bertology.study.compute import seed_run_folder, shared_vocabulary, write_task_text
from keras_bertology.study.options import StudyOptions  # noqa: F401  re-exported
from keras_bertology.study.probes import probe_all, probe_results
from keras_bertology.study.report import control_key, gate, write_report
from keras_bertology.study.steps import (
    RANDOM_INIT, Progress, arm_pretrain_options, count_flops, drop_corpus, finetune_all, quiet, say)
from keras_bertology.study.workers import Workers
from keras_bertology.pretraining.options import PretrainOptions

STATE_FILE = "study.json"


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
        with Workers(options.workers) as workers:
            return batch_study(options, given, scale, out, state, label_counts, workers)
    arms = sorted((arm for arm in ARMS if arm.name in options.arms), key=lambda arm: options.arms.index(arm.name))
    shared_vocabulary(options, out)  # trained here once, before the workers read it
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
        probed = probe_all(options, scale, runs, state, out, workers, say, tasks)
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
        finetuned += finetune_all(options, scale, _arm_jobs(runs, label_counts, compared, out), state, out,
                                  workers)
        finetuned += finetune_all(options, scale, _control_jobs(runs, label_counts, compared, out), state, out,
                                  workers)

    results = write_report(out, given, scale, points, state, label_counts, compared, finetuned,
                           probe_results(state, runs, probed, options.seed_count))
    say(options, f"study done: {out}/results.md, results.json, score_vs_compute.png")
    return results


def _share_gpus():
    """TensorFlow takes a GPU's whole memory at its first operation unless told to grow into it: the
    pretraining processes on another backend need theirs."""
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)


def _pretrain_all(options, scale, runs, state, out, workers):
    todo = [run for run in runs if run.arm.name not in state["pretrain"]]
    progress = Progress(len(todo), "pretraining")
    if todo and options.workers > 1:
        say(options, f"arms to pretrain: {len(todo)}, {min(options.workers, len(todo))} at a time")

    def done(job, result):
        run = job[2]
        state["pretrain"][run.arm.name] = result
        state.save()
        say(options, f"[pretrain {progress.done + 1}/{len(todo)}] {run.arm.name}: {run.steps} steps, "
                     f"{run.flops:.3g} FLOPs, done in {result['seconds']:.0f} s{progress.step()}")

    workers.run_all(_pretrain, [(quiet(options), scale, run, out) for run in todo], done)


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


def _control_jobs(runs, label_counts, tasks, out):
    """Every arm's control but the reference's (the gate ran it) on `tasks`, at their verdict count: its
    encoder, vocabulary and recipe without pretraining, fine-tuned with the same seeds and examples."""
    reference = runs[0].arm.name
    return [(control_key(run.arm.name, reference), run.points[-1].folder(out), True, task,
             label_counts[task]["verdict"]) for task in tasks for run in runs[1:]]


def _arm_jobs(runs, label_counts, tasks, out):
    """Every other arm at its full budget on `tasks`, at their verdict count. The earlier shares of the
    budget are read by the probes alone: the claims are judged at the full budget, and a probe reads a
    point for a fraction of a fine-tuning run's cost, with less noise."""
    return [(run.points[-1].key, run.points[-1].folder(out), False, task, label_counts[task]["verdict"])
            for task in tasks for run in runs[1:]]


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


def _pretrain(options, scale, run, out):
    from keras_bertology.pretraining.pretrain import pretrain

    drop_corpus()  # a worker's copy of the corpus, read to count FLOPs
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
