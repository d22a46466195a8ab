"""Texts as sets of word shingles, their MinHash signatures banded for LSH, and the true Jaccard that verifies a
candidate: the one implementation ``dedup`` and ``decontaminate`` share.

Normalization (``normalized``): contractions joined (``does n't`` as ``doesn't``, apostrophes dropped), NFKC, lower
case, every run of characters that are not letters, digits or marks folded into one space, trimmed, so ``A man .``
and ``a man.`` are both ``a man``. A text's shingles are the hashes
of its runs of k consecutive words (``shingles``; a text of fewer than k words is one shingle, whole; an empty text
has none): S_k(x). Two texts' similarity is their Jaccard index (Broder 1997)

    J(x, y) = |S_k(x) ∩ S_k(y)| / |S_k(x) ∪ S_k(y)|.

MinHash: with P hash functions h_1…h_P (splitmix64 of the shingle's hash xor a seed), m_i(x) = min_{s ∈ S(x)} h_i(s)
and Pr[m_i(x) = m_i(y)] = J(x, y). LSH banding: the P values are cut into b bands of r rows (b·r ≤ P); two texts are
candidates when all r values of one band agree, Pr = 1 − (1 − J^r)^b (Leskovec et al., Mining of Massive Datasets
§3.4.2); ``bands_for`` picks the largest r whose curve reaches ``RECALL_AT_THRESHOLD`` at the Jaccard threshold, so a
pair at the threshold is missed with probability under 1% and fewer dissimilar pairs are candidates. A row of
several texts (a premise and a hypothesis) is signed over the union of its fields' shingles, each field's hashed
apart, so m_i(row) = min over its fields; since Σa/Σb ≥ min(a/b), a pair whose every field reaches J ≥ t reaches
it on the union too and is a candidate as likely. Each candidate is then verified by its true Jaccard, field by
field (``jaccard``). Only a band key per row and band is kept (uint32), never the whole signature; ``dedup`` keeps
each shingle as the top 32 bits of its hash (``Shingles.narrowed``: two texts of s shingles each misread one as
shared with probability about s²/2³²).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RECALL_AT_THRESHOLD = 0.99   # Pr[candidate] that ``bands_for`` asks of a pair whose Jaccard is the threshold
BUCKET_PAIRS = 32            # a band's bucket up to this many rows gives all its pairs; a larger one each row with its first
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_SPACE = 32


def normalized(texts) -> pa.Array:
    """Each text normalized: NFKC, lower case, runs of characters that are not letters, digits or marks as one
    space, trimmed (a null is the empty text). Texts all ASCII (where NFKC changes nothing and the letters and digits
    are a–z, A–Z, 0–9) are folded byte by byte (``_fold_ascii``), a tenth of the regular expression's time."""
    texts = pc.fill_null(texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts, "")
    texts = _contractions_joined(texts.cast(pa.large_string()))
    if pc.all(pc.string_is_ascii(texts)).as_py() is not False:
        data, offsets = _utf8(texts)
        out, starts = _fold_ascii(data, offsets)
        return pa.Array.from_buffers(pa.large_string(), len(texts), [None, pa.py_buffer(starts), pa.py_buffer(out)])
    folded = pc.utf8_lower(pc.utf8_normalize(texts, "NFKC"))
    return pc.utf8_trim_whitespace(pc.replace_substring_regex(folded, r"[^\p{L}\p{N}\p{M}]+", " "))


_SPLIT_CONTRACTION = r"(?i)\s+(n['’]t|['’](?:s|re|ve|ll|d|m))\b"   # Penn Treebank's does n't, it 's


def _contractions_joined(texts: pa.Array) -> pa.Array:
    """Contractions as one word whatever the release's tokenizer did: ``does n't`` and ``doesn't`` are both
    ``doesnt``, ``it 's`` and ``it's`` ``its``, ``cannot`` is ``can not`` (apostrophes dropped, not spaced). Only
    the texts that hold an apostrophe or ``cannot`` pass the regular expressions."""
    has = pc.match_substring_regex(texts, r"['’]|(?i)cannot")
    if not pc.any(has).as_py():
        return texts
    joined = pc.replace_substring_regex(texts, _SPLIT_CONTRACTION, r"\1")
    joined = pc.replace_substring_regex(joined, r"(?i)\bcannot\b", "can not")
    return pc.if_else(has, pc.replace_substring_regex(joined, r"['’]", ""), texts)


