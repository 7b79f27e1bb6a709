"""The fine-tuning entry point: run folder + labeled data -> task model -> best dev epoch -> test -> export.

`finetune(FinetuneOptions(...))` is what `bertology finetune` runs. The task
kind (classification, tagging, spans) comes from the data, the encoder and
tokenizer from the run folder, and the input layout from the run's family,
so the same loop serves every family and every kind of task.
"""

import dataclasses
import copy
import math
import time
import warnings
from datetime import datetime
from pathlib import Path

import keras
import tensorflow as tf

from keras_bertology.atomic import atomic_file
from keras_bertology.convert import hub
from keras_bertology.errors import CheckpointError, ConfigError, warn
from keras_bertology.export.task_model import export_task_model
from keras_bertology.finetune.shared_work import recipe_key, split_key
from keras_bertology.finetune.datasets import case_variants, load_task, sample_training_examples
from keras_bertology.finetune.options import FinetuneOptions  # noqa: F401  re-exported
from keras_bertology.finetune.report import plot_finetuning, results_markdown
from keras_bertology.finetune.tasks import TASK_KINDS
from keras_bertology.finetune.text_to_text import text_to_text_kind
from keras_bertology.layers.remat import set_remat
from keras_bertology.models.registry import get_family
from keras_bertology.output_paths import FINETUNING, claim_outputs
from keras_bertology.runs import load_run_model
from keras_bertology.engine.callbacks import StopOnNonFiniteStepLoss
from keras_bertology.engine.distributed_fit import build_before_tracing, replica_batch_size
from keras_bertology.engine.optimization import bert_adamw, layerwise_decay
from keras_bertology.engine.run_metrics import write_metrics
from keras_bertology.engine.strategy import make_strategy


def finetune(options, shared=None):
    """Fine-tune end to end; returns the results dict also written to RUN/results.json.

    `shared` (a `SharedWork`): lend the run a model compiled and splits encoded by earlier runs, and
    keep this run's for the next (a study's many runs)."""
    options.validate()
    if options.from_dir.startswith(hub.HANDLE_PREFIX):  # fetched and converted before any output is claimed
        options = dataclasses.replace(options, from_dir=str(hub.converted_run(hub.parse_handle(options.from_dir))))
    out = Path(options.out or Path("runs") / f"finetune-{Path(options.task).name}-{datetime.now():%Y%m%d-%H%M%S}")
    export_dir = None if options.no_export or options.results_only else Path(options.export or Path("savedmodels") / out.name)
    with claim_outputs(out, FINETUNING, export_dir):
        return _finetune(options, out, export_dir, shared)


