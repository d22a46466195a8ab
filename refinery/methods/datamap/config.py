"""The data map's config: the task model's training (epochs, what it reads) and the selection a filter keeps.
Light to import: the verb's options are its fields."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import SEED, at_least, number_in, one_of, setting, validate

REGIONS = ("ambiguous", "hard", "easy", "random")


@dataclass
class DataMapConfig:
    keep: str = setting("ambiguous", one_of(*REGIONS), "The rows kept: the most ambiguous (highest variability), "
                                                         "hard-to-learn (lowest confidence), easy-to-learn (highest "
                                                         "confidence), or a random subset of the same size.")
    share: float = setting(0.33, number_in(0, 1, open_low=True), "The share of the rows kept (the paper's 33%).")
    epochs: int = setting(5, at_least(2), "E: epochs of training; the dynamics are recorded after each.")
    inputs: str = setting("pair", one_of("pair", "hypothesis"), "What the task model reads.")
    lr: float = setting(100.0, number_in(0, open_low=True), "η: the SGD step of the task model on its unit-length "
                                                            "TF-IDF rows (batches of 32).")
    hash_bits: int = setting(20, at_least(10), "The task model's features: each field's word 1-2-grams hashed "
                                               "into 2^bits columns.")
    seed: int = setting(0, SEED, "Seed of the training order (and of the random subset).")

    def __post_init__(self):
        validate(self)
