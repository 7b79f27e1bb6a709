"""What an example of each kind of fine-tuning data looks like, its labels, and the one-line error when it is wrong.

* classification: `{"text": str, "label": str}`, plus `"text_b": str` when the
  examples are text pairs;
* tagging: `{"words": [str, ...], "tags": [str, ...]}`, one BIO tag per word
  (`O`, `B-TYPE` or `I-TYPE`);
* spans: `{"question": str, "context": str, "answers": [{"text": str, "start": int}]}`,
  `start` being the answer's offset in characters into `context`. Every
  training example has at least one answer; dev and test ones may have none;
* seq2seq: `{"text": str, "target": str}`, an input and the text to write.

Labels are always strings: an integer label in a file becomes its decimal
string (JSON `1` -> "1"). Class labels are in numeric order when every one is
a whole number ("2" before "10"), otherwise sorted as strings; tag labels are
"O" followed by the other tags sorted. Classification data needs two classes
and tagging data a tag other than O (a single class scores perfectly and
teaches nothing).

A kind is named by `TaskData.kind`; the loader of a data folder
(finetune/user_folders.py) asks the kinds its format may hold which one
claims the files, then builds and checks each example through it. This
module is pure Python (no TensorFlow).
"""

import re

from keras_bertology.errors import DataError

_TAG = re.compile(r"O|[BI]-\S+")
_WHOLE_NUMBER = re.compile(r"[+-]?\d+")


class ExampleKind:
    """One kind of labeled data: which files hold it, how a record becomes an example, and its labels.

    `fields` are the record fields that claim a file for this kind (its first training record names one;
    the last kind a format lists takes the files no other claims); `columns` the TSV columns a file of it
    needs (for the message about an empty file)."""

    name = ""
    fields = frozenset()
    columns = ()
    token_lines = False  # True: read from `token<TAB>tag` lines, not from records of fields
    answer_field = None  # the field a decoder learns to write in text-to-text fine-tuning; None: not written
    free_text_answers = False  # True: answers are free text, not labels: only a decoder learns them

    def claims(self, names) -> bool:
        """Whether a file whose first training record has these field names (a TSV's first line, a JSON
        object's keys) holds this kind."""
        return bool(self.fields & set(names))

    def pairs_in(self, names) -> bool:
        """Whether the examples are text pairs, as the first training record's field names say."""
        return False

    def tsv_columns(self, names, path, pairs) -> list:
        """The columns to read from a TSV header `names` (`pairs`: None for the train file, else whether its
        examples are pairs); a DataError when the header lacks one. Only kinds read from TSV records have it:
        user_folders.py offers a .tsv file to those alone, so reaching this is a wrong entry in its table."""
        raise TypeError(f"{self.name} examples are not read from TSV records")

    def example(self, fields, path, line, pairs) -> dict:
        """The example of a record (a TSV row or JSON object as a dict), checked; a DataError naming the line.
        Tagging data is read a sentence at a time (CoNLL) and has none: reaching this is a wrong table entry."""
        raise TypeError(f"{self.name} examples are not read one record at a time")

    def labels(self, examples) -> tuple:
        """The label set of `examples`, in the order of the model's outputs (none for label-free kinds)."""
        return ()

    def example_labels(self, example) -> list:
        return []

    def label_set(self, examples) -> set:
        return {label for example in examples for label in self.example_labels(example)}

    def labels_with_lines(self, row):
        """(label, line) pairs of a file's `row` (`user_folders.Row`), for messages."""
        return zip(self.example_labels(row.example), [row.line])

    def check_learnable(self, labels, where):
        """A DataError where the training labels (of `where`, named for the message) teach nothing."""

    def check_training(self, rows, path):
        """A DataError where a training row of `path` cannot be learned from."""

    def draw(self, examples, count, rng) -> list:
        """`count` of `examples` drawn by `rng` (uniformly)."""
        return rng.sample(examples, count)


