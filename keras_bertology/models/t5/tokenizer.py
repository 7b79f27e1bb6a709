"""T5's vocabulary: a SentencePiece unigram model with <pad> </s> <unk> and 100 sentinels at its end."""

from keras_bertology.tokenizers.sentencepiece import train_sentencepiece

# T5's: pad 0, end of sequence 1, unk 2, no beginning token and no mask.
T5_SPECIAL_TOKENS = {"pad": "<pad>", "sep": "</s>", "unk": "<unk>"}
T5_SENTINELS = 100  # <extra_id_0> .. <extra_id_99> after T5's pieces, <extra_id_0> the last id


def train_tokenizer(sentences, vocab_size):
    """A cased unigram model as T5's (pad 0, end of sequence 1, unk 2, no beginning token, characters
    outside the vocabulary <unk>), its last 100 of `vocab_size` ids the sentinels that span corruption
    writes (`<extra_id_0>` the last id), so literal sentinels in served text are those ids."""
    return train_sentencepiece(sentences, vocab_size, model_type="unigram", byte_fallback=False,
                               special_tokens=T5_SPECIAL_TOKENS, sentinels=T5_SENTINELS)


def shared_tokenizer(shared):
    """A study's shared vocabulary (`tokenizers.shared_vocabulary`) as T5 reads it: its own <pad>, </s> and
    <unk> are pieces of it, and the 100 sentinels come after the shared pieces (whose ids do not move)."""
    from keras_bertology.tokenizers.sentencepiece import SentencePieceTokenizer, with_sentinels

    return SentencePieceTokenizer(with_sentinels(shared.model_proto, T5_SENTINELS), T5_SPECIAL_TOKENS,
                                  sentinels=T5_SENTINELS)
