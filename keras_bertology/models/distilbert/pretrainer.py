"""DistilBERT pretraining: a student learns a teacher's masked-LM distribution and hidden states.

The loss (Sanh et al. 2019) is alpha_kl x KL(teacher || student) at temperature T (x T^2) + alpha_mlm x
masked-LM cross-entropy + alpha_cos x (1 - cos) between the last hidden states, defaults 5 / 2 / 1 and
T = 2 as the original's training script. The KL and the cosine cover every real token; with
`kl_positions="masked"` the KL covers the masked positions only (the original's `restrict_ce_to_mask`).
The teacher runs inside the training step, frozen and without dropout, on the same masked inputs; its
logits and states are labels the model computes, as ELECTRA's replaced-token labels are.
"""

import dataclasses
import math

import keras
from keras import ops

from keras_bertology.layers import MaskedLMHead
from keras_bertology.layers.heads import gather_positions
from keras_bertology.models.bert.pretrainer import MLM
from keras_bertology.models.distilbert.losses import CosineDistance, SoftTargetKL, no_metrics, top1_agreement
from keras_bertology.models.pretrainer import Objective, Pretrainer

TEACHER_LOGITS, TEACHER_STATES = "teacher_logits", "teacher_states"
KL_POSITIONS = ("tokens", "masked")


def spread_layers(teacher_layers, student_layers):
    """The teacher layers a student of `student_layers` starts from: spread evenly from the first to the
    last, rounding half up (12 -> 6 gives the original's 0, 2, 4, 7, 9, 11); one layer takes the first."""
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(f"a student of {student_layers} layers cannot start from a teacher of {teacher_layers}")
    if student_layers == 1:
        return [0]
    step = (teacher_layers - 1) / (student_layers - 1)
    return [math.floor(i * step + 0.5) for i in range(student_layers)]


