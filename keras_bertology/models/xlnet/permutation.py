"""XLNet's permutation language modeling stage, in-graph for tf.data: targets and factorization orders.

Mapped over batches of `stream_instances` (not shuffled), it adds what XLNet's
two-stream attention reads, and keeps token_ids (XLNet never writes a mask
token into its input), segment_ids and padding_mask unchanged. The rule
(zihangdai/xlnet data_utils.py: `_sample_mask`, `_local_perm`, the parser of
`get_dataset`), drawn anew at every call:

1. Each sequence is cut into the reuse half [0, reuse_len) and the rest. The
   goal, min(max_predictions, round(seq_len / partial_k)) targets (XLNet
   predicts only the last 1/K of each factorization order: 85 for 512 and
   K = 6), is split as the original: goal // 2 in the rest, the others in the
   reuse half.
2. In each half, spans are placed left to right. Draw n in 1..5 with
   p(n) proportional to 1/n, clip it to the targets still missing, take a
   context of ctx = n * alpha // beta tokens (alpha 6, beta 1), skip a left
   context drawn uniformly in [0, ctx), move on to the next word start, and
   make the next n words targets; the rest of the context (ctx - left) is
   skipped after the span. A span stops before a special token; a span that
   would reach the end of the half is not placed and ends the span phase
   (as the original's `break`). The span that reaches the goal is cut at it,
   in tokens, so it may end inside a word. Then targets are topped up with
   single tokens drawn uniformly among the non-special ones left, until the
   goal is met (these may be any piece of a word, as in the original).
3. Backward rows (with `bi_data` the second half of each replica's slice of
   the batch) hold reversed
   text; each half of theirs is flipped to reading order, sampled, and the
   targets flipped back (the original's `reverse`), so spans are words there too.
4. Factorization orders (`_local_perm`): positions m * perm_size + k of a half
   get rank sigma(k) + m * perm_size, sigma a uniform random permutation per
   sequence and half (perm_size = reuse_len: one random order per half).
   Context tokens (neither target nor special) get rank -1: every position of
   their half (and of the rest, for the reuse half's) sees them, and they see
   only each other (and the whole reuse half, for the rest's). Targets see positions of lower rank, never themselves; special
   tokens see lower ranks and themselves, and only ranks above see them.
   perm_mask[b, i, j] = 1 means i may NOT attend to j (Hugging Face's XLNet
   convention). The reuse half never sees the rest; the rest sees the whole
   reuse half.

Outputs added (P = max_predictions, L = seq_len, both static):
    perm_mask       [B, L, L] float32
    target_mapping  [B, P, L] float32  one-hot rows at the targets, ascending; zero rows after
    target_ids      [B, P]    int32    token_ids at the targets, 0 in unused slots
    target_weights  [B, P]    float32  1 for a real target, 0 for an unused slot

Departures from the original, each deliberate:
- An "n-gram" is n whole words. The original means that (its comment: "the
  end position of the n-gram (start pos of the n+1-th gram)") but tests
  `_is_start_piece(seg[beg])` where it means `seg[end]`, so its n-gram is n
  pieces. `ngram_unit="piece"` reproduces the original.
- Special tokens (the tokenizer's cls, sep, pad, mask and other special ids,
  padding too) are never targets, so every sequence has exactly the goal
  (if its halves have that many other tokens). The original may pick [SEP]
  and [CLS] (its start-piece test accepts "<" pieces and its top-up any
  position) and then drops them, predicting fewer than num_predict. The
  functional tokens of the factorization order are the same special ids
  (the original: <sep> and <cls> only; its <unk> is an ordinary token).
- A span stops before a special token ([SEP] inside the rest, the document
  separators of the stream); the original's spans run over them.
- Word starts are the tokenizer's word_start_table (a piece beginning with
  "▁" for SentencePiece, not "##" for WordPiece, and the specials). The
  original also starts a word at each punctuation piece.

Which rows are backward is read from their place in the batch, so batches
must be those of `stream_instances` in order: not shuffled, batch_size and
replicas those the instances were built with.
"""

import numbers

import numpy as np
import tensorflow as tf

from keras_bertology.data.masking import word_tables
from keras_bertology.data.random_draws import RandomDraws
from keras_bertology.data.span_masking import draw_lengths, ngram_probs
from keras_bertology.errors import ConfigError


