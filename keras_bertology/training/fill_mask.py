"""What a pretrained model learned, in words: top-k fill-ins for one masked word per held-out line, or
a causal LM's continuations of held-out lines and its perplexity on them.

A few sentences are kept out of training; after the export, one word of each,
drawn at random as masking draws tokens, is replaced by the mask token and the exported SavedModel (its `mlm_logits`
signature, so this also proves the export serves) ranks the vocabulary there.
A causal LM's export instead continues the first half of each line
(`generate`) and scores the lines (`score`); an encoder-decoder's (an export
with `encode`) fills in spans of words replaced by sentinels, as it was
pretrained to (`span_fill_examples`). An export that names a per-word
contextual output (ELMo's `elmo`) shows how one word's vectors differ with
its senses (`context_examples`).
"""

import json
import random
import re
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops of the SavedModel

HELD_OUT = 8
TOP_K = 5
SPAN_FILL_LINES = 3
# Smaller corpora keep every sentence for training.
_MIN_CORPUS_SENTENCES = 200
_MIN_WORDS, _MAX_WORDS = 6, 30
_MIN_ANSWER_CHARS = 3


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


def fill_mask_examples(export_dir, tokenizer, sentences, seed=0, top_k=TOP_K):
    """Per sentence: the masked text, the hidden word, the top-k fill-ins and the word's rank.

    The hidden word is drawn (by `seed`, whatever the model) among the words of
    three or more letters that are a single vocabulary token (so one mask
    stands for all of it). Returns [] when
    the export has no `mlm_logits` signature (a causal LM's: see `continuation_examples`) or no sentence
    has such a word.
    """
    queries = _masked_queries(tokenizer, sentences, random.Random(seed)) if tokenizer.has_role("mask") else []
    if not queries:
        return []
    model = tf.saved_model.load(str(export_dir))
    if not hasattr(model, "mlm_logits"):
        return []
    outputs = model.mlm_logits(tf.constant([text for text, _, _ in queries]))
    token_ids, logits = outputs["token_ids"].numpy(), outputs["logits"].numpy()
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
        })
    return examples


def continuation_examples(export_dir, sentences, prompt_share=0.5):
    """(per sentence: its first words as a prompt, the model's greedy continuation and the true rest;
    the held-out lines' perplexity), from the export's `generate` and `score`; ([], None) without them."""
    if not sentences or "score" not in _signatures(export_dir):  # known without loading the model
        return [], None
    model = tf.saved_model.load(str(export_dir))
    prompts, rests = [], []
    for sentence in sentences:
        words = sentence.split()
        cut = max(1, int(len(words) * prompt_share))
        prompts.append(" ".join(words[:cut]))
        rests.append(" ".join(words[cut:]))
    texts = model.generate(tf.constant(prompts))["text"].numpy()
    scored = model.score(tf.constant(sentences))
    tokens = int(scored["num_tokens"].numpy().sum())
    perplexity = float(np.exp(-scored["log_likelihood"].numpy().sum() / max(tokens, 1)))
    examples = [{"prompt": prompt, "continuation": text.decode("utf-8", "replace"), "reference": rest}
                for prompt, text, rest in zip(prompts, texts, rests)]
    return examples, perplexity


def span_fill_examples(export_dir, tokenizer, sentences, seed=0, count=SPAN_FILL_LINES):
    """Per line (the first `count`): the text with two spans of 1-3 words replaced by the vocabulary's
    sentinels (its last ids: <extra_id_0>, <extra_id_1>, as span corruption writes them), the model's
    greedy fill-ins (`generate`) and the truth; [] for an export without `encode` (not an encoder-decoder)."""
    if not sentences or "encode" not in _signatures(export_dir):
        return []
    rng = random.Random(seed)
    sentinels = [tokenizer.vocabulary[tokenizer.vocab_size - 1 - index] for index in range(2)]
    corrupted = [pair for pair in (_corrupt_spans(sentence.split(), sentinels, rng) for sentence in sentences)
                 if pair[1]][:count]
    if not corrupted:
        return []
    model = tf.saved_model.load(str(export_dir))
    written = model.generate(tf.constant([text for text, _ in corrupted]))["text"].numpy()
    return [{"text": text, "fill_in": fill.decode("utf-8", "replace"), "truth": truth}
            for (text, truth), fill in zip(corrupted, written)]


