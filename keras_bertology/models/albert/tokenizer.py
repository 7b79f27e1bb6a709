"""ALBERT's vocabulary: a SentencePiece unigram model with [CLS] [SEP] [MASK] <pad> <unk>."""

from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

# ALBERT's special-token roles and pieces, in id order (the mask last).
ALBERT_SPECIAL_TOKENS = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


def train_tokenizer(sentences, vocab_size):
    """A unigram SentencePiece model as google-research/albert trains and reads it: text lowercased,
    accents stripped, `` and '' turned into ", characters outside the vocabulary <unk> (no byte
    fallback), so that transformers' AlbertTokenizer reads the exported model with the same ids."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=False,
                               special_tokens=ALBERT_SPECIAL_TOKENS, lower_case=True, strip_accents=True,
                               replace_quotes=True)
