"""Label-conditioned generation's rows: the prompts of a corpus's rows (one per target label, from the template) and
the generated rows (``source=generated``, ``origin_id``) with the failed prompts, from the generator's output."""
from __future__ import annotations

import pyarrow as pa

from refinery.messages import Refusal
from refinery.methods.generate.config import GenerationConfig
from refinery.models.label_descriptions import label_description


def target_labels(config: GenerationConfig, labels: list) -> list | None:
    """The labels every row is prompted for (``labels``: the input's, for ``all``), or None: each row's own."""
    if config.target_labels == "own":
        return None
    if config.target_labels == "all":
        return list(labels)
    return [x.strip() for x in config.target_labels.split(",") if x.strip()]


def prompts(table: pa.Table, config: GenerationConfig, labels: list) -> pa.Table:
    """One row per (input row, target label): origin_id, text_a, label, prompt (``labels``: the input's)."""
    rows = table.select([c for c in ("id", "text_a", "text_b", "label") if c in table.column_names]).to_pylist()
    every = target_labels(config, labels)
    out = []
    for r in rows:
        for label in ([r["label"]] if every is None else every):
            fields = {**r, "label": label, "label_description": label_description(label)}
            try:
                prompt = config.template.format(**fields)
            except KeyError as e:
                raise Refusal(f"template names {e} but rows have only {', '.join(fields)}",
                              code="invalid-setting") from None
            out.append({"origin_id": r["id"], "text_a": r["text_a"], "label": label, "prompt": prompt})
    return pa.Table.from_pylist(out, schema=pa.schema([("origin_id", pa.string()), ("text_a", pa.string()),
                                                       ("label", pa.string()), ("prompt", pa.string())]))


def generated_rows(result: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(canonical generated rows, failed prompts) from a stage's output."""
    rows, failed = [], []
    for r in result.to_pylist():
        texts = [t for t in (r["generated"] or []) if t]
        if r["generation_error"] or not texts:
            failed.append({"origin_id": r["origin_id"], "label": r["label"], "prompt": r["prompt"],
                           "reason": r["generation_error"] or "empty generation"})
        for k, text in enumerate(texts):
            rows.append({"id": f"{r['origin_id']}#gen-{r['label']}-{k}", "text_a": r["text_a"], "text_b": text,
                         "label": r["label"], "source": "generated", "origin_id": r["origin_id"]})
    schema = pa.schema([("id", pa.string()), ("text_a", pa.string()), ("text_b", pa.string()),
                        ("label", pa.string()), ("source", pa.string()), ("origin_id", pa.string())])
    fail_schema = pa.schema([("origin_id", pa.string()), ("label", pa.string()), ("prompt", pa.string()),
                             ("reason", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema), pa.Table.from_pylist(failed, schema=fail_schema)
