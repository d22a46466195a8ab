"""Label-conditioned generation over a corpus: prompts from a template, a generator stage, generated rows.

Each input row yields one prompt per target label (its own label, every label, or a given list);
the stage (in-process or a Ray Data actor pool) samples n texts per prompt; every text becomes a
canonical row with ``source=generated`` and ``origin_id``. Prompts whose generation failed, or
that produced no text, are listed with the error in ``failed.parquet``, so every prompt is accounted for.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pyarrow as pa

from .models.generate import Sampling
from .models.stages import generate_table
from .storage import AtomicDir, publishes_run

LABEL_DESCRIPTIONS = {
    "entailment": "definitely true given the premise",
    "neutral": "possibly true given the premise, but not implied by it",
    "contradiction": "definitely false given the premise",
    "SUPPORTS": "supported by the evidence", "REFUTES": "refuted by the evidence",
}
DEFAULT_TEMPLATE = ("Premise: {text_a}\nWrite one short sentence that is {label_description}. "
                    "Reply with the sentence only.")


@dataclass
class GenerationConfig:
    template: str = DEFAULT_TEMPLATE
    target_labels: str = "own"     # own | all | comma-separated labels
    sampling: Sampling = Sampling()


def prompts(table: pa.Table, config: GenerationConfig) -> pa.Table:
    """One row per (input row, target label): origin_id, text_a, label, prompt."""
    rows = table.select([c for c in ("id", "text_a", "text_b", "label") if c in table.column_names]).to_pylist()
    every = sorted({r["label"] for r in rows})
    if config.target_labels not in ("own", "all"):
        every = [x.strip() for x in config.target_labels.split(",") if x.strip()]
    out = []
    for r in rows:
        for label in ([r["label"]] if config.target_labels == "own" else every):
            fields = {**r, "label": label, "label_description": LABEL_DESCRIPTIONS.get(label, f"labelled '{label}'")}
            try:
                prompt = config.template.format(**fields)
            except KeyError as e:
                raise ValueError(f"template names {e} but rows have only {', '.join(fields)}") from None
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


@publishes_run
def run(table: pa.Table, out: str, backend: str, backend_kwargs: dict, config: GenerationConfig = GenerationConfig(),
        engine: str = "local", batch_size: int = 16, actors: int = 1, gpus_per_actor: float = 0,
        mode: str = "overwrite", input_rejects: pa.Table | None = None) -> dict:
    """Generate into ``out`` (a corpus of generated rows, failed.parquet, generation.json); the input's
    rejects are kept in the corpus's rejects."""
    import os

    import pyarrow.parquet as pq

    from .corpus import write_table

    requests = prompts(table, config)
    result = generate_table(requests, backend, backend_kwargs, config.sampling, engine, batch_size, actors,
                            gpus_per_actor)
    rows, failed = generated_rows(result)
    report = {"inputs": table.num_rows, "prompts": requests.num_rows, "generated": rows.num_rows,
              "failed": failed.num_rows, "backend": backend, "engine": engine,
              "sampling": asdict(config.sampling), "template": config.template}
    report["input_rejected"] = write_table(rows, out, rejects=input_rejects, mode=mode,
                                           config={"generation": report})["rejected"]
    with AtomicDir(os.path.join(out, "generation")) as d:
        sink = pa.BufferOutputStream()
        pq.write_table(failed, sink)
        d.write_bytes("failed.parquet", sink.getvalue().to_pybytes())
        d.write_text("generation.json", json.dumps(report, indent=1))
        d.commit()
    return report