@numba.njit(nogil=True, cache=True)
def _fold_ascii(data, offsets):
    """``normalized`` of ASCII texts: letters lowered, digits kept, every run of other bytes one space between
    words, none at either end (bytes, int64 offsets)."""
    out = np.empty(len(data), np.uint8)
    starts = np.zeros(len(offsets), np.int64)
    at = 0
    for i in range(len(offsets) - 1):
        gap, begun = False, False
        for p in range(offsets[i], offsets[i + 1]):
            c = data[p]
            if 65 <= c <= 90:
                c += 32
            if 97 <= c <= 122 or 48 <= c <= 57:
                if gap and begun:
                    out[at] = _SPACE
                    at += 1
                out[at] = c
                at += 1
                begun, gap = True, False
            else:
                gap = True
        starts[i + 1] = at
    return out[:at], starts


def _utf8(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets) of a string array's values, offsets as int64 from its first value."""
    arr = texts.cast(pa.large_string()) if texts.type != pa.large_string() else texts
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], np.int64, len(arr) + 1, arr.offset * 8)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offsets


@numba.njit(nogil=True, cache=True, inline="always")
def _mix(x):
    """splitmix64's finalizer: a bijection of uint64 whose output bits each depend on every input bit."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(nogil=True, cache=True)
def _shingle_kernel(data, offsets, k, salt):
    """Per text (space-separated words): the sorted distinct hashes of its k-word shingles (CSR: starts, values)."""
    n = len(offsets) - 1
    total = 0
    for i in range(n):
        if offsets[i + 1] > offsets[i]:
            total += 1
            for p in range(offsets[i], offsets[i + 1]):
                if data[p] == _SPACE:
                    total += 1
    values = np.empty(total, np.uint64)
    starts = np.zeros(n + 1, np.int64)
    words = np.empty(max(total, 1), np.uint64)
    at = 0
    for i in range(n):
        count = 0
        h = _FNV_OFFSET
        for p in range(offsets[i], offsets[i + 1]):
            if data[p] == _SPACE:
                words[count] = h
                count += 1
                h = _FNV_OFFSET
            else:
                h = (h ^ np.uint64(data[p])) * _FNV_PRIME
        if offsets[i + 1] > offsets[i]:
            words[count] = h
            count += 1
        first = at
        span = min(k, count)
        for w in range(count - span + 1 if count else 0):
            s = salt ^ np.uint64(span)
            for j in range(w, w + span):
                s = _mix(s ^ words[j])
            values[at] = s
            at += 1
        if at > first:
            values[first:at] = np.sort(values[first:at])
            keep = first + 1
            for p in range(first + 1, at):
                if values[p] != values[keep - 1]:
                    values[keep] = values[p]
                    keep += 1
            at = keep
        starts[i + 1] = at
    return starts, values[:at].copy()


@dataclass(frozen=True)
class Shingles:
    """Each text's sorted distinct shingle hashes, CSR: text i's are ``values[starts[i]:starts[i + 1]]``."""

    starts: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.starts) - 1

    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)

    def narrowed(self) -> Shingles:
        """The same sets with each hash's top 32 bits (half the memory; the order within a text stays sorted)."""
        return Shingles(self.starts, (self.values >> np.uint64(32)).astype(np.uint32))

    def take(self, rows: np.ndarray) -> Shingles:
        """The sets of ``rows`` (their numbers here), in that order."""
        return Shingles(*_take_kernel(self.starts, self.values, np.asarray(rows, np.int64)))


@numba.njit(nogil=True, cache=True)
def _take_kernel(starts, values, rows):
    taken = np.zeros(len(rows) + 1, np.int64)
    for i in range(len(rows)):
        taken[i + 1] = taken[i] + starts[rows[i] + 1] - starts[rows[i]]
    out = np.empty(taken[-1], values.dtype)
    for i in range(len(rows)):
        out[taken[i]:taken[i + 1]] = values[starts[rows[i]]:starts[rows[i] + 1]]
    return taken, out


