"""Held-out evaluation during pretraining (`--eval-every`): documents kept out of training, built into the
family's instances and masked once, with a fixed seed, then scored by every objective as training goes.

Keras' own validation runs it (`fit(validation_data=..., validation_freq=...)`) at the ends of logged
windows, so its numbers come as `val_<objective>_<metric>` beside the window's training metrics: in the
history, TensorBoard's validation curves, the loss plot and metrics.json's `eval`.
"""

import dataclasses
import math

import keras
import numpy as np

from keras_bertology.data.pipeline import make_dataset
from keras_bertology.data.recipe import build_instances
from keras_bertology.errors import ConfigError
from keras_bertology.engine.run_metrics import HELD_OUT_PREFIX as PREFIX
from keras_bertology.engine.model_batches import model_batches

# The share of the corpus' sentences kept out of training for evaluation.
EVAL_SHARE = 0.05
# Whole documents are held out when the corpus has this many; fewer, and each document's last sentences are
# (a held-out document of 3 plays would be a third of the corpus).
WHOLE_DOCUMENTS_FROM = 20
# Instances scored at each evaluation: enough for a loss within about 1% (a few thousand masked tokens), few
# enough to cost a handful of training steps.
MAX_EVAL_INSTANCES = 256
# The held-out instances' own masking seed, apart from the training batches' seeds.
EVAL_SEED_OFFSET = 7919


def split_off_eval_documents(documents, rng, share=EVAL_SHARE):
    """(training documents, held-out documents) with about `share` of the sentences held out: whole
    documents drawn at random where there are WHOLE_DOCUMENTS_FROM or more, else the last `share` of the
    sentences of each document of 20 or more sentences."""
    total = sum(map(len, documents))
    if len(documents) >= WHOLE_DOCUMENTS_FROM:
        held, count = set(), 0
        for index in rng.permutation(len(documents)):
            if count >= share * total:
                break
            held.add(int(index))
            count += len(documents[index])
        return ([document for i, document in enumerate(documents) if i not in held],
                [document for i, document in enumerate(documents) if i in held])
    kept, held = [], []
    for document in documents:
        cut = len(document) - math.ceil(share * len(document)) if len(document) >= 20 else len(document)
        kept.append(document[:cut])
        if cut < len(document):
            held.append(document[cut:])
    if not held:
        raise ConfigError(f"--eval-every needs documents to hold out: the corpus' {len(documents)} documents have "
                          "fewer than 20 sentences each (and there are fewer than "
                          f"{WHOLE_DOCUMENTS_FROM} documents to hold out whole)")
    return kept, held


def eval_dataset(family, tokenized, tokenizer, options, masker, pretrainer, batch_size, replicas):
    """The held-out batches (masked once: the same masks at every evaluation), as the pretrainer takes
    them, each of `batch_size` rows (a training step's): up to MAX_EVAL_INSTANCES instances, at least one
    batch (repeating instances where the held-out documents make fewer)."""
    once = dataclasses.replace(options, dupe_factor=1)
    instances = build_instances(family, tokenized, tokenizer, once, replicas,
                                np.random.default_rng(options.seed + EVAL_SEED_OFFSET))
    count = len(instances["token_ids"])
    if count == 0:
        raise ConfigError(f"--eval-every: the held-out documents make no instances of {options.seq_len} tokens")
    batches = max(1, min(count, MAX_EVAL_INSTANCES) // batch_size)
    rows = np.resize(np.arange(count), batches * batch_size)
    instances = {name: np.asarray(values)[rows] for name, values in instances.items()}
    dataset = make_dataset(instances, batch_size, masker=masker, seed=options.seed + EVAL_SEED_OFFSET,
                           shuffle=False).take(batches)
    return model_batches(dataset, pretrainer).cache(), batches


def eval_windows(windows, steps_per_window, eval_every):
    """Keras' `validation_freq`: the (1-based) windows at whose end an evaluation runs, the one in which
    each multiple of `eval_every` updates falls, and the last."""
    ends = {math.ceil(multiple / steps_per_window)
            for multiple in range(eval_every, windows * steps_per_window + 1, eval_every)}
    return sorted(ends | {windows})


def eval_records(records, objectives):
    """metrics.json's `eval`: per evaluation, its step and each objective's held-out loss, accuracy and (for
    objectives that predict corpus tokens) perplexity."""
    found = []
    for record in records:
        if f"{PREFIX}loss" not in record:
            continue
        scores = {}
        for objective in objectives:
            prefix = f"{PREFIX}{objective.name}_"
            score = {key[len(prefix):]: value for key, value in record.items() if key.startswith(prefix)}
            if objective.predicts_tokens and "loss" in score:
                score["perplexity"] = math.exp(min(score["loss"], 700.0))
            scores[objective.name] = score
        found.append({"step": record["step"], "loss": record[f"{PREFIX}loss"], "objectives": scores})
    return found


class KeepTrainingState(keras.callbacks.Callback):
    """Evaluation leaves no trace on training: the model's non-trainable state (random generators'
    seeds, a stream model's memory) is put back as it was before the held-out batches ran."""

    def on_test_begin(self, logs=None):
        self._saved = [keras.ops.convert_to_numpy(variable) for variable in self.model.non_trainable_variables]

    def on_test_end(self, logs=None):
        for variable, value in zip(self.model.non_trainable_variables, self._saved):
            variable.assign(value)
        self._saved = None
