"""The pretraining entry point: corpus -> tokenizer -> instances -> masked batches -> fit -> export.

`pretrain(PretrainOptions(...))` is what `bertology pretrain` runs; every
family goes through the same steps, the family only choosing its tokenizer,
instance builder, masking and objectives (see `models.family.ModelFamily`).
"""

import atexit
import dataclasses
import functools
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_bertology.atomic import atomic_directory, atomic_file
from keras_bertology.data.corpus import BadRecords, read_corpus
from keras_bertology.data.held_out_lines import hold_out_sentences
from keras_bertology.data.instances import coverage_line
from keras_bertology.data.knowledge_units import MARKER_FILE, level_boundaries, marking_line
from keras_bertology.data.pipeline import make_dataset, static_records_read
from keras_bertology.data.recipe import (
    build_instances, build_masker, copies_of, corpus_token_counts, instance_coverage, masking_of, tokenize_documents,
    unit_marker, units_of)
from keras_bertology.data.shards import (
    TOKENIZER_DIR, read_manifest, sample_instances, shard_dataset, tokenizer_fingerprint)
from keras_bertology.data.static_masking import write_static_tfrecords
from keras_bertology.engine.callbacks import (
    CheckpointEveryWindow, MetricHistory, SnapshotAtSteps, StopAtCheckpointOnSignal, StopOnNonFiniteLoss)
from keras_bertology.engine.checkpoints import RunCheckpoints, weights_digest
from keras_bertology.engine.distributed_fit import fit, replica_batch_size
from keras_bertology.engine.keras_distribution import KerasDistribution, outside_distribution
from keras_bertology.engine.model_batches import micro_batches, model_batches
from keras_bertology.engine.optimization import layerwise_decay, make_optimizer
from keras_bertology.engine.precision import dtype_policy_scope, resolve_precision
from keras_bertology.engine.run_metrics import write_metrics
from keras_bertology.engine.strategy import data_parallel_devices, is_chief, lay_out, make_strategy, strategy_name
from keras_bertology.engine.xla import resolve_jit_compile
from keras_bertology.errors import ConfigError, CorpusError, warn
from keras_bertology.export import export_saved_model
from keras_bertology.export.from_other_backend import export_in_tensorflow
from keras_bertology.layers.remat import set_remat
from keras_bertology.models.family import RunContext
from keras_bertology.output_paths import PRETRAINING_RUN, claim_outputs
from keras_bertology.outputs import FinishedRun, every_run_entries, kinds_of
from keras_bertology.pretraining.held_out import (
    KeepTrainingState, eval_dataset, eval_records, eval_windows, split_off_eval_documents)
from keras_bertology.pretraining.init_from import init_context, load_initial_weights
from keras_bertology.pretraining.options import PretrainOptions  # noqa: F401  re-exported
from keras_bertology.pretraining.report import (
    chance_levels, labelling_stage, objective_summary, plot_training_curves, summary_text)
from keras_bertology.runs import RunModel, load_run_model, save_run_model
from keras_bertology.tokenizers.saved import load_tokenizer


def pretrain(options, given=()):
    """Run pretraining end to end; returns the metrics dict also written to metrics.json.

    With `options.data` (shards of `bertology prepare`) the data options come
    from its manifest; `given` names the options the user set explicitly,
    which must then agree with it. Bad input is refused before anything is
    written; a run that fails before its first checkpoint removes the run
    folder it created.
    """
    # First: a multi-worker strategy must configure TensorFlow before anything runs (reading shards does).
    strategy = make_strategy(options.strategy)
    manifest = None
    if options.data:
        manifest = read_manifest(options.data)
        options = options.with_prepared_data(manifest, given)
    options = options.with_init_source()
    family = options.validate()
    options.check_given(family, given)
    for note in family.rounding_notes(options.family_options):
        warn(note)
    lay_out(strategy, options.model_parallel, family.training.model_parallel_layout)
    # The policy that runs, not "auto": recorded in options.json, so a resumed run is compared with it.
    options = dataclasses.replace(options, precision=resolve_precision(options.precision, strategy))
    run_name = Path(options.out).name if options.out else _default_run_name(options)
    run_dir = Path(options.out or Path("runs") / run_name)
    export_dir = None if options.no_export else Path(options.export or Path("savedmodels") / run_name)
    chief = is_chief(strategy)
    with claim_outputs(run_dir, PRETRAINING_RUN, export_dir, writer=chief) as run_claim:  # the chief writes
        checkpoints = RunCheckpoints(run_dir, writer=chief)
        if options.resume and checkpoints.latest() is None:
            warn(f"--resume: {run_dir} holds no checkpoint to resume from; starting a fresh run")
        source = _Source(manifest) if manifest else _Source.read(options)
        try:
            try:
                with dtype_policy_scope(options.precision):
                    return _pretrain(family, options, source, run_dir, export_dir, checkpoints, strategy)
            except tf.errors.DataLossError as error:  # a damaged record inside a shard (their headers were checked)
                raise CorpusError(f"a record of the shards in {options.data} is damaged "
                                  f"({error.message.splitlines()[0]}); prepare the data again (a run with "
                                  "checkpoints can then --resume)") from None
        except BaseException:
            if chief and run_claim.created and checkpoints.latest() is None:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise


