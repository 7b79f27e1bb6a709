"""The study's batch-size axis (`bertology study --batch-sizes 32 128 512`): RoBERTa's table at equal compute.

RoBERTa compares batches of 256, 2K and 8K sequences that see the same
number of samples (1M, 125K and 31K updates), each at a peak rate tuned for
it, by held-out perplexity and downstream accuracy. Here one arm (`roberta`
unless --arms names another) pretrains at each effective batch for the
samples the scale's reference run sees (its reference steps at its batch),
every update accumulating micro-batches of the scale's batch: a step holds
the same rows at every size, and the FLOPs are equal because the samples
are. Per batch size the peak rate comes from a grid, RATE_FACTORS times
the arm's rate scaled by the square root of the batch's growth (Adam's
rule of thumb), chosen by held-out perplexity on documents kept out of
training (`--eval-every`), never by the downstream tasks. The chosen rate
is pretrained again with more seeds (the perplexity's standard error, paired
by seed: the same initial weights and held-out set), and each size's first
seed is fine-tuned on the tasks as the objective study does: the gate first
(the smallest batch against random initialisation), paired fine-tuning seeds.

    STUDY/pretrain/<arm>-batch-<B>-rate-<r>[-seed-<s>]/       a `bertology pretrain` run folder
    STUDY/finetune/<arm>-batch-<B>/<task>/labels-<n>/seed-<s>/  a `bertology finetune` results folder
    STUDY/results.json, results.md, batch_sizes.png
"""

import dataclasses
import math
import time
from pathlib import Path

import keras

from keras_bertology.errors import ConfigError, TrainingError
from keras_bertology.study import steps
from keras_bertology.study.arms import arm_named
from keras_bertology.study.batch_report import write_batch_report
from keras_bertology.study.compute import seed_run_folder
from keras_bertology.study.rate_grid import RATE_FACTORS, base_rate, chosen, grid, widened
from keras_bertology.study.report import gate
from keras_bertology.study.workers import Workers

# Pretraining seeds of each batch size's chosen rate (the grid runs are the first): per scale, else DEFAULT.
PRETRAINING_SEEDS = {"smoke": 2}
DEFAULT_PRETRAINING_SEEDS = 3


def pretraining_seeds(scale_name):
    return PRETRAINING_SEEDS.get(scale_name, DEFAULT_PRETRAINING_SEEDS)


def batch_study(options, given, scale, out, state, label_counts, workers):
    """Run (or resume) the batch-size axis; returns the results also written to STUDY/results.json.
    `workers` run on TensorFlow (counting FLOPs, fine-tuning); the pretraining runs get workers of their
    own on --backend, closed before fine-tuning so that their memory goes back."""
    arm = arm_named(options.arms[0])
    settings = grid(arm, scale, options.batch_sizes)
    steps.count_flops(options, scale, (arm,), state, out, workers)
    flops = state["flops_per_step"][arm.name]["average"]
    steps.say(options, f"batch sizes {', '.join(map(str, sorted(options.batch_sizes)))} at "
                           f"{scale.reference_steps * scale.batch_size} samples each ({flops:.3g} FLOPs a step of "
                           f"{scale.batch_size}); rates {', '.join(f'{factor:g}' for factor in RATE_FACTORS)} x "
                           f"the square-root-scaled {base_rate(arm):g}, chosen by held-out perplexity")
    seeds = pretraining_seeds(options.scale)
    backend = None if options.backend == "tensorflow" else options.backend
    with Workers(options.workers, backend=backend) as pretraining:
        _pretrain_settings(options, scale, settings, state, out, pretraining, "the rate grid")
        while more := widened(settings, state["pretrain"]):
            settings += more
            _pretrain_settings(options, scale, more, state, out, pretraining, "rates beyond the grid's best ends")
        best = chosen(settings, state["pretrain"])
        repeats = [dataclasses.replace(setting, seed=seed) for setting in best.values() for seed in range(1, seeds)]
        _pretrain_settings(options, scale, repeats, state, out, pretraining, "the chosen rates' other seeds")

    keys = {size: f"{arm.name}-batch-{size}" for size in best}
    smallest = min(best)
    reference_key, reference_folder = keys[smallest], out / "pretrain" / best[smallest].name
    # The gate: the smallest batch and random initialisation (of the same encoder) on every task.
    gate_jobs = [job for task, counts in label_counts.items()
                 for job in ((reference_key, reference_folder, False, task, counts["verdict"]),
                             (steps.RANDOM_INIT, reference_folder, True, task, counts["verdict"]))]
    finetuned = steps.finetune_all(options, scale, gate_jobs, state, out, workers)
    gated = {task: gate(state, reference_key, steps.RANDOM_INIT, task, counts["verdict"], options.seed_count)
             for task, counts in label_counts.items()}
    compared = [task for task in label_counts if gated[task]["pays"] or options.all_tasks]
    for task in label_counts:
        if not gated[task]["pays"]:
            steps.say(options, f"{Path(task).name}: batches of {smallest} do not beat random initialisation "
                                   f"({gated[task]['difference']:+.3f}); the other sizes are not fine-tuned on it")
    jobs = [(keys[size], out / "pretrain" / setting.name, False, task, label_counts[task]["verdict"])
            for task in compared for size, setting in best.items() if size != smallest]
    finetuned += steps.finetune_all(options, scale, jobs, state, out, workers)
    results = write_batch_report(out, given, scale, settings, best, seeds, keys, state, label_counts, compared,
                                 finetuned)
    steps.say(options, f"study done: {out}/results.md, results.json, batch_sizes.png")
    return results


