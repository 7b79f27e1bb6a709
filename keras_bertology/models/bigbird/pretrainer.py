"""BigBird-RoBERTa's pretraining: the masked LM alone, its head's transform in the encoder's activation."""

from keras_bertology.models.bert.pretrainer import BertPretrainer


def bigbird_pretrainer(backbone, next_sentence_prediction=False, **kwargs):
    """A `BertPretrainer` without next-sentence prediction (RoBERTa's recipe), as transformers'
    BigBirdForMaskedLM: the head computes the encoder's tanh GELU, tied to the token embeddings. An
    imported BigBirdForPreTraining keeps its NSP head (`next_sentence_prediction=True`)."""
    return BertPretrainer(backbone, next_sentence_prediction=next_sentence_prediction, **kwargs)
