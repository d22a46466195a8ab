"""The weights stage's config (its verb's options and pipeline keys): the cross-prediction of P̂(y | l), the weights'
floor, cap and prior search, and the leakage features' graph and forest (``models.leakage_settings``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from refinery.core import stats as zstats
from refinery.core.validation import OPEN_UNIT_INTERVAL, SEED, Allowed, at_least, number_in, one_of, setting, validate
from refinery.messages import Setting
from refinery.models.leakage_settings import FEATURE_SETS, ForestConfig, GraphConfig

MIN_ESS_SHARE = 0.5   # the default cap keeps the effective sample size (Σw)²/Σw² at least this share of the rows
AUTO_CLIP, NO_CLIP = "auto", "none"   # the cap chosen from the effective sample size; the paper's letter: no cap
_CAP = number_in(1, open_low=True)
CLIP = Allowed(lambda v: v in (AUTO_CLIP, NO_CLIP) or _CAP.test(v), f"{_CAP.text}, {AUTO_CLIP}")   # or none


def _clip(text: str) -> float | str:
    """A ``--clip`` as given: ``auto``, ``none`` or a number (``validate`` refuses any other)."""
    text = text.strip().lower()
    try:
        return text if text in (AUTO_CLIP, NO_CLIP) else float(text)
    except ValueError:
        return text


def clip_setting(clip: float | str) -> Setting:
    """The ``clip`` setting of a cap (a whole number as one: ``--clip 10``, ``clip=10``), ``auto`` or ``none``."""
    return Setting("clip", int(clip) if isinstance(clip, float) and clip.is_integer() else clip)


@dataclass
class WeightsConfig:
    folds: int = setting(10, at_least(2), "K of the cross-prediction (the paper uses 100).")
    features: str = setting("basic", one_of(*FEATURE_SETS), "Leakage features the forest reads.")
    min_proba: float = setting(1e-3, OPEN_UNIT_INTERVAL, "Floor of P̂(y|l): a forest's 0 would give an infinite "
                                                         "weight.")
    clip: float | str | None = setting(
        AUTO_CLIP, CLIP.or_none(), f"Cap on w, in units of the mean weight: a number; {AUTO_CLIP}: the largest cap "
        f"that keeps the effective sample size (Σw)²/Σw² at least {MIN_ESS_SHARE:.0%} of the rows (no cap where the "
        f"weights do uncapped); {NO_CLIP}: no cap (the paper's letter).", parse=_clip, metavar="C|auto|none")
    tolerance: float = setting(1e-9, number_in(0, open_low=True),
                               "|weighted − observed label share| the prior search stops at.")
    forest: ForestConfig = field(default_factory=ForestConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    fold_seed: int = setting(0, SEED, "Seed of the fold assignment.")
    prior: str = setting("auto", one_of(*zstats.PRIORS), "The verdict's audit of the words, plain and "
                         "weighted: " + zstats.PRIOR_HELP)

    def __post_init__(self):
        validate(self)
        if self.clip is None:   # a pipeline file's ``clip: null`` (before ``none``): no cap
            self.clip = NO_CLIP
