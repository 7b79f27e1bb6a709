"""The Beam stage of `bertology prepare`: corpus files -> part files per shard -> one TFRecord file per shard.

Stage 1 reads each corpus file as a stream of documents and appends each
document to a part file of the shard chosen by a hash of (seed, file,
document number), so the same corpus and seed give the same shards on any
runner; documents never travel through the runner's shuffle. Stage 2 starts
once every file is read and builds each shard from its parts: the family's
instances by the recipe `bertology pretrain` uses in memory (`data.recipe`),
masked there for static masking, written as one file. A worker holds one
document, or one shard's documents and instances, at a time. What the
workers report (shard summaries, skipped records, errors) is appended to
JSON-lines files in the staging folder, which prepare/pipeline.py reads.
"""

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import zlib
from pathlib import Path

import numpy as np

from keras_bertology.data.corpus import BadRecords, iter_documents
from keras_bertology.data.knowledge_units import MARKER_FILE, UnitMarker
from keras_bertology.data.recipe import (
    build_instances, build_masker, instance_coverage, masking_of, tokenize_documents)
from keras_bertology.data.shards import TOKENIZER_DIR, shard_name, write_shard
from keras_bertology.data.static_masking import masked_batches
from keras_bertology.errors import ConfigError, CorpusError
from keras_bertology.extras import require_extra
from keras_bertology.models.registry import get_family
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.pretraining.options import PretrainOptions

require_extra("apache_beam", "bertology prepare")
logging.disable(logging.WARNING)  # Beam's import warns about cloud clients that local runs do not use
try:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
finally:
    logging.disable(logging.NOTSET)

SUMMARY_FILE = "shards.jsonl"
ERRORS_FILE = "errors.jsonl"
REPORTS_FILE = "reports.jsonl"
PARTS_DIR = "parts"


@dataclasses.dataclass(frozen=True)
class ShardJob:
    """What every Beam worker needs to read documents and build shards (plain data: it is pickled)."""

    recipe_options: PretrainOptions  # the data options, as the recipe functions take them
    replicas: int
    shards: int
    staging: str  # the folder the shards, part files and reports are written to
    fingerprint: str  # the tokenizer's, recorded in each shard's header
    corpus_format: str
    text_field: str
    skip_bad_records: bool
    held_out: frozenset  # sentences kept out of the shards (the end-of-run examples)
    threads: int  # TensorFlow threads of a worker, 0 for TensorFlow's own choice

    def shard_of(self, file_index, document_index):
        key = f"{self.recipe_options.seed}:{file_index}:{document_index}".encode()
        return zlib.crc32(key) % self.shards


def run_pipeline(job, files, arguments, failure):
    """Run the two stages over `files` with the Beam pipeline options `arguments`; an error is appended
    to `failure` (this runs in a thread, and the caller reports it)."""
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)  # a failure is reported once, by prepare
    # Types are not declared: documents are plain lists of strings.
    arguments = ["--default_sdk_harness_log_level=ERROR", "--no_pipeline_type_check", *arguments]
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # the workers' TensorFlow start-up notices
        with beam.Pipeline(options=PipelineOptions(arguments)) as pipeline:
            # Stage 1 streams every file's documents to their shards' part files on disk; stage 2 starts
            # once all are read (the global count waits for them) and builds each shard from its parts.
            reports = (pipeline
                       | "Files" >> beam.Create(list(enumerate(files)))
                       | "SpreadFiles" >> beam.Reshuffle()
                       | "Spill" >> beam.FlatMap(spill_documents, job))
            _ = reports | "Reports" >> beam.Map(_write_report, job.staging)
            _ = (reports
                 | "AllRead" >> beam.combiners.Count.Globally()
                 | "Shards" >> beam.FlatMap(lambda _: range(job.shards))
                 | "SpreadShards" >> beam.Reshuffle()
                 | "Build" >> beam.ParDo(BuildShard(job)))
    except BaseException as error:  # reported by the main thread
        failure.append(error)


def spill_documents(indexed_file, job):
    """Stream one corpus file's documents to the part files of their shards; yields the file's report
    (its bad records, or the error that stopped it). Memory: one document and small write buffers."""
    file_index, path = indexed_file
    bad = BadRecords(skip=job.skip_bad_records)
    parts = _PartWriter(Path(job.staging) / PARTS_DIR, file_index)
    try:
        for number, document in enumerate(iter_documents(path, job.corpus_format, job.text_field, bad)):
            kept = [sentence for sentence in document if sentence not in job.held_out]
            if kept:
                parts.add(job.shard_of(file_index, number), kept)
    except CorpusError as error:
        yield {"file": path, "error": str(error)}
        return
    finally:
        parts.flush()
    yield {"file": path, "skipped": bad.count, "examples": bad.examples}


