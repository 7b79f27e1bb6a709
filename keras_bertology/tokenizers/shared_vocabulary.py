"""One vocabulary for many families: a cased SentencePiece model trained once, which each family reads with the
special tokens it needs (`ModelFamily.shared_tokenizer_path`), so that models compared on it split every text
into the same pieces with the same ids, and a comparison between them is not one of casing or segmentation.

`bertology study` pretrains its arms on one by default (`--tokenizers shared`, docs/study.md)."""

from collections.abc import Sequence

from keras_bertology.tokenizers.base import DEFAULT_SPECIAL_TOKENS
from keras_bertology.tokenizers.sentencepiece import SentencePieceTokenizer, train_sentencepiece

# Every special a family reads the vocabulary with, at ids 0-4: RoBERTa's <s> <pad> </s> <unk> <mask>.
SHARED_SPECIALS = dict(DEFAULT_SPECIAL_TOKENS)


def train_shared_vocabulary(sentences: Sequence[str], vocab_size: int) -> SentencePieceTokenizer:
    """A cased SentencePiece unigram model of up to `vocab_size` pieces (fewer where the text holds fewer, as
    the native WordPiece and BPE learners give) with byte fallback (a character it never saw becomes its
    UTF-8 bytes, never <unk>): case and accents kept, as the cased vocabularies of the published models keep
    them, since a task may read them (proper nouns)."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=True,
                               special_tokens=SHARED_SPECIALS, hard_limit=False)


def encoder_tokenizer(shared: SentencePieceTokenizer) -> SentencePieceTokenizer:
    """The shared vocabulary as an encoder reads it: <s> opens a text (or closes it, in XLNet's layout), </s>
    separates, <mask> masks."""
    return SentencePieceTokenizer(shared.model_proto, SHARED_SPECIALS)