@keras.saving.register_keras_serializable(package="keras_bertology")
class DistilBertPretrainer(Pretrainer):
    """A student `BertBackbone` with a masked-LM head and, given a teacher, the distillation objectives.

    Inputs: the backbone's inputs and `mask_positions` [B, P]. Outputs: "mlm" [B, P, V] logits; with a
    teacher also "kl" (the student's logits where the KL applies: [B, L, V], or [B, P, V] with
    `kl_positions="masked"`) and "cos" ([B, L, H] last hidden states), beside the teacher's, which the
    losses read as labels. Reports `mlm_loss`, `mlm_accuracy`, `kl_loss`, `kl_agreement` (top-1 match of
    student and teacher where the KL applies) and `cos_loss`.

    Args:
        backbone: the student, a `BertBackbone` as wide as the teacher, with the teacher's vocabulary.
        teacher: optional pretrainer with a masked-LM head ("mlm_head") on a backbone of the same width and
            vocabulary (BERT's, RoBERTa's); frozen here. Without one the model is a masked LM alone (a
            converted DistilBertForMaskedLM, or serving).
        temperature: float, the softening of both distributions in the KL.
        alpha_kl, alpha_mlm, alpha_cos: float, the weights of the three losses.
        kl_positions: "tokens" (the KL over every real token) or "masked" (over the masked positions only).
        mlm_activation: the MLM head's transform activation (None: the backbone's).
        tie_decoder: bool, as `BertPretrainer`'s.
    """

    def __init__(self, backbone, teacher=None, temperature=2.0, alpha_kl=5.0, alpha_mlm=2.0, alpha_cos=1.0,
                 kl_positions="tokens", mlm_activation=None, tie_decoder=True, **kwargs):
        if kl_positions not in KL_POSITIONS:
            raise ValueError(f"kl_positions must be one of {', '.join(KL_POSITIONS)}; got {kl_positions!r}")
        restrict_kl_to_mask = kl_positions == "masked"
        mlm_activation = mlm_activation or backbone.activation
        inputs = dict(backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        states = backbone({k: v for k, v in inputs.items() if k in backbone.input})["sequence_output"]
        head = MaskedLMHead(backbone.vocab_size, token_embedding=backbone.token_embedding, activation=mlm_activation,
                            layer_norm_epsilon=backbone.layer_norm_epsilon,
                            initializer_range=backbone.initializer_range, tie_decoder=tie_decoder,
                            dtype=backbone.dtype_policy, name="mlm_head")
        mlm = dataclasses.replace(MLM, loss_weight=float(alpha_mlm))
        if teacher is None:
            outputs, objectives = {"mlm": head(states, inputs["mask_positions"])}, [mlm]
        else:
            outputs = self._distillation_outputs(teacher, inputs, states, head, restrict_kl_to_mask)
            objectives = [
                mlm,
                Objective("kl", label_key=TEACHER_LOGITS,
                          weight_key="mask_weights" if restrict_kl_to_mask else "padding_mask",
                          loss_weight=float(alpha_kl), make_loss=lambda: SoftTargetKL(temperature),
                          make_metrics=top1_agreement),
                Objective("cos", label_key=TEACHER_STATES, weight_key="padding_mask", loss_weight=float(alpha_cos),
                          make_loss=CosineDistance, make_metrics=no_metrics),
            ]
        super().__init__(backbone, inputs, outputs, objectives, **kwargs)
        self.teacher = teacher
        self._freeze_teacher()
        self.temperature, self.kl_positions = float(temperature), kl_positions
        self.alpha_kl, self.alpha_mlm, self.alpha_cos = float(alpha_kl), float(alpha_mlm), float(alpha_cos)
        self.mlm_activation, self.tie_decoder = mlm_activation, tie_decoder

    @staticmethod
    def _distillation_outputs(teacher, inputs, states, head, restrict):
        view = _teacher_view(teacher, restrict)
        features = {name: inputs[name] if name in inputs else ops.zeros_like(inputs["token_ids"])
                    for name in teacher.backbone.input}  # one segment: a teacher's segment ids are 0
        if restrict:
            features["mask_positions"] = inputs["mask_positions"]
        taught = view(features, training=False)
        logits = head(states, inputs["mask_positions"]) if restrict else head(states)
        mlm = logits if restrict else gather_positions(logits, inputs["mask_positions"])
        return {"mlm": mlm, "kl": logits, TEACHER_LOGITS: taught["logits"], "cos": states,
                TEACHER_STATES: taught["states"]}

    @property
    def trainable(self):
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        """Setting it (as loading a saved model does) reaches every sub-layer; the teacher stays frozen."""
        keras.layers.Layer.trainable.fset(self, value)
        self._freeze_teacher()

    def _freeze_teacher(self):
        teacher = getattr(self, "teacher", None)
        if teacher is not None:
            teacher.trainable = False
            for variable in teacher.variables:
                variable.trainable = False

    def get_config(self):
        return {
            **super().get_config(),
            "teacher": None if self.teacher is None else keras.saving.serialize_keras_object(self.teacher),
            "temperature": self.temperature,
            "alpha_kl": self.alpha_kl,
            "alpha_mlm": self.alpha_mlm,
            "alpha_cos": self.alpha_cos,
            "kl_positions": self.kl_positions,
            "mlm_activation": self.mlm_activation,
            "tie_decoder": self.tie_decoder,
        }

    @classmethod
    def from_config(cls, config):
        if config.get("teacher") is not None:
            config = dict(config, teacher=keras.saving.deserialize_keras_object(config["teacher"]))
        return super().from_config(config)


def _teacher_view(teacher, restrict):
    """The frozen teacher as one model named "teacher": its backbone's inputs (and `mask_positions` when
    the KL is restricted to them) -> its masked-LM "logits" there (else at every position) and its last
    hidden "states"."""
    inputs = {name: keras.Input(tensor.shape[1:], dtype=tensor.dtype, name=name)
              for name, tensor in teacher.backbone.input.items()}
    states = teacher.backbone(inputs)["sequence_output"]
    head = teacher.get_layer("mlm_head")
    if restrict:
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        logits = head(states, inputs["mask_positions"])
    else:
        logits = head(states)
    return FrozenModel(keras.Model(inputs, {"logits": logits, "states": states}), name="teacher", trainable=False)


class FrozenModel(keras.layers.Layer):
    """Runs `model` in inference mode (no dropout) whatever mode the model around it trains in: a call's
    own `training=False` inside a functional graph would give way to the outer call's `training=True`.
    Built by `DistilBertPretrainer` from its teacher, so it is not serialized on its own."""

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        self.model = model

    def call(self, inputs, training=None):
        return self.model(inputs, training=False)

    def compute_output_spec(self, inputs, training=None):
        return self.model.compute_output_spec(inputs)


def distilbert_pretrainer(backbone, teacher=None, **settings):
    """The family's pretrainer; given a teacher, the student first takes the teacher's weights: the
    embeddings (its segment-0 row folded into the positions, which a one-segment teacher adds to every
    token), a spread of its layers (`spread_layers`) and its masked-LM head."""
    if teacher is None:
        return DistilBertPretrainer(backbone, **settings)
    initialize_student(backbone, teacher.backbone)
    head = teacher.get_layer("mlm_head")
    settings.setdefault("mlm_activation", getattr(teacher, "mlm_activation", None))
    pretrainer = DistilBertPretrainer(backbone, teacher=teacher, tie_decoder=head.tie_decoder, **settings)
    student_head = pretrainer.get_layer("mlm_head")
    for mine, theirs in zip(student_head.weights, head.weights):
        mine.assign(ops.copy(theirs))
    return pretrainer


def initialize_student(student, teacher):
    """Copy the teacher's embeddings and spread layers into `student` (same width and vocabulary). Copies,
    not the teacher's arrays: on JAX two variables holding one buffer could not both be donated to a step."""
    ours, theirs = student.get_layer("embeddings"), teacher.get_layer("embeddings")
    ours.token_embedding.embeddings.assign(ops.copy(theirs.token_embedding.embeddings))
    positions = ops.copy(theirs.position_embedding.embeddings)[: student.max_positions]
    if getattr(theirs, "segment_embedding", None) is not None:
        positions = positions + ops.convert_to_tensor(theirs.segment_embedding.embeddings)[0]
    ours.position_embedding.embeddings.assign(positions)
    for mine, source in zip(ours.layer_norm.weights, theirs.layer_norm.weights):
        mine.assign(ops.copy(source))
    for index, chosen in enumerate(spread_layers(teacher.num_layers, student.num_layers)):
        block, source = student.get_layer(f"encoder_block_{index}"), teacher.get_layer(f"encoder_block_{chosen}")
        for mine, value in zip(block.weights, source.weights):
            mine.assign(ops.copy(value))
