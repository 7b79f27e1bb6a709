"""`bertology probe`: linear probes of one run's encoder at every depth, against its own random control.

What an encoder holds, read without fine-tuning it (Tenney et al. 2019): the probes of `probing.py` on a
task's tagged words or labelled texts, with every seed drawing its training examples, beside the same
architecture and vocabulary with weights drawn by that seed. Writes probes.json, probes.md and probes.png.
"""

import dataclasses
import json
from datetime import datetime
from pathlib import Path

from keras_bertology import flag_ranges as ranges
from keras_bertology.atomic import atomic_file
from keras_bertology.errors import ConfigError
from keras_bertology.output_paths import PROBES, claim_output_folder


@dataclasses.dataclass(frozen=True)
class ProbeOptions:
    """`bertology probe`'s flags (the study's tiny scale reads the same counts)."""

    from_dir: str = ""
    task: str = ""
    seeds: int = 5
    pool: int = 400
    train_examples: int = 150
    test_examples: int = 150
    seq_len: int | None = None
    out: str | None = None

    def validate(self):
        ranges.check_options(self, {"seeds": ranges.PROBE_SEEDS, "pool": ranges.MAX_EXAMPLES,
                                    "train_examples": ranges.MAX_EXAMPLES, "test_examples": ranges.MAX_EXAMPLES,
                                    "seq_len": ranges.SEQ_LEN}, optional=("seq_len",))
        if self.train_examples > self.pool:
            raise ConfigError(f"--train-examples {self.train_examples} is more than the --pool {self.pool} "
                              "each seed draws them from")


def probe_encoder(options, say=print):
    """Probe the encoder of `options.from_dir` and its control on `options.task`; returns probes.json's dict."""
    from keras_bertology import probing
    from keras_bertology.finetune.datasets import load_task
    from keras_bertology.models.registry import get_family
    from keras_bertology.runs import load_run_model

    options.validate()
    task = load_task(options.task)
    if not probing.readable(task):
        raise ConfigError(f"--task {options.task}: a probe reads tagged words or one labelled text per example, "
                          f"not a {task.kind} task" + (" of text pairs" if task.pairs else ""))
    out = Path(options.out or Path("runs") / f"probe-{Path(options.task).name}-{datetime.now():%Y%m%d-%H%M%S}")
    with claim_output_folder(out, "--out", PROBES):
        run = load_run_model(options.from_dir)
        family, seq_len = get_family(run.family), options.seq_len or run.seq_len
        examples, seeds = (options.pool, options.train_examples, options.test_examples), range(options.seeds)
        say(f"[probe] {run.family} encoder from {options.from_dir}: {task.name}, {options.seeds} seeds")
        trained = probing.probe_seeds(run.backbone, family, run.tokenizer, seq_len, task, examples, seeds)
        say(f"[probe] the encoder: mix {sum(result['mix'] for result in trained.values()) / options.seeds:.3f} "
            f"(mean of {options.seeds} seeds); now a control a seed")
        controls = []
        for seed in seeds:
            control = probing.random_control(run.backbone, seed)
            controls.append(probing.probe_seeds(control, family, run.tokenizer, seq_len, task, examples, (seed,))[seed])
            say(f"[probe] control {seed + 1}/{options.seeds} (weights drawn by seed {seed}): "
                f"mix {controls[-1]['mix']:.3f}")
        record, floor = probing.summarise([trained[seed] for seed in seeds]), probing.summarise(controls)
        first = trained[0]
        results = {"run": str(options.from_dir), "family": run.family, "task": task.name, "kind": task.kind,
                   "metric": "macro-F1", "seq_len": seq_len, "seeds": options.seeds,
                   "examples": {"pool": options.pool, "drawn": options.train_examples,
                                "test": options.test_examples, "train_rows": first["train"],
                                "test_rows": first["test"], "cut_off": first["dropped"]},
                   "encoder": record, "control": floor, **probing.against_control(record, floor)}
        write_results(out, results)
    say("\n".join(table(results)))
    say(f"probes written to {out} (probes.json, probes.md, probes.png)")
    return results


def table(results):
    """probes.md's lines: each depth and the mix, the encoder against its control."""
    encoder, control, gate = results["encoder"], results["control"], results["gate"]
    lines = [f"# Linear probes: {results['family']} on {results['task']} ({results['metric']})", "",
             f"Mean ± sd over {results['seeds']} seeds; each seed draws {results['examples']['drawn']} training "
             f"examples of the first {results['examples']['pool']} and draws the control's weights; tested on the "
             f"first {results['examples']['test']} test examples ({results['examples']['test_rows']} rows).", "",
             "| depth | encoder | control (random weights) | gain |", "|---|---|---|---|"]
    rows = [(f"{depth}" + (" (embeddings)" if depth == 0 else ""), mine, theirs)
            for depth, (mine, theirs) in enumerate(zip(encoder["layers"], control["layers"]))]
    for name, mine, theirs in [*rows, ("mix", encoder["mix"], control["mix"])]:
        lines.append(f"| {name} | {mine['mean']:.3f} ± {mine['std']:.3f} | {theirs['mean']:.3f} ± "
                     f"{theirs['std']:.3f} | {mine['mean'] - theirs['mean']:+.3f} |")
    verdict = ("beyond" if gate["pays"] else "not beyond") + " two standard errors"
    weights = " ".join(f"{weight:.2f}" for weight in encoder["mix_weights"])
    return lines + ["", f"The mix gains {gate['difference']:+.3f} ± {gate['standard_error']:.3f} over the control "
                        f"({verdict}); its weights over the depths: {weights}."]


def write_results(out, results):
    """probes.json, probes.md and probes.png, each written atomically."""
    with atomic_file(out / "probes.json") as staging:
        staging.write_text(json.dumps(results, indent=2))
    with atomic_file(out / "probes.md") as staging:
        staging.write_text("\n".join(table(results)) + "\n")
    plot(results, out / "probes.png")


def plot(results, path):
    """Macro-F1 by depth, the encoder against its control, each with its spread over the seeds; the mixes
    as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axis = plt.subplots(figsize=(6.5, 4))
    for name, style in (("encoder", {"color": "tab:blue"}), ("control", {"color": "grey", "linestyle": "--"})):
        layers = results[name]["layers"]
        depths = np.arange(len(layers))
        means, spreads = np.array([d["mean"] for d in layers]), np.array([d["std"] for d in layers])
        axis.plot(depths, means, marker="o", label=f"{name} by depth", **style)
        axis.fill_between(depths, means - spreads, means + spreads, alpha=0.15, color=style["color"])
        axis.axhline(results[name]["mix"]["mean"], alpha=0.6, linewidth=1, label=f"{name} mix", **style)
    axis.set(xlabel="depth (0: embeddings)", ylabel=results["metric"], xticks=np.arange(len(results["encoder"]["layers"])))
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.suptitle(f"Linear probes: {results['family']} on {results['task']} (mean ± sd, {results['seeds']} seeds)",
                    fontsize=10)
    figure.tight_layout()
    with atomic_file(path) as staging:
        figure.savefig(staging, dpi=110, format="png")
    plt.close(figure)
