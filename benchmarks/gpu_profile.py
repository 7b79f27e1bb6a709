"""Where a peer-suite training step spends its device time, kernel by kernel, ours against transformers'.

The peer suite says how fast each system trains (`peer_suite.py`); this says why one is slower. One system
per fresh process (as the suite runs them) builds the same row the suite builds (`peer_keras.build_ours`,
`peer_torch.build_torch`), takes its warm-up steps, then records `--steps` steps with its framework's
profiler: JAX's (`jax.profiler.trace`, read from its Perfetto JSON, no profiler plugin needed) or
PyTorch's (`torch.profiler`). Each kernel's time is summed by name and by kind (matrix products, attention,
normalisation, softmax and reductions, fused element-wise work, copies, the optimizer), per step.

    python -m benchmarks.gpu_profile --system ours --model bert-no-attention-dropout --shape gpu_base512 --out OUT
    python -m benchmarks.gpu_profile --system torch_compile ...        # the same row on transformers
    python -m benchmarks.gpu_profile --compare OUT                     # OUT/gpu_profile.md: every system side by side

On a GPU the kernels are the device's (CUDA streams). On a CPU JAX records no kernels (XLA:CPU runs a step
as one executable), so its rows are the host's events: a smoke run, not a profile. Profiling slows a step
down; take throughput from the peer suite.
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SYSTEMS = ("ours", "torch_eager", "torch_compile")
TOP = 25  # kernels listed per system
# The kind of a kernel, by its name (or by the XLA operation it ran, which JAX records beside it); the first
# that matches. cuBLAS, CUTLASS and nvjet name the matrix products; cuDNN and FlashAttention the attention.
KINDS = (
    ("attention", r"flash|fmha|attention|attn|sdpa|cudnn"),
    ("matmul", r"gemm|matmul|dot|cutlass|cublas|nvjet|xmma|addmm|bmm|linear"),
    ("optimizer", r"adam|multi_tensor|foreach|optimizer"),
    ("normalization", r"layer_?norm|norm"),
    ("softmax/reduce", r"softmax|reduce|sum|mean|max"),
    ("copy", r"copy|memcpy|memset|transpose|concat|slice|gather|scatter|pad|dynamic"),
    ("element-wise", r"fusion|elementwise|vectorized|triton|loop|unrolled|add|mul|gelu|tanh|erf|dropout|where"),
)


def kind_of(*names):
    """The first of KINDS whose pattern matches one of `names` (lower-cased), else "other"."""
    text = " ".join(name.lower() for name in names if name)
    return next((kind for kind, pattern in KINDS if re.search(pattern, text)), "other")


def summarize(events, steps, device):
    """{ms per step by kind, top kernels} of `events`: (name, XLA op or "", microseconds) for each run."""
    by_name, by_kind = collections.defaultdict(lambda: [0.0, 0, ""]), collections.Counter()
    for name, op, microseconds in events:
        entry = by_name[name]
        entry[0] += microseconds
        entry[1] += 1
        entry[2] = entry[2] or kind_of(name, op)
        by_kind[entry[2]] += microseconds
    total = sum(by_kind.values())
    top = sorted(by_name.items(), key=lambda item: -item[1][0])[:TOP]
    return {
        "device": device, "steps": steps, "events": len(events),
        "ms_per_step": total / 1000 / steps,
        "kinds": {kind: {"ms_per_step": time / 1000 / steps, "share": time / total if total else 0.0}
                  for kind, time in by_kind.most_common()},
        "top": [{"name": name, "kind": kind, "ms_per_step": time / 1000 / steps, "calls_per_step": calls / steps}
                for name, (time, calls, kind) in top],
    }


def perfetto_events(trace):
    """(name, XLA op, microseconds) of each kernel of a JAX Perfetto `trace` (its JSON), and whether any ran on
    a device. A device ("/device:..." process) shows its kernels on its streams' lines and again, summed, on
    the lines XLA derives from them ("XLA Ops", "XLA Modules"): only the streams count where they are named.
    Without a device, the host's events, less the Python tracer's frames (each nested in its caller's)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {(event["pid"], event.get("tid")): str(event.get("args", {}).get("name", ""))
             for event in events if event.get("ph") == "M" and event.get("name") in ("process_name", "thread_name")}
    devices = {pid for (pid, tid), name in names.items() if tid is None and name.startswith("/device:")}
    streams = {key for key, name in names.items() if key[0] in devices and name.lower().startswith("stream")}
    timed = [event for event in events if event.get("ph") == "X" and "dur" in event]
    on_device = [event for event in timed if event["pid"] in devices
                 and (not streams or (event["pid"], event.get("tid")) in streams)]
    chosen = on_device or [event for event in timed if not event["name"].startswith("$")]
    return [(event["name"], str(event.get("args", {}).get("hlo_op", "")), float(event["dur"])) for event in chosen], \
        bool(on_device)


