"""The duplicate graph of a corpus, its clusters, their labels and each row's fate.

Edges: rows whose normalized texts are equal in every field (``minhash.normalized``: exact duplicates among them),
and near-duplicates: pairs of distinct normalized rows that MinHash-LSH makes candidates and whose true Jaccard
reaches the threshold t in every field, min_f J(S_k(x_f), S_k(y_f)) ≥ t (``minhash``; a premise shared by two
hypotheses is not enough); or, with ``similarity: cosine``, pairs whose sentence embeddings' cosine reaches the
cosine threshold in every field (``embedded``). Clusters are the graph's connected components. Each cluster keeps
one row, its representative: its first row in input order, or its first of ``prefer_split`` where it has one; every
other row is a duplicate of the representative, named with its kind (exact: equal texts; normalized: equal once
normalized; near: the least Jaccard (or cosine) of its fields against the representative's, which in a chain of
near-duplicates may fall under t). A cluster whose rows carry more than one label is a label conflict: it keeps one
row of each of its labels (its minimal pairs; a later row of a label it keeps duplicates that row), drops all its
rows, or is reduced to one as any cluster (``DedupConfig.conflicts``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import minhash
from refinery.messages import Refusal, Setting
from refinery.methods.dedup.config import DedupConfig

KINDS = ("", "exact duplicate", "normalized duplicate", "near-duplicate", "label conflict")
NONE, EXACT, NORMALIZED, NEAR, CONFLICT = range(len(KINDS))


FIELDS = ("text_a", "text_b")


@dataclass
class Rows:
    """What dedup keeps of each input row, in input order (``signed_rows``): its label and split (codes into
    their names; −1: none), the keys of its texts as read and normalized (``minhash.row_keys``), and each field's
    shingles (``minhash.Shingles.narrowed``) on disk (``SpilledShingles``); not its texts, nor its id (read again
    for the duplicates' partners)."""

    labels: np.ndarray
    label_names: list
    splits: np.ndarray | None
    split_names: list
    exact: np.ndarray
    normal: np.ndarray
    shingles: SpilledShingles

    def __len__(self) -> int:
        return len(self.labels)


class _Codes:
    """Codes of a string column read batch by batch: each distinct value its number in order of first sight."""

    def __init__(self):
        self.names: list = []
        self._code: dict = {}

    def __call__(self, column) -> np.ndarray:
        encoded = pc.dictionary_encode(pc.cast(column.combine_chunks() if isinstance(column, pa.ChunkedArray)
                                               else column, pa.string()))
        mine = np.array([self._code.setdefault(v, len(self._code)) for v in encoded.dictionary.to_pylist()] + [-1],
                        np.int64)
        self.names[:] = list(self._code)
        return mine[pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)].astype(np.int32)


def _signed(batch: pa.Table, shingle_size: int) -> tuple:
    """(its rows' keys as read, normalized, and each field's shingles) of one batch."""
    fields = [batch[c].combine_chunks() if c in batch.column_names else pa.nulls(batch.num_rows, pa.string())
              for c in FIELDS]
    folded = [minhash.normalized(f) for f in fields]
    return (minhash.row_keys(fields), minhash.row_keys(folded),
            *(minhash.shingles(texts, shingle_size, f).narrowed() for f, texts in enumerate(folded)))


