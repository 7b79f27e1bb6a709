"""Masking-stage throughput: every keras-bertology stage beside keras-hub's MaskedLMMaskGenerator.

Each stage masks the same synthetic batches (WordPiece-like ids, a third of
them continuation pieces; [CLS] A [SEP] B [SEP] then padding) inside a
`tf.data` pipeline (`from_tensors(batch).repeat().map(stage)`), the way
training uses it; the pipeline runs on all cores with one batch in flight, so
the number is the stage's cost per batch. Rounds alternate the stages so slow
drift of the machine hits all of them; the report gives the median rows per
second over rounds and each stage's ratio to BERT's token masking and to
keras-hub's generator measured in the same run.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_masking            # ~3 min on 2 cores
    .venv/bin/python -m benchmarks.bench_masking --smoke    # 1 round, few batches

Results go to `<out>/<name>.json` and `.md` (written atomically).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/bench_masking.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_mlm import DEFAULT_OUT, atomic_write, machine_info  # noqa: E402

VOCAB, CLS, SEP, MASK, PAD = 30522, 101, 102, 103, 0
FIRST_CONTINUATION = 20000  # ids from here on continue a word
SHAPES = {"seq128_batch32": (128, 32), "seq512_batch8": (512, 8)}
STAGES = ("bert_tokens", "bert_whole_word", "albert_ngram", "spanbert_spans", "keras_hub_tokens")


def synthetic_batch(seq_len, batch, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = np.where(rng.random((batch, seq_len)) < 0.33, rng.integers(FIRST_CONTINUATION, VOCAB, (batch, seq_len)),
                   rng.integers(1000, FIRST_CONTINUATION, (batch, seq_len))).astype("int32")
    for row, used in zip(ids, rng.integers(seq_len // 2, seq_len + 1, batch)):
        row[0], row[used // 2], row[used - 1], row[used:] = CLS, SEP, SEP, PAD
    return ids


def build_stage(name, max_predictions):
    """The masking callable of `name`, configured like its family pretrains."""
    import numpy as np

    starts = np.arange(VOCAB) < FIRST_CONTINUATION
    common = dict(vocab_size=VOCAB, mask_id=MASK, pad_id=PAD, special_ids=[CLS, SEP])
    if name in ("bert_tokens", "bert_whole_word"):
        from keras_bertology.data.masking import DynamicMasker, MaskingConfig

        config = MaskingConfig(max_predictions=max_predictions, whole_word=name == "bert_whole_word")
        return DynamicMasker(config, word_start_table=starts, **common)
    if name in ("albert_ngram", "spanbert_spans"):
        from keras_bertology.data.span_masking import SpanMasker, geometric_span_probs, ngram_probs

        spans = name == "spanbert_spans"
        probs = geometric_span_probs() if spans else ngram_probs(3)
        return SpanMasker(probs, word_start_table=starts, max_predictions=max_predictions,
                          per_span_decision=spans, boundaries=spans, **common)
    import keras_hub

    generator = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=VOCAB, mask_selection_rate=0.15, mask_selection_length=max_predictions,
        mask_token_id=MASK, unselectable_token_ids=[CLS, SEP, PAD])
    return lambda features: generator(features["token_ids"])


def measure(stage, batch, warmup, batches):
    """Rows per second of `stage` mapped over a repeating batch, after `warmup` batches."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensors({"token_ids": tf.constant(batch)}).repeat().map(stage).prefetch(1)
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * len(batch) / (time.perf_counter() - started)


def run(rounds, warmup, batches, shapes):
    results = {}
    for shape in shapes:
        seq_len, batch_size = SHAPES[shape]
        batch = synthetic_batch(seq_len, batch_size)
        max_predictions = round(0.15 * seq_len) + 1
        stages = {name: build_stage(name, max_predictions) for name in STAGES}
        measured = {name: [] for name in STAGES}
        for index in range(rounds):
            for name, stage in stages.items():
                measured[name].append(measure(stage, batch, warmup, batches))
            print(f"{shape} round {index + 1}/{rounds}: "
                  + ", ".join(f"{name} {values[-1]:,.0f}" for name, values in measured.items()), flush=True)
        medians = {name: statistics.median(values) for name, values in measured.items()}
        results[shape] = {
            "seq_len": seq_len, "batch_size": batch_size, "max_predictions": max_predictions,
            "rows_per_sec": medians, "rounds": measured,
            "ratio_vs_bert_tokens": {name: value / medians["bert_tokens"] for name, value in medians.items()},
            "ratio_vs_keras_hub": {name: value / medians["keras_hub_tokens"] for name, value in medians.items()},
        }
    return results


def render_markdown(report):
    lines = ["# Masking-stage throughput", "",
             f"{report['machine']['cpu_model']}, {report['machine']['usable_cpus']} usable cores, "
             f"TensorFlow {report['machine']['tensorflow']}, commit {report['machine']['git_commit']}; "
             f"median of {report['settings']['rounds']} rounds of {report['settings']['batches']} batches.", ""]
    for shape, entry in report["shapes"].items():
        lines += [f"## {shape} (max_predictions {entry['max_predictions']})", "",
                  "| stage | rows/s | vs BERT tokens | vs keras-hub |", "|---|---|---|---|"]
        for name in STAGES:
            lines.append(f"| {name} | {entry['rows_per_sec'][name]:,.0f} | "
                         f"{entry['ratio_vs_bert_tokens'][name]:.2f} | {entry['ratio_vs_keras_hub'][name]:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=list(SHAPES))
    parser.add_argument("--smoke", action="store_true", help="1 round of 5 batches at seq 128")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--name")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.batches, args.warmup, args.shapes = 1, 5, 2, ["seq128_batch32"]
    name = args.name or ("masking_throughput_smoke" if args.smoke else "masking_throughput")
    report = {"smoke": args.smoke, "machine": machine_info(),
              "settings": {"rounds": args.rounds, "batches": args.batches, "warmup": args.warmup},
              "shapes": run(args.rounds, args.warmup, args.batches, args.shapes)}
    with atomic_write(args.out / f"{name}.json") as handle:
        json.dump(report, handle, indent=2)
    with atomic_write(args.out / f"{name}.md") as handle:
        handle.write(render_markdown(report))
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
