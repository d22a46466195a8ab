"""The task model of ``refinery probe`` and ``refinery compare``: an n-gram classifier or a fine-tuned transformer
encoder, and what it reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from refinery.core.validation import NAME_OR_FOLDER, NOT_EMPTY, at_least, number_in, one_of, setting, validate
from refinery.models.precision import PRECISIONS

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class TaskModel:
    """The task model: an n-gram classifier or a fine-tuned transformer encoder (``backend``, the encoder and its
    training), and what it reads (``inputs`` pair | hypothesis: the hypothesis-only bias probe). Its fields are the
    options of ``refinery probe`` and ``refinery compare``, and their pipeline keys."""

    backend: str = setting("ngram", one_of("ngram", "transformer"),
                           "An n-gram classifier, or a fine-tuned transformer encoder (--model).")
    inputs: str = setting("pair", one_of("pair", "hypothesis"),
                          "What the model reads: the pair, or the hypothesis alone (the hypothesis-only bias probe).")
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         "Encoder of the transformer backend (name or folder).", path=NAME_OR_FOLDER)
    epochs: int = setting(2, at_least(1), "Transformer fine-tuning epochs.")
    lr: float = setting(5e-5, number_in(0, open_low=True), "Transformer learning rate.")
    batch_size: int = setting(32, at_least(1), "Transformer batch size.", option="--batch")
    max_length: int = setting(128, at_least(1), "Transformer input length, in tokens.")
    precision: str = setting("auto", one_of(*PRECISIONS), "Transformer fine-tuning precision. auto: bf16 autocast "
                             "where the device computes bf16 natively, float32 elsewhere.", option="--train-precision")

    def __post_init__(self):
        validate(self)

    def classifier(self, seed: int = 0):
        from refinery.models.base import make_classifier

        if self.backend == "ngram":
            return make_classifier("ngram", self.inputs)
        return make_classifier("transformer", self.inputs, model=self.model, epochs=self.epochs, lr=self.lr,
                               batch_size=self.batch_size, max_length=self.max_length, seed=seed,
                               precision=self.precision)

    def model_key(self) -> dict:
        """What a fitted model depends on (not a comparison's seed count, bootstrap draws or breakdowns)."""
        keep = ("backend", "inputs") + (() if self.backend == "ngram" else
                                         ("model", "epochs", "lr", "batch_size", "max_length", "precision"))
        return {k: getattr(self, k) for k in keep}


def training_rows(corpus: str, table: pa.Table, split: str | None, hint: str) -> tuple[pa.Table, int]:
    """The rows a task model trains on: a corpus with named splits gives its ``split`` rows (default: ``train``, or
    its only split), never its evaluation splits pooled in; the number of rows of other splits left out. ``corpus``
    names it in an error, ``hint`` says how to name another split."""
    import pyarrow.compute as pc

    present = sorted(set(table["split"].drop_null().to_pylist())) if "split" in table.column_names else []
    if not present:
        if split:
            raise ValueError(f"{corpus}: split {split!r} was asked for, but it has no named splits")
        return table, 0
    chosen = split or ("train" if "train" in present or len(present) > 1 else present[0])
    if chosen not in present:
        raise ValueError(f"{corpus} has splits {', '.join(present)} and no {chosen!r} split; name the one to train "
                         f"on ({hint})")
    kept = table.filter(pc.fill_null(pc.equal(table["split"], chosen), False))
    return kept, table.num_rows - kept.num_rows