def profile_ours(model, shape, steps):
    """Device events of `steps` training steps of our row, after its warm-up, on Keras' JAX backend."""
    import jax
    import keras

    from benchmarks.peer_keras import build_ours

    if keras.config.backend() != "jax":
        raise SystemExit("--system ours profiles Keras' JAX backend: run it with KERAS_BACKEND=jax")
    pretrainer, batches = build_ours(model, shape, "mixed_bfloat16")
    keras.Model.fit(pretrainer, batches, epochs=1, steps_per_epoch=shape.warmup, verbose=0)
    folder = tempfile.mkdtemp(prefix="bertology-jax-profile-")
    with jax.profiler.trace(folder, create_perfetto_trace=True):
        history = keras.Model.fit(pretrainer, batches, epochs=1, steps_per_epoch=steps, verbose=0)
        float(history.history["loss"][-1])  # the last step done before the trace stops
    traces = sorted(glob.glob(os.path.join(folder, "**", "*perfetto_trace.json.gz"), recursive=True))
    if not traces:
        raise SystemExit(f"jax.profiler wrote no Perfetto trace under {folder}")
    with gzip.open(traces[-1], "rt") as handle:
        events, on_device = perfetto_events(json.load(handle))
    return events, "device" if on_device else "host"


def profile_torch(model, shape, steps, compiled):
    """Device events (host operators without a GPU) of `steps` steps of transformers' row, after its
    warm-up."""
    import torch

    from benchmarks.peer_torch import build_torch

    cuda = torch.cuda.is_available()
    step, _ = build_torch(model, shape, "mixed_bfloat16", compiled, "cuda" if cuda else "cpu")
    for index in range(shape.warmup):
        step(index)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as recorded:
        for index in range(steps):
            step(shape.warmup + index)
    events = []
    for event in recorded.events():
        if str(event.device_type).endswith("CUDA"):  # a kernel: its own span on the device
            if cuda:
                events.append((event.name, "", float(event.time_range.elapsed_us())))
        elif not cuda:  # an operator's own time on the host, its children's left to them
            events.append((event.name, "", float(event.self_cpu_time_total)))
    return events, "device" if cuda else "host"


def run_system(args):
    from benchmarks.peer_models import MODELS, SHAPES

    model, shape = MODELS[args.model], SHAPES[args.shape]
    if args.system == "ours":
        events, where = profile_ours(model, shape, args.steps)
    else:
        events, where = profile_torch(model, shape, args.steps, args.system == "torch_compile")
    report = {"system": args.system, "model": args.model, "shape": args.shape,
              **summarize(events, args.steps, where), "machine": _machine()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu_profile_{args.system}.json"
    path.write_text(json.dumps(report, indent=2))
    print(f"{args.system}: {report['ms_per_step']:.2f} ms of {where} time a step -> {path}")


def _machine():
    try:
        import jax

        devices = [str(device.device_kind) for device in jax.devices()]
    except ImportError:
        devices = []
    return {"devices": devices, "python": sys.version.split()[0]}


def compare(out):
    """OUT/gpu_profile.md: each system's time per step by kind, side by side, then each one's top kernels."""
    out = Path(out)
    reports = [json.loads((out / f"gpu_profile_{system}.json").read_text())
               for system in SYSTEMS if (out / f"gpu_profile_{system}.json").is_file()]
    if not reports:
        raise SystemExit(f"no gpu_profile_<system>.json in {out}: run the systems first")
    kinds = sorted({kind for report in reports for kind in report["kinds"]},
                   key=lambda kind: -max(report["kinds"].get(kind, {}).get("ms_per_step", 0) for report in reports))
    first = reports[0]
    lines = [f"# Device time per training step: {first['model']} at {first['shape']} (bf16)", "",
             f"Devices: {', '.join(first['machine']['devices']) or 'none recorded'}; "
             f"{first['steps']} profiled steps per system, after each one's warm-up.", "",
             "| kind | " + " | ".join(report["system"] for report in reports) + " |",
             "|---|" + "---:|" * len(reports)]
    for kind in kinds:
        cells = [f"{report['kinds'].get(kind, {}).get('ms_per_step', 0.0):.2f}" for report in reports]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append("| **total (ms)** | " + " | ".join(f"**{report['ms_per_step']:.2f}**" for report in reports) + " |")
    for report in reports:
        lines += ["", f"## {report['system']}: top kernels ({report['device']} time)", "",
                  "| kernel | kind | ms/step | calls/step |", "|---|---|---:|---:|"]
        lines += [f"| `{item['name'][:90]}` | {item['kind']} | {item['ms_per_step']:.3f} | {item['calls_per_step']:g} |"
                  for item in report["top"]]
    (out / "gpu_profile.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'gpu_profile.md'}")


def parse_args(argv=None):
    from benchmarks.peer_models import MODELS, SHAPES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=SYSTEMS)
    parser.add_argument("--model", default="bert-no-attention-dropout", choices=sorted(MODELS))
    parser.add_argument("--shape", default="gpu_base512", choices=sorted(SHAPES))
    parser.add_argument("--steps", type=int, default=5, help="profiled steps, after the shape's warm-up (1 to 100)")
    parser.add_argument("--out", required=True, help="folder for gpu_profile_<system>.json and gpu_profile.md")
    parser.add_argument("--compare", action="store_true", help="write OUT/gpu_profile.md from the systems' files")
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= 100:
        parser.error(f"--steps must be from 1 to 100 (got {args.steps})")
    if not args.compare and args.system is None:
        parser.error("give --system (or --compare)")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.compare:
        compare(args.out)
    else:
        run_system(args)


if __name__ == "__main__":
    main()
