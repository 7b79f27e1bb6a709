"""Linear probes on frozen features: what each layer of an encoder holds, with no fine-tuning.

The BERTology method (Tenney et al. 2019, "BERT rediscovers the classical NLP pipeline"; Hewitt and Manning
2019): the encoder's states at every depth (`Backbone.hidden_states`) are read for a task's examples, a
multinomial logistic regression is fitted on each depth's states of the training examples and scored on
the test examples, and a scalar mix (softmax weights over the depths, then the same regression, fitted
jointly) scores what the layers hold together. The mix has no scale of its own (Tenney et al.'s gamma): in a
linear probe a scale only multiplies the weights, and it let the fit grow the features instead of the
weights, out of the L2 penalty's reach, and overfit (training loss 3e-6 where the best depth's stays 0.03).
A word is read at its first piece; a text as the mean of its pieces' states. The same probes on a randomly initialised encoder of the same architecture and
vocabulary are the floor: what the probe learns from the word identities and positions alone.
"""

import dataclasses

import numpy as np
import tensorflow as tf
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from keras_bertology.finetune.encoding import encode_texts, encode_words
from keras_bertology.paired_seeds import judge, summarize

L2 = 1e-3  # per example, on the standardised states; enough to keep a separable training set finite
MAX_ITERATIONS = 200  # a probe of 4,000 words converges within about 100 (L-BFGS's gradient tolerance)
SURE = np.log(1e6)  # the mix logit that starts on one depth: its share 1 - 1e-6 per other depth
BATCH_SIZE = 64


@dataclasses.dataclass(frozen=True)
class ProbeData:
    """One task's probing examples: per depth, [examples, width] states; their labels; which split."""

    depths: list
    labels: np.ndarray
    train: np.ndarray  # bool per example
    dropped: int  # words cut off by the sequence length (they have no state)


def _states_function(backbone):
    """`backbone.hidden_states`, traced once per input shape on TensorFlow (eager op by op is slow)."""
    import keras

    if keras.config.backend() == "tensorflow":
        return tf.function(backbone.hidden_states, reduce_retracing=True)
    return backbone.hidden_states


def word_states(backbone, family, tokenizer, seq_len, sentences):
    """([per depth: [words, width]], [(sentence, word)] of each row, words cut off) for `sentences`
    (lists of words): each word's states at its first piece."""
    states_of = _states_function(backbone)
    depths, where, dropped = None, [], 0
    for start in range(0, len(sentences), BATCH_SIZE):
        batch = sentences[start:start + BATCH_SIZE]
        inputs, first_word = encode_words(family, tokenizer, seq_len, tf.ragged.constant(batch, dtype=tf.string))
        first_word = first_word.numpy()
        rows, positions = np.nonzero(first_word >= 0)
        states = [np.asarray(state, "float32")[rows, positions] for state in states_of(dict(inputs))]
        depths = states if depths is None else [np.concatenate([a, b]) for a, b in zip(depths, states)]
        where += [(start + int(row), int(first_word[row, position])) for row, position in zip(rows, positions)]
        dropped += sum(len(words) for words in batch) - len(rows)
    return depths, where, dropped


def text_states(backbone, family, tokenizer, seq_len, texts):
    """[per depth: [texts, width]]: the mean of each text's states over its pieces (padding left out)."""
    states_of = _states_function(backbone)
    depths = None
    for start in range(0, len(texts), BATCH_SIZE):
        inputs = encode_texts(family, tokenizer, seq_len, tf.constant(texts[start:start + BATCH_SIZE]))
        mask = np.asarray(inputs["padding_mask"], "float32")[:, :, None]
        states = [(np.asarray(state, "float32") * mask).sum(1) / np.maximum(mask.sum(1), 1.0)
                  for state in states_of(dict(inputs))]
        depths = states if depths is None else [np.concatenate([a, b]) for a, b in zip(depths, states)]
    return depths


def standardise(depths, train):
    """Each depth's states scaled by the training rows' mean and deviation, so that one L2 fits all."""
    scaled = []
    for states in depths:
        mean, deviation = states[train].mean(0), states[train].std(0) + 1e-6
        scaled.append((states - mean) / deviation)
    return scaled


def _softmax(logits):
    shifted = np.exp(logits - logits.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)


