"""The weights stage's config (its verb's options and pipeline keys): the cross-prediction of P̂(y | l), the weights'
floor, cap and prior search, and the leakage features' graph and forest (``leakage.config``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from refinery.core import stats as zstats
from refinery.core.validation import OPEN_UNIT_INTERVAL, SEED, at_least, number_in, one_of, setting, validate
from refinery.methods.leakage.config import FEATURE_SETS, ForestConfig, GraphConfig


@dataclass
class WeightsConfig:
    folds: int = setting(10, at_least(2), "K of the cross-prediction (the paper uses 100).")
    features: str = setting("basic", one_of(*FEATURE_SETS), "Leakage features the forest reads.")
    min_proba: float = setting(1e-3, OPEN_UNIT_INTERVAL, "Floor of P̂(y|l): a forest's 0 would give an infinite "
                                                         "weight.")
    clip: float | None = setting(None, number_in(1, open_low=True).or_none(),
                                 "Cap on w, in units of the mean weight (none: no cap).")
    tolerance: float = setting(1e-9, number_in(0, open_low=True),
                               "|weighted − observed label share| the prior search stops at.")
    forest: ForestConfig = field(default_factory=ForestConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    fold_seed: int = setting(0, SEED, "Seed of the fold assignment.")
    prior: str = setting("auto", one_of(*zstats.PRIORS), "The verdict's audit of the words, plain and "
                         "weighted: " + zstats.PRIOR_HELP)

    def __post_init__(self):
        validate(self)