def signed_rows(batches, shingle_size: int) -> Rows:
    """``Rows`` of the input's ``batches`` (tables of id, text_a, text_b where paired, label, split where named),
    read one at a time: only keys and codes are held (about 24 bytes a row), each batch's shingles wait on disk
    (``SpilledShingles``), and so do the keys and codes until the last batch is signed, then each is read into one
    array: the memory of the rows' arrays, not of them and of their parts too (parts joined in memory stay in the
    heap once freed)."""
    from refinery.io.spill import SpilledSlices

    spill = SpilledSlices(["labels", "splits", "exact", "normal"], prefix="dedup-")
    shingles = SpilledShingles(len(FIELDS))
    label_codes, split_codes = _Codes(), _Codes()
    named = False
    try:
        for batch in batches:
            exact, normal, *fields = _signed(batch, shingle_size)
            spill.append("exact", exact)
            spill.append("normal", normal)
            shingles.append(fields)
            del fields
            pa.default_memory_pool().release_unused()   # the batch's texts: Arrow's allocator keeps what it frees
            spill.append("labels", label_codes(batch["label"]))
            named = named or "split" in batch.column_names
            spill.append("splits", split_codes(batch["split"] if "split" in batch.column_names
                                               else pa.nulls(batch.num_rows, pa.string())))
        return Rows(spill.joined("labels", np.int32), label_codes.names,
                    spill.joined("splits", np.int32) if named else None, split_codes.names,
                    spill.joined("exact", np.uint64), spill.joined("normal", np.uint64), shingles)
    except BaseException:
        shingles.close()
        raise
    finally:
        spill.close()


class SpilledShingles:
    """Each field's shingles (``minhash.Shingles``) of every row, on disk as ``signed_rows`` made them, a batch of
    rows at a time (its sizes and values per field; ``io.spill.SpilledSlices``), read back a batch at a time
    (``batches``: LSH's band keys) or for the rows asked (``gather``: the true Jaccard of candidate pairs), so what
    dedup holds of the rows does not grow with their shingles (about 80 bytes a row on paired corpora). The files
    go with this object (``close``, or when it is collected)."""

    def __init__(self, fields: int):
        from refinery.io.spill import SpilledSlices

        self.fields = fields
        self._spill = SpilledSlices([*(f"sizes{f}" for f in range(fields)), *(f"values{f}" for f in range(fields))],
                                    prefix="dedup-shingles-")
        self._firsts = [0]   # the first row of each batch, then the rows in all

    def append(self, fields: list) -> None:
        """One batch's shingles, a ``minhash.Shingles`` per field (its rows follow the rows appended before)."""
        for f, made in enumerate(fields):
            self._spill.append(f"sizes{f}", made.sizes().astype(np.uint32))
            self._spill.append(f"values{f}", made.values)
        self._firsts.append(self._firsts[-1] + len(fields[0]))

    def __len__(self) -> int:
        return self._firsts[-1]

    def batch(self, k: int) -> list:
        """Batch ``k``'s shingles, a ``minhash.Shingles`` per field (its rows numbered from 0)."""
        return [self._field(k, f) for f in range(self.fields)]

    def _field(self, k: int, field: int) -> minhash.Shingles:
        """Batch ``k``'s shingles of one field."""
        return minhash.Shingles(_starts(self._spill.read(f"sizes{field}", k)), self._spill.read(f"values{field}", k))

    def batches(self):
        """(its first row's number, its ``batch``) for each batch in order."""
        for k in range(len(self._firsts) - 1):
            yield self._firsts[k], self.batch(k)

    def nonempty(self) -> np.ndarray:
        """Whether each row has a shingle in some field (an empty row has no signature)."""
        out = np.zeros(len(self), bool)
        for k in range(len(self._firsts) - 1):
            for f in range(self.fields):
                out[self._firsts[k]:self._firsts[k + 1]] |= self._spill.read(f"sizes{f}", k) > 0
        return out

    def gather(self, rows: np.ndarray) -> list:
        """The shingles of ``rows`` (sorted, distinct row numbers), a ``minhash.Shingles`` per field whose row i is
        ``rows[i]``: made in place (their sizes read first), the batches holding them read one at a time, the rest
        skipped."""
        bounds = np.searchsorted(rows, self._firsts)
        batches = np.flatnonzero(np.diff(bounds))
        picked = {k: rows[bounds[k]:bounds[k + 1]] - self._firsts[k] for k in batches}   # within each batch
        fields = []
        for f in range(self.fields):
            sizes = np.zeros(len(rows), np.int64)
            for k in batches:
                sizes[bounds[k]:bounds[k + 1]] = self._spill.read(f"sizes{f}", k)[picked[k]]
            starts = _starts(sizes)
            del sizes
            values = np.empty(starts[-1], np.uint32)
            for k in batches:
                taken = self._field(k, f).take(picked[k])
                values[starts[bounds[k]]:starts[bounds[k + 1]]] = taken.values
            fields.append(minhash.Shingles(starts, values))
        return fields

    def min_jaccard(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """``minhash.min_jaccard`` of the pairs of rows (``left[p]``, ``right[p]``), their shingles gathered once."""
        marked = np.zeros(len(self), bool)
        marked[left] = True
        marked[right] = True
        fields = self.gather(np.flatnonzero(marked))
        place = np.cumsum(marked, dtype=np.int32) - 1   # each row's place among the gathered (no sort)
        return minhash.min_jaccard(fields, fields, place[left], place[right])

    def close(self) -> None:
        self._spill.close()


def _starts(sizes: np.ndarray) -> np.ndarray:
    """The CSR starts of rows of ``sizes`` (0, then their running sums; int64)."""
    starts = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, dtype=np.int64, out=starts[1:])
    return starts