class _Objective:
    """The probe's loss and gradient over its flat parameters: the regression's weights [H, C] and bias
    [C], then with a mix its logits over the D depths."""

    def __init__(self, stacked, targets, mix):
        self.stacked, self.targets, self.mix = stacked, targets, mix  # [D, N, H], one-hot [N, C]
        self.depths, self.count, self.width = stacked.shape
        self.classes = targets.shape[1]

    def start(self):
        return np.zeros(self.width * self.classes + self.classes + (self.depths if self.mix else 0))

    def start_on(self, depth, fitted):
        """A mix's parameters that read (nearly) only `depth`, with that depth's fitted probe."""
        logits = np.zeros(self.depths)
        logits[depth] = SURE
        return np.concatenate([fitted.weights.ravel(), fitted.bias, logits])

    def unpack(self, params):
        size = self.width * self.classes
        weights, bias = params[:size].reshape(self.width, self.classes), params[size:size + self.classes]
        return weights, bias, (params[size + self.classes:] if self.mix else np.zeros(1))

    def features(self, params, stacked):
        share = _softmax(self.unpack(params)[2][None])[0]
        return np.tensordot(share, stacked, axes=1), share

    def __call__(self, params):
        weights, bias, _ = self.unpack(params)
        features, share = self.features(params, self.stacked)
        probabilities = _softmax(features @ weights + bias)
        loss = -np.sum(self.targets * np.log(probabilities + 1e-12)) / self.count + L2 * np.sum(weights ** 2)
        error = (probabilities - self.targets) / self.count
        gradients = [(features.T @ error + 2 * L2 * weights).ravel(), error.sum(0)]
        if self.mix:  # features = sum_d share_d * states_d
            per_depth = np.einsum("dnh,nh->d", self.stacked, error @ weights.T)
            gradients.append(share * (per_depth - np.dot(share, per_depth)))
        return loss, np.concatenate(gradients)


@dataclasses.dataclass(frozen=True)
class FittedProbe:
    """A fitted probe: its regression, its mix's weights over the depths (None for one depth) and the
    training objective it reached."""

    weights: np.ndarray
    bias: np.ndarray
    mix_weights: list | None
    loss: float
    classes: np.ndarray

    def predict(self, states):
        """The labels predicted for `states` ([N, H], or for a mix the list of depths)."""
        stacked = np.stack(list(states)) if self.mix_weights is not None else np.asarray(states)[None]
        features = np.tensordot(np.asarray(self.mix_weights or [1.0]), stacked, axes=1)
        return self.classes[np.argmax(features @ self.weights + self.bias, axis=1)]


def _minimised(objective, start):
    # One BLAS thread: on matrices this small OpenBLAS's pool costs more than it computes (a probe of 1,450
    # words took 4.5 s on two cores with it, 0.4 s without).
    with threadpool_limits(limits=1, user_api="blas"):
        return minimize(objective, start, jac=True, method="L-BFGS-B", options={"maxiter": MAX_ITERATIONS})


def fit_probe(states, labels, classes, depth_probes=None):
    """A multinomial logistic regression with L2 (L-BFGS) on `states` ([N, H]); or, given `depth_probes`
    (each depth's own fit), a scalar mix of the list of depths `states`, fitted with its regression.

    The mix's objective is not convex (the weights multiply the shares), and from an even mix L-BFGS can
    stop above what one depth alone reaches. So it also starts from the depth whose probe reached the
    lowest training objective, reading that depth only, and keeps whichever start ends lower: a mix never
    fits its training examples worse than its best depth does."""
    mix = depth_probes is not None
    stacked = np.stack(list(states) if mix else [states])
    targets = np.zeros((stacked.shape[1], len(classes)))
    targets[np.arange(len(labels)), np.searchsorted(classes, labels)] = 1.0
    objective = _Objective(stacked, targets, mix)
    starts = [objective.start()]
    if mix:
        best = min(range(len(depth_probes)), key=lambda depth: depth_probes[depth].loss)
        starts.append(objective.start_on(best, depth_probes[best]))
    fitted = min((_minimised(objective, start) for start in starts), key=lambda result: result.fun)
    weights, bias, mix_logits = objective.unpack(fitted.x)
    return FittedProbe(weights, bias, _softmax(mix_logits[None])[0].tolist() if mix else None, float(fitted.fun),
                       classes)


def macro_f1(truth, predicted, classes):
    """The mean over `classes` of each class's F1 (a class neither true nor predicted counts 0)."""
    scores = []
    for label in classes:
        hits = np.sum((predicted == label) & (truth == label))
        precision = hits / max(np.sum(predicted == label), 1)
        recall = hits / max(np.sum(truth == label), 1)
        scores.append(0.0 if hits == 0 else 2 * precision * recall / (precision + recall))
    return float(np.mean(scores))


