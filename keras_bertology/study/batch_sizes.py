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
from keras_bertology.models.registry import get_family
from keras_bertology.study import run as study_run
from keras_bertology.study.arms import arm_named
from keras_bertology.study.compute import seed_run_folder
from keras_bertology.study.report import gate
from keras_bertology.study.workers import Workers

# The grid of peak rates per batch size, as multiples of the square-root-scaled rate: a factor of 2 each
# way brackets where the rule of thumb puts the best rate.
RATE_FACTORS = (0.5, 1.0, 2.0)
# Rates added beyond an end of a size's grid where its best rate lies at that end (each a factor of 2 further),
# at most this many per size: a best rate at the edge of what was tried may be beaten just outside it.
MAX_WIDENINGS = 2
# Pretraining seeds of each batch size's chosen rate (the grid runs are the first): per scale, else DEFAULT.
PRETRAINING_SEEDS = {"smoke": 2}
DEFAULT_PRETRAINING_SEEDS = 3


@dataclasses.dataclass(frozen=True)
class Setting:
    """One pretraining run of the axis: an effective batch (`batch_size`, in micro-batches of
    `micro_batch`), `steps` updates, a peak `rate` and a `seed` (an offset of the study's --seed)."""

    arm_name: str
    model: str
    batch_size: int
    micro_batch: int
    steps: int
    rate: float
    seed: int = 0

    @property
    def name(self):
        seed = f"-seed-{self.seed}" if self.seed else ""
        return f"{self.arm_name}-batch-{self.batch_size}-rate-{self.rate:g}{seed}"

    @property
    def accumulate(self):
        return self.batch_size // self.micro_batch

    @property
    def samples(self):
        return self.steps * self.batch_size


def pretraining_seeds(scale_name):
    return PRETRAINING_SEEDS.get(scale_name, DEFAULT_PRETRAINING_SEEDS)


def grid(arm, scale, batch_sizes):
    """The seed-0 settings of every batch size and rate of the grid, smallest batch first."""
    base = _base_rate(arm)
    settings = []
    for size in sorted(batch_sizes):
        steps = max(1, round(scale.reference_steps * scale.batch_size / size))
        centre = base * math.sqrt(size / scale.batch_size)
        settings += [Setting(arm.name, arm.model, size, scale.batch_size, steps, float(f"{centre * factor:.3g}"))
                     for factor in RATE_FACTORS]
    return settings


def _base_rate(arm):
    from keras_bertology.training.options import PretrainOptions

    return PretrainOptions(model=arm.model, preset=arm.preset).peak_learning_rate(get_family(arm.model))


def chosen(settings, pretrained):
    """{batch size: the seed-0 setting of the lowest held-out perplexity}; a size whose every rate
    diverged is refused in one line."""
    best = {}
    for setting in settings:
        perplexity = pretrained[setting.name]["perplexity"]
        if perplexity is None:  # diverged
            continue
        if setting.batch_size not in best or perplexity < pretrained[best[setting.batch_size].name]["perplexity"]:
            best[setting.batch_size] = setting
    lost = sorted({setting.batch_size for setting in settings} - set(best))
    if lost:
        rates = ", ".join(f"{setting.rate:g}" for setting in settings if setting.batch_size == lost[0])
        raise TrainingError(f"every rate of the grid diverged at batch size {lost[0]} ({rates}): the study has no "
                            "run of that size to judge; study smaller batch sizes")
    return best


def widened(settings, pretrained):
    """The settings to try next: for each size whose best rate is the lowest or the highest of those it
    tried, the rate a factor of 2 beyond it, while the size has had fewer than MAX_WIDENINGS of them."""
    best = chosen(settings, pretrained)
    added = []
    for size, setting in sorted(best.items()):
        tried = sorted((s.rate for s in settings if s.batch_size == size))
        if len(tried) - len(RATE_FACTORS) >= MAX_WIDENINGS or len(tried) < 2:
            continue
        if setting.rate == tried[0]:
            added.append(dataclasses.replace(setting, rate=float(f"{setting.rate / 2:.3g}")))
        elif setting.rate == tried[-1]:
            added.append(dataclasses.replace(setting, rate=float(f"{setting.rate * 2:.3g}")))
    return added


