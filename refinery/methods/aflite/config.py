"""AFLite's config: the paper's parameters (m, t, k, τ, n of Algorithm 1) as shares of the corpus, and the
representation Φ the linear models read. Light to import: the verb's options are its fields."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import (NAME_OR_FOLDER, NOT_EMPTY, SEED, Allowed, at_least, number_in, one_of, setting,
                                      validate)
from refinery.messages import Message, Setting

INPUTS = ("pair", "hypothesis")
REPRESENTATIONS = ("ngrams", "embeddings")


@dataclass
class AFLiteConfig:
    partitions: int = setting(64, at_least(2), "m: random train/held-out partitions per iteration (the paper's 64).")
    train_share: float = setting(0.5, number_in(0, 1, open_low=True, open_high=True),
                                 "t as a share of the rows left: each partition's training rows (the rest are "
                                 "held out and scored).")
    slice_share: float = setting(0.05, number_in(0, 1, open_low=True),
                                 "k as a share of the input's rows: the most predictable rows removed per iteration.")
    tau: float = setting(0.75, number_in(0, 1), "τ: a row is removed only when its predictability (the share of "
                                                "held-out models that predict its label) is at least this; fewer "
                                                "than k such rows end the filtering (the paper's 0.75).")
    target_share: float = setting(0.5, number_in(0, 1, open_high=True),
                                  "n as a share of the input's rows: the filtering stops once no more are left.")
    inputs: str = setting("hypothesis", one_of(*INPUTS), "What Φ reads: the hypothesis alone (a single-text "
                          "corpus's text), or the pair (where a premise recurs with each label, as in SNLI, a "
                          "bag of n-grams of the pair learns the premise and predicts its other rows' labels).")
    representation: str = setting("ngrams", one_of(*REPRESENTATIONS),
                                  Message("Φ and its classifiers: hashed word n-grams with multinomial naive "
                                          "Bayes, or sentence embeddings of a frozen encoder (", Setting("model"),
                                          "; of the pair: u, v, their distance and product) with logistic "
                                          "regression, the paper's; embeddings are cached by content."))
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         Message("The frozen encoder of ", Setting("representation", "embeddings"),
                                 " (name or folder)."), path=NAME_OR_FOLDER)
    max_length: int = setting(128, at_least(1), "The encoder's input length, in tokens (embeddings).")
    hash_bits: int = setting(18, Allowed(lambda v: isinstance(v, int) and not isinstance(v, bool) and 10 <= v <= 24,
                                         "an integer from 10 to 24"),
                             Message("Φ of ", Setting("representation", "ngrams"),
                                     ": each field's word 1-2-grams hashed into 2^bits columns."))
    seed: int = setting(0, SEED, "Seed of the partitions.")

    def __post_init__(self):
        validate(self)
