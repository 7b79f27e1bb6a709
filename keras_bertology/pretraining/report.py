"""What a finished pretraining run reports: the numbers of its metrics.json (written by
`engine.run_metrics`), a loss-curve PNG and a summary in words."""

import math

import numpy as np

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from keras_bertology.atomic import atomic_file  # noqa: E402
from keras_bertology.data.recipe import build_masker  # noqa: E402
from keras_bertology.engine.run_metrics import HELD_OUT_PREFIX  # noqa: E402



def objective_summary(records, objectives):
    """Per objective, every metric it reports (loss, accuracy, ...) in the first and the last window."""
    return {
        name: {"first": _window(records[0], name), "last": _window(records[-1], name)}
        for name in objectives
    }


def _window(record, objective):
    """{"step", "loss", "accuracy", ...}: the `<objective>_<metric>` entries of one logged window."""
    prefix = f"{objective}_"
    window = {"step": record["step"], "loss": record.get(f"{prefix}loss"), "accuracy": record.get(f"{prefix}accuracy")}
    window.update({key[len(prefix):]: value for key, value in record.items() if key.startswith(prefix)})
    return window


def chance_levels(instances, tokenizer, objectives, last_windows=None, stage=None):
    """What guessing scores, per objective, to read the learned numbers against.

    `objectives` are `models.pretrainer.Objective`s. One that declares
    `make_chance` computes its own from its last logged window (labels made by
    the model, like replaced-token detection's, exist only there). Token
    objectives (`predicts_tokens`: MLM, SBO, PLM, LM) predict the corpus'
    non-special tokens or, given the run's data `stage` where it draws nothing
    (`DataRecipe.stage_draws`), the labels it gives every instance; guessing
    the most frequent target scores its share, and the unigram distribution
    scores its entropy as loss. A label objective (its labels among the
    instances) scores its majority share and the labels' entropy.
    """
    levels = {}
    for objective in objectives:
        name, labels = objective.name, instances.get(objective.label_key)
        if objective.make_chance is not None and last_windows and name in last_windows:
            levels[name] = objective.make_chance(last_windows[name])
        elif labels is not None and not objective.predicts_tokens:
            shares = np.bincount(labels.ravel()) / labels.size
            levels[name] = {"accuracy": float(shares.max()), "loss": _entropy(shares)}
        elif objective.predicts_tokens:
            targets = None if stage is None else stage_labels(stage, instances, objective)
            if targets is None:
                counts = np.bincount(instances["token_ids"].ravel(), minlength=tokenizer.vocab_size)
                counts[tokenizer.special_ids] = 0
            else:
                counts = np.bincount(targets, minlength=tokenizer.vocab_size)
            shares = counts / counts.sum()
            top = int(shares.argmax())
            levels[name] = {
                "accuracy": float(shares[top]),
                "most_frequent_token": tokenizer.vocabulary[top],
                "loss": _entropy(shares),
                "uniform_accuracy": 1.0 / tokenizer.vocab_size,
                "uniform_loss": math.log(tokenizer.vocab_size),
                "perplexity": math.exp(_entropy(shares)),
                "uniform_perplexity": float(tokenizer.vocab_size),
            }
    return levels


def labelling_stage(family, tokenizer, options):
    """The run's data stage where it draws nothing (`DataRecipe.stage_draws`), whose labels are then every
    target of its token objectives; None where it draws. It lays out nothing per replica."""
    return None if family.data.stage_draws else build_masker(family, tokenizer, options)


def stage_labels(stage, instances, objective, rows=1024):
    """The labels of `objective` that a data stage drawing nothing gives `instances`, where their weight is
    not 0 (1-D ints); `rows` instances at a time, so that what the stage adds per token (ELMo's spellings)
    stays small. None where the objective reads its labels from the model (a sampled softmax's, scored among
    the words it drew: the corpus' tokens are its level)."""
    total = len(instances["token_ids"])
    found = []
    for start in range(0, total, rows):
        batch = stage({key: value[start:start + rows] for key, value in instances.items() if len(value) == total})
        if objective.label_key not in batch:
            return None
        labels, weights = np.asarray(batch[objective.label_key]), np.asarray(batch[objective.weight_key])
        found.append(labels[weights > 0])
    return np.concatenate(found).astype(np.int64)


def _entropy(shares):
    shares = shares[shares > 0]
    return float(-(shares * np.log(shares)).sum())


