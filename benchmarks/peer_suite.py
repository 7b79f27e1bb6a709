"""The peer suite: training throughput of each pretraining model against keras-hub and transformers.

For every model (BERT MLM+NSP, ERNIE, RoBERTa, BigBird, ALBERT MLM+SOP, ELECTRA, SpanBERT
MLM+SBO, XLNet), shape and precision it measures ours, keras-hub's task where
keras-hub has one, and
Hugging Face transformers on PyTorch eager and `torch.compile`d, all on the
same arrays (see peer_models.py). Each measurement is a fresh process; rounds
alternate the systems so slow drift of the machine hits all of them, and the
report gives medians, ratios ours/peer, peak memory and the model-FLOPs
utilisation against a matmul roofline measured in the same run.

    .venv/bin/python -m benchmarks.peer_suite                  # small and base shapes, float32 and bf16
    .venv/bin/python -m benchmarks.peer_suite --smoke          # tiny shape, one round (CI)
    .venv/bin/python -m benchmarks.peer_suite --models bert --shapes small --precisions float32

Writes `<out>/<name>.json`, `.md` and `.png` (default benchmarks/results/peers*).
"""

import argparse
import dataclasses
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_mlm import REPO_ROOT, atomic_write, describe_processor, machine_info, wait_for_quiet
from benchmarks.peer_models import MODELS, SHAPES, train_flops

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
SYSTEMS = ("ours", "keras_hub", "torch_eager", "torch_compile")
# Configurations of ours measured beside the default one when asked (--systems), never a peer.
VARIANTS = ("ours_no_xla", "ours_xla", "ours_written_out", "ours_loss_chunks")
# The variants' --xla: ours itself trains with --xla auto.
VARIANT_XLA = {"ours": "auto", "ours_no_xla": "off", "ours_xla": "on", "ours_written_out": "auto",
               "ours_loss_chunks": "auto"}
LOSS_CHUNK_SIZE = 512  # ours_loss_chunks: the positions whose logits exist at once
LABELS = {"ours": "keras-bertology", "ours_no_xla": "keras-bertology without XLA",
          "ours_xla": "keras-bertology with XLA",
          "ours_written_out": "keras-bertology, attention written out",
          "ours_loss_chunks": f"keras-bertology, loss in chunks of {LOSS_CHUNK_SIZE}", "keras_hub": "keras-hub",
          "torch_eager": "HF torch eager", "torch_compile": "HF torch.compile"}
GOALS = {"keras_hub": 1.2, "torch_eager": 1.0, "torch_compile": 1.0}
HUB_WORK_SHOWN = 1.01  # ours' step doing more than 1% more matmul work than keras-hub's gets a per-FLOP ratio
PRECISIONS = ("float32", "mixed_bfloat16")
WORKER_TIMEOUT_S = 3600


# --------------------------------------------------------------------------- one measurement (worker process)

def measure(model_name, shape_name, precision, system, steps, device):
    from benchmarks.peer_timing import StepClock

    model, shape = MODELS[model_name], SHAPES[shape_name]
    steps = steps or shape.steps
    if system in ("keras_hub", *VARIANT_XLA):
        from benchmarks.peer_keras import build_keras_hub, build_ours, train_keras

        if system == "keras_hub":
            keras_model, dataset = build_keras_hub(model, shape, precision)
        else:
            if system == "ours_written_out":  # the probabilities written out as dropout needs them, none applied
                from keras_bertology.layers import MultiHeadSelfAttention

                MultiHeadSelfAttention._probability_dropout = lambda layer, training: (lambda probs: probs)
            if system == "ours_loss_chunks":  # the family's option (GPT's --loss-chunk-size)
                model = dataclasses.replace(model, options=(*model.options, ("loss_chunk_size", LOSS_CHUNK_SIZE)))
            keras_model, dataset = build_ours(model, shape, precision, xla=VARIANT_XLA[system])
        clock = StepClock(shape.warmup)
        details = train_keras(keras_model, dataset, clock, steps)
    else:
        from benchmarks.peer_torch import build_torch, train_torch

        torch_device = "cuda" if device == "gpu" else "cpu"
        step, params = build_torch(model, shape, precision, system == "torch_compile", torch_device)
        clock = StepClock(shape.warmup)
        details = {"num_params": params, **train_torch(step, clock, steps)}
    return {**clock.result(steps, shape.batch_size, shape.seq_len), **details}


