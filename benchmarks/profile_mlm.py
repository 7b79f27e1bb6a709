"""Where does an MLM train step spend its time? Op-level breakdown from the TF profiler.

Builds one system exactly as `bench_mlm.py` does, trains a few warm-up steps,
then profiles `--steps` steps of `model.fit` with `tf.profiler` and sums the
recorded op executions (inter-op threads) by phase (forward+loss, backward,
optimizer, metrics), by op type and by op name. The trace (`*.xplane.pb`) is
parsed with the protobuf classes that ship with TensorFlow, so no profiler
plugin is needed. Op times are summed over threads, so they can exceed the
wall time; profiling also slows the step down. Compare systems by their
breakdowns, and take throughput from `bench_mlm.py`.

    .venv/bin/python -m benchmarks.profile_mlm --system ours --config small_float32
    .venv/bin/python -m benchmarks.profile_mlm --system keras_hub --config small_float32
    .venv/bin/python -m benchmarks.profile_mlm --peer roberta --shape small   # a peer-suite model of ours
    .venv/bin/python -m benchmarks.profile_mlm --peer bert --precision mixed_bfloat16
    .venv/bin/python -m benchmarks.profile_mlm --peer roberta --peer-system keras_hub --precision mixed_bfloat16
"""

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import bench_mlm  # noqa: E402
from benchmarks.peer_models import MODELS, SHAPES  # noqa: E402
from keras_bertology.flag_ranges import Range  # noqa: E402

STEPS = Range(int, 1, 1000)  # --warmup-steps, --steps and --top


def phase_of(name):
    if "adam_w" in name or "/adam/" in name:
        return "optimizer"
    if "gradient_tape" in name or "/gradients/" in name:
        return "backward"
    if "compile_metrics" in name or "accuracy" in name or "mean_metric" in name:
        return "metrics"
    return "forward+loss"


def op_breakdown(logdir):
    """Sum op durations (ms) in an xplane trace by phase, op type and op name."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(Path(logdir).rglob("*.xplane.pb"))
    if not paths:
        raise FileNotFoundError(f"no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(paths[-1].read_bytes())
    by_phase, by_type, by_name = collections.Counter(), collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                metadata = plane.event_metadata[event.metadata_id]
                if ":" not in metadata.name or not metadata.display_name:
                    continue  # executor bookkeeping, not an op
                name, op_type = metadata.name.rsplit(":", 1)
                ms = event.duration_ps / 1e9
                by_phase[phase_of(name)] += ms
                by_type[op_type] += ms
                # Fold per-layer copies together: encoder_block_3 -> encoder_block.
                by_name[re.sub(r"_\d+", "", name)] += ms
    return by_phase, by_type, by_name


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=bench_mlm.SYSTEMS, default="ours")
    parser.add_argument("--config", choices=sorted(bench_mlm.CONFIGS), default="small_float32")
    parser.add_argument("--warmup-steps", type=STEPS.parse, default=3)
    parser.add_argument("--steps", type=STEPS.parse, default=5)
    parser.add_argument("--jit-compile", action="store_true")
    parser.add_argument("--peer", choices=sorted(MODELS),
                        help="profile ours on this peer-suite model (benchmarks/peer_models.py) instead")
    parser.add_argument("--peer-system", choices=("ours", "keras_hub"), default="ours",
                        help="whose --peer model: ours, or keras-hub's task of the same shape")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small", help="the peer-suite shape of --peer")
    parser.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32",
                        help="the dtype policy of --peer")
    parser.add_argument("--top", type=STEPS.parse, default=20, help="rows of each table")
    parser.add_argument("--logdir", help="keep the trace here (default: a temporary folder)")
    args = parser.parse_args()
    if args.peer_system != "ours" and (not args.peer or args.jit_compile):
        parser.error("--peer-system keras_hub needs --peer and profiles keras-hub's task as it compiles it "
                     "(no --jit-compile)")

    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    if args.peer:
        from benchmarks.peer_keras import build_keras_hub, build_ours

        if args.peer_system == "keras_hub":
            model, dataset = build_keras_hub(MODELS[args.peer], SHAPES[args.shape], args.precision)
        else:
            model, dataset = build_ours(MODELS[args.peer], SHAPES[args.shape], args.precision,
                                        xla="on" if args.jit_compile else "off")
        args.system, args.config = args.peer_system, f"{args.peer} {args.shape} {args.precision}"
    else:
        config = bench_mlm.CONFIGS[args.config]
        model = bench_mlm.build_model(config, args.system, jit_compile=args.jit_compile)
        dataset = bench_mlm.make_dataset(config, args.system)
    model.fit(dataset, epochs=1, steps_per_epoch=args.warmup_steps, verbose=0)

    with tempfile.TemporaryDirectory(prefix="profile_mlm_") as tmp:
        logdir = args.logdir or tmp
        tf.profiler.experimental.start(logdir)
        started = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0)
        wall_ms = 1000.0 * (time.perf_counter() - started) / args.steps
        tf.profiler.experimental.stop()
        by_phase, by_type, by_name = op_breakdown(logdir)

    steps, total = args.steps, sum(by_phase.values())
    print(f"{args.system} {args.config}: {wall_ms:.0f} ms/step wall while profiling, "
          f"{total / steps:.0f} ms/step of op time (summed over threads)")
    print("by phase:")
    for key, ms in by_phase.most_common():
        print(f"  {key:16s} {ms / steps:8.1f} ms/step {100 * ms / total:5.1f}%")
    print("by op type:")
    for key, ms in by_type.most_common(args.top):
        print(f"  {key:40s} {ms / steps:8.1f} ms/step {100 * ms / total:5.1f}%")
    print("by op name (layer indices folded):")
    for key, ms in by_name.most_common(args.top):
        print(f"  {ms / steps:8.1f}  {key.removeprefix('StatefulPartitionedCall/')[-120:]}")


if __name__ == "__main__":
    main()
