"""Long sequences: memory and time of one training step against sequence length, per attention.

One masked-LM training step (batch 1, 15% of the tokens predicted, AdamW) of the same encoder at 512 ... 8,192 tokens
with full attention (BERT's), BigBird's block-sparse attention (ours, and
transformers' BigBirdForMaskedLM eager and compiled as the peer) and
Linformer's low-rank attention (k 256, layerwise; transformers has none), and
ModernBERT's encoder with its alternating attention (every third layer global,
the others a window of 128 computed in blocks, `layers.sliding_window`) against
the same encoder with every layer global, each in a fresh process. Memory is what training adds to the process: its peak
resident set minus the resident set once the model and the batch exist
(activations, gradients, the optimizer's slots and the step's temporaries).
Ours runs TensorFlow's graph without XLA here, so that a compiler's working
memory is not counted as the step's (XLA on the CPU also keeps its buffers
between steps); torch.compile's row includes its compiler's. The report fits the growth
exponent of memory and time over the lengths where the sparse pattern
applies (log-log slope; full attention's memory ~2, linear ~1) and says at
which length a system ran out of the memory limit (`--memory-limit-gib`,
applied per process), as a device of that size would.

With `--device gpu` (`bash benchmarks/gpu_peers.sh long OUT` on a lent GPU
machine, see ../shared/GPU.md) ours runs on Keras' JAX backend with XLA and
transformers' BigBird on CUDA, float32 with TF32 matmuls on both sides (JAX's
default on such GPUs, switched on for PyTorch), from 1,024 to 65,536 tokens;
memory is the device's: its allocator's peak minus what it held once the
model and the batch existed, and `--memory-limit-gib` caps each process's
share of the device (default: all of it).

    .venv/bin/python -m benchmarks.bench_long_sequences                       # 512 .. 8192, all systems
    .venv/bin/python -m benchmarks.bench_long_sequences --lengths 512 1024 --systems ours_full ours_bigbird

Writes `<out>/<name>.json`, `.md` and `.png` (default benchmarks/results/long_sequences).
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_mlm import REPO_ROOT, _current_rss_mib, atomic_write, machine_info

SYSTEMS = ("ours_full", "ours_full_remat", "ours_bigbird", "ours_linformer", "torch_bigbird_eager",
           "torch_bigbird_compile", "ours_modernbert", "ours_modernbert_global")
LABELS = {"ours_full": "keras-bertology, full attention", "ours_bigbird": "keras-bertology, BigBird",
          "ours_full_remat": "keras-bertology, full attention, --remat", "ours_linformer": "keras-bertology, Linformer",
          "torch_bigbird_eager": "HF BigBird, torch eager", "torch_bigbird_compile": "HF BigBird, torch.compile",
          "ours_modernbert": "keras-bertology, ModernBERT (global every 3rd layer, others a window of 128)",
          "ours_modernbert_global": "keras-bertology, ModernBERT with every layer global"}
MODERNBERT_WINDOW = 128
LENGTHS = {"cpu": (512, 1024, 2048, 4096, 8192), "gpu": (1024, 2048, 4096, 8192, 16384, 32768, 65536)}
# The encoder of every system: BERT-Mini's width at two layers, BigBird's block 64 and 3 random blocks
# (block-sparse above (5 + 2 x 3) x 64 = 704 tokens).
ENCODER = dict(num_layers=2, hidden_size=256, num_heads=4, intermediate_size=1024, vocab_size=8000)
BLOCK_SIZE, RANDOM_BLOCKS = 64, 3
PROJECTED_LENGTH = 256  # Linformer's k (the paper's), one projection for the encoder
WARMUP, STEPS = 2, 3
WORKER_TIMEOUT_S = 1800


def _batch(length, seed=1234):
    rng = np.random.default_rng(seed)
    predictions = max(1, round(length * 0.15))
    ids = rng.integers(5, ENCODER["vocab_size"], (1, length)).astype("int32")
    positions = np.sort(rng.choice(length, predictions, replace=False))[None].astype("int32")
    targets = rng.integers(5, ENCODER["vocab_size"], positions.shape).astype("int32")
    return ids, positions, targets


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _host_memory():
    """(MiB in use now, peak MiB so far) of this process's resident set."""
    return _current_rss_mib, _peak_mib


def _device_memory(system):
    """(MiB in use now, peak MiB so far) of the GPU's allocator: JAX's for ours, PyTorch's for the peer."""
    if system.startswith("ours"):
        import jax

        device = jax.local_devices()[0]
        return (lambda: device.memory_stats()["bytes_in_use"] / 2**20,
                lambda: device.memory_stats()["peak_bytes_in_use"] / 2**20)
    import torch

    return lambda: torch.cuda.memory_allocated() / 2**20, lambda: torch.cuda.max_memory_allocated() / 2**20