def check_runs(options, scale):
    """The largest batch's pretraining options checked against the arm's family before anything is written
    (an arm whose rows carry memory from batch to batch cannot accumulate)."""
    arm = arm_named(options.arms[0])
    try:
        largest = _options(options, scale, grid(arm, scale, options.batch_sizes)[-1], out=None)
        dataclasses.replace(largest, corpus=None).validate()  # a corpus' own errors come where the study reads it
    except ConfigError as error:
        raise ConfigError(f"--batch-sizes cannot study the {arm.name} arm: {error}") from None


def _options(options, scale, setting, out):
    arm = arm_named(setting.arm_name)
    base = steps.arm_pretrain_options(options, scale, arm, setting.steps, out, study_dir=Path(options.out))
    return dataclasses.replace(base, batch_size=setting.batch_size, accumulate=setting.accumulate,
                               learning_rate=setting.rate, seed=options.seed + setting.seed, eval_every=setting.steps)


def _pretrain_settings(options, scale, settings, state, out, workers, what):
    todo = [setting for setting in settings if setting.name not in state["pretrain"]]
    if todo:
        steps.say(options, f"pretraining {what}: {len(todo)} runs")

    def done(job, result):
        setting = job[2]
        state["pretrain"][setting.name] = result
        state.save()
        perplexity = "diverged" if result["perplexity"] is None else f"held-out perplexity {result['perplexity']:.1f}"
        steps.say(options, f"    {setting.name}: {setting.steps} updates of {setting.batch_size} "
                               f"({setting.accumulate} x {setting.micro_batch}), {perplexity} "
                               f"({result['seconds']:.0f} s)")

    workers.run_all(_pretrain_setting, [(steps.quiet(options), scale, setting, out) for setting in todo], done)


def _pretrain_setting(options, scale, setting, out):
    """One run of the axis; its held-out perplexity at the end (None where the loss diverged)."""
    from keras_bertology.pretraining.pretrain import pretrain

    started = time.perf_counter()
    run_dir = out / "pretrain" / setting.name
    seed_run_folder(run_dir, out / "tokenizers" / setting.arm_name)
    try:
        metrics = pretrain(_options(options, scale, setting, str(run_dir)))
    except TrainingError as error:
        keras.backend.clear_session()
        return {"perplexity": None, "diverged": str(error), "seconds": time.perf_counter() - started}
    keras.backend.clear_session()
    held_out = metrics["eval"][-1]
    name, score = next(((name, score) for name, score in held_out["objectives"].items() if "perplexity" in score),
                       (None, None))
    if name is None:
        raise ConfigError(f"--batch-sizes ranks rates by held-out perplexity, and the {setting.arm_name} arm has "
                          "no objective that predicts tokens")
    chance = metrics["objectives"][name].get("chance", {})
    return {"perplexity": score["perplexity"], "objective": name, "loss": score["loss"],
            "accuracy": score.get("accuracy"), "unigram_perplexity": _perplexity(chance.get("loss")),
            "steps": metrics["steps"], "samples": setting.samples, "train_seconds": metrics["train_seconds"],
            "seconds": time.perf_counter() - started}


def _perplexity(loss):
    return None if loss is None else math.exp(min(loss, 700.0))
