"""A user's data folder as a fine-tuning task: its format, its kind, its checks and (without a dev file) its split.

A user folder holds `train.<ext>` and `test.<ext>`, optionally `dev.<ext>`, all
in one format:

* `tsv` (classification): a header row naming a `text` column, a `label`
  column and optionally `text_b` (then the examples are pairs and every file
  needs it), in any order; other columns are ignored. Tab-separated, with CSV
  quoting: a field that starts with a double quote runs to the closing quote
  and may hold tabs and newlines (`""` is a literal quote inside it). A row
  equal to the header (files joined with their headers) is an error, not an
  example of class "label".
* `jsonl` (classification or spans): one JSON object per line, blank lines
  skipped. Classification objects have `text`, `label` (a string or a whole
  number) and optionally `text_b`, as the first training example decides.
  Span objects (the first training example has `question`, `context` or
  `answers`) have `question`, `context` and `answers`, either a list of
  `{"text", "answer_start"}` objects or the Hugging Face SQuAD form
  `{"text": [...], "answer_start": [...]}`; the answer text must be at
  `answer_start` in the context.
* `tsv` or `jsonl` (seq2seq): an `input` and a `target` text per example
  (a TSV header naming them, or JSON objects with them): a task an
  encoder-decoder learns by writing each target (`finetune.text_to_text`),
  scored by exact match.
* `conll` or `txt` (tagging): `token<TAB>tag` per line (without a tab, the
  line splits at its last whitespace run), a blank line between sentences;
  lines starting with `-DOCSTART-` are skipped. A `tsv` folder whose train
  file names no `text` column and starts with a `token<TAB>BIO tag` line is
  read the same way.

Files are UTF-8 (an initial byte-order mark is dropped). Without a dev file,
dev is carved from train: the train examples are shuffled by
`random.Random("dev")` and the first round(n / 10) of them (at least 1, and
never all) become dev; both keep the file's order.

Every problem the data can cause raises `DataError` with one message naming
the file, the line where there is one, and how to fix it.

Which kind a file holds is asked of the kinds its format may hold
(`example_kinds`): the first whose fields the first training record names,
else the last. This module is pure Python (no TensorFlow).
"""

import os
import random
from pathlib import Path
from typing import NamedTuple

from keras_bertology.errors import DataError
from keras_bertology.finetune.data_files import (
    Row, conll_rows, first_line_fields, jsonl_objects, read_text, tsv_rows)
from keras_bertology.finetune.example_kinds import CLASSIFICATION, SEQ2SEQ, SPANS, TAGGING
from keras_bertology.finetune.task_data import SPLITS, TaskData, split_counts, tenth


def load_folder(folder: Path) -> TaskData:
    """Read, check and (without a dev file) split the data files of one folder.

    Labels come from train (and dev where it is carved from train); a dev or test label that never occurs
    in the training file is an error, since the model could not learn it. A dev or test label whose every
    training example was carved into dev is not an error but is listed in `TaskData.untrained_labels`."""
    ext, paths = _data_files(folder)
    kind, pairs, rows = FORMATS[ext].read(FORMATS[ext].kinds, paths)
    kind.check_training(rows["train"], paths["train"])
    labels = kind.labels([row.example for row in rows["train"]])
    for split in rows.keys() - {"train"}:
        _check_known_labels(kind, labels, rows[split], paths[split], paths["train"])
    if "dev" in rows:
        how = "as given"
    else:
        rows["train"], rows["dev"] = _carve_dev(rows["train"], paths["train"])
        how = f"dev carved from {paths['train'].name} (a fixed 10% from a permutation seeded 'dev')"
    kind.check_learnable(labels, paths["train"])  # after the checks that name a line
    splits = {split: [row.example for row in rows[split]] for split in SPLITS}
    scored = kind.label_set(splits["dev"] + splits["test"]) - kind.label_set(splits["train"])
    untrained = tuple(label for label in labels if label in scored)
    return TaskData(Path(os.path.abspath(folder)).name, kind.name, labels, pairs, splits,
                    f"{ext} files in {folder}, {how}: " + split_counts(splits), untrained)


