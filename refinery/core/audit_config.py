"""The audit's settings (the options of ``refinery audit``, its pipeline keys, and the ruler every stage's verdict
measures with at their defaults): the features, how they are counted, the prior rule, min_count, α, k."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from refinery.core import stats as zstats
from refinery.core.features import FeatureConfig
from refinery.core.validation import FOLDER, NOT_EMPTY, OPEN_UNIT_INTERVAL, at_least, one_of, setting, validate
from refinery.messages import Setting


@dataclass
class AuditConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    counting: str = setting("exact", one_of("exact", "sketch"), "Exact counts (spilling to disk past the "
                            "run's memory budget), or bounded-memory sketches.")
    prior: str = setting("auto", one_of(*zstats.PRIORS), zstats.PRIOR_HELP)
    min_count: int = setting(10, at_least(1), "Rows a feature must be in for its z* to be computed.")
    alpha: float = setting(0.01, OPEN_UNIT_INTERVAL, "Family-wise level of the Bonferroni-corrected threshold.")
    k: int = setting(20, at_least(1), "Top features per label.")
    probe_folds: int = setting(5, at_least(2), "Folds of the cross-fitted hypothesis-only probe (hypo-only).")
    sketch_lg_k: int = setting(16, at_least(3), "Sketch counting: log2 of the frequent-items map size.")
    sketch_recount: bool = setting(True, help="Sketch counting: a second pass counts the sketches' candidates "
                                              "exactly.")
    weighted: bool = setting(True, help="Rows that carry a 'weight' column (refinery weights' output) count as their "
                             "weight: count(x, l) = Σ w, z* and min_count at each feature's effective size "
                             "(Σw)²/Σw² (off: every row counts once).",
                             option="--weighted/--unweighted")
    update: str | None = setting(None, NOT_EMPTY.or_none(), "A previous audit's folder: add the input to its "
                                 "counts (an incremental audit).", path=FOLDER)

    def __post_init__(self):
        validate(self)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["features"] = self.features.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "AuditConfig":
        """The config an audit saved with its counts; a setting it has that this version has not (an earlier
        version's ``memory_budget``, now the run's) is left out."""
        known = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in d.items() if k in known}, "features": FeatureConfig.from_dict(d["features"])})

    @property
    def counter_kind(self) -> tuple:
        """What a saved state must share with an update of it."""
        return self.features, self.counting


UNWEIGHTED = Setting.of(AuditConfig, "weighted", False)   # the remedy that counts rows, not weights (--unweighted)
