"""The encoder paths on a GPU: sentence embeddings (AFLite's and the data map's ``embeddings`` Φ, ``dedup --semantic``)
and the data map's ``--backend transformer`` (the paper's setting: the encoder fine-tuned one epoch at a time, every
training row scored after each), through refinery's own code (``models.embeddings.embed_texts``,
``methods.datamap.learners.FineTuned``) on whatever device torch finds.

Rows: SNLI dev + test (``--data``, default ../shared/data/snli). Embedding: ``--embed-rows`` distinct texts (premises
and hypotheses), an empty cache (a temporary ``REFINERY_CACHE``), so every text is encoded. Data map: the first
``--map-rows`` rows (default: all 19,666), ``--epochs`` epochs of MiniLM fine-tuned at the map's settings (AdamW,
lr 5e-5, batches of 32, length 128, precision ``auto``), the time of each epoch's training and of its scoring pass.

    .venv/bin/python benchmarks/gpu.py [--model FOLDER] [--embed-rows 40000] [--map-rows N] [--epochs 2]

Prints one JSON line per measurement and a table; ``--json-out`` writes them to a file.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "snli"
LABELS = ("contradiction", "entailment", "neutral")


def snli_rows(folder: Path) -> pa.Table:
    """SNLI dev + test as canonical rows (text_a, text_b, label), the pairs without a gold label left out. Read with
    ``json`` alone, not ``io.corpus.load``: a GPU machine may have torch and transformers but not DuckDB, which the
    readers import."""
    a, b, label = [], [], []
    for split in ("dev", "test"):
        with open(folder / f"snli_{split}.jsonl") as fh:
            for line in fh:
                row = json.loads(line)
                if row["gold_label"] in LABELS:
                    a.append(row["sentence1"])
                    b.append(row["sentence2"])
                    label.append(row["gold_label"])
    return pa.table({"text_a": a, "text_b": b, "label": label})


def device_line() -> str:
    import torch

    cpu = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    try:
        from refinery.report.page import machine
        cpu = machine()
    except Exception:   # noqa: BLE001  (a GPU machine without refinery's report dependencies)
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{gpu}; CPU: {cpu}; torch {torch.__version__}"


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def embedding(texts: list[str], model: str) -> dict:
    from refinery.models.embeddings import EncoderSpec, embed_texts

    start = time.perf_counter()
    embedded = embed_texts(texts, EncoderSpec(model=model))
    synchronize()
    seconds = time.perf_counter() - start
    assert embedded.embedded == len(set(texts)), "every text should have been a cache miss"
    return {"measure": "embed", "rows": len(texts), "seconds": round(seconds, 2),
            "rows_per_s": round(len(texts) / seconds, 1), "dim": int(embedded.vectors.shape[1])}


def data_map(table: pa.Table, model: str, epochs: int) -> list[dict]:
    from refinery.methods.datamap.config import DataMapConfig
    from refinery.methods.datamap.learners import FineTuned

    y = np.searchsorted(np.array(LABELS), np.array(table["label"].to_pylist()))
    learner = FineTuned(table, list(LABELS), DataMapConfig(backend="transformer", model=model, epochs=max(epochs, 2)))
    out = []
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        learner.train_epoch(epoch)
        synchronize()
        trained = time.perf_counter() - start
        start = time.perf_counter()
        confidence, correct = learner.gold(y)
        synchronize()
        scored = time.perf_counter() - start
        out.append({"measure": "datamap-transformer epoch", "epoch": epoch, "rows": table.num_rows,
                    "train_s": round(trained, 2), "score_s": round(scored, 2),
                    "train_rows_per_s": round(table.num_rows / trained, 1),
                    "score_rows_per_s": round(table.num_rows / scored, 1),
                    "precision": learner.classifier.precision_.dtype,
                    "mean_confidence": round(float(np.mean(confidence)), 4),
                    "train_accuracy": round(float(np.mean(correct)), 4)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--embed-rows", type=int, default=40_000)
    parser.add_argument("--map-rows", type=int, default=None, help="Rows the data map trains on (default: all).")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    table = snli_rows(args.data)
    texts = list(dict.fromkeys(table["text_a"].to_pylist() + table["text_b"].to_pylist()))[:args.embed_rows]
    results = [{"measure": "machine", "line": device_line()}]
    print(json.dumps(results[0]), flush=True)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["REFINERY_CACHE"] = cache
        results.append(embedding(texts, args.model))
        print(json.dumps(results[-1]), flush=True)
    for record in data_map(table.slice(0, args.map_rows or table.num_rows), args.model, args.epochs):
        results.append(record)
        print(json.dumps(record), flush=True)
    if args.json_out:
        args.json_out.write_text("\n".join(json.dumps(r) for r in results) + "\n")
    print(f"\n{results[0]['line']}\n| measure | rows | seconds | rows/s |\n|---|---|---|---|")
    for r in results[1:]:
        if r["measure"] == "embed":
            print(f"| embed (empty cache) | {r['rows']:,} | {r['seconds']} | {r['rows_per_s']:,} |")
        else:
            print(f"| data map transformer, epoch {r['epoch']} train ({r['precision']}) | {r['rows']:,} | "
                  f"{r['train_s']} | {r['train_rows_per_s']:,} |")
            print(f"| data map transformer, epoch {r['epoch']} scoring | {r['rows']:,} | {r['score_s']} | "
                  f"{r['score_rows_per_s']:,} |")


if __name__ == "__main__":
    main()
