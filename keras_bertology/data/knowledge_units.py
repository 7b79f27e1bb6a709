"""ERNIE's knowledge units: phrases and entities marked in raw text, so masking can take them whole.

A sentence is read as whitespace words. A unit is a run of two or more
consecutive words that no punctuation separates (a word may carry leading
punctuation if it is the unit's first, trailing if it is its last); a
one-word phrase or entity is a word already. Words are compared by their
key: the word without surrounding punctuation.

Phrases (`--phrases FILE`, one phrase a line, compared in lower case), or
without a list, collocations of the corpus: adjacent word pairs seen at
least PHRASE_MIN_COUNT times whose normalised PMI,
    npmi(a, b) = ln(p(a b) / (p(a) p(b))) / -ln p(a b),
is at least PHRASE_MIN_NPMI (1 for pairs seen only together, 0 for
independent words), p being counts over the corpus's words and pairs.

Entities (`--gazetteer FILE`, one entity a line, compared with their case),
or without one, names by capitalisation: a word is a name when its
occurrences that do not start a sentence are capitalised at least
NAME_MIN_CAPITALISED of the time, NAME_MIN_COUNT times or more ("I" is not
one); an entity is a run of capitalised words that are not names (titles:
"Sir", "King") followed by one or more names ("Sir John Falstaff", "Mark
Antony"), two words at least; at a sentence's start, names only. Words that
start a sentence never vote, so a corpus whose sentences all start with a
capital does not make every first word a name, and verse (capitals at line
starts inside sentences) only makes names of words rarely seen in lower case;
it still makes entities of a line's capitalised first word before a name
("To Saturn").

Entities are marked first; phrases where they do not overlap one. A marked
sentence is a list of join codes, one per word: PHRASE or ENTITY for a word
that continues a unit of that kind, 0 for any other (a unit's first word, or
a word outside units). `tokenize_marked` carries them to the tokens.
"""

from __future__ import annotations

import collections
import json
import math
import string
from dataclasses import dataclass
from pathlib import Path

from keras_bertology.errors import ConfigError

# Join codes of a token (and word) that continues a unit of that kind.
PHRASE, ENTITY = 1, 2
PHRASE_MIN_COUNT = 5
PHRASE_MIN_NPMI = 0.5
NAME_MIN_COUNT = 3
NAME_MIN_CAPITALISED = 0.9
_PUNCTUATION = string.punctuation + "“”‘’«»—–…¡¿"
MARKER_FILE = "knowledge_units.json"


def word_key(word: str) -> str:
    return word.strip(_PUNCTUATION)


def separations(words: list[str]) -> list[bool]:
    """[n - 1]: punctuation stands between word i and word i + 1 (or one of them has no letters)."""
    keys = [word_key(word) for word in words]
    return [not keys[i] or not keys[i + 1] or words[i] != words[i].rstrip(_PUNCTUATION)
            or words[i + 1] != words[i + 1].lstrip(_PUNCTUATION) for i in range(len(words) - 1)]


@dataclass(frozen=True)
class UnitMarker:
    """What a corpus's units are: phrases (lower-case word tuples), and entities as a gazetteer (word
    tuples) or, when `entities` is None, as runs of `names` (lower-case words)."""

    phrases: frozenset
    entities: frozenset | None = None
    names: frozenset = frozenset()
    phrase_source: str = "corpus"
    entity_source: str = "capitalisation"

    def mark(self, sentence: str) -> list[int]:
        """Join codes of the sentence's whitespace words (see the module's docstring)."""
        words = sentence.split()
        keys = [word_key(word) for word in words]
        lowered = [key.lower() for key in keys]
        apart = separations(words)
        joins, taken = [0] * len(words), [False] * len(words)
        _mark_runs(joins, taken, apart, ENTITY, lambda i, end: self._entity_length(keys, i, end))
        _mark_runs(joins, taken, apart, PHRASE, lambda i, end: _longest(self.phrases, lowered, i, end))
        return joins

    def _entity_length(self, keys, i, end):
        if self.entities is not None:
            return _longest(self.entities, keys, i, end)
        return _name_run(self.names, keys, i, end)

    def to_json(self) -> dict:
        return {"phrases": sorted(" ".join(p) for p in self.phrases), "phrase_source": self.phrase_source,
                "entities": None if self.entities is None else sorted(" ".join(e) for e in self.entities),
                "names": sorted(self.names), "entity_source": self.entity_source}

    @classmethod
    def from_json(cls, record: dict) -> UnitMarker:
        entities = record["entities"]
        return cls(frozenset(tuple(p.split()) for p in record["phrases"]),
                   None if entities is None else frozenset(tuple(e.split()) for e in entities),
                   frozenset(record["names"]), record["phrase_source"], record["entity_source"])

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1), encoding="utf-8")

    @classmethod
    def load(cls, path) -> UnitMarker:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    def counts(self) -> dict:
        """How many phrases and entities (or names) it knows, and from where: for metrics.json."""
        return {"phrases": len(self.phrases), "phrase_source": self.phrase_source,
                "entities" if self.entities is not None else "names":
                    len(self.entities if self.entities is not None else self.names),
                "entity_source": self.entity_source}

    def summary(self) -> str:
        """One line for the run's log."""
        entities = (f"{len(self.entities)} gazetteer entities" if self.entities is not None
                    else f"{len(self.names)} names by capitalisation")
        examples = ", ".join(sorted(" ".join(p) for p in self.phrases)[:3])
        return (f"knowledge units: {len(self.phrases)} phrases ({self.phrase_source}"
                + (f"; e.g. {examples}" if examples else "") + f"), {entities}")