class _PartWriter:
    """Buffered appends of documents (one JSON line each) to PARTS/<shard>/<file index>.jsonl."""

    def __init__(self, folder, file_index, limit=8 * 2**20):
        self.folder, self.name, self.limit = folder, f"{file_index:08d}.jsonl", limit
        self.buffers, self.size = {}, 0
        for stale in folder.glob(f"*/{self.name}"):  # an earlier attempt at this file, retried by the runner
            stale.unlink()

    def add(self, shard, sentences):
        line = json.dumps(sentences) + "\n"
        self.buffers.setdefault(shard, []).append(line)
        self.size += len(line)
        if self.size >= self.limit:
            self.flush()

    def flush(self):
        for shard, lines in self.buffers.items():
            folder = self.folder / f"{shard:05d}"
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / self.name, "a", encoding="utf-8") as stream:
                stream.writelines(lines)
        self.buffers, self.size = {}, 0


def _shard_documents(folder):
    """The documents spilled for one shard, in (file, document) order."""
    if not folder.is_dir():
        return []
    documents = []
    for part in sorted(folder.iterdir()):
        with open(part, encoding="utf-8") as stream:
            documents.extend(json.loads(line) for line in stream)
    return documents


class BuildShard(beam.DoFn):
    """One shard's documents -> its instances (masked for static masking) -> its file."""

    def __init__(self, job):
        super().__init__()
        self.job = job
        self.family = self.tokenizer = self.masker = self.marker = None

    def setup(self):
        import tensorflow as tf

        # Local workers share the machine's cores: each runs TensorFlow on its share.
        with contextlib.suppress(RuntimeError):  # already set where this process ran TensorFlow before
            tf.config.threading.set_intra_op_parallelism_threads(self.job.threads)
            tf.config.threading.set_inter_op_parallelism_threads(self.job.threads)
        self.family = get_family(self.job.recipe_options.model)
        self.tokenizer = load_tokenizer(Path(self.job.staging) / TOKENIZER_DIR)
        marker_file = Path(self.job.staging) / MARKER_FILE
        self.marker = UnitMarker.load(marker_file) if marker_file.is_file() else None
        self.masker = build_masker(self.family, self.tokenizer, self.job.recipe_options, self.job.replicas)

    def process(self, shard):
        job, name = self.job, shard_name(shard, self.job.shards)
        parts = Path(job.staging) / PARTS_DIR / f"{shard:05d}"
        documents = _shard_documents(parts)
        if not documents:
            return
        tokenized = tokenize_documents(documents, self.tokenizer, self.marker)
        try:
            instances = build_instances(self.family, tokenized, self.tokenizer, job.recipe_options, job.replicas,
                                        np.random.default_rng([job.recipe_options.seed, shard]))
        except ConfigError as error:
            _write_line(Path(job.staging) / ERRORS_FILE, {
                "file": name, "error": f"shard {name}, {len(documents)} documents: {error} (use fewer --shards "
                                       "for a corpus of few documents)"})
            return
        count = len(instances["token_ids"])
        if count == 0:
            return
        static = masking_of(self.family, job.recipe_options) == "static"
        batches = masked_batches(instances, self.masker, job.recipe_options.seed, key=shard) if static else [instances]
        header = {"family": self.family.name, "tokenizer_sha256": job.fingerprint}
        header = write_shard(str(Path(job.staging) / name), batches, header, count)
        shutil.rmtree(parts)
        tokens = int(np.sum(instances["token_ids"] != self.tokenizer.pad_id))
        reached, corpus_tokens = instance_coverage(self.family, instances, tokenized, self.tokenizer,
                                                   job.recipe_options)
        _write_line(Path(job.staging) / SUMMARY_FILE, {
            "file": name, "instances": count, "documents": len(documents),
            "sentences": sum(map(len, documents)), "tokens": tokens, "corpus_tokens": corpus_tokens,
            "reached_tokens": reached, "features": header["features"]})
        yield name


def _write_report(report, staging):
    _write_line(Path(staging) / (ERRORS_FILE if "error" in report else REPORTS_FILE), report)


def _write_line(path, record):
    """Append one JSON line (one short write: concurrent workers do not interleave)."""
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record) + "\n")
