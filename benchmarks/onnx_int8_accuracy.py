"""What `bertology export --format onnx --quantize int8` costs in accuracy, and what it buys in speed: a
fine-tuned model's test scores through ONNX Runtime with float and with int8 weights, on the same encoded
test examples, and the time of a forward pass of each.

    .venv/bin/python -m benchmarks.onnx_int8_accuracy                      # BERT-Tiny pretrained here
    .venv/bin/python -m benchmarks.onnx_int8_accuracy --from runs/bert-tiny-shakespeare --tasks bbc-news
    .venv/bin/python -m benchmarks.onnx_int8_accuracy --from /tmp/minilm-run --learning-rate 5e-5 --seq-len 64 \
        --epochs 2 --train-examples 2000      # a converted all-MiniLM-L6-v2 (benchmarks/README.md)

One factor changes between the two rows of a task: the weights' precision (the same fine-tuned model, the same
ONNX graph otherwise, the same test examples, encoded once). Without --from, a BERT-Tiny is pretrained on the
bundled corpus first (`--steps`). Each task is fine-tuned (`bertology finetune`, 3 epochs at 1e-3 by default,
on `--train-examples` drawn by the seed where it has more), exported (`export_task_onnx`, quantize="int8") and
scored on its test split; times are the median of `--rounds` calls of each model in turn (batch 1 and 32, one
thread, the test examples' first rows). Writes benchmarks/results/onnx_int8_accuracy.json and .md, the
processor recorded.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_mlm import REPO_ROOT, atomic_write, machine_info

RESULTS = REPO_ROOT / "benchmarks" / "results"
BATCHES = (1, 32)


class OnnxTaskModel:
    """An ONNX Runtime session that answers `predict` as the Keras task model does (what the task kinds' scoring
    calls): logits, or a span model's {"start", "end"}, over batches of the encoded inputs."""

    def __init__(self, path, threads=None):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = options.inter_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [item.name for item in self.session.get_inputs()]
        self.outputs = [item.name for item in self.session.get_outputs()]

    def run(self, inputs):
        return self.session.run(None, {name: np.asarray(inputs[name], np.int32) for name in self.inputs})

    def predict(self, inputs, batch_size, verbose=0):
        rows = len(inputs[self.inputs[0]])
        parts = [self.run({name: inputs[name][start:start + batch_size] for name in self.inputs})
                 for start in range(0, rows, batch_size)]
        joined = [np.concatenate([part[index] for part in parts]) for index in range(len(self.outputs))]
        return joined[0] if self.outputs == ["logits"] else dict(zip(self.outputs, joined))


def _pretrained(args, work):
    from keras_bertology.pretraining.options import PretrainOptions
    from keras_bertology.pretraining.pretrain import pretrain

    run = work / "bert-tiny"
    pretrain(PretrainOptions(model="bert", preset="bert-tiny", steps=args.steps, seq_len=64, learning_rate=2e-3,
                             out=str(run), no_export=True, verbose=0))
    return run


