"""In-graph tokenizers, one module per type: `wordpiece` (BERT's), `sentencepiece`, `byte_bpe` (GPT-2's
and RoBERTa's byte-level BPE) and `word` (ELMo's words), each with its trainer; `base` holds the interface
and the registry by type that `saved.load_tokenizer` reads saved tokenizers with. The classes and
functions most used are named here, imported on first use.
"""

from keras_bertology.lazy_imports import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "Tokenizer": "keras_bertology.tokenizers.base",
    "register_tokenizer_type": "keras_bertology.tokenizers.base",
    "load_tokenizer": "keras_bertology.tokenizers.saved",
    "WordPieceTokenizer": "keras_bertology.tokenizers.wordpiece",
    "train_wordpiece": "keras_bertology.tokenizers.wordpiece",
    "SentencePieceTokenizer": "keras_bertology.tokenizers.sentencepiece",
    "train_sentencepiece": "keras_bertology.tokenizers.sentencepiece",
    "ByteLevelBPETokenizer": "keras_bertology.tokenizers.byte_bpe",
    "train_byte_level_bpe": "keras_bertology.tokenizers.byte_bpe_training",
    "WordTokenizer": "keras_bertology.tokenizers.word",
    "train_word_tokenizer": "keras_bertology.tokenizers.word",
})

__all__ = ["ByteLevelBPETokenizer", "SentencePieceTokenizer", "Tokenizer", "WordPieceTokenizer", "WordTokenizer",
           "load_tokenizer", "register_tokenizer_type", "train_byte_level_bpe", "train_sentencepiece",
           "train_wordpiece", "train_word_tokenizer"]
