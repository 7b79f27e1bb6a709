"""XLNet pretraining step time against BERT MLM of the same shape, in one alternating run.

Both models have the same layers, width, heads, feed-forward, vocabulary,
sequence length and batch; BERT predicts 15% of the tokens (MLM head with its
transform), XLNet runs both streams with the query stream on num_predict =
L / 6 targets (partial prediction), a memory of L / 2 states per layer and
bi_data. Inputs are one fixed random batch (XLNet's from the real permutation stage,
drawn once), so the timed steps are the models' own: forward, loss, backward
and the AdamW update, each a `train_on_batch` whose loss is read back. After
warm-up steps (tracing), rounds alternate the two models; a round's time is
the median of its steps; the report gives the median ms/step over rounds and
the ratio XLNet / BERT from the same rounds, with the machine recorded.

    .venv/bin/python -m benchmarks.bench_xlnet            # ~4 min on 2 cores
    .venv/bin/python -m benchmarks.bench_xlnet --smoke    # tiny shape, 1 round

Results go to `<out>/xlnet_step_time.json` and `.md` (`xlnet_step_time_smoke.*`
with --smoke), written atomically.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/bench_xlnet.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_mlm import DEFAULT_OUT, machine_info, write_and_print_report  # noqa: E402

VOCAB = 32000
SHAPES = {
    "small_seq128_batch16": dict(num_layers=4, hidden_size=256, seq_len=128, batch_size=16),
    "base_seq128_batch8": dict(num_layers=12, hidden_size=768, seq_len=128, batch_size=8),
}
SMOKE_SHAPE = {"tiny_seq32_batch4": dict(num_layers=1, hidden_size=64, seq_len=32, batch_size=4)}


def _bert(shape):
    import numpy as np

    from keras_bertology.models import BertBackbone, BertPretrainer

    seq_len, batch = shape["seq_len"], shape["batch_size"]
    slots = max(1, int(0.15 * seq_len))
    backbone = BertBackbone(vocab_size=VOCAB, num_layers=shape["num_layers"], num_heads=shape["hidden_size"] // 64,
                            hidden_size=shape["hidden_size"], intermediate_size=4 * shape["hidden_size"],
                            max_positions=seq_len, use_pooler=False)
    model = BertPretrainer(backbone, next_sentence_prediction=False)
    rng = np.random.default_rng(0)
    features = dict(token_ids=rng.integers(10, VOCAB, (batch, seq_len)), segment_ids=np.zeros((batch, seq_len)),
                    padding_mask=np.ones((batch, seq_len)),
                    mask_positions=np.sort(rng.permutation(seq_len)[:slots])[None].repeat(batch, 0),
                    mask_ids=rng.integers(10, VOCAB, (batch, slots)), mask_weights=np.ones((batch, slots)))
    return model, {key: value.astype("float32" if key == "mask_weights" else "int32")
                   for key, value in features.items()}


def _xlnet(shape):
    import numpy as np
    import tensorflow as tf

    from keras_bertology.models.xlnet import XLNetBackbone, XLNetPretrainer
    from keras_bertology.models.xlnet.permutation import PermutationMasker

    seq_len, batch = shape["seq_len"], shape["batch_size"]
    backbone = XLNetBackbone(vocab_size=VOCAB, num_layers=shape["num_layers"], num_heads=shape["hidden_size"] // 64,
                             hidden_size=shape["hidden_size"], intermediate_size=4 * shape["hidden_size"])
    model = XLNetPretrainer(backbone, mem_len=seq_len // 2, batch_size=batch, bi_data=True)
    rng = np.random.default_rng(0)
    token_ids = rng.integers(10, VOCAB, (batch, seq_len)).astype("int32")
    token_ids[:, -2:] = [4, 3]  # <sep> <cls>
    segment_ids = np.zeros((batch, seq_len), "int32")
    segment_ids[:, seq_len // 2:] = 1
    segment_ids[:, -1] = 2
    masker = PermutationMasker(VOCAB, special_ids=[0, 3, 4], word_start_table=np.ones(VOCAB, bool),
                               max_predictions=seq_len // 6, reuse_len=seq_len // 2, bi_data=True)
    features = masker({"token_ids": tf.constant(token_ids), "segment_ids": tf.constant(segment_ids),
                       "padding_mask": tf.ones_like(token_ids)})
    features = {key: value.numpy() for key, value in features.items()}
    features["stream_start"] = np.zeros(batch, "int32")
    return model, features


def measure(build, shape, warmup, steps):
    """(median ms of one `train_on_batch` step after `warmup` steps, parameter count).

    Each step returns its loss as a number, so the clock stops only when the step has finished.
    """
    import keras

    from keras_bertology.engine.optimization import bert_adamw

    model, features = build(shape)
    model.compile(optimizer=bert_adamw(1e-4, 10**6))
    x, y, sample_weight = model.split_features(features)
    for _ in range(warmup):
        model.train_on_batch(x, y, sample_weight)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        model.train_on_batch(x, y, sample_weight)
        times.append(1000.0 * (time.perf_counter() - started))
    params = model.count_params()
    keras.backend.clear_session()
    return statistics.median(times), params


def alternate(systems, shape, rounds, warmup, steps):
    """Rounds that each time every (name, build) of `systems` once (`measure`): per system the median
    ms/step over rounds, each round's ms and the parameter count; the second system's time over the
    first's, per round and their median."""
    times = {name: [] for name, _ in systems}
    params = {}
    for _ in range(rounds):
        for name, build in systems:
            ms, params[name] = measure(build, shape, warmup, steps)
            times[name].append(ms)
    (first, _), (second, _) = systems
    ratios = [later / earlier for later, earlier in zip(times[second], times[first])]
    return {"ms_per_step": {name: statistics.median(values) for name, values in times.items()},
            "rounds_ms": times, "params": params, "round_ratios": ratios, "ratio": statistics.median(ratios)}