def _median_seconds(model, inputs, rounds):
    model.run(inputs)  # warm-up
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        model.run(inputs)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_task(task_name, run_dir, work, args):
    """{"task", "kind", "metric", "float32", "int8", "difference", "ms"} for one task."""
    from keras_bertology.finetune.onnx_export import export_task_onnx
    from keras_bertology.finetune.datasets import load_task
    from keras_bertology.finetune.options import FinetuneOptions
    from keras_bertology.finetune.run import finetune
    from keras_bertology.finetune.tasks import TASK_KINDS
    from keras_bertology.models.registry import get_family
    from keras_bertology.runs import load_run_model

    label = Path(task_name).name  # a built-in task's name, or a data folder's
    tuned, exported = work / f"ft-{label}", work / f"onnx-{label}"
    task = load_task(task_name)  # as fine-tuning reads it
    drawn = args.train_examples if args.train_examples and len(task.splits["train"]) > args.train_examples else None
    results = finetune(FinetuneOptions(task=task_name, from_dir=str(run_dir), out=str(tuned), no_export=True,
                                       epochs=args.epochs, learning_rate=args.learning_rate, seq_len=args.seq_len,
                                       train_examples=drawn, seed=args.seed, verbose=0))
    description = export_task_onnx(tuned, exported, quantize="int8")
    run = load_run_model(run_dir)
    kind = TASK_KINDS[task.kind]
    examples = task.splits["test"]
    models = {"float32": OnnxTaskModel(exported / description["model"], threads=1),
              "int8": OnnxTaskModel(exported / description["quantized"]["model"], threads=1)}
    encoded = kind.encode(task, examples, get_family(run.family), run.tokenizer, results["recipe"]["seq_len"],
                          models["float32"].inputs)
    scores = {name: kind.score(task, examples, kind.predict(model, encoded, task, examples, args.batch_size))
              for name, model in models.items()}
    metric = results["primary_metric"]
    milliseconds = {}
    for batch in BATCHES:
        inputs = {name: values[:batch] for name, values in encoded["inputs"].items()}
        for name, model in models.items():  # in turn, each round of the one then the other
            milliseconds.setdefault(name, {})[batch] = 1000 * _median_seconds(model, inputs, args.rounds)
    return {"task": label, "kind": task.kind, "train_examples": drawn or len(task.splits["train"]),
            "test_examples": len(examples), "metric": metric,
            "keras_test": results["test"][metric], "float32": scores["float32"][metric],
            "int8": scores["int8"][metric], "difference": scores["int8"][metric] - scores["float32"][metric],
            "ms": milliseconds, "seq_len": results["recipe"]["seq_len"],
            "quantized_max_difference": description["quantized"]["max_difference"]}


def _table(report):
    lines = [f"# ONNX int8 (dynamic quantization): accuracy and speed ({report['encoder']})", "",
             f"Processor: {report['machine'].get('cpu_model')}; one ONNX Runtime thread; "
             f"onnxruntime {report['machine'].get('onnxruntime')}. Command: `{report['command']}`.", "",
             "| task | metric | Keras | ONNX float32 | ONNX int8 | int8 - float32 | ms batch 1 (float / int8) "
             "| ms batch 32 (float / int8) |", "|---|---|---|---|---|---|---|---|"]
    for row in report["tasks"]:
        ms = row["ms"]
        lines.append(f"| {row['task']} ({row['train_examples']} / {row['test_examples']} train / test examples) | "
                     f"{row['metric']} | "
                     f"{row['keras_test']:.4f} | {row['float32']:.4f} | {row['int8']:.4f} | "
                     f"{row['difference']:+.4f} | {ms['float32'][1]:.2f} / {ms['int8'][1]:.2f} | "
                     f"{ms['float32'][32]:.1f} / {ms['int8'][32]:.1f} |")
    return "\n".join(lines) + "\n"


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="from_dir", help="a run folder to fine-tune (default: BERT-Tiny pretrained here)")
    parser.add_argument("--name", help="what the encoder of --from is, for the report (default: the folder)")
    parser.add_argument("--steps", type=int, default=300, help="the pretraining steps without --from")
    parser.add_argument("--tasks", nargs="+", default=["bbc-news", "bbc-names"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=1e-3,
                        help="the fine-tuning peak rate (the study's for tiny encoders; 5e-5 for base-sized ones)")
    parser.add_argument("--seq-len", type=int, help="the fine-tuning length (default: the run's)")
    parser.add_argument("--train-examples", type=int,
                        help="fine-tune on this many training examples drawn by --seed where a task has more")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default=str(RESULTS / "onnx_int8_accuracy"))
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        run_dir = Path(args.from_dir) if args.from_dir else _pretrained(args, work)
        rows = [measure_task(name, run_dir, work, args) for name in args.tasks]
    encoder = args.name or args.from_dir or f"BERT-Tiny pretrained {args.steps} steps on the bundled corpus"
    import onnxruntime

    report = {"encoder": encoder, "machine": {**machine_info(), "onnxruntime": onnxruntime.__version__}, "tasks": rows,
              "command": " ".join(["python -m benchmarks.onnx_int8_accuracy",
                                  *(sys.argv[1:] if argv is None else argv)])}
    out = Path(args.out)
    with atomic_write(out.with_suffix(".json")) as handle:
        json.dump(report, handle, indent=2)
    with atomic_write(out.with_suffix(".md")) as handle:
        handle.write(_table(report))
    print(_table(report))


if __name__ == "__main__":
    main()
