"""Pretraining instances from tokenized documents: BERT's NSP pairs and RoBERTa's packed sequences.

A corpus is `documents -> sentences -> int token ids` without special tokens;
nothing here knows a tokenizer, only the few special ids passed in. Outputs are
dicts of int32 numpy arrays padded to `seq_len`, ready for `pipeline.make_dataset`.
"""

import bisect
import itertools

import numpy as np

from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.errors import ConfigError

Documents = list[list[np.ndarray]]

# BERT's random-next sampler retries this often to find a document other than the current one.
_RANDOM_DOCUMENT_TRIES = 10


def build_nsp_instances(
    documents: Documents,
    seq_len: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    rng: np.random.Generator,
    short_seq_prob: float = 0.1,
    dupe_factor: int = 1,
) -> dict[str, np.ndarray]:
    """Builds `[CLS] A [SEP] B [SEP]` pairs with google-research/bert's create_pretraining_data logic.

    Per document (and per dupe) a target length is drawn: `seq_len - 3`, or with
    probability `short_seq_prob` a uniform length in [2, seq_len - 3] (the original
    draws it once per document, not per instance). Consecutive sentences fill a
    chunk up to the target; A is its first 1..n-1 sentences; B is the rest
    (nsp_labels 0) or, half the time and always for a one-sentence chunk, sentences
    from a random start in another document (nsp_labels 1), the unused sentences
    being put back. The longer segment is then trimmed one token at a time from a
    random end until the pair fits. Instances are returned shuffled.

    Returns token_ids and segment_ids [N, seq_len] int32 and nsp_labels [N] int32.
    """
    max_num_tokens = seq_len - 3
    if max_num_tokens < 2:
        raise ConfigError(f"seq_len={seq_len} is too small for sentence pairs; it must be at least 5.")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise ConfigError(f"short_seq_prob={short_seq_prob} must be between 0 and 1.")
    if dupe_factor < 1:
        raise ConfigError(f"dupe_factor={dupe_factor} must be at least 1.")
    docs = [_Document(sentences) for sentences in _clean_documents(documents)]
    if len(docs) < 2:
        raise ConfigError("Next-sentence prediction needs at least two non-empty documents.")
    if max(doc.sentences for doc in docs) < 2:
        raise ConfigError(
            "Next-sentence prediction needs documents with at least two sentences, but every "
            "document has one; split documents into sentences, or use pack_sentences (no NSP)."
        )
    pairs = []
    for _ in range(dupe_factor):
        for index in range(len(docs)):
            pairs.extend(_document_pairs(docs, index, max_num_tokens, short_seq_prob, rng))
    order = rng.permutation(len(pairs))
    return _pair_arrays([pairs[i] for i in order], seq_len, cls_id, sep_id, pad_id)


def build_sop_instances(
    documents: Documents,
    seq_len: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    rng: np.random.Generator,
    short_seq_prob: float = 0.1,
    dupe_factor: int = 1,
) -> dict[str, np.ndarray]:
    """ALBERT's sentence-order pairs: two consecutive segments of one document, swapped half the time.

    Chunks and their target lengths are drawn as for NSP; A is a chunk's first
    1..n-1 sentences and B the rest, then with probability 1/2 the two trade
    places (sop_labels 1). A one-sentence chunk has no second segment and
    gives no pair. Returns token_ids and segment_ids [N, seq_len] and
    sop_labels [N] int32, shuffled.
    """
    max_num_tokens = seq_len - 3
    if max_num_tokens < 2:
        raise ConfigError(f"seq_len={seq_len} is too small for sentence pairs; it must be at least 5.")
    docs = [_Document(sentences) for sentences in _clean_documents(documents)]
    if max(doc.sentences for doc in docs) < 2:
        raise ConfigError("Sentence-order prediction needs documents with at least two sentences.")
    pairs = []
    for _ in range(dupe_factor):
        for doc in docs:
            target = max_num_tokens
            if rng.random() < short_seq_prob:
                target = int(rng.integers(2, max_num_tokens + 1))
            for first, end in doc.chunks(target):
                if end - first < 2:
                    continue
                split = first + int(rng.integers(1, end - first))
                tokens_a, tokens_b = _truncate_pair(doc.span(first, split), doc.span(split, end), max_num_tokens, rng)
                swapped = rng.random() < 0.5
                pairs.append((tokens_b, tokens_a, True) if swapped else (tokens_a, tokens_b, False))
    order = rng.permutation(len(pairs))
    return _pair_arrays([pairs[i] for i in order], seq_len, cls_id, sep_id, pad_id, label_key="sop_labels")


