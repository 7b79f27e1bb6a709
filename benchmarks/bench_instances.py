"""Host-side instance building: NSP pairs, SOP pairs and packed sentences, in tokens a CPU-second.

Every BERT-style run builds its instances in NumPy before its first step (`make run` builds them from the
bundled corpus; `bertology prepare` per shard), so their cost is paid in every run. The corpus is synthetic
(documents of 1 to 60 sentences of 5 to 40 random ids, about 1.3M tokens at the default 2,000 documents),
drawn from a fixed seed, so every round builds from the same documents; each builder's rounds are
interleaved with the others'. Time is the process's CPU time (`time.process_time`), which another job on
the machine moves less than wall time. No peer is timed: no installed library builds these pairs on the
host (keras-hub and transformers leave it to the user; Model Garden's script is Keras 2 and not installed).

    .venv/bin/python -m benchmarks.bench_instances             # ~1 min on 2 cores
    .venv/bin/python -m benchmarks.bench_instances --smoke     # a functional check

Writes `<out>/<name>.json` and `.md` (default benchmarks/results/instance_building), atomically.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # `python benchmarks/bench_instances.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_mlm import DEFAULT_OUT, describe_processor, machine_info, write_and_print_report  # noqa: E402
from keras_bertology.data.instances import build_nsp_instances, build_sop_instances, pack_sentences  # noqa: E402
from keras_bertology.flag_ranges import Range  # noqa: E402

PAD, CLS, SEP = 0, 2, 3
VOCAB = 30_000
BUILDERS = {
    "nsp_pairs": lambda docs, seq_len, rng: build_nsp_instances(docs, seq_len, CLS, SEP, PAD, rng),
    "sop_pairs": lambda docs, seq_len, rng: build_sop_instances(docs, seq_len, CLS, SEP, PAD, rng),
    "packed_sentences": lambda docs, seq_len, rng: pack_sentences(docs, seq_len, CLS, SEP, PAD),
}
ROUNDS, DOCS, SEQ_LEN = Range(int, 1, 50), Range(int, 1, 100_000), Range(int, 8, 4096)


def synthetic_corpus(num_docs, seed=7):
    """`num_docs` documents of 1 to 60 sentences, each of 5 to 40 ids drawn uniformly above the special ids."""
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, VOCAB, size=int(rng.integers(5, 41)), dtype=np.int32)
             for _ in range(int(rng.integers(1, 61)))] for _ in range(num_docs)]


def measure(documents, seq_len, rounds):
    """{builder: {instances, cpu_s (each round), median_cpu_s, tokens_per_cpu_s}}: the rounds interleave the
    builders, and each builder draws from the same seed in every round (the same instances each time)."""
    tokens = sum(len(sentence) for document in documents for sentence in document)
    times = {name: [] for name in BUILDERS}
    counts = {}
    for _ in range(rounds):
        for name, build in BUILDERS.items():
            start = time.process_time()
            instances = build(documents, seq_len, np.random.default_rng(8))
            times[name].append(time.process_time() - start)
            counts[name] = len(instances["token_ids"])
    return {name: {"instances": counts[name], "cpu_s": [round(t, 4) for t in cpu],
                   "median_cpu_s": round(statistics.median(cpu), 4),
                   "tokens_per_cpu_s": round(tokens / max(statistics.median(cpu), 1e-9))}
            for name, cpu in times.items()}, tokens


def markdown(report):
    lines = [f"# Instance building on {report['processor']}", "",
             f"{report['documents']} synthetic documents, {report['tokens']:,} tokens, sequences of "
             f"{report['seq_len']}; median of {report['rounds']} rounds, CPU seconds.", "",
             "| builder | instances | median CPU s | tokens / CPU s |", "|---|---|---|---|"]
    lines += [f"| {name} | {row['instances']:,} | {row['median_cpu_s']:.3f} | {row['tokens_per_cpu_s']:,} |"
              for name, row in report["builders"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=ROUNDS.parse, default=5, help=f"{ROUNDS} (default 5)")
    parser.add_argument("--docs", type=DOCS.parse, default=2000, help=f"{DOCS} (default 2000)")
    parser.add_argument("--seq-len", type=SEQ_LEN.parse, default=128, help=f"{SEQ_LEN} (default 128)")
    parser.add_argument("--smoke", action="store_true", help="1 round over 50 documents")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--name", default="instance_building")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.docs = 1, 50
    documents = synthetic_corpus(args.docs)
    builders, tokens = measure(documents, args.seq_len, args.rounds)
    machine = machine_info()
    report = {"processor": describe_processor(machine), "machine": machine, "documents": args.docs,
              "tokens": tokens, "seq_len": args.seq_len, "rounds": args.rounds, "builders": builders}
    write_and_print_report(args.out, args.name, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
