"""`fit` under every tf.distribute strategy, multi-worker included.

Keras 3's `Model.fit` fails under MultiWorkerMirroredStrategy
(keras-team/keras#20585): before the first step it reduces a distributed
input batch across workers to build the model, and it reduces scalar metrics
along an axis they lack. For that strategy `fit` here runs the model's own
`train_step` on every replica through `strategy.run`, with the same callbacks,
logs and progress bar; every other strategy goes through `Model.fit`.

Each input pipeline of a multi-worker run builds the same global batch and
keeps its own rows, so the batches, and the masks drawn for them, are those
of a single-device run with the same global batch.
"""

import traceback

import keras
import tensorflow as tf

from keras_bertology.errors import ConfigError, TrainingError
from keras_bertology.engine.keras_distribution import KerasDistribution, batch_flags, own_rows


def replica_batch_size(global_batch, strategy, accumulate=1):
    """The batch of one replica: the global batch (of one step: with gradients accumulated over
    `accumulate` steps, a micro-batch) shared evenly by the strategy's replicas (on JAX the whole global
    batch, which its devices and processes must share evenly)."""
    if isinstance(strategy, KerasDistribution):
        strategy.check_batch(global_batch, accumulate)
        return global_batch
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise ConfigError(f"{batch_flags(global_batch, accumulate)} must be a multiple of the {replicas} "
                          "replicas, which share each batch evenly")
    return global_batch // replicas



def fit(model, dataset, strategy, *, global_batch, epochs, initial_step, steps_per_epoch, callbacks,
        verbose, worker_dataset=None, validation=None):
    """Train `model` on `dataset` (global batches, endless, starting at step `initial_step`) up to the end
    of epoch `epochs` - 1.

    A run stopped by a signal stops at a step inside an epoch (a logged window); resumed there, the
    first epoch trains the rest of that window only, so that later windows end where an uninterrupted
    run's do. `worker_dataset`, when given, is `InputContext -> dataset` of that input
    pipeline's own share of each global batch (global_batch / pipelines rows,
    read from its own files): multi-worker runs then use it instead of
    building every global batch on every worker. `validation`, when given, is (dataset of global batches,
    its number of batches, the 1-based epochs at whose end Keras evaluates it).
    """
    if validation is not None and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        raise ConfigError("--eval-every does not run under TensorFlow's multi-worker strategy yet; evaluate the "
                          "run's checkpoints afterwards, or train it on --backend jax")
    first_epoch, done_in_window = divmod(initial_step, steps_per_epoch)
    if done_in_window:
        rest = steps_per_epoch - done_in_window
        _fit_epochs(model, dataset.take(rest), strategy, global_batch, first_epoch + 1, first_epoch, rest,
                    callbacks, verbose, worker_dataset and (lambda context: worker_dataset(context).take(rest)),
                    validation)
        if model.stop_training or first_epoch + 1 == epochs:
            return
        dataset, first_epoch = dataset.skip(rest), first_epoch + 1
        worker_dataset = worker_dataset and (lambda context, given=worker_dataset: given(context).skip(rest))
    _fit_epochs(model, dataset, strategy, global_batch, epochs, first_epoch, steps_per_epoch, callbacks, verbose,
                worker_dataset, validation)


def _fit_epochs(model, dataset, strategy, global_batch, epochs, initial_epoch, steps_per_epoch, callbacks,
                verbose, worker_dataset, validation=None):
    held_out, batches, evaluated = validation or (None, None, None)
    if isinstance(strategy, KerasDistribution):  # keras.distribution spreads each process's rows
        if held_out is not None:
            held_out = strategy.process_batches(held_out, global_batch)
        with strategy.peers_watched():
            model.fit(strategy.process_batches(dataset, global_batch, worker_dataset), epochs=epochs,
                      initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                      shuffle=False, verbose=verbose, validation_data=held_out, validation_steps=batches,
                      validation_freq=evaluated)
        return
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        build_before_tracing(model, dataset)
        model.fit(dataset, epochs=epochs, initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch,
                  callbacks=callbacks, shuffle=False, verbose=verbose, validation_data=held_out,
                  validation_steps=batches, validation_freq=evaluated)
        return
    _fit_on_replicas(model, dataset, strategy, global_batch, epochs, initial_epoch, steps_per_epoch,
                     callbacks, verbose, worker_dataset)


