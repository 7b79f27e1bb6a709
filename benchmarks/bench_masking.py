"""Masking-stage throughput: every keras-bertology stage beside keras-hub's and Hugging Face's.

Each stage masks the same synthetic batches (WordPiece-like ids, a third of
them continuation pieces; [CLS] A [SEP] B [SEP] then padding). Ours and
keras-hub's MaskedLMMaskGenerator run inside a `tf.data` pipeline
(`from_tensors(batch).repeat().map(stage)`), the way training uses them, on
all cores with one batch in flight; transformers' data collators (token,
whole-word and permutation LM, the peers of BERT's, BERT's whole-word and
XLNet's stages) are called on the same batch the way a PyTorch DataLoader
calls them. Rounds alternate the stages so slow drift of the machine hits all
of them; the report gives the median rows per second over rounds and each
stage's ratio to BERT's token masking, to keras-hub's generator and to its
transformers peer, measured in the same run, and how many times faster than
our BERT-base pretrainer trains on this machine each stage produces tokens
(the goal: 20x, so that masking never holds training back).

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_masking            # ~3 min on 2 cores
    .venv/bin/python -m benchmarks.bench_masking --smoke    # 1 round, few batches

Results go to `<out>/<name>.json` and `.md` (written atomically).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/bench_masking.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_mlm import DEFAULT_OUT, machine_info, write_and_print_report  # noqa: E402

VOCAB, CLS, SEP, MASK, PAD = 30522, 101, 102, 103, 0
FIRST_CONTINUATION = 20000  # ids from here on continue a word
SHAPES = {"seq128_batch32": (128, 32), "seq512_batch8": (512, 8)}
STAGES = ("bert_tokens", "bert_whole_word", "albert_ngram", "spanbert_spans", "electra_tokens",
          "xlnet_permutation", "keras_hub_tokens", "hf_tokens", "hf_whole_word", "hf_permutation")
# Each of our stages and the transformers collator that does the same job.
HF_PEERS = {"bert_tokens": "hf_tokens", "electra_tokens": "hf_tokens", "bert_whole_word": "hf_whole_word",
            "xlnet_permutation": "hf_permutation"}


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
    if name in ("bert_tokens", "bert_whole_word", "electra_tokens"):
        from keras_bertology.data.masking import DynamicMasker, MaskingConfig

        rates = dict(mask_token_rate=0.85, random_token_rate=0.0) if name == "electra_tokens" else {}
        config = MaskingConfig(max_predictions=max_predictions, whole_word=name == "bert_whole_word", **rates)
        return DynamicMasker(config, word_start_table=starts, **common)
    if name in ("albert_ngram", "spanbert_spans"):
        from keras_bertology.data.span_masking import SpanMasker, geometric_span_probs, ngram_probs

        spans = name == "spanbert_spans"
        probs = geometric_span_probs() if spans else ngram_probs(3)
        return SpanMasker(probs, word_start_table=starts, max_predictions=max_predictions,
                          per_span_decision=spans, boundaries=spans, **common)
    if name == "xlnet_permutation":
        import tensorflow as tf

        from keras_bertology.models.xlnet.permutation import PermutationMasker

        masker = PermutationMasker(VOCAB, [PAD, CLS, SEP, MASK], starts, max_predictions)
        return lambda features: masker({**features, "segment_ids": tf.zeros_like(features["token_ids"]),
                                        "padding_mask": tf.not_equal(features["token_ids"], PAD)})
    if name.startswith("hf_"):
        return CollatorStage(name)
    import keras_hub

    generator = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=VOCAB, mask_selection_rate=0.15, mask_selection_length=max_predictions,
        mask_token_id=MASK, unselectable_token_ids=[CLS, SEP, PAD])
    return lambda features: generator(features["token_ids"])


class CollatorStage:
    """A transformers data collator over a WordPiece vocabulary laid out like the synthetic ids (the same
    specials at the same ids, "##" pieces from FIRST_CONTINUATION on), returning NumPy batches. It is
    called on tokenized examples, as a DataLoader calls it; whole-word masking finds words by the
    examples' character offsets, as transformers' tokenizers give them."""

    KINDS = {"hf_tokens": "DataCollatorForLanguageModeling", "hf_whole_word": "DataCollatorForLanguageModeling",
             "hf_permutation": "DataCollatorForPermutationLanguageModeling"}

    def __init__(self, name):
        import tempfile

        import transformers

        words = {PAD: "[PAD]", 100: "[UNK]", CLS: "[CLS]", SEP: "[SEP]", MASK: "[MASK]"}
        vocab = [words.get(i, f"##p{i}" if i >= FIRST_CONTINUATION else f"w{i}") for i in range(VOCAB)]
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "vocab.txt"
            path.write_text("\n".join(vocab) + "\n")
            tokenizer = transformers.BertTokenizerFast(vocab_file=str(path))
        options = {} if name == "hf_permutation" else {"mlm_probability": 0.15}
        if name == "hf_whole_word":
            options["whole_word_mask"] = True
        self.whole_word = name == "hf_whole_word"
        self.collator = getattr(transformers, self.KINDS[name])(tokenizer, return_tensors="np", **options)

    def examples(self, batch):
        """The batch's rows as tokenized examples (with character offsets for whole-word masking)."""
        rows = []
        for ids in batch:
            row = {"input_ids": ids.tolist()}
            if self.whole_word:  # three characters a piece; a space before each word's first piece
                offsets, end = [], 0
                for token in ids:
                    start = end if token >= FIRST_CONTINUATION else end + 1
                    end = start + 3
                    offsets.append((start, end))
                row["offset_mapping"] = offsets
            rows.append(row)
        return rows

    def __call__(self, examples):
        return self.collator(examples)


