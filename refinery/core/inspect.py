"""Summaries of a corpus: rows, schema, labels, rejects by reason, text lengths."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import split_words
from refinery.io.corpus import iter_input_batches, value_counts
from refinery.io.read_options import ReadOptions
from refinery.io.schema import Mapping


def _length_stats(lengths: list[np.ndarray]) -> dict | None:
    if not lengths:
        return None
    x = np.concatenate(lengths)
    if not x.size:
        return None
    q = np.percentile(x, [50, 95])
    return {"min": int(x.min()), "mean": round(float(x.mean()), 2), "p50": float(q[0]),
            "p95": float(q[1]), "max": int(x.max())}


def inspect(inputs, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions()) -> dict:
    """One streaming pass: counts, schema, label and reject-reason tallies, length stats (tokens)."""
    rows = rejected = 0
    labels: Counter = Counter()
    reasons: Counter = Counter()
    schema: pa.Schema | None = None
    lengths: dict[str, list[np.ndarray]] = {"text_a": [], "text_b": []}
    for _, batch in iter_input_batches(inputs, mapping, opts):
        t = batch.rows
        rows += t.num_rows
        rejected += batch.rejects.num_rows
        reasons.update(batch.rejects["reason"].to_pylist())
        if t.num_rows:
            schema = t.schema if schema is None else pa.unify_schemas([schema, t.schema], promote_options="permissive")
            labels.update(dict(zip(*value_counts(t["label"]))))
            for field in lengths:
                col = t[field].drop_null() if field in t.column_names else None
                if col is not None and len(col):
                    tokens = pc.list_value_length(split_words(col))
                    lengths[field].append(tokens.to_numpy(zero_copy_only=False))
    return {
        "rows": rows,
        "rejected": rejected,
        "labels": dict(labels.most_common()),
        "rejects_by_reason": dict(reasons.most_common()),
        "schema": {f.name: str(f.type) for f in schema} if schema else {},
        "tokens": {k: _length_stats(v) for k, v in lengths.items() if v},
    }


def format_inspection(info: dict) -> str:
    lines = [f"read      {url}" for url in info.get("read", {}).values()]
    lines += [f"rows      {info['rows']:,}", f"rejected  {info['rejected']:,}", "labels"]
    lines += [f"  {lab:<24} {n:>10,}" for lab, n in info["labels"].items()]
    if info["rejects_by_reason"]:
        lines.append("rejects by reason")
        lines += [f"  {n:>8,}  {r}" for r, n in info["rejects_by_reason"].items()]
    lines.append("schema")
    lines += [f"  {k}: {v}" for k, v in info["schema"].items()]
    for field, s in info["tokens"].items():
        if s:
            lines.append(f"tokens {field}: min {s['min']} mean {s['mean']} p50 {s['p50']:g} "
                         f"p95 {s['p95']:g} max {s['max']}")
    return "\n".join(lines)
