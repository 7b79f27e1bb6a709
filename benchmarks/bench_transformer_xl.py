"""Transformer-XL pretraining step time against GPT of the same shape, memory included, in one alternating run.

Both are causal LMs with the same layers, width, heads, feed-forward, vocabulary
(a full softmax: no cutoffs), sequence length and batch, predicting every next
token. Transformer-XL also attends over a memory of `mem_len` = seq_len states
per layer (written after every step, as in training) with relative positions;
GPT has learned absolute positions and pre-LN blocks. Inputs are one fixed
random batch; each timed step is a `train_on_batch` (forward, loss, backward,
AdamW update, the memory write) whose loss is read back. Rounds alternate the
two models (`bench_xlnet.alternate`); the report gives the median ms/step and
the ratio Transformer-XL / GPT, with the machine recorded. The issue's goal:
<= 1.5x.

    .venv/bin/python -m benchmarks.bench_transformer_xl            # ~6 min on 2 cores
    .venv/bin/python -m benchmarks.bench_transformer_xl --smoke    # tiny shape, 1 round

Results go to `<out>/transformer_xl_step_time.json` and `.md` (`..._smoke.*` with --smoke), written atomically.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/bench_transformer_xl.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_xlnet import VOCAB, alternate, step_time_main  # noqa: E402


def _features(shape):
    import numpy as np

    batch, seq_len = shape["batch_size"], shape["seq_len"]
    token_ids = np.random.default_rng(0).integers(10, VOCAB, (batch, seq_len + 1)).astype("int32")
    ones = np.ones((batch, seq_len), "int32")
    return {"token_ids": token_ids[:, :-1], "padding_mask": ones, "next_token_ids": token_ids[:, 1:],
            "next_token_weights": ones, "stream_start": np.zeros(batch, "int32")}


def _sizes(shape):
    return dict(vocab_size=VOCAB, num_layers=shape["num_layers"], num_heads=shape["hidden_size"] // 64,
                hidden_size=shape["hidden_size"], intermediate_size=4 * shape["hidden_size"])


def _gpt(shape):
    from keras_bertology.models.gpt import GPTBackbone, GPTPretrainer

    return GPTPretrainer(GPTBackbone(**_sizes(shape), max_positions=shape["seq_len"])), _features(shape)


def _transformer_xl(shape):
    from keras_bertology.models.transformer_xl import TransformerXLBackbone, TransformerXLPretrainer

    backbone = TransformerXLBackbone(**_sizes(shape))
    model = TransformerXLPretrainer(backbone, mem_len=shape["seq_len"], batch_size=shape["batch_size"])
    return model, _features(shape)


def run(shapes, rounds, warmup, steps):
    results = {}
    for name, shape in shapes.items():
        entry = alternate((("gpt", _gpt), ("transformer_xl", _transformer_xl)), shape, rounds, warmup, steps)
        results[name] = {"shape": dict(_sizes(shape), seq_len=shape["seq_len"], batch_size=shape["batch_size"],
                                       mem_len=shape["seq_len"]),
                         **{key: value for key, value in entry.items() if key != "ratio"},
                         "ratio_transformer_xl_vs_gpt": entry["ratio"]}
    return results


def render_markdown(report):
    lines = ["# Transformer-XL pretraining step time vs GPT (same shape, memory = sequence length, same run)", "",
             f"Machine: {report['machine']}", "",
             "| shape | GPT ms/step | Transformer-XL ms/step | Transformer-XL / GPT (median of rounds) |",
             "|---|---|---|---|"]
    for name, entry in report["results"].items():
        ms = entry["ms_per_step"]
        lines.append(f"| {name} | {ms['gpt']:.1f} | {ms['transformer_xl']:.1f} | "
                     f"{entry['ratio_transformer_xl_vs_gpt']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    return step_time_main(argv, __doc__, run, render_markdown, "transformer_xl_step_time")


if __name__ == "__main__":
    sys.exit(main())