def _mark_runs(joins, taken, apart, code, length_at):
    """Left to right, the longest unit (`length_at(i, end)`: its words from i, at most to `end`) at each
    free word, within the free words that no punctuation separates; its words are then taken."""
    i = 0
    while i < len(joins):
        end = i + 1
        while not taken[i] and end < len(joins) and not apart[end - 1] and not taken[end]:
            end += 1
        length = length_at(i, end) if end - i >= 2 else 0
        if length >= 2:
            joins[i + 1:i + length] = [code] * (length - 1)
            taken[i:i + length] = [True] * length
        i += max(length, 1)


def _longest(table, keys, i, limit):
    """The most words from i (at most to `limit`, at least 2) whose keys form an entry of `table`."""
    for end in range(limit, i + 1, -1):
        if tuple(keys[i:end]) in table:
            return end - i
    return 0


def _name_run(names, keys, i, limit):
    """From word i (up to `limit`): capitalised words that are not names (titles: "King", "Sir"), then
    one or more names; the run's length, or 0 without a name. A sentence's first word starts a run
    only as a name (a title there is any capitalised first word)."""
    def capitalised_run(end, is_name):
        while end < limit and keys[end][:1].isupper() and (keys[end].lower() in names) == is_name:
            end += 1
        return end

    first_name = capitalised_run(i, False)
    end = capitalised_run(first_name, True)
    if end == first_name or (i == 0 and first_name > 0):
        return 0
    return end - i


def learn_marker(sentences, phrases_file=None, gazetteer_file=None) -> UnitMarker:
    """The units of a corpus (an iterable of sentences), from the user's lists where given, else from
    the corpus's statistics (see the module's docstring)."""
    sentences = list(sentences)
    phrases = (frozenset(_read_list(phrases_file, "--phrases", lower=True)) if phrases_file
               else collocations(sentences))
    entities = frozenset(_read_list(gazetteer_file, "--gazetteer", lower=False)) if gazetteer_file else None
    names = frozenset() if gazetteer_file else capitalised_names(sentences)
    return UnitMarker(phrases, entities, names, f"list {Path(phrases_file).name}" if phrases_file else "corpus",
                      f"gazetteer {Path(gazetteer_file).name}" if gazetteer_file else "capitalisation")


def collocations(sentences, min_count=PHRASE_MIN_COUNT, min_npmi=PHRASE_MIN_NPMI) -> frozenset:
    """Adjacent word pairs (lower-case key tuples) that occur together far more than by chance."""
    words, pairs = collections.Counter(), collections.Counter()
    for sentence in sentences:
        raw = sentence.split()
        keys = [word_key(word).lower() for word in raw]
        words.update(key for key in keys if key)
        apart = separations(raw)
        pairs.update((keys[i], keys[i + 1]) for i in range(len(keys) - 1) if not apart[i])
    total_words, total_pairs = sum(words.values()), sum(pairs.values())
    found = set()
    for (a, b), count in pairs.items():
        if count < min_count:
            continue
        p_ab = count / total_pairs
        npmi = (math.log(p_ab / (words[a] / total_words * words[b] / total_words)) / -math.log(p_ab)
                if p_ab < 1 else 1.0)
        if npmi >= min_npmi:
            found.add((a, b))
    return frozenset(found)


