"""BigBird's vocabulary: a cased SentencePiece unigram model with [CLS] [SEP] [MASK] <pad> <unk>."""

from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS
from keras_bertology.tokenizers.sentencepiece import train_sentencepiece


def train_tokenizer(sentences, vocab_size):
    """A unigram SentencePiece model read as transformers' BigBirdTokenizer reads spiece.model: cased,
    text otherwise unchanged, characters outside the vocabulary <unk> (no byte fallback)."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=False,
                               special_tokens=ALBERT_SPECIAL_TOKENS)