class _Document:
    """A document's sentences as one token array and the offsets where each sentence starts: a run of
    sentences is then a slice (a view), not a concatenation, and where a run reaches a length is a search.
    BERT's pairs over the bundled corpus at 32 tokens, 10 builds: 8.3-10.0 s of CPU before, 4.8-5.7 s after."""

    def __init__(self, sentences):
        self.tokens = np.concatenate(sentences)
        self.starts = [0, *itertools.accumulate(len(sentence) for sentence in sentences)]
        self.sentences = len(sentences)

    def span(self, first, end):
        """The tokens of sentences first..end-1."""
        return self.tokens[self.starts[first]:self.starts[end]]

    def reach(self, first, length):
        """The end of the shortest run of sentences from `first` with at least `length` tokens (or the
        document's end)."""
        return min(bisect.bisect_left(self.starts, self.starts[first] + length, first + 1), self.sentences)

    def chunks(self, target):
        """(first, end) of consecutive sentences grouped until each group reaches `target` tokens (the last
        may not)."""
        first = 0
        while first < self.sentences:
            end = self.reach(first, target)
            yield first, end
            first = end


def pack_sentences(
    documents: Documents,
    seq_len: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    cross_documents: bool = True,
) -> dict[str, np.ndarray]:
    """Packs whole consecutive sentences into `<cls> ... <sep>` sequences (RoBERTa, no NSP).

    cross_documents=True is RoBERTa's FULL-SENTENCES: packing runs on into the
    next document with an extra `sep_id` between the two. cross_documents=False
    is DOC-SENTENCES: a sequence never spans two documents, so the last one of
    each document may be short. A sentence longer than `seq_len - 2` starts a new
    sequence and is cut into full-length chunks. Order is kept (no shuffling).

    Returns token_ids and segment_ids (all 0) [N, seq_len] int32.
    """
    budget = seq_len - 2
    if budget < 1:
        raise ConfigError(f"seq_len={seq_len} is too small; it must be at least 3.")
    separator = np.array([sep_id], np.int32)
    rows, current, used = [], [], 0
    for document in _clean_documents(documents):
        starts_document = True
        for sentence in document:
            for piece in _chunks(sentence, budget):
                needs_separator = starts_document and used > 0
                if used + len(piece) + needs_separator > budget:
                    rows.append(np.concatenate(current))
                    current, used, needs_separator = [], 0, False
                if needs_separator:
                    current.append(separator)
                current.append(piece)
                used += len(piece) + needs_separator
                starts_document = False
        if not cross_documents:
            rows.append(np.concatenate(current))
            current, used = [], 0
    if current:
        rows.append(np.concatenate(current))
    token_ids = _frame_rows(rows, seq_len, cls_id, sep_id, pad_id)
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids)}


def pack_documents(
    documents: Documents,
    seq_len: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """Unpadded packing: each document's tokens run on, framed `<cls> ... <sep>`, and fill every row to
    the brim, several documents to a row; a document longer than the room left continues in the next row
    as a piece of its own. Padding stays at a row's tail (where less than one token and its frame would
    fit). `document_ids` numbers the row's pieces 1, 2, ... (0 for the padding): the model attends within
    a piece, and positions restart at each (`layers.documents`).

    Returns token_ids, segment_ids (all 0) and document_ids [N, seq_len] int32.
    """
    if seq_len < 3:
        raise ConfigError(f"seq_len={seq_len} is too small; it must be at least 3.")
    rows, current, used = [], [], 0
    for document in _clean_documents(documents):
        tokens = np.concatenate(document)
        while len(tokens):
            room = seq_len - used - 2
            if room < 1:
                rows.append(current)
                current, used, room = [], 0, seq_len - 2
            piece, tokens = tokens[:room], tokens[room:]
            current.append(piece)
            used += len(piece) + 2
    if current:
        rows.append(current)
    token_ids = np.full((len(rows), seq_len), pad_id, np.int32)
    document_ids = np.zeros((len(rows), seq_len), np.int32)
    for index, pieces in enumerate(rows):
        start = 0
        for number, piece in enumerate(pieces, start=1):
            framed = np.concatenate([[cls_id], piece, [sep_id]])
            token_ids[index, start:start + len(framed)] = framed
            document_ids[index, start:start + len(framed)] = number
            start += len(framed)
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "document_ids": document_ids}


