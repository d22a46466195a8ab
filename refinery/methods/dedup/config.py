"""dedup's config (its verb's options and pipeline keys): what makes two rows near-duplicates (the Jaccard of their
shingles, or the cosine of their sentence embeddings) and from which threshold, which row of a cluster is kept, and
what becomes of a cluster whose labels conflict."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import (
    NAME_OR_FOLDER,
    NOT_EMPTY,
    SEED,
    at_least,
    number_in,
    one_of,
    setting,
    validate,
)
from refinery.messages import Message, Setting

CONFLICTS = ("keep", "drop", "one")
SIMILARITIES = ("jaccard", "cosine")


@dataclass
class DedupConfig:
    similarity: str = setting("jaccard", one_of(*SIMILARITIES),
                              Message("What makes two distinct rows near-duplicates: the Jaccard of their word "
                                      "shingles (MinHash-LSH), or the cosine of their sentence embeddings (a frozen "
                                      "encoder, ", Setting("model"), "; embeddings cached by content): paraphrases "
                                      "too, at the encoder's cost."))
    threshold: float = setting(0.8, number_in(0, 1, open_low=True),
                               "Jaccard of word shingles from which two rows are near-duplicates (each of a pair's "
                               "texts must reach it; 1: exact and normalized duplicates only).")
    cosine_threshold: float = setting(0.9, number_in(0, 1, open_low=True),
                                      Message("Cosine of sentence embeddings from which two rows are "
                                              "near-duplicates under ", Setting("similarity", "cosine"),
                                              " (each of a pair's texts must reach it; 1: exact and normalized "
                                              "duplicates only)."))
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         Message("The frozen encoder of ", Setting("similarity", "cosine"), " (name or folder)."),
                         path=NAME_OR_FOLDER)
    shingle_size: int = setting(2, at_least(1), "Words per shingle (a text of fewer words is one shingle, whole).")
    permutations: int = setting(128, at_least(8), "MinHash values per row; cut into LSH bands that make a pair at "
                                                  "the threshold a candidate with probability ≥ 0.99.")
    prefer_split: str | None = setting(None, NOT_EMPTY.or_none(),
                                       "Keep a cluster's row from this split where it has one (e.g. test: the "
                                       "training copies of test rows are removed); else its first row in input "
                                       "order.")
    conflicts: str = setting("keep", one_of(*CONFLICTS),
                             "A cluster whose rows carry different labels: keep one row of each of its labels (a "
                             "near-duplicate of another label may be a minimal pair: SNLI's 'a game' / 'a game "
                             "outside'; its same-label copies are removed), drop them all (label noise), or keep one "
                             "as in any cluster.")
    seed: int = setting(0, SEED, "Seed of the MinHash functions.")

    def __post_init__(self):
        validate(self)
