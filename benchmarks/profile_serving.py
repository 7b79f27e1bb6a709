"""Why the serving benchmark's rows miss: the encoder's kernels one at a time, TensorFlow against PyTorch.

One BERT layer is a few matmuls and the element-wise work around them (layer norm, GELU, the masked
softmax). This times each kernel alone at bert-base's widths for one sequence of L tokens: as a
TensorFlow graph (`tf.function`, what the SavedModel runs), compiled by XLA (`--serving-xla`), and in
PyTorch eager (what transformers runs), each the median of `--calls` calls after warm-up, in one process
with the threads matched to the usable CPUs. It also counts the operations of BERT-Mini's serving graph:
a graph pays a fixed cost per operation, which is what a short input mostly costs.

    .venv/bin/python -m benchmarks.profile_serving                       # L = 12, 128, 512
    .venv/bin/python -m benchmarks.profile_serving --smoke --out /tmp/k  # L = 16, few calls (the test)

Writes `<out>/serving_kernels.json` and `serving_kernels.md` (default benchmarks/results).
"""

import argparse
import collections
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.bench_mlm import describe_processor  # noqa: E402
from benchmarks.bench_serving import DEFAULT_OUT, machine_info, write_report  # noqa: E402

HIDDEN, HEADS, INTERMEDIATE = 768, 12, 3072  # bert-base
KERNELS = ("dense 768->3072", "layer norm", "GELU", "masked softmax", "call of an empty graph")
SYSTEMS = ("TensorFlow graph", "XLA", "PyTorch eager")


def median_ms(function, calls, warmup=5):
    for _ in range(warmup):
        function()
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        function()
        times.append(time.perf_counter() - began)
    return 1000.0 * statistics.median(times)


def tensorflow_kernels(length, jit_compile):
    """{kernel: zero-argument callable} of Keras ops in a tf.function (compiled by XLA when `jit_compile`)."""
    import keras
    import tensorflow as tf

    x = tf.random.normal((1, length, HIDDEN))
    kernel = tf.random.normal((HIDDEN, INTERMEDIATE))
    hidden = tf.random.normal((1, length, INTERMEDIATE))
    scores = tf.random.normal((1, HEADS, length, length))
    keep = tf.ones((1, 1, 1, length), tf.bool)
    norm = keras.layers.LayerNormalization(epsilon=1e-12)
    norm.build(x.shape)
    bodies = {"dense 768->3072": lambda: keras.ops.matmul(x, kernel),
              "layer norm": lambda: norm(x),
              "GELU": lambda: keras.activations.gelu(hidden, approximate=False),
              "masked softmax": lambda: keras.ops.softmax(keras.ops.where(keep, scores, -1e9), axis=-1),
              "call of an empty graph": lambda: x}
    return {name: tf.function(body, jit_compile=jit_compile) for name, body in bodies.items()}


def torch_kernels(length):
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    x, hidden = torch.randn(1, length, HIDDEN), torch.randn(1, length, INTERMEDIATE)
    kernel, scores = torch.randn(INTERMEDIATE, HIDDEN), torch.randn(1, HEADS, length, length)
    norm = torch.nn.LayerNorm(HIDDEN, eps=1e-12)
    keep = torch.ones(1, 1, 1, length, dtype=torch.bool)

    def no_grad(body):
        def call():
            with torch.inference_mode():
                return body()
        return call

    return {"dense 768->3072": no_grad(lambda: torch.nn.functional.linear(x, kernel)),
            "layer norm": no_grad(lambda: norm(x)),
            "GELU": no_grad(lambda: torch.nn.functional.gelu(hidden)),
            "masked softmax": no_grad(lambda: torch.softmax(scores.masked_fill(~keep, -1e9), -1)),
            "call of an empty graph": None}  # eager PyTorch has no graph to enter


