"""ModernBERT pretraining: masked LM alone, through a head whose transform and norm have no biases."""

import keras

from keras_bertology.models.bert.pretrainer import BertPretrainer

HEAD_OPTIONS = {"transform_bias": False, "layer_norm_bias": False}


@keras.saving.register_keras_serializable(package="keras_bertology")
class ModernBertPretrainer(BertPretrainer):
    """A `BertPretrainer` without next-sentence prediction, whose masked-LM head is ModernBERT's: dense
    (no bias) -> GELU -> norm (a scale, no bias) -> the tied token table + an output bias.

    Reports `mlm_loss` and `mlm_accuracy`.

    Args:
        backbone: a `ModernBertBackbone`.

    Example:
        >>> from keras_bertology.models.modernbert.backbone import ModernBertBackbone
        >>> from keras_bertology.models.modernbert.pretrainer import ModernBertPretrainer
        >>> backbone = ModernBertBackbone(vocab_size=100, num_layers=1, num_heads=2, hidden_size=16,
        ...                               intermediate_size=24)
        >>> ModernBertPretrainer(backbone).objectives
        ['mlm']
    """

    takes_next_sentence_prediction = False

    def __init__(self, backbone, **kwargs):
        for fixed in ("next_sentence_prediction", "mlm_activation", "mlm_head_options"):
            kwargs.pop(fixed, None)
        super().__init__(backbone, next_sentence_prediction=False, mlm_activation="gelu",
                         mlm_head_options=HEAD_OPTIONS, **kwargs)
