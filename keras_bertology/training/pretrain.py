"""The pretraining entry point: corpus -> tokenizer -> instances -> masked batches -> fit -> export.

`pretrain(PretrainOptions(...))` is what `bertology pretrain` runs; every
family goes through the same steps, the family only choosing its tokenizer,
instance builder, masking and objectives (see `models.family.ModelFamily`).
"""

import dataclasses
import math
import time
from datetime import datetime
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_bertology.atomic import atomic_directory
from keras_bertology.data.corpus import read_corpus
from keras_bertology.data.instances import build_nsp_instances, pack_sentences
from keras_bertology.data.masking import DynamicMasker, MaskingConfig
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.data.static_masking import write_static_tfrecords
from keras_bertology.data.tokenizers import load_tokenizer, train_sentencepiece, train_wordpiece
from keras_bertology.errors import ConfigError
from keras_bertology.export import export_saved_model
from keras_bertology.models import check_preset, get_family
from keras_bertology.runs import RunModel, save_run_model
from keras_bertology.training.callbacks import CheckpointEveryWindow, MetricHistory
from keras_bertology.training.checkpoints import RunCheckpoints
from keras_bertology.training.optimization import bert_adamw
from keras_bertology.training.report import objective_summary, plot_training_curves, write_metrics
from keras_bertology.training.strategy import make_strategy

PRECISIONS = ("float32", "mixed_bfloat16")
MASKINGS = ("static", "dynamic")
PACKINGS = ("full-sentences", "doc-sentences")


@dataclasses.dataclass
class PretrainOptions:
    """Everything `bertology pretrain` accepts; defaults give the quick CPU run."""

    model: str = "bert"
    preset: str = "bert-tiny"
    corpus: list | None = None
    steps: int = 600
    batch_size: int = 32
    seq_len: int = 128
    out: str | None = None
    export: str | None = None
    vocab_size: int = 8000
    masking: str | None = None
    packing: str | None = None
    whole_word: bool = False
    dupe_factor: int = 10
    max_predictions: int = 20
    learning_rate: float = 1e-3
    log_every: int = 50
    precision: str = "float32"
    strategy: str = "default"
    seed: int = 0
    resume: bool = False
    verbose: int = 1

    def validate(self):
        """Raise ConfigError for values that cannot work, before any slow step runs."""
        family = get_family(self.model)
        check_preset(family, self.preset)
        positive = ("steps", "batch_size", "seq_len", "vocab_size", "dupe_factor",
                    "max_predictions", "log_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(self, name)})")
        max_positions = family.presets[self.preset]["config"]["max_positions"]
        if self.seq_len > max_positions:
            raise ConfigError(
                f"--seq-len {self.seq_len} is above the {max_positions} positions of {self.preset}"
            )
        if self.seq_len < 8:
            raise ConfigError(f"--seq-len {self.seq_len} is too short; use at least 8")
        if self.masking not in (None, *MASKINGS):
            raise ConfigError(f"--masking must be one of {', '.join(MASKINGS)}")
        if self.packing is not None:
            if self.packing not in PACKINGS:
                raise ConfigError(f"--packing must be one of {', '.join(PACKINGS)}")
            if family.instances == "sentence_pairs":
                raise ConfigError(
                    f"--packing applies to MLM-only families; {family.name} builds sentence pairs for NSP"
                )
        if self.precision not in PRECISIONS:
            raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}")
        if self.learning_rate <= 0:
            raise ConfigError("--learning-rate must be positive")
        return family