def _finetune(options, out, export_dir, shared):
    task = (shared.task(options.task, options.max_examples, load_task) if shared is not None
            else load_task(options.task, options.max_examples))
    if options.train_examples is not None:
        task = sample_training_examples(task, options.train_examples, options.seed)
    for group in case_variants(task.labels):
        warn(f"labels {', '.join(map(repr, group))} differ only in case: they are {len(group)} classes; write "
             "them alike if they are one")
    strategy = make_strategy(options.strategy)
    replica_batch_size(options.batch_size, strategy)
    # Several replicas (and TPUs) take whole global batches: the last, partial one of an epoch is dropped.
    whole_batches = strategy.num_replicas_in_sync > 1 or isinstance(strategy, tf.distribute.TPUStrategy)
    steps_per_epoch = _steps_per_epoch(len(task.splits["train"]), options.batch_size, whole_batches)
    with strategy.scope():
        run, family, seq_len = _load_encoder(options)
        if options.learning_rate is None:
            options = dataclasses.replace(options, learning_rate=family.training.finetune_learning_rate)
        kind = text_to_text_kind(task, run.pretrainer, run.tokenizer, options.head) or TASK_KINDS[task.kind]
        # A text-to-text kind trains the pretrainer (decoder and head); the others a head on the encoder alone.
        backbone = run.pretrainer if kind.generates else run.backbone.encoder_backbone()
        _say(options, f"task {task.name} ({task.kind}{', text-to-text' if backbone is run.pretrainer else ''}): "
                      f"{task.source}")
        if task.untrained_labels:
            print(f"warning: {_untrained_text(task)}", flush=True)
        encoded = _encode_splits(kind, task, family, run, seq_len, options, shared, list(backbone.input))
        if options.random_init:
            backbone = backbone.__class__.from_config(backbone.get_config())
        model = kind.build_model(backbone, task, family, options.summary or family.summary_for(run.tokenizer))
        key = recipe_key(backbone, task, seq_len, options, steps_per_epoch) if shared is not None else None
        kept = shared.take_model(key, model) if key else None
        if kept is not None:
            model = kept
        else:
            multipliers = layerwise_decay(getattr(backbone, "backbone", backbone), options.layer_decay) \
                if options.layer_decay < 1 else None
            model.compile(optimizer=bert_adamw(options.learning_rate, options.epochs * steps_per_epoch,
                                               warmup_fraction=options.warmup, lr_multipliers=multipliers),
                          loss=kind.loss())
            if key:
                shared.keep_model(key, model)
        set_remat(model, options.remat)
    _say(options, f"encoder: {run.family} from {options.from_dir}"
                  + (" (weights re-initialised)" if options.random_init else "")
                  + f", {backbone.count_params():,} parameters; {options.epochs} epochs of {steps_per_epoch} "
                  f"steps, batch {options.batch_size}, sequence length {seq_len}")

    started = time.perf_counter()
    history, best, losses = _train_keeping_best(model, kind, task, encoded, options, whole_batches)
    train_seconds = time.perf_counter() - started
    test = _evaluate(kind, model, encoded["test"], task, "test", options.batch_size)

    # Results first: an export that fails (a full disk) must not lose them.
    if not options.results_only:
        with atomic_file(out / "model.keras") as staging:
            model.save(staging)
    results = _results(options, task, kind, run, seq_len, history, best, test, train_seconds, losses,
                       export_dir, backbone.count_params())
    write_metrics(out / "results.json", results)
    with atomic_file(out / "results.md") as staging:
        staging.write_text(results_markdown(results))
    plot_finetuning(results, out / "training_curve.png")
    _say(options, f"best dev epoch {best['epoch']}; test " + _scores_text(test))
    _say(options, f"results: {out}/results.json, results.md, training_curve.png"
                  + ("" if options.results_only else f"; model: {out}/model.keras"))
    if export_dir:
        export_task_model(model, kind, task, family, run.tokenizer, seq_len, export_dir, options.length_buckets,
                          options.serving_xla)
        _say(options, f"SavedModel: {export_dir}")
    return results


def _load_encoder(options):
    """(run, family, sequence length) of the run folder in --from, refused when it cannot take raw text."""
    # Seeding clears TensorFlow's kernel cache, which would drop a SentencePiece tokenizer's resource
    # created before it: seed first, then load the tokenizer.
    keras.utils.set_random_seed(options.seed)
    run = load_run_model(options.from_dir)
    if run.tokenizer is None:
        raise CheckpointError(f"{options.from_dir} has no tokenizer that runs in-graph, so raw text cannot be "
                              "fed to it; convert a checkpoint that ships its tokenizer")
    seq_len = options.seq_len or run.seq_len
    max_positions = getattr(run.backbone, "max_positions", None)
    if max_positions is not None and seq_len > max_positions:
        raise ConfigError(f"--seq-len {seq_len} is above the {max_positions} positions of the encoder in "
                          f"{options.from_dir}")
    return run, get_family(run.family), seq_len


def _encode_splits(kind, task, family, run, seq_len, options, shared, input_names):
    """{split: arrays} of the model's `input_names`; dev and test come from `shared` when an earlier run
    encoded them (the training split may be a per-run draw)."""
    def encode(split):
        return kind.encode(task, task.splits[split], family, run.tokenizer, seq_len, input_names)

    return {split: encode(split) if shared is None or split == "train" else
            shared.encoded(split_key(options, split, seq_len, input_names), lambda split=split: encode(split))
            for split in task.splits}


def _steps_per_epoch(examples, batch_size, whole_batches):
    if whole_batches and examples < batch_size:
        raise ConfigError(f"{examples} training examples cannot fill one global batch of {batch_size} on several "
                          "replicas; lower --batch-size")
    return examples // batch_size if whole_batches else math.ceil(examples / batch_size)


