"""A transformers encoder with a classification head, fine-tuned on the corpus (CPU or GPU).

The default encoder is all-MiniLM-L6-v2 (packaged offline); any model name or folder works on a
connected machine. ``inputs`` as in NGramClassifier: ``pair`` encodes (text_a, text_b) as a
sentence pair, ``hypothesis`` only text_b (the hypothesis-only probe), ``premise`` only text_a.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa

from refinery.messages import Refusal
from refinery.models.precision import resolve_precision
from refinery.models.registry import resolve
from refinery.models.training import fit_loop
from refinery.quiet import quiet_other_bars


class TransformerClassifier:
    kind = "transformer"

    def __init__(self, model: str = "sentence-transformers/all-MiniLM-L6-v2", inputs: str = "pair", *,
                 epochs: int = 1, lr: float = 5e-5, batch_size: int = 32, max_length: int = 128,
                 weight_decay: float = 0.01, seed: int = 0, device: str | None = None, precision: str = "auto"):
        if inputs not in ("hypothesis", "premise", "pair"):
            raise Refusal(f"inputs must be hypothesis, premise or pair, not {inputs!r}", code="invalid-setting")
        self.model_name, self.inputs, self.epochs, self.lr = model, inputs, epochs, lr
        self.batch_size, self.max_length, self.weight_decay, self.seed = batch_size, max_length, weight_decay, seed
        self.device, self.precision = device, precision
        self.precision_ = None  # the Precision the last fit ran in
        self.classes_: list = []
        self.model = self.tokenizer = None

    def _device(self):
        import torch

        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def _encode(self, table: pa.Table):
        a = table["text_a"].to_pylist()
        b = table["text_b"].to_pylist() if "text_b" in table.column_names else [None] * len(a)
        if self.inputs == "pair" and any(x is not None for x in b):
            return self.tokenizer(a, [x or "" for x in b], truncation=True, max_length=self.max_length,
                                  padding=True, return_tensors="pt")
        texts = a if self.inputs == "premise" else [y if y is not None else x for x, y in zip(a, b)]
        return self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=True, return_tensors="pt")

    @staticmethod
    def _text_lengths(table: pa.Table) -> np.ndarray:
        """Characters per row, text_a plus text_b: the proxy that groups fine-tuning batches by length."""
        import pyarrow.compute as pc

        total = np.zeros(table.num_rows, dtype=np.int64)
        for name in ("text_a", "text_b"):
            if name in table.column_names:
                total += pc.fill_null(pc.utf8_length(table[name]), 0).to_numpy()
        return total

    def fit(self, table: pa.Table, sample_weight: np.ndarray | None = None,
            warm_start: bool = False) -> "TransformerClassifier":
        """Fine-tune encoder and head with cross-entropy (optionally weighted per row), AdamW, linear decay,
        in ``self.precision`` (``auto``: bf16 autocast only where the device computes it natively).

        ``warm_start`` continues from the current weights (IBADR's USM) instead of the base model.
        """
        quiet_other_bars()   # transformers' own bars: only where refinery's are drawn
        import torch

        torch.manual_seed(self.seed)
        if not (warm_start and self.model is not None):
            self.build(sorted(set(table["label"].to_pylist())))
        unknown = set(table["label"].to_pylist()) - set(self.classes_)
        if unknown:
            raise RuntimeError(f"warm start: labels {sorted(unknown)} are not among the model's {self.classes_}")
        y = torch.tensor([self.classes_.index(l) for l in table["label"].to_pylist()])
        w = torch.tensor(sample_weight if sample_weight is not None else np.ones(table.num_rows), dtype=torch.float32)

        def loss_of(idx):
            enc = {k: v.to(self._device()) for k, v in self._encode(table.take(idx)).items()}
            logits = self.model(**enc).logits
            loss = torch.nn.functional.cross_entropy(logits, y[idx].to(logits.device), reduction="none")
            return (loss * w[idx].to(logits.device)).sum() / w[idx].sum().to(logits.device)

        self.precision_ = resolve_precision(self.precision, self._device())
        self.model.train()
        fit_loop(self.model.parameters(), table.num_rows, loss_of, precision=self.precision_, epochs=self.epochs,
                 batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay, seed=self.seed,
                 lengths=self._text_lengths(table), desc="fine-tune classifier")
        self.model.eval()
        return self

    def build(self, classes: list) -> None:
        """The base encoder with a fresh classification head over ``classes``, untrained, on the device."""
        quiet_other_bars()
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        self.classes_ = list(classes)
        ref = resolve(self.model_name)
        self.tokenizer = AutoTokenizer.from_pretrained(ref.path, **ref.kwargs())
        said = transformers_logging.get_verbosity()
        transformers_logging.set_verbosity_error()   # its load report names the head added here as missing weights
        try:
            self.model = AutoModelForSequenceClassification.from_pretrained(
                ref.path, num_labels=len(self.classes_), id2label=dict(enumerate(self.classes_)),
                label2id={c: i for i, c in enumerate(self.classes_)}, **ref.kwargs()).to(self._device())
        finally:
            transformers_logging.set_verbosity(said)

    def predict_proba(self, table: pa.Table, batch_size: int = 128) -> np.ndarray:
        import torch

        if self.model is None:
            raise RuntimeError("TransformerClassifier is not fitted")
        # batches of similar lengths pad little; the rows come back in the table's order
        order = np.argsort(self._text_lengths(table), kind="stable")
        proba = np.zeros((table.num_rows, len(self.classes_)), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, table.num_rows, batch_size):
                rows = order[start:start + batch_size]
                enc = {k: v.to(self._device()) for k, v in self._encode(table.take(pa.array(rows))).items()}
                proba[rows] = torch.softmax(self.model(**enc).logits.float(), dim=-1).cpu().numpy()
        return proba

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        with open(os.path.join(path, "classifier.json"), "w") as fh:
            json.dump({"kind": self.kind, "base_model": self.model_name, "inputs": self.inputs,
                       "max_length": self.max_length, "classes": self.classes_,
                       "trained_precision": self.precision_.to_dict() if self.precision_ else None}, fh)

    @classmethod
    def load(cls, path: str, device: str | None = None) -> "TransformerClassifier":
        quiet_other_bars()   # transformers' own bars: only where refinery's are drawn
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        with open(os.path.join(path, "classifier.json")) as fh:
            meta = json.load(fh)
        obj = cls(meta["base_model"], meta["inputs"], max_length=meta["max_length"], device=device)
        obj.classes_ = meta["classes"]
        obj.tokenizer = AutoTokenizer.from_pretrained(path)
        obj.model = AutoModelForSequenceClassification.from_pretrained(path).to(obj._device()).eval()
        return obj
