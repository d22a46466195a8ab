"""What the driver of a map stage moves under ``--engine ray``: ``generate`` over an OpenAI-compatible endpoint on
loopback, the driver process's own bytes read of the input's corpus and written of the output's (``strace`` of its
threads, as ``scale.py`` traces the filters), against the corpora's Parquet bytes; the time against the local
engine's and whether the generated rows are the same.

    .venv/bin/python benchmarks/map_driver.py [--prompts 20000] [--actors 2]

The endpoint answers each prompt at once with a text made from it (refinery's server over a generator that echoes),
so that the figures are the stage's, not a model's. SNLI dev and test are the input, as one corpus of 5,000-row
shards.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)
from scale import parquet_bytes, run, traced_io  # noqa: E402

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "snli")


class _Echo:
    """A generator answering each prompt with a sentence made from it, at once."""

    chat = True

    def generate(self, prompts, sampling, advance=None):
        return [[f"Someone says {p.split(chr(10))[0][9:60].strip()}" for _ in range(sampling.n)] for p in prompts]


def main() -> None:
    from refinery.io.corpus import Corpus
    from refinery.models.server import make_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=20_000)
    parser.add_argument("--actors", type=int, default=2)
    args = parser.parse_args()
    server = make_server(_Echo(), "echo", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    root = tempfile.mkdtemp(prefix="map-driver-")
    corpus = f"{root}/snli"
    run(["convert", f"{SHARED}/snli_dev.jsonl", f"{SHARED}/snli_test.jsonl", "--preset", "snli", "--shard-rows",
         5000, "--out", corpus], f"{root}/convert.log")
    generate = ["generate", corpus, "--backend", "openai", "--base-url", url, "--model", "echo", "--target-labels",
                "all", "--limit", -(-args.prompts // 3)]   # three labels: a prompt for each
    local, _ = run([*generate, "--out", f"{root}/local"], f"{root}/local.log")
    ray, _ = run([*generate, "--engine", "ray", "--actors", args.actors, "--out", f"{root}/ray"], f"{root}/ray.log")
    moved = traced_io([*generate, "--engine", "ray", "--actors", args.actors, "--out", f"{root}/traced"], root,
                      f"{root}/traced.log")
    same = all(Corpus.open(f"{root}/local/{p}").read().equals(Corpus.open(f"{root}/ray/{p}").read())
               for p in ("corpus", "failed"))
    read_in, written_out = parquet_bytes(corpus), parquet_bytes(f"{root}/traced/corpus", f"{root}/traced/failed")
    prompts = json.load(open(f"{root}/ray/report/report.json"))["prompts"]
    print(f"{machine_line()}\n\n| generate, {prompts:,} prompts | local | Ray ({args.actors} actors) | "
          "driver's reads ÷ input | its writes ÷ output | rows equal |\n|---|---|---|---|---|---|")
    shares = ("strace is not installed", "") if moved is None else \
        (f"{moved[0] / read_in:.1%} ({moved[0] / 1e6:.2f} of {read_in / 1e6:.1f} MB)",
         f"{moved[1] / written_out:.1%} ({moved[1] / 1e6:.2f} of {written_out / 1e6:.1f} MB)")
    print(f"| endpoint on loopback | {local:.1f} s | {ray:.1f} s | {shares[0]} | {shares[1]} | {same} |")
    server.shutdown()


if __name__ == "__main__":
    main()
