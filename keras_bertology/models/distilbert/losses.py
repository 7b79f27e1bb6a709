"""DistilBERT's distillation losses, per position (the pretrainer averages them over the positions that
carry weight, as "batchmean" over the selected rows does in the original)."""

import keras
from keras import ops

from keras_bertology.models.pretrainer import WEIGHTED_AVERAGE


@keras.saving.register_keras_serializable(package="keras_bertology")
class SoftTargetKL(keras.losses.Loss):
    """KL(teacher || student) of the two distributions softened by `temperature`, times temperature^2
    (Hinton et al.'s scaling, which keeps its gradients the size of a hard-label loss's).

    y_true: the teacher's logits [..., V]; y_pred: the student's [..., V]; returns [...].
    """

    def __init__(self, temperature=2.0, name="soft_target_kl", **kwargs):
        kwargs.setdefault("reduction", WEIGHTED_AVERAGE)
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)

    def call(self, y_true, y_pred):
        teacher = ops.log_softmax(ops.cast(y_true, "float32") / self.temperature, axis=-1)
        student = ops.log_softmax(ops.cast(y_pred, "float32") / self.temperature, axis=-1)
        return ops.sum(ops.exp(teacher) * (teacher - student), axis=-1) * self.temperature ** 2

    def get_config(self):
        return dict(super().get_config(), temperature=self.temperature)


@keras.saving.register_keras_serializable(package="keras_bertology")
class CosineDistance(keras.losses.Loss):
    """1 - cos(student state, teacher state) per position (the original's CosineEmbeddingLoss with
    target 1). y_true, y_pred: [..., H]; returns [...]."""

    def __init__(self, name="cosine_distance", **kwargs):
        kwargs.setdefault("reduction", WEIGHTED_AVERAGE)
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        teacher, student = ops.cast(y_true, "float32"), ops.cast(y_pred, "float32")
        norms = ops.sqrt(ops.sum(ops.square(teacher), axis=-1) * ops.sum(ops.square(student), axis=-1))
        return 1.0 - ops.sum(teacher * student, axis=-1) / ops.maximum(norms, 1e-8)


def top1_agreement(prefix):
    """The share of weighted positions where the student's most likely token is the teacher's."""

    def agree(y_true, y_pred):
        return ops.cast(ops.argmax(y_true, axis=-1) == ops.argmax(y_pred, axis=-1), "float32")

    return [keras.metrics.MeanMetricWrapper(agree, name=f"{prefix}agreement")]


def no_metrics(prefix):
    return []
