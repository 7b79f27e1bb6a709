"""Text as Hugging Face's BERT tokenizer reads it: its normaliser, and its word splitting, as RE2 patterns.

WordPiece tokenizes the words these patterns cut; the word-level tokenizer
splits text the same way, and the export cuts over-long words at the same
delimiters.
"""

import tensorflow as tf
import tensorflow_text as tf_text

# Hugging Face limits words to 100 characters, tensorflow_text to bytes: the
# same for ASCII, but a word over 100 bytes and within 100 characters is
# split into pieces by HF and becomes [UNK] here.
MAX_BYTES_PER_WORD = 100

# Control characters that Hugging Face's BERT normaliser deletes: NUL,
# U+FFFD and every category-C character except tab, newline and return.
DELETED_CHARS = r"[\x{0}\x{FFFD}]|[^\P{C}\t\n\r]"
# Hugging Face's BertPreTokenizer splits words on Rust's `char::is_whitespace`
# (Unicode White_Space; RE2's \s is ASCII only) and isolates punctuation
# (ASCII symbols and Unicode P*); its normaliser isolates CJK ideographs
# (these ranges) unless tokenize_chinese_chars is off.
_WHITESPACE_RANGES = (r"\t\n\x{0B}\x{0C}\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}"
                      r"\x{205F}\x{3000}")
_PUNCTUATION_RANGES = r"!-/:-@\[-`{-~\p{P}"
_CJK_RANGES = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
               r"\x{2B740}-\x{2B81F}\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")
WHITESPACE = f"[{_WHITESPACE_RANGES}]+"
PUNCTUATION = f"[{_PUNCTUATION_RANGES}]"
CJK_CHARS = f"[{_CJK_RANGES}]"
# A character that ends a word as BERT's pre-tokenizer delimits words (one of the above): a run of other
# characters longer than MAX_BYTES_PER_WORD is one [UNK] however long it runs.
WORD_DELIMITER = f"[{_WHITESPACE_RANGES}{_PUNCTUATION_RANGES}{_CJK_RANGES}]"


def bert_normalize(strings: tf.Tensor, lower_case: bool, strip_accents: bool, clean_text: bool = True) -> tf.Tensor:
    """Hugging Face's BertNormalizer as TF ops, in its order (see WordPieceTokenizer); CJK
    isolation is left to the word splitting."""
    if clean_text:
        strings = tf.strings.regex_replace(strings, DELETED_CHARS, "")
    else:
        # Lower-casing and word splitting end strings at NUL. HF keeps NUL inside its word, like \x01
        # (neither space nor punctuation, kept by case and accent rules), so \x01 stands in for it;
        # WordPieceTokenizer refuses vocabularies that would tell the two apart.
        strings = tf.strings.regex_replace(strings, r"\x00", "\x01")
    if strip_accents:
        strings = tf.strings.regex_replace(tf_text.normalize_utf8(strings, "NFD"), r"\p{Mn}", "")
    if lower_case:
        strings = tf.strings.lower(strings, encoding="utf-8")
    return strings


# The same rules for ONNX Runtime Extensions' RE2, whose Unicode tables are version 13's where tensorflow-text's
# are 15's: the format characters and the punctuation that Unicode 14 and 15 added, spelled out (found by
# comparing both on every code point: tests/tokenizers/test_wordpiece_onnx.py).
_ADDED_FORMAT = r"\x{890}\x{891}\x{13439}-\x{1343F}"
_ADDED_PUNCTUATION = (r"\x{61D}\x{1B7D}\x{1B7E}\x{2E53}-\x{2E5D}\x{10F86}-\x{10F89}\x{116B9}\x{11B00}-\x{11B09}"
                      r"\x{11F43}-\x{11F4F}\x{12FF1}\x{12FF2}")
ONNX_DELETED_CHARS = rf"[\x{{0}}\x{{FFFD}}{_ADDED_FORMAT}]|[^\P{{C}}\t\n\r]"
ONNX_PUNCTUATION = f"[{_PUNCTUATION_RANGES}{_ADDED_PUNCTUATION}]"
ONNX_WORD_DELIMITER = f"[{_WHITESPACE_RANGES}{_PUNCTUATION_RANGES}{_ADDED_PUNCTUATION}{_CJK_RANGES}]"