def roofline(precision, backend, device):
    """FLOP/s of a large matmul at `precision`'s compute dtype on the device, and the device's name."""
    import keras
    import numpy as np

    dtype = "bfloat16" if precision == "mixed_bfloat16" else "float32"
    size = 8192 if device == "gpu" else 2048
    a = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(size, size)), dtype=dtype)
    matmul = keras.ops.matmul
    if backend == "jax":
        import jax

        matmul = jax.jit(matmul)

    def wait(c):  # one element read back waits for the device (as float32: TF hands NumPy no bf16 scalar)
        keras.ops.convert_to_numpy(keras.ops.cast(c[0, 0], "float32"))

    wait(matmul(a, a))
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(4):
            c = matmul(a, a)
        wait(c)
        best = min(best, (time.perf_counter() - started) / 4)
    name = None
    if device == "gpu":
        import jax

        name = jax.devices()[0].device_kind
    return {"flops_per_sec": 2 * size ** 3 / best, "device_name": name}


def worker_main(args):
    if args.system == "roofline":
        result = roofline(args.precision, args.backend, args.device)
    else:
        result = measure(args.model, args.shape, args.precision, args.system, args.steps, args.device)
    with atomic_write(Path(args.result_file)) as handle:
        json.dump(result, handle)


# --------------------------------------------------------------------------- the driver

def run_worker(args, out_dir, **what):
    """One measurement in a fresh interpreter (what: model, shape, precision, system)."""
    with tempfile.TemporaryDirectory(prefix=".worker_", dir=out_dir) as tmp:
        result_file = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "benchmarks.peer_suite", "--worker", "--result-file", str(result_file),
                   f"--backend={args.backend}", f"--device={args.device}",
                   *[f"--{key}={value}" for key, value in what.items()]]
        if args.steps:
            command.append(f"--steps={args.steps}")
        started = time.perf_counter()
        proc = subprocess.run(command, env=_worker_env(args), cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=WORKER_TIMEOUT_S)
        if proc.returncode != 0 or not result_file.exists():
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            raise RuntimeError(f"{what} failed with exit code {proc.returncode}:\n{tail}")
        return {**json.loads(result_file.read_text()), "process_s": time.perf_counter() - started}


