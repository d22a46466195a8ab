"""The upsample stage's config (its verb's options and pipeline keys): AUDAC's tokens (the audit's features), band,
steps and safeguards."""
from __future__ import annotations

import math
from dataclasses import dataclass

from refinery.core import stats as zstats
from refinery.core.validation import SEED, at_least, number_in, one_of, setting, validate
from refinery.messages import Message, Refusal, Setting, Together

AUDIT_MIN_COUNT = 10  # the audit's min_count (its default): the tokens', the guard's and the verdict's


@dataclass
class UpsampleConfig:
    k: int = setting(10, at_least(1), "Tokens to correct (|S|): the audit's word features (w@field).")
    step: float = setting(0.2, number_in(0, 1, open_low=True), "Share of a token's deficit D[s] drawn per turn.")
    iterations: int = setting(10, at_least(1), "Round-robin passes at most (N).")
    band_min: float = setting(0.002, number_in(0), "Least n(s): a fraction of the rows (≤ 1) or a count (> 1) "
                                                   "(paper: 1,000 on SNLI train).")
    band_max: float = setting(0.02, number_in(0, open_low=True), "Most n(s): a fraction of the rows (≤ 1) or a "
                                                                 "count (> 1) (paper: 10,000 on SNLI train).")
    min_count: int = setting(AUDIT_MIN_COUNT, at_least(AUDIT_MIN_COUNT), "Least n(s) whatever the band: at least "
                             "the audit's min_count, from which it gives a feature's z*.")
    tolerance: float = setting(0.01, number_in(0, 1, open_high=True), "Stop when D[s] ≤ tolerance·n(s) for every s.")
    prior: str = setting("auto", one_of(*zstats.PRIORS), zstats.PRIOR_HELP + " A token's target p(l|s) is p0 "
                         "(the paper: uniform).")
    max_copies: int = setting(3, at_least(1), "Copies of one source row at most; each turn's copies go to distinct "
                                              "rows, the fewest-copied first.")
    remove_stopwords: bool = setting(True, help="Leave English stopwords out of the tokens (the paper does; "
                                                "negations and quantifiers stay).")
    guard: bool = setting(True, help=Message(
        "Refuse a copy that would take a feature over the significance threshold or raise a significant one, keep "
        "the label shares (empirical prior) and undo the last turns until nothing got worse; off: every drawn copy "
        "is added, as the paper does (with ", Setting("prior", "uniform"), " and a large ", Setting("max_copies"),
        ": its letter). The verdict is made either way."))
    seed: int = setting(0, SEED, "Seed of the draws.")

    def __post_init__(self):
        validate(self)
        if (self.band_min > 1) == (self.band_max > 1) and self.band_min >= self.band_max:
            raise Refusal(Setting("band_min", self.band_min), " must be less than ",
                          Setting("band_max", self.band_max), code="invalid-setting")

    def band(self, rows: int) -> tuple[int, int]:
        """[lo, hi] of n(s) over a corpus of ``rows`` rows (lo at least min_count)."""
        lo = max(self.min_count, math.ceil(_band_count(self.band_min, rows)))
        return lo, max(lo, math.floor(_band_count(self.band_max, rows)))


def _band_count(value: float, rows: int) -> float:
    return value if value > 1 else value * rows


def wider_band(hint: str) -> Message:
    """The band settings of ``hint`` (``tokens.left_out``'s "band_min,band_max", each as it words it)."""
    band_min, band_max = hint.split(",")
    return Message(Together((Setting("band_min", band_min, placeholder=True),
                             Setting("band_max", band_max, placeholder=True))))
