"""DeBERTa v1's tokenizer: GPT-2's byte-level BPE, learned from the corpus, with DeBERTa's special tokens."""

from keras_bertology.tokenizers.byte_bpe_training import train_byte_level_bpe

# DeBERTa's: [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3 (its published vocabularies end with [MASK]).
DEBERTA_SPECIAL_TOKENS = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}


def train_tokenizer(sentences, vocab_size):
    """A byte-level BPE vocabulary of `vocab_size` tokens: DeBERTa's specials, the 256 bytes, the merges."""
    return train_byte_level_bpe(sentences, vocab_size, DEBERTA_SPECIAL_TOKENS)