def _clean_documents(documents: Documents) -> Documents:
    """int32 sentences with empty sentences and documents dropped, so no instance can be empty."""
    docs = []
    for document in documents:
        sentences = [np.asarray(s, dtype=np.int32).reshape(-1) for s in document]
        sentences = [s for s in sentences if len(s)]
        if sentences:
            docs.append(sentences)
    if not docs:
        raise ConfigError("The corpus has no tokens: every document is empty.")
    return docs


def _document_pairs(docs: list["_Document"], index: int, max_num_tokens: int, short_seq_prob: float, rng):
    """One pass of BERT's create_instances_from_document: (A, B, is_random_next) triples."""
    doc = docs[index]
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_num_tokens + 1))
    pairs, first = [], 0
    while first < doc.sentences:
        end = doc.reach(first, target)  # the chunk: sentences first..end-1
        split = first + (int(rng.integers(1, end - first)) if end - first >= 2 else 1)
        tokens_a = doc.span(first, split)
        is_random_next = end - first == 1 or rng.random() < 0.5
        if is_random_next:
            tokens_b = _random_sentences(docs, index, target - len(tokens_a), rng)
            end = split  # the sentences B did not use are read again
        else:
            tokens_b = doc.span(split, end)
        pairs.append((*_truncate_pair(tokens_a, tokens_b, max_num_tokens, rng), is_random_next))
        first = end
    return pairs


def _random_sentences(docs: list["_Document"], exclude: int, target_len: int, rng) -> np.ndarray:
    """Sentences from a random start in another document until `target_len` tokens (or its end)."""
    for _ in range(_RANDOM_DOCUMENT_TRIES):
        other = int(rng.integers(len(docs)))
        if other != exclude:
            break
    doc = docs[other]
    start = int(rng.integers(doc.sentences))
    return doc.span(start, doc.reach(start, target_len))


def _truncate_pair(tokens_a: np.ndarray, tokens_b: np.ndarray, max_total: int, rng):
    """BERT's truncate_seq_pair without its token-by-token loop, same distribution.

    Which segment loses each token is deterministic (the longer one, B on ties),
    and each loss is from the front or the back with probability 1/2, so the
    number cut from the front is Binomial(cuts, 1/2).
    """
    cut_a, cut_b = _cut_counts(len(tokens_a), len(tokens_b), max_total)
    return _cut_random_ends(tokens_a, cut_a, rng), _cut_random_ends(tokens_b, cut_b, rng)


def _cut_counts(len_a: int, len_b: int, max_total: int) -> tuple[int, int]:
    """How many tokens truncate_seq_pair removes from A and from B."""
    excess = len_a + len_b - max_total
    if excess <= 0:
        return 0, 0
    gap = abs(len_a - len_b)
    if excess <= gap:
        return (excess, 0) if len_a > len_b else (0, excess)
    # Once equal, removals alternate starting with B (ties go to B).
    rest = excess - gap
    cut_a = (gap if len_a > len_b else 0) + rest // 2
    cut_b = (gap if len_b > len_a else 0) + (rest + 1) // 2
    return cut_a, cut_b


def _cut_random_ends(tokens: np.ndarray, cuts: int, rng) -> np.ndarray:
    if cuts == 0:
        return tokens
    front = int(rng.binomial(cuts, 0.5))
    return tokens[front : len(tokens) - (cuts - front)]


def _pair_arrays(pairs, seq_len: int, cls_id: int, sep_id: int, pad_id: int,
                 label_key: str = "nsp_labels") -> dict[str, np.ndarray]:
    """Lays out `[CLS] A [SEP] B [SEP]` rows with segment 1 on B and its [SEP]; labels under `label_key`.
    All rows at once: each segment fills the columns it spans, whose row-major order is the pairs' order."""
    count = len(pairs)
    len_a = np.fromiter((len(pair[0]) for pair in pairs), np.int64, count)
    len_b = np.fromiter((len(pair[1]) for pair in pairs), np.int64, count)
    columns = np.arange(seq_len)

    def spanned(start, stop):
        return (columns >= start[:, None]) & (columns < stop[:, None])

    b_start, b_end = len_a + 2, len_a + 2 + len_b
    token_ids = np.full((count, seq_len), pad_id, np.int32)
    token_ids[:, 0] = cls_id
    for segment, start, stop in ((0, np.ones_like(len_a), len_a + 1), (1, b_start, b_end)):
        token_ids[spanned(start, stop)] = np.concatenate([np.zeros(0, np.int32), *(pair[segment] for pair in pairs)])
    rows = np.arange(count)
    token_ids[rows, len_a + 1] = sep_id
    token_ids[rows, b_end] = sep_id
    segment_ids = spanned(b_start, b_end + 1).astype(np.int32)
    return {"token_ids": token_ids, "segment_ids": segment_ids,
            label_key: np.fromiter((pair[2] for pair in pairs), np.int32, count)}


