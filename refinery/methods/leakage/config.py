"""The leakage stage's config (its verb's options and pipeline keys): which leakage features of the sentence graph
(``models.leakage_settings``), the graph and the forest that reads the label off them."""
from __future__ import annotations

from dataclasses import dataclass, field

from refinery.core.validation import NOT_EMPTY, setting, validate
from refinery.models.leakage_settings import ForestConfig, GraphConfig


@dataclass
class LeakageConfig:
    graph: GraphConfig = field(default_factory=GraphConfig)
    forest: ForestConfig = field(default_factory=ForestConfig)
    test_split: str | None = setting(None, NOT_EMPTY.or_none(), "The split to score (none: 'test', else the last).")
    identical_label: str | None = setting(None, NOT_EMPTY.or_none(), "Also write identical/: each sentence paired "
                                          "with itself, with this label (paper §3).", option="--identical-pairs")

    def __post_init__(self):
        validate(self)
