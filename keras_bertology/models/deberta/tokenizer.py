"""DeBERTa v1's tokenizer: GPT-2's byte-level BPE, learned from the corpus, with DeBERTa's special tokens."""

from keras_bertology.data.byte_bpe_training import train_byte_level_bpe
from keras_bertology.data.tokenizers import DEBERTA_SPECIAL_TOKENS


def train_tokenizer(sentences, vocab_size):
    """A byte-level BPE vocabulary of `vocab_size` tokens: DeBERTa's specials, the 256 bytes, the merges."""
    return train_byte_level_bpe(sentences, vocab_size, DEBERTA_SPECIAL_TOKENS)