def _chunks(sentence: np.ndarray, size: int) -> list[np.ndarray]:
    return [sentence[start : start + size] for start in range(0, len(sentence), size)]


def _frame_rows(rows: list[np.ndarray], seq_len: int, cls_id: int, sep_id: int, pad_id: int) -> np.ndarray:
    """`<cls> row <sep>` padded to seq_len."""
    token_ids = np.full((len(rows), seq_len), pad_id, np.int32)
    token_ids[:, 0] = cls_id
    for index, row in enumerate(rows):
        token_ids[index, 1 : len(row) + 1] = row
        token_ids[index, len(row) + 1] = sep_id
    return token_ids


def sentence_pair_instances(documents: Documents, context: InstanceContext) -> dict[str, np.ndarray]:
    """BERT's recipe: NSP pairs, built the context's `copies` times over the corpus (it takes no packing)."""
    return build_nsp_instances(documents, context.seq_len, rng=context.rng, dupe_factor=context.copies,
                               **context.specials)


def packed_instances(documents: Documents, context: InstanceContext) -> dict[str, np.ndarray]:
    """RoBERTa's recipe: FULL-SENTENCES (may cross documents; without a packing too) or DOC-SENTENCES
    packing; or unpadded packing (`pack_documents`: several documents to a row, each attending within itself).

    Packing is deterministic, so the `copies` are the same sequences (to be masked differently).
    """
    if context.packing == "unpadded":
        packed = pack_documents(documents, context.seq_len, **context.specials)
    else:
        packed = pack_sentences(documents, context.seq_len, cross_documents=context.packing != "doc-sentences",
                                **context.specials)
    return {key: np.concatenate([value] * context.copies) for key, value in packed.items()}


def sentence_order_instances(documents: Documents, context: InstanceContext) -> dict[str, np.ndarray]:
    """ALBERT's recipe: SOP pairs, built the context's `copies` times over the corpus."""
    return build_sop_instances(documents, context.seq_len, rng=context.rng, dupe_factor=context.copies,
                               **context.specials)


# Below this share of the corpus's tokens in the instances, a run warns. Measured on the default
# corpus (vocabulary 2,000, --seq-len 64 and 128): BERT's and RoBERTa's instances hold 100% of it,
# ALBERT's SOP pairs 74% and 85% (a one-sentence chunk makes no pair); a 20 MB line without stops
# cut to one pair would hold almost none.
LOW_COVERAGE = 0.9


def coverage_counts(instances: dict, documents: Documents, copies: int, special_ids) -> tuple[float, int]:
    """(tokens of one build of the `instances`, tokens of the tokenized `documents` they were built from).

    Text is lost where a segment longer than its room is cut (a sentence without stops, pairs
    trimmed to fit). Tokens that instances repeat (NSP's random next segments, XLNet's reused and
    reversed rows) count again, so the first is an upper bound of what reached the instances.
    """
    corpus = sum(len(sentence) for document in documents for sentence in document)
    held = np.isin(instances["token_ids"], np.asarray(list(special_ids)), invert=True).sum() / copies
    return float(held), int(corpus)


def coverage_line(reached: float, corpus: int) -> str:
    """One line: the share of the corpus's tokens that reached the instances (`coverage_counts`),
    capped at 100%, so that its warning under LOW_COVERAGE is never a false alarm."""
    share = min(1.0, reached / max(corpus, 1))
    if share < LOW_COVERAGE:
        return (f"WARNING: only {share:.1%} of the corpus's {corpus} tokens reached the instances (under "
                f"{LOW_COVERAGE:.0%}): segments longer than --seq-len are cut and chunks that make no "
                "sentence pair are dropped")
    return f"coverage: {share:.1%} of the corpus's {corpus} tokens reached the instances"
