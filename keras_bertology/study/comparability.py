"""Whether a claim's two arms differ only in the factor it names, decided from what results.json records of
each arm: a verdict that compares a cased vocabulary with an uncased one says nothing about objectives."""

# What results.json records of every arm (its "arms" entry), per factor a record tells apart: (factor, key of
# the record, what differs, in words).
RECORDED = (("tokenizer", "tokenizer", "the vocabularies differ"),)


def describe_vocabulary(record):
    """One arm's tokenizer record in words: "wordpiece, lower-cased, 7,912 tokens"."""
    return f"{record['type']}, {'lower-cased' if record['lower_case'] else 'cased'}, {record['vocab_size']:,} tokens"


_DESCRIBE = {"tokenizer": describe_vocabulary}


def differences(arms, claim):
    """Why `claim` ({"arm", "against", "factor"}) has no verdict: each recorded factor other than its own in
    which its two arms (`arms`: results.json's records) differ, in words; [] where they are comparable."""
    first, second = arms[claim["arm"]], arms[claim["against"]]
    return [f"{words} ({_both(claim, factor, first[key], second[key])})"
            for factor, key, words in RECORDED if factor != claim["factor"] and first[key] != second[key]]


def _both(claim, factor, first, second):
    words = [_DESCRIBE[factor](first), _DESCRIBE[factor](second)]
    if words[0] == words[1]:  # alike in words, not in content: trained apart
        words = [f"{words[0]}, sha256 {first['sha256'][:12]}", f"{words[1]}, sha256 {second['sha256'][:12]}"]
    return f"{claim['arm']}: {words[0]}; {claim['against']}: {words[1]}"
