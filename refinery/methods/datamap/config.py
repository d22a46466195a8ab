"""The data map's config: the task model's training (epochs, what it reads) and the selection a filter keeps.
Light to import: the verb's options are its fields."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import NAME_OR_FOLDER, NOT_EMPTY, SEED, at_least, number_in, one_of, setting, validate
from refinery.messages import Message, Setting

REGIONS = ("ambiguous", "hard", "easy", "random")
BACKENDS = ("ngram", "embeddings", "transformer")
DEFAULT_LR = {"ngram": 100.0, "embeddings": 10.0, "transformer": 5e-5}


@dataclass
class DataMapConfig:
    keep: str = setting("ambiguous", one_of(*REGIONS), "The rows kept: the most ambiguous (highest variability), "
                                                         "hard-to-learn (lowest confidence), easy-to-learn (highest "
                                                         "confidence), or a random subset of the same size.")
    share: float = setting(0.33, number_in(0, 1, open_low=True), "The share of the rows kept (the paper's 33%).")
    epochs: int = setting(5, at_least(2), "E: epochs of training; the dynamics are recorded after each.")
    backend: str = setting("ngram", one_of(*BACKENDS),
                           Message("The task model: a softmax head on hashed n-grams (ngram) or on a frozen "
                                   "encoder's sentence embeddings (embeddings, ", Setting("model"), "; cached by "
                                   "content), trained from zero by SGD; or the encoder fine-tuned with its head "
                                   "(transformer, ", Setting("model"), "), the paper's setting."))
    inputs: str = setting("pair", one_of("pair", "hypothesis"), "What the task model reads.")
    lr: float | None = setting(None, number_in(0, open_low=True).or_none(),
                               "The task model's step: SGD's η on unit-length rows, batches of 32 (none: 100 for "
                               "ngram, 10 for embeddings), or AdamW's learning rate for transformer (none: 5e-5).")
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         "The encoder of the embeddings and transformer backends (name or folder).",
                         path=NAME_OR_FOLDER)
    max_length: int = setting(128, at_least(1), "The encoder's input length, in tokens.")
    hash_bits: int = setting(20, at_least(10), "The task model's features: each field's word 1-2-grams hashed "
                                               "into 2^bits columns.")
    seed: int = setting(0, SEED, "Seed of the training order (and of the random subset).")

    def __post_init__(self):
        validate(self)

    def step(self) -> float:
        """The task model's step: ``lr``, or its backend's default."""
        return self.lr if self.lr is not None else DEFAULT_LR[self.backend]