def capitalised_names(sentences, min_count=NAME_MIN_COUNT, min_share=NAME_MIN_CAPITALISED) -> frozenset:
    """Lower-case words capitalised in at least `min_share` of their occurrences after a sentence's first."""
    capitalised, lower = collections.Counter(), collections.Counter()
    for sentence in sentences:
        for word in sentence.split()[1:]:
            key = word_key(word)
            if not key[:1].isalpha() or key == "I" or key.startswith(("I'", "I’")):
                continue
            (capitalised if key[0].isupper() else lower)[key.lower()] += 1
    return frozenset(word for word, count in capitalised.items()
                     if count >= min_count and count >= min_share * (count + lower[word]))


def _read_list(path, flag, lower):
    """Word tuples of a list file: one entry a line; blank lines and '#' comments are skipped."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{flag} {path} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{flag} {path} is not UTF-8 text (byte {error.start})") from None
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys = tuple(word_key(word) for word in line.split())
            if all(keys) and len(keys) >= 2:
                entries.append(tuple(key.lower() for key in keys) if lower else keys)
    if not entries:
        raise ConfigError(f"{flag} {path} has no entry of two or more words (one a line): a one-word entry "
                          "is a word, masked whole already")
    return entries


# Above this share of marked sentences left unmarked (`recipe.tokenize_documents`), a run warns.
UNALIGNED_WARNING = 0.1


def marking_line(report) -> str:
    """One line on a corpus's marking: the sentences with units, and the share the tokenizer left unmarked."""
    marked, unaligned = report.get("marked", 0), report.get("unaligned", 0)
    share = unaligned / max(marked, 1)
    line = f"{marked - unaligned} sentences hold phrases or entities"
    if share > UNALIGNED_WARNING:
        return (f"WARNING: {line}; {unaligned} more ({share:.0%}) were left unmarked: the tokenizer splits their "
                "units differently alone than in the sentence")
    return line + (f" ({unaligned} left unmarked: the tokenizer splits their units differently alone)"
                   if unaligned else "")


def marked_chunks(sentence: str, joins: list[int]):
    """(text, code) chunks of a sentence whose words have `joins`: each unit of two or more words with
    the code of its kind, and the runs of words between units with 0. Their texts joined by single
    spaces give the sentence's words back."""
    words = sentence.split()
    chunks, plain, i = [], [], 0
    while i < len(words):
        end = i + 1
        while end < len(words) and joins[end]:
            end += 1
        if end - i == 1:
            plain.append(words[i])
        else:
            if plain:
                chunks.append((" ".join(plain), 0))
                plain = []
            chunks.append((" ".join(words[i:end]), joins[i + 1]))
        i = end
    if plain:
        chunks.append((" ".join(plain), 0))
    return chunks


# The levels of --masking-units (see `unit_stages`).
UNITS = ("tokens", "words", "phrases", "entities")
# [N, L] int32 of instances with marked units: per token, the code of the unit kind it continues
# (knowledge_units.PHRASE or ENTITY), else 0.
UNIT_JOINS = "unit_joins"
# The level's code: what a unit start is at that level (-1 every token, 0 a word start, else a word start
# that does not continue a unit of that kind).
LEVEL_CODES = {"tokens": -1, "words": 0, "phrases": PHRASE, "entities": ENTITY}


def parse_units(text, flag="--masking-units"):
    """The levels of a --masking-units value: one of UNITS, or several separated by commas."""
    levels = tuple(part.strip() for part in str(text).split(","))
    if not levels or any(level not in UNITS for level in levels):
        raise ConfigError(f"{flag} must be one of {', '.join(UNITS)}, or several of them separated by commas "
                          f"(a schedule over the run's steps); got {text!r}")
    return levels


def marks_units(levels):
    """The instances must carry marked phrases and entities (UNIT_JOINS) for these levels."""
    return any(LEVEL_CODES[level] > 0 for level in levels)


def needs_stage(levels):
    """A unit stage goes before the family's masking (a schedule, or phrases or entities)."""
    return len(levels) > 1 or marks_units(levels)


def level_boundaries(levels, total_steps):
    """The first step of each level after the first."""
    return [total_steps * index // len(levels) for index in range(1, len(levels))]
