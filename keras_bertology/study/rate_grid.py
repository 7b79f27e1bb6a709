"""The rate grid of the study's batch-size axis: each batch size's runs, its peak rates and the chosen one.

Per batch size the peak rate comes from a grid, RATE_FACTORS times the arm's
rate scaled by the square root of the batch's growth (Adam's rule of thumb),
widened beyond an end where the best rate lies there, and chosen by held-out
perplexity (study/batch_sizes.py runs it, study/batch_report.py reports it).
"""

import dataclasses
import math

from keras_bertology.errors import TrainingError
from keras_bertology.models.registry import get_family

# The grid of peak rates per batch size, as multiples of the square-root-scaled rate: a factor of 2 each
# way brackets where the rule of thumb puts the best rate.
RATE_FACTORS = (0.5, 1.0, 2.0)
# Rates added beyond an end of a size's grid where its best rate lies at that end (each a factor of 2 further),
# at most this many per size: a best rate at the edge of what was tried may be beaten just outside it.
MAX_WIDENINGS = 2


@dataclasses.dataclass(frozen=True)
class Setting:
    """One pretraining run of the axis: an effective batch (`batch_size`, in micro-batches of
    `micro_batch`), `steps` updates, a peak `rate` and a `seed` (an offset of the study's --seed)."""

    arm_name: str
    model: str
    batch_size: int
    micro_batch: int
    steps: int
    rate: float
    seed: int = 0

    @property
    def name(self):
        seed = f"-seed-{self.seed}" if self.seed else ""
        return f"{self.arm_name}-batch-{self.batch_size}-rate-{self.rate:g}{seed}"

    @property
    def accumulate(self):
        return self.batch_size // self.micro_batch

    @property
    def samples(self):
        return self.steps * self.batch_size


def grid(arm, scale, batch_sizes):
    """The seed-0 settings of every batch size and rate of the grid, smallest batch first."""
    base = base_rate(arm)
    settings = []
    for size in sorted(batch_sizes):
        steps = max(1, round(scale.reference_steps * scale.batch_size / size))
        centre = base * math.sqrt(size / scale.batch_size)
        settings += [Setting(arm.name, arm.model, size, scale.batch_size, steps, float(f"{centre * factor:.3g}"))
                     for factor in RATE_FACTORS]
    return settings


def base_rate(arm):
    from keras_bertology.pretraining.options import PretrainOptions

    return PretrainOptions(model=arm.model, preset=arm.preset).peak_learning_rate(get_family(arm.model))


def chosen(settings, pretrained):
    """{batch size: the seed-0 setting of the lowest held-out perplexity}; a size whose every rate
    diverged is refused in one line."""
    best = {}
    for setting in settings:
        perplexity = pretrained[setting.name]["perplexity"]
        if perplexity is None:  # diverged
            continue
        if setting.batch_size not in best or perplexity < pretrained[best[setting.batch_size].name]["perplexity"]:
            best[setting.batch_size] = setting
    lost = sorted({setting.batch_size for setting in settings} - set(best))
    if lost:
        rates = ", ".join(f"{setting.rate:g}" for setting in settings if setting.batch_size == lost[0])
        raise TrainingError(f"every rate of the grid diverged at batch size {lost[0]} ({rates}): the study has no "
                            "run of that size to judge; study smaller batch sizes")
    return best


def widened(settings, pretrained):
    """The settings to try next: for each size whose best rate is the lowest or the highest of those it
    tried, the rate a factor of 2 beyond it, while the size has had fewer than MAX_WIDENINGS of them."""
    best = chosen(settings, pretrained)
    added = []
    for size, setting in sorted(best.items()):
        tried = sorted((s.rate for s in settings if s.batch_size == size))
        if len(tried) - len(RATE_FACTORS) >= MAX_WIDENINGS or len(tried) < 2:
            continue
        if setting.rate == tried[0]:
            added.append(dataclasses.replace(setting, rate=float(f"{setting.rate / 2:.3g}")))
        elif setting.rate == tried[-1]:
            added.append(dataclasses.replace(setting, rate=float(f"{setting.rate * 2:.3g}")))
    return added
