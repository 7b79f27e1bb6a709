"""`bertology prepare` on Apache Beam: corpus files -> documents -> shards of a family's instances.

1. The tokenizer: loaded (--tokenizer), or trained on a bounded sample of the
   corpus (about --tokenizer-sample-mb of text, taken evenly from the files).
   Where the masking units need phrases and entities, they are learned from
   the same sample (knowledge_units.json), and every shard marks them.
2. The Beam stage (prepare/beam_stage.py): each corpus file streamed to part
   files of the shards its documents hash to, then each shard's documents
   made into the family's instances by the recipe `bertology pretrain` uses
   in memory (`data.recipe`) and written as one TFRecord file.
3. The manifest: features, instance counts, the tokenizer's fingerprint, the
   recipe, the sources and the bad records skipped. The data folder is
   written beside its destination and moved into place complete.

The runner is Beam's: DirectRunner with --workers local processes by
default, or any other by name (`--runner FlinkRunner` and its pipeline
options after `--`); the output folder must then be storage the workers and
this machine share.
"""

import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np

from keras_bertology.atomic import atomic_directory
from keras_bertology.convert.hf_tokenizer import load_hf_tokenizer
from keras_bertology.data.corpus import BadRecords, corpus_files, default_corpus_paths, iter_documents
from keras_bertology.data.held_out_lines import hold_out_sentences
from keras_bertology.data.instances import coverage_line
from keras_bertology.data.knowledge_units import MARKER_FILE
from keras_bertology.data.recipe import masking_of, unit_marker
from keras_bertology.data.recipe_fields import RECIPE_FIELDS
from keras_bertology.data.shards import FORMAT, MANIFEST_FILE, TOKENIZER_DIR, VERSION, tokenizer_fingerprint
from keras_bertology.errors import BertologyError, ConfigError, CorpusError
from keras_bertology.extras import require_extra
from keras_bertology.output_paths import PREPARED_DATA, claim_output_folder
from keras_bertology.prepare.beam_stage import (
    ERRORS_FILE, PARTS_DIR, REPORTS_FILE, SUMMARY_FILE, ShardJob, run_pipeline)
from keras_bertology.prepare.options import GZIP_RATIO
from keras_bertology.tokenizers.base import CONFIG_FILE as TOKENIZER_CONFIG
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer

# The family options that the instances and masking use (the others configure the model).
_DATA_BUILDERS = ("instances", "masker")


def prepare(options):
    """Run `bertology prepare`; returns the manifest written to `options.out`."""
    # Asked here too, not only where beam_stage is first imported: a process that imported it before
    # (a notebook, the tests) must give the same one line when the extra is gone.
    require_extra("apache_beam", "bertology prepare")
    family = options.validate()
    with claim_output_folder(options.out, "--out", PREPARED_DATA, replaced=True):
        manifest = _prepare(family, options)
    _report(manifest, options)
    return manifest