def _train_keeping_best(model, kind, task, encoded, options, whole_batches):
    """Train epoch by epoch, scoring dev after each; leaves `model` with the best epoch's weights.
    With `options.last_epoch`, train all epochs in one go and score dev once, keeping the last.
    Returns (history, best epoch record, step losses). The first step whose loss is not finite ends
    training with a TrainingError, before anything is written."""
    history, best, losses = [], None, _StepLosses()
    train = _train_dataset(encoded["train"], options, whole_batches)  # built once: each epoch gets a new order
    diverged = StopOnNonFiniteStepLoss(int(train.cardinality()), advice=(
        f"Fine-tune with a lower --learning-rate (this run's was {options.learning_rate:g})"))
    ends = [options.epochs] if options.last_epoch else range(1, options.epochs + 1)
    build_before_tracing(model, train)
    start = 0
    for end in ends:
        with warnings.catch_warnings():  # a classifier that reads no pooler (--summary) leaves it untrained
            warnings.filterwarnings("ignore", message=r"Gradients do not exist for variables \['pooler/")
            fitted = model.fit(train, epochs=end, initial_epoch=start,
                               callbacks=[diverged, losses], shuffle=False, verbose=options.verbose)
        start = end
        dev = _evaluate(kind, model, encoded["dev"], task, "dev", options.batch_size)
        history.append({"epoch": end, "train_loss": float(fitted.history["loss"][-1]), "dev": dev})
        _say(options, f"epoch {end}: dev " + _scores_text(dev))
        if best is None or dev[kind.primary_metric] > best["dev"][kind.primary_metric]:
            best = {"epoch": end, "dev": dev, "weights": copy.deepcopy(model.get_weights())}
    model.set_weights(best["weights"])
    return history, best, losses


class _StepLosses(keras.callbacks.Callback):
    """The loss of every training step, for the curve (Keras logs a running mean within each epoch,
    from which each step's own loss follows)."""

    def __init__(self):
        super().__init__()
        self.records, self._mean = [], 0.0

    def on_train_batch_end(self, batch, logs=None):
        mean = float(logs["loss"])
        self.records.append((batch + 1) * mean - batch * (self._mean if batch else 0.0))
        self._mean = mean


def _train_dataset(encoded, options, whole_batches):
    dataset = tf.data.Dataset.from_tensor_slices((encoded["inputs"], encoded["targets"], encoded["weights"]))
    size = len(encoded["weights"]) if not isinstance(encoded["weights"], dict) else \
        len(next(iter(encoded["weights"].values())))
    return dataset.shuffle(size, seed=options.seed, reshuffle_each_iteration=True).batch(
        options.batch_size, drop_remainder=whole_batches)


def _evaluate(kind, model, encoded, task, split, batch_size):
    return kind.score(task, task.splits[split], kind.predict(model, encoded, task, task.splits[split], batch_size))


def _untrained_text(task):
    return (f"labels {', '.join(map(repr, task.untrained_labels))} of dev/test have no example in the train split "
            "(all went to the carved-out dev), so the model cannot learn them; add examples or a dev file")


def _scores_text(scores):
    return ", ".join(f"{name} {value:.4f}" for name, value in scores.items())


def _say(options, message):
    if options.verbose:
        print(message, flush=True)


def _results(options, task, kind, run, seq_len, history, best, test, train_seconds, losses, export_dir,
             parameters):
    return {
        "task": task.name,
        "kind": task.kind,
        "pairs": bool(task.pairs),  # whether each example is two texts
        "data": task.source,
        "examples": {split: len(examples) for split, examples in task.splits.items()},
        "labels": list(task.labels),
        "untrained_labels": list(task.untrained_labels),
        "encoder": {"from": str(options.from_dir), "family": run.family, "preset": run.preset,
                    "parameters": parameters, "random_init": options.random_init},
        "recipe": {"epochs": options.epochs, "batch_size": options.batch_size,
                   "learning_rate": options.learning_rate, "warmup": options.warmup,
                   "layer_decay": options.layer_decay, "seq_len": seq_len, "seed": options.seed,
                   "strategy": options.strategy, "summary": options.summary, "remat": options.remat,
                   "head": "text-to-text" if kind.generates else "encoder"},
        "primary_metric": kind.primary_metric,
        "best_epoch": best["epoch"],
        "dev": best["dev"],
        "test": test,
        "scores": {f"{split}.{name}": value for split, scores in (("dev", best["dev"]), ("test", test))
                   for name, value in scores.items()},
        "history": history,
        "step_losses": losses.records,
        "train_seconds": train_seconds,
        "export_dir": str(export_dir) if export_dir else None,
    }
