"""ALBERT's vocabulary: a SentencePiece unigram model with [CLS] [SEP] [MASK] <pad> <unk>."""

from keras_bertology.data.tokenizers import ALBERT_SPECIAL_TOKENS, train_sentencepiece


def train_tokenizer(sentences, vocab_size):
    """A unigram SentencePiece model as google-research/albert trains it, with byte fallback."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=True,
                               special_tokens=ALBERT_SPECIAL_TOKENS)
