"""Scores over seeds, and the verdict of one comparison from scores paired by seed.

Seed s draws the same examples for both sides of a comparison, so two sides are compared by their per-seed
differences d_s, whose standard error is sd(d) / sqrt(n): the study's claims and gates, and a probe against
its control, are judged here.
"""

import math
import statistics

DECISIVE = 2.0  # standard errors


def summarize(scores):
    """Mean, sample standard deviation (0 for one seed), count and the per-seed `scores` themselves."""
    return {"mean": statistics.fmean(scores), "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
            "n": len(scores), "seeds": list(scores)}


def judge(relation, a, b):
    """The verdict of one claim from the per-seed scores of arm `a` and arm `b` (paired by seed)."""
    differences = [x - y for x, y in zip(a, b, strict=True)]
    difference = statistics.fmean(differences)
    error = statistics.stdev(differences) / math.sqrt(len(differences)) if len(differences) > 1 else 0.0
    z = difference / error if error > 0 else math.copysign(math.inf, difference) if difference else 0.0
    if not difference and not error:
        verdict = "no signal"
    elif relation == "better":
        verdict = "reproduced" if z > DECISIVE else "reversed" if z < -DECISIVE else "undecided"
    elif relation == "same":
        verdict = "reproduced" if abs(z) <= DECISIVE else "not reproduced"
    else:  # "at least"
        verdict = "reproduced" if z >= -DECISIVE else "not reproduced"
    return {"difference": difference, "standard_error": error, "verdict": verdict}
