"""GPT's tokenizer: byte-level BPE learned from the corpus, with GPT-2's one special token."""

from keras_bertology.data.byte_bpe import GPT2_SPECIAL_TOKENS
from keras_bertology.data.byte_bpe_training import train_byte_level_bpe


def train_tokenizer(sentences, vocab_size):
    """A byte-level BPE vocabulary of `vocab_size` tokens: <|endoftext|>, the 256 bytes, the merges."""
    return train_byte_level_bpe(sentences, vocab_size, GPT2_SPECIAL_TOKENS)