def _worker_env(args):
    env = {**os.environ, "KERAS_BACKEND": args.backend, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def systems_of(model_name, wanted):
    return [s for s in wanted if s != "keras_hub" or MODELS[model_name].hub_task]


def measure_entry(args, out_dir, model_name, shape_name, precision, rooflines):
    """Every system of one (model, shape, precision), `args.rounds` alternating rounds."""
    shape = SHAPES[shape_name]
    steps = args.steps or shape.steps
    systems = systems_of(model_name, args.systems)
    rounds, failed = {system: [] for system in systems}, {}
    for index in range(args.rounds):
        for system in systems:
            try:
                result = run_worker(args, out_dir, model=model_name, shape=shape_name, precision=precision,
                                    system=system)
            except RuntimeError as error:  # a variant out of memory: recorded, the peers still measured
                if system == "ours" or args.smoke:
                    raise
                failed[system] = str(error).splitlines()[-1]
                print(f"  {LABELS[system]}: failed: {failed[system]}", flush=True)
                continue
            if result["others_cpu_busy"] is not None and result["others_cpu_busy"] > args.max_others_busy \
                    and not args.smoke:
                print(f"  {LABELS[system]}: other processes used {result['others_cpu_busy']:.0%} of the CPU; "
                      "waiting for a quiet machine and measuring again", flush=True)
                wait_for_quiet(args.max_others_busy, 600)
                result = run_worker(args, out_dir, model=model_name, shape=shape_name, precision=precision,
                                    system=system)
            rounds[system].append(result)
            print(f"  round {index + 1}/{args.rounds} {LABELS[system]:>17}: {result['samples_per_sec']:8.2f} "
                  f"samples/s, peak {result['peak_mib']:6.0f} MiB (process {result['process_s']:.0f} s)", flush=True)
    flops = train_flops(MODELS[model_name], shape)
    summary = {}
    for system, results in ((system, results) for system, results in rounds.items() if results):
        rate = statistics.median(r["samples_per_sec"] for r in results)
        summary[system] = {
            "samples_per_sec": rate,
            "tokens_per_sec": rate * shape.seq_len,
            "peak_mib": statistics.median(r["peak_mib"] for r in results),
            # On a GPU the device's peak (what limits the batch); on a CPU the process's resident peak.
            "memory_mib": statistics.median(r.get("device_peak_mib", r["peak_mib"]) for r in results),
            **training_memory(results),
            "num_params": results[0]["num_params"],
            "mfu": flops * rate / shape.batch_size / rooflines[precision],
            "rounds": results,
        }
    ours = summary["ours"]["samples_per_sec"]
    return {
        "model": model_name, "objectives": MODELS[model_name].objectives, "shape": shape_name,
        "shape_text": shape.describe(), "precision": precision, "steps": steps, "warmup": shape.warmup,
        "train_flops_per_step": flops, "systems": summary,
        "ratios": {peer: ours / summary[peer]["samples_per_sec"] for peer in summary if peer in GOALS},
        # How much faster the default configuration of ours is than each measured variant of it.
        "variants": {name: ours / summary[name]["samples_per_sec"] for name in summary if name in VARIANTS},
        "failed": failed,
    }


def training_memory(results):
    """{"training_mib": the median of each round's peak resident memory beyond what the process held once its
    model and arrays were built}, on a CPU (a GPU row's memory is the device allocator's already)."""
    beyond = [r["peak_mib"] - r["resident_before_mib"] for r in results
              if r.get("resident_before_mib") is not None and "device_peak_mib" not in r]
    return {"training_mib": statistics.median(beyond)} if beyond else {}


def _versions():
    versions = {}
    for package in ("torch", "transformers", "keras-hub"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def render_markdown(report):
    machine = report["machine"]
    variants = [v for v in VARIANTS if any(v in entry["systems"] for entry in report["entries"])]
    columns = SYSTEMS[:1] + tuple(variants) + SYSTEMS[1:]
    training = any("training_mib" in systems for e in report["entries"] for systems in e["systems"].values())
    lines = [
        f"# Peer suite: {report['name']}",
        "",
        f"Training samples/s (median of {report['rounds']} alternating rounds, each in a fresh process), "
        "same architecture, shape and arrays for every system; AdamW(1e-4); masked-LM logits at the masked "
        "positions only (a causal LM's at every position). Ratio = ours / peer (> 1: ours is faster); goals: >= 1.2x keras-hub, >= 1.0x "
        "transformers eager and compiled.",
        "",
        f"Keras backend {report['backend']} on {machine['gpu'] or 'the CPU'}; "
        f"machine: {describe_processor(machine)}; TensorFlow "
        f"{machine['tensorflow']}, Keras {machine['keras']}, keras-hub {machine['keras_hub']}, torch "
        f"{machine['torch']}, transformers {machine['transformers']}; {machine['date']}. Matmul roofline: "
        + ", ".join(f"{p} {v / 1e9:.0f} GFLOP/s" for p, v in report["rooflines"].items()) + ".",
        "",
        "| model | shape | precision | " + " | ".join(f"{LABELS[s]} samples/s" for s in columns)
        + " | ours/hub | ours/eager | ours/compile | ours MFU | memory MiB (ours / eager) |"
        + (" training's own MiB (ours / eager) |" if training else "")
        + "".join(f" ours / {LABELS[v]} |" for v in variants),
        "|---|---|---|" + "---|" * (len(columns) + 5 + bool(training) + len(variants)),
    ]
    for entry in report["entries"]:
        systems, ratios = entry["systems"], entry["ratios"]
        rates = [f"{systems[s]['samples_per_sec']:.1f}" if s in systems else "-" for s in columns]
        ratio_text = [_ratio_text(entry, p) if p in ratios else "-" for p in SYSTEMS[1:]]
        memory, own = (" / ".join(f"{systems[s][key]:.0f}" if key in systems.get(s, {}) else "-"
                                  for s in ("ours", "torch_eager")) for key in ("memory_mib", "training_mib"))
        lines.append(f"| {entry['model']} ({entry['objectives']}) | {entry['shape_text']} | {entry['precision']} | "
                     + " | ".join(rates) + " | " + " | ".join(ratio_text)
                     + f" | {systems['ours']['mfu']:.1%} | {memory} |" + (f" {own} |" if training else "")
                     + "".join(f" {entry['variants'][v]:.2f} |" if v in entry.get("variants", {}) else " - |"
                               for v in variants))
    extra_work = {key: work for key, work in (((e["model"], e["shape"]), _hub_extra_work(e))
                                              for e in report["entries"] if "keras_hub" in e["ratios"])
                  if work > HUB_WORK_SHOWN}
    lines += ["", *_footnotes({entry["model"] for entry in report["entries"]}),
              *(["ours/hub per FLOP: the ratio times ours' matmul FLOPs a step over keras-hub's, whose task has "
                 "no second head (" + ", ".join(f"{m} {s}: x{w:.2f}" for (m, s), w in sorted(extra_work.items()))
                 + ")."] if extra_work else []),
              *(f"{LABELS[system]} failed at {entry['model']} {entry['shape']}: {reason}"
                for entry in report["entries"] for system, reason in entry.get("failed", {}).items()), ""]
    return "\n".join(lines)


def _hub_extra_work(entry):
    """Ours' matmul FLOPs a step over keras-hub's on the entry's row (its masked-LM task trains MLM alone)."""
    model = MODELS[entry["model"]]
    if not (model.hub_task or "").endswith("MaskedLM"):
        return 1.0
    return entry["train_flops_per_step"] / train_flops(model, SHAPES[entry["shape"]], masked_lm_only=True)


def _ratio_text(entry, peer):
    """The ratio ours/peer; against keras-hub where ours does more work a step, also the ratio per FLOP."""
    ratio, extra = entry["ratios"][peer], _hub_extra_work(entry) if peer == "keras_hub" else 1.0
    return f"{ratio:.2f}" + (f" ({ratio * extra:.2f} per FLOP)" if extra > HUB_WORK_SHOWN else "")


def _footnotes(models):
    """What a reader must know to read the ratios of `models` (names of MODELS)."""
    no_task = sorted(m for m in models if not MODELS[m].hub_task)
    less_work = sorted(m for m in models if (MODELS[m].hub_task or "").endswith("MaskedLM")
                       and MODELS[m].objectives != "MLM")
    notes = []
    if no_task:
        notes.append(f"keras-hub has no pretraining task for {', '.join(no_task)}: its column is empty there.")
    if less_work:
        notes.append(f"keras-hub's masked-LM task trains MLM alone where ours adds a second objective "
                     f"({', '.join(f'{m}: {MODELS[m].objectives}' for m in less_work)}): it does less work "
                     "per step than ours there.")
    return notes + [MODELS[m].note for m in sorted(models) if MODELS[m].note]


def plot(report, path):
    """Ratios ours/peer per measured row, with the goal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = report["entries"]
    peers = [p for p in SYSTEMS[1:] if any(p in e["ratios"] for e in entries)]
    figure, axis = plt.subplots(figsize=(max(6, 1.2 * len(entries) + 2), 4.6))
    width = 0.8 / max(1, len(peers))
    for offset, peer in enumerate(peers):
        xs = [i + offset * width for i, e in enumerate(entries) if peer in e["ratios"]]
        ys = [e["ratios"][peer] for e in entries if peer in e["ratios"]]
        axis.bar(xs, ys, width, label=f"ours / {LABELS[peer]} (goal {GOALS[peer]}x)")
    axis.axhline(1.0, color="black", linewidth=0.8)
    axis.axhline(1.2, color="grey", linewidth=0.8, linestyle="--")
    axis.set_xticks([i + width * (len(peers) - 1) / 2 for i in range(len(entries))])
    axis.set_xticklabels([f"{e['model']}\n{e['shape']} {e['precision'].replace('mixed_', '')}" for e in entries],
                         fontsize=8)
    axis.set_ylabel("training throughput ratio")
    axis.set_title(f"keras-bertology vs peers ({report['machine']['cpu_model']})", fontsize=9)
    if peers:
        axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(peers))  # below the bars
    figure.tight_layout()
    staging = path.with_name(f".{path.name}.tmp")
    figure.savefig(staging, dpi=120, format="png")
    staging.replace(path)
    plt.close(figure)


def driver_main(args):
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = args.name or ("peers_smoke" if args.smoke else "peers")
    print("measuring the matmul roofline", flush=True)
    measured = {p: run_worker(args, out_dir, system="roofline", precision=p) for p in args.precisions}
    rooflines = {p: m["flops_per_sec"] for p, m in measured.items()}
    report = {"benchmark": "peers", "name": name, "rounds": args.rounds, "rooflines": rooflines,
              "backend": args.backend, "device": args.device,
              "machine": {**machine_info(), **_versions(), "gpu": next(iter(measured.values()))["device_name"]},
              "entries": []}
    for model_name in args.models:
        for shape_name in args.shapes:
            for precision in args.precisions:
                print(f"[{model_name} {shape_name} {precision}] {SHAPES[shape_name].describe()}", flush=True)
                report["entries"].append(measure_entry(args, out_dir, model_name, shape_name, precision, rooflines))
                with atomic_write(out_dir / f"{name}.json") as handle:  # after every entry: nothing lost
                    json.dump(report, handle, indent=2)
                with atomic_write(out_dir / f"{name}.md") as handle:
                    handle.write(render_markdown(report))
    plot(report, out_dir / f"{name}.png")
    print(render_markdown(report), flush=True)
    return report


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["small", "base"])
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS + VARIANTS, default=list(SYSTEMS),
                        help="the systems to measure; ours is always measured (ours_no_xla, ours_xla: ours "
                             "with XLA off, on; ours_written_out: ours with every attention's probabilities "
                             "written out instead of keras.ops.dot_product_attention; ours_loss_chunks: ours with "
                             f"the loss over the vocabulary in chunks of {LOSS_CHUNK_SIZE} positions, GPT only)")
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow",
                        help="Keras backend of ours and keras-hub (the GPU machine has JAX, not TensorFlow)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, help="timed steps (default: the shape's)")
    parser.add_argument("--smoke", action="store_true", help="tiny shape, float32, one round: a functional check")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--name", help="output file stem (default peers, peers_smoke with --smoke)")
    parser.add_argument("--render", metavar="REPORT_JSON",
                        help="write the .md and .png of a report again from its JSON, measuring nothing")
    parser.add_argument("--max-others-busy", type=float, default=0.10,
                        help="measure again when other processes used more than this share of the CPU")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.systems = ["ours", *dict.fromkeys(s for s in args.systems if s != "ours")]
    if args.smoke:
        args.shapes, args.precisions, args.rounds = ["tiny"], ["float32"], 1
    if args.rounds < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--rounds and --steps must be at least 1")
    return args


def render_main(report_path):
    """The report's .md and .png rewritten beside its JSON, as the last measurement wrote them."""
    path = Path(report_path)
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"--render: cannot read a report from {path}: {error}") from None
    if report.get("benchmark") != "peers":
        raise SystemExit(f"--render: {path} is not a peer-suite report")
    with atomic_write(path.with_suffix(".md")) as handle:
        handle.write(render_markdown(report))
    plot(report, path.with_suffix(".png"))


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        render_main(args.render)
    elif args.worker:
        worker_main(args)
    else:
        driver_main(args)


if __name__ == "__main__":
    main()
