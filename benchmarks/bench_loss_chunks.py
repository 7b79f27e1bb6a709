"""What GPT's loss in chunks (`--loss-chunk-size`) saves: XLA's working memory of one training step's gradients.

For each shape and chunk size it builds the peer suite's GPT pretrainer on Keras' JAX backend, takes one
training step so that every variable exists, and compiles the gradient of the loss with respect to the
trainable weights (`Trainer.compute_loss_and_updates` under `jax.grad`, the work of `fit`'s step without the
optimizer). XLA's memory analysis of that program gives its temporary buffers: the activations kept for the
backward pass and the backward pass's own, the [positions, vocabulary] logits among them when the loss
takes them all at once. The figure is the compiler's plan, the same on every run of the same versions, and
on a GPU it is what the device must hold; the peer suite (`--systems ours ours_loss_chunks`) measures the
time a step takes.

    .venv/bin/python -m benchmarks.bench_loss_chunks                       # small and base, bf16, chunks 0/512/128
    .venv/bin/python -m benchmarks.bench_loss_chunks --shapes small --chunks 0 256

Writes `<out>/<name>.json` and `.md` (default benchmarks/results/loss_chunks).
"""

import argparse
import dataclasses
import os
from pathlib import Path

os.environ["KERAS_BACKEND"] = "jax"  # the compiler's memory plan is JAX's (XLA); before keras is imported

from benchmarks.bench_mlm import REPO_ROOT, describe_processor, machine_info, write_and_print_report  # noqa: E402
from benchmarks.peer_models import MODELS, SHAPES  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
MIB = 2 ** 20


def step_memory(shape_name, precision, chunk_size):
    """{temp_mib, argument_mib, positions, vocabulary} of the compiled gradient of one step's loss."""
    import jax
    import keras

    from benchmarks.peer_keras import build_ours

    model = dataclasses.replace(MODELS["gpt"], options=(("loss_chunk_size", chunk_size),))
    pretrainer, batches = build_ours(model, SHAPES[shape_name], precision)
    x, y, weights = next(iter(batches))
    pretrainer.train_on_batch(x, y, weights)  # every variable (the optimizer's, the metrics') now exists
    trainable = [v.value for v in pretrainer.trainable_variables]
    frozen = [v.value for v in pretrainer.non_trainable_variables]
    metrics = [v.value for v in pretrainer.metrics_variables]
    optimizer = [v.value for v in pretrainer.optimizer.variables]  # read, never changed, by a loss-scaling one

    def loss(trainable):
        value, _ = pretrainer.compute_loss_and_updates(trainable, frozen, metrics, x, y, weights, training=True,
                                                       optimizer_variables=optimizer)
        return value

    analysis = jax.jit(jax.grad(loss)).lower(trainable).compile().memory_analysis()
    shape = SHAPES[shape_name]
    return {"temp_mib": analysis.temp_size_in_bytes / MIB, "argument_mib": analysis.argument_size_in_bytes / MIB,
            "positions": shape.batch_size * shape.seq_len, "vocabulary": pretrainer.backbone.vocab_size,
            "keras_backend": keras.config.backend()}


def render_markdown(report):
    lines = [f"# GPT's loss in chunks: {report['name']}", "",
             "XLA's temporary memory of one training step's gradients (the loss of GPT's causal LM with respect "
             "to every trainable weight; the optimizer's update not included), by chunk size (0: the logits of "
             "every position at once). The logits column is what float32 logits of every position would hold.",
             "", f"Keras backend jax on {describe_processor(report['machine'])}; JAX {report['machine']['jax']}, "
                 f"Keras {report['machine']['keras']}; {report['machine']['date']}.", "",
             "| shape | precision | positions x vocabulary | float32 logits MiB | chunk | step temporaries MiB | "
             "saved MiB |", "|---|---|---|---|---|---|---|"]
    for entry in report["entries"]:
        plain = next(row["temp_mib"] for row in entry["rows"] if row["chunk_size"] == 0)
        for row in entry["rows"]:
            logits = row["positions"] * row["vocabulary"] * 4 / MIB
            lines.append(f"| {entry['shape_text']} | {entry['precision']} | {row['positions']:,} x "
                         f"{row['vocabulary']:,} | {logits:.0f} | {row['chunk_size'] or 'all'} | "
                         f"{row['temp_mib']:.0f} | {plain - row['temp_mib']:.0f} |")
    return "\n".join(lines + [""])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["small", "base"])
    parser.add_argument("--precisions", nargs="+", choices=("float32", "mixed_bfloat16"), default=["mixed_bfloat16"])
    parser.add_argument("--chunks", nargs="+", type=_chunk_size, default=[0, 512, 128],
                        help="chunk sizes, 0 (every position at once) always included")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--name", default="loss_chunks")
    args = parser.parse_args(argv)
    import jax

    chunks = sorted(set(args.chunks) | {0})
    entries = []
    for shape_name in args.shapes:
        for precision in args.precisions:
            rows = []
            for chunk_size in chunks:
                row = {"chunk_size": chunk_size, **step_memory(shape_name, precision, chunk_size)}
                print(f"[{shape_name} {precision}] chunk {chunk_size or 'all'}: {row['temp_mib']:.0f} MiB of "
                      "temporaries", flush=True)
                rows.append(row)
            entries.append({"shape": shape_name, "shape_text": SHAPES[shape_name].describe(), "precision": precision,
                            "rows": rows})
    report = {"benchmark": "loss_chunks", "name": args.name, "machine": {**machine_info(), "jax": jax.__version__},
              "entries": entries}
    write_and_print_report(args.out, args.name, report, render_markdown(report))


def _chunk_size(text):
    value = int(text)
    if not 0 <= value <= 1 << 20:
        raise argparse.ArgumentTypeError(f"a chunk size is a whole number from 0 to {1 << 20}, got {text}")
    return value


if __name__ == "__main__":
    main()