def permutation_masker(context, *, reuse_len=None, perm_size=None, partial_k=6, bi_data=True, **options):
    """XLNet's stage for the `context`'s tokenizer and replicas; spans are whole words always (whatever
    `context.whole_word` says). `options`: max_gram, mask_alpha, mask_beta, ngram_unit of `PermutationMasker`.

    Example:
        >>> import tensorflow as tf
        >>> from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer
        >>> from keras_bertology.data.builder_contexts import MaskingContext
        >>> from keras_bertology.models.xlnet.permutation import permutation_masker
        >>> tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "##e"])
        >>> masker = permutation_masker(MaskingContext(tokenizer, max_predictions=5), partial_k=4)
        >>> ids = tf.constant([[5, 6, 7, 5, 6, 5, 6, 7, 5, 6, 7, 3, 6, 6, 3, 2]] * 2)
        >>> out = masker({"token_ids": ids, "segment_ids": tf.zeros_like(ids), "padding_mask": tf.ones_like(ids)})
        >>> out["perm_mask"].shape, out["target_mapping"].shape, out["target_ids"].shape
        (TensorShape([2, 16, 16]), TensorShape([2, 5, 16]), TensorShape([2, 5]))
        >>> out["target_weights"].numpy().tolist()  # round(16 / 4) = 4 targets, 2 per half
        [[1.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 0.0]]
    """
    tokenizer = context.tokenizer
    special_ids = sorted({tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id,
                          *tokenizer.special_ids})
    return PermutationMasker(tokenizer.vocab_size, special_ids, tokenizer.word_start_table, context.max_predictions,
                             replicas=context.replicas, reuse_len=reuse_len, perm_size=perm_size, partial_k=partial_k,
                             bi_data=bi_data, **options)


