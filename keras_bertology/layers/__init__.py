"""Reusable, model-agnostic Keras layers."""

from keras_bertology.layers.attention import MultiHeadSelfAttention, merge_attention_masks
from keras_bertology.layers.embeddings import TokenPositionSegmentEmbedding
from keras_bertology.layers.heads import MaskedLMHead, PooledClassificationHead, gather_positions
from keras_bertology.layers.replaced_tokens import GumbelSampler, ReplacedTokenHead, ReplaceTokens
from keras_bertology.layers.shared_stack import SharedEncoderStack
from keras_bertology.layers.span_boundary import SpanBoundaryHead
from keras_bertology.layers.transformer_block import TransformerEncoderBlock

__all__ = [
    "GumbelSampler",
    "MaskedLMHead",
    "MultiHeadSelfAttention",
    "PooledClassificationHead",
    "ReplaceTokens",
    "ReplacedTokenHead",
    "SharedEncoderStack",
    "SpanBoundaryHead",
    "TokenPositionSegmentEmbedding",
    "TransformerEncoderBlock",
    "gather_positions",
    "merge_attention_masks",
]
