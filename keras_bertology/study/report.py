"""The study's table, verdicts on the seeds' claims, and the score-against-compute plot.

A claim is judged on the test scores of the full budget, per task: the
difference of the two arms' means against its standard error over seeds
(sqrt(s_a^2 / n_a + s_b^2 / n_b)). "better" is reproduced when the
difference is above two standard errors, reversed when below minus two,
and undecided between; "same" (a wash) is reproduced when it lies within
two; "at least" (as well as) when it is not below minus two. Two arms
that score the same on every seed (a task at its floor: every tagger
predicting no entity) give no evidence either way: "no signal".
"""

import json
import math
import statistics
from pathlib import Path

from keras_bertology.atomic import atomic_file
from keras_bertology.study.arms import CLAIMS

DECISIVE = 2.0  # standard errors


def summarize(scores):
    """Mean, sample standard deviation (0 for one seed) and count of `scores`."""
    return {"mean": statistics.fmean(scores), "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
            "n": len(scores)}


def judge(relation, a, b):
    """The verdict of one claim from the summaries of arm `a` and arm `b` on a task."""
    difference = a["mean"] - b["mean"]
    error = math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])
    z = difference / error if error > 0 else math.copysign(math.inf, difference) if difference else 0.0
    if not difference and not error:
        verdict = "no signal"
    elif relation == "better":
        verdict = "reproduced" if z > DECISIVE else "reversed" if z < -DECISIVE else "undecided"
    elif relation == "same":
        verdict = "reproduced" if abs(z) <= DECISIVE else "not reproduced"
    else:  # "at least"
        verdict = "reproduced" if z >= -DECISIVE else "not reproduced"
    return {"difference": difference, "standard_error": error, "verdict": verdict}


def write_report(out, options, scale, points, state, random_init_key):
    """results.json, results.md and score_vs_compute.png of a finished study; returns the results."""
    tasks = [Path(task).name for task in options.tasks]
    rows = []
    for point in points:
        scores, metrics = {}, {}
        for task in tasks:
            records = [state["finetune"][f"{point.key}/{task}/seed-{seed}"] for seed in range(options.seeds)]
            scores[task] = summarize([record["score"] for record in records])
            metrics[task] = records[0]["metric"]
        pretrained = state["pretrain"][point.arm.name]
        rows.append({"arm": point.arm.name, "objective": point.arm.objective, "budget": point.share,
                     "steps": point.steps, "pretrain_flops": point.flops,
                     "pretrain_seconds": pretrained["seconds"] * point.steps / point.run.steps,
                     "scores": scores, "metrics": metrics})
        if point.steps == point.run.steps:
            rows[-1]["pretrain_losses"] = {name: summary["last"].get("loss")
                                           for name, summary in pretrained["objectives"].items()}
    baseline = {task: summarize([state["finetune"][f"{random_init_key}/{task}/seed-{seed}"]["score"]
                                 for seed in range(options.seeds)]) for task in tasks}
    full = {row["arm"]: row for row in rows if row["budget"] == max(scale.budgets)}
    claims = []
    for text, winner, other, relation, task in CLAIMS:
        if winner in full and other in full:
            for name in ([task] if task else tasks):
                if name in tasks:
                    claims.append({"claim": text, "arm": winner, "against": other, "relation": relation,
                                   "task": name, **judge(relation, full[winner]["scores"][name],
                                                         full[other]["scores"][name])})
    results = {"scale": options.scale, "size": scale.describe(), "seeds": options.seeds, "tasks": tasks,
               "budget_flops": max(row["pretrain_flops"] for row in rows) if rows else 0,
               "rows": rows, "random_init": baseline, "claims": claims,
               "flops_per_step": state["flops_per_step"],
               "pretrain_seconds": sum(r["seconds"] for r in state["pretrain"].values()),
               "finetune_train_seconds": sum(r["seconds"] for r in state["finetune"].values())}
    with atomic_file(Path(out) / "results.json") as staging:
        staging.write_text(json.dumps(results, indent=2))
    with atomic_file(Path(out) / "results.md") as staging:
        staging.write_text(markdown(results))
    plot(results, Path(out) / "score_vs_compute.png")
    return results