def pretrain(options):
    """Run pretraining end to end; returns the metrics dict also written to metrics.json."""
    family = options.validate()
    strategy = make_strategy(options.strategy)
    keras.utils.set_random_seed(options.seed)
    run_name = Path(options.out).name if options.out else _default_run_name(options)
    run_dir = Path(options.out or Path("runs") / run_name)
    export_dir = Path(options.export or Path("savedmodels") / run_name)
    checkpoints = RunCheckpoints(run_dir)
    checkpoints.start(options)
    _say(options, f"run folder: {run_dir}")

    documents = read_corpus(options.corpus)
    _say(options, f"corpus: {len(documents)} documents, {sum(map(len, documents))} sentences")
    tokenizer = _tokenizer_for_run(family, documents, checkpoints, options)
    instances = _build_instances(family, documents, tokenizer, options)
    _say(options, f"instances: {len(instances['token_ids'])} sequences of {options.seq_len} tokens")
    masking = options.masking or family.masking
    dataset = _masked_dataset(instances, tokenizer, masking, run_dir, options)

    windows = math.ceil(options.steps / options.log_every)
    steps_per_window = min(options.log_every, options.steps)
    total_steps = windows * steps_per_window
    with strategy.scope():
        pretrainer, done_steps = _pretrainer_for_run(family, tokenizer, checkpoints, total_steps, options)
    backbone = pretrainer.backbone
    _say(options, f"model: {options.model} {options.preset}, {backbone.count_params():,} encoder parameters, "
                  f"{masking} masking, {total_steps} steps of batch {options.batch_size}"
                  + (f", resuming after step {done_steps}" if done_steps else ""))

    history = MetricHistory(steps_per_window, options.batch_size, checkpoints.load_history())
    started = time.perf_counter()
    pretrainer.fit(
        dataset.map(pretrainer.split_features),
        epochs=windows,
        initial_epoch=done_steps // steps_per_window,
        steps_per_epoch=steps_per_window,
        callbacks=[
            history,
            CheckpointEveryWindow(checkpoints, history),
            keras.callbacks.TensorBoard(str(run_dir / "logs"), update_freq="epoch"),
        ],
        shuffle=False,  # the input pipeline shuffles
        verbose=options.verbose,
    )
    train_seconds = time.perf_counter() - started

    run = RunModel(options.model, backbone, tokenizer, options.seq_len, pretrainer, options.preset)
    save_run_model(run_dir, run)
    export_saved_model(run, export_dir)
    metrics = _metrics(options, pretrainer, history.records, total_steps, train_seconds, export_dir)
    metrics.update(masking=masking, instances=_instance_kind(family, options))
    write_metrics(run_dir / "metrics.json", metrics)
    plot_training_curves(history.records, pretrainer.objectives, run_dir / "loss_curve.png",
                         f"{options.model} {options.preset} on {_corpus_label(options)}")
    _print_summary(options, metrics, run_dir)
    return metrics


def _tokenizer_for_run(family, documents, checkpoints, options):
    """The run's own vocabulary when resuming, else one trained now and kept in the run folder."""
    if options.resume and (checkpoints.tokenizer_dir / "tokenizer.json").is_file():
        return load_tokenizer(checkpoints.tokenizer_dir)
    tokenizer = _train_tokenizer(family, documents, options)
    with atomic_directory(checkpoints.tokenizer_dir) as staging:
        tokenizer.save(staging)
    return tokenizer


def _pretrainer_for_run(family, tokenizer, checkpoints, total_steps, options):
    """(compiled pretrainer, steps already done): from the newest checkpoint, or new."""
    if checkpoints.latest() is not None:
        return checkpoints.load_model()
    backbone = family.backbone_cls(**family.backbone_config(
        options.preset, vocab_size=tokenizer.vocab_size, dtype=options.precision))
    pretrainer = family.pretrainer_cls(backbone)
    pretrainer.compile(optimizer=bert_adamw(options.learning_rate, total_steps))
    return pretrainer, 0


def _default_run_name(options):
    return f"{options.model}-{options.preset}-{datetime.now():%Y%m%d-%H%M%S}"


def _corpus_label(options):
    return "the default corpus" if not options.corpus else ", ".join(map(str, options.corpus))


def _say(options, message):
    if options.verbose:
        print(message, flush=True)


def _train_tokenizer(family, documents, options):
    sentences = [sentence for document in documents for sentence in document]
    _say(options, f"training a {family.tokenizer} vocabulary of up to {options.vocab_size} tokens")
    if family.tokenizer == "wordpiece":
        return train_wordpiece(sentences, options.vocab_size)
    return train_sentencepiece(sentences, options.vocab_size, model_type="bpe", byte_fallback=True)


