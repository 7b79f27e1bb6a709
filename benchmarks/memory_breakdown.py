"""Where a CPU row's peak memory goes, ours against transformers eager: the process before training, the
tensors training holds, and the rest of what training adds.

The peer suite gives each system's peak resident memory and what training adds to it. This splits ours'
further: TensorFlow's CPU allocator (oneDNN's pooled one, its default on x86) counts the tensors
(activations, gradients, optimizer slots, temporaries), so what training adds beyond its tensors' peak is
the runtime's (the pool's free chunks, kernels and their caches, the executor's state). Each measurement is
a fresh process, ours and torch eager alternating, as in the peer suite.

    .venv/bin/python -m benchmarks.memory_breakdown                       # albert and bert, base, ~10 min
    .venv/bin/python -m benchmarks.memory_breakdown --models bert --precisions float32 --ours ours ours_no_xla

Results go to `<out>/<name>.json` and `<out>/<name>.md` (written atomically).
"""

import argparse
import importlib.metadata
import json
import statistics
import sys
from pathlib import Path

from benchmarks.bench_mlm import DEFAULT_OUT, atomic_write, describe_processor, machine_info
from benchmarks.peer_models import MODELS, SHAPES
from benchmarks.peer_suite import PRECISIONS, run_worker, training_memory

OURS = ("ours", "ours_no_xla", "ours_xla")  # ours as `--xla auto` compiles it, with XLA off, on
MEMORY_GOAL = 1.2  # issue 80: a base row's peak at most 1.2x torch eager's


def measure_rows(args, out_dir, model_name, precision):
    """One row per variant of ours in `args.ours`, against torch eager measured in the same rounds: the median
    over `args.rounds` alternating rounds of each system's peak, its resident memory before training, and
    ours' tensors' peak."""
    systems = (*args.ours, "torch_eager")
    rounds = {system: [] for system in systems}
    for index in range(args.rounds):
        for system in systems:
            result = run_worker(args, out_dir, model=model_name, shape=args.shape, precision=precision,
                                system=system)
            rounds[system].append(result)
            print(f"  round {index + 1}/{args.rounds} {system:>11}: peak {result['peak_mib']:6.0f} MiB, before "
                  f"training {result['resident_before_mib']:6.0f} MiB", flush=True)
    summary = {system: summarize(results) for system, results in rounds.items()}
    return [{"model": model_name, "precision": precision, "shape": args.shape, "ours": variant,
             "jit_compile": rounds[variant][0]["jit_compile"],
             "systems": {"ours": summary[variant], "torch_eager": summary["torch_eager"]}}
            for variant in args.ours]


def summarize(results):
    """A system's rounds as one: the median of each number, and training's own memory as the median of each
    round's peak beyond its memory before training (the peer suite's `training_mib`)."""
    keys = ("peak_mib", "resident_before_mib", "tensors_peak_mib")
    return {**{key: statistics.median(r[key] for r in results) for key in keys if all(key in r for r in results)},
            **training_memory(results)}


def split(row):
    """The row's numbers as the table shows them (MiB and ratios)."""
    ours, eager = row["systems"]["ours"], row["systems"]["torch_eager"]
    own = {"ours": ours["training_mib"], "eager": eager["training_mib"]}
    runtime_extra = ours["resident_before_mib"] - eager["resident_before_mib"]
    tensors = ours.get("tensors_peak_mib")
    return {
        "ratio": ours["peak_mib"] / eager["peak_mib"],
        "before_extra": runtime_extra,
        "own": own,
        "tensors": tensors,
        "beyond_tensors": None if tensors is None else own["ours"] - tensors,
        "ratio_without_runtime_extra": (ours["peak_mib"] - runtime_extra) / eager["peak_mib"],
    }


def render_markdown(report):
    machine = report["machine"]
    lines = [
        f"# Memory breakdown: {report['name']}",
        "",
        f"Peak resident memory of a training run (median of {report['rounds']} alternating rounds, each in a "
        "fresh process; the peer suite's arrays, AdamW(1e-4), Keras backend tensorflow) split into the process "
        "before training (runtime, the same weights and arrays in both systems) and what training adds; ours' "
        "addition split again into its tensors at their peak (counted by TensorFlow's allocator) and the "
        f"rest. Goal: ours' peak at most {MEMORY_GOAL}x torch eager's.",
        "",
        f"Machine: {describe_processor(machine)}; TensorFlow {machine['tensorflow']}, Keras {machine['keras']}, "
        f"torch {machine['torch']}, transformers {machine['transformers']}; {machine['date']}.",
        "",
        "| model | shape | precision | ours' step | peak MiB (ours / eager) | ours / eager | before training (ours / eager) "
        "| training's own (ours / eager) | ours' tensors at their peak | ours' own beyond its tensors "
        "| ours / eager, ours' extra before training taken off |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        ours, eager, parts = row["systems"]["ours"], row["systems"]["torch_eager"], split(row)
        tensors = "-" if parts["tensors"] is None else f"{parts['tensors']:.0f}"
        beyond = "-" if parts["beyond_tensors"] is None else f"{parts['beyond_tensors']:.0f}"
        lines.append(
            f"| {row['model']} | {SHAPES[row['shape']].describe()} | {row['precision']} "
            f"| {'XLA' if row['jit_compile'] else 'no XLA'} "
            f"| {ours['peak_mib']:.0f} / {eager['peak_mib']:.0f} | {parts['ratio']:.2f} "
            f"| {ours['resident_before_mib']:.0f} / {eager['resident_before_mib']:.0f} "
            f"(+{parts['before_extra']:.0f}) | {parts['own']['ours']:.0f} / {parts['own']['eager']:.0f} "
            f"| {tensors} | {beyond} | {parts['ratio_without_runtime_extra']:.2f} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["albert", "bert"])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="base")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--ours", nargs="+", choices=OURS, default=["ours"],
                        help="ours as `--xla auto` compiles it (ours), with XLA off or on: one row each")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds per row, 1 to 10")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--name", default="memory_breakdown")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 10:
        parser.error("--rounds must be 1 to 10")
    # What run_worker passes on to each worker: the CPU, TensorFlow, the shape's own timed steps.
    args.backend, args.device, args.steps = "tensorflow", "cpu", None
    return args


def main(argv=None):
    args = parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "memory_breakdown", "name": args.name, "rounds": args.rounds,
              "machine": {**machine_info(), **{package: importlib.metadata.version(package)
                                               for package in ("torch", "transformers")}},
              "rows": []}
    for model_name in args.models:
        for precision in args.precisions:
            print(f"[{model_name} {args.shape} {precision}]", flush=True)
            report["rows"].extend(measure_rows(args, out_dir, model_name, precision))
            with atomic_write(out_dir / f"{args.name}.json") as handle:  # after every row: nothing lost
                json.dump(report, handle, indent=2)
            with atomic_write(out_dir / f"{args.name}.md") as handle:
                handle.write(render_markdown(report))
    print(render_markdown(report), flush=True)


if __name__ == "__main__":
    sys.exit(main())
