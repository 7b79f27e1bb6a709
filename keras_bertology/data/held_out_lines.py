"""The few sentences a pretraining run keeps out of training, for the end-of-run examples of what the model
learned (`keras_bertology.outputs`).

Pure Python (no TensorFlow), shared by the in-memory run and the Beam preparation.
"""

HELD_OUT = 8
# Smaller corpora keep every sentence for training.
_MIN_CORPUS_SENTENCES = 200
_MIN_WORDS, _MAX_WORDS = 6, 30


def hold_out_sentences(documents, rng, count=HELD_OUT):
    """(documents without `count` random sentences, those sentences).

    Candidates have 6-30 words and come from documents of three or more
    sentences, so no document disappears and sentence pairs stay possible.
    """
    if sum(map(len, documents)) < _MIN_CORPUS_SENTENCES:
        return documents, []
    candidates = [
        (d, s)
        for d, document in enumerate(documents) if len(document) > 2
        for s, sentence in enumerate(document) if _MIN_WORDS <= len(sentence.split()) <= _MAX_WORDS
    ]
    if not candidates:
        return documents, []
    chosen = {candidates[i] for i in rng.choice(len(candidates), min(count, len(candidates)), replace=False)}
    kept = [[s for j, s in enumerate(document) if (d, j) not in chosen] for d, document in enumerate(documents)]
    return kept, [documents[d][s] for d, s in sorted(chosen)]