def tokenize_documents(documents, tokenizer, batch_size=8192):
    """Documents of sentences -> documents of int32 id arrays, tokenized in large in-graph batches."""
    sentences = [sentence for document in documents for sentence in document]
    ids = []
    for start in range(0, len(sentences), batch_size):
        ragged = tokenizer.tokenize(tf.constant(sentences[start:start + batch_size]))
        ids.extend(np.asarray(row, dtype=np.int32) for row in ragged.numpy())
    tokenized, offset = [], 0
    for document in documents:
        tokenized.append(ids[offset:offset + len(document)])
        offset += len(document)
    return tokenized


def _build_instances(family, documents, tokenizer, options):
    tokenized = tokenize_documents(documents, tokenizer)
    specials = dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id, pad_id=tokenizer.pad_id)
    if family.instances == "sentence_pairs":
        rng = np.random.default_rng(options.seed)
        return build_nsp_instances(tokenized, options.seq_len, rng=rng, **specials)
    cross = _instance_kind(family, options) == "full_sentences"
    return pack_sentences(tokenized, options.seq_len, cross_documents=cross, **specials)


def _instance_kind(family, options):
    """The family's instance builder, or the --packing the user chose instead."""
    return options.packing.replace("-", "_") if options.packing else family.instances


def _masked_dataset(instances, tokenizer, masking, run_dir, options):
    masker = DynamicMasker(
        MaskingConfig(max_predictions=options.max_predictions, whole_word=options.whole_word),
        vocab_size=tokenizer.vocab_size,
        mask_id=tokenizer.mask_id,
        pad_id=tokenizer.pad_id,
        special_ids=tokenizer.special_ids,
        word_start_table=tokenizer.word_start_table,
    )
    if masking == "dynamic":
        return make_dataset(instances, options.batch_size, masker=masker, seed=options.seed)
    path = run_dir / "data" / f"static_masked_x{options.dupe_factor}.tfrecord"
    if options.resume and path.is_file():
        _say(options, f"static masking: reusing {path}")
    else:
        _say(options, f"static masking: writing {options.dupe_factor} masked copies to {path}")
        write_static_tfrecords(instances, masker, options.dupe_factor, str(path))
    return make_dataset(None, options.batch_size, static_path=str(path), seed=options.seed)


def _metrics(options, pretrainer, records, total_steps, train_seconds, export_dir):
    steady = [record["samples_per_second"] for record in records[1:]] or [records[0]["samples_per_second"]]
    return {
        "model": options.model,
        "preset": options.preset,
        "whole_word": options.whole_word,
        "steps": total_steps,
        "batch_size": options.batch_size,
        "seq_len": options.seq_len,
        "precision": options.precision,
        "objectives": objective_summary(records, pretrainer.objectives),
        "samples_per_second": float(np.median(steady)),
        "train_seconds": train_seconds,
        "export_dir": str(export_dir),
        "history": records,
    }


def _print_summary(options, metrics, run_dir):
    mlm = metrics["objectives"]["mlm"]
    lines = [
        f"done: {metrics['steps']} steps in {metrics['train_seconds']:.0f} s "
        f"({metrics['samples_per_second']:.1f} samples/s)",
        f"MLM loss {mlm['first']['loss']:.3f} -> {mlm['last']['loss']:.3f}, "
        f"MLM accuracy {mlm['first']['accuracy']:.3f} -> {mlm['last']['accuracy']:.3f}",
    ]
    if "nsp" in metrics["objectives"]:
        nsp = metrics["objectives"]["nsp"]
        lines.append(f"NSP accuracy {nsp['first']['accuracy']:.3f} -> {nsp['last']['accuracy']:.3f}")
    lines += [f"metrics and loss curve: {run_dir}", f"SavedModel: {metrics['export_dir']}"]
    _say(options, "\n".join(lines))