class PermutationMasker:
    """Maps a batch of XLNet instances to permutation-LM features; use in `Dataset.map` after `batch`.

    Args:
        vocab_size, special_ids, word_start_table: the tokenizer's (specials
            are never targets and are the functional tokens of the orders).
        max_predictions: P, the target slots (the original's num_predict).
        reuse_len: length of the first half (default seq_len // 2).
        perm_size: length of a local permutation (default reuse_len); it must
            divide both halves, so no order mixes the two.
        partial_k: K of partial prediction: round(seq_len / K) targets.
        replicas: the number of equal slices the batch is shared by.
        bi_data: the second half of each replica's slice holds reversed rows.
        max_gram, mask_alpha, mask_beta: span lengths 1..max_gram and the
            context of n * mask_alpha // mask_beta tokens per span.
        ngram_unit: "word" (n whole words) or "piece" (n pieces, the original).
    """

    def __init__(self, vocab_size, special_ids, word_start_table, max_predictions, replicas=1, reuse_len=None,
                 perm_size=None, partial_k=6, bi_data=True, max_gram=5, mask_alpha=6, mask_beta=1,
                 ngram_unit="word"):
        for name, value in [("max_predictions", max_predictions), ("replicas", replicas), ("max_gram", max_gram),
                            ("mask_alpha", mask_alpha), ("mask_beta", mask_beta)]:
            _check_positive_int(name, value)
        for name, value in [("reuse_len", reuse_len), ("perm_size", perm_size)]:
            if value is not None:
                _check_positive_int(name, value)
        if not partial_k > 0:
            raise ConfigError(f"partial_k={partial_k} must be positive (round(seq_len / partial_k) targets).")
        if mask_alpha < mask_beta:
            raise ConfigError(f"mask_alpha={mask_alpha} must be at least mask_beta={mask_beta}, so that every "
                              "span has a context of at least one token.")
        if ngram_unit not in ("word", "piece"):
            raise ConfigError(f"ngram_unit must be 'word' or 'piece', got {ngram_unit!r}.")
        if any(not 0 <= i < vocab_size for i in special_ids):
            raise ConfigError(f"special ids {list(special_ids)} must lie in [0, vocab_size={vocab_size}).")
        self.max_predictions, self.reuse_len, self.perm_size = max_predictions, reuse_len, perm_size
        self.partial_k, self.bi_data, self.replicas = partial_k, bi_data, replicas
        self.length_probs = ngram_probs(max_gram)
        self.mask_alpha, self.mask_beta, self.ngram_unit = mask_alpha, mask_beta, ngram_unit
        self._start_table, self._special_table = word_tables(word_start_table, vocab_size, list(special_ids))

    def goals(self, seq_len):
        """Targets per sequence in (the reuse half, the rest): the original's split of num_predict."""
        goal = min(self.max_predictions, round(seq_len / self.partial_k))
        return goal - goal // 2, goal // 2

    def __call__(self, features, seed=None):
        """The permutation features of a batch; `seed` ([2] integers) fixes every draw (fresh if None)."""
        draws = RandomDraws(seed)
        token_ids = tf.convert_to_tensor(features["token_ids"], tf.int32)
        seq_len, batch_size = token_ids.shape[1], token_ids.shape[0]
        reuse_len, perm_size = self._lengths(seq_len)
        if batch_size is not None and batch_size % self.replicas:
            raise ConfigError(f"A batch of {batch_size} rows does not divide among {self.replicas} replicas.")
        if self.bi_data and batch_size is not None and batch_size // self.replicas % 2:
            raise ConfigError(f"bi_data needs an even batch per replica (forward rows, then their reversals); "
                              f"got {batch_size // self.replicas}.")
        functional = tf.gather(self._special_table, token_ids)
        if "padding_mask" in features:
            functional |= ~tf.cast(features["padding_mask"], tf.bool)
        batch = tf.shape(token_ids)[0]
        # With bi_data the second half of each replica's slice holds the reversed rows.
        per_replica = batch // self.replicas
        backward = (tf.range(batch) % per_replica >= per_replica // 2 if self.bi_data
                    else tf.zeros([batch], bool))
        halves = [slice(0, reuse_len), slice(reuse_len, seq_len)]
        targets, orders = [], []
        for half, goal in zip(halves, self.goals(seq_len)):
            chosen = self._sample_targets(token_ids[:, half], functional[:, half], backward, goal, draws)
            targets.append(chosen)
            orders.append(_local_perm(chosen, functional[:, half], perm_size, draws))
        rest = seq_len - reuse_len
        # The reuse half comes first in every order: it never sees the rest, which sees all of it.
        perm_mask = tf.concat([
            tf.concat([orders[0], tf.ones([batch, reuse_len, rest], bool)], axis=2),
            tf.concat([tf.zeros([batch, rest, reuse_len], bool), orders[1]], axis=2),
        ], axis=1)
        perm_mask = tf.ensure_shape(tf.cast(perm_mask, tf.float32), [batch_size, seq_len, seq_len])
        return {**features, "perm_mask": perm_mask, **self._target_features(token_ids, tf.concat(targets, axis=1))}

    def _lengths(self, seq_len):
        """(reuse_len, perm_size) for sequences of `seq_len`, checked."""
        if seq_len is None:
            raise ConfigError("The permutation stage needs a static sequence length (batch fixed-length rows).")
        reuse_len = seq_len // 2 if self.reuse_len is None else self.reuse_len
        if not 0 < reuse_len < seq_len:
            raise ConfigError(f"reuse_len={reuse_len} must be in (0, seq_len={seq_len}).")
        perm_size = reuse_len if self.perm_size is None else self.perm_size
        if reuse_len % perm_size or (seq_len - reuse_len) % perm_size:
            raise ConfigError(
                f"perm_size={perm_size} must divide reuse_len={reuse_len} and seq_len - reuse_len="
                f"{seq_len - reuse_len}: a local permutation may not straddle the two halves.")
        return reuse_len, perm_size

    def _sample_targets(self, token_ids, functional, backward, goal, draws):
        """bool [B, S]: the targets of one half, sampled in reading order (backward rows flipped)."""
        def reading_order(x):
            return tf.where(backward[:, None], tf.reverse(x, [1]), x)

        token_ids, functional = reading_order(token_ids), reading_order(functional)
        selectable = ~functional
        goal = tf.minimum(goal, tf.reduce_sum(tf.cast(selectable, tf.int32), axis=1))
        chosen = self._place_spans(tf.gather(self._start_table, token_ids), selectable, goal, draws)
        return reading_order(_top_up(chosen, selectable, goal, draws))

    def _place_spans(self, starts, selectable, goal, draws):
        """The span phase of `_sample_mask`, all rows at once: one span per row and iteration."""
        batch, width = tf.shape(starts)[0], starts.shape[1]
        position = tf.range(width)[None, :]
        begin_count = tf.cumsum(tf.cast(starts & selectable, tf.int32), axis=1)
        word_count = tf.cumsum(tf.cast(starts, tf.int32), axis=1)
        special_count = tf.cumsum(tf.cast(~selectable, tf.int32), axis=1)

        draws_at = draws.per_iteration()

        def step(iteration, cursor, placed, chosen, stopped):
            step_draws = draws_at(iteration)
            active = ~stopped & (placed < goal) & (cursor < width)
            n = tf.maximum(tf.minimum(draw_lengths(self.length_probs, [batch], step_draws), goal - placed), 1)
            context = n * self.mask_alpha // self.mask_beta
            left = tf.minimum(tf.cast(step_draws.uniform([batch]) * tf.cast(context, tf.float32), tf.int32),
                              context - 1)
            begin = tf.minimum(cursor + left, width)
            begin = _first_at_least(begin_count, _count_before(begin_count, begin) + 1)
            at = tf.minimum(begin, width - 1)
            if self.ngram_unit == "word":
                end = _first_at_least(word_count, tf.gather(word_count, at, batch_dims=1) + n)
            else:
                end = begin + n
            end = tf.minimum(end, _first_at_least(special_count, tf.gather(special_count, at, batch_dims=1) + 1))
            placing = active & (begin < width) & (end < width)
            take = tf.minimum(end - begin, goal - placed)
            span = ((position >= begin[:, None]) & (position < (begin + take)[:, None])) & placing[:, None]
            return (iteration + 1, tf.where(placing, end + context - left, cursor), placed + tf.where(placing, take, 0),
                    chosen | span, stopped | (active & ~placing))

        def more(iteration, cursor, placed, chosen, stopped):
            return tf.reduce_any(~stopped & (placed < goal) & (cursor < width))

        zeros = tf.zeros([batch], tf.int32)
        _, _, _, chosen, _ = tf.while_loop(
            more, step, (tf.constant(0), zeros, zeros, tf.zeros_like(starts), tf.zeros([batch], bool)))
        return chosen

    def _target_features(self, token_ids, targets):
        """Ascending target positions as one-hot rows of P slots, their ids and weights."""
        batch_size, seq_len = token_ids.shape
        slots = self.max_predictions
        everywhere = tf.broadcast_to(tf.range(seq_len), tf.shape(token_ids))
        positions = tf.ragged.boolean_mask(everywhere, targets).to_tensor(0, shape=[batch_size, slots])
        used = tf.sequence_mask(tf.reduce_sum(tf.cast(targets, tf.int32), axis=1), slots)
        weights = tf.cast(used, tf.float32)
        return {
            "target_mapping": tf.ensure_shape(tf.one_hot(positions, seq_len) * weights[:, :, None],
                                              [batch_size, slots, seq_len]),
            "target_ids": tf.ensure_shape(tf.where(used, tf.gather(token_ids, positions, batch_dims=1), 0),
                                          [batch_size, slots]),
            "target_weights": tf.ensure_shape(weights, [batch_size, slots]),
        }


