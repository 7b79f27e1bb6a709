"""The study's table, learning curves, verdicts on the seeds' claims, and its plots.

Every comparison is paired: fine-tuning seed s draws the same labeled
examples for every arm, so two arms are compared by their per-seed
differences d_s, whose standard error is sd(d) / sqrt(n). "better" is
reproduced when the mean difference is above two standard errors, reversed
when below minus two, and undecided between; "same" (a wash) is reproduced
when it lies within two; "at least" (as well as) when it is not below minus
two. Two arms that score the same on every seed (a task at its floor: every
tagger predicting no entity) give no evidence either way: "no signal".

A sanity gate comes first: a comparison of objectives means something only
where pretraining helps at all. Per task, the reference arm (the first, BERT's
MLM) must beat random initialisation by more than two standard errors at the
verdict label count; where it does not, the report says the budget is too
small for that task and judges no claim on it. The smallest difference a
task can decide is two pooled standard errors of the paired differences of
all arms (random init included) at the full budget.
"""

import itertools
import json
import math
import statistics
from pathlib import Path

from keras_bertology.atomic import atomic_file
from keras_bertology.paired_seeds import DECISIVE, judge, summarize
from keras_bertology.study.arms import CLAIMS
from keras_bertology.study.comparability import differences
from keras_bertology.tokenizers.saved import describe_saved_tokenizer

# The fine-tuning key of the reference arm's encoder without pretraining: the gate's baseline, and that arm's
# control.
RANDOM_INIT = "random-init"


def decidable_difference(seed_scores):
    """Two pooled standard errors of the paired differences of every pair of `seed_scores` (lists
    over the same seeds): the smallest difference between two arms the study can tell from noise."""
    variances = [statistics.variance([x - y for x, y in zip(a, b)]) for a, b in itertools.combinations(seed_scores, 2)]
    n = len(seed_scores[0]) if seed_scores else 0
    if not variances or n < 2:
        return None
    return DECISIVE * math.sqrt(statistics.fmean(variances) / n)


def finetune_key(key, task, labels, seed):
    """The study.json key (and folder under STUDY/finetune/) of one fine-tuning run."""
    return f"{key}/{Path(task).name}/labels-{labels}/seed-{seed}"


def _seed_scores(state, key, task, labels, seed_count):
    return [state["finetune"][finetune_key(key, task, labels, seed)]["score"] for seed in range(seed_count)]


def gate(state, reference_key, baseline_key, task, labels, seed_count):
    """Does pretraining pay on `task`: the reference encoder against random initialisation at `labels`
    examples (a "better" verdict, with "pays" added)."""
    verdict = judge("better", _seed_scores(state, reference_key, task, labels, seed_count),
                    _seed_scores(state, baseline_key, task, labels, seed_count))
    return {**verdict, "pays": verdict["verdict"] == "reproduced"}


def control_key(arm_name, reference_name):
    """The study.json key of an arm's control: its encoder and vocabulary without pretraining (the reference
    arm's is the gate's random initialisation)."""
    return RANDOM_INIT if arm_name == reference_name else f"{arm_name}/{RANDOM_INIT}"


