"""Work kept between the fine-tuning runs of one process, so that a study's runs skip tracing and encoding.

A study fine-tunes the same architecture on the same task again and again:
other seeds, other labeled draws, other encoders of one arm. A run of its own
loads the encoder, encodes every split, builds the task model, compiles it
and traces its training and prediction steps; for a few-label run that costs
more than the training. `SharedWork` keeps three things for the next run:

* the compiled model of a recipe (the architecture, the task's labels, the
  optimizer's schedule), lent to the next run of that recipe: every variable
  of the run's freshly built model (encoder, task head, dropout seeds) is
  copied into it and the optimizer's state is set back to where it started;
* the encoded dev and test splits of an encoder folder's tokenizer and a task
  (the training split is drawn per run, so it is encoded per run);
* the tasks as loaded (a built-in task is built from its package's files).

So a run computes what it would have computed on its own
(tests/finetune/test_finetune.py checks the losses and scores).
"""

import collections
import json
import os

import keras


class SharedWork:
    """The `size` most recently used compiled task models, by recipe, and encoded splits."""

    def __init__(self, size=4, encoded_size=32):
        self.size, self.encoded_size = size, encoded_size
        self._models = collections.OrderedDict()
        self._encoded = collections.OrderedDict()
        self._tasks = {}

    def take_model(self, key, model):
        """The kept model of `key` holding `model`'s variables and a fresh optimizer, or None."""
        kept = self._models.get(key)
        if kept is None:
            return None
        compiled, optimizer_start = kept
        self._models.move_to_end(key)
        for target, source in zip(compiled.variables, model.variables, strict=True):
            if tuple(target.shape) != tuple(source.shape):
                raise ValueError(f"kept model of another shape: {target.path} {target.shape} vs {source.shape}")
            target.assign(source.value)
        for variable, value in zip(compiled.optimizer.variables, optimizer_start, strict=True):
            variable.assign(value)
        return compiled

    def keep_model(self, key, model):
        """Keep a compiled `model` for the next run of `key` (its optimizer is built here)."""
        model.optimizer.build(model.trainable_variables)
        self._models[key] = (model, [keras.ops.convert_to_numpy(v.value) for v in model.optimizer.variables])
        _trim(self._models, key, self.size)

    def encoded(self, key, encode):
        """`encode()`'s value, computed once per `key` (see `split_key`)."""
        if key not in self._encoded:
            self._encoded[key] = encode()
        _trim(self._encoded, key, self.encoded_size)
        return self._encoded[key]

    def task(self, name, max_examples, load):
        """`load(name, max_examples)`, once per task."""
        key = (name, max_examples)
        if key not in self._tasks:
            self._tasks[key] = load(name, max_examples)
        return self._tasks[key]


def _trim(cache, key, size):
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


def recipe_key(backbone, task, seq_len, options, steps_per_epoch):
    """What a kept model must share with a run: architecture, labels, input length and schedule."""
    config = {name: value for name, value in backbone.get_config().items() if name != "name"}  # unique per build
    return json.dumps({"backbone": type(backbone).__name__, "config": config,
                       "task": [task.name, task.kind, list(task.labels), task.pairs], "seq_len": seq_len,
                       "recipe": [options.epochs, steps_per_epoch, options.batch_size, options.learning_rate,
                                  options.warmup, options.layer_decay],
                       "summary": options.summary}, sort_keys=True, default=str)


def split_key(options, split, seq_len, input_names):
    """What an encoded split depends on: the encoder folder's tokenizer and family, the task's data
    and the input layout."""
    return json.dumps([os.path.realpath(options.from_dir), os.fspath(options.task), options.max_examples, split,
                       seq_len, list(input_names)])
