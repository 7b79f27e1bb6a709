"""RoBERTa pretraining: masked LM only (no next-sentence prediction)."""

import keras

from keras_bertology.models.bert.pretrainer import BertPretrainer


@keras.saving.register_keras_serializable(package="keras_bertology")
class RobertaPretrainer(BertPretrainer):
    """A `BertPretrainer` with the NSP objective removed, as in RoBERTa.

    Fed FULL-SENTENCES / DOC-SENTENCES packed inputs with dynamic masking.
    Reports `mlm_loss` and `mlm_accuracy`.

    Args:
        backbone: a `BertBackbone` configured as RoBERTa (no segments, no pooler).
    """

    def __init__(self, backbone, **kwargs):
        kwargs.pop("next_sentence_prediction", None)
        super().__init__(backbone, next_sentence_prediction=False, **kwargs)
