"""docs/extending.md's example filter, written outside refinery: the stage tests/test_extending.py registers and
tests/test_packaging.py installs as a plugin (this file as its module, declared by an entry point)."""
from dataclasses import dataclass

import numpy as np

from refinery.core.validation import at_least, setting, validate
from refinery.pipeline.filter import FilterStage


@dataclass
class ShortTextConfig:
    min_words: int = setting(3, at_least(1), "Fewest words a hypothesis may have.")   # → --min-words

    def __post_init__(self):
        validate(self)                    # "min_words must be a positive integer, got 0"


class ShortText(FilterStage):
    """Drop pairs whose hypothesis is shorter than min_words words."""

    name, Config = "short-text", ShortTextConfig
    needs = ("id", "text_b", "label")

    def decide(self, batch):
        words = np.array([len((t or "").split()) for t in batch["text_b"].to_pylist()])
        return words >= self.config.min_words, [f"{n} words < {self.config.min_words}" for n in words]