def write_report(out, options, scale, points, state, label_counts, compared, finetuned, probing=None):
    """results.json, results.md and score_vs_compute.png of a finished study; returns the results.

    `label_counts`: per task (as given), {"all": its label counts, "verdict": the one verdicts use};
    `compared`: the tasks every arm was fine-tuned on (the others hold the reference arm's full budget
    and random init only); `finetuned`: the study.json keys of the study's fine-tuning runs; `probing`: the
    linear probes' results (study/probes.py)."""
    def scores(key, task, labels):
        return summarize(_seed_scores(state, key, task, labels, options.seed_count))

    tasks = [Path(task).name for task in options.tasks]
    verdict_labels = {Path(task).name: counts["verdict"] for task, counts in label_counts.items()}
    metrics = {Path(task).name: state["finetune"][finetune_key(RANDOM_INIT, task, counts["verdict"], 0)]["metric"]
               for task, counts in label_counts.items()}
    reference = next(point for point in points if point.steps == point.run.steps)
    rows = []
    for point in points:
        pretrained = state["pretrain"][point.arm.name]
        rows.append({"arm": point.arm.name, "objective": point.arm.objective, "budget": point.share,
                     "steps": point.steps, "pretrain_flops": point.flops,
                     "pretrain_seconds": pretrained["seconds"] * point.steps / point.run.steps,
                     "scores": {Path(task).name: scores(point.key, task, counts["verdict"])
                                for task, counts in label_counts.items()
                                if point.steps == point.run.steps and (task in compared or point is reference)}})
        if point.steps == point.run.steps:
            rows[-1]["pretrain_losses"] = {name: summary["last"].get("loss")
                                           for name, summary in pretrained["objectives"].items()}
    curves = {reference.arm.name: _curve(scores, reference.key, label_counts)}
    random_init = _curve(scores, RANDOM_INIT, label_counts)
    full = {row["arm"]: row for row in rows if row["budget"] == max(scale.budgets)}
    gates = {Path(task).name: gate(state, reference.key, RANDOM_INIT, task, counts["verdict"], options.seed_count)
             for task, counts in label_counts.items()}
    # Per arm: its vocabulary (what its verdicts may compare) and, on each compared task, its control (its encoder
    # and vocabulary without pretraining) and its own gate against it.
    keys = {point.arm.name: point.key for point in points if point.steps == point.run.steps}
    arms = {}
    for name in full:
        control = control_key(name, reference.arm.name)
        arms[name] = {"tokenizer": describe_saved_tokenizer(Path(out) / "tokenizers" / name), "control": {
            Path(task).name: {"scores": scores(control, task, counts["verdict"]),
                              "gate": gate(state, keys[name], control, task, counts["verdict"], options.seed_count)}
            for task, counts in label_counts.items() if task in compared}}
    claims = []
    for claim in CLAIMS:
        if claim.arm in full and claim.against in full:
            for name in ([claim.task] if claim.task else tasks):
                if name in tasks and gates[name]["pays"]:
                    claims.append(_judged(claim, name, arms, full[claim.arm]["scores"][name]["seeds"],
                                          full[claim.against]["scores"][name]["seeds"]))
    decidable = {task: decidable_difference([row["scores"][task]["seeds"] for row in full.values()
                                             if task in row["scores"]]
                                            + [random_init[task][str(verdict_labels[task])]["seeds"]])
                 for task in tasks}
    runs = [state["finetune"][key] for key in finetuned]
    results = {"scale": options.scale, "size": scale.describe(), "seeds": options.seed_count, "tasks": tasks,
               "metrics": metrics, "verdict_labels": verdict_labels, "reference_arm": reference.arm.name,
               "budget_flops": max(row["pretrain_flops"] for row in rows) if rows else 0,
               "pretraining_text": "the tasks' training text, without labels" if options.corpus is None
               else " ".join(map(str, options.corpus)),
               "rows": rows, "learning_curves": curves, "random_init": random_init, "gate": gates,
               "decidable_difference": decidable, "arms": arms, "claims": claims,
               "flops_per_step": state["flops_per_step"],
               "pretrain_seconds": sum(r["seconds"] for r in state["pretrain"].values()),
               "finetune_runs": len(runs),
               "finetune_train_seconds": sum(run["seconds"] for run in runs),
               "finetune_seconds": sum(run["wall_seconds"] for run in runs)}
    if probing is not None:
        results["probing"] = probing
        results["probe_claims"] = probe_claims(probing, arms, keys)
    return write_results(out, results, markdown, plot, "score_vs_compute.png")


def probe_claims(probing, arms, keys):
    """The claims judged on the linear probes: per probing task, the two arms' mix macro-F1 at the full budget
    (`keys`: arm -> its full-budget key), paired by seed (a seed draws the probe's examples alike for every
    arm), refused as fine-tuning's are, an arm's control being its probe's. No gate of the reference arm: a
    probe has no fine-tuning that random initialisation could catch up with."""
    judged = []
    for claim in CLAIMS:
        if claim.arm in keys and claim.against in keys:
            for task, table in probing.items():
                if claim.task is None or claim.task == task:
                    records = {name: table[keys[name]] for name in (claim.arm, claim.against)}
                    judged.append(_judged(claim, task, arms, records[claim.arm]["mix"]["seeds"],
                                          records[claim.against]["mix"]["seeds"],
                                          {name: record["gate"] for name, record in records.items()}))
    return judged