class Classification(ExampleKind):
    """One label per text or text pair."""

    name = "classification"
    columns = ("text", "label")
    answer_field = "label"

    def pairs_in(self, names) -> bool:
        return "text_b" in names

    def tsv_columns(self, names, path, pairs) -> list:
        has_pair = "text_b" in names
        if pairs is not None and has_pair != pairs:
            raise DataError(f"{path} {'has' if has_pair else 'lacks'} a 'text_b' column but the train file "
                            f"{'does not' if has_pair else 'has one'}: every split needs the same columns")
        wanted = ("text", "text_b", "label") if has_pair else ("text", "label")
        missing = [name for name in wanted if name not in names]
        if missing:
            raise DataError(f"{path}: no {' or '.join(repr(name) for name in missing)} column in the header "
                            f"(found: {', '.join(map(repr, names))}); the first line must name tab-separated "
                            "columns 'text', 'label' and optionally 'text_b'")
        return list(wanted)

    def example(self, fields, path, line, pairs) -> dict:
        """{"text", ["text_b",] "label"}, the label as a string."""
        if not pairs and "text_b" in fields:
            raise DataError(f"{path} line {line}: has 'text_b' but the first training example does not; give "
                            "every example a text_b or none")
        keys = ("text", "text_b") if pairs else ("text",)
        example = {key: text_field(fields, key, path, line).strip() for key in keys}
        label = fields.get("label")
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            raise DataError(f"{path} line {line}: {'missing' if label is None else 'bad'} label; every example "
                            "needs a 'label' that is a string or a whole number")
        example["label"] = str(label).strip()
        if not example["label"]:
            raise DataError(f"{path} line {line}: empty label; give every example its label")
        return example

    def labels(self, examples) -> tuple:
        """Class names in numeric order when all are whole numbers ("2" before "10"), else sorted as strings."""
        labels = {example["label"] for example in examples}
        if all(_WHOLE_NUMBER.fullmatch(label) for label in labels):
            return tuple(sorted(labels, key=lambda label: (int(label), label)))
        return tuple(sorted(labels))

    def example_labels(self, example) -> list:
        return [example["label"]]

    def check_learnable(self, labels, where):
        if len(labels) < 2:
            raise DataError(f"{where} has a single class ({labels[0]!r}): a classifier needs examples of at least "
                            "two labels")

    def draw(self, examples, count, rng) -> list:
        """One example of each class first, then from each class in proportion to its size (each class's
        examples shuffled), so that a few labels still cover every class."""
        by_class = {}
        for example in examples:
            by_class.setdefault(example["label"], []).append(example)
        queues = [rng.sample(members, len(members)) for _, members in sorted(by_class.items())]
        order = sorted(range(len(queues)), key=lambda c: -len(queues[c]))  # larger classes first on a tie
        chosen, taken = [], [0] * len(queues)
        while len(chosen) < count:
            # a class not drawn yet, else the one whose next example keeps the draw closest to its share
            c = min(order, key=lambda c: (taken[c] > 0, (taken[c] + 1) / len(queues[c])))
            chosen.append(queues[c][taken[c]])
            taken[c] += 1
        rng.shuffle(chosen)
        return chosen


class Tagging(ExampleKind):
    """One BIO tag per word, read from `token<TAB>tag` lines; claims a TSV file that starts with such a line."""

    name = "tagging"
    token_lines = True

    def claims(self, names) -> bool:
        return len(names) == 2 and "text" not in names and bool(_TAG.fullmatch(names[1]))

    @staticmethod
    def check_tag(tag, path, line):
        if not _TAG.fullmatch(tag):
            raise DataError(f"{path} line {line}: tag {tag!r} is not O, B-TYPE or I-TYPE; use BIO tags")

    def labels(self, examples) -> tuple:
        """"O" first (the tag of untagged words), then every other tag sorted."""
        return ("O",) + tuple(sorted({tag for example in examples for tag in example["tags"]} - {"O"}))

    def example_labels(self, example) -> list:
        return example["tags"]

    def labels_with_lines(self, row):
        return zip(row.example["tags"], row.tag_lines)

    def check_learnable(self, labels, where):
        if set(labels) <= {"O"}:
            raise DataError(f"{where} tags every word O: tagging needs entity tags (B-TYPE, I-TYPE) to learn")


class Spans(ExampleKind):
    """An answer span in a context for a question (SQuAD style), from JSON objects in either answers form."""

    name = "spans"
    fields = frozenset({"question", "context", "answers"})

    def example(self, fields, path, line, pairs) -> dict:
        """{"question", "context", "answers": [{"text", "start"}]}."""
        question = text_field(fields, "question", path, line).strip()
        context = text_field(fields, "context", path, line)  # not stripped: answer offsets count from its start
        answers = [_answer(text, start, context, path, line) for text, start in _answer_pairs(fields, path, line)]
        return {"question": question, "context": context, "answers": answers}

    def check_training(self, rows, path):
        for row in rows:
            if not row.example["answers"]:
                raise DataError(f"{path} line {row.line}: a training example needs at least one answer")


class Seq2Seq(ExampleKind):
    """An input text and the target text an encoder-decoder learns to write."""

    name = "seq2seq"
    fields = frozenset({"input", "target"})
    columns = ("input", "target")
    answer_field = "target"
    free_text_answers = True

    def tsv_columns(self, names, path, pairs) -> list:
        missing = [name for name in self.columns if name not in names]
        if missing:
            raise DataError(f"{path}: no {' or '.join(map(repr, missing))} column in the header (found: "
                            f"{', '.join(map(repr, names))}); a seq2seq file names tab-separated 'input' and "
                            "'target'")
        return list(self.columns)

    def example(self, fields, path, line, pairs) -> dict:
        """{"text", "target"} from the `input` and `target` texts."""
        return {"text": text_field(fields, "input", path, line).strip(),
                "target": text_field(fields, "target", path, line).strip()}


CLASSIFICATION, TAGGING, SPANS, SEQ2SEQ = Classification(), Tagging(), Spans(), Seq2Seq()
EXAMPLE_KINDS = {kind.name: kind for kind in (CLASSIFICATION, TAGGING, SPANS, SEQ2SEQ)}


def text_field(fields, key, path, line) -> str:
    value = fields.get(key)
    if not isinstance(value, str):
        raise DataError(f"{path} line {line}: {'missing' if value is None else 'non-string'} {key!r}; every "
                        f"example needs {key!r} as a string")
    if not value.strip():
        raise DataError(f"{path} line {line}: empty {key!r}; fill it in or remove the example")
    return value


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
