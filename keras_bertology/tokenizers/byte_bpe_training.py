"""Learn a GPT-2 / RoBERTa byte-level BPE vocabulary from a corpus.

Words are cut by the in-graph tokenizer's own pre-tokenizer and merged the way
it merges them (left to right, without overlap: "a a a" with a+a gives "aa a"),
so the words the trainer counts are the words `ByteLevelBPETokenizer` later
splits. Ties between equally frequent pairs go to the pair whose tokens exist
first, single bytes by the code point of their stand-in character: Hugging
Face's `BpeTrainer` breaks them so, which makes its merges ours.
"""

import heapq
from collections import Counter
from collections.abc import Iterable

import tensorflow as tf

from keras_bertology.tokenizers.byte_bpe import ByteLevelBPETokenizer, _pretokenize, byte_symbols
from keras_bertology.errors import ConfigError, CorpusError

_BATCH = 4096  # sentences per pre-tokenizer call


def train_byte_level_bpe(sentences: Iterable[str], vocab_size: int, special_tokens: dict[str, str],
                         min_frequency: int = 2) -> ByteLevelBPETokenizer:
    """Byte-level BPE with `vocab_size` tokens, fewer where no pair occurs `min_frequency` times.

    The vocabulary holds the distinct `special_tokens` (role -> token; roles may
    share a token) first, then the 256 byte symbols in byte order, so any text
    tokenizes without unknowns, then the token each merge makes, in merge order.
    """
    if any(not token for token in special_tokens.values()):
        raise ConfigError(f"special tokens must not be empty strings, got {special_tokens}")
    symbols = byte_symbols()
    vocab = {}
    for token in [*special_tokens.values(), *(symbols[byte] for byte in range(256))]:
        vocab.setdefault(token, len(vocab))
    if vocab_size < len(vocab):
        raise ConfigError(f"vocab_size must be at least {len(vocab)} (the special tokens and 256 bytes), "
                          f"got {vocab_size}")
    if isinstance(sentences, str):
        raise CorpusError("byte-level BPE training needs a list of sentences, not one string")
    words = _count_words(sentences, symbols)
    if not words:
        raise CorpusError("byte-level BPE training needs text, but the sentences are all empty")
    # Hugging Face's token ids, the tie-break: the specials, then the bytes by stand-in code point.
    order = {}
    for token in [*special_tokens.values(), *sorted(symbols.values())]:
        order.setdefault(token, len(order))
    merges = _learn_merges(words, vocab, order, vocab_size, max(min_frequency, 1))
    return ByteLevelBPETokenizer(vocab, merges, special_tokens=special_tokens)


def _count_words(sentences, symbols):
    """Pre-token -> count, each pre-token as the tuple of its bytes' stand-in characters."""
    counts = Counter()
    batch = []
    for sentence in sentences:
        batch.append(sentence)
        if len(batch) == _BATCH:
            counts.update(_pretokenize(tf.constant(batch)).flat_values.numpy().tolist())
            batch = []
    if batch:
        counts.update(_pretokenize(tf.constant(batch)).flat_values.numpy().tolist())
    return {tuple(symbols[byte] for byte in word): count for word, count in counts.items()}


def _learn_merges(word_counts, vocab, order, vocab_size, min_frequency):
    """Merges, most frequent pair first, each product added to `vocab` and `order`.

    Pair counts and a pair -> words index are kept up to date after each merge,
    so a merge costs the words that hold its pair, not the whole corpus. The
    heap may hold a count above the pair's current one (counts of old pairs
    only fall; a pair whose count rises is pushed again): such an entry is
    put back with its current count when it comes up.
    """
    words = [list(word) for word in word_counts]
    frequencies = list(word_counts.values())
    counts, where = Counter(), {}
    for index, (word, frequency) in enumerate(zip(words, frequencies)):
        for pair in zip(word, word[1:]):
            counts[pair] += frequency
            where.setdefault(pair, set()).add(index)
    heap = [(-count, order[left], order[right], (left, right)) for (left, right), count in counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocab) < vocab_size and heap:
        stored, _, _, pair = heapq.heappop(heap)
        count = counts[pair]
        if count != -stored:
            if count:
                heapq.heappush(heap, (-count, order[pair[0]], order[pair[1]], pair))
            continue
        if count < min_frequency:
            break
        merges.append(pair)
        product = pair[0] + pair[1]
        # A product can already be a token (a special token spelt like a word): it keeps its id, as in
        # Hugging Face's trainer.
        vocab.setdefault(product, len(vocab))
        order.setdefault(product, len(order))
        risen = set()
        for index in where.pop(pair):
            word, frequency = words[index], frequencies[index]
            new = _merge_word(word, pair, product)
            if len(new) == len(word):
                continue  # the index is never pruned: this word lost the pair to an earlier merge
            for old_pair in zip(word, word[1:]):
                counts[old_pair] -= frequency
            for new_pair in zip(new, new[1:]):
                counts[new_pair] += frequency
                if product in new_pair:
                    where.setdefault(new_pair, set()).add(index)
                    risen.add(new_pair)
            words[index] = new
        for new_pair in risen:
            heapq.heappush(heap, (-counts[new_pair], order[new_pair[0]], order[new_pair[1]], new_pair))
    return merges


def _merge_word(word, pair, product):
    """`word` with each occurrence of `pair` merged, left to right, without overlap."""
    left, right = pair
    merged, position, last = [], 0, len(word) - 1
    while position <= last:
        if position < last and word[position] == left and word[position + 1] == right:
            merged.append(product)
            position += 2
        else:
            merged.append(word[position])
            position += 1
    return merged