class _Source:
    """Where a run's instances come from: a corpus read into memory now, or prepared shards."""

    def __init__(self, manifest=None, documents=None):
        self.manifest, self.documents = manifest, documents

    @classmethod
    def read(cls, options):
        bad = BadRecords(skip=options.skip_bad_records)
        documents = read_corpus(options.corpus, options.corpus_format, options.text_field, bad,
                                say=lambda line: _say(options, line))
        if bad.count:
            _say(options, f"skipped {bad.count} bad records, for example: " + "; ".join(bad.examples))
        return cls(documents=documents)


def _pretrain(family, options, source, run_dir, export_dir, checkpoints, strategy):
    """The run in its phases. Every worker of a multi-worker run trains; only the chief
    (`checkpoints.writer`) writes the run folder, its metrics and the export."""
    replicas = strategy.num_replicas_in_sync
    replica_batch = replica_batch_size(options.batch_size // options.accumulate, strategy, options.accumulate)
    checkpoints.start(options)
    keras.utils.set_random_seed(options.seed)
    _say(options, f"run folder: {run_dir}")
    context = _run_context(family, options, checkpoints)
    data = _read_data(family, options, source, run_dir, checkpoints, context, replicas)
    pretrainer, done_steps = _build_model(family, options, data.tokenizer, checkpoints, strategy, replica_batch,
                                          context)
    batches = _batches(family, options, source, data, pretrainer, done_steps, run_dir, checkpoints, replicas)
    fitted = _fit(family, options, pretrainer, data.tokenizer, batches, done_steps, run_dir, checkpoints, strategy)
    if not checkpoints.writer:  # another worker of the cluster: the chief saves and exports
        return _worker_result(options, pretrainer, fitted.history)
    run, pretrainer = _save_run(options, pretrainer, data.tokenizer, run_dir, strategy)
    metrics = _metrics(family, options, pretrainer, data, context, fitted, export_dir, strategy)
    kinds = kinds_of(pretrainer)
    finished = FinishedRun(pretrainer, data.tokenizer, data.held_out, options.seed, options.seq_len,
                           token_counts=data.token_counts)
    metrics.update(_examples(kinds, finished, from_export=False))
    _write_report(options, metrics, fitted.history, pretrainer, run_dir)
    if export_dir:
        _export(run, run_dir, export_dir, options)
        metrics.update(_examples(kinds, dataclasses.replace(finished, export_dir=export_dir), from_export=True))
        write_metrics(run_dir / "metrics.json", metrics)  # with the examples the export serves
    _say(options, summary_text(metrics, run_dir, kinds))
    return metrics


@dataclasses.dataclass
class _RunData:
    """What the data phase hands on: the tokenizer and instances to train on, the sentences held out for the
    end-of-run examples, the held-out evaluation's documents (tokenized; None without --eval-every) and
    metrics.json's account of the marked phrases and entities, where there are any."""
    tokenizer: object
    instances: dict
    held_out: list
    eval_tokenized: list | None = None
    units_record: dict = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def token_counts(self):
        """How often each id occurs in the instances, for a masking stage that weighs tokens by frequency:
        counted once, when a masker is first built, for the run's masker and the held-out one alike."""
        return corpus_token_counts(self.instances, self.tokenizer)


def _read_data(family, options, source, run_dir, checkpoints, context, replicas):
    """Data phase: the tokenizer and the instances, from prepared shards or from the corpus read now."""
    if source.manifest:
        return _prepared_data(options, source.manifest, checkpoints, context, replicas)
    return _corpus_data(family, options, source.documents, run_dir, checkpoints, context, replicas)


def _prepared_data(options, manifest, checkpoints, context, replicas):
    """The shards' tokenizer and a sample of their instances (for the chance levels); their streams must be
    laid out for this run's replicas."""
    tokenizer = _prepared_tokenizer(options, checkpoints, manifest, context)
    if manifest["recipe"].get("stream_batches") and manifest["recipe"]["replicas"] != replicas:
        raise ConfigError(f"the shards in {options.data} lay their streams out for "
                          f"{manifest['recipe']['replicas']} replicas, and this run has {replicas}; "
                          "prepare them with --replicas " + str(replicas))
    instances, held_out = sample_instances(options.data, manifest), manifest.get("held_out", [])
    _say(options, f"data: {options.data}: {manifest['instances']} instances in {len(manifest['shards'])} "
                  f"shards, from {manifest['documents']} documents")
    if "corpus_tokens" in manifest:  # not in the manifests of earlier versions
        _say(options, coverage_line(manifest["reached_tokens"], manifest["corpus_tokens"]))
    return _RunData(tokenizer, instances, held_out)


def _corpus_data(family, options, documents, run_dir, checkpoints, context, replicas):
    """The corpus split into training documents, the end-of-run examples' sentences and (--eval-every) the
    evaluation's documents, each drawn with the run's seed; then its tokenizer and instances."""
    eval_documents = []
    if options.eval_every:
        documents, eval_documents = split_off_eval_documents(documents, np.random.default_rng(options.seed))
    documents, held_out = hold_out_sentences(documents, np.random.default_rng(options.seed))
    _say(options, f"corpus: {len(documents)} documents, {sum(map(len, documents))} sentences "
                  f"({len(held_out)} held out for the fill-in examples"
                  + (f"; {sum(map(len, eval_documents))} sentences of {len(eval_documents)} documents held out "
                     f"for evaluation every {options.eval_every} steps)" if eval_documents else ")"))
    tokenizer = _tokenizer_for_run(family, documents, checkpoints, options, context)
    marker, marking = _units_for_run(family, options, documents, run_dir, checkpoints), {}
    tokenized = tokenize_documents(documents, tokenizer, marker, marking)
    units_record = {}
    if marker is not None:
        _say(options, marking_line(marking))
        units_record = {"knowledge_units": {**marker.counts(), **marking}}
    instances = build_instances(family, tokenized, tokenizer, options, replicas)
    copies = copies_of(family, options)
    _say(options, f"instances: {len(instances['token_ids'])} sequences of {instances['token_ids'].shape[1]} tokens"
                  + (f" ({copies} builds of the corpus)" if copies > 1 else ""))
    _say(options, coverage_line(*instance_coverage(family, instances, tokenized, tokenizer, options)))
    del tokenized
    eval_tokenized = tokenize_documents(eval_documents, tokenizer, marker, {}) if eval_documents else None
    return _RunData(tokenizer, instances, held_out, eval_tokenized, units_record)


def _build_model(family, options, tokenizer, checkpoints, strategy, replica_batch, context):
    """Model phase: the compiled pretrainer under the strategy, with its XLA and rematerialisation settings,
    and the steps it has already done."""
    with strategy.scope():
        pretrainer, done_steps = _pretrainer_for_run(family, tokenizer, checkpoints, _total_steps(options), options,
                                                     options.precision, replica_batch, context)
        pretrainer.jit_compile = resolve_jit_compile(options.xla, pretrainer.dtype_policy.name,
                                                     family.training.xla_compiles)
        set_remat(pretrainer, options.remat)
    return pretrainer, done_steps


@dataclasses.dataclass
class _Batches:
    """What the fit phase reads: the run's masked batches from its next step on; for a cluster reading shards,
    how each worker reads its own (None otherwise); the held-out evaluation (None without --eval-every)."""
    dataset: object
    worker_dataset: object = None
    validation: tuple | None = None


def _batches(family, options, source, data, pretrainer, done_steps, run_dir, checkpoints, replicas):
    """Batches phase: the masked batches from the shards or the instances, and the held-out evaluation's."""
    batches = (_shard_batches(family, options, source.manifest, data, pretrainer, done_steps, replicas)
               if source.manifest else
               _Batches(_masked_dataset(family, data, _data_dir(run_dir, checkpoints), options, done_steps,
                                        replicas)))
    if options.eval_every:
        batches.validation = _validation(family, options, data, pretrainer, replicas)
    return batches


def _shard_batches(family, options, manifest, data, pretrainer, done_steps, replicas):
    """The prepared shards' batches, masked now where the masking is dynamic; each worker of a cluster reads
    its own shards unless the batches are streams."""
    masker = (build_masker(family, data.tokenizer, options, replicas, data.token_counts)
              if masking_of(family, options) == "dynamic" else None)
    dataset = shard_dataset(options.data, manifest, options.batch_size, seed=options.seed,
                            start_step=done_steps, masker=masker)
    if manifest["recipe"]["stream_batches"]:
        return _Batches(dataset)

    def worker_dataset(context):  # a cluster's worker reads its own shards
        pipelines = context.num_input_pipelines
        shards = shard_dataset(options.data, manifest, options.batch_size // pipelines,
                               seed=options.seed, start_step=done_steps, masker=masker,
                               pipeline=(context.input_pipeline_id, pipelines))
        return micro_batches(model_batches(shards, pretrainer), options.batch_size // pipelines, options.accumulate)

    return _Batches(dataset, worker_dataset)


def _validation(family, options, data, pretrainer, replicas):
    """(batches, count, windows) of the held-out evaluation that `fit` runs every --eval-every steps."""
    batch_size = options.batch_size // options.accumulate
    held_out_batches, count = eval_dataset(
        family, data.eval_tokenized, data.tokenizer, options,
        build_masker(family, data.tokenizer, options, replicas, data.token_counts),
        pretrainer, batch_size, replicas)
    _say(options, f"held-out evaluation: {count} batches of {batch_size} instances")
    return held_out_batches, count, eval_windows(options.windows, options.steps_per_window, options.eval_every)


@dataclasses.dataclass(frozen=True)
class _Fitted:
    """What the fit phase leaves: the metric history, the seconds it trained, the weights split over devices."""
    history: MetricHistory
    train_seconds: float
    split_weights: int


def _fit(family, options, pretrainer, tokenizer, batches, done_steps, run_dir, checkpoints, strategy):
    """Fit phase: Keras `fit` in logged windows, the chief checkpointing each; said in one line first."""
    steps_per_window, windows, accumulate = options.steps_per_window, options.windows, options.accumulate
    total_steps = _total_steps(options)
    _say(options, f"model: {_model_name(options)}, {pretrainer.backbone.count_params():,} encoder parameters, "
                  f"{pretrainer.dtype_policy.name}{', XLA' if pretrainer.jit_compile else ''}, "
                  f"{masking_of(family, options)} masking{_units_said(family, options, total_steps)}, "
                  f"{total_steps} steps of batch {options.batch_size} in {windows} logged windows"
                  + (f", resuming after step {done_steps}" if done_steps else ""))
    history = MetricHistory(steps_per_window, options.batch_size, checkpoints.load_history(), accumulate)
    started = time.perf_counter()
    writes = [CheckpointEveryWindow(checkpoints, history),
              keras.callbacks.TensorBoard(str(run_dir / "logs"), update_freq="epoch"),
              _snapshots(options, run_dir, pretrainer, tokenizer, history),
              StopAtCheckpointOnSignal(history)] if checkpoints.writer else []
    # Keras counts micro-batches: `accumulate` of them make each update that the run's steps count.
    fit(pretrainer, micro_batches(model_batches(batches.dataset, pretrainer), options.batch_size, accumulate),
        strategy,
        global_batch=options.batch_size // accumulate,
        epochs=windows,
        initial_step=done_steps * accumulate,
        steps_per_epoch=steps_per_window * accumulate,
        callbacks=[StopOnNonFiniteLoss(steps_per_window, checkpoints), history, *writes,
                   *pretrainer.training_callbacks(), *([KeepTrainingState()] if batches.validation else [])],
        verbose=options.verbose, worker_dataset=batches.worker_dataset, validation=batches.validation)
    train_seconds = time.perf_counter() - started
    split = strategy.split_weights(pretrainer) if isinstance(strategy, KerasDistribution) else 0
    return _Fitted(history, train_seconds, split)


def _worker_result(options, pretrainer, history):
    """A worker other than the chief reports its weights' digest (equal to the chief's) and writes nothing."""
    digest = weights_digest(pretrainer)
    total_steps = _total_steps(options)
    _say(options, f"worker done after {total_steps} steps; weights sha256 {digest} (the chief writes the run)")
    return {"steps": total_steps, "weights_sha256": digest, "history": history.records}


def _save_run(options, pretrainer, tokenizer, run_dir, strategy):
    """Run folder phase: the pretrainer as a `.keras` archive beside its tokenizer; (the saved run, the
    pretrainer the rest of the run computes with)."""
    with outside_distribution():
        run = RunModel(options.model, pretrainer.served_backbone(), tokenizer, options.seq_len, pretrainer,
                       options.preset)
        save_run_model(run_dir, run)
    if getattr(strategy, "process_count", 1) > 1:
        # Its weights span the other processes' devices: what follows computes with this process's own copy.
        keras.distribution.set_distribution(None)
        run = load_run_model(run_dir)
        run.pretrainer.jit_compile, pretrainer = pretrainer.jit_compile, run.pretrainer
    return run, pretrainer


def _examples(kinds, finished, from_export):
    """The end-of-run examples of each output kind the pretrainer declares: those drawn from the pretrainer,
    or (`from_export`) those served by the export."""
    examples = {}
    for kind in kinds:
        if kind.reads_export == from_export:
            examples.update(kind.examples(finished))
    return examples


def _write_report(options, metrics, history, pretrainer, run_dir):
    """metrics.json and the loss plot, written before the export: an export that fails (a full disk) must not
    lose them."""
    write_metrics(run_dir / "metrics.json", metrics)
    plot_training_curves(history.records, pretrainer.objectives, run_dir / "loss_curve.png",
                         f"{_model_name(options)} on {_corpus_label(options)}")


def _export(run, run_dir, export_dir, options):
    """The run's SavedModel; a failed write (a full disk) says that the run is kept and how to export it."""
    try:
        if keras.config.backend() == "tensorflow":
            export_saved_model(run, export_dir, options.length_buckets, options.serving_xla)
        else:
            export_in_tensorflow(run_dir, export_dir, options.length_buckets, options.serving_xla)
    except OSError as error:
        error.strerror = (f"{error.strerror or error}; the run, its metrics.json and loss plot are saved in "
                          f"{run_dir}: the same command with --resume exports it")
        raise


def _snapshots(options, run_dir, pretrainer, tokenizer, history):
    """The encoder at `options.snapshots`, each a run folder of its own (to fine-tune at that step)."""
    def folder(step):
        return run_dir / "snapshots" / f"step-{step:07d}"

    def save(step):
        save_run_model(folder(step), RunModel(options.model, pretrainer.served_backbone(), tokenizer,
                                              options.seq_len, None, options.preset))

    return SnapshotAtSteps(options.snapshots, history, save,
                           exists=lambda step: (folder(step) / "model").is_dir())


def _run_context(family, options, checkpoints):
    """What the run takes from outside its corpus (`ModelFamily.run_context`); nothing when resuming from a
    checkpoint, which holds it (a teacher inside the pretrainer, its tokenizer in the run folder)."""
    if options.resume and checkpoints.latest() is not None:
        return RunContext()
    if options.init_from:
        return init_context(options.init_from, family, options)
    return family.run_context(options.family_options)


def _prepared_tokenizer(options, checkpoints, manifest, context):
    """The tokenizer of the shards, kept in the run folder; a resumed run's must be the same, and so must the
    one the run's context brings (a teacher's)."""
    prepared = Path(options.data) / TOKENIZER_DIR
    if context.tokenizer is not None:
        with tempfile.TemporaryDirectory() as saved:
            context.tokenizer.save(saved)
            if tokenizer_fingerprint(saved) != manifest["tokenizer_sha256"]:
                source = context.source
                raise ConfigError(f"the shards in {options.data} were made with another tokenizer than {source}'s; "
                                  f"prepare them with --tokenizer {source}")
    if checkpoints.tokenizer_dir.is_dir() and options.resume:
        if tokenizer_fingerprint(checkpoints.tokenizer_dir) != manifest["tokenizer_sha256"]:
            raise ConfigError(f"the shards in {options.data} were made with another tokenizer than the run in "
                              f"{checkpoints.run_dir} was trained with")
    elif checkpoints.writer:
        with atomic_directory(checkpoints.tokenizer_dir) as staging:
            shutil.copytree(prepared, staging, dirs_exist_ok=True)
    return load_tokenizer(prepared)


def _tokenizer_for_run(family, documents, checkpoints, options, context):
    """The run's own vocabulary when resuming, else the context's (a teacher's) or one trained now; kept in
    the run folder."""
    if options.resume and (checkpoints.tokenizer_dir / "tokenizer.json").is_file():
        return load_tokenizer(checkpoints.tokenizer_dir)
    if context.tokenizer is not None:
        _say(options, f"vocabulary: the {context.tokenizer.vocab_size} tokens of {context.source}")
        tokenizer = context.tokenizer
    else:
        tokenizer = _train_tokenizer(family, documents, options)
    if checkpoints.writer:
        with atomic_directory(checkpoints.tokenizer_dir) as staging:
            tokenizer.save(staging)
    return tokenizer


def _units_said(family, options, total_steps):
    """' of LEVELS' for the run's log line where its masked units are not tokens (with each level's first
    step for a schedule)."""
    levels = units_of(family, options) if family.data.masks_tokens else ("tokens",)
    if levels == ("tokens",):
        return ""
    starts = [0, *level_boundaries(levels, total_steps)]
    return " of " + (levels[0] if len(levels) == 1 else
                     ", ".join(f"{level} from step {start}" for level, start in zip(levels, starts)))


def _units_for_run(family, options, documents, run_dir, checkpoints):
    """The corpus's phrases and entities where the masking units need them, said in a line and kept in the
    run folder (knowledge_units.json); None otherwise."""
    marker = unit_marker(family, options, documents)
    if marker is not None:
        _say(options, marker.summary())
        if checkpoints.writer:
            with atomic_file(run_dir / MARKER_FILE) as staging:
                marker.save(staging)
    return marker


def _pretrainer_for_run(family, tokenizer, checkpoints, total_steps, options, precision, replica_batch_size, context):
    """(compiled pretrainer, steps already done): from the newest checkpoint (in its own precision), or new."""
    if checkpoints.latest() is not None:
        pretrainer, step = checkpoints.load_model()
        trained_with = getattr(pretrainer, "batch_size", None)
        if family.data.stream_batches and trained_with != replica_batch_size:
            raise ConfigError(
                f"this run's streams were laid out for batches of {trained_with} rows per replica; resuming "
                f"with {replica_batch_size} per replica would tear them apart: resume with the same number "
                "of devices (--strategy)")
        return pretrainer, step
    config = options.backbone_config(family, **{**context.backbone_overrides, "vocab_size": tokenizer.vocab_size,
                                                "dtype": precision})
    if config.get("max_positions") and options.seq_len > config["max_positions"]:
        raise ConfigError(f"--seq-len {options.seq_len} is above the {config['max_positions']} positions of the "
                          "encoder" + (f" of {context.source}" if context.record else ""))
    backbone = family.backbone_cls(**config)
    pretrainer = family.build_pretrainer(backbone, options.family_options, options.preset, replica_batch_size,
                                         context)
    if context.initial_weights:
        fresh = load_initial_weights(pretrainer, context.initial_weights)
        _say(options, f"weights: from {context.initial_weights}")
        if fresh:
            warn(f"--init-from {context.initial_weights} has no {', '.join(fresh)}: freshly initialised")
    multipliers = layerwise_decay(backbone, options.layer_decay) if options.layer_decay < 1 else None
    pretrainer.compile(optimizer=make_optimizer(
        options.optimizer_name(family), options.peak_learning_rate(family), total_steps,
        options.learning_rate_schedule(family), warmup_steps=options.warmup_steps, decay_share=options.decay_share,
        power=options.decay_power, lr_multipliers=multipliers, accumulate=options.accumulate))
    return pretrainer, 0


def _default_run_name(options):
    return f"{options.model}-{options.preset or Path(options.init_from).name}-{datetime.now():%Y%m%d-%H%M%S}"


def _model_name(options):
    """The family and preset, or for a run from a converted model (no preset) where its shape comes from."""
    return f"{options.model} {options.preset or f'as {options.init_from}'}"


def _corpus_label(options):
    """The corpus in a plot's title: its files' names, the first three of them."""
    if options.data:
        return str(options.data)
    if not options.corpus:
        return "the default corpus"
    names = [Path(path).name for path in options.corpus]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _say(options, message):
    if options.verbose:
        print(message, flush=True)


def _train_tokenizer(family, documents, options):
    sentences = [sentence for document in documents for sentence in document]
    _say(options, f"training a vocabulary of up to {options.vocab_size} tokens")
    return family.train_tokenizer(sentences, options.vocab_size)


def _masked_dataset(family, data, data_dir, options, start_step, replicas):
    """The run's batches from `start_step` on: a resumed run goes on where its checkpoint stopped."""
    instances = data.instances
    masker = build_masker(family, data.tokenizer, options, replicas, data.token_counts)
    if masking_of(family, options) == "dynamic":
        # Stream batches stay in order: row r of each batch continues row r's text.
        return make_dataset(instances, options.batch_size, masker=masker, seed=options.seed,
                            shuffle=not family.data.stream_batches, start_step=start_step)
    path = data_dir / f"static_masked_x{options.dupe_factor}.tfrecord"
    if options.resume and path.is_file():
        _say(options, f"static masking: reusing {path}")
    else:
        steps, available = _total_steps(options), len(instances["token_ids"])
        needed = static_records_read(steps, options.batch_size)
        _say(options, f"static masking: writing {min(needed, available)} masked instances"
                      + (f" of {available} (what {steps} steps read)" if needed < available else "") + f" to {path}")
        write_static_tfrecords(instances, masker, 1, str(path), seed=options.seed, verbose=options.verbose,
                               limit=needed)
    return make_dataset(None, options.batch_size, static_path=str(path), seed=options.seed,
                        start_step=start_step)


def _data_dir(run_dir, checkpoints):
    """Where the run keeps its prepared data: in the run folder, or for the workers of a cluster other than
    the chief (which write nothing there), a private temporary folder removed when the process ends."""
    if checkpoints.writer:
        return run_dir / "data"
    private = tempfile.mkdtemp(prefix="bertology-worker-data-")
    atexit.register(shutil.rmtree, private, True)
    return Path(private)


def _metrics(family, options, pretrainer, data, context, fitted, export_dir, strategy):
    """Metrics phase: what metrics.json records of the run, its objectives against their chance levels."""
    records = fitted.history.records
    steady = [record["samples_per_second"] for record in records[1:]] or [records[0]["samples_per_second"]]
    metrics = {
        "model": options.model,
        "preset": options.preset,
        "encoder": options.encoder,
        "whole_word": options.whole_word,
        "masking_units": ",".join(units_of(family, options)),
        "steps": _total_steps(options),
        "batch_size": options.batch_size,
        "seq_len": options.seq_len,
        "max_predictions": options.prediction_slots(family),
        "learning_rate": options.peak_learning_rate(family),
        "schedule": options.learning_rate_schedule(family),
        "optimizer": options.optimizer_name(family),
        "accumulate": options.accumulate,
        "precision": pretrainer.dtype_policy.name,
        "backend": keras.config.backend(),
        "strategy": strategy_name(strategy),
        "devices": data_parallel_devices(strategy),
        "model_parallel": {"devices": options.model_parallel, "split_weights": fitted.split_weights},
        "xla": bool(pretrainer.jit_compile),
        "remat": options.remat,
        "objectives": objective_summary(records, pretrainer.objectives),
        "samples_per_second": float(np.median(steady)),
        "weights_sha256": weights_digest(pretrainer),
        "train_seconds": fitted.train_seconds,
        "export_dir": str(export_dir) if export_dir else None,
        "history": records,
    }
    last = {name: summary["last"] for name, summary in metrics["objectives"].items()}
    chance = chance_levels(data.instances, data.tokenizer, pretrainer.declared_objectives, last,
                           labelling_stage(family, data.tokenizer, options))
    for name, levels in chance.items():
        metrics["objectives"][name]["chance"] = levels
    metrics.update(context.record, **data.units_record)
    if options.eval_every:
        metrics["eval"] = eval_records(records, pretrainer.declared_objectives)
    metrics.update(masking=masking_of(family, options), instances=family.instance_kind(options.packing),
                   family_options=family.option_values(options.family_options),
                   windows=len(records), steps_per_window=options.steps_per_window, **every_run_entries())
    return metrics


def _total_steps(options):
    """The run's optimizer updates: its logged windows times the steps of each."""
    return options.windows * options.steps_per_window
