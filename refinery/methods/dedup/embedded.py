"""Near-duplicates by embedding cosine: pairs of rows whose sentence embeddings (``models.embeddings``: the packaged
all-MiniLM-L6-v2 by default, unit length, read from the embedding cache or embedded and added to it) have cosine
cos(x, y) = e(x)·e(y) ≥ t in every field (a premise shared by two hypotheses is not enough).

Two ways to the same pairs, chosen by size (``EXACT_ROWS``):

- up to ``EXACT_ROWS`` rows, exactly: the rows' embeddings in memory, their products E_i E_jᵀ block by block
  (``BLOCK`` rows at a time), every pair at or above t kept;
- above it, by random-hyperplane LSH (SimHash, Charikar 2002): each row's embedding projected on P seeded Gaussian
  directions g_1…g_P, one bit sgn(g_j·e) each, Pr[the bits of x and y agree] = 1 − θ(x, y)/π, θ = arccos cos(x, y);
  the P = ``BITS`` bits are cut into b bands of r bits (``minhash.bands_for`` at the collision probability of t:
  a pair at the threshold is a candidate, Pr = 1 − (1 − p^r)^b, with probability ≥ 0.99), rows of equal band key
  are candidates (``minhash.candidate_codes``: by sorting, the buckets capped as for MinHash), and each candidate is
  verified by its exact cosine. The embeddings are computed ``CHUNK`` rows at a time and spilled to a memory-mapped
  file; only the band keys (b × 4 bytes a row) are held in memory.

A row of several fields is projected as the concatenation of its F fields' embeddings (the signs are those of the
unit vector it is once scaled by 1/√F), whose cosine to another row's is the mean of the fields' cosines, at least
their least: a pair whose every field reaches t reaches it on the concatenation too and is a candidate as likely.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.io.spill import SpilledVectors
from refinery.core import minhash

EXACT_ROWS = 20_000     # up to this many rows, every pair's cosine (exact); above it, SimHash-LSH and verification
BLOCK = 2_048           # rows per block of the exact product
CHUNK = 131_072         # rows embedded, then projected and spilled, at a time (LSH)
VERIFY_PAIRS = 65_536   # candidate pairs verified at once
BITS = 512              # SimHash bits per row (P)


def collision(cosine: float) -> float:
    """Pr[one random hyperplane puts x and y on one side] = 1 − arccos(cos(x, y))/π (Charikar 2002)."""
    return 1 - math.acos(min(max(cosine, -1.0), 1.0)) / math.pi


@dataclass
class CosinePairs:
    """The pairs of rows (k × 2, a < b, int64) whose every field's cosine reaches the threshold, their least cosine,
    how they were found (``exact`` or ``lsh``, its bands and bits a band), the candidates verified, and the texts'
    provenance (``Embedded.counts``)."""

    pairs: np.ndarray
    similarity: np.ndarray
    method: str
    candidates: int
    bands: int = 0
    bits_per_band: int = 0
    texts: dict = field(default_factory=dict)


class RowVectors:
    """Every row's embedding per field (rows × dim, float32 each), in memory or memory-mapped from a spill file."""

    def __init__(self, fields: list, spill=None):
        self.fields = fields
        self._spill = spill   # the temporary folder of memory-mapped vectors: removed with this object

    def __len__(self) -> int:
        return len(self.fields[0]) if self.fields else 0

    def cosine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Per pair, the least cosine over the rows' fields, ``VERIFY_PAIRS`` pairs at a time."""
        out = np.ones(len(left), np.float32)
        for start in range(0, len(left), VERIFY_PAIRS):
            a, b = left[start:start + VERIFY_PAIRS], right[start:start + VERIFY_PAIRS]
            for vectors in self.fields:
                out[start:start + len(a)] = np.minimum(out[start:start + len(a)],
                                                       np.einsum("ij,ij->i", vectors[a], vectors[b]))
        return out


def _field_texts(batch: pa.Table, name: str) -> list:
    column = batch[name] if name in batch.column_names else pa.nulls(batch.num_rows, pa.string())
    return pc.fill_null(pc.cast(column, pa.string()), "").to_pylist()


def _chunks(batches, fields: list, rows: int):
    """The input's texts by field, ``rows`` rows at a time (lists of one length per field)."""
    held: list = [[] for _ in fields]
    for batch in batches:
        for texts, name in zip(held, fields):
            texts += _field_texts(batch, name)
        while len(held[0]) >= rows:
            yield [t[:rows] for t in held]
            held = [t[rows:] for t in held]
    if held[0]:
        yield held


def _embed(texts: list, spec, engine: str, counts: dict) -> np.ndarray:
    from refinery.models.embeddings import embed_texts

    embedded = embed_texts(texts, spec, engine, desc="dedup: embed")
    for k, v in embedded.counts().items():
        counts[k] = counts.get(k, 0) + v
    return embedded.vectors


def _hyperplanes(dims: int, bits: int, seed: int) -> np.ndarray:
    """P seeded Gaussian directions (dims × P, float32)."""
    return np.random.default_rng(seed).standard_normal((dims, bits), dtype=np.float32)