def summary_text(metrics, run_dir, kinds):
    """The end-of-run report: speed, each objective against chance, the examples of each output kind of
    the model (`keras_bertology.outputs`), paths."""
    rows = [(f"{name} {metric.replace('_', ' ')}", summary, metric)
            for name, summary in metrics["objectives"].items()
            for metric in summary["first"] if metric != "step" and summary["first"][metric] is not None]
    width = max([14] + [len(label) + 1 for label, _, _ in rows])
    lines = [
        f"done: {metrics['steps']} steps in {metrics['train_seconds']:.0f} s "
        f"({metrics['samples_per_second']:.1f} samples/s), {metrics['windows']} logged windows "
        f"of {metrics['steps_per_window']} steps",
        f"{'':<{width}}{'first window':>13} -> {'last window':<12} chance",
    ]
    for label, summary, metric in rows:
        lines.append(f"{label:<{width}}{summary['first'][metric]:>13.3f} -> {summary['last'][metric]:<12.3f} "
                     + _chance_words(summary.get("chance", {}), metric))
    lines += _held_out_lines(metrics)
    for kind in kinds:
        lines += kind.summary_lines(metrics)
    lines += [f"metrics and loss curve: {run_dir}", f"SavedModel: {metrics['export_dir'] or 'none (--no-export)'}"]
    return "\n".join(lines)


def _held_out_lines(metrics):
    """The held-out evaluations (`--eval-every`): each objective's first and last score, and its perplexity
    against the unigram level."""
    evaluations = metrics.get("eval")
    if not evaluations:
        return []
    first, last = evaluations[0], evaluations[-1]
    lines = [f"held out of training ({len(evaluations)} evaluations, steps {first['step']} -> {last['step']}):"]
    for name, score in last["objectives"].items():
        start = first["objectives"][name]
        words = [f"{metric} {start[metric]:.3f} -> {score[metric]:.3f}" for metric in ("loss", "accuracy")
                 if metric in score and metric in start]
        if "perplexity" in score:
            level = metrics["objectives"][name].get("chance", {}).get("perplexity")
            words.append(f"perplexity {score['perplexity']:.1f}" + (f" (unigram level {level:.1f})" if level else ""))
        lines.append(f"  {name}: " + ", ".join(words))
    return lines


def _chance_words(chance, metric):
    if metric not in chance:
        return ""
    if "most_frequent_token" not in chance:
        return f"{chance[metric]:.3f}"
    if metric in ("loss", "perplexity"):
        return f"{chance[metric]:.3f} unigram, {chance['uniform_' + metric]:.3f} uniform"
    return (f"{chance['accuracy']:.3f} always '{chance['most_frequent_token']}', "
            f"{chance['uniform_accuracy']:.5f} uniform")


def plot_training_curves(records, objectives, path, title):
    """One panel of losses and one of accuracies, per logged window; held-out evaluations (records with
    `val_` metrics) as dashed lines of the same colour beside the training ones."""
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(11, 4))
    evaluated = [record for record in records if f"{HELD_OUT_PREFIX}loss" in record]
    for name in objectives:
        curves = [(loss_axis, "loss")] + [
            (accuracy_axis, metric) for metric in _window(records[0], name)
            # Perplexity is exp(loss), not a share: the loss panel shows it.
            if metric not in ("step", "loss", "perplexity") and records[0].get(f"{name}_{metric}") is not None]
        for axis, metric in curves:
            label = f"{name} {metric.replace('_', ' ')}"
            (line,) = axis.plot([r["step"] for r in records], [r.get(f"{name}_{metric}") for r in records],
                                marker=".", label=label)
            held_out = [r.get(f"{HELD_OUT_PREFIX}{name}_{metric}") for r in evaluated]
            if evaluated and held_out[0] is not None:
                axis.plot([r["step"] for r in evaluated], held_out, linestyle="--", marker="o", markersize=3,
                          color=line.get_color(), label=f"{label}, held out")
    loss_axis.set(xlabel="step", ylabel="cross-entropy", title="loss" + (" (dashed: held out)" if evaluated else ""))
    accuracy_axis.set(xlabel="step", ylabel="share", title="accuracy and other rates", ylim=(0, 1))
    for axis in (loss_axis, accuracy_axis):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    with atomic_file(path) as staging:
        figure.savefig(staging, dpi=110, format="png")
    plt.close(figure)
