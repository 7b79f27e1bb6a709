"""The attentions an encoder can be built with, by name (a backbone's `attention_type`)."""

from keras_bertology.errors import ConfigError
from keras_bertology.layers.attention import MultiHeadSelfAttention
from keras_bertology.layers.block_sparse_attention import BlockSparseSelfAttention
from keras_bertology.layers.low_rank_attention import LowRankSelfAttention

ATTENTION_KINDS = {
    "full": MultiHeadSelfAttention,
    "block_sparse": BlockSparseSelfAttention,
    "low_rank": LowRankSelfAttention,
}


def attention_kind(name):
    """The attention class named `name`; ConfigError naming the choices otherwise."""
    if name not in ATTENTION_KINDS:
        raise ConfigError(f"attention_type {name!r} is not known; choose from {', '.join(ATTENTION_KINDS)}")
    return ATTENTION_KINDS[name]
