"""The fill-in kind of a masked LM: the fill-mask endpoints, and top-k fill-ins for one masked word per
held-out line.

After the export, one word of each held-out line, drawn at random as masking
draws tokens, is replaced by the mask token and the exported SavedModel (its
`mlm_logits` signature, so this also proves the export serves) ranks the
vocabulary there. Beside each answer's rank stands its rank by word frequency
alone (its count in the run's instances): a model that ranks an answer above
that used the line's context, not only how common the word is.
"""

import math
import random
import re

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops of the SavedModel

from keras_bertology.outputs.masked_lm import TOP_K, masked_lm_endpoints
from keras_bertology.outputs.kind import Endpoints, OutputKind

_MIN_ANSWER_CHARS = 3


class FillIn(OutputKind):
    name = "fill_in"
    every_run = {"fill_mask": []}  # in metrics.json since the first version, empty without examples

    def endpoints(self, serving):
        """Without a mask token in the vocabulary there is no blank to fill."""
        if not serving.tokenizer.has_role("mask"):
            return None
        masked_lm = serving.pretrainer.masked_lm_model(serving.tokenizer.mask_id)
        return Endpoints(masked_lm_endpoints(serving.compile(masked_lm), serving.tokenizer, serving.input_names,
                                             serving.pack, serving.strings), model=masked_lm)

    def examples(self, run):
        return {"fill_mask": fill_mask_examples(run.export_dir, run.tokenizer, run.held_out, run.seed,
                                                token_counts=run.token_counts)}

    def summary_lines(self, metrics):
        if not metrics.get("fill_mask"):
            return []
        lines = [f"what the model learned: top-{len(metrics['fill_mask'][0]['top'])} fill-ins for one "
                 "masked word in lines held out of training"]
        for example in metrics["fill_mask"]:
            guesses = ", ".join(f"{g['token']} {g['probability']:.2f}" for g in example["top"])
            by_frequency = f" (by frequency alone {example['unigram_rank']:,})" if "unigram_rank" in example else ""
            lines.append(f"  {example['text']}")
            lines.append(f"      answer '{example['answer']}' ranked {example['answer_rank']:,}{by_frequency}; "
                         f"model: {guesses}")
        ranked = [example for example in metrics["fill_mask"] if "unigram_rank" in example]
        if ranked:
            lines.append("  " + _against_frequency([(e["answer_rank"], e["unigram_rank"]) for e in ranked]))
        return lines


FILL_IN = FillIn()


def fill_mask_examples(export_dir, tokenizer, sentences, seed=0, top_k=TOP_K, token_counts=None):
    """Per sentence: the masked text, the hidden word, the top-k fill-ins and the word's rank; with
    `token_counts` ([vocab] counts of the training instances), also its rank by frequency alone
    (`frequency_ranks`).

    The hidden word is drawn (by `seed`, whatever the model) among the words of
    three or more letters that are a single vocabulary token (so one mask
    stands for all of it). Returns [] when the export has no `mlm_logits` signature
    (a vocabulary without a mask token) or no sentence has such a word.
    """
    queries = _masked_queries(tokenizer, sentences, random.Random(seed)) if tokenizer.has_role("mask") else []
    if not queries:
        return []
    model = tf.saved_model.load(str(export_dir))
    if not hasattr(model, "mlm_logits"):
        return []
    outputs = model.mlm_logits(tf.constant([text for text, _, _ in queries]))
    token_ids, logits = outputs["token_ids"].numpy(), outputs["logits"].numpy()
    by_frequency = None if token_counts is None else frequency_ranks(token_counts, tokenizer.special_ids)
    examples = []
    for row, (text, word, answer_id) in enumerate(queries):
        positions = np.flatnonzero(token_ids[row] == tokenizer.mask_id)
        if not len(positions):  # the mask fell beyond the sequence length
            continue
        probabilities = _softmax(logits[row, positions[0]])
        ranking = np.argsort(-probabilities)
        examples.append({
            "text": text,
            "answer": word,
            "answer_rank": int(np.flatnonzero(ranking == answer_id)[0]) + 1,
            "top": [{"token": _display(tokenizer.vocabulary[i]), "probability": float(probabilities[i])}
                    for i in ranking[:top_k]],
            **({} if by_frequency is None else {"unigram_rank": int(by_frequency[answer_id])}),
        })
    return examples


def _against_frequency(ranks):
    """How many of the (model rank, frequency rank) pairs the model ranks higher, and a one-sided sign test
    over the untied ones: with eight lines, only 7 or 8 of 8 tell context use from chance."""
    above = sum(model < frequency for model, frequency in ranks)
    untied = sum(model != frequency for model, frequency in ranks)
    p_value = sum(math.comb(untied, k) for k in range(above, untied + 1)) / 2 ** untied
    verdict = ("the model reads the context beyond word frequency" if p_value < 0.05 else
               "not yet told apart from word frequency")
    return (f"the model ranks {above} of {len(ranks)} answers above their rank by word frequency alone "
            f"({len(ranks) - untied} tied; sign test p = {p_value:.2f}): {verdict}")


def frequency_ranks(token_counts, special_ids):
    """Each id's rank when ids are ranked by their count alone, the special ids last: 1 + the number of
    other ids counted more often. Ids of equal count share the best of their ranks, so a model must rank an
    answer above every word as common as it to beat this baseline."""
    counts = np.asarray(token_counts, np.int64).copy()
    counts[list(special_ids)] = -1
    descending = -np.sort(counts)[::-1]  # ascending negated counts
    return 1 + np.searchsorted(descending, -counts, side="left")


def _masked_queries(tokenizer, sentences, rng):
    """(text with one word masked, the word, its token id) for each sentence that has a maskable word."""
    words = sorted({w for s in sentences for w in re.findall(r"[^\W\d_]+", s) if len(w) >= _MIN_ANSWER_CHARS})
    if not words:
        return []
    ids = tokenizer.tokenize(tf.constant(words)).to_list()
    single = {word: row[0] for word, row in zip(words, ids) if len(row) == 1 and row[0] != tokenizer.unk_id}
    mask_token = tokenizer.vocabulary[tokenizer.mask_id]
    queries = []
    for sentence in sentences:
        candidates = [w for w in re.findall(r"[^\W\d_]+", sentence) if w in single]
        if candidates:
            word = rng.choice(candidates)
            text = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", mask_token, sentence, count=1)
            queries.append((text, word, single[word]))
    return queries


def _softmax(logits):
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def _display(token):
    """A vocabulary entry as a reader would write it (no SentencePiece / byte-BPE space marker)."""
    return token.lstrip("\u2581\u0120") or token
