"""DeBERTa-v3's vocabulary: a cased SentencePiece unigram model with [PAD] [CLS] [SEP] [UNK] [MASK]."""

from keras_bertology.models.deberta.tokenizer import DEBERTA_SPECIAL_TOKENS
from keras_bertology.tokenizers.sentencepiece import train_sentencepiece


def train_tokenizer(sentences, vocab_size):
    """A unigram SentencePiece model read as transformers' DebertaV2Tokenizer reads spm.model: cased, text
    otherwise unchanged, characters outside the vocabulary [UNK] (no byte fallback)."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=False,
                               special_tokens=DEBERTA_SPECIAL_TOKENS)