def _judged(claim, task, arms, scores, against, control_gates=None):
    """results.json's entry of `claim` on `task`: its verdict from the paired scores; "not comparable" (with the
    reasons) where its arms differ in a recorded factor other than the one it names, else "no verdict" where an
    arm does not beat its own control on the task (`arms`: results.json's records; `control_gates`: each arm's
    gate against its control, by default its fine-tuning's)."""
    judged = {"claim": claim.text, "arm": claim.arm, "against": claim.against, "relation": claim.relation,
              "factor": claim.factor, "task": task, **judge(claim.relation, scores, against)}
    control_gates = control_gates or {name: arms[name]["control"][task]["gate"] for name in (claim.arm, claim.against)}
    reasons = differences(arms, judged)
    below = [f"{name} does not beat its control ({control_gates[name]['difference']:+.3f} ± "
             f"{control_gates[name]['standard_error']:.3f})"
             for name in (claim.arm, claim.against) if not control_gates[name]["pays"]]
    if reasons:
        judged.update(verdict="not comparable", not_comparable=reasons)
    if below:
        judged.update(verdict=judged["verdict"] if reasons else "no verdict", below_control=below)
    return judged


def write_results(out, results, to_markdown, to_plot, plot_name):
    """A finished study's results.json, results.md (`to_markdown(results)`) and its plot (`to_plot(results,
    path)`), each written atomically; returns `results`."""
    with atomic_file(Path(out) / "results.json") as staging:
        staging.write_text(json.dumps(results, indent=2))
    with atomic_file(Path(out) / "results.md") as staging:
        staging.write_text(to_markdown(results))
    to_plot(results, Path(out) / plot_name)
    return results


def _curve(scores, key, label_counts):
    """{task: {label count (as text, JSON's keys): summary}} of one encoder."""
    return {Path(task).name: {str(labels): scores(key, task, labels) for labels in counts["all"]}
            for task, counts in label_counts.items()}


def _cell(summary):
    return f"{summary['mean']:.3f} ± {summary['std']:.3f}"