def simhash_band_keys(vectors: list, planes: np.ndarray, bands: int, rows_per_band: int) -> np.ndarray:
    """Each row's band keys (rows × bands, uint32): its r sign bits of each band, sgn(g_j·[e_1 … e_F]), packed (a
    band of more than 32 bits folded into 32 by xor)."""
    joined = np.hstack(vectors) if len(vectors) > 1 else vectors[0]
    bits = (joined @ planes[:, :bands * rows_per_band]) > 0
    keys = np.empty((len(joined), bands), np.uint32)
    weights = np.uint64(1) << (np.arange(rows_per_band, dtype=np.uint64) % np.uint64(64))
    for band in range(bands):
        packed = np.bitwise_xor.reduce(bits[:, band * rows_per_band:(band + 1) * rows_per_band] * weights, axis=1)
        keys[:, band] = (packed ^ (packed >> np.uint64(32))).astype(np.uint32)
    return keys


def _exact(vectors: RowVectors, rows: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Every pair a < b of ``rows`` with least cosine ≥ ``threshold``: E_i E_jᵀ block by block, per field."""
    found, values = [np.zeros((0, 2), np.int64)], [np.zeros(0, np.float32)]
    fields = [v[rows] for v in vectors.fields]
    for start in range(0, len(rows), BLOCK):
        least = None
        for f in fields:
            product = f[start:start + BLOCK] @ f[start:].T
            least = product if least is None else np.minimum(least, product)
        i, j = np.nonzero(np.triu(least >= threshold, k=1))
        found.append(np.stack([rows[start + i], rows[start + j]], axis=1))
        values.append(least[i, j].astype(np.float32))
    return np.concatenate(found), np.concatenate(values)


def cosine_pairs(batches, fields: list, threshold: float, spec, *, engine: str = "local",
                 rows: np.ndarray | None = None, seed: int = 0, exact_rows: int = EXACT_ROWS
                 ) -> tuple[CosinePairs, RowVectors]:
    """The near-duplicate pairs by cosine among ``rows`` (default: all) of the input's ``batches`` (tables with the
    columns ``fields``; a missing column or a null is the empty text), and the rows' vectors (to name a cluster's
    members' cosine to its representative). Exact up to ``exact_rows`` rows, SimHash-LSH above (module docstring)."""
    counts: dict = {}
    chunks = _chunks(batches, fields, CHUNK)
    embedded = ([_embed(t, spec, engine, counts) for t in texts] for texts in chunks)
    first = next(embedded, None)
    if first is None:
        return CosinePairs(np.zeros((0, 2), np.int64), np.zeros(0, np.float32), "exact", 0), RowVectors([])
    second = next(embedded, None)
    if second is None and len(first[0]) <= exact_rows:
        held = RowVectors(first)
        chosen = np.arange(len(held)) if rows is None else np.asarray(rows, np.int64)
        pairs, values = _exact(held, chosen, threshold)
        return CosinePairs(pairs, values, "exact", len(chosen) * (len(chosen) - 1) // 2, texts=counts), held
    bands, r = minhash.bands_for(collision(threshold), BITS)
    planes = _hyperplanes(sum(v.shape[1] for v in first), BITS, seed)
    spill = SpilledVectors([v.shape[1] for v in first], prefix="dedup-")
    keys = []
    for chunk in itertools.chain([first], [second] if second is not None else [], embedded):
        keys.append(simhash_band_keys(chunk, planes, bands, r))
        spill.append(chunk)
    total = spill.rows
    mapped = RowVectors(spill.mapped(), spill)
    del first, second
    chosen = np.arange(total) if rows is None else np.asarray(rows, np.int64)
    keys = np.concatenate(keys)
    codes = minhash.candidate_codes(keys if rows is None else keys[chosen], chosen, total)
    del keys
    n = np.int64(max(total, 1))
    found, values = [np.zeros((0, 2), np.int64)], [np.zeros(0, np.float32)]
    for start in range(0, len(codes), VERIFY_PAIRS):
        part = codes[start:start + VERIFY_PAIRS]
        left, right = part // n, part % n
        cos = mapped.cosine(left, right)
        similar = cos >= threshold
        found.append(np.stack([left[similar], right[similar]], axis=1))
        values.append(cos[similar])
    return CosinePairs(np.concatenate(found), np.concatenate(values), "lsh", len(codes), bands, r, counts), mapped


class CosineMeasure:
    """Near-duplicates by cosine, as ``clusters.find_duplicates`` asks of a measure: ``edges(rows)`` (the verified
    pairs among ``rows`` and the candidates), then ``between(left, right)`` (the least cosine of the rows' fields);
    ``batches`` gives a fresh pass over the input's tables each call (its texts are read only here)."""

    def __init__(self, batches, fields: list, threshold: float, spec, engine: str = "local", seed: int = 0):
        self.batches, self.fields, self.threshold, self.spec = batches, fields, threshold, spec
        self.engine, self.seed = engine, seed
        self.found: CosinePairs | None = None
        self.vectors = RowVectors([])

    def edges(self, rows: np.ndarray) -> tuple[np.ndarray, int]:
        self.found, self.vectors = cosine_pairs(self.batches(), self.fields, self.threshold, self.spec,
                                                engine=self.engine, rows=rows, seed=self.seed)
        return self.found.pairs, self.found.candidates

    def between(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return self.vectors.cosine(left, right) if len(left) else np.zeros(0, np.float32)