def _local_perm(targets, functional, perm_size, draws):
    """bool [B, S, S], True where i may not attend to j: `_local_perm`'s mask for one half."""
    batch, width = tf.shape(targets)[0], targets.shape[1]
    blocks = width // perm_size
    order = tf.argsort(draws.uniform([batch, perm_size]), axis=1)  # a uniform permutation per row
    rank = tf.tile(order, [1, blocks]) + tf.repeat(tf.range(blocks) * perm_size, perm_size)[None, :]
    context = ~targets & ~functional
    rank = tf.where(context, -1, rank)
    # A target must come strictly after what it sees; a special token and the context also see their rank.
    own = tf.where(targets, rank, rank + 1)
    return (own[:, :, None] <= rank[:, None, :]) & ~context[:, None, :]


def _top_up(chosen, selectable, goal, draws):
    """`chosen` plus uniformly random single selectable tokens up to `goal` per row."""
    free = selectable & ~chosen
    keys = tf.where(free, draws.uniform(tf.shape(chosen)), 2.0)
    rank = tf.argsort(tf.argsort(keys, axis=1), axis=1)
    missing = goal - tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1)
    return chosen | (free & (rank < missing[:, None]))


def _count_before(counts, position):
    """counts[b, position - 1] (0 at position 0) for inclusive cumulative `counts`; position <= width."""
    return tf.gather(tf.pad(counts, [[0, 0], [1, 0]]), position, batch_dims=1)


def _first_at_least(counts, value):
    """First position whose inclusive cumulative count reaches `value`, width if none."""
    return tf.searchsorted(counts, value[:, None], side="left")[:, 0]


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive integer.")