def _modernbert(system, num_layers, length):
    """ModernBERT's pretrainer at the encoder's size: its window and pattern, or every layer global."""
    from keras_bertology.models.modernbert.backbone import ModernBertBackbone
    from keras_bertology.models.modernbert.pretrainer import ModernBertPretrainer

    backbone = ModernBertBackbone(**dict(ENCODER, num_layers=num_layers), max_positions=length,
                                  local_window=MODERNBERT_WINDOW, global_every=1 if system.endswith("_global") else 3)
    return ModernBertPretrainer(backbone)


def _ours(system, length, device, num_layers):
    import keras

    from keras_bertology.layers.remat import set_remat
    from keras_bertology.models.bert.backbone import BertBackbone
    from keras_bertology.models.bert.pretrainer import BertPretrainer

    if system.startswith("ours_modernbert"):
        return _trained_step(_modernbert(system, num_layers, length), length, device)
    attention = {
        "ours_full": {},
        "ours_bigbird": dict(attention_type="block_sparse",
                             attention_options=dict(block_size=BLOCK_SIZE, random_blocks=RANDOM_BLOCKS)),
        "ours_linformer": dict(attention_type="low_rank", attention_options=dict(
            projected_length=PROJECTED_LENGTH, max_length=length, sharing="layerwise")),
    }[system.removesuffix("_remat")]
    backbone = BertBackbone(**dict(ENCODER, num_layers=num_layers), max_positions=length, num_segments=0,
                            use_pooler=False, dropout=0.0, attention_dropout=0.0, **attention)
    model = BertPretrainer(backbone, next_sentence_prediction=False)
    set_remat(model, system.endswith("_remat"))
    return _trained_step(model, length, device)


def _trained_step(model, length, device):
    """A function running one masked-LM training step of `model` on the shared batch of `length` tokens."""
    import keras

    model.compile(optimizer=keras.optimizers.AdamW(1e-4), jit_compile=device == "gpu")
    ids, positions, targets = _batch(length)
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids), "mask_positions": positions}
    y = {"mlm": targets}
    weights = {"mlm": np.ones(targets.shape, "float32")}
    return lambda: float(model.train_on_batch(x, y, sample_weight=weights, return_dict=True)["loss"])


def _torch(system, length, device, num_layers):
    import torch
    import transformers

    torch.manual_seed(0)
    target = "cuda" if device == "gpu" else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    config = transformers.BigBirdConfig(
        vocab_size=ENCODER["vocab_size"], hidden_size=ENCODER["hidden_size"],
        num_hidden_layers=num_layers, num_attention_heads=ENCODER["num_heads"],
        intermediate_size=ENCODER["intermediate_size"], max_position_embeddings=length, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attention_type="block_sparse", block_size=BLOCK_SIZE,
        num_random_blocks=RANDOM_BLOCKS)
    model = transformers.BigBirdForMaskedLM(config).to(target).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids, positions, targets = _batch(length)
    labels = np.full(ids.shape, -100, np.int64)
    np.put_along_axis(labels, positions, targets, axis=1)
    inputs = dict(input_ids=torch.tensor(ids, dtype=torch.long, device=target),
                  labels=torch.tensor(labels, device=target))

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return torch.compile(step) if system == "torch_bigbird_compile" else step


def measure(system, length, device, num_layers):
    build = _ours if system.startswith("ours") else _torch
    step = build(system, length, device, num_layers)
    in_use, peak = _host_memory() if device == "cpu" else _device_memory(system)
    before = in_use()
    for _ in range(WARMUP):
        step()
    started = time.perf_counter()
    for _ in range(STEPS):
        loss = step()  # reads the loss back: waits for the device
    seconds = (time.perf_counter() - started) / STEPS
    return {"ms_per_step": 1000 * seconds, "step_memory_mib": peak() - before, "peak_mib": peak(), "loss": loss}


def _device_share(limit_gib):
    """The fraction of the GPU's memory `limit_gib` is (nvidia-smi's total); None without a limit."""
    if limit_gib is None:
        return None
    total_mib = float(subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, check=True).stdout.split()[0])
    if limit_gib * 1024 > total_mib:
        raise SystemExit(f"--memory-limit-gib {limit_gib} is more than the GPU's {total_mib / 1024:.1f} GiB")
    return limit_gib * 1024 / total_mib


