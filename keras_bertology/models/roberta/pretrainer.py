"""RoBERTa pretraining: masked LM only (no next-sentence prediction)."""

import keras

from keras_bertology.models.bert.pretrainer import BertPretrainer


@keras.saving.register_keras_serializable(package="keras_bertology")
class RobertaPretrainer(BertPretrainer):
    """A `BertPretrainer` with the NSP objective removed, as in RoBERTa.

    Fed FULL-SENTENCES / DOC-SENTENCES packed inputs with dynamic masking.
    Reports `mlm_loss` and `mlm_accuracy`.

    Its MLM head always uses the exact GELU, whatever the encoder's
    activation, as fairseq's and Hugging Face's RoBERTa heads do.

    Args:
        backbone: a `BertBackbone` configured as RoBERTa (no segments).
    """

    takes_next_sentence_prediction = False

    def __init__(self, backbone, **kwargs):
        kwargs.pop("next_sentence_prediction", None)
        kwargs.pop("mlm_activation", None)
        super().__init__(backbone, next_sentence_prediction=False, mlm_activation="gelu", **kwargs)
