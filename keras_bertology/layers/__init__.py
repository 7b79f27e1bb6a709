"""Reusable, model-agnostic Keras layers."""

from keras_bertology.layers.attention import MultiHeadSelfAttention, causal_mask, merge_attention_masks
from keras_bertology.layers.attention_kinds import ATTENTION_KINDS, attention_kind
from keras_bertology.layers.block_sparse_attention import BlockSparseSelfAttention
from keras_bertology.layers.character_cnn import CharacterCNN
from keras_bertology.layers.disentangled_attention import (
    DisentangledSelfAttention,
    RelativeEmbeddings,
    RelativePositionTable,
)
from keras_bertology.layers.documents import document_positions, same_document_mask
from keras_bertology.layers.dropout import HashedDropout, hashed_uniform_bits
from keras_bertology.layers.embeddings import TokenPositionSegmentEmbedding
from keras_bertology.layers.heads import MaskedLMHead, PooledClassificationHead, gather_positions
from keras_bertology.layers.low_rank_attention import LowRankSelfAttention, SequenceProjection
from keras_bertology.layers.position_buckets import RelativePositionBias, position_buckets
from keras_bertology.layers.projected_lstm import ProjectedLSTM
from keras_bertology.layers.relative_attention import (
    RelativeAttentionTerms,
    different_segments,
    rel_shift,
    sinusoidal_relative_positions,
)
from keras_bertology.layers.replaced_tokens import GumbelSampler, ReplacedTokenHead, ReplaceTokens
from keras_bertology.layers.sampled_softmax import SampledSoftmax
from keras_bertology.layers.scalar_mix import ScalarMix
from keras_bertology.layers.shared_stack import SharedEncoderStack
from keras_bertology.layers.span_boundary import SpanBoundaryHead
from keras_bertology.layers.transformer_block import TransformerDecoderBlock, TransformerEncoderBlock
from keras_bertology.layers.two_stream import TwoStreamBlock
from keras_bertology.layers.vocabulary_scores import TokenScoresInChunks

__all__ = [
    "ATTENTION_KINDS",
    "BlockSparseSelfAttention",
    "CharacterCNN",
    "DisentangledSelfAttention",
    "GumbelSampler",
    "HashedDropout",
    "LowRankSelfAttention",
    "MaskedLMHead",
    "MultiHeadSelfAttention",
    "PooledClassificationHead",
    "ProjectedLSTM",
    "RelativeAttentionTerms",
    "RelativeEmbeddings",
    "RelativePositionBias",
    "RelativePositionTable",
    "ReplaceTokens",
    "ReplacedTokenHead",
    "SampledSoftmax",
    "ScalarMix",
    "SequenceProjection",
    "SharedEncoderStack",
    "SpanBoundaryHead",
    "TokenPositionSegmentEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "TokenScoresInChunks",
    "TwoStreamBlock",
    "attention_kind",
    "causal_mask",
    "different_segments",
    "document_positions",
    "gather_positions",
    "hashed_uniform_bits",
    "merge_attention_masks",
    "position_buckets",
    "rel_shift",
    "same_document_mask",
    "sinusoidal_relative_positions",
]