def _worker_env(system, device, share):
    """CPU: TensorFlow's graph, no GPU. GPU: ours on JAX (no TensorFlow there), allocating as it goes (so
    its peak is the step's), within `share` of the device."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    if device == "cpu":
        return {**env, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""}
    env.update(KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    if share is not None:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{share:.4f}"
    return env


def _run(system, length, out_dir, limit_gib, device="cpu", share=None, num_layers=ENCODER["num_layers"]):
    """One measurement in a fresh interpreter: on a CPU its address space capped at `limit_gib`, on a GPU its
    allocations at `share` of the device."""
    with tempfile.TemporaryDirectory(prefix=".worker_", dir=out_dir) as tmp:
        result = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "benchmarks.bench_long_sequences", "--worker", system, str(length),
                   str(result), "--device", device, "--num-layers", str(num_layers)]
        command += ["--memory-limit-gib", str(limit_gib)] if device == "cpu" else []
        command += ["--device-share", str(share)] if share is not None else []
        proc = subprocess.run(command, cwd=REPO_ROOT, env=_worker_env(system, device, share), capture_output=True,
                              text=True, timeout=WORKER_TIMEOUT_S)
        if proc.returncode == 0 and result.exists():
            return json.loads(result.read_text())
        tail = (proc.stdout + proc.stderr)[-3000:]
        out_of_memory = any(sign in tail for sign in ("MemoryError", "ResourceExhausted", "RESOURCE_EXHAUSTED", "OOM",
                                                      "bad_alloc", "Cannot allocate memory", "out of memory"))
        return {"error": "out of memory" if out_of_memory or proc.returncode == -9 else tail.splitlines()[-1:]}


def growth_exponent(lengths, values):
    """k of value = a + b x length^k: the least-squares log-log slope of the increments between
    consecutive lengths (each increment grows as length^k, whatever the constant a: the runtime's own
    memory and time); None under two increments."""
    pairs = zip(zip(lengths, values), zip(lengths[1:], values[1:]))
    steps = [(math.log(n), math.log(v - u)) for (_, u), (n, v) in pairs if v > u]
    if len(steps) < 2:
        return None
    x, y = np.array(steps).T
    return float(np.polyfit(x, y, 1)[0])


def summarize(results, lengths):
    sparse_from = min([n for n in lengths if n > (5 + 2 * RANDOM_BLOCKS) * BLOCK_SIZE] or [max(lengths)])
    summary = {}
    for system, rows in results.items():
        fitted = [(n, rows[str(n)]) for n in lengths if n >= sparse_from and "error" not in rows[str(n)]]
        failed = [n for n in lengths if "error" in rows[str(n)]]
        summary[system] = {
            "memory_exponent": growth_exponent([n for n, _ in fitted], [r["step_memory_mib"] for _, r in fitted]),
            "time_exponent": growth_exponent([n for n, _ in fitted], [r["ms_per_step"] for _, r in fitted]),
            "first_failure": failed[0] if failed else None,
            "fitted_lengths": [n for n, _ in fitted]}
    return summary


def remat_reach(results, lengths):
    """For each length full attention ran at: the longest length `--remat` ran at within that memory, and the
    ratio of the two (how much longer a sequence recomputation fits in the same memory)."""
    plain, remat = results.get("ours_full"), results.get("ours_full_remat")
    if not plain or not remat:
        return []
    reach = []
    for n in lengths:
        if "error" in plain[str(n)]:
            continue
        budget = plain[str(n)]["step_memory_mib"]
        fits = [m for m in lengths if "error" not in remat[str(m)] and remat[str(m)]["step_memory_mib"] <= budget]
        if fits:
            reach.append({"length": n, "memory_mib": budget, "remat_length": max(fits), "ratio": max(fits) / n})
    return reach


def render_markdown(report):
    lengths, results = report["lengths"], report["results"]
    processor = report["machine"].get("gpu") or report["machine"]["cpu_model"]
    limit = (f"memory limit {report['memory_limit_gib']} GiB per process" if report["memory_limit_gib"] is not None
             else "the whole device's memory per process")
    lines = [f"# Long sequences: one training step against length ({processor})", "",
             f"Encoder: {report['encoder']}; BigBird block {BLOCK_SIZE}, {RANDOM_BLOCKS} random blocks; Linformer k "
             f"{PROJECTED_LENGTH}, layerwise; batch 1; {limit}.", "",
             "| system | " + " | ".join(f"{n} tokens" for n in lengths) + " | memory exponent | time exponent |",
             "|---|" + "---|" * (len(lengths) + 2)]
    for system, rows in results.items():
        cells = []
        for n in lengths:
            row = rows[str(n)]
            cells.append(row["error"] if isinstance(row.get("error"), str) else "failed" if "error" in row
                         else f"{row['step_memory_mib']:.0f} MiB, {row['ms_per_step']:.0f} ms")
        fit = report["summary"][system]
        exponents = [f"{fit[key]:.2f}" if fit[key] is not None else "-" for key in ("memory_exponent", "time_exponent")]
        lines.append(f"| {LABELS[system]} | " + " | ".join(cells) + " | " + " | ".join(exponents) + " |")
    lines += ["", "Exponents: k of a + b x length^k, fitted as the log-log slope of the increments between "
              "consecutive lengths (so the runtime's constant share does not flatten it), over the lengths where "
              f"BigBird is block-sparse (> {(5 + 2 * RANDOM_BLOCKS) * BLOCK_SIZE} tokens) that ran."]
    reach = remat_reach(results, lengths)
    if reach:
        lines += ["", "In the memory full attention's step takes at a length, `--remat` trains (among the lengths "
                  "measured):", ""]
        lines += [f"- {row['length']} tokens, {row['memory_mib']:.0f} MiB: "
                  f"{'at least ' if row['remat_length'] == max(lengths) else ''}{row['remat_length']} tokens with "
                  f"--remat ({row['ratio']:.2f}x as long)" for row in reach]
    return "\n".join(lines) + "\n"


def plot(report, path):
    try:
        import matplotlib
    except ImportError:  # a GPU machine may lack it: the table and the JSON say it all
        print(f"matplotlib is not installed: no {path.name}")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for system, rows in report["results"].items():
        done = [n for n in report["lengths"] if "error" not in rows[str(n)]]
        for axis, key in zip(axes, ("step_memory_mib", "ms_per_step")):
            axis.plot(done, [rows[str(n)][key] for n in done], marker="o", label=LABELS[system])
    where = "device" if report.get("device") == "gpu" else "process"
    for axis, title in zip(axes, (f"memory the step adds to the {where} (MiB)", "time per step (ms)")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("sequence length (tokens)")
        axis.set_title(title)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def driver_main(args):
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    share = _device_share(args.memory_limit_gib) if args.device == "gpu" else None
    results = {}
    for system in args.systems:
        results[system] = {}
        for length in args.lengths:
            row = _run(system, length, out_dir, args.memory_limit_gib, args.device, share, args.num_layers)
            results[system][str(length)] = row
            shown = row.get("error") or f"{row['step_memory_mib']:.0f} MiB, {row['ms_per_step']:.0f} ms/step"
            print(f"{LABELS[system]:36s} {length:6d} tokens: {shown}", flush=True)
    machine = machine_info()
    if args.device == "gpu":
        machine["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                        capture_output=True, text=True).stdout.strip() or "GPU"
    report = {"machine": machine, "device": args.device, "encoder": dict(ENCODER, num_layers=args.num_layers),
              "lengths": list(args.lengths),
              "memory_limit_gib": args.memory_limit_gib, "results": results,
              "summary": summarize(results, args.lengths)}
    for suffix, text in ((".json", json.dumps(report, indent=2)), (".md", render_markdown(report))):
        with atomic_write(out_dir / f"{args.name}{suffix}") as handle:
            handle.write(text)
    plot(report, out_dir / f"{args.name}.png")
    print(render_markdown(report))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=3, metavar=("SYSTEM", "LENGTH", "RESULT"), help=argparse.SUPPRESS)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--lengths", nargs="+", type=int, help="default: 512 .. 8192 on a CPU, 1024 .. 65536 on a GPU")
    parser.add_argument("--memory-limit-gib", type=float,
                        help="each measurement's memory, as a device's: its address space on a CPU (default 16), its "
                             "share of the GPU's memory there (default: all of it)")
    parser.add_argument("--device-share", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--num-layers", type=int, default=ENCODER["num_layers"],
                        help="the encoder's depth (default 2); --remat saves the activations of all but one layer")
    parser.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results"))
    parser.add_argument("--name", default="long_sequences")
    args = parser.parse_args(argv)
    if args.memory_limit_gib is None and args.device == "cpu":
        args.memory_limit_gib = 16.0
    if args.memory_limit_gib is not None and not 0.5 <= args.memory_limit_gib <= 4096:
        parser.error("--memory-limit-gib must be from 0.5 to 4096")
    args.lengths = args.lengths or list(LENGTHS[args.device])
    if not 1 <= args.num_layers <= 48:
        parser.error("--num-layers must be from 1 to 48")
    if any(not 128 <= n <= 65536 for n in args.lengths):
        parser.error("--lengths must be from 128 to 65536 tokens")
    if args.worker:
        system, length, result = args.worker
        if args.device == "cpu":
            limit = int(args.memory_limit_gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        elif args.device_share is not None and not system.startswith("ours"):
            import torch

            torch.cuda.set_per_process_memory_fraction(args.device_share)
        with atomic_write(Path(result)) as handle:
            json.dump(measure(system, int(length), args.device, args.num_layers), handle)
        return 0
    driver_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
