"""SpanBERT keeps case: a cased WordPiece vocabulary, as the published models use."""

from keras_bertology.tokenizers.wordpiece import train_wordpiece


def train_tokenizer(sentences, vocab_size):
    return train_wordpiece(sentences, vocab_size, lower_case=False)
