"""Unpadded packing against padded rows: the share of real tokens and the real tokens trained per second.

For two corpora, the bundled plays (38 long documents) and the BBC News
training articles (1,557 documents of 90 to 4,400 words: wide length
variance), it pretrains `modernbert-tiny` from the command line with
`--packing doc-sentences` (a row never holds two documents, so each document
ends in a padded row) and `--packing unpadded` (several documents to a row,
each attending within itself), at the same batch and sequence length (the
same token budget a step). Throughput is the run's own samples/s; the share
of real tokens is counted on the instances each packing builds from the
run's tokenizer. Each run is a fresh process; rounds alternate the packings.

    .venv/bin/python -m benchmarks.bench_packing                 # ~8 min on 2 cores
    .venv/bin/python -m benchmarks.bench_packing --smoke         # a functional check

Writes `<out>/<name>.json` and `.md` (default benchmarks/results/packing_unpadded).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/bench_packing.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_mlm import DEFAULT_OUT, REPO_ROOT, describe_processor, machine_info, write_and_print_report  # noqa: E402

PACKINGS = ("doc-sentences", "unpadded")
CORPORA = ("plays", "bbc-news")


def bbc_corpus(folder):
    """The BBC News training articles as a JSON Lines corpus, one document each."""
    from keras_bertology.finetune.datasets import load_task

    path = Path(folder) / "bbc-news.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for example in load_task("bbc-news").splits["train"]:
            out.write(json.dumps({"text": example["text"]}) + "\n")
    return path


def real_token_share(run_dir, corpus, packing, seq_len):
    """(instances, share of real tokens) of `packing` over `corpus` with the run's tokenizer."""
    from keras_bertology.data.corpus import read_corpus
    from keras_bertology.data.recipe import tokenize_documents
    from keras_bertology.models import get_family
    from keras_bertology.runs import load_run_tokenizer

    family, tokenizer = get_family("modernbert"), load_run_tokenizer(run_dir)
    documents = tokenize_documents(read_corpus(corpus, say=lambda *_: None), tokenizer)
    specials = {f"{role}_id": tokenizer.optional_id(role) for role in ("cls", "sep", "pad")}
    instances = family.build_instances(documents, seq_len, specials, None, 1, packing)
    return len(instances["token_ids"]), float((instances["token_ids"] != tokenizer.pad_id).mean())


def pretrain(corpus, packing, args, out):
    command = [str(REPO_ROOT / ".venv" / "bin" / "bertology"), "pretrain", "--model", "modernbert", "--preset",
               "modernbert-tiny", "--packing", packing, "--steps", str(args.steps), "--seq-len", str(args.seq_len),
               "--batch-size", str(args.batch_size), "--vocab-size", "8000", "--no-export", "--out",
               str(out)]
    if corpus is not None:
        command += ["--corpus", str(corpus)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads((Path(out) / "metrics.json").read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="few steps, one round: a functional check")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.rounds, args.seq_len = 4, 1, 128
    name = args.name or ("packing_unpadded_smoke" if args.smoke else "packing_unpadded")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        corpora = {"plays": None, "bbc-news": bbc_corpus(work)}
        for corpus_name, corpus in corpora.items():
            speeds = {packing: [] for packing in PACKINGS}
            shares = {}
            for round_index in range(args.rounds):
                for packing in PACKINGS if round_index % 2 == 0 else PACKINGS[::-1]:
                    run = Path(work) / f"{corpus_name}-{packing}-{round_index}"
                    metrics = pretrain(corpus, packing, args, run)
                    speeds[packing].append(metrics["samples_per_second"])
                    if packing not in shares:
                        shares[packing] = real_token_share(run, corpus, packing, args.seq_len)
                    print(f"[{corpus_name} {packing} round {round_index + 1}] "
                          f"{metrics['samples_per_second']:.1f} samples/s", flush=True)
            for packing in PACKINGS:
                samples = statistics.median(speeds[packing])
                instances, share = shares[packing]
                rows.append({"corpus": corpus_name, "packing": packing, "instances": instances,
                             "real_token_share": share, "samples_per_second": samples,
                             "real_tokens_per_second": samples * args.seq_len * share})
    report = {"machine": machine_info(), "steps": args.steps, "seq_len": args.seq_len, "batch_size": args.batch_size,
              "rounds": args.rounds, "rows": rows}
    write_and_print_report(args.out, name, report, render(report))


def render(report):
    machine = report["machine"]
    lines = [f"# Unpadded packing: real tokens per row and per second ({report['seq_len']} tokens, batch "
             f"{report['batch_size']})", "",
             f"`modernbert-tiny`, {report['steps']} steps a run, median of {report['rounds']} alternating rounds, "
             f"each a fresh `bertology pretrain`; {describe_processor(machine)}. "
             "doc-sentences: a row never holds two documents; unpadded: several documents to a row, each attending "
             "within itself. Same batch and length: the same token budget a step.", "",
             "| corpus | packing | instances | real tokens | samples/s | real tokens/s | vs doc-sentences |",
             "|---|---|---:|---:|---:|---:|---:|"]
    by_key = {(row["corpus"], row["packing"]): row for row in report["rows"]}
    for row in report["rows"]:
        base = by_key[(row["corpus"], "doc-sentences")]["real_tokens_per_second"]
        lines.append(f"| {row['corpus']} | {row['packing']} | {row['instances']:,} | {row['real_token_share']:.1%} "
                     f"| {row['samples_per_second']:.1f} | {row['real_tokens_per_second']:,.0f} | "
                     f"{row['real_tokens_per_second'] / base:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