def probe(data):
    """{"layers": [macro-F1 of each depth's probe], "mix": the scalar mix probe's, "mix_weights": its
    softmax weights over the depths, "train"/"test": example counts, "dropped": words without a state}."""
    train, test = data.train, ~data.train
    classes = np.unique(data.labels[train])
    depths = standardise(data.depths, train)
    fits = [fit_probe(states[train], data.labels[train], classes) for states in depths]
    layers = [macro_f1(data.labels[test], fit.predict(states[test]), classes) for fit, states in zip(fits, depths)]
    mix = fit_probe([states[train] for states in depths], data.labels[train], classes, depth_probes=fits)
    mixed = macro_f1(data.labels[test], mix.predict([states[test] for states in depths]), classes)
    return {"layers": layers, "mix": mixed, "mix_weights": mix.mix_weights, "train": int(train.sum()),
            "test": int(test.sum()), "dropped": data.dropped}


def readable(task):
    """Whether a probe reads `task`: its examples are tagged words, or one labelled text each."""
    examples = [example for split in ("train", "test") for example in task.splits.get(split, [])]
    return bool(examples) and (all("tags" in example for example in examples) or not task.pairs and all(
        "label" in example and "text" in example for example in examples))


def task_probe_data(backbone, family, tokenizer, seq_len, task, pool_count, test_count):
    """(`ProbeData` of a task's first `pool_count` training examples, marked training, and its first
    `test_count` test examples; the example each row comes from): a tagging task's words at their tags, a
    one-text classification's texts at their labels. `draw` then takes a seed's share of the pool, so that
    an encoder's states are read once for every seed, and every seed and encoder is tested alike."""
    pool = task.splits["train"][:pool_count]
    examples = pool + task.splits["test"][:test_count]
    is_train = np.arange(len(examples)) < len(pool)
    if all("tags" in example for example in examples):
        depths, where, dropped = word_states(backbone, family, tokenizer, seq_len,
                                             [example["words"] for example in examples])
        labels = np.array([examples[row]["tags"][word] for row, word in where])
        rows = np.array([row for row, _ in where])
        return ProbeData(depths, labels, is_train[rows], dropped), rows
    if not readable(task):
        raise ValueError(f"{task.name}: a probe reads tagged words or one labelled text per example")
    depths = text_states(backbone, family, tokenizer, seq_len, [example["text"] for example in examples])
    return ProbeData(depths, np.array([example["label"] for example in examples]), is_train, 0), \
        np.arange(len(examples))


def draw(data, rows, train_count, seed):
    """The `ProbeData` of `train_count` pool examples drawn by `seed` (all their rows) and every test row."""
    pool = np.unique(rows[data.train])
    drawn = np.random.default_rng(seed).choice(pool, min(train_count, len(pool)), replace=False)
    keep = ~data.train | np.isin(rows, drawn)
    return ProbeData([states[keep] for states in data.depths], data.labels[keep], data.train[keep], data.dropped)


def random_control(backbone, seed):
    """`backbone`'s architecture (and so its vocabulary's tables) with weights drawn anew by `seed`: the floor
    of what a probe reads from word identities and positions alone."""
    import keras

    keras.utils.set_random_seed(seed)
    return backbone.__class__.from_config(backbone.get_config())


def probe_seeds(backbone, family, tokenizer, seq_len, task, examples, seeds):
    """{seed: `probe` result} of `task` (`examples`: pool, drawn and test counts): the states are read once,
    then each seed draws its training examples from the pool."""
    pool, train, test = examples
    data, rows = task_probe_data(backbone, family, tokenizer, seq_len, task, pool, test)
    return {seed: probe(draw(data, rows, train, seed)) for seed in seeds}


def summarise(results):
    """Per-seed `probe` results in one record: each depth's and the mix's macro-F1 over the seeds
    (`summarize`), the mix's weights averaged."""
    depths = len(results[0]["layers"])
    return {"mix": summarize([result["mix"] for result in results]),
            "layers": [summarize([result["layers"][depth] for result in results]) for depth in range(depths)],
            "mix_weights": [sum(result["mix_weights"][depth] for result in results) / len(results)
                            for depth in range(depths)]}


def against_control(record, control):
    """The mix's gain of a `summarise` record over its control's, seed by seed, and its gate: a "better"
    verdict (beyond two standard errors) with "pays"."""
    mixes, floor = record["mix"]["seeds"], control["mix"]["seeds"]
    verdict = judge("better", mixes, floor)
    return {"gain": summarize([a - b for a, b in zip(mixes, floor)]),
            "gate": {**verdict, "pays": verdict["verdict"] == "reproduced"}}
