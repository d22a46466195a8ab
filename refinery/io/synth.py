"""Planted-bias corpora: NLI-like pairs with known spurious tokens (ground truth for recall and scale).

Words are drawn from a Zipfian vocabulary of pronounceable pseudo-words. Each planted token
``s → (label, rate)`` is inserted into the hypothesis of a row with that label with
probability ``rate`` and into other rows with probability ``rate · leak``. With
``premise_pool`` the premises are drawn from one ranked pool, label j with Zipf exponent
``pool_skew · (C − j) / C``: popular premises lean to the first label, rare ones to the last, and
every premise's label odds depend on its popularity alone (the selection bias of Zhang et al.:
a sentence's degree predicts the label, which the leakage features detect and the weights undo).

With ``signal_words`` each hypothesis also carries one cue word of a per-label set, its own
label's with probability ``signal_rate`` (else a random label's): the genuine signal a debiased
model should keep. ``split`` draws other rows over the same vocabulary and cue words: ``test``
from the same distribution, ``anti-shortcut`` with the shortcuts reversed (each hypothesis
carries a planted word of another label and a cue word of its own; pooled premises are drawn
with another label's popularity), so that a model's reliance on the shortcuts can be measured
where the truth is known. With ``hypothesis_pool`` as well, every text is one of a fixed set, so the corpus's
n-grams stop growing with its rows (how ``benchmarks/scale.py --hypothesis-pool`` tells the memory that follows
the rows from the memory that follows the vocabulary). ``label_shares`` makes the labels imbalanced (each row's
label drawn with these shares instead of uniformly): with negations planted in the smallest label
(``planted={"no": ("contradiction", 0.5), "not": ("contradiction", 0.4)}``, a small ``leak``) it is a
corpus like SICK, whose minority label is mostly written with a negation. Deterministic from the seed;
generated in Arrow, batch by batch.

Ground truth for deduplication and decontamination (off by default, so a corpus without them is unchanged):
``near_duplicates`` makes that share of each batch's rows an edited copy of another row of the batch (its premise
with one word substituted, deleted or inserted, or its last word moved to the front; or both texts re-cased and
ended with `` .``, a duplicate once normalized), ``flip_share`` of those with another label (a label conflict);
``contamination`` makes that share of the rows a copy of the held-out row of the same number (``split: test`` of
the same seed: ``refinery synth --split test``), half of them re-cased and ended with `` .`` (another
tokenization). Each row then records its pair: ``planted_copy_of`` (the id of the row it copies, or null),
``planted_edit`` (the edit, or ``held-out``) and ``planted_flip`` (its label changed).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.io.corpus_writer import CorpusWriter
from refinery.io.records import CorpusManifest
from refinery.messages import Refusal

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
DEFAULT_PLANTED = {
    "nobody": ("contradiction", 0.15),
    "sleeping": ("contradiction", 0.10),
    "outdoors": ("entailment", 0.12),
    "someone": ("entailment", 0.08),
    "tall": ("neutral", 0.10),
    "friends": ("neutral", 0.08),
}


@dataclass(frozen=True)
class SynthSpec:
    rows: int = 100_000
    labels: tuple = ("entailment", "neutral", "contradiction")
    label_shares: tuple | None = None   # each label's share of the rows, in the order of labels (None: equal)
    planted: dict = field(default_factory=lambda: dict(DEFAULT_PLANTED))
    leak: float = 0.1
    vocab_size: int = 20_000
    zipf: float = 1.1
    premise_len: tuple = (8, 16)
    hypothesis_len: tuple = (4, 10)
    premise_pool: int = 0          # 0: every premise fresh; else draw premises from a pool of this size
    hypothesis_pool: int = 0       # 0: every hypothesis fresh; else draw them uniformly from a pool of this size
    pool_skew: float = 1.5         # Zipf exponent of the first label's premises (the last label's: skew / C)
    signal_words: int = 0          # genuine cue words per label (0: labels carry no genuine signal)
    signal_rate: float = 0.8       # how often a row's cue word is of its own label
    split: str = "train"           # train | test | anti-shortcut
    seed: int = 0
    near_duplicates: float = 0.0   # share of rows that are an edited copy of another row of their batch
    flip_share: float = 0.0        # share of those near-duplicates given another label
    contamination: float = 0.0     # share of rows copied from the held-out split (split test, same seed)

    def __post_init__(self):
        if self.label_shares is not None:
            shares = tuple(float(x) for x in self.label_shares)
            if len(shares) != len(self.labels) or min(shares) <= 0:
                raise Refusal(f"label_shares must give a positive share to each of the {len(self.labels)} labels "
                              f"({', '.join(self.labels)}), got {', '.join(map(str, self.label_shares))}",
                              code="invalid-setting")
            object.__setattr__(self, "label_shares", tuple(x / sum(shares) for x in shares))
        if self.split not in SPLITS:
            raise Refusal(f"split must be one of {', '.join(SPLITS)}, not {self.split!r}", code="invalid-setting")
        if self.split == "anti-shortcut" and not (self.planted or self.premise_pool):
            raise Refusal("an anti-shortcut split needs shortcuts to reverse: planted words or a premise pool",
                          code="conflicting-settings")
        for name, pool in (("premise_pool", self.premise_pool), ("hypothesis_pool", self.hypothesis_pool)):
            if pool < 0:
                raise Refusal(f"{name} must be 0 (each text drawn fresh) or the number of texts to draw from, got "
                              f"{pool}", code="invalid-setting")
        shares = {"near_duplicates": self.near_duplicates, "flip_share": self.flip_share,
                  "contamination": self.contamination}
        for name, share in shares.items():
            if not 0 <= share <= 1:
                raise Refusal(f"{name} must be a share from 0 to 1, got {share}", code="invalid-setting")
        if self.near_duplicates + self.contamination > 0.5:
            raise Refusal("near_duplicates and contamination together must leave at least half the rows as they "
                          f"are, got {self.near_duplicates} + {self.contamination}", code="invalid-setting")

    @property
    def plants_copies(self) -> bool:
        return bool(self.near_duplicates or self.contamination)


SPLITS = ("train", "test", "anti-shortcut")
EDITS = ("substitution", "deletion", "insertion", "reordering", "case")
HELD_OUT = "held-out"


def vocabulary(size: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words = set()
    out = []
    while len(out) < size:
        k = rng.integers(2, 4)
        w = "".join(rng.choice(SYLLABLES, k))
        if w not in words:
            words.add(w)
            out.append(w)
    return np.array(out, dtype=object)


def _zipf_probs(n: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** s
    return p / p.sum()


def _sentences(rng, vocab, probs, n, lo, hi) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """n sentences; returns the joined strings and the (offsets, word ids) of each."""
    lengths = rng.integers(lo, hi + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = rng.choice(len(vocab), size=int(offsets[-1]), p=probs)
    return ids, offsets


def _join(vocab_arr: pa.Array, ids: np.ndarray, offsets: np.ndarray) -> pa.Array:
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), pc.take(vocab_arr, pa.array(ids)))
    return pc.binary_join(lists, " ")


def generate(spec: SynthSpec, batch_rows: int = 200_000) -> Iterator[pa.Table]:
    """Canonical batches (id, text_a, text_b, label) of the planted-bias corpus."""
    C = len(spec.labels)
    vocab = vocabulary(spec.vocab_size + C * spec.signal_words, spec.seed)
    cues = pa.array(vocab[spec.vocab_size:].tolist(), pa.string())  # label j's cue words: j·S … (j+1)·S − 1
    planted_words = list(spec.planted)
    vocab = np.array([w for w in vocab[:spec.vocab_size] if w not in spec.planted], dtype=object)
    vocab_arr = pa.array(vocab, pa.string())
    probs = _zipf_probs(len(vocab), spec.zipf)
    pool_text = None
    if spec.premise_pool:
        prng = np.random.default_rng(spec.seed + 1)
        ids, offs = _sentences(prng, vocab, probs, spec.premise_pool, *spec.premise_len)
        pool_text = _join(vocab_arr, ids, offs)
        pool_probs = [_zipf_probs(spec.premise_pool, spec.pool_skew * (C - j) / C) for j in range(C)]
    hypotheses = None
    if spec.hypothesis_pool:
        ids, offs = _sentences(np.random.default_rng(spec.seed + 2), vocab, probs, spec.hypothesis_pool,
                               *spec.hypothesis_len)
        hypotheses = _join(vocab_arr, ids, offs)
    held_out = generate(replace(spec, split="test", near_duplicates=0.0, flip_share=0.0, contamination=0.0),
                        batch_rows) if spec.contamination else None
    for start in range(0, spec.rows, batch_rows):
        n = min(batch_rows, spec.rows - start)
        anti = spec.split == "anti-shortcut"
        rng = np.random.default_rng([spec.seed, start] + ([SPLITS.index(spec.split)] if spec.split != "train" else []))
        label_idx = rng.integers(0, C, n) if spec.label_shares is None else rng.choice(C, n, p=spec.label_shares)
        other = (label_idx + rng.integers(1, C, n)) % C if anti else None  # another label, uniformly
        if pool_text is not None:
            pick = np.empty(n, dtype=np.int64)
            popular_for = other if anti else label_idx
            for j in range(C):
                m = popular_for == j
                pick[m] = rng.choice(spec.premise_pool, size=int(m.sum()), p=pool_probs[j])
            text_a = pc.take(pool_text, pa.array(pick))
        else:
            ids, offs = _sentences(rng, vocab, probs, n, *spec.premise_len)
            text_a = _join(vocab_arr, ids, offs)
        if hypotheses is not None:
            hyp = pc.take(hypotheses, pa.array(rng.integers(0, spec.hypothesis_pool, n)))
        else:
            ids, offs = _sentences(rng, vocab, probs, n, *spec.hypothesis_len)
            hyp = _join(vocab_arr, ids, offs)
        # plant tokens: prepend "word " to the hypotheses chosen for it
        prefix = np.full(n, "", dtype=object)
        if anti:  # one planted word of another label per row
            by_label = [[w for w in planted_words if spec.planted[w][0] == l] for l in spec.labels]
            for r in range(n):
                choices = by_label[other[r]] or [w for w in planted_words if spec.planted[w][0] != spec.labels[
                    label_idx[r]]]
                if choices:
                    prefix[r] = choices[rng.integers(len(choices))] + " "
        else:
            for w in planted_words:
                label, rate = spec.planted[w]
                j = spec.labels.index(label)
                p = np.where(label_idx == j, rate, rate * spec.leak)
                hit = rng.random(n) < p
                prefix[hit] = prefix[hit] + (w + " ")
        if spec.signal_words:
            own = anti | (rng.random(n) < spec.signal_rate)
            cue_label = np.where(own, label_idx, rng.integers(0, C, n))
            cue = pc.take(cues, pa.array(cue_label * spec.signal_words + rng.integers(0, spec.signal_words, n)))
            prefix = prefix + cue.to_numpy(zero_copy_only=False) + " "
        text_b = pc.binary_join_element_wise(pa.array(prefix, pa.string()), hyp, "")
        labels = pc.take(pa.array(list(spec.labels), pa.string()), pa.array(label_idx))
        tag = "" if spec.split == "train" else f"{spec.split}-"
        ids_col = pa.array([f"synth-{spec.seed}-{tag}{i}" for i in range(start, start + n)], pa.string())
        table = pa.table({"id": ids_col, "text_a": text_a, "text_b": text_b, "label": labels})
        yield _plant_copies(spec, table, next(held_out) if held_out else None, vocab, start) \
            if spec.plants_copies else table


def _recased(words: list) -> str:
    """Another tokenization of the same text: capitalized, with a final `` .``."""
    text = " ".join(words)
    return (text[:1].upper() + text[1:] + " .") if text else text


def _plant_copies(spec: SynthSpec, table: pa.Table, held_out: pa.Table | None, vocab: np.ndarray,
                  start: int) -> pa.Table:
    """``table`` (one batch) with ``near_duplicates`` of its rows made edited copies of others and ``contamination``
    of them copies of ``held_out``'s rows of the same number, each row recording its pair."""
    rng = np.random.default_rng([spec.seed, start, 7])
    n = table.num_rows
    picked = rng.permutation(n)
    near_at = picked[:round(spec.near_duplicates * n)]
    held_at = picked[len(near_at):len(near_at) + round(spec.contamination * n)]
    untouched = picked[len(near_at) + len(held_at):]
    text_a, text_b = table["text_a"].to_pylist(), table["text_b"].to_pylist()
    labels, ids = table["label"].to_pylist(), table["id"].to_pylist()
    copy_of, edit, flip = [None] * n, [None] * n, [False] * n
    for i in near_at.tolist():
        j = int(untouched[rng.integers(len(untouched))])
        premise, kind = text_a[j].split(" "), EDITS[rng.integers(len(EDITS))]
        at = int(rng.integers(len(premise)))
        if kind == "substitution":
            premise[at] = vocab[rng.integers(len(vocab))]
        elif kind == "deletion" and len(premise) > 1:
            del premise[at]
        elif kind == "insertion":
            premise.insert(at, vocab[rng.integers(len(vocab))])
        elif kind == "reordering":
            premise = premise[-1:] + premise[:-1]
        text_a[i] = _recased(premise) if kind == "case" else " ".join(premise)
        text_b[i] = _recased(text_b[j].split(" ")) if kind == "case" else text_b[j]
        copy_of[i], edit[i] = ids[j], kind
        labels[i] = labels[j]
        if rng.random() < spec.flip_share:
            others = [l for l in spec.labels if l != labels[j]]
            labels[i], flip[i] = others[rng.integers(len(others))], True
    for i in held_at.tolist():
        recase = rng.random() < 0.5
        a, b = held_out["text_a"][i].as_py(), held_out["text_b"][i].as_py()
        text_a[i], text_b[i] = (_recased(a.split(" ")), _recased(b.split(" "))) if recase else (a, b)
        labels[i], copy_of[i], edit[i] = held_out["label"][i].as_py(), held_out["id"][i].as_py(), HELD_OUT
    return pa.table({"id": table["id"], "text_a": pa.array(text_a, pa.string()),
                     "text_b": pa.array(text_b, pa.string()), "label": pa.array(labels, pa.string()),
                     "planted_copy_of": pa.array(copy_of, pa.string()), "planted_edit": pa.array(edit, pa.string()),
                     "planted_flip": pa.array(flip, pa.bool_())})