def _corrupt_spans(words, sentinels, rng):
    """(the words with one span of 1-3 words per sentinel replaced by it, the spans in order with a word
    between them and one kept at least, the sentinels each followed by its span)."""
    lengths = [rng.randint(1, 3) for _ in sentinels]
    while sum(lengths) + len(sentinels) > len(words) and max(lengths) > 1:
        lengths[lengths.index(max(lengths))] -= 1
    spare = len(words) - sum(lengths) - (len(sentinels) - 1)  # kept words beyond one between spans
    if spare < 1:
        return " ".join(words), ""
    gaps = [0 if index in (0, len(sentinels)) else 1 for index in range(len(sentinels) + 1)]
    for _ in range(spare):
        gaps[rng.randrange(len(gaps))] += 1
    text, truth, at = [], [], 0
    for gap, length, sentinel in zip(gaps, lengths, sentinels):
        text += [*words[at:at + gap], sentinel]
        truth += [sentinel, *words[at + gap:at + gap + length]]
        at += gap + length
    return " ".join(text + words[at:]), " ".join(truth)


# The documents' contrast: "broke" in three senses. Vectors that depend on context set them apart.
CONTEXT_WORD = "broke"
# Each sense with words of its own on both sides: a backward LM reads the right context, so "broke ." in all
# three would leave its half of the vectors alike whatever the model learned.
CONTEXT_SENTENCES = ("The vase broke into pieces.", "Dawn broke over the hills.", "The news broke on the radio.")


def context_examples(export_dir, tokenizer, word=CONTEXT_WORD, sentences=CONTEXT_SENTENCES):
    """{"word", "sentences", "cosine" [3][3], "other_words"}: the cosine similarities of `word`'s served
    vectors in `sentences`, and for scale the mean cosine between two different words of them (contextual
    vectors share much of their direction); for an export whose assets name a per-word contextual output
    ("context_output"); None for the others, or when the word is not one token of the vocabulary (nor an
    unknown one: its id must find it)."""
    assets = json.loads((Path(export_dir) / "assets" / "bertology.json").read_text())
    word_ids = tokenizer.tokenize(tf.constant([tokenizer.word_prefix + word]))[0].numpy().tolist()
    if "context_output" not in assets or len(word_ids) != 1 or word_ids[0] == tokenizer.optional_id("unk"):
        return None
    model = tf.saved_model.load(str(export_dir))  # kept: its functions read its variables
    served = model.serve(tf.constant(list(sentences)))
    vectors, token_ids = served[assets["context_output"]].numpy(), served["token_ids"].numpy()
    positions = [list(token_ids[row]).index(word_ids[0]) for row in range(len(sentences))]
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    unit = vectors / np.maximum(norms, 1e-12)
    chosen = unit[np.arange(len(sentences)), positions]
    words = norms[..., 0] > 0  # padding is served as zeros
    words[np.arange(len(sentences)), positions] = False
    others = unit[words]
    between = (others @ others.T)[np.triu_indices(len(others), 1)]
    return {"word": word, "sentences": list(sentences), "cosine": np.round(chosen @ chosen.T, 4).tolist(),
            "other_words": round(float(between.mean()), 4)}


def _signatures(export_dir):
    """The export's signature names, from its assets (without loading the model)."""
    return json.loads((Path(export_dir) / "assets" / "bertology.json").read_text())["signatures"]


def memory_perplexities(pretrainer, tokenizer, sentences, segment_length):
    """{"with_memory", "without_memory"} perplexities of the held-out lines read as one stream (each line
    closed by the end-of-text token) in segments of `segment_length`, for a model with segment memory
    (`Pretrainer.stream_perplexity`); None for the others or without lines."""
    if not sentences or pretrainer.stream_perplexity([], segment_length) is None:  # (an empty stream runs nothing)
        return None
    end = [tokenizer.eot_id]
    stream = [token for row in tokenizer.tokenize(tf.constant(sentences)).to_list() for token in (*row, *end)]
    return {"with_memory": pretrainer.stream_perplexity(stream, segment_length),
            "without_memory": pretrainer.stream_perplexity(stream, segment_length, mem_len=0)}


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