@dataclass
class Duplicates:
    """The place in the duplicate graph of each row in a cluster (``rows``, their numbers in the input, in input
    order; a row in no cluster is kept and named nowhere): its cluster, the row it duplicates (its cluster's
    representative, by its number in the input; −1 for a representative), the kind (``KINDS``), its similarity to
    that row, whether it is dropped, and whether its cluster's labels conflict."""

    rows: np.ndarray
    cluster: np.ndarray
    partner: np.ndarray
    kind: np.ndarray
    similarity: np.ndarray
    dropped: np.ndarray
    conflict: np.ndarray
    candidates: int = 0    # candidate pairs LSH proposed and verified (once per group of bands proposing it)
    near_pairs: int = 0    # of them, verified near-duplicates

    @property
    def duplicate(self) -> np.ndarray:
        """Which of ``rows`` duplicate another (their cluster's representative)."""
        return self.partner >= 0


def edges_of_equal(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, the first row of equal key for each, the first row of each distinct key, sorted) for rows of equal
    ``keys``: one stable sort, and no array of the rows' size beyond it but a mask."""
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    new = np.empty(len(keys), bool)
    new[:1] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    del ranked
    heads, later = np.flatnonzero(new), np.flatnonzero(~new)
    del new
    first = order[heads]
    to = first[np.searchsorted(heads, later, side="right") - 1]
    return order[later], to, np.sort(first)


VERIFY_PAIRS = 1 << 21   # candidate pairs verified at once
BANDS_AT_ONCE = 3        # LSH bands whose keys are held at once (fewer where the memory budget is tight)
BAND_BYTES_PER_ROW = 28  # what one band held at once takes per signed row: its key (4), the sort (8), the column
#                          (4) and its candidate codes, joined and sorted (about 12 on planted and real corpora)


class OverBudget(Refusal):
    """The input's signatures and one band do not fit in the memory budget."""

    code = "over-budget"


def rows_nbytes(rows: "Rows") -> int:
    """The memory of what dedup holds of the input's rows (``Rows``; their shingles wait on disk)."""
    arrays = [rows.labels, rows.exact, rows.normal] + ([rows.splits] if rows.splits is not None else [])
    return sum(a.nbytes for a in arrays)


