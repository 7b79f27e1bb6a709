"""The batch-size axis' table, verdict and plot (study/batch_sizes.py runs it).

Each larger batch is compared with the smallest, as RoBERTa's table does:
held-out perplexity paired by pretraining seed (the same initial weights
and held-out instances), and each task's score paired by fine-tuning seed,
both judged as the objective study judges (study/report.py: beyond two
standard errors). The documents' trend holds at a size when its perplexity
is lower ("better", reproduced) and it does at least as well on every task
where pretraining pays; it does not hold when its perplexity is higher or a
task's score lower beyond two standard errors; otherwise it is undecided.
"""

import dataclasses
import math
from pathlib import Path

from keras_bertology.study.rate_grid import MAX_WIDENINGS, RATE_FACTORS
from keras_bertology.study.report import (DECISIVE, finetune_key, gate, judge, save_figure, summarize,
                                          write_results)
from keras_bertology.study.steps import RANDOM_INIT


def write_batch_report(out, options, scale, settings, best, seeds, keys, state, label_counts, compared,
                       finetuned):
    """results.json, results.md and batch_sizes.png of a finished batch-size study; returns the results.

    `settings`: the grid (seed 0); `best`: {batch size: its chosen setting}; `seeds`: pretraining seeds of
    each chosen rate; `keys`: {batch size: its fine-tuning key}; `compared`: the tasks every size was
    fine-tuned on (the gate's tasks); `finetuned`: the study.json keys of the fine-tuning runs."""
    pretrained = state["pretrain"]
    tasks = [Path(task).name for task in options.tasks]
    smallest = min(best)

    def seed_scores(key, task):
        return [state["finetune"][finetune_key(key, task, label_counts[task]["verdict"], seed)]["score"]
                for seed in range(options.seed_count)]

    def perplexities(size):
        return [pretrained[dataclasses.replace(best[size], seed=seed).name]["perplexity"] for seed in range(seeds)]

    grid = [{"batch_size": s.batch_size, "rate": s.rate, "steps": s.steps, "accumulate": s.accumulate,
             "perplexity": pretrained[s.name]["perplexity"], "chosen": best[s.batch_size] == s}
            for s in sorted(settings, key=lambda s: (s.batch_size, s.rate))]
    rows = []
    for size, setting in sorted(best.items()):
        first = pretrained[setting.name]
        tried = [point["rate"] for point in grid if point["batch_size"] == size]
        rows.append({"batch_size": size, "accumulate": setting.accumulate, "steps": setting.steps,
                     "samples": setting.samples, "rate": setting.rate,
                     "rate_at_edge": setting.rate in (tried[0], tried[-1]), "perplexity": summarize(perplexities(size)),
                     "accuracy": first.get("accuracy"), "unigram_perplexity": first.get("unigram_perplexity"),
                     "scores": {Path(task).name: summarize(seed_scores(keys[size], task))
                                for task in label_counts if task in compared or size == smallest}})
    gates = {Path(task).name: gate(state, keys[smallest], RANDOM_INIT, task, counts["verdict"], options.seed_count)
             for task, counts in label_counts.items()}
    comparisons = []
    for size in sorted(best)[1:]:
        lower = judge("better", perplexities(smallest), perplexities(size))  # smallest's minus this size's
        scores = {Path(task).name: judge("at least", seed_scores(keys[size], task), seed_scores(keys[smallest], task))
                  for task in compared}
        comparisons.append({"batch_size": size, "against": smallest, "perplexity": lower, "tasks": scores,
                            "trend": trend(lower, scores)})
    runs = [state["finetune"][key] for key in finetuned]
    results = {
        "axis": "batch size", "scale": options.scale, "size": scale.describe(), "arm": best[smallest].arm_name,
        "samples": scale.reference_steps * scale.batch_size, "micro_batch": scale.batch_size,
        "pretraining_seeds": seeds, "seeds": options.seed_count, "tasks": tasks, "rate_factors": RATE_FACTORS,
        "max_widenings": MAX_WIDENINGS,
        "metrics": {Path(task).name: state["finetune"][finetune_key(RANDOM_INIT, task, counts["verdict"], 0)]["metric"]
                    for task, counts in label_counts.items()},
        "verdict_labels": {Path(task).name: counts["verdict"] for task, counts in label_counts.items()},
        "random_init": {Path(task).name: summarize(seed_scores(RANDOM_INIT, task)) for task in label_counts},
        "grid": grid, "rows": rows, "gate": gates, "comparisons": comparisons,
        "verdict": overall(comparisons),
        "pretrain_seconds": sum(run["seconds"] for run in pretrained.values()),
        "finetune_runs": len(runs), "finetune_seconds": sum(run["wall_seconds"] for run in runs)}
    return write_results(out, results, markdown, plot, "batch_sizes.png")