def serving_graph_operations():
    """{op type: count} of BERT-Mini's encoder traced for [batch, length] int32 inputs, as served."""
    import tensorflow as tf

    from keras_bertology.models.registry import get_family

    family = get_family("bert")
    backbone = family.backbone_cls(**family.backbone_config("bert-mini", vocab_size=30522))
    specs = [tf.TensorSpec((None, None), tf.int32)] * 3
    traced = tf.function(lambda ids, mask, segments: backbone(
        {"token_ids": ids, "padding_mask": mask, "segment_ids": segments}, training=False), input_signature=specs)
    graph = traced.get_concrete_function().graph
    return dict(collections.Counter(op.type for op in graph.get_operations()).most_common())


def measure(lengths, calls):
    rows = []
    for length in lengths:
        timed = {"TensorFlow graph": tensorflow_kernels(length, False), "XLA": tensorflow_kernels(length, True),
                 "PyTorch eager": torch_kernels(length)}
        for kernel in KERNELS:
            row = {"length": length, "kernel": kernel}
            for system in SYSTEMS:
                function = timed[system][kernel]
                row[system] = None if function is None else median_ms(function, calls)
            row["TensorFlow / PyTorch"] = (row["TensorFlow graph"] / row["PyTorch eager"]
                                          if row["PyTorch eager"] else None)
            rows.append(row)
            print(f"L={length} {kernel}: " + ", ".join(
                f"{system} {row[system]:.3f} ms" for system in SYSTEMS if row[system] is not None), flush=True)
    return rows


def render_markdown(report):
    machine = report["machine"]
    operations = report["bert_mini_graph_operations"]
    constants = operations.get("Const", 0)
    lines = ["# Serving kernels: TensorFlow graph, XLA and PyTorch eager, one at a time", "",
             f"bert-base widths ({HIDDEN} hidden, {HEADS} heads, {INTERMEDIATE} intermediate), one sequence of L "
             f"tokens, median of {report['settings']['calls']} calls after warm-up; threads matched to "
             f"{describe_processor(machine)}; {machine['date']}. "
             "Every TensorFlow and XLA time includes the cost of entering a graph (the last row of each L). "
             "Regenerate: `.venv/bin/python -m benchmarks.profile_serving`.", "",
             "| L | kernel | " + " | ".join(SYSTEMS) + " | TensorFlow / PyTorch |", "|---|---|---|---|---|---|"]
    for row in report["rows"]:
        cells = [f"{row[s]:.3f} ms" if row[s] is not None else "-" for s in SYSTEMS]
        ratio = f"{row['TensorFlow / PyTorch']:.1f}x" if row["TensorFlow / PyTorch"] else "-"
        lines.append(f"| {row['length']} | {row['kernel']} | " + " | ".join(cells) + f" | {ratio} |")
    lines += ["", f"BERT-Mini's serving graph (4 layers) holds {sum(operations.values())} operations, "
              f"{sum(operations.values()) - constants} of them not constants; the most frequent: "
              + ", ".join(f"{name} {count}" for name, count in list(operations.items())[:8]) + "."]
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", nargs="+", type=int, choices=(12, 16, 128, 512), default=[12, 128, 512])
    parser.add_argument("--calls", type=int, choices=range(1, 1001), metavar="1-1000", default=50)
    parser.add_argument("--smoke", action="store_true", help="L = 16 and 3 calls: a functional check")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for serving_kernels.json and .md")
    args = parser.parse_args(argv)
    if args.smoke:
        args.lengths, args.calls = [16], 3
    return args


def main(argv=None):
    args = parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "serving_kernels", "smoke": args.smoke, "machine": machine_info(),
              "settings": {"lengths": args.lengths, "calls": args.calls},
              "rows": measure(args.lengths, args.calls), "bert_mini_graph_operations": serving_graph_operations()}
    write_report(out_dir, {"serving_kernels.json": json.dumps(report, indent=2),
                                   "serving_kernels.md": render_markdown(report)})
    print(render_markdown(report), flush=True)


if __name__ == "__main__":
    main()
