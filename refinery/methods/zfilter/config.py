"""The zfilter and compose stages' configs (their verbs' options and pipeline keys), and the names of the
compositions and their parts."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from refinery.core import stats as zstats
from refinery.core.features import FeatureConfig
from refinery.core.validation import OPEN_UNIT_INTERVAL, SEED, Allowed, at_least, number_in, one_of, setting, validate
from refinery.pipeline.stage_input import StageInput

COMPOSITIONS = ("zaug", "parz", "seqz")
BIASED_SETS = ("significant", "top-k")   # B_Z(l): the top-k of l's significant features, or of all (the paper's)
PARTS = {"original": "original (D0)", "generated": "generated (G)", "together": "together (D0 ∪ G)"}


@dataclass
class ZFilterConfig:
    k: int = setting(20, at_least(1), "|B_Z(l)|: top-k biased features per label.")
    batch_size: int = setting(1000, at_least(1), "Rows per decision batch.")
    min_count: int = setting(10, at_least(1), "Rows a feature must be in (in Z) to be biased.")
    warmup: int = setting(0, at_least(0), "Rows Z must hold before any row is rejected.")
    settle: bool = setting(True, help="After the stream, reject the fewest earliest-admitted kept rows that bring "
                           "every feature of Z under the significance threshold (rows admitted before their shortcut "
                           "could be ranked); off: Algorithm 1 as written.")
    settle_limit: float = setting(0.1, number_in(0, 1), "Share of the stream's kept rows settle may take back at "
                                  "most, the largest effects first (1: no bound; on millions of rows, features a "
                                  "fraction of a point off p0 are significant, and settling them all takes back "
                                  "most of the corpus).")
    biased_set: str = setting("significant", one_of(*BIASED_SETS), "B_Z(l), what a row of label l may not carry: "
                              "the top-k features of l among those over the significance threshold of Z (significant:"
                              " a corpus whose audit finds no shortcut passes through unchanged), or the top-k "
                              "whatever their z* (top-k: Algorithm 1 as written; it removes rows of an unbiased "
                              "corpus too).")
    prior: str = setting("auto", one_of(*zstats.PRIORS), zstats.PRIOR_HELP + " auto looks at the input's labels.")
    alpha: float = setting(0.01, OPEN_UNIT_INTERVAL, "Family-wise level of the reports' significance threshold.")
    shuffle_seed: int | None = setting(None, SEED.or_none(), "Shuffle the stream with this seed (none: its own order).")
    features: FeatureConfig = field(default_factory=FeatureConfig)
    seed_corpus: tuple[str, ...] = setting((), help="A corpus Z starts as (conditional filtering; repeat for more), "
                                           "or a pipeline step's name.", multiple=True)

    def __post_init__(self):
        validate(self)

    def to_dict(self) -> dict:
        return {**asdict(self), "features": self.features.to_dict()}

    def named(self, source: StageInput) -> "ZFilterConfig":
        """This config with its features named as the input's preset names its texts."""
        return replace(self, features=self.features.named(source.field_names, source.single_text))


@dataclass
class ComposeConfig:
    composition: str = setting("seqz", one_of(*COMPOSITIONS), "Wu et al. §4.2: Z-Aug, Par-Z or Seq-Z.")
    original: tuple[str, ...] = setting(("input",), Allowed(lambda v: len(v) > 0, "a non-empty list"),
                                        "D0: a corpus (repeat for more), or a pipeline step's name.", multiple=True)
    zfilter: ZFilterConfig = field(default_factory=ZFilterConfig)

    def __post_init__(self):
        validate(self)