def _prepare(family, options):
    """The shards, tokenizer and manifest, written to a staging folder that replaces --out at the end."""
    files = corpus_files(options.corpus or default_corpus_paths(), say=lambda line: _say(options, line))
    corpus_bytes = sum(f.stat().st_size * (GZIP_RATIO if f.name.lower().endswith(".gz") else 1) for f in files)
    shards = options.shard_count(corpus_bytes)
    recipe_options = options.recipe_options()
    with atomic_directory(options.out) as staging:
        sample = _sample(files, options)
        sample, held_out = hold_out_sentences(sample, np.random.default_rng(options.seed))
        tokenizer = _tokenizer(family, sample, options)
        tokenizer.save(staging / TOKENIZER_DIR)
        marker = unit_marker(family, recipe_options, sample)
        if marker is not None:  # phrases and entities from the sample, as the vocabulary
            _say(options, marker.summary())
            marker.save(staging / MARKER_FILE)
        fingerprint = tokenizer_fingerprint(staging / TOKENIZER_DIR)
        recipe = recipe_of(family, recipe_options, tokenizer, options.replicas)
        _say(options, f"preparing {len(files)} corpus files (~{corpus_bytes / 2**20:.1f} MB of text) into "
                      f"{shards} shards of {family.name} instances, {recipe['masking']} masking, on "
                      f"{options.runner}" + (f" with {options.local_workers()} workers"
                                             if options.runner == "DirectRunner" else ""))
        started = time.perf_counter()
        job = ShardJob(recipe_options=recipe_options, replicas=options.replicas, shards=shards,
                       staging=str(staging), fingerprint=fingerprint, corpus_format=options.corpus_format,
                       text_field=options.text_field, skip_bad_records=options.skip_bad_records,
                       held_out=frozenset(held_out), threads=_threads_per_worker(options))
        _run_with_progress(job, [str(f) for f in files], options)
        seconds = time.perf_counter() - started
        summaries, bad = _collect(staging, options)
        if not summaries:
            raise CorpusError("The corpus has no text (only empty or whitespace-only files): "
                              + ", ".join(map(str, files)))
        manifest = _manifest(FORMAT, VERSION, recipe, fingerprint, summaries, bad, files, options, seconds)
        manifest["held_out"] = held_out
        (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    return manifest


def _run_with_progress(job, files, options):
    """Run the Beam pipeline in a thread while a progress bar counts the shards written."""
    import keras

    failure = []
    worker = threading.Thread(target=run_pipeline, args=(job, files, _pipeline_arguments(options), failure),
                              daemon=True)
    worker.start()
    progress = keras.utils.Progbar(job.shards, unit_name="shard") if options.verbose else None
    staging, shown = Path(job.staging), 0
    while worker.is_alive():
        worker.join(timeout=1.0)
        done = len(list(staging.glob("shard-*.tfrecord")))
        if progress is not None and done > shown:
            progress.update(done)
            shown = done
    if failure:
        error = failure[0]
        if isinstance(error, BertologyError):
            raise error
        raise CorpusError(f"the {options.runner} pipeline failed: {_last_line(error)}") from None


def _pipeline_arguments(options):
    """The Beam pipeline options: the runner's, --workers local processes for DirectRunner, and those given."""
    arguments = [f"--runner={options.runner}"]
    if options.runner == "DirectRunner":
        arguments += [f"--direct_num_workers={options.local_workers()}",
                      "--direct_running_mode=" + ("multi_processing" if options.local_workers() > 1
                                                  else "in_memory")]
    return arguments + list(options.pipeline_args)


def recipe_of(family, options, tokenizer, replicas=1):
    """What the instances were made with, as the manifest of prepared shards records it."""
    recipe = {name: getattr(options, name) for name in RECIPE_FIELDS}
    recipe.update(model=family.name, vocab_size=tokenizer.vocab_size, masking=masking_of(family, options),
                  packing=family.packing(options.packing),
                  max_predictions=options.prediction_slots(family), seed=options.seed,
                  family_options={name: value for name, value in family.option_values(options.family_options).items()
                                  if any(builder in _DATA_BUILDERS for builder in _used_by(family, name))},
                  stream_batches=family.data.stream_batches)
    if family.data.stream_batches:
        recipe.update(batch_size=options.batch_size, replicas=replicas)
    return recipe


def _used_by(family, name):
    return next(option.used_by for option in family.options if option.name == name)


def _threads_per_worker(options):
    """TensorFlow threads of one worker: the cores shared by the local workers (DirectRunner), else 0
    (TensorFlow's own choice, on a worker machine of another runner)."""
    if options.runner != "DirectRunner":
        return 0
    return max(1, (os.cpu_count() or 1) // options.local_workers())


def _read_lines(path):
    if not path.is_file():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    path.unlink()
    return lines


def _collect(staging, options):
    """(one summary per written shard, BadRecords of the corpus); raises the first error found."""
    shutil.rmtree(staging / PARTS_DIR, ignore_errors=True)
    errors = _read_lines(staging / ERRORS_FILE)
    if errors:
        raise CorpusError(sorted(errors, key=lambda e: e["file"])[0]["error"])
    bad = BadRecords(skip=True)
    for report in _read_lines(staging / REPORTS_FILE):
        bad.merge(BadRecords(skip=True, count=report["skipped"], examples=report["examples"]))
    summaries = {summary["file"]: summary for summary in _read_lines(staging / SUMMARY_FILE)}
    return [summaries[name] for name in sorted(summaries)], bad


def _manifest(format_name, version, recipe, fingerprint, summaries, bad, files, options, seconds):
    features = summaries[0]["features"]
    if any(summary["features"] != features for summary in summaries):
        raise CorpusError("the shards came out with different features: " + ", ".join(
            f"{s['file']}: {s['features']}" for s in summaries[:2]))
    totals = {key: sum(summary[key] for summary in summaries)
              for key in ("instances", "documents", "sentences", "tokens", "corpus_tokens", "reached_tokens")}
    totals["reached_tokens"] = round(totals["reached_tokens"])  # one build's share of the instances' tokens
    return {
        "format": format_name, "version": version, "recipe": recipe, "tokenizer_sha256": fingerprint,
        "features": features, **totals,
        "shards": [{"file": s["file"], "instances": s["instances"], "documents": s["documents"]}
                   for s in summaries],
        "sources": [str(f) for f in files], "corpus_format": options.corpus_format,
        "skipped_records": {"count": bad.count, "examples": bad.examples},
        "runner": options.runner, "prepare_seconds": round(seconds, 3),
    }


def _sample(files, options):
    """Documents of about --tokenizer-sample-mb of text, taken evenly from the files (the first
    documents of each): the tokenizer's training text, and where the fill-in examples are held out."""
    budget = options.tokenizer_sample_mb * 2**20
    share = max(budget / len(files), 64 * 2**10)
    documents, taken = [], 0
    for file in files:
        in_file = 0
        for document in iter_documents(file, options.corpus_format, options.text_field,
                                       BadRecords(skip=options.skip_bad_records)):
            documents.append(document)
            size = sum(len(sentence) + 1 for sentence in document)
            in_file, taken = in_file + size, taken + size
            if in_file >= share or taken >= budget:
                break
        if taken >= budget:
            break
    if not documents:
        raise CorpusError("The corpus has no text (only empty or whitespace-only files): "
                          + ", ".join(map(str, files)))
    return documents


def _tokenizer(family, sample, options):
    """--tokenizer (a saved tokenizer, a run folder or prepared data holding one, a Hugging Face folder
    with vocab.txt, spiece.model, vocab.json + merges.txt or tokenizer.json, or a bare WordPiece
    vocab.txt), or one trained on the sample."""
    if options.tokenizer:
        given = Path(options.tokenizer)
        _say(options, f"tokenizer: {given}")
        if given.is_file():
            return WordPieceTokenizer(given)
        folder = given / TOKENIZER_DIR if (given / TOKENIZER_DIR).is_dir() else given
        if (folder / TOKENIZER_CONFIG).is_file() and "type" in json.loads((folder / TOKENIZER_CONFIG).read_text()):
            return load_tokenizer(folder)
        tokenizer = load_hf_tokenizer(folder, model_vocab_size=2**31, family=family) if folder.is_dir() else None
        if tokenizer is None:
            raise ConfigError(f"--tokenizer {given}: no tokenizer there (a saved tokenizer, a run folder, a "
                              "Hugging Face folder or a vocab.txt)")
        return tokenizer
    context = family.run_context(options.family_options)  # a student reads its teacher's vocabulary
    if context.tokenizer is not None:
        _say(options, f"tokenizer: {context.record.get('teacher')}'s")
        return context.tokenizer
    sentences = [sentence for document in sample for sentence in document]
    size = sum(len(sentence) + 1 for sentence in sentences) / 2**20
    _say(options, f"training a vocabulary of up to {options.vocab_size} tokens on {size:.1f} MB of text")
    return family.train_tokenizer(sentences, options.vocab_size)


def _report(manifest, options):
    skipped = manifest["skipped_records"]
    _say(options, f"{manifest['instances']} instances from {manifest['documents']} documents "
                  f"({manifest['tokens']} tokens) in {len(manifest['shards'])} shards, "
                  f"{manifest['prepare_seconds']:.1f} s; manifest: {Path(options.out) / 'manifest.json'}")
    _say(options, coverage_line(manifest["reached_tokens"], manifest["corpus_tokens"]))
    if skipped["count"]:
        _say(options, f"skipped {skipped['count']} bad records, for example: " + "; ".join(skipped["examples"]))


def _last_line(error):
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _say(options, message):
    if options.verbose:
        print(message, flush=True)
