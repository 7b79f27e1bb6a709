"""XLNet's vocabulary: a cased SentencePiece unigram model with <cls> <sep> <pad> <mask> <unk>."""

from keras_bertology.data.tokenizers import XLNET_SPECIAL_TOKENS, train_sentencepiece


def train_tokenizer(sentences, vocab_size):
    """A unigram SentencePiece model (XLNet's kind), cased, with byte fallback."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=True,
                               special_tokens=XLNET_SPECIAL_TOKENS)
