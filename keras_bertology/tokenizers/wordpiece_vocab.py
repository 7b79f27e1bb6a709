"""Learning a WordPiece vocabulary from word counts: the vocabulary of tensorflow_text's BERT vocab learner
(`tensorflow_text.tools.wordpiece_vocab`), computed in a pass over the words per iteration.

The learner runs a few iterations. Each one splits every word where the current vocabulary's greedy
longest-match split starts a piece (in the first iteration, at every character), counts every string that
starts at such a place and ends at any later character ("##"-prefixed when it does not start the word),
then walks those strings from the longest to the shortest, keeping the ones whose count reaches the
threshold and taking each one's count away from all of its prefixes. After that walk a string's count is
the count of the words in which it runs from a piece start to the word's end: every use of it that goes on
further was taken by the longer string it goes on into. So a pass over the piece starts gives the same
counts, where the learner's loops cost the cube of the word length; and the first iteration, which does not
depend on the threshold, is computed once for every threshold a search tries. The 4,692 words of two of
Shakespeare's plays, on 2 busy cores: 1.4-2.6 s -> 0.3 s per threshold; BERT's 400-token vocabulary of
them, counting included, 13 s -> 2 s.
"""

from collections import Counter


class WordPieceVocabLearner:
    """The vocabulary tensorflow_text's `learn` makes from `word_counts` ({word: count}) at a given count
    threshold, with its defaults: words over `max_word_length` characters and the `reserved_tokens`
    themselves are not counted, nor are words with a character outside the `max_unique_chars` commonest
    (ties alphabetical), and only the `max_words` commonest words are used. Words hold no joiner: BERT's
    word splitting makes every punctuation character a word of its own."""

    def __init__(self, word_counts, reserved_tokens, iterations=4, max_word_length=50, max_unique_chars=1000,
                 max_words=5_000_000, joiner="##"):
        reserved = set(reserved_tokens)
        counted = [(word, count) for word, count in word_counts.items()
                   if len(word) <= max_word_length and word not in reserved]
        char_counts = Counter()
        for word, count in counted:
            for char in word:
                char_counts[char] += count
        allowed = {char for char, _ in sorted(char_counts.items(), key=lambda item: (-item[1], item[0]))
                   [:max_unique_chars]}
        by_count = sorted(counted, key=lambda item: item[1], reverse=True)  # stable: ties keep their order
        self.words = [(word, count) for word, count in by_count if set(word) <= allowed][:max_words]
        self.chars = sorted({char for word, _ in self.words for char in word})
        self.reserved_tokens = list(reserved_tokens)
        self.iterations = iterations
        self.joiner = joiner
        self._first_counts = self._piece_counts((word, count, range(len(word))) for word, count in self.words)

    def vocabulary(self, threshold):
        """The reserved tokens, the characters (sorted), then every kept piece by count (ties alphabetical)."""
        tokens = self._with_chars({piece: count for piece, count in self._first_counts.items() if count >= threshold})
        for _ in range(self.iterations - 1):
            counts = self._piece_counts((word, count, starts) for word, count in self.words
                                        if (starts := self._piece_starts(word, tokens)) is not None)
            tokens = self._with_chars({piece: count for piece, count in counts.items() if count >= threshold})
        ranked = sorted(tokens.items(), key=lambda item: (-item[1], item[0]))
        return list(dict.fromkeys([*self.reserved_tokens, *self.chars, *(token for token, _ in ranked)]))

    def _piece_counts(self, splits):
        """{piece: count of the words in which it runs from one of the starts to the word's end}."""
        counts = Counter()
        for word, count, starts in splits:
            for start in starts:
                counts[self.joiner + word[start:] if start else word] += count
        return counts

    def _with_chars(self, tokens):
        """`tokens` with every character and its joined form (count 1 where new): any word stays splittable."""
        for char in self.chars:
            tokens.setdefault(char, 1)
            tokens.setdefault(self.joiner + char, 1)
        return tokens

    def _piece_starts(self, word, tokens):
        """Where the greedy longest-match split of `word` by `tokens` starts each piece; None if it cannot."""
        starts, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                if (self.joiner + word[start:end] if start else word[:end]) in tokens:
                    break
            else:
                return None
            starts.append(start)
            start = end
        return starts