def measure(stage, batch, warmup, batches):
    """Rows per second of `stage` over a repeating batch, after `warmup` batches: mapped in tf.data for a
    TensorFlow stage, called on the rows (as a DataLoader does) for a transformers collator."""
    import tensorflow as tf

    if isinstance(stage, CollatorStage):
        examples = stage.examples(batch)
        produce = lambda: stage(examples)  # noqa: E731
    else:
        dataset = tf.data.Dataset.from_tensors({"token_ids": tf.constant(batch)}).repeat().map(stage).prefetch(1)
        produce = iter(dataset).__next__
    for _ in range(warmup):
        produce()
    started = time.perf_counter()
    for _ in range(batches):
        produce()
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
            "ratio_vs_transformers": {name: medians[name] / medians[peer] for name, peer in HF_PEERS.items()},
        }
    return results


def consumer_tokens_per_sec(shape, out_dir):
    """Tokens/s that our BERT pretrainer (MLM + NSP, float32) trains on at the peer suite's `shape` here,
    measured in a fresh process as the peer suite measures it."""
    from benchmarks.peer_suite import parse_args, run_worker

    result = run_worker(parse_args([]), out_dir, model="bert", shape=shape, precision="float32", system="ours")
    return {"shape": shape, "tokens_per_sec": result["tokens_per_sec"]}


def add_consumption_ratios(results, consumer):
    """Each stage's tokens/s over the model's. The model is measured at seq 128; at seq 512 it trains on
    fewer tokens/s (attention grows with the length), so the ratio there is a lower bound."""
    for entry in results.values():
        entry["ratio_vs_consumption"] = {name: rows * entry["seq_len"] / consumer["tokens_per_sec"]
                                         for name, rows in entry["rows_per_sec"].items()}


def render_markdown(report):
    consumer = report["consumer"]
    lines = ["# Masking-stage throughput", "",
             f"{report['machine']['cpu_model']}, {report['machine']['usable_cpus']} usable cores, "
             f"TensorFlow {report['machine']['tensorflow']}, commit {report['machine']['git_commit']}; "
             f"median of {report['settings']['rounds']} rounds of {report['settings']['batches']} batches. "
             f"x consumption: the stage's tokens/s over the {consumer['tokens_per_sec']:,.0f} tokens/s our BERT "
             f"pretrainer trains on at the peer suite's {consumer['shape']} shape on this machine (goal: >= 20).",
             ""]
    for shape, entry in report["shapes"].items():
        lines += [f"## {shape} (max_predictions {entry['max_predictions']})", "",
                  "| stage | rows/s | x consumption | vs BERT tokens | vs keras-hub | vs its transformers collator |",
                  "|---|---|---|---|---|---|"]
        for name in STAGES:
            peer = entry["ratio_vs_transformers"].get(name)
            lines.append(f"| {name} | {entry['rows_per_sec'][name]:,.0f} | "
                         f"{entry['ratio_vs_consumption'][name]:,.0f} | "
                         f"{entry['ratio_vs_bert_tokens'][name]:.2f} | {entry['ratio_vs_keras_hub'][name]:.2f} | "
                         + (f"{peer:.2f} ({HF_PEERS[name]}) |" if peer else "- |"))
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
    args.out.mkdir(parents=True, exist_ok=True)
    consumer = consumer_tokens_per_sec("tiny" if args.smoke else "base", args.out)
    results = run(args.rounds, args.warmup, args.batches, args.shapes)
    add_consumption_ratios(results, consumer)
    report = {"smoke": args.smoke, "machine": machine_info(), "consumer": consumer,
              "settings": {"rounds": args.rounds, "batches": args.batches, "warmup": args.warmup},
              "shapes": results}
    write_and_print_report(args.out, name, report, render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
