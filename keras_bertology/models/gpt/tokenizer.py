"""GPT's tokenizer: byte-level BPE learned from the corpus, with GPT-2's one special token."""

from keras_bertology.tokenizers.byte_bpe_training import train_byte_level_bpe

END_OF_TEXT = "<|endoftext|>"
# GPT-2's one special token ends every document and plays every role a causal LM has: it opens a served
# text (whose first token is then predicted as after a document boundary in training), closes it, and pads.
GPT2_SPECIAL_TOKENS = {"eot": END_OF_TEXT, "cls": END_OF_TEXT, "sep": END_OF_TEXT, "pad": END_OF_TEXT}


def train_tokenizer(sentences, vocab_size):
    """A byte-level BPE vocabulary of `vocab_size` tokens: <|endoftext|>, the 256 bytes, the merges."""
    return train_byte_level_bpe(sentences, vocab_size, GPT2_SPECIAL_TOKENS)


def shared_tokenizer(shared):
    """A study's shared vocabulary (`tokenizers.shared_vocabulary`) as GPT reads it: its </s> ends every
    document and opens a served text, as <|endoftext|> does; padding is <pad>, which no position attends."""
    from keras_bertology.tokenizers.sentencepiece import SentencePieceTokenizer

    return SentencePieceTokenizer(shared.model_proto, {"pad": "<pad>", "unk": "<unk>", "cls": "</s>", "sep": "</s>",
                                                       "eot": "</s>"})
