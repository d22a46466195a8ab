"""Throughput of the sentence-embedding path (``models.embeddings.embed_texts``: AFLite's Φ with
``--representation embeddings``, the data map's ``--backend embeddings``): rows per second and per CPU core, with an
empty cache (every text embedded by the frozen encoder, in-process) and then with a full one (every text read back).

Rows: the hypotheses of SNLI dev + test (../shared/data), ``--rows`` of them, texts made distinct so that each is a
miss the first time. The cache is a temporary folder (``REFINERY_CACHE``), removed at the end.

    nice -n 19 .venv/bin/python benchmarks/embeddings.py [--rows 20000] [--max-length 128]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refinery.io.corpus import load  # noqa: E402
from refinery.io.schema import PRESETS  # noqa: E402

from machine import machine_line  # noqa: E402  (benchmarks/machine.py)

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "snli")


def hypotheses(rows: int) -> list[str]:
    """``rows`` distinct hypotheses of SNLI dev + test (a repeated text gets its row number appended)."""
    table, _ = load([os.path.join(DATA, f"snli_{split}.jsonl") for split in ("dev", "test")], PRESETS["snli"])
    texts, seen = [], set()
    for i, text in enumerate(table["text_b"].to_pylist()[:rows]):
        text = text if text not in seen else f"{text} ({i})"
        seen.add(text)
        texts.append(text)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["REFINERY_CACHE"] = cache
        import torch

        from refinery.models.embeddings import EncoderSpec, embed_texts

        texts = hypotheses(args.rows)
        spec = EncoderSpec(max_length=args.max_length)
        cores = torch.get_num_threads()
        print(f"{machine_line()}; torch threads {cores}; {len(texts):,} SNLI hypotheses, {spec.model}, max length "
              f"{spec.max_length}")
        for run in ("empty cache", "full cache"):
            start = time.perf_counter()
            embedded = embed_texts(texts, spec, desc=f"embed ({run})")
            seconds = time.perf_counter() - start
            print(f"{run}: {embedded.embedded:,} embedded, {embedded.cached:,} read from the cache; {seconds:.1f} s, "
                  f"{len(texts) / seconds:,.0f} rows/s, {len(texts) / seconds / cores:,.0f} rows/s per core "
                  f"(the encoder's load included)")


if __name__ == "__main__":
    main()
