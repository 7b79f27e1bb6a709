"""A generator-discriminator pretrainer (ELECTRA's replaced token detection) over any two encoders."""

import math

import keras

from keras_bertology.layers import GumbelSampler, MaskedLMHead, ReplacedTokenHead, ReplaceTokens
from keras_bertology.models.pretrainer import WEIGHTED_AVERAGE, Objective, Pretrainer, scored
from keras_bertology.models.ranked_precision import RankedPrecision

FULL, DISENTANGLED, NONE = EMBEDDING_SHARING = ("full", "disentangled", "none")

# The generator's masked LM: original ids at the masked positions.
GENERATOR_MLM = Objective("mlm", label_key="mask_ids", weight_key="mask_weights", predicts_tokens=True)


def _binary_cross_entropy():
    """Per-token sigmoid cross-entropy, averaged over the tokens that carry weight (non-padding)."""
    return keras.losses.BinaryCrossentropy(from_logits=True, reduction=WEIGHTED_AVERAGE)


def _label_rate(labels, logits):
    return keras.ops.mean(labels, axis=-1)


def _detection_metrics(prefix):
    """Accuracy, precision and recall on replaced tokens (at the 0.5 threshold), the threshold-free
    area under the ROC curve (0.5 for guessing) and ranked precision (precision = recall when flagging
    as many tokens as were replaced; the replaced rate for guessing), and the replaced rate itself (the
    accuracy of always answering "original" is 1 minus that rate)."""
    return [
        keras.metrics.BinaryAccuracy(name=f"{prefix}accuracy", threshold=0.0),
        keras.metrics.Precision(name=f"{prefix}precision", thresholds=0.0),
        keras.metrics.Recall(name=f"{prefix}recall", thresholds=0.0),
        keras.metrics.AUC(name=f"{prefix}auc", from_logits=True),
        RankedPrecision(name=f"{prefix}ranked_precision"),
        keras.metrics.MeanMetricWrapper(_label_rate, name=f"{prefix}replaced_rate"),
    ]


def _detection_chance(window):
    """Always answering "original" scores 1 - rate in accuracy and the label entropy in loss;
    a coin that says "replaced" at the rate scores the rate in precision, recall and ranked precision;
    AUC 0.5."""
    rate = window.get("replaced_rate")
    if rate is None or not 0 < rate < 1:
        return {}
    entropy = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
    return {"accuracy": 1 - rate, "loss": entropy, "precision": rate, "recall": rate, "ranked_precision": rate,
            "auc": 0.5}


def replaced_token_detection(loss_weight):
    """The discriminator's objective: labels computed by the model, averaged over non-padding tokens."""
    return Objective("rtd", label_key="rtd_labels", weight_key="padding_mask", loss_weight=loss_weight,
                     make_loss=_binary_cross_entropy, make_metrics=_detection_metrics,
                     make_chance=_detection_chance)