def shingles(normal: pa.Array, k: int, field: int = 0) -> Shingles:
    """S_k of each normalized text (``normalized``): hashes of its k-word runs, or of the whole text when it has fewer
    than k words; ``field`` salts the hashes, so a row's fields sign apart."""
    data, offsets = _utf8(normal)
    starts, values = _shingle_kernel(data, offsets, k, _mix(np.uint64(field + 1)))
    return Shingles(starts, values)


@numba.njit(nogil=True, cache=True)
def _text_hashes(data, offsets, seed):
    out = np.empty(len(offsets) - 1, np.uint64)
    for i in range(len(offsets) - 1):
        h = _FNV_OFFSET ^ seed
        for p in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[p])) * _FNV_PRIME
        out[i] = _mix(h ^ np.uint64(offsets[i + 1] - offsets[i]))
    return out


def row_keys(fields: list) -> np.ndarray:
    """A 64-bit key per row of the texts ``fields`` (string arrays of one length): rows with equal texts in every
    field have equal keys (unequal ones collide with probability about 2⁻⁶⁴ per pair)."""
    key = np.zeros(len(fields[0]), np.uint64)
    for f, texts in enumerate(fields):
        with np.errstate(over="ignore"):
            key = key * np.uint64(0x100000001B3) + _text_hashes(*_utf8(texts.combine_chunks() if isinstance(
                texts, pa.ChunkedArray) else texts), np.uint64(f + 1))
    return key


def bands_for(threshold: float, permutations: int) -> tuple[int, int]:
    """(b bands, r rows each) of ``permutations`` MinHash values: the largest r with 1 − (1 − t^r)^b ≥
    ``RECALL_AT_THRESHOLD`` at t = ``threshold``, b = ⌊P / r⌋."""
    best = (permutations, 1)
    for r in range(1, permutations + 1):
        b = permutations // r
        if 1 - (1 - threshold ** r) ** b >= RECALL_AT_THRESHOLD:
            best = (b, r)
    return best


@numba.njit(nogil=True, cache=True)
def _band_kernel(starts_list, values_list, seeds, first, bands, rows_per_band, rows):
    """Bands ``first`` … ``first + bands − 1`` of each of ``rows`` (``seeds``: their hash functions only)."""
    perms = len(seeds)
    out = np.zeros((len(rows), bands), np.uint32)
    sig = np.empty(perms, np.uint64)
    for at in range(len(rows)):
        i = rows[at]
        sig[:] = np.uint64(0xFFFFFFFFFFFFFFFF)
        for f in range(len(starts_list)):
            starts, values = starts_list[f], values_list[f]
            for p in range(starts[i], starts[i + 1]):
                v = np.uint64(values[p])
                for j in range(perms):
                    h = _mix(v ^ seeds[j])
                    sig[j] = min(sig[j], h)
        for band in range(bands):
            h = np.uint64(first + band + 1)
            for j in range(band * rows_per_band, (band + 1) * rows_per_band):
                h = _mix(h ^ sig[j])
            out[at, band] = np.uint32(h >> np.uint64(32))
    return out


def band_keys(fields: list, permutations: int, bands: int, rows_per_band: int, seed: int = 0,
              among: range | None = None, rows: np.ndarray | None = None) -> np.ndarray:
    """Each row's LSH band keys (rows × bands, uint32: the top bits of a hash of the band's values) of the MinHash
    signature of its fields' shingles' union; ``among``: those bands only (rows × len(among)), the same keys, so the
    bands can be made a few at a time; ``rows``: those rows only (their numbers), in their order. Two rows whose band
    differs share its key with probability 2⁻³²: among n rows about n²/2³³ such pairs per band, which the true
    Jaccard then rejects."""
    among = range(bands) if among is None else among
    rows = np.arange(len(fields[0]), dtype=np.int64) if rows is None else rows.astype(np.int64, copy=False)
    seeds = np.random.default_rng(seed).integers(0, 2**63, permutations, dtype=np.int64).astype(np.uint64)
    return _band_kernel(numba.typed.List([f.starts for f in fields]), numba.typed.List([f.values for f in fields]),
                        seeds[among.start * rows_per_band:among.stop * rows_per_band], among.start, len(among),
                        rows_per_band, rows)


