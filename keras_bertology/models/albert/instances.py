"""ALBERT's instances: two consecutive segments, ordered (SOP) or, for an ablation, BERT's NSP pairs."""

from keras_bertology.data.instances import sentence_order_instances, sentence_pair_instances


def sentence_pairs(documents, context, sentence_task="sop"):
    """SOP pairs (`sop_labels`: 1 when swapped) or NSP pairs (`nsp_labels`: 1 when B is random)."""
    build = sentence_order_instances if sentence_task == "sop" else sentence_pair_instances
    return build(documents, context)