@keras.saving.register_keras_serializable(package="keras_bertology")
class GeneratorDiscriminator(Pretrainer):
    """The generator fills the masked positions by sampling its MLM; the discriminator tells every
    token original or replaced.

    The generator is built here from `generator_config` with the
    discriminator's class (or `generator_cls`). `embedding_sharing` "full"
    builds it on the discriminator's own embedding layer (one set of token,
    position and segment variables: ELECTRA); "disentangled" gives it its
    own, and the discriminator reads stop_gradient(the generator's tables) +
    its own tables, zeroed here (DeBERTa-v3's gradient-disentangled sharing:
    detection trains only those deltas; `served_backbone` folds them);
    "none" shares nothing. Samples are drawn by Gumbel-max under stop_gradient,
    so the detection loss never reaches the generator; a sample equal to the
    original counts as original. `backbone` is the discriminator: it is what
    is exported; the generator is not served.

    Inputs: the discriminator's inputs (`token_ids` already masked) plus
    `mask_positions`, `mask_ids` and `mask_weights` [B, P]. Outputs: `mlm`
    [B, P, V] generator logits, `rtd` [B, L, 1] discriminator logits and
    `rtd_labels` [B, L, 1]. Loss = MLM + `rtd_weight` x RTD.

    Args:
        discriminator: a backbone with an `embeddings` layer (a
            `TokenPositionSegmentEmbedding`) whose constructor takes
            `embeddings=` for full sharing (`BertBackbone`).
        generator_config: the generator's constructor arguments.
        generator_cls: registered name of the generator's class; None for the discriminator's.
        embedding_sharing: "full", "disentangled" or "none".
        rtd_weight: the detection loss's weight (50 in ELECTRA, 10 in DeBERTa-v3).
        rtd_reads_context: the detection head reads LayerNorm(each state + the first token's state),
            DeBERTa-v3's head; False: each state alone, ELECTRA's.
        temperature: sampling temperature (1.0 in ELECTRA).
        seed: optional seed of the sampler.
        two_stage_steps: 0 for joint training; otherwise the two-stage variant:
            the generator trains alone for this many steps, then the
            discriminator starts from the generator's weights and trains with
            the generator frozen. It needs a generator of the discriminator's
            shape and no shared embeddings.
        loss_chunk_size: int; > 0 scores the generator's MLM targets that many positions at a time
            (`mlm` then holds each one's cross-entropy and arg-max hit, as `BertPretrainer`'s does): no
            [positions, vocabulary] logits are kept for the gradient. The sampler still reads the logits,
            which no gradient passes through.
    """

    backbone_argument = "discriminator"
    output_kinds = ()  # the generator is discarded after pretraining; only the discriminator is served

    def __init__(self, discriminator, generator_config, generator_cls=None, embedding_sharing=FULL,
                 rtd_weight=50.0, rtd_reads_context=False, temperature=1.0, seed=None, two_stage_steps=0,
                 loss_chunk_size=0, **kwargs):
        cls = keras.saving.get_registered_object(generator_cls) if generator_cls else type(discriminator)
        if cls is None:
            raise ValueError(f"unknown generator class {generator_cls!r}")
        if embedding_sharing not in EMBEDDING_SHARING:
            raise ValueError(f"embedding_sharing must be one of {', '.join(EMBEDDING_SHARING)}; got "
                             f"{embedding_sharing!r}")
        shared = {"embeddings": discriminator.embeddings} if embedding_sharing == FULL else {}
        generator = cls(**generator_config, dtype=discriminator.dtype_policy, name="generator", **shared)
        if embedding_sharing == DISENTANGLED:
            discriminator.embeddings.share_disentangled(generator.embeddings)
        inputs = dict(discriminator.input)
        inputs.update(mask_positions=keras.Input((None,), dtype="int32", name="mask_positions"),
                      mask_ids=keras.Input((None,), dtype="int32", name="mask_ids"),
                      mask_weights=keras.Input((None,), dtype="float32", name="mask_weights"))
        encoded = generator({name: inputs[name] for name in generator.input})["sequence_output"]
        head = MaskedLMHead(
            generator.vocab_size, token_embedding=generator.token_embedding, activation=generator.activation,
            layer_norm_epsilon=generator.layer_norm_epsilon, initializer_range=generator.initializer_range,
            dtype=discriminator.dtype_policy, name="mlm_head", loss_chunk_size=loss_chunk_size,
        )
        logits = head(encoded, inputs["mask_positions"])
        mlm = head(encoded, inputs["mask_positions"], inputs["mask_ids"]) if loss_chunk_size else logits
        samples = GumbelSampler(temperature, seed=seed, name="sampler")(logits)
        corrupted, labels = ReplaceTokens(name="replace")(
            inputs["token_ids"], inputs["mask_positions"], inputs["mask_ids"], inputs["mask_weights"], samples)
        judged = discriminator({name: corrupted if name == "token_ids" else inputs[name]
                                for name in discriminator.input})["sequence_output"]
        rtd = ReplacedTokenHead(discriminator.activation, discriminator.initializer_range,
                                context_norm_epsilon=discriminator.layer_norm_epsilon if rtd_reads_context else None,
                                dtype=discriminator.dtype_policy, name="rtd_head")(judged)
        outputs = {"mlm": mlm, "rtd": rtd, "rtd_labels": labels}
        super().__init__(discriminator, inputs, outputs,
                         [scored(GENERATOR_MLM) if loss_chunk_size else GENERATOR_MLM,
                          replaced_token_detection(rtd_weight)], **kwargs)
        self.loss_chunk_size = loss_chunk_size
        self.generator = generator
        self.generator_config = dict(generator_config)
        self.generator_cls = generator_cls
        self.embedding_sharing = embedding_sharing
        self.rtd_weight = rtd_weight
        self.rtd_reads_context = rtd_reads_context
        self.temperature = temperature
        self.seed = seed
        self.two_stage_steps = two_stage_steps
        if two_stage_steps:
            mismatch = [w.shape for w in generator.weights] != [w.shape for w in discriminator.weights]
            if embedding_sharing != NONE or mismatch:
                raise ValueError("the two-stage variant needs a generator of the discriminator's shape "
                                 "and separate embeddings")

    def training_callbacks(self):
        return [TwoStageSchedule(self.two_stage_steps)] if self.two_stage_steps else []

    def training_stages(self, total_steps):
        if not self.two_stage_steps:
            return [(total_steps, None)]
        first = min(self.two_stage_steps, total_steps)
        return [(first, 1), (total_steps - first, 2)]

    def set_stage(self, stage):
        """Two-stage variant: 1 trains the generator only, 2 the discriminator only, None both."""
        for layer in (self.generator, self.get_layer("mlm_head")):
            layer.trainable = stage in (1, None)
        for layer in (self.backbone, self.get_layer("rtd_head")):
            layer.trainable = stage in (2, None)

    def compile_from_config(self, config):
        """A reloaded model's optimizer covers both stages' variables, as when it was saved."""
        self.set_stage(None)
        super().compile_from_config(config)

    def masked_lm_model(self, mask_id=None):
        """None: the generator is discarded after pretraining; only the discriminator is served."""
        return None

    def served_backbone(self):
        """With disentangled sharing, a copy of the discriminator whose tables hold the sums it computes
        with (its deltas + the generator's), which serves without the generator."""
        if self.embedding_sharing != DISENTANGLED:
            return self.backbone
        backbone = type(self.backbone).from_config(self.backbone.get_config())
        backbone.set_weights(self.backbone.get_weights())
        for table, weights in self.backbone.embeddings.merged_tables().items():
            getattr(backbone.embeddings, table).embeddings.assign(weights)
        return backbone

    def get_config(self):
        return {**super().get_config(), "generator_config": self.generator_config,
                "generator_cls": self.generator_cls, "embedding_sharing": self.embedding_sharing,
                "rtd_weight": self.rtd_weight, "rtd_reads_context": self.rtd_reads_context,
                "temperature": self.temperature, "seed": self.seed, "two_stage_steps": self.two_stage_steps,
                **({"loss_chunk_size": self.loss_chunk_size} if self.loss_chunk_size else {})}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "share_embeddings" in config:  # saved before sharing had modes
            config["embedding_sharing"] = FULL if config.pop("share_embeddings") else NONE
        return super().from_config(config)