def _data_files(folder: Path):
    """The format of the folder and its split files, train first; exactly one format, with train and test."""
    found = {}
    for ext in FORMATS:
        files = {split: folder / f"{split}.{ext}" for split in SPLITS if (folder / f"{split}.{ext}").is_file()}
        if files:
            found[ext] = files
    expected = "; ".join(f"train.{ext} and test.{ext} for {held.holds}" for ext, held in FORMATS.items())
    if not found:
        raise DataError(f"{folder} holds no data files: expected {expected}, plus an optional dev file "
                        "in the same format")
    if len(found) > 1:
        names = ", ".join(path.name for files in found.values() for path in files.values())
        raise DataError(f"{folder} mixes formats ({names}): give every split in one format, {expected}")
    (ext, files), = found.items()
    for split in ("train", "test"):
        if split not in files:
            raise DataError(f"{folder / f'{split}.{ext}'} is missing: a data folder needs train.{ext} and "
                            f"test.{ext} (dev.{ext} is optional)")
    return ext, files


def _claimant(kinds, names):
    """The first of `kinds` that claims a file whose first training record has the field `names`, else the last."""
    return next((kind for kind in kinds[:-1] if kind.claims(names)), kinds[-1])


def _read_tsv(kinds, paths):
    """(kind, pairs, rows) of TSV files: records under a header, or `token<TAB>tag` lines where the first
    line claims them for such a kind. The train header decides whether examples are pairs."""
    kind = _claimant(kinds, first_line_fields(paths["train"]))
    if kind.token_lines:
        return _read_token_lines([kind], paths)
    rows, pairs = {}, None
    for split, path in paths.items():
        rows[split], pairs = _tsv_records(kind, path, pairs)
    return kind, pairs, rows


def _tsv_records(kind, path, pairs):
    """(rows, pairs) of one TSV file of `kind`; `pairs` None lets its header decide, else the header must agree."""
    columns = []

    def check_header(names):
        columns.extend(kind.tsv_columns(names, path, pairs))
        return columns

    def example(fields, line):
        return kind.example(fields, path, line, kind.pairs_in(columns))

    return tsv_rows(path, kind.columns, check_header, example), kind.pairs_in(columns)


def _read_jsonl(kinds, paths):
    """(kind, pairs, rows) of JSONL files, as the first training object decides."""
    objects = {split: jsonl_objects(path) for split, path in paths.items()}
    first = objects["train"][0][1]
    kind = _claimant(kinds, first.keys())
    pairs = kind.pairs_in(first)
    rows = {split: [Row(line, kind.example(obj, paths[split], line, pairs)) for line, obj in lines]
            for split, lines in objects.items()}
    return kind, pairs, rows


def _read_token_lines(kinds, paths):
    """(kind, pairs, rows) of CoNLL files: one row per sentence."""
    kind, rows = kinds[-1], {}
    for split, path in paths.items():
        rows[split] = conll_rows(read_text(path), path, kind.check_tag)
        if not rows[split]:
            raise DataError(f"{path} has no sentences: write one 'token<TAB>tag' per line and a blank line "
                            "between sentences")
    return kind, False, rows


class _Format(NamedTuple):
    """A file extension's formats: what it holds (for messages), the kinds it may hold, and its reader."""

    holds: str
    kinds: tuple
    read: object  # (kinds, {split: path}) -> (kind, pairs, {split: rows})


FORMATS = {"tsv": _Format("classification or seq2seq (or tagging without a header)",
                          (TAGGING, SEQ2SEQ, CLASSIFICATION), _read_tsv),
           "jsonl": _Format("classification, spans or seq2seq", (SPANS, SEQ2SEQ, CLASSIFICATION), _read_jsonl),
           "conll": _Format("tagging", (TAGGING,), _read_token_lines),
           "txt": _Format("tagging", (TAGGING,), _read_token_lines)}


def _carve_dev(train, path):
    """Move a fixed 10% of train to dev (at least 1, never all), keeping the file order in both."""
    if len(train) < 2:
        raise DataError(f"{path} has a single example: without a dev file, dev is carved from train, which needs "
                        "at least 2 examples; add examples or a dev file")
    order = list(range(len(train)))
    random.Random("dev").shuffle(order)
    chosen = set(order[:max(1, tenth(len(train)))])
    return ([row for index, row in enumerate(train) if index not in chosen],
            [row for index, row in enumerate(train) if index in chosen])


def _check_known_labels(kind, labels, rows, path, train_path):
    """A dev or test label the training file lacks cannot be learned: name it and where it is."""
    known = set(labels)
    for row in rows:
        for label, line in kind.labels_with_lines(row):
            if label not in known:
                shown = ", ".join(labels[:12]) + (", ..." if len(labels) > 12 else "")
                raise DataError(f"{path} line {line}: label {label!r} never occurs in {train_path.name}, so no "
                                f"model can learn it; fix the label or add training examples of it "
                                f"(training labels: {shown})")
