"""The task model of ``refinery probe`` and ``refinery compare``: an n-gram classifier or a fine-tuned transformer
encoder, what it reads (``READS``, ``model_reads``, ``model_texts``, ``text_keys``: the identity of a leaked row) and
the rows it trains on (``training_rows``)."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from refinery.core.validation import NAME_OR_FOLDER, NOT_EMPTY, at_least, number_in, one_of, setting, validate
from refinery.io.schema import is_pair
from refinery.messages import Message, Refusal, Setting
from refinery.models.precision import PRECISIONS


@dataclass
class TaskModel:
    """The task model: an n-gram classifier or a fine-tuned transformer encoder (``backend``, the encoder and its
    training), and what it reads (``inputs`` pair | hypothesis: the hypothesis-only bias probe). Its fields are the
    options of ``refinery probe`` and ``refinery compare``, and their pipeline keys."""

    backend: str = setting("ngram", one_of("ngram", "transformer"),
                           Message("An n-gram classifier, or a fine-tuned transformer encoder (", Setting("model"),
                                   ")."))
    inputs: str = setting("pair", one_of("pair", "hypothesis"),
                          "What the model reads: the pair, or the hypothesis alone (the hypothesis-only bias probe).")
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         "Encoder of the transformer backend (name or folder).", path=NAME_OR_FOLDER)
    epochs: int = setting(2, at_least(1), "Transformer fine-tuning epochs.")
    lr: float = setting(5e-5, number_in(0, open_low=True), "Transformer learning rate.")
    batch_size: int = setting(32, at_least(1), "Transformer batch size.")
    max_length: int = setting(128, at_least(1), "Transformer input length, in tokens.")
    train_precision: str = setting("auto", one_of(*PRECISIONS), "Transformer fine-tuning precision. auto: bf16 "
                                   "autocast where the device computes bf16 natively, float32 elsewhere.")

    def __post_init__(self):
        validate(self)

    def classifier(self, seed: int = 0):
        from refinery.models.base import make_classifier

        if self.backend == "ngram":
            return make_classifier("ngram", self.inputs)
        return make_classifier("transformer", self.inputs, model=self.model, epochs=self.epochs, lr=self.lr,
                               batch_size=self.batch_size, max_length=self.max_length, seed=seed,
                               precision=self.train_precision)

    def model_key(self) -> dict:
        """What a fitted model depends on (not a comparison's seed count, bootstrap draws or breakdowns)."""
        keep = ("backend", "inputs") + (() if self.backend == "ngram" else
                                         ("model", "epochs", "lr", "batch_size", "max_length", "train_precision"))
        return {k: getattr(self, k) for k in keep}


def training_rows(corpus: str, table: pa.Table, split: str | None, hint: str) -> tuple[pa.Table, int]:
    """The rows a task model trains on: a corpus with named splits gives its ``split`` rows (default: ``train``, or
    its only split), never its evaluation splits pooled in; the number of rows of other splits left out. ``corpus``
    names it in an error, ``hint`` says how to name another split."""
    import pyarrow.compute as pc

    present = sorted(set(table["split"].drop_null().to_pylist())) if "split" in table.column_names else []
    if not present:
        if split:
            raise Refusal(f"{corpus}: split {split!r} was asked for, but it has no named splits", code="missing-split")
        return table, 0
    chosen = split or ("train" if "train" in present or len(present) > 1 else present[0])
    if chosen not in present:
        raise Refusal(f"{corpus} has splits {', '.join(present)} and no {chosen!r} split; name the one to train "
                      f"on ({hint})", code="missing-split")
    kept = table.filter(pc.fill_null(pc.equal(table["split"], chosen), False))
    return kept, table.num_rows - kept.num_rows


# What the models read: both texts, the hypothesis (text_b) alone, or the one text of single-text corpora
READS = {"pair": "the pair (text_a and text_b)", "text_b": "the hypothesis (text_b) alone",
         "text_a": "one text (text_a) alone"}


def model_reads(tables: dict, inputs: str) -> str:
    """What every model reads (a ``READS`` key): the training corpora must agree, being all pairs or all single
    texts; ``inputs`` hypothesis reads text_b of pairs (the n-gram and transformer models read a single text's
    text_a either way)."""
    pairs = {n: is_pair(t) for n, t in tables.items()}
    if len(set(pairs.values())) > 1:
        one = [n for n, p in pairs.items() if not p]
        two = [n for n, p in pairs.items() if p]
        raise Refusal(f"training corpora {', '.join(two)} hold pairs and {', '.join(one)} single texts: their "
                      "models would read different things; compare corpora of one kind", code="conflicting-settings")
    if not any(pairs.values()):
        return "text_a"
    return "text_b" if inputs == "hypothesis" else "pair"


def model_view(table: pa.Table, reads: str, where: str) -> pa.Table:
    """The evaluation rows as the models read them: a model trained on single texts scores a pair on its text_a
    alone (text_b dropped); a model of pairs cannot score single texts (a clear error)."""
    if reads == "text_a" and "text_b" in table.column_names:
        return table.drop_columns(["text_b"])
    if reads == "pair" and not is_pair(table):
        raise Refusal(f"evaluation set {where} holds single texts, and the models read pairs (trained on "
                      "text_a and text_b): evaluate them on pairs (its pair preset), or train on single texts",
                      code="missing-columns")
    return table


def model_texts(table: pa.Table, reads: str = "pair") -> list:
    """The texts the model reads (``model_reads``): text_a and text_b, the hypothesis (text_b, else the one
    text), or the one text."""
    import pyarrow.compute as pc

    a = table["text_a"]
    b = table["text_b"] if "text_b" in table.column_names else pa.nulls(table.num_rows, pa.string())
    return {"text_a": [a], "text_b": [pc.coalesce(b, a)]}.get(reads, [a, b])


def text_keys(table: pa.Table, reads: str = "pair") -> pa.Array:
    """Normalized text of what the model reads (``model_texts``, joined by a tab), the identity of the leak check
    and of the inputs that carry several gold labels: case-folded, with only letters and digits kept, so that a
    tokenized release (``dog 's .``) and its raw text (``dog's.``) are the same row."""
    import pyarrow.compute as pc

    keys = [pc.replace_substring_regex(pc.utf8_lower(t), r"[^\w]+|_", "") for t in model_texts(table, reads)]
    return keys[0] if len(keys) == 1 else pc.binary_join_element_wise(keys[0], pc.fill_null(keys[1], ""), "\t")


def overlap_rows(keys: pa.Array, trained: pa.Array) -> int:
    """How many of an evaluation set's rows (their ``text_keys``) are training rows (``trained``: a training
    corpus's ``text_keys``): compare's leak check, probe's warning."""
    import pyarrow.compute as pc

    return int(pc.sum(pc.is_in(keys, value_set=trained)).as_py() or 0)
