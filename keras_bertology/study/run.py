"""`bertology study`: every pretraining objective at equal compute, then fine-tuned with one recipe.

    STUDY/study.json                    the plan (options, FLOPs per step, steps per run) and what is done
    STUDY/tokenizers/<arm>/             each arm's vocabulary, trained once
    STUDY/pretrain/<arm>/budget-<b>/    a `bertology pretrain` run folder (resumable)
    STUDY/finetune/<arm>/budget-<b>/<task>/seed-<s>/   a `bertology finetune` results folder
    STUDY/finetune/random-init/<task>/seed-<s>/        the encoder without pretraining, for reference
    STUDY/results.json, results.md, score_vs_compute.png

Every run is a folder that is complete or resumable: an interrupted study,
started again with the same options, skips what is done, resumes a
pretraining run from its newest checkpoint and repeats an unfinished
fine-tuning run.
"""

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
from keras_bertology.models.registry import get_family
from keras_bertology.output_paths import check_output_folder
from keras_bertology.study.arms import ARMS
from keras_bertology.study.compute import PROBE_STEPS, arm_tokenizer, flops_per_step, read_documents, seed_run_folder
from keras_bertology.study.options import StudyOptions  # noqa: F401  re-exported
from keras_bertology.study.report import write_report
from keras_bertology.training.options import PretrainOptions

STATE_FILE = "study.json"
RANDOM_INIT = "random-init"


def study(options):
    """Run (or resume) the study; returns the results dict also written to STUDY/results.json."""
    scale = options.validate()
    # The study builds dozens of models in one process; TensorFlow warns each time it traces one again.
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    out = Path(options.out)
    check_output_folder(out, "--out")
    state = _State.open(out, options)
    for task in options.tasks:
        load_task(task, scale.finetune_max_examples)  # a bad task folder stops the study before any training
    arms = [arm for arm in ARMS if arm.name in options.arms]
    arms.sort(key=lambda arm: options.arms.index(arm.name))
    documents = read_documents(options)
    started = time.perf_counter()

    for arm in arms:  # the cost of a step of each arm, on its own data
        if arm.name not in state["flops_per_step"]:
            _say(options, f"counting the FLOPs of a training step of {arm.name}")
            family = get_family(arm.model)
            probe = _pretrain_options(options, scale, arm, steps=PROBE_STEPS, out=None)
            tokenizer = arm_tokenizer(family, documents, probe, out / "tokenizers" / arm.name)
            average, stages = flops_per_step(family, tokenizer, documents, probe)
            state["flops_per_step"][arm.name] = {"average": average, "stages": stages}
            state.save()
    budget = scale.reference_steps * state["flops_per_step"][arms[0].name]["average"]
    runs = [_Run(arm, share, budget, state["flops_per_step"][arm.name]["average"])
            for share in scale.budgets for arm in arms]
    _say(options, f"budget: {budget:.3g} FLOPs ({scale.reference_steps} steps of {arms[0].name}); "
                  f"{len(runs)} pretraining runs, {scale.describe()}")

    for index, run in enumerate(runs):
        if run.key in state["pretrain"]:
            continue
        _say(options, f"[pretrain {index + 1}/{len(runs)}] {run.arm.name} at {run.share:g} of the budget: "
                      f"{run.steps} steps, {run.flops:.3g} FLOPs")
        run_started = time.perf_counter()
        state["pretrain"][run.key] = _pretrain(options, scale, run, out)
        state["pretrain"][run.key]["seconds"] = time.perf_counter() - run_started
        state.save()
        _say(options, f"    done in {state['pretrain'][run.key]['seconds']:.0f} s"
                      + _eta(started, index + 1, len(runs), "pretraining"))

    full = [run for run in runs if run.share == max(scale.budgets)]
    jobs = [(run.key, out / "pretrain" / run.key, False) for run in runs]
    jobs.append((RANDOM_INIT, out / "pretrain" / full[0].key, True))
    work = [(key, run_dir, random_init, task, seed) for key, run_dir, random_init in jobs
            for task in options.tasks for seed in range(options.seeds)]
    finetune_started = time.perf_counter()
    for index, (key, run_dir, random_init, task, seed) in enumerate(work):
        record_key = f"{key}/{Path(task).name}/seed-{seed}"
        if record_key in state["finetune"]:
            continue
        result = _finetune(scale, run_dir, random_init, task, seed, out / "finetune" / record_key)
        state["finetune"][record_key] = result
        state.save()
        _say(options, f"[finetune {index + 1}/{len(work)}] {record_key}: test {result['metric']} "
                      f"{result['score']:.4f} ({result['seconds']:.0f} s)"
                      + _eta(finetune_started, index + 1, len(work), "fine-tuning"))

    results = write_report(out, options, scale, runs, state, RANDOM_INIT)
    _say(options, f"study done: {out}/results.md, results.json, score_vs_compute.png")
    return results