def trend(perplexity, scores):
    """Whether the documents' trend holds at one size: "holds", "does not hold" or "undecided"."""
    if perplexity["verdict"] == "reversed" or any(s["verdict"] == "not reproduced" for s in scores.values()):
        return "does not hold"
    return "holds" if perplexity["verdict"] == "reproduced" else "undecided"


def overall(comparisons):
    """The verdict of the whole axis: "holds" when it holds at every larger size, "does not hold" when it
    fails at one, else "undecided"."""
    trends = {comparison["trend"] for comparison in comparisons}
    return "does not hold" if "does not hold" in trends else "holds" if trends == {"holds"} else "undecided"


def _standard_error(summary):
    return summary["std"] / math.sqrt(summary["n"])


def markdown(results):
    arm, smallest = results["arm"], results["rows"][0]["batch_size"]
    lines = [f"# Batch size at equal compute: {arm}, {results['scale']} scale", "",
             f"{results['size']} (each step); every run sees {results['samples']} samples, so every run costs the "
             f"same FLOPs; larger batches accumulate micro-batches of {results['micro_batch']}. Per batch size the "
             "peak rate is chosen from the grid below by held-out perplexity (documents kept out of training), "
             f"then pretrained with {results['pretraining_seeds']} seeds; the first is fine-tuned with "
             f"{results['seeds']} seeds per task.", "",
             "## The rate grid: held-out perplexity (first seed; the chosen rate in bold)", "",
             "| batch | updates | " + " | ".join(f"rate {i + 1}" for i in range(_grid_width(results))) + " |",
             "|---:|---:|" + "---:|" * _grid_width(results)]
    for size in [row["batch_size"] for row in results["rows"]]:
        cells = [_grid_cell(point) for point in results["grid"] if point["batch_size"] == size]
        cells += [""] * (_grid_width(results) - len(cells))
        steps = next(point["steps"] for point in results["grid"] if point["batch_size"] == size)
        lines.append(f"| {size} | {steps} | " + " | ".join(cells) + " |")
    edges = [str(row["batch_size"]) for row in results["rows"] if row["rate_at_edge"]]
    lines += ["", f"Rates {', '.join(f'x{factor:g}' for factor in results['rate_factors'])} of the arm's, scaled by "
              "the square root of the batch's growth; where the best was at an end, rates a factor of 2 beyond it "
              f"were added (up to {results['max_widenings']} a size)."
              + (f" Still at an end of its rates: batch {', '.join(edges)} (a rate outside them might do better)."
                 if edges else "")]
    tasks = results["tasks"]
    measures = ", ".join(f"{results['metrics'][task]} on {task} ({results['verdict_labels'][task]} labels)"
                         for task in tasks)
    lines += ["", "## At each size's chosen rate", "",
              f"Held-out perplexity: mean ± standard error over the pretraining seeds; scores: test {measures}, "
              "mean ± sd over the fine-tuning seeds.", "",
              "| batch | micro-batches an update | rate | held-out perplexity | held-out accuracy | "
              + " | ".join(tasks) + " |", "|---:|---:|---:|---:|---:|" + "---:|" * len(tasks)]
    for row in results["rows"]:
        perplexity = row["perplexity"]
        accuracy = "" if row["accuracy"] is None else f"{row['accuracy']:.3f}"
        lines.append(f"| {row['batch_size']} | {row['accumulate']} | {row['rate']:g} | {perplexity['mean']:.2f} ± "
                     f"{_standard_error(perplexity):.2f} | {accuracy} | "
                     + " | ".join(_score(row["scores"].get(task)) for task in tasks) + " |")
    lines.append("| no pretraining | | | | | " + " | ".join(_score(results["random_init"][t]) for t in tasks) + " |")
    unigram = results["rows"][0]["unigram_perplexity"]
    if unigram:
        lines += ["", f"The unigram level of held-out perplexity (every token at its corpus frequency): {unigram:.1f}."]
    skipped = [task for task in tasks if not results["gate"][task]["pays"]]
    if skipped:
        lines += ["", "Empty cells: not fine-tuned on " + ", ".join(
            f"{task}, where batches of {smallest} did not beat random initialisation "
            f"({results['gate'][task]['difference']:+.3f} ± {results['gate'][task]['standard_error']:.3f})"
            for task in skipped) + "."]
    compared = [task for task in tasks if task not in skipped]
    lines += ["", f"## Against batches of {smallest}", "",
              "Differences with their standard errors (perplexity: the smaller batch's minus the larger's, so "
              "positive is lower at the larger batch; scores: the larger's minus the smaller's).", "",
              "| " + " | ".join(["batch", "perplexity lower by", *compared, "the trend"]) + " |",
              "|---:|---:|" + "---:|" * len(compared) + "---|"]
    for comparison in results["comparisons"]:
        cells = [_difference(comparison["perplexity"])] + [_difference(comparison["tasks"][t]) for t in compared]
        lines.append(f"| {comparison['batch_size']} | " + " | ".join(cells) + f" | {comparison['trend']} |")
    verdict = {"holds": "holds", "does not hold": "does not hold", "undecided": "is undecided"}[results["verdict"]]
    lines += ["", f"**Verdict: the documents' trend (a larger batch at a tuned rate gives lower held-out perplexity "
              f"and equal or better downstream scores at equal compute) {verdict} here.** A difference "
              f"decides beyond {DECISIVE:g} standard errors (`keras_bertology/study/batch_report.py`).", ""]
    return "\n".join(lines)


