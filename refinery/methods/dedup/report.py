"""dedup's report: the clusters by kind, duplicates per split pair, the label-conflict table, example pairs side by
side and the share of each label removed (``summarize``, a ``DedupSummary``), as report.json entries and page
sections (``details``)."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from refinery.methods.dedup.clusters import CONFLICT, KINDS, NEAR, Duplicates, Rows
from refinery.messages import Message, NamedSplits
from refinery.methods.dedup.config import DedupConfig

EXAMPLES = 12   # pairs shown side by side


@dataclass
class DedupSummary:
    clusters: int               # clusters of two rows or more
    rows_in_clusters: int
    duplicates: dict            # rows that duplicate their cluster's representative, by kind
    conflict_clusters: int
    conflict_rows: int
    conflicts: list             # per label combination: clusters, rows
    split_pairs: list           # per (kept row's split, duplicate's split): duplicates, removed
    removed_by_label: list      # per label: rows, removed, share removed
    examples: list              # duplicate pairs side by side
    candidates: int
    near_pairs: int
    bands: int
    rows_per_band: int
    search: str = "minhash"      # how near-duplicates were found: minhash, or by cosine: exact, lsh (SimHash)
    embedded: dict = field(default_factory=dict)   # under cosine: the distinct texts, cached and embedded


def example_rows(found: Duplicates) -> list:
    """The duplicates shown side by side with their partners (their places in ``found``): near-duplicates and label
    conflicts first."""
    dup = np.flatnonzero(found.duplicate)
    first = np.lexsort((dup, ~found.conflict[dup], ~np.isin(found.kind[dup], (NEAR, CONFLICT))))
    return dup[first[:EXAMPLES]].tolist()


def summarize(rows: Rows, found: Duplicates, config: DedupConfig, texts: dict, measure=None) -> DedupSummary:
    """The report's figures; ``texts``: row number → its id and texts by field, for the ``example_rows`` and their
    partners; ``measure``: the ``embedded.CosineMeasure`` that found the near-duplicates under ``similarity:
    cosine``."""
    from refinery.core.minhash import bands_for

    names = np.array([*rows.label_names, None], dtype=object)   # code −1: no label
    labels = names[rows.labels[found.rows]]                     # the clustered rows' labels
    dup = np.flatnonzero(found.duplicate)
    combos: dict = {}   # label combination → [clusters, rows]
    conflicted = np.flatnonzero(found.conflict)
    conflicted = conflicted[np.argsort(found.cluster[conflicted], kind="stable")]
    for members in np.split(conflicted, np.flatnonzero(np.diff(found.cluster[conflicted])) + 1) \
            if len(conflicted) else ():
        tally = combos.setdefault(" / ".join(sorted(set(map(str, labels[members])))), [0, 0])
        tally[0] += 1
        tally[1] += len(members)
    pairs = Counter()
    removed_pairs = Counter()
    if rows.splits is not None:
        splits = np.array([*rows.split_names, None], dtype=object)
        for i in dup:
            key = (splits[rows.splits[found.partner[i]]], splits[rows.splits[found.rows[i]]])
            pairs[key] += 1
            removed_pairs[key] += bool(found.dropped[i])
    per_label = []
    every = np.bincount(rows.labels + 1, minlength=len(names))   # code −1 (no label) first
    removed = np.bincount(rows.labels[found.rows[found.dropped]] + 1, minlength=len(names))
    for code in sorted((c - 1 for c in np.flatnonzero(every).tolist()), key=lambda c: str(names[c])):
        per_label.append({"label": str(names[code]), "rows": int(every[code + 1]), "removed": int(removed[code + 1]),
                          "share removed": int(removed[code + 1]) / max(int(every[code + 1]), 1)})
    examples = []
    for i in example_rows(found):
        row, j = int(found.rows[i]), int(found.partner[i])
        pair = {"kind": KINDS[found.kind[i]], "similarity": round(float(found.similarity[i]), 4),
                "id": texts[row]["id"], "partner": texts[j]["id"]}
        for name in (n for n in texts[row] if n != "id"):   # the ids are the pair's first two fields
            pair[name], pair[f"partner {name}"] = texts[row][name], texts[j][name]
        pair["label"], pair["partner label"] = labels[i], names[rows.labels[j]]
        examples.append(pair)
    bands, r = bands_for(config.threshold, config.permutations)
    search, embedded = "minhash", {}
    if config.similarity == "cosine":
        cosine = measure.found
        bands, r = (cosine.bands, cosine.bits_per_band) if cosine else (0, 0)
        search, embedded = (cosine.method, cosine.texts) if cosine else ("exact", {})
    return DedupSummary(
        clusters=len(np.unique(found.cluster)), rows_in_clusters=len(found.rows),
        duplicates={KINDS[k]: int(n) for k, n in zip(*np.unique(found.kind[dup], return_counts=True))},
        conflict_clusters=sum(c for c, _ in combos.values()), conflict_rows=int(found.conflict.sum()),
        conflicts=[{"labels": combo, "clusters": c, "rows": r} for combo, (c, r) in
                   sorted(combos.items(), key=lambda kv: -kv[1][0])],
        split_pairs=[{"kept split": a, "duplicate split": b, "duplicates": n, "removed": removed_pairs[(a, b)]}
                     for (a, b), n in sorted(pairs.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))],
        removed_by_label=per_label, examples=examples, candidates=found.candidates, near_pairs=found.near_pairs,
        bands=bands, rows_per_band=r, search=search, embedded=embedded)


def details(summary: DedupSummary, config: DedupConfig) -> tuple[dict, list]:
    """(report.json entries, page sections) of dedup's report."""
    from refinery.report import format as fmt
    from refinery.report.page import fields, note, table

    s = summary
    if config.similarity == "cosine":
        from refinery.methods.dedup.embedded import BITS

        texts = s.embedded.get("texts", 0)
        lsh = (f"Cosine of {config.model}'s sentence embeddings ({texts:,} distinct texts, "
               f"{s.embedded.get('cached', 0):,} read from the cache): "
               + (f"SimHash of {BITS} bits, {s.bands} bands of {s.rows_per_band}: {s.candidates:,} candidate pairs"
                  if s.search == "lsh" else f"all {s.candidates:,} pairs compared exactly")
               + f", {s.near_pairs:,} at cosine ≥ {config.cosine_threshold:g} in every text")
    else:
        lsh = (f"MinHash of {config.permutations} values over word {config.shingle_size}-shingles, {s.bands} bands "
               f"of {s.rows_per_band}: {s.candidates:,} candidate pairs verified, {s.near_pairs:,} at Jaccard ≥ "
               f"{config.threshold:g} in every text")
    conflict_note = {"keep": "kept, every row", "drop": "dropped, every row", "one": "reduced to one row"}[
        config.conflicts]
    sections = [
        ("Clusters", fields({"clusters": s.clusters, "rows in clusters": s.rows_in_clusters,
                             **{f"{k}s": n for k, n in s.duplicates.items()},
                             "label-conflict clusters": s.conflict_clusters, "rows in them": s.conflict_rows})
         + note(f"{lsh}. Each cluster keeps "
                + (f"its first row of split {config.prefer_split} where it has one, else " if config.prefer_split
                   else "") + f"its first row in input order; label-conflict clusters are {conflict_note}.")),
        ("Label conflicts", table(s.conflicts) if s.conflicts else note("No cluster's rows carry different labels.")),
        ("Duplicates per split pair", table(s.split_pairs) if s.split_pairs else note(str(Message(
            "The input names no splits (", NamedSplits(), "), or no duplicate was found.")))),
        ("Share of each label removed", table(s.removed_by_label, formats={"share removed": fmt.percent})),
        ("Example pairs", table(s.examples) if s.examples else note("No duplicate was found.")),
    ]
    return {"dedup": asdict(s), "lsh": lsh}, sections
