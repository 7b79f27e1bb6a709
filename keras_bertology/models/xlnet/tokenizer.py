"""XLNet's vocabulary: a cased SentencePiece unigram model with <cls> <sep> <pad> <mask> <unk>."""

from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

# XLNet's special-token roles and pieces, in id order (the mask last).
XLNET_SPECIAL_TOKENS = {"unk": "<unk>", "cls": "<cls>", "sep": "<sep>", "pad": "<pad>", "mask": "<mask>"}


def train_tokenizer(sentences, vocab_size):
    """A cased unigram SentencePiece model as zihangdai/xlnet reads text: accents stripped, `` and ''
    turned into ", characters outside the vocabulary <unk> (no byte fallback), so that transformers'
    XLNetTokenizer reads the exported model with the same ids."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=False,
                               special_tokens=XLNET_SPECIAL_TOKENS, strip_accents=True, replace_quotes=True)
