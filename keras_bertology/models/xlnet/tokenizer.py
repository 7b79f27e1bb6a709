"""XLNet's vocabulary: a cased SentencePiece unigram model with <cls> <sep> <pad> <mask> <unk>."""

from keras_bertology.data.tokenizers import XLNET_SPECIAL_TOKENS, train_sentencepiece


def train_tokenizer(sentences, vocab_size):
    """A cased unigram SentencePiece model as zihangdai/xlnet reads text: accents stripped, `` and ''
    turned into ", characters outside the vocabulary <unk> (no byte fallback), so that transformers'
    XLNetTokenizer reads the exported model with the same ids."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=False,
                               special_tokens=XLNET_SPECIAL_TOKENS, strip_accents=True, replace_quotes=True)