class TwoStageSchedule(keras.callbacks.Callback):
    """ELECTRA's two-stage variant: before `switch_step` only the generator trains; at it the
    discriminator takes the generator's weights; after it only the discriminator trains.

    The stage follows the optimizer's count of updates, read when training
    begins (a resumed run continues in its stage) and then counted here (an
    update every `gradient_accumulation_steps` batches): on JAX the weights
    live in the trainer's state between steps, and reading them each step
    would copy that state back every time.

    The optimizer is built for both stages' weights, so that a checkpoint
    holds one state for the whole run; each step updates only the weights
    that train. On JAX that takes an optimizer that can update a part of the
    weights it was built for (`updates_a_part`, as
    the optimizers of `keras_bertology.engine.optimization`): Keras's JAX
    trainer hands an optimizer only the weights that train.
    """

    def __init__(self, switch_step):
        super().__init__()
        self.switch_step = switch_step
        self.step = 0

    def on_train_begin(self, logs=None):
        model = self.model
        if keras.config.backend() == "jax" and not getattr(model.optimizer, "updates_a_part", False):
            raise ValueError(
                f"the two-stage variant trains on JAX with an optimizer that updates a part of the weights it was "
                f"built for (those of keras_bertology.engine.optimization, as bertology pretrain uses); "
                f"{type(model.optimizer).__name__} updates all of them, and each stage trains a part")
        if not model.optimizer.built:  # slots for both stages' variables, whichever trains first
            model.set_stage(None)
            model.optimizer.build(model.trainable_variables)
        self.step = int(model.optimizer.iterations.numpy())
        self._batches = model.optimizer.gradient_accumulation_steps or 1
        self._enter(2 if self.step >= self.switch_step else 1)

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self._batches:  # an update applies after the last micro-batch only
            return
        self.step += 1
        if self.step == self.switch_step:
            model = self.model  # on JAX, reading it brings the trainer's state back into the weights
            for target, source in zip(model.backbone.weights, model.generator.weights):
                target.assign(keras.ops.copy(source))  # its own buffer: JAX's step takes each weight's over
            self._enter(2)

    def _enter(self, stage):
        self.model.set_stage(stage)
        self.model.make_train_function(force=True)


@keras.saving.register_keras_serializable(package="keras_bertology")
class ReplacedTokenDetector(Pretrainer):
    """A discriminator alone: backbone + replaced-token head, trained on given `rtd_labels` [B, L, 1].

    What an imported ELECTRA discriminator (`ElectraForPreTraining`) becomes;
    outputs `rtd` [B, L, 1] logits.
    """

    def __init__(self, backbone, **kwargs):
        inputs = dict(backbone.input)
        judged = backbone(inputs)["sequence_output"]
        rtd = ReplacedTokenHead(backbone.activation, backbone.initializer_range, dtype=backbone.dtype_policy,
                                name="rtd_head")(judged)
        super().__init__(backbone, inputs, {"rtd": rtd}, [replaced_token_detection(1.0)], **kwargs)
