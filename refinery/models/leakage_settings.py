"""The settings of the leakage features of the sentence graph (Zhang et al. 2019; METHODS §4): their names, how
pairs become a graph (``GraphConfig``) and the forest that reads the label off the features (``ForestConfig``).
Settings only, light to import: the leakage and weights stages' configs hold them; ``models.sentence_graph``
computes the features."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import SEED, Allowed, at_least, one_of, setting, validate

# DuckDB's memory while it builds the graph (at most; half the memory budget where that is less): with the process's own
# arrays a stage stays within 4 GB (10M planted pairs and a test split of 1M: leakage 3.5–4.15 GB at 3 GiB, 4.45 GB
# at 4 GiB)
GRAPH_MEMORY = 2 << 30

BASIC_FEATURES = ("s1_freq", "s2_freq", "s1s2_inter")
ADVANCED_FEATURES = BASIC_FEATURES + (
    "s1s2_paths3", "s1_hop2", "s2_hop2", "s1_hop3", "s2_hop3",
    "resource_allocation", "jaccard", "preferential_attachment", "adamic_adar",
)
FEATURE_SETS = {"basic": BASIC_FEATURES, "advanced": ADVANCED_FEATURES}


@dataclass
class GraphConfig:
    """How pairs become a graph.

    ``node_key``: ``id`` (the node_a/node_b sentence ids, e.g. QQP qid1/qid2), ``text``
    (normalized text) or ``auto`` (ids where the corpus has them). ``transductive``: one graph
    over all splits (else one per split). ``multigraph``: duplicate pairs are parallel edges,
    as in the reference code (else a simple graph).
    """

    node_key: str = setting("auto", one_of("auto", "id", "text"), "Sentence identity: ids, normalized text, or "
                                                                  "ids where present.")
    transductive: bool = setting(True, help="One graph over all splits (the paper's setting), else one per split.",
                                 option="--transductive/--inductive")
    multigraph: bool = setting(True, help="Duplicate pairs as parallel edges (the reference code), else collapsed.",
                               option="--multigraph/--simple-graph")

    def __post_init__(self):
        validate(self)


@dataclass
class ForestConfig:
    """The random forest that reads labels off leakage features (``models.forest.CellForest``: scikit-learn's
    forest grown on distinct feature vectors weighted by their counts, the same forest in distribution).

    Fully grown trees (min_samples_leaf 1, scikit-learn's default): larger leaves pull the
    out-of-fold P̂(y|l) toward the middle, which leaves the IPS weights short of neutral.
    """

    trees: int = setting(100, at_least(1), "Trees of the random forest.")
    min_samples_leaf: int = setting(1, at_least(1), "Least rows in a leaf.")
    max_depth: int | None = setting(None, at_least(1).or_none(), "Deepest a tree grows (none: fully grown).")
    max_samples: int | None = setting(1_000_000, at_least(1).or_none(),
                                      "Rows each tree draws with replacement (none: as many as it trains on).")
    seed: int = setting(0, SEED, "Seed of the random forest.")
    n_jobs: int = setting(-1, Allowed(lambda v: v == -1 or at_least(1).test(v), "a positive integer or -1"),
                          "Threads (-1: every core).")

    def __post_init__(self):
        validate(self)

    def make(self):
        from refinery.models.forest import CellForest

        return CellForest(n_estimators=self.trees, min_samples_leaf=self.min_samples_leaf, max_depth=self.max_depth,
                          max_samples=self.max_samples, random_state=self.seed, n_jobs=self.n_jobs)
