"""The file formats of fine-tuning data: UTF-8 text, TSV with a header, JSON lines, CoNLL `token<TAB>tag` lines.

The readers know lines and fields, not kinds of task: what a record must
hold is checked by the callbacks the caller gives them (finetune/example_kinds.py),
one record at a time, so that the first problem of a file is the one named.
Every problem raises `DataError` naming the file and the line. Pure Python.
"""

import codecs
import csv
import io
import json
from pathlib import Path
from typing import NamedTuple

from keras_bertology.data.corpus import wide_encoding
from keras_bertology.errors import DataError


class Row(NamedTuple):
    """An example with the line it starts on and, for tagging, the line of each tag (for messages)."""

    line: int
    example: dict
    tag_lines: tuple = ()


def read_text(path, fallback=None) -> str:
    """The text of a UTF-8 file (a leading byte-order mark dropped); `fallback` is a codec for built-in data only."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise DataError(f"Cannot read {path}: {error.strerror}") from None
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    wide = wide_encoding(raw.split(b"\n", 1)[0])
    if wide:
        raise DataError(f"{path} is {wide}: save it as UTF-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if fallback:
            return raw.decode(fallback)
        line = raw.count(b"\n", 0, error.start) + 1
        raise DataError(f"{path} line {line}: byte 0x{raw[error.start]:02x} is not UTF-8; save the file as "
                        "UTF-8") from None


def numbered_lines(text):
    """(line number, line) pairs, split at newlines only: other Unicode line breaks stay inside lines."""
    return enumerate((line.rstrip("\r") for line in text.split("\n")), start=1)


def first_line_fields(path) -> list:
    """The tab-separated fields of the first non-blank line, stripped (a header, or a first record)."""
    first = next((line for line in read_text(path).splitlines() if line.strip()), "")
    return [field.strip() for field in first.split("\t")]


def tsv_rows(path, wanted, check_header, example):
    """The rows of a TSV file with a header: `check_header(names)` refuses a header without the `wanted`
    columns and returns the columns to read; `example(values, line)` builds each row's example."""
    lines = _csv_rows(path)
    if not lines:
        raise DataError(f"{path} is empty: its first line must be a header naming tab-separated "
                        f"{' and '.join(map(repr, wanted))} columns, followed by one example per line")
    (_, header), body = lines[0], lines[1:]
    names = [name.strip() for name in header]
    columns = {name: names.index(name) for name in check_header(names)}
    if not body:
        raise DataError(f"{path} has a header but no examples: add one tab-separated example per line below it")
    rows = []
    for line, fields in body:
        if len(fields) != len(header):
            raise DataError(f"{path} line {line}: {len(fields)} tab-separated fields where the header has "
                            f"{len(header)}; give every row one field per column (a field that starts with a "
                            f'double quote must end with one, and quotes inside it are doubled: "")')
        if [field.strip() for field in fields] == names:
            raise DataError(f"{path} line {line}: repeats the header row; remove it (were files with headers "
                            "concatenated?)")
        rows.append(Row(line, example({name: fields[index] for name, index in columns.items()}, line)))
    return rows


def _csv_rows(path):
    """(first line, fields) of each non-blank row, CSV quoting allowed so fields may hold tabs and newlines."""
    reader = csv.reader(io.StringIO(read_text(path), newline=""), delimiter="\t")
    rows, line = [], 1
    try:
        for fields in reader:
            if any(field.strip() for field in fields):
                rows.append((line, fields))
            line = reader.line_num + 1
    except csv.Error as error:
        raise DataError(f"{path} line {line}: {error}; fix the row's quoting") from None
    return rows


def jsonl_objects(path):
    """(line, object) for each non-blank line."""
    objects = []
    for line, text in numbered_lines(read_text(path)):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"{path} line {line}: invalid JSON ({error.msg} at column {error.colno}); write one "
                            "JSON object per line") from None
        if not isinstance(value, dict):
            raise DataError(f"{path} line {line}: expected a JSON object {{...}}, found {text.strip()[:40]!r}")
        objects.append((line, value))
    if not objects:
        raise DataError(f"{path} has no examples: write one JSON object per line")
    return objects


def conll_rows(text, path, check_tag):
    """One row per sentence of `token<TAB>tag` lines; blank lines end sentences, -DOCSTART- lines are skipped.
    `check_tag(tag, path, line)` refuses a tag."""
    rows, sentence = [], []
    for line, content in numbered_lines(text + "\n"):  # the added blank line ends the last sentence
        content = content.strip()
        if content.startswith("-DOCSTART-"):
            continue
        if content:
            token, tag = _token_and_tag(content, path, line)
            check_tag(tag, path, line)
            sentence.append((line, token, tag))
        elif sentence:
            lines, words, tags = zip(*sentence)
            rows.append(Row(lines[0], {"words": list(words), "tags": list(tags)}, lines))
            sentence = []
    return rows


def _token_and_tag(content, path, line):
    """Split a stripped CoNLL line at its tab, or at its last whitespace run when it has no tab."""
    fields = [field.strip() for field in content.split("\t")] if "\t" in content else content.rsplit(None, 1)
    if len(fields) != 2 or not all(fields):
        raise DataError(f"{path} line {line}: expected a token and its tag separated by a tab, found {content!r}; "
                        "write one 'token<TAB>tag' per line and a blank line between sentences")
    return fields