def batch_study(options, given, scale, out, state, label_counts, workers):
    """Run (or resume) the batch-size axis; returns the results also written to STUDY/results.json.
    `workers` run on TensorFlow (counting FLOPs, fine-tuning); the pretraining runs get workers of their
    own on --backend, closed before fine-tuning so that their memory goes back."""
    arm = arm_named(options.arms[0])
    settings = grid(arm, scale, options.batch_sizes)
    study_run.count_flops(options, scale, (arm,), state, out, workers)
    flops = state["flops_per_step"][arm.name]["average"]
    study_run.say(options, f"batch sizes {', '.join(map(str, sorted(options.batch_sizes)))} at "
                           f"{scale.reference_steps * scale.batch_size} samples each ({flops:.3g} FLOPs a step of "
                           f"{scale.batch_size}); rates {', '.join(f'{factor:g}' for factor in RATE_FACTORS)} x "
                           f"the square-root-scaled {_base_rate(arm):g}, chosen by held-out perplexity")
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
                             (study_run.RANDOM_INIT, reference_folder, True, task, counts["verdict"]))]
    finetuned = study_run.finetune_all(options, scale, gate_jobs, state, out, workers)
    gated = {task: gate(state, reference_key, study_run.RANDOM_INIT, task, counts["verdict"], options.seed_count)
             for task, counts in label_counts.items()}
    compared = [task for task in label_counts if gated[task]["pays"] or options.all_tasks]
    for task in label_counts:
        if not gated[task]["pays"]:
            study_run.say(options, f"{Path(task).name}: batches of {smallest} do not beat random initialisation "
                                   f"({gated[task]['difference']:+.3f}); the other sizes are not fine-tuned on it")
    jobs = [(keys[size], out / "pretrain" / setting.name, False, task, label_counts[task]["verdict"])
            for task in compared for size, setting in best.items() if size != smallest]
    finetuned += study_run.finetune_all(options, scale, jobs, state, out, workers)
    from keras_bertology.study.batch_report import write_batch_report  # (it reads this module's grid shape)

    results = write_batch_report(out, given, scale, settings, best, seeds, keys, state, label_counts, compared,
                                 finetuned)
    study_run.say(options, f"study done: {out}/results.md, results.json, batch_sizes.png")
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
    base = study_run.arm_pretrain_options(options, scale, arm, setting.steps, out, study_dir=Path(options.out))
    return dataclasses.replace(base, batch_size=setting.batch_size, accumulate=setting.accumulate,
                               learning_rate=setting.rate, seed=options.seed + setting.seed, eval_every=setting.steps)


def _pretrain_settings(options, scale, settings, state, out, workers, what):
    todo = [setting for setting in settings if setting.name not in state["pretrain"]]
    if todo:
        study_run.say(options, f"pretraining {what}: {len(todo)} runs")

    def done(job, result):
        setting = job[2]
        state["pretrain"][setting.name] = result
        state.save()
        perplexity = "diverged" if result["perplexity"] is None else f"held-out perplexity {result['perplexity']:.1f}"
        study_run.say(options, f"    {setting.name}: {setting.steps} updates of {setting.batch_size} "
                               f"({setting.accumulate} x {setting.micro_batch}), {perplexity} "
                               f"({result['seconds']:.0f} s)")

    workers.run_all(_pretrain_setting, [(study_run.quiet(options), scale, setting, out) for setting in todo], done)


def _pretrain_setting(options, scale, setting, out):
    """One run of the axis; its held-out perplexity at the end (None where the loss diverged)."""
    from keras_bertology.training.pretrain import pretrain

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
