"""The pretrainer base: a backbone, objective heads, and the objectives declared as data.

A family's pretrainer builds its heads on the backbone and lists its
`Objective`s; compiling, turning feature batches into `(x, y, sample_weight)`,
metric names, metrics.json and the loss plot all follow from that list, so a
new objective (SOP, SBO, RTD, PLM) is an entry, not an edit here.
"""

import dataclasses
from collections.abc import Callable

import keras

from keras_bertology.models.backbone import keep_policy


# Objectives average their losses over the targets that carry weight: sum(w * loss) / sum(w) over the
# global batch. `split_features` divides the weights by their mean over the batch it splits (the global
# batch: it runs before a strategy shares the batch among replicas), and the losses divide the weighted
# sum by the number of targets; each replica's share then adds up to the global average exactly, where
# averaging per replica would weigh a replica's few masked tokens like another's many.
WEIGHTED_AVERAGE = "sum_over_batch_size"


def sparse_cross_entropy():
    """Cross-entropy over class logits, averaged over the targets that carry weight."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=WEIGHTED_AVERAGE)


def accuracy(prefix):
    """Weighted accuracy of class logits, named `<prefix>accuracy`."""
    return [keras.metrics.SparseCategoricalAccuracy(name=f"{prefix}accuracy")]


class OfLossMean(keras.metrics.MeanMetricWrapper):
    """A metric that is `of_mean` of the weighted mean of the objective's own loss `fn` per target.

    Where the pretrainer also reports that mean (`<prefix>loss`, one objective), it reads it from that metric
    (`read_from`) instead of scoring the logits again (for a causal LM's perplexity, every position against
    the whole vocabulary), so the two agree exactly.
    """

    def __init__(self, fn, of_mean, name, dtype=None):
        super().__init__(fn, name=name, dtype=dtype)
        self.of_mean = of_mean
        self._loss_mean = None

    def read_from(self, loss_mean):
        """Take the mean from `loss_mean`, a metric averaging the same loss with the same weights."""
        self._loss_mean = loss_mean

    def update_state(self, y_true, y_pred, sample_weight=None):
        if self._loss_mean is None:
            super().update_state(y_true, y_pred, sample_weight)

    def result(self):
        return self.of_mean(super().result() if self._loss_mean is None else self._loss_mean.result())


class _ReportedLoss(keras.losses.Loss):
    """`loss` that also feeds the values it computed per target, with their weights, to `tracker`: a pretrainer
    with one objective reports `<name>_loss` from the loss it trains on (Keras tracks each loss itself only where
    there are several), instead of a metric scoring the logits against the vocabulary a second time each step."""

    def __init__(self, loss, tracker):
        super().__init__(name=loss.name, reduction=loss.reduction, dtype=loss.dtype)
        self.loss, self.tracker = loss, tracker
        self._weights = None

    def __call__(self, y_true, y_pred, sample_weight=None):
        self._weights = sample_weight  # for `call`, which Keras' reduction calls without them
        try:
            return super().__call__(y_true, y_pred, sample_weight)
        finally:
            self._weights = None

    def call(self, y_true, y_pred):
        values = self.loss.call(y_true, y_pred)
        self.tracker.update_state(values, sample_weight=self._weights)
        return values


@dataclasses.dataclass(frozen=True)
class Objective:
    """One pretraining objective.

    Attributes:
        name: the model output it trains; reported as `<name>_loss` and `<name>_<metric>`.
        label_key: the feature holding its targets or, when the model computes
            them (ELECTRA's replaced-token labels depend on the generator's
            samples), the model output holding them.
        weight_key: the feature holding per-target weights (0 ignores a target,
            e.g. padding prediction slots), or None when every target counts.
        loss_weight: this loss's factor in the total loss.
        make_loss: `() -> keras loss`; class cross-entropy by default.
        make_metrics: `(prefix) -> list of keras metrics` named with `prefix`
            (the objective's name plus "_" when Keras would not add it); accuracy by default.
        make_chance: optional `(last logged window: {metric: value}) -> {metric:
            what guessing scores}`, for objectives whose labels the data does not hold.
        predicts_tokens: its targets are corpus tokens (MLM, SBO, PLM), so
            guessing scores as the corpus' unigram distribution does.
    """

    name: str
    label_key: str
    weight_key: str | None = None
    loss_weight: float = 1.0
    make_loss: Callable = sparse_cross_entropy
    make_metrics: Callable = accuracy
    make_chance: Callable | None = None
    predicts_tokens: bool = False

    def loss(self):
        return self.make_loss()


# An objective whose model scores its own targets (the loss in chunks, `layers.vocabulary_scores`): the
# targets are an input, and the output holds each target's (cross-entropy, 1.0 where it is the arg-max)
# instead of logits.
def scored_loss(targets, scores):
    return scores[..., 0]


def _scored_correct(targets, scores):
    return scores[..., 1]


@keras.saving.register_keras_serializable(package="keras_bertology")
class ScoredCrossEntropy(keras.losses.Loss):
    """The cross-entropy the model computed per target, averaged over the targets that carry weight."""

    def __init__(self, name="cross_entropy", reduction=WEIGHTED_AVERAGE, dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        return scored_loss(y_true, y_pred)


def scored_accuracy(prefix):
    """Accuracy read from scored outputs, named `<prefix>accuracy`."""
    return [keras.metrics.MeanMetricWrapper(_scored_correct, name=f"{prefix}accuracy")]


def scored(objective, make_metrics=scored_accuracy):
    """`objective` for a model that scores its targets itself: the same name, targets and weights, its loss
    and metrics read from the scores."""
    return dataclasses.replace(objective, make_loss=ScoredCrossEntropy, make_metrics=make_metrics)


class Pretrainer(keras.Model):
    """A functional model over `backbone` whose outputs are trained by `objectives`.

    Subclasses build the heads and call this constructor with the graph's
    inputs and outputs (one output per objective, named like it). `compile()`
    without arguments sets up every objective's loss, loss weight and
    accuracy; `split_features` maps a batch of features to Keras' inputs.
    """

    def __init__(self, backbone, inputs, outputs, objectives, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        keep_policy(self, kwargs.get("dtype") or backbone.dtype_policy)  # its heads' policy
        self.backbone = backbone
        self.declared_objectives = tuple(objectives)
        missing = {o.name for o in self.declared_objectives} - set(outputs)
        if missing:
            raise ValueError(f"objectives {sorted(missing)} have no model output of that name")
        # Objectives whose labels the model computes: output name -> label output name.
        self._label_outputs = {o.name: o.label_key for o in self.declared_objectives if o.label_key in outputs}

    @classmethod
    def backbone_needs(cls, **settings):
        """The backbone config entries that a pretrainer built with `settings` needs (a pooler under a
        sentence-pair head): a run that starts from an encoder without them (`--init-from` a masked-LM
        checkpoint) builds them freshly initialised, as transformers does."""
        return {}

    @classmethod
    def from_preset(cls, name_or_path, batch_size=None, weights=None, **overrides):
        """The family's pretrainer on a new backbone of a preset's size (`overrides` go to the backbone's
        config; `batch_size` per replica for families with a memory per row), or the pretraining heads
        of a run or Hugging Face folder or `hf://ORG/NAME[@REVISION]` repository, trained
        (`weights="pretrained"`: a preset's published ones). Called on this base class it builds any
        family's.

        Example:
            >>> from keras_bertology.models import Pretrainer
            >>> model = Pretrainer.from_preset("albert-tiny", vocab_size=100)
            >>> type(model).__name__, model.objectives
            ('AlbertPretrainer', ['mlm', 'sop'])
        """
        from keras_bertology import preset_loading

        return preset_loading.pretrainer(cls, name_or_path, batch_size=batch_size, weights=weights, **overrides)

    @property
    def objectives(self):
        """Names of the outputs this pretrainer trains."""
        return [objective.name for objective in self.declared_objectives]

    def compile(self, optimizer="adamw", loss=None, loss_weights=None, weighted_metrics=None, **kwargs):
        """Compile with each objective's loss, loss weight and accuracy unless given. Keras reports each
        objective's own loss (`<name>_loss`) where there are several; with one, the pretrainer reports it
        from the loss it builds (not from a `loss` passed here, which Keras reports as `loss`)."""
        self._loss_report = None
        if loss is None:
            loss = {o.name: o.loss() for o in self.declared_objectives}
            if len(loss) == 1:
                ((name, only),) = loss.items()
                self._loss_report = _ReportedLoss(only, keras.metrics.Mean(name=f"{name}_loss"))
                loss = {name: self._loss_report}
        if loss_weights is None:
            loss_weights = {o.name: o.loss_weight for o in self.declared_objectives}
        if weighted_metrics is None:
            weighted_metrics = self._default_metrics()
        super().compile(optimizer=optimizer, loss=loss, loss_weights=loss_weights,
                        weighted_metrics=weighted_metrics, **kwargs)

    @property
    def metrics(self):
        """Keras' metrics, and the one objective's `<name>_loss` where the pretrainer reports it."""
        report = getattr(self, "_loss_report", None)
        return super().metrics if report is None else [*super().metrics, report.tracker]

    def _default_metrics(self):
        """Each objective's metrics; Keras prefixes the output name only when there are several."""
        if len(self.objectives) > 1:
            return {o.name: o.make_metrics("") for o in self.declared_objectives}
        (objective,) = self.declared_objectives
        metrics = objective.make_metrics(f"{objective.name}_")
        if self._loss_report is not None:
            for metric in metrics:
                if isinstance(metric, OfLossMean):
                    metric.read_from(self._loss_report.tracker)
        return {objective.name: metrics}

    def _labels_from_outputs(self, y, y_pred):
        """Move model-computed labels from the predictions to the targets (no gradient through them)."""
        if not self._label_outputs:
            return y, y_pred
        y, y_pred = dict(y or {}), dict(y_pred)
        for name, key in self._label_outputs.items():
            y[name] = keras.ops.stop_gradient(y_pred[key])
        for key in set(self._label_outputs.values()):
            y_pred.pop(key)
        return y, y_pred

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        y, y_pred = self._labels_from_outputs(y, y_pred)
        return super().compute_loss(x, y, y_pred, sample_weight, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        y, y_pred = self._labels_from_outputs(y, y_pred)
        return super().compute_metrics(x, y, y_pred, sample_weight)

    def training_callbacks(self):
        """Keras callbacks this pretrainer needs during `fit` (e.g. a schedule of stages); none by default."""
        return []

    def training_stages(self, total_steps):
        """[(steps, stage)] of a run of `total_steps`: what trains when, for counting its compute
        (`pretraining.flops`). One stage, `None` (everything trains), by default."""
        return [(total_steps, None)]

    def set_stage(self, stage):
        """Make `stage` of `training_stages` the one that trains; nothing to do with a single stage."""
        if stage is not None:
            raise ValueError(f"{type(self).__name__} trains in a single stage (got stage {stage!r})")

    def served_backbone(self):
        """The encoder as it serves alone (what a run saves, exports and fine-tunes): the backbone
        itself, unless its weights mean something only beside the pretrainer's other models."""
        return self.backbone

    @property
    def output_kinds(self):
        """The names of the end-of-run output kinds this pretrainer has (`keras_bertology.outputs`): what its
        export serves beyond the encoder and its run shows of what it learned. A masked LM's fill-ins by
        default; a subclass sets its own tuple."""
        return ("fill_in",) if "mlm" in self.objectives else ()

    def masked_lm_model(self, mask_id=None):
        """backbone inputs + `mask_positions` -> the "mlm" logits, for serving fill-in-the-blank (the
        "fill_in" output kind); None when the pretrainer has no masked LM over its backbone to serve.
        `mask_id` is the blank's token id, for models that must hide the blanks themselves (XLNet)."""
        if "mlm" not in self.objectives:
            return None
        names = [*self.backbone.input, "mask_positions"]
        logits = self.output["mlm"] if self.served_mlm_logits is None else self.served_mlm_logits
        return keras.Model({name: self.input[name] for name in names}, logits)

    # A pretrainer whose "mlm" output scores its targets (the loss in chunks) sets the head's logits here,
    # a node of the same graph that training never computes.
    served_mlm_logits = None

    # An encoder-decoder sets it, and offers `start_decoding` and `decode_step`: its decoder writes text one
    # position a step from a key/value cache (serving's `generate`, text-to-text fine-tuning).
    has_decoder = False

    def causal_lm_model(self):
        """backbone inputs -> next-token logits [B, L, V] (position t scores token t + 1), for serving
        `score` and `generate` (the "continuation" output kind); None when the pretrainer has no causal LM
        to serve."""
        return None

    def stream_perplexity(self, token_ids, segment_length, mem_len=None):
        """Perplexity of one token stream read in consecutive segments, with a memory of `mem_len` states
        carried from segment to segment (0: none; None: the model's own), as a dict with the settings (the
        "stream_perplexity" output kind); None for a model without segment memory."""
        return None

    # The constructor argument that takes the backbone, and its key in the saved config.
    backbone_argument = "backbone"

    def get_config(self):
        """The name, trainability and serialized backbone; a subclass adds its own constructor arguments."""
        return {"name": self.name, "trainable": self.trainable,
                self.backbone_argument: keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config[cls.backbone_argument] = keras.saving.deserialize_keras_object(config[cls.backbone_argument])
        return cls(**config)

    def get_compile_config(self):
        if not self.compiled:
            return None
        return {"optimizer": keras.saving.serialize_keras_object(self.optimizer)}

    def compile_from_config(self, config):
        """Reloaded pretrainers come back with their objectives and their optimizer."""
        self.compile(optimizer=keras.saving.deserialize_keras_object(config["optimizer"]))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def split_features(self, features, ops=None):
        """A feature dict -> `(x, y, sample_weight)`, as each objective declares.

        Inputs are cast to the model's input dtypes; an objective without a
        weight key weighs every target 1. Weights are divided by their mean
        over the batch (see WEIGHTED_AVERAGE): map this over global batches.
        `ops`: the namespace computing it (`cast`, `mean`, `divide_no_nan`,
        `ones_like`), `keras.ops` by default; a tf.data pipeline feeding a
        model on another backend than TensorFlow passes TensorFlow's.
        """
        ops = ops or keras.ops
        x = {name: ops.cast(features[name], tensor.dtype) for name, tensor in self.input.items()}
        y, sample_weight = {}, {}
        for objective in self.declared_objectives:
            if objective.name not in self._label_outputs:
                y[objective.name] = features[objective.label_key]
            if objective.weight_key:
                weights = ops.cast(features[objective.weight_key], "float32")
                sample_weight[objective.name] = ops.divide_no_nan(weights, ops.mean(weights))
            else:
                sample_weight[objective.name] = ops.ones_like(y[objective.name], dtype="float32")
        return x, y, sample_weight
