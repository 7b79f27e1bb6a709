"""`bertology prepare` at growing corpus sizes: peak memory stays flat, throughput grows with workers.

Corpora of 1x, 4x and 16x the default corpus (the 38 plays, their markup
stripped, written as plain text: copy k of a play is a document of its own)
are prepared for BERT (NSP pairs, static masking with --dupe-factor 2, about
2 MB of text per shard at every size: memory is bounded by the shard, so the
shard size is held fixed) by the real command in a fresh process. A sampler reads the resident
memory of that process and of every process it starts (Beam's DirectRunner
workers) ten times a second: the peak is of their sum, which is what the
machine has to hold. The tokenizer is trained on a fixed 4 MB sample, so its
share of memory is the same at every size (the default sample is capped at
64 MB). Rows with 1 and with 2 workers show how the work spreads.

Run from the repository root:

    .venv/bin/python -m benchmarks.bench_prepare            # ~15 min on 2 cores
    .venv/bin/python -m benchmarks.bench_prepare --smoke    # 1x only, 1 worker

Results go to `<out>/prepare_scaling.json` and `.md` (written atomically).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/bench_prepare.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_mlm import DEFAULT_OUT, machine_info, write_and_print_report  # noqa: E402

BERTOLOGY = Path(sys.executable).parent / "bertology"
# Shards per copy of the default corpus: about 2 MB of text each, the same at every size.
SHARDS_PER_COPY = 2


def write_corpus(folder, copies):
    """`copies` x the default corpus as plain-text files, one per play and copy."""
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    folder.mkdir(parents=True)
    for path in default_corpus_paths():
        text = "\n".join(read_corpus(path)[0])
        for copy in range(copies):
            (folder / f"{path.stem}-{copy:02d}.txt").write_text(text + "\n", encoding="utf-8")
    return sum(f.stat().st_size for f in folder.iterdir())


def tree_rss(pid):
    """Resident bytes of `pid` and all its descendants."""
    children, total = {}, 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
            except (OSError, IndexError):
                continue
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
        stack.extend(children.get(current, []))
    return total


def run_prepare(corpus, out, workers, shards):
    """(seconds, peak bytes of the process tree, manifest) of one `bertology prepare`."""
    command = [str(BERTOLOGY), "prepare", "--model", "bert", "--corpus", str(corpus), "--out", str(out),
               "--workers", str(workers), "--shards", str(shards), "--dupe-factor", "2",
               "--tokenizer-sample-mb", "4", "--vocab-size", "8000"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(process.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    done.set()
    sampler.join()
    seconds = time.perf_counter() - started
    if process.returncode:
        raise SystemExit(f"prepare failed: {err[-2000:]}")
    return seconds, peak[0], json.loads((out / "manifest.json").read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    sizes, workers = ([1], [1]) if args.smoke else (args.sizes, args.workers)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for size in sizes:
            corpus = Path(scratch) / f"corpus-{size}x"
            corpus_bytes = write_corpus(corpus, size)
            for count in workers:
                out = Path(scratch) / f"data-{size}x-{count}"
                seconds, peak, manifest = run_prepare(corpus, out, count, SHARDS_PER_COPY * size)
                rows.append({"size": size, "workers": count, "corpus_mib": corpus_bytes / 2**20, "seconds": seconds,
                             "peak_mib": peak / 2**20, "shards": len(manifest["shards"]),
                             "documents": manifest["documents"], "tokens": manifest["tokens"],
                             "instances": manifest["instances"], "documents_per_s": manifest["documents"] / seconds,
                             "tokens_per_s": manifest["tokens"] / seconds})
                print(json.dumps(rows[-1]), flush=True)
                subprocess.run(["rm", "-rf", str(out)], check=True)
    report = {"machine": machine_info(),
              "command": " ".join(["python -m benchmarks.bench_prepare", *(argv or sys.argv[1:])]),
              "rows": rows}
    name = "prepare_scaling_smoke" if args.smoke else "prepare_scaling"
    write_and_print_report(args.out, name, report, markdown(report))


def markdown(report):
    machine = report["machine"]
    lines = [f"# `bertology prepare` scaling ({machine['cpu_model']}, {machine['usable_cpus']} usable cores)", "",
             f"Command: `{report['command']}`. BERT instances (NSP pairs, static masking x2), ~2 MB shards, "
             "tokenizer trained on a 4 MB sample; peak = resident memory of the command and its Beam workers.", "",
             "| corpus | text MiB | workers | shards | seconds | peak MiB | documents/s | tokens/s |",
             "|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        lines.append(f"| {row['size']}x | {row['corpus_mib']:.1f} | {row['workers']} | {row['shards']} | "
                     f"{row['seconds']:.1f} | {row['peak_mib']:.0f} | {row['documents_per_s']:.2f} | "
                     f"{row['tokens_per_s']:,.0f} |")
    by_workers = {}
    for row in report["rows"]:
        by_workers.setdefault(row["workers"], []).append(row)
    for count, rows in by_workers.items():
        if len(rows) > 1:
            lines.append(f"\nPeak memory with {count} worker(s), largest over smallest corpus: "
                         f"{rows[-1]['peak_mib'] / rows[0]['peak_mib']:.2f}x for "
                         f"{rows[-1]['corpus_mib'] / rows[0]['corpus_mib']:.0f}x the text.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