def joined(parts: list, dtype) -> np.ndarray:
    """``parts`` (a list of arrays, emptied) one after the other, each freed once copied: the memory of the result
    and one part, not of two copies."""
    out, at = np.empty(sum(map(len, parts)), dtype), 0
    parts.reverse()
    while parts:
        part = parts.pop()
        out[at:at + len(part)] = part
        at += len(part)
    return out


@numba.njit(nogil=True, cache=True)
def _bucket_pairs(order, keys, rows, cap, n):
    """The codes a·n + b (a < b, row numbers ``rows``) of the pairs of rows sharing a key: ``order`` sorts ``keys``;
    each bucket gives all its pairs up to ``cap`` rows, else each row with the bucket's first. Two passes: the
    count, then the codes."""
    total = 0
    for fill in range(2):
        out = np.empty(total, np.int64)
        at, i = 0, 0
        while i < len(order):
            j = i + 1
            while j < len(order) and keys[order[j]] == keys[order[i]]:
                j += 1
            size = j - i
            if size > 1 and fill == 0:
                total += size * (size - 1) // 2 if size <= cap else size - 1
            elif size > 1:
                for a in range(i, j if size <= cap else i + 1):
                    for b in range(a + 1, j):
                        x, y = rows[order[a]], rows[order[b]]
                        out[at] = min(x, y) * n + max(x, y)
                        at += 1
            i = j
    return out


def distinct(codes: np.ndarray) -> np.ndarray:
    """The distinct values of ``codes``, sorted in place first (np.unique takes ten times as long on NumPy 2.3)."""
    codes.sort()
    return codes[np.concatenate([codes[:1] == codes[:1], codes[1:] != codes[:-1]])]


def candidate_codes(keys: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """The distinct pairs a < b of ``rows`` sharing a band key (a column of ``keys``, one row of keys for each of
    ``rows``, in their order), each as the code a·n + b (n: the rows in all; sorted, int64)."""
    rows, n = rows.astype(np.int64, copy=False), np.int64(max(n, 1))
    return distinct(joined([_bucket_pairs(np.argsort(column, kind="stable"), column, rows, BUCKET_PAIRS, n)
                            for column in (keys[:, band] for band in range(keys.shape[1]))], np.int64))


def cross_pairs(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The distinct pairs (row of ``keys``, row of ``queries``) that share a band key: rows of one collection that
    are candidates for rows of another (k × 2, int64)."""
    found = []
    for band in range(keys.shape[1]):
        indexed = np.unique(queries[:, band], return_index=True)
        at = np.searchsorted(indexed[0], keys[:, band])
        at = np.minimum(at, len(indexed[0]) - 1)
        hit = np.flatnonzero(indexed[0][at] == keys[:, band]) if len(indexed[0]) else np.zeros(0, np.int64)
        found.append(np.stack([hit, indexed[1][at[hit]]], axis=1))
    pairs = np.concatenate(found) if found else np.zeros((0, 2), np.int64)
    return np.unique(pairs, axis=0) if len(pairs) else pairs


@numba.njit(nogil=True, cache=True)
def _jaccard_kernel(starts_a, values_a, starts_b, values_b, left, right):
    out = np.empty(len(left), np.float64)
    for p in range(len(left)):
        i, j = starts_a[left[p]], starts_b[right[p]]
        ie, je = starts_a[left[p] + 1], starts_b[right[p] + 1]
        size = (ie - i) + (je - j)
        common = 0
        while i < ie and j < je:
            if values_a[i] == values_b[j]:
                common += 1
                i += 1
                j += 1
            elif values_a[i] < values_b[j]:
                i += 1
            else:
                j += 1
        union = size - common
        out[p] = common / union if union else 1.0
    return out


def jaccard(a: Shingles, b: Shingles, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """J(a[left[p]], b[right[p]]) for each p, exactly (two empty texts: 1)."""
    return _jaccard_kernel(a.starts, a.values, b.starts, b.values, left.astype(np.int64), right.astype(np.int64))


def min_jaccard(fields_a: list, fields_b: list, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Per pair, the least Jaccard over the rows' fields: a pair of rows is as similar as its least similar texts."""
    out = np.ones(len(left))
    for a, b in zip(fields_a, fields_b):
        out = np.minimum(out, jaccard(a, b, left, right))
    return out