def run(shapes, rounds, warmup, steps):
    results = {}
    for name, shape in shapes.items():
        entry = alternate((("bert_mlm", _bert), ("xlnet_plm", _xlnet)), shape, rounds, warmup, steps)
        results[name] = {
            "shape": dict(shape, num_heads=shape["hidden_size"] // 64, intermediate_size=4 * shape["hidden_size"],
                          vocab_size=VOCAB, bert_predictions=max(1, int(0.15 * shape["seq_len"])),
                          xlnet_num_predict=shape["seq_len"] // 6, xlnet_mem_len=shape["seq_len"] // 2),
            **{key: value for key, value in entry.items() if key != "ratio"},
            "ratio_xlnet_vs_bert": entry["ratio"],
        }
    return results


def render_markdown(report):
    lines = ["# XLNet pretraining step time vs BERT MLM (same shape, same run)", "",
             f"Machine: {report['machine']}", "",
             "| shape | BERT MLM ms/step | XLNet PLM ms/step | XLNet / BERT (median of rounds) |",
             "|---|---|---|---|"]
    for name, entry in report["results"].items():
        ms = entry["ms_per_step"]
        lines.append(f"| {name} | {ms['bert_mlm']:.1f} | {ms['xlnet_plm']:.1f} | {entry['ratio_xlnet_vs_bert']:.2f} |")
    return "\n".join(lines) + "\n"


def step_time_main(argv, doc, run, render, name):
    """The command line of a step-time comparison: parse, `run(shapes, rounds, warmup, steps)`, write
    `<out>/<name>[_smoke].json` and `.md` (`render(report)`) atomically, print the table."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shape, one round, few steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    shapes, rounds, warmup, steps = SHAPES, args.rounds, args.warmup, args.steps
    if args.smoke:
        shapes, rounds, warmup, steps = SMOKE_SHAPE, 1, 1, 2
    report = {"machine": machine_info(), "smoke": args.smoke, "rounds": rounds, "warmup_steps": warmup,
              "steps": steps, "results": run(shapes, rounds, warmup, steps)}
    name = f"{name}_smoke" if args.smoke else name
    write_and_print_report(args.out, name, report, render(report))
    return 0


def main(argv=None):
    return step_time_main(argv, __doc__, run, render_markdown, "xlnet_step_time")


if __name__ == "__main__":
    sys.exit(main())
