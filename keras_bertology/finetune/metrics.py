"""Downstream metrics, computed the way their reference scripts do.

- Classification: accuracy and macro-F1 (per-class F1 averaged over every
  class seen in the gold or predicted labels; a class with no true and no
  predicted example is not counted; an undefined precision or recall is 0).
- Tagging: entity-level precision, recall and F1 over exact (type, start,
  end) matches, chunks read from BIO tags as conlleval and seqeval's default
  mode read them: an I-X after O or after another type starts a chunk.
- Span extraction: SQuAD v1.1 exact match and token F1 after its answer
  normalisation (lower case, no punctuation, no articles a/an/the, single
  spaces), the best over the gold answers.
"""

import collections
import re
import string


def accuracy(gold, predicted):
    """Share of positions where `predicted` equals `gold`.

    >>> from keras_bertology.finetune.metrics import accuracy
    >>> accuracy(["a", "b", "b"], ["a", "b", "a"])
    0.6666666666666666
    """
    _check_lengths(gold, predicted)
    return sum(g == p for g, p in zip(gold, predicted)) / len(gold) if gold else 0.0


def macro_f1(gold, predicted):
    """Unweighted mean of the per-class F1 over the classes in `gold` or `predicted`.

    >>> from keras_bertology.finetune.metrics import macro_f1
    >>> round(macro_f1(["a", "a", "b", "c"], ["a", "b", "b", "b"]), 4)  # F1: a 2/3, b 1/2, c 0
    0.3889
    """
    _check_lengths(gold, predicted)
    classes = sorted(set(gold) | set(predicted), key=str)
    if not classes:
        return 0.0
    scores = []
    for label in classes:
        hits = sum(g == p == label for g, p in zip(gold, predicted))
        scores.append(_f1(hits, sum(p == label for p in predicted), sum(g == label for g in gold)))
    return sum(scores) / len(scores)


def bio_entities(tags):
    """The set of (type, start, end) chunks of one BIO tag sequence, `end` exclusive.

    >>> from keras_bertology.finetune.metrics import bio_entities
    >>> sorted(bio_entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"]))
    [('LOC', 3, 4), ('LOC', 4, 5), ('ORG', 5, 6), ('PER', 0, 2)]
    """
    chunks, kind, start = set(), None, None
    for index, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        if prefix not in ("B", "I", "O") or (prefix != "O" and not label):
            raise ValueError(f"not a BIO tag: {tag!r}")
        continues = prefix == "I" and label == kind
        if kind is not None and not continues:
            chunks.add((kind, start, index))
            kind = None
        if prefix in ("B", "I") and not continues:
            kind, start = label, index
    return chunks


def entity_scores(gold_sequences, predicted_sequences):
    """Micro precision, recall and F1 of exact entity matches over all sequences.

    >>> from keras_bertology.finetune.metrics import entity_scores
    >>> entity_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    {'precision': 0.0, 'recall': 0.0, 'f1': 0.0}
    """
    _check_lengths(gold_sequences, predicted_sequences)
    hits = found = expected = 0
    for gold, predicted in zip(gold_sequences, predicted_sequences):
        _check_lengths(gold, predicted)
        gold_chunks, predicted_chunks = bio_entities(gold), bio_entities(predicted)
        hits += len(gold_chunks & predicted_chunks)
        found += len(predicted_chunks)
        expected += len(gold_chunks)
    precision = hits / found if found else 0.0
    recall = hits / expected if expected else 0.0
    return {"precision": precision, "recall": recall, "f1": _f1(hits, found, expected)}


def normalize_answer(text):
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces.

    >>> from keras_bertology.finetune.metrics import normalize_answer
    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    """
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction, answers):
    """1.0 when the normalised prediction equals one of the normalised gold answers.

    >>> from keras_bertology.finetune.metrics import exact_match
    >>> exact_match("the Louvre", ["Louvre", "Musée du Louvre"])
    1.0
    """
    return float(any(normalize_answer(prediction) == normalize_answer(answer) for answer in answers))


def span_f1(prediction, answers):
    """The best token-overlap F1 of the prediction against the gold answers.

    >>> from keras_bertology.finetune.metrics import span_f1
    >>> round(span_f1("in Paris France", ["Paris"]), 4)  # precision 1/3, recall 1
    0.5
    """
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
        best = max(best, _f1(common, len(predicted), len(gold)))
    return best


def _f1(hits, found, expected):
    if not hits:
        return 0.0
    precision, recall = hits / found, hits / expected
    return 2 * precision * recall / (precision + recall)


def _check_lengths(gold, predicted):
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
