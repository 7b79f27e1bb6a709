"""The bbc-names task: proper nouns of BBC News tagged from their capitals, then shown lower-cased.

A word whose first letter is a capital inside a sentence is a proper noun
(a person, place, organisation, month, day: "Patricia Hewitt", "GMTV's",
"July"); "I" is not. A capital at the start of a sentence, after an opening
quote or bracket, or after a colon says nothing, so such a word is a proper
noun when the same word is more often capitalised than not elsewhere in the
corpus (where its case does speak). Consecutive proper nouns are one entity
(B-NAME, I-NAME, ...) unless punctuation ends the first ("Blair, Brown" is
two). The words are then lower-cased, so a model must find the names from
the words themselves and their context, which is what pretraining learns:
unlike WNUT-16's ten rare types in 2,000 tweets, this gives thousands of
entities of one kind in the same text the study pretrains on.
"""

import collections
import re

# Dev and test keep the first sentences of each article: every article counts alike and scoring stays cheap.
EVALUATED_SENTENCES = 4
MAX_WORDS = 40  # a longer sentence is cut into pieces of at most this many words

_SENTENCE_END = re.compile(r"[.?!][\"')\]]*$")
_OPENERS = "\"'(["
_EDGE_PUNCTUATION = "\"'()[],.;:?!-"


def sentences(raw_article):
    """The article's body (its first line is the title, in title case) as sentences of words."""
    _, _, body = raw_article.partition("\n")
    found, current = [], []
    for word in body.split():
        current.append(word)
        if _SENTENCE_END.search(word) or len(current) == MAX_WORDS:
            found.append(current)
            current = []
    return found + ([current] if current else [])


def _core(word):
    return word.strip(_EDGE_PUNCTUATION)


def _case_is_silent(sentence, position):
    word = sentence[position]
    return position == 0 or word[0] in _OPENERS or sentence[position - 1].endswith(":")


class WordCase:
    """How often each word (lower-cased) is capitalised where its case speaks, over `all_sentences`."""

    def __init__(self, all_sentences):
        self.capitalised, self.lower = collections.Counter(), collections.Counter()
        for sentence in all_sentences:
            for position, word in enumerate(sentence):
                core = _core(word)
                if core[:1].isalpha() and not _case_is_silent(sentence, position):
                    (self.capitalised if core[0].isupper() else self.lower)[core.lower()] += 1

    def is_name(self, sentence, position):
        core = _core(sentence[position])
        if not core[:1].isupper() or core == "I":
            return False
        if _case_is_silent(sentence, position):
            return self.capitalised[core.lower()] > self.lower[core.lower()]
        return True

    def tagged(self, sentence):
        """{"words": the sentence lower-cased, "tags": BIO tags of type NAME}."""
        tags = []
        for position, word in enumerate(sentence):
            if not self.is_name(sentence, position):
                tags.append("O")
            elif tags and tags[-1] != "O" and sentence[position - 1][-1].isalnum():
                tags.append("I-NAME")
            else:
                tags.append("B-NAME")
        return {"words": [word.lower() for word in sentence], "tags": tags}