def _cell(summary):
    return f"{summary['mean']:.3f} ± {summary['std']:.3f}"


def markdown(results):
    tasks = results["tasks"]
    metric_names = {task: next((row["metrics"][task] for row in results["rows"]), "") for task in tasks}
    lines = [
        f"# Objective study ({results['scale']} scale)",
        "",
        f"Encoder: {results['size']}. Every arm gets the same pretraining compute (matmul FLOPs of its "
        f"traced training step x steps), then the same fine-tuning recipe; test scores are the mean ± "
        f"standard deviation over {results['seeds']} fine-tuning seeds.",
        "",
        "| arm | objective | budget | steps | pretraining FLOPs | pretraining s | "
        + " | ".join(f"{task} {metric_names[task]}" for task in tasks) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(tasks),
    ]
    for row in results["rows"]:
        lines.append(f"| {row['arm']} | {row['objective']} | {row['budget']:g} | {row['steps']} | "
                     f"{row['pretrain_flops']:.3g} | {row['pretrain_seconds']:.0f} | "
                     + " | ".join(_cell(row["scores"][task]) for task in tasks) + " |")
    lines.append("| no pretraining | random initialisation | 0 | 0 | 0 | 0 | "
                 + " | ".join(_cell(results["random_init"][task]) for task in tasks) + " |")
    lines += ["", f"Time on this machine: pretraining {results['pretrain_seconds'] / 60:.1f} min (wall-clock of the "
              f"runs), fine-tuning {results['finetune_train_seconds'] / 60:.1f} min (training only: encoding the data "
              "and evaluating after each epoch come on top).",
              "", "## The seeds' claims at the full budget", "",
              "| claim | task | difference | standard error | verdict |", "|---|---|---|---|---|"]
    for claim in results["claims"]:
        lines.append(f"| {claim['claim']} ({claim['arm']} vs {claim['against']}) | {claim['task']} | "
                     f"{claim['difference']:+.3f} | {claim['standard_error']:.3f} | {claim['verdict']} |")
    lines += ["", f"A verdict needs a difference beyond {DECISIVE:g} standard errors of it; \"no signal\": both "
              "arms scored the same on every seed (see `keras_bertology/study/report.py`).", ""]
    return "\n".join(lines)


def plot(results, path):
    """Test score against pretraining FLOPs per task, one line per arm through its budgets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = results["tasks"]
    figure, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.4), squeeze=False)
    arms = list(dict.fromkeys(row["arm"] for row in results["rows"]))
    for axis, task in zip(axes[0], tasks):
        for arm in arms:
            rows = sorted((row for row in results["rows"] if row["arm"] == arm), key=lambda r: r["pretrain_flops"])
            axis.errorbar([row["pretrain_flops"] for row in rows], [row["scores"][task]["mean"] for row in rows],
                          yerr=[row["scores"][task]["std"] for row in rows], marker="o", capsize=3, label=arm)
        axis.axhline(results["random_init"][task]["mean"], color="grey", linestyle="--", linewidth=1,
                     label="no pretraining")
        axis.set_xscale("log")
        axis.set_xlabel("pretraining FLOPs")
        metric = next((row["metrics"][task] for row in results["rows"]), "score")
        axis.set_ylabel(f"{task} test {metric}")
        axis.set_title(task, fontsize=10)
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    figure.suptitle(f"Downstream score against pretraining compute ({results['scale']} scale, "
                    f"mean ± sd over {results['seeds']} seeds)", fontsize=10)
    figure.tight_layout()
    with atomic_file(path) as staging:
        figure.savefig(staging, dpi=120, format="png")
    plt.close(figure)
