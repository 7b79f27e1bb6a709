"""RoBERTa's tokenizer: byte-level BPE learned from the corpus, with RoBERTa's special tokens."""

from keras_bertology.tokenizers.base import DEFAULT_SPECIAL_TOKENS
from keras_bertology.tokenizers.byte_bpe_training import train_byte_level_bpe

ROBERTA_SPECIAL_TOKENS = DEFAULT_SPECIAL_TOKENS  # <s> <pad> </s> <unk> <mask>: the tokenizers' default


def train_tokenizer(sentences, vocab_size):
    """A byte-level BPE vocabulary of `vocab_size` tokens: <s> <pad> </s> <unk> <mask> (pad 1, as
    RoBERTa's), the 256 bytes, the merges."""
    return train_byte_level_bpe(sentences, vocab_size, ROBERTA_SPECIAL_TOKENS)
