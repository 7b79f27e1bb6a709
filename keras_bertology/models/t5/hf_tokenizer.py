"""T5's transformers tokenizer: spiece.model, to which the class appends its `extra_ids` sentinels itself,
text passed to SentencePiece unchanged, </s> closing each text."""

from keras_bertology.convert.hf_export import check_unknown_characters, refuse_preprocessing, special_entries
from keras_bertology.convert.hf_tokenizer import (HFTokenizerFormat, configured_specials, read_model_file,
                                                 tokenizer_config)
from keras_bertology.models.t5.tokenizer import T5_SENTINELS, T5_SPECIAL_TOKENS
from keras_bertology.tokenizers.sentencepiece import SentencePieceTokenizer, with_sentinels, without_sentinels


def read(hf_dir):
    """spiece.model with tokenizer_config.json's specials and its `extra_ids` sentinels appended."""
    model_proto = read_model_file(hf_dir, "spiece.model")
    if model_proto is None:
        return None
    config = tokenizer_config(hf_dir)
    sentinels = int(config.get("extra_ids", T5_SENTINELS))
    specials = configured_specials(config, T5_SPECIAL_TOKENS)
    return SentencePieceTokenizer(with_sentinels(model_proto, sentinels), specials, sentinels=sentinels)


def write(tokenizer, folder, tokenizer_class, layout=None):
    """spiece.model without the sentinels, which the class appends (`extra_ids`)."""
    check_unknown_characters(tokenizer, tokenizer_class)
    refuse_preprocessing(tokenizer, tokenizer_class, tuple(tokenizer.preprocessing))
    (folder / "spiece.model").write_bytes(without_sentinels(tokenizer.model_proto, tokenizer.sentinels))
    return dict(extra_ids=tokenizer.sentinels, eos_token=tokenizer.vocabulary[tokenizer.sep_id],
                **special_entries(tokenizer, ("unk", "pad")))


HF_TOKENIZER = HFTokenizerFormat(classes=("T5Tokenizer",), read=read, write=write,
                                 layout=("$A sep", "$A sep $B:1 sep:1"))
