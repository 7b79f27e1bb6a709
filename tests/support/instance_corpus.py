"""Synthetic corpora whose every token id is unique (FIRST_ID + its position in the corpus), so that any token
of an instance traces back to its document and sentence; the instance tests of several families use them."""

import numpy as np

PAD, CLS, SEP = 0, 2, 3
FIRST_ID = 5  # ids below are special


class Corpus:
    """Documents of unique ids plus, per global position, its document and whether it starts a sentence."""

    def __init__(self, rng, num_docs, sentences_per_doc, sentence_len):
        self.documents, doc_of, starts = [], [], []
        next_id = FIRST_ID
        for doc in range(num_docs):
            sentences = []
            for _ in range(rng.integers(*sentences_per_doc, endpoint=True)):
                length = int(rng.integers(*sentence_len, endpoint=True))
                sentences.append(np.arange(next_id, next_id + length, dtype=np.int32))
                doc_of += [doc] * length
                starts += [True] + [False] * (length - 1)
                next_id += length
            self.documents.append(sentences)
        self.doc_of = np.array(doc_of)
        self.starts = np.append(np.array(starts), True)  # the position after the corpus starts nothing real
        self.num_tokens = next_id - FIRST_ID

    def doc(self, tokens):
        return self.doc_of[tokens - FIRST_ID]

    def sentence_start(self, token):
        return self.starts[token - FIRST_ID]

    def sentence_end(self, token):
        return self.starts[token - FIRST_ID + 1]

    def all_tokens(self):
        return np.concatenate([np.concatenate(doc) for doc in self.documents])


def segments(row):
    """A and B tokens of one `[CLS] A [SEP] B [SEP]` row."""
    seps = np.flatnonzero(row == SEP)
    return row[1 : seps[0]], row[seps[0] + 1 : seps[1]]


def is_contiguous(tokens):
    return bool(np.all(np.diff(tokens) == 1))