def bands_at_once(held: int, signed: int, budget: int) -> int:
    """How many LSH bands to hold at once: ``BANDS_AT_ONCE``, fewer where ``held`` bytes (the rows' signatures)
    and ``signed`` rows' bands would pass ``budget``; ``OverBudget`` where not even one band fits."""
    fits = (budget - held) // max(BAND_BYTES_PER_ROW * signed, 1)
    if fits < 1:
        need = held + BAND_BYTES_PER_ROW * signed
        raise OverBudget(f"dedup holds {_size(held)} of the input's signatures and needs {_size(need)} with one "
                         f"LSH band: the memory budget of {_size(budget)} is too small for this input; give ",
                         Setting("memory_budget", f"{-(-need // 2**20)}M"), " or more, or dedup the splits apart")
    return int(min(BANDS_AT_ONCE, fits))


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def near_edges(shingles: SpilledShingles, rows: np.ndarray, config: DedupConfig, checkpoints=None,
               at_once: int = BANDS_AT_ONCE) -> tuple[np.ndarray, int]:
    """The verified near-duplicate pairs (k × 2) among ``rows`` (sorted row numbers; their fields' ``shingles``), and
    how many candidates were verified: ``at_once`` bands at a time, their keys made a batch of shingles at a time,
    their candidates (``minhash.candidate_codes``) verified ``VERIFY_PAIRS`` at a time and only the verified kept, so
    what is held is one group's keys and candidates (a pair that two groups propose is verified twice). Each group's
    verified pairs are a piece of ``checkpoints`` (an ``io.checkpoints.Checkpoints``, or None), so a rerun after a
    kill finds them again."""
    bands, r = minhash.bands_for(config.threshold, config.permutations)
    n = len(shingles)
    signed = rows[shingles.nonempty()[rows]]   # an empty row has no signature
    found, verified = [np.zeros(0, np.int64)], 0
    for b in range(0, bands, at_once):
        among = range(b, min(b + at_once, bands))
        piece = f"bands-{b:04d}-{among.stop:04d}"
        done = checkpoints.get(piece) if checkpoints is not None else None
        if done is not None:
            found.append(done["pair"].to_numpy())
            verified += int(done.schema.metadata[b"verified"])
            continue
        keys = np.empty((len(signed), len(among)), np.uint32)
        for first, fields in shingles.batches():
            lo, hi = np.searchsorted(signed, [first, first + len(fields[0])])
            if hi > lo:
                keys[lo:hi] = minhash.band_keys(fields, config.permutations, bands, r, config.seed, among,
                                                signed[lo:hi] - first)
        codes = minhash.candidate_codes(keys, signed, n)
        del keys
        group = []
        for start in range(0, len(codes), VERIFY_PAIRS):
            part = codes[start:start + VERIFY_PAIRS]
            group.append(part[shingles.min_jaccard(part // n, part % n) >= config.threshold])
        group = np.concatenate(group) if group else np.zeros(0, np.int64)
        if checkpoints is not None:
            checkpoints.put(piece, pa.table({"pair": group}, metadata={"verified": str(len(codes))}))
        verified += len(codes)
        found.append(group)
    near = minhash.distinct(np.concatenate(found))
    return np.stack([near // n, near % n], axis=1), verified


class JaccardMeasure:
    """Near-duplicates by the Jaccard of the rows' shingles (MinHash-LSH, ``near_edges``): ``edges(rows)`` and
    ``between(left, right)``, as ``embedded.CosineMeasure`` gives them by cosine."""

    def __init__(self, shingles: SpilledShingles, config: DedupConfig, checkpoints=None,
                 at_once: int = BANDS_AT_ONCE):
        self.shingles, self.config, self.threshold = shingles, config, config.threshold
        self.checkpoints, self.at_once = checkpoints, at_once

    def edges(self, rows: np.ndarray) -> tuple[np.ndarray, int]:
        return near_edges(self.shingles, rows, self.config, self.checkpoints, self.at_once)

    def between(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return self.shingles.min_jaccard(left, right)


def _one_row_per_label(conflict: np.ndarray, component: np.ndarray, codes: np.ndarray, order: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(rows, the row each duplicates) of the label-conflict clusters' rows that are not their cluster's first row of
    their label (by ``order``): a conflict cluster kept whole keeps its minimal pairs, one row of each label, not
    the same-label copies among them."""
    n = len(order)
    idx = np.flatnonzero(conflict)
    _, group = np.unique(component[idx] * (int(codes.max(initial=0)) + 2) + codes[idx] + 1, return_inverse=True)
    first = np.full(group.max(initial=-1) + 1, 2 * n, np.int64)
    np.minimum.at(first, group, order[idx])
    label_first = first[group] % n
    later = label_first != idx
    return idx[later], label_first[later]


def _kinds(rows: np.ndarray, partners: np.ndarray, exact_key: np.ndarray, normal_key: np.ndarray):
    """(rows, kind) pairs: which of ``rows`` are exact, normalized or near duplicates of their ``partners``."""
    exact = exact_key[rows] == exact_key[partners]
    normal = ~exact & (normal_key[rows] == normal_key[partners])
    return (rows[exact], EXACT), (rows[normal], NORMALIZED), (rows[~exact & ~normal], NEAR)


def find_duplicates(rows: Rows, config: DedupConfig, measure=None) -> Duplicates:
    """The place in the duplicate graph of every row of ``rows`` in a cluster (see the module's docstring), its
    near-duplicates by ``measure`` (default: ``JaccardMeasure``; ``embedded.CosineMeasure`` under ``similarity:
    cosine``). The graph is built over the rows its edges join only, so beyond the input's keys what is held
    follows the duplicates, not the rows."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    measure = measure or JaccardMeasure(rows.shingles, config)
    a, b, distinct = edges_of_equal(rows.normal)
    candidates, near = 0, np.zeros((0, 2), np.int64)
    if measure.threshold < 1 and len(distinct) > 1:
        near, candidates = measure.edges(distinct)
    del distinct
    left, right = np.concatenate([a, near[:, 0]]), np.concatenate([b, near[:, 1]])
    nodes = np.unique(np.concatenate([left, right]))   # every row in a cluster, in input order
    k = len(nodes)
    graph = coo_matrix((np.ones(len(left), np.int8), (np.searchsorted(nodes, left), np.searchsorted(nodes, right))),
                       shape=(k, k))
    _, component = connected_components(graph, directed=False)
    size = np.bincount(component)
    # the representative: the least priority in its component (rows of prefer_split first, then input order)
    order = np.arange(k, dtype=np.int64)
    if config.prefer_split is not None and rows.splits is not None:
        preferred = rows.splits[nodes] == (rows.split_names.index(config.prefer_split)
                                           if config.prefer_split in rows.split_names else -2)
        order = order + np.where(preferred, 0, k)
    best = np.full(len(size), 2 * k, np.int64)
    np.minimum.at(best, component, order)
    rep = best[component] % k
    codes = rows.labels[nodes].astype(np.int64)
    low, high = np.full(len(size), np.iinfo(np.int64).max), np.full(len(size), -1)
    np.minimum.at(low, component, codes)
    np.maximum.at(high, component, codes)
    conflict = low[component] != high[component]
    dup = rep != np.arange(k)
    partner = np.where(dup, rep, -1)
    kind = np.zeros(k, np.int8)
    exact_key, normal_key = rows.exact[nodes], rows.normal[nodes]
    duplicates = np.flatnonzero(dup)
    for rows_of_kind, named in _kinds(duplicates, rep[duplicates], exact_key, normal_key):
        kind[rows_of_kind] = named
    similarity = np.zeros(k, np.float32)
    similarity[dup] = 1.0
    at = np.flatnonzero(kind == NEAR)
    similarity[at] = measure.between(nodes[at], nodes[rep[at]])
    dropped = dup.copy()
    if config.conflicts == "keep":
        dropped &= ~conflict
        same = _one_row_per_label(conflict, component, codes, order)
        for rows_of_kind, named in _kinds(same[0], same[1], exact_key, normal_key):
            kind[rows_of_kind] = named
        partner[same[0]], dropped[same[0]] = same[1], True
        near_ones = same[0][kind[same[0]] == NEAR]
        similarity[same[0]] = 1.0
        similarity[near_ones] = measure.between(nodes[near_ones], nodes[partner[near_ones]])
    elif config.conflicts == "drop":
        dropped |= conflict
        reps = np.flatnonzero(conflict & ~dup)   # a representative dropped: named with its cluster's next row
        first_dup = np.full(len(size), -1, np.int64)
        dups = np.flatnonzero(dup & conflict)[::-1]
        first_dup[component[dups]] = dups
        partner[reps] = first_dup[component[reps]]
        kind[conflict] = CONFLICT
        similarity[reps] = measure.between(nodes[reps], nodes[partner[reps]])
    return Duplicates(nodes, component, np.where(partner >= 0, nodes[np.maximum(partner, 0)], -1), kind, similarity,
                      dropped, conflict, candidates, len(near))