def _glance(results):
    """The table the README quotes: per arm, each task's fine-tuned score at the full budget and its control's
    (mean ± sd over the seeds, at the verdict label count), then each probing task's mix at each share of the
    budget; no pretraining in the last row."""
    tasks, budgets = results["tasks"], sorted({row["budget"] for row in results["rows"]})
    probing = results.get("probing", {})
    full = {row["arm"]: row["scores"] for row in results["rows"] if row["budget"] == budgets[-1]}
    controls = {name: record["control"] for name, record in results.get("arms", {}).items()}
    header = [f"{task} ({results['metrics'][task]}, {results['verdict_labels'][task]} labels)" for task in tasks]
    if controls:
        header += [f"{task} control" for task in tasks]
    header += [f"{task} probe {budget:g}" for task in probing for budget in budgets]
    lines = ["## At a glance", "",
             "Fine-tuned test score at the full budget" + (", the arm's own control's (its encoder without "
                                                           "pretraining)" if controls else "")
             + (", and the linear probes' mix (macro-F1) at each share of the budget" if probing else "") + ":", "",
             "| arm | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for arm, scores in full.items():
        cells = [_cell(scores[task]) if task in scores else "" for task in tasks]
        if controls:
            cells += [_cell(controls[arm][task]["scores"]) if task in controls.get(arm, {}) else "" for task in tasks]
        cells += [_cell(table[f"{arm}/budget-{budget:g}"]["mix"]) if f"{arm}/budget-{budget:g}" in table else ""
                  for table in probing.values() for budget in budgets]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    cells = [_cell(results["random_init"][task][str(results["verdict_labels"][task])]) for task in tasks]
    cells += [""] * (len(header) - len(cells))
    lines.append("| no pretraining | " + " | ".join(cells) + " |")
    return lines + [""] + _not_compared(results)


def _not_compared(results):
    """The line that says why a table has empty cells: tasks on which only the gate's runs were made."""
    full = [row for row in results["rows"] if row["budget"] == max(r["budget"] for r in results["rows"])]
    tasks = [task for task in results["tasks"] if any(task not in row["scores"] for row in full)]
    if not tasks:
        return []
    return [f"Empty cells: not fine-tuned on {', '.join(tasks)}, where {results['reference_arm']} did not beat "
            "random initialisation (the gate, below), so no claim is judged there (`--all-tasks` runs them).", ""]


def markdown(results):
    tasks = results["tasks"]
    header = " | ".join(f"{task} {results['metrics'][task]} ({results['verdict_labels'][task]} labels)"
                        for task in tasks)
    lines = [
        f"# Objective study ({results['scale']} scale)",
        "",
        f"Encoder: {results['size']}; pretrained on {results['pretraining_text']}. Every arm gets the same "
        "pretraining compute (matmul FLOPs of its traced training step x steps), then the same fine-tuning "
        f"recipe; test scores are the mean ± standard deviation over {results['seeds']} fine-tuning seeds, "
        "each drawing the same labeled examples for every arm.",
        "",
        *_glance(results),
        "## Every run",
        "",
        f"| arm | objective | budget | steps | pretraining FLOPs | pretraining s | {header} |",
        "|---|---|---|---|---|---|" + "---|" * len(tasks),
    ]
    for row in results["rows"]:
        lines.append(f"| {row['arm']} | {row['objective']} | {row['budget']:g} | {row['steps']} | "
                     f"{row['pretrain_flops']:.3g} | {row['pretrain_seconds']:.0f} | "
                     + " | ".join(_cell(row["scores"][task]) if task in row["scores"] else "" for task in tasks)
                     + " |")
    lines.append("| no pretraining | random initialisation | 0 | 0 | 0 | 0 | "
                 + " | ".join(_cell(results["random_init"][task][str(results["verdict_labels"][task])])
                              for task in tasks) + " |")
    lines += ["", "Fine-tuned at the full budget only: the earlier shares of the budget are read by the linear "
              "probes (below), for a fraction of a fine-tuning run's cost.",
              "", f"Time on this machine: pretraining {results['pretrain_seconds'] / 60:.1f} min (wall-clock of the "
              f"runs), fine-tuning {results['finetune_seconds'] / 60:.1f} min ({results['finetune_runs']} runs; "
              f"{results['finetune_train_seconds'] / 60:.1f} min of it "
              "training).", "", "## Learning curves (the reference arm at the full budget)", ""]
    for task in tasks:
        counts = list(results["random_init"][task])
        lines += [f"{task} ({results['metrics'][task]}):", "",
                  "| arm | " + " | ".join(f"{count} labels" for count in counts) + " |",
                  "|---|" + "---|" * len(counts)]
        for arm, curve in [*results["learning_curves"].items(), ("no pretraining", results["random_init"])]:
            lines.append(f"| {arm} | " + " | ".join(_cell(curve[task][count]) for count in counts) + " |")
        lines.append("")
    lines += ["## Does pretraining pay? (the gate)", "",
              f"| task | {results['reference_arm']} - random init | standard error | decidable difference | "
              "verdicts |", "|---|---|---|---|---|"]
    for task in tasks:
        gate, decidable = results["gate"][task], results["decidable_difference"][task]
        lines.append(f"| {task} | {gate['difference']:+.3f} | {gate['standard_error']:.3f} | "
                     + (f"{decidable:.3f}" if decidable is not None else "-") + " | "
                     + ("given" if gate["pays"] else "none: the budget is too small for this task") + " |")
    lines += ["", *_control_table(results), *probe_table(results), "## The seeds' claims at the full budget", ""]
    if results["claims"]:
        lines += claims_table(results["claims"])
    elif not any(gate["pays"] for gate in results["gate"].values()):
        lines.append("No claim is judged: on no task did pretraining beat random initialisation.")
    else:
        lines.append("No claim is judged: no claim has both of its arms in this study.")
    refusals = (" \"not comparable\": the two arms differ in more than the factor the claim names "
                "(`keras_bertology/study/comparability.py`); \"no verdict\": an arm does not beat its own control."
                if "arms" in results else "")
    lines += ["", f"A verdict needs a paired difference beyond {DECISIVE:g} standard errors of it; \"no signal\": "
              "both arms scored the same on every seed (see `keras_bertology/study/report.py`)." + refusals, ""]
    return "\n".join(lines)


def claims_table(claims):
    """The rows of a table of judged claims, each verdict with its reasons."""
    # A study of an earlier edition recorded no factors: its table renders as it did.
    factors = all("factor" in claim for claim in claims)
    lines = ["| claim | " + ("factor | " if factors else "") + "task | difference | standard error | verdict |",
             "|---|---|---|---|---|" + ("---|" if factors else "")]
    for claim in claims:
        verdict = claim["verdict"] + "".join(f": {reason}" for reason in
                                             [*claim.get("not_comparable", ()), *claim.get("below_control", ())])
        lines.append(f"| {claim['claim']} ({claim['arm']} vs {claim['against']}) | "
                     + (f"{claim['factor']} | " if factors else "")
                     + f"{claim['task']} | {claim['difference']:+.3f} | {claim['standard_error']:.3f} | {verdict} |")
    return lines


def _control_table(results):
    """Each arm at the full budget against its control (its encoder and vocabulary without pretraining), on
    the tasks every arm was fine-tuned on: an arm that does not beat it gets no verdict."""
    if "arms" not in results:  # a study of an earlier edition: no controls
        return []
    rows = {row["arm"]: row for row in results["rows"] if row["budget"] == max(r["budget"] for r in results["rows"])}
    lines = ["## Each arm against its own control", "",
             "| arm | task | score | control (no pretraining) | gain | standard error | verdicts |",
             "|---|---|---|---|---|---|---|"]
    for name, record in results["arms"].items():
        for task, control in record["control"].items():
            gate = control["gate"]
            lines.append(f"| {name} | {task} | {_cell(rows[name]['scores'][task])} | {_cell(control['scores'])} | "
                         f"{gate['difference']:+.3f} | {gate['standard_error']:.3f} | "
                         + ("given" if gate["pays"] else "none: it does not beat its control") + " |")
    return lines + [""] if len(lines) > 4 else []


def probe_table(results):
    """results.md's probing section: per task, each arm at each budget point against its control."""
    if "probing" not in results:
        return []
    lines = ["## Linear probes (frozen states; macro-F1)", "",
             "A logistic regression on each depth's states (a word at its first piece, an article as the mean "
             "of its pieces), and on a scalar mix of all depths; the control is the arm's own architecture "
             f"and vocabulary randomly initialised. Mean ± sd over {results['seeds']} seeds (each draws the "
             "probe's training examples, and the control's weights).", ""]
    for task, table in results["probing"].items():
        lines += [f"{task}:", "", "| encoder | mix | gain over its control | each depth (0: embeddings) | "
                  "mix weights |", "|---|---|---|---|---|"]
        for key, record in table.items():
            gain = record.get("gain")
            gate = record.get("gate")
            lines.append(f"| {key} | {record['mix']['mean']:.3f} ± {record['mix']['std']:.3f} | "
                         + (f"{gain['mean']:+.3f} ± {gain['std']:.3f}" if gain else "-")
                         + ("" if not gate or gate["pays"] else " (not beyond 2 standard errors)") + " | "
                         + " ".join(f"{depth['mean']:.3f}" for depth in record["layers"]) + " | "
                         + " ".join(f"{weight:.2f}" for weight in record["mix_weights"]) + " |")
        lines.append("")
    if results.get("probe_claims"):
        lines += ["The claims on the probes' mix at the full budget, paired by seed; an arm whose probe does not "
                  "beat its control's gets no verdict:", "", *claims_table(results["probe_claims"]), ""]
    return lines


def _compute_curves(results):
    """[(title, y label, {arm: [(FLOPs, mean, sd)]}, the no-pretraining level)] of the plot's first row: the
    probes' mix at each share of the budget on each probing task; a study without probes plots the
    fine-tuned scores of the points it fine-tuned."""
    rows = results["rows"]
    if results.get("probing"):
        return [(f"{task}: linear probe against compute", "probe macro-F1 (scalar mix)",
                 {row["arm"]: [] for row in rows} | _grouped(
                     (row["arm"], row["pretrain_flops"], table[f"{row['arm']}/budget-{row['budget']:g}"]["mix"])
                     for row in rows if f"{row['arm']}/budget-{row['budget']:g}" in table),
                 table[RANDOM_INIT]["mix"]["mean"] if RANDOM_INIT in table else None)
                for task, table in results["probing"].items()]
    return [(f"{task}: score against compute", f"test {results['metrics'][task]}, "
             f"{results['verdict_labels'][task]} labels",
             _grouped((row["arm"], row["pretrain_flops"], row["scores"][task])
                      for row in rows if task in row["scores"]),
             results["random_init"][task][str(results["verdict_labels"][task])]["mean"])
            for task in results["tasks"]]


def _grouped(points):
    curves = {}
    for arm, flops, summary in points:
        curves.setdefault(arm, []).append((flops, summary["mean"], summary["std"]))
    return {arm: sorted(curve) for arm, curve in curves.items()}


def plot(results, path):
    """First row: per probing task, each arm's linear probe against pretraining FLOPs (a line through its
    budgets); second row: per fine-tuning task, the learning curves at the full budget. Random
    initialisation dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks, curves = results["tasks"], _compute_curves(results)
    figure, axes = plt.subplots(2, max(len(tasks), len(curves)), figsize=(5.5 * max(len(tasks), len(curves)), 8.4),
                                squeeze=False)
    arms = list(dict.fromkeys(row["arm"] for row in results["rows"]))
    colors = {arm: plt.get_cmap("tab20")(index % 20) for index, arm in enumerate(arms)}  # more arms than 10 hues
    for axis, (title, label, by_arm, floor) in zip(axes[0], curves):
        for arm, points in by_arm.items():
            if points:
                flops, means, deviations = zip(*points)
                axis.errorbar(flops, means, yerr=deviations, marker="o", capsize=3, label=arm, color=colors[arm])
        if floor is not None:
            axis.axhline(floor, color="grey", linestyle="--", linewidth=1,
                         label=f"{results['reference_arm']} without pretraining")
        axis.set(xscale="log", xlabel="pretraining FLOPs", ylabel=label, title=title)
    for curve, task in zip(axes[1], tasks):
        for name, points in [*results["learning_curves"].items(), ("no pretraining", results["random_init"])]:
            counts = list(points[task])
            style = {"color": "grey", "linestyle": "--"} if name == "no pretraining" else {"color": colors[name]}
            curve.errorbar([int(count) for count in counts], [points[task][c]["mean"] for c in counts],
                           yerr=[points[task][c]["std"] for c in counts], marker="o", capsize=3, label=name, **style)
        curve.set(xscale="log", xlabel="labeled training examples", ylabel=f"test {results['metrics'][task]}",
                  title=f"{task}: learning curve at the full budget")
    for row, used in zip(axes, (len(curves), len(tasks))):
        for axis in row[used:]:
            axis.axis("off")
    axes[0][len(curves) - 1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save_figure(figure, path, f"Pretraining compute against what the encoder holds, and labels against the "
                              f"fine-tuned score ({results['scale']} scale, mean ± sd over {results['seeds']} seeds)")


def save_figure(figure, path, title):
    """A study's plot under its title, written atomically, and closed (a study draws in a long process)."""
    import matplotlib.pyplot as plt

    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    with atomic_file(path) as staging:
        figure.savefig(staging, dpi=120, format="png")
    plt.close(figure)