def write(spec: SynthSpec, out: str, shard_rows: int = 1_000_000, mode: str = "overwrite", **kwargs) -> CorpusManifest:
    """Write the corpus as a canonical corpus (shards + manifest, atomically)."""
    with CorpusWriter(out, mode=mode, shard_rows=shard_rows, config={"synth": _spec_dict(spec)},
                      extra={"planted": {w: list(v) for w, v in spec.planted.items()}}, **kwargs) as writer:
        if not writer.skipped:
            for table in generate(spec):
                writer.write(table)
        return writer.commit()


def _spec_dict(spec: SynthSpec) -> dict:
    """The spec as its manifest records it: a setting left at a default that once was not a setting (every
    hypothesis fresh) is left out, so a corpus made before it is still the same run."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in spec.__dict__.items()
            if not (k == "hypothesis_pool" and not v)}


def parse_shares(text: str) -> tuple:
    """``0.56,0.29,0.15`` (or percentages ``56,29,15``) into label shares."""
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise Refusal(f"label shares are numbers separated by commas (0.56,0.29,0.15), got {text!r}",
                      code="invalid-setting") from None


def parse_planted(text: str) -> dict:
    """``word:label:rate,…`` into the planted map (``none``: no planted words)."""
    planted = {}
    if text.strip().lower() == "none":
        return planted
    for part in filter(None, text.split(",")):
        word, label, rate = part.split(":")
        planted[word] = (label, float(rate))
    return planted
