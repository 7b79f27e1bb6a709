"""Compiled task models kept between fine-tuning runs of one recipe, so that a study's runs skip tracing.

A study fine-tunes the same architecture on the same task again and again:
other seeds, other labeled draws, other encoders of one arm. A run of its own
loads the encoder, builds the task model, compiles it and traces its training
and prediction steps; for a few-label run the tracing costs more than the
training. `CompiledModels` keeps the compiled model of a recipe (the
architecture, the task's labels, the optimizer's schedule) and lends it to
the next run of that recipe: every variable of the run's freshly built model
(encoder, task head, dropout seeds) is copied into it and the optimizer's
state is set back to where it started, so the run computes what it would
have computed on its own model (tests/test_finetune.py checks the losses).
"""

import collections
import json

import keras


class CompiledModels:
    """The `size` most recently used compiled task models, by recipe."""

    def __init__(self, size=4):
        self.size = size
        self._models = collections.OrderedDict()

    def take(self, key, model):
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

    def keep(self, key, model):
        """Keep a compiled `model` for the next run of `key` (its optimizer is built here)."""
        model.optimizer.build(model.trainable_variables)
        self._models[key] = (model, [keras.ops.convert_to_numpy(v.value) for v in model.optimizer.variables])
        self._models.move_to_end(key)
        while len(self._models) > self.size:
            self._models.popitem(last=False)


def recipe_key(backbone, task, seq_len, options, steps_per_epoch):
    """What a kept model must share with a run: architecture, labels, input length and schedule."""
    config = {name: value for name, value in backbone.get_config().items() if name != "name"}  # unique per build
    return json.dumps({"backbone": type(backbone).__name__, "config": config,
                       "task": [task.name, task.kind, list(task.labels), task.pairs], "seq_len": seq_len,
                       "recipe": [options.epochs, steps_per_epoch, options.batch_size, options.learning_rate,
                                  options.warmup, options.layer_decay]}, sort_keys=True, default=str)