def build_before_tracing(model, dataset):
    """Create the model's, its metrics' and its optimizer's variables from `dataset`'s shapes before `fit`.

    On one device Keras on TensorFlow leaves that to the first traced step, and a tf.function whose first
    trace creates variables is traced a second time: built first, the step is traced once. Measured on 2
    CPU cores, BERT-Tiny's first pretraining step: 13.4 s -> 6.0 s (0.7 s of it this build).
    """
    # Under a strategy Keras builds first itself (from a replica's batch); JAX's trainer always does.
    if keras.config.backend() == "tensorflow" and model._distribute_strategy is None:
        model._symbolic_build(data_batch=dataset.element_spec)


def shard_global_batches(dataset, global_batch, context):
    """This input pipeline's part of each global batch, in batches of one replica.

    Pipeline p of n keeps rows p * global_batch / n ... of every batch, split
    into per-replica batches for its local replicas, in order.
    """
    part = own_rows(dataset, global_batch, context.input_pipeline_id, context.num_input_pipelines)
    return part.rebatch(context.get_per_replica_batch_size(global_batch), drop_remainder=True)


def _fit_on_replicas(model, dataset, strategy, global_batch, epochs, initial_epoch, steps_per_epoch,
                     callbacks, verbose, worker_dataset=None):
    def pipeline(context):
        if worker_dataset is None:
            return shard_global_batches(dataset, global_batch, context)
        return worker_dataset(context).rebatch(context.get_per_replica_batch_size(global_batch), drop_remainder=True)

    distributed = strategy.distribute_datasets_from_function(pipeline)
    with strategy.scope():
        # What Model.fit does before its first step, from the batch's shapes instead of a reduced batch.
        replica_batch = replica_batch_size(global_batch, strategy)
        model._symbolic_build(data_batch=tf.nest.map_structure(
            lambda spec: tf.TensorSpec([replica_batch, *spec.shape[1:]], spec.dtype), dataset.element_spec))
    iterator = iter(distributed)

    @tf.function(autograph=False)
    def train_function(iterator):
        outputs = strategy.run(model.train_step, args=(next(iterator),))
        # Metrics are aggregated across replicas by their variables: every replica holds the same values.
        return {name: strategy.experimental_local_results(value)[0] for name, value in outputs.items()}

    callbacks = keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=verbose != 0,
                                             verbose=verbose, epochs=epochs, steps=steps_per_epoch, model=model)
    model.stop_training = False
    callbacks.on_train_begin()
    logs, step = {}, initial_epoch * steps_per_epoch
    try:
        for epoch in range(initial_epoch, epochs):
            model.reset_metrics()
            callbacks.on_epoch_begin(epoch)
            for batch in range(steps_per_epoch):
                step += 1
                callbacks.on_train_batch_begin(batch)
                logs = train_function(iterator)
                callbacks.on_train_batch_end(batch, logs)
            # A stop (model.stop_training) waits for the window's end: every worker reaches it together.
            logs = {name: float(value) for name, value in logs.items()}
            callbacks.on_epoch_end(epoch, logs)
            if model.stop_training:
                break
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError) as error:
        # A lost peer surfaces in whichever collective runs next: a step, a metric reset, a save. The frames
        # of the failed collective hold an unclosed thread pool of tf.distribute; freed now, it shuts down
        # cleanly instead of at interpreter exit, where its pipes may already be closed (a stray OSError).
        traceback.clear_frames(error.__traceback__)
        raise TrainingError(
            f"another worker of the cluster stopped at step {step} ({error.message.splitlines()[0]}); "
            "start every worker again with --resume to go on from the newest checkpoint") from None
    callbacks.on_train_end(logs)