class _Run:
    """One pretraining run of the study: an arm at a share of the budget."""

    def __init__(self, arm, share, budget, flops_per_step):
        self.arm, self.share = arm, share
        self.steps = max(1, round(share * budget / flops_per_step))
        self.flops = self.steps * flops_per_step
        self.key = f"{arm.name}/budget-{share:g}"


def _pretrain_options(options, scale, arm, steps, out):
    return PretrainOptions(
        model=arm.model, preset=arm.preset, corpus=options.corpus, corpus_format=options.corpus_format,
        text_field=options.text_field, steps=steps, batch_size=scale.batch_size, seq_len=scale.seq_len,
        out=out, no_export=True, vocab_size=options.vocab_size, masking=arm.masking, seed=options.seed,
        resume=True, family_options=arm.options_for(steps), encoder=scale.encoder,
        verbose=max(0, options.verbose - 1))


def _pretrain(options, scale, run, out):
    from keras_bertology.training.pretrain import pretrain

    run_dir = out / "pretrain" / run.key
    seed_run_folder(run_dir, out / "tokenizers" / run.arm.name)
    metrics = pretrain(_pretrain_options(options, scale, run.arm, run.steps, str(run_dir)))
    keras.backend.clear_session()
    return {"steps": metrics["steps"], "train_seconds": metrics["train_seconds"],
            "samples_per_second": metrics["samples_per_second"], "precision": metrics["precision"],
            "objectives": {name: {"first": summary["first"], "last": summary["last"]}
                           for name, summary in metrics["objectives"].items()}}


def _finetune(scale, run_dir, random_init, task, seed, folder):
    """One fine-tuning run; a folder an interrupted run left is cleared first."""
    from keras_bertology.finetune.run import finetune

    if folder.exists():
        shutil.rmtree(folder)
    results = finetune(FinetuneOptions(
        task=task, from_dir=str(run_dir), epochs=scale.finetune_epochs, batch_size=scale.finetune_batch_size,
        learning_rate=scale.finetune_learning_rate, seed=seed, out=str(folder), no_export=True,
        max_examples=scale.finetune_max_examples, random_init=random_init, verbose=0))
    keras.backend.clear_session()
    metric = results["primary_metric"]
    return {"metric": metric, "score": results["test"][metric], "dev": results["dev"][metric],
            "seconds": results["train_seconds"]}


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
        elif out.is_dir() and any(out.iterdir()):
            raise ConfigError(f"--out {out} holds other files; give a new or empty folder for a study")
        else:
            state = cls(options=key, flops_per_step={}, pretrain={}, finetune={})
        state.path = path
        return state

    def save(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(self.path) as staging:
            staging.write_text(json.dumps(self, indent=2))


def _eta(started, done, total, what):
    if done >= total:
        return ""
    left = (time.perf_counter() - started) / done * (total - done)
    return f"; {what} left: about {left / 60:.0f} min"


def _say(options, message):
    if options.verbose:
        print(message, flush=True)