def _grid_width(results):
    return max(sum(1 for p in results["grid"] if p["batch_size"] == row["batch_size"]) for row in results["rows"])


def _grid_cell(point):
    text = "diverged" if point["perplexity"] is None else f"{point['perplexity']:.2f}"
    text = f"{point['rate']:g}: {text}"
    return f"**{text}**" if point["chosen"] else text


def _score(summary):
    return "" if summary is None else f"{summary['mean']:.3f} ± {summary['std']:.3f}"


def _difference(verdict):
    return f"{verdict['difference']:+.3f} ± {verdict['standard_error']:.3f} ({verdict['verdict']})"


def plot(results, path):
    """Held-out perplexity against the peak rate for each batch size (the grid, chosen rates marked), and
    each task's score against the batch size at its chosen rate, no pretraining dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = results["tasks"]
    figure, axes = plt.subplots(1, 1 + len(tasks), figsize=(5.2 * (1 + len(tasks)), 4.2), squeeze=False)
    grid_axis = axes[0][0]
    sizes = [row["batch_size"] for row in results["rows"]]
    for index, size in enumerate(sizes):
        color = plt.get_cmap("viridis")(index / max(1, len(sizes) - 1))
        points = [p for p in results["grid"] if p["batch_size"] == size and p["perplexity"] is not None]
        grid_axis.plot([p["rate"] for p in points], [p["perplexity"] for p in points], marker="o", color=color,
                       label=f"batch {size}")
        row = results["rows"][index]
        grid_axis.errorbar([row["rate"]], [row["perplexity"]["mean"]], yerr=[_standard_error(row["perplexity"])],
                           marker="*", markersize=12, color=color, capsize=3)
    unigram = results["rows"][0]["unigram_perplexity"]
    if unigram:
        grid_axis.axhline(unigram, color="grey", linestyle=":", linewidth=1, label="unigram level")
    grid_axis.set(xscale="log", xlabel="peak learning rate", ylabel="held-out perplexity",
                  title="the rate grid (star: chosen, mean ± SE over seeds)")
    grid_axis.legend(fontsize=8)
    for axis, task in zip(axes[0][1:], tasks):
        rows = [row for row in results["rows"] if task in row["scores"]]
        axis.errorbar([row["batch_size"] for row in rows], [row["scores"][task]["mean"] for row in rows],
                      yerr=[row["scores"][task]["std"] for row in rows], marker="o", capsize=3, label=results["arm"])
        axis.axhline(results["random_init"][task]["mean"], color="grey", linestyle="--", linewidth=1,
                     label="no pretraining")
        axis.set(xscale="log", xlabel="effective batch size (equal samples seen)",
                 ylabel=f"test {results['metrics'][task]}, {results['verdict_labels'][task]} labels", title=task)
        axis.set_xticks(sizes, [str(size) for size in sizes])
        axis.legend(fontsize=8)
    save_figure(figure, path, f"Batch size at equal compute ({results['arm']}, {results['scale']} scale): "
                              f"the trend {results['verdict']}")
