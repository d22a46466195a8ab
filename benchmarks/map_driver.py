"""What the driver moves under ``--engine ray`` for the stages that generate: ``generate`` over an OpenAI-compatible
endpoint on loopback, RAZOR's rewriting through it, and IBADR with a tiny generator; the driver process's own bytes
read of the input's corpus and written of the output's (``strace`` of its threads, as ``scale.py`` traces the
filters), against the corpora's Parquet bytes; the time against the local engine's and whether the corpora written
are the same.

    .venv/bin/python benchmarks/map_driver.py [--prompts 20000] [--actors 2] [--only generate,razor,ibadr]

The endpoint answers each prompt at once with a text made from it (refinery's server over a generator that echoes),
so that the figures are the stage's, not a model's. SNLI dev and test are the input, as one corpus of 5,000-row
shards.
"""
from __future__ import annotations

import argparse
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
    from refinery.io.corpus import stage_parts
    from refinery.models.server import make_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=20_000)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--only", default="generate,razor,ibadr")
    args = parser.parse_args()
    server = make_server(_Echo(), "echo", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    root = tempfile.mkdtemp(prefix="map-driver-")
    corpus = f"{root}/snli"
    run(["convert", f"{SHARED}/snli_dev.jsonl", f"{SHARED}/snli_test.jsonl", "--preset", "snli", "--shard-rows",
         5000, "--out", corpus], f"{root}/convert.log")
    endpoint = ["--backend", "openai", "--base-url", url, "--model", "echo"]
    commands = {
        f"generate, {-(-args.prompts // 3) * 3:,} prompts, {args.actors} actors":
            ["generate", corpus, *endpoint, "--target-labels", "all", "--limit", -(-args.prompts // 3),
             "--engine-options", "--actors", args.actors],
        "razor, rewriting the top 2,000 rows": ["razor", corpus, *endpoint, "--top-k", 2000, "--rounds", 1],
        "ibadr, a tiny generator": ["ibadr", corpus, "--generator", _tiny_generator(root), "--iterations", 1,
                                    "--per-iteration", 64, "--max-new-tokens", 16, "--first-epochs", 1, "--tau", 0],
    }
    only = {s.strip() for s in args.only.split(",")}
    print(f"{machine_line()}\n\n| stage | local | Ray | driver's reads ÷ input | its writes ÷ output | "
          "corpora equal |\n|---|---|---|---|---|---|", flush=True)
    for name, command in commands.items():
        if name.split(",")[0] not in only:
            continue
        command, ray_only = _split(command)
        slug = name.split(",")[0]
        local, _ = run([*command, "--out", f"{root}/{slug}-local"], f"{root}/{slug}-local.log")
        ray, _ = run([*command, "--engine", "ray", *ray_only, "--out", f"{root}/{slug}-ray"], f"{root}/{slug}-ray.log")
        moved = traced_io([*command, "--engine", "ray", *ray_only, "--out", f"{root}/{slug}-traced"], root,
                          f"{root}/{slug}-traced.log")
        parts = [sorted(stage_parts(f"{root}/{slug}-{side}")) for side in ("local", "ray", "traced")]
        same = all(_rows(a) == _rows(b) for a, b in zip(parts[0], parts[1])) and len(parts[0]) == len(parts[1])
        read_in, written_out = parquet_bytes(corpus), parquet_bytes(*parts[2])
        shares = ("strace is not installed", "") if moved is None else \
            (f"{moved[0] / read_in:.1%} ({moved[0] / 1e6:.2f} of {read_in / 1e6:.1f} MB)",
             f"{moved[1] / written_out:.1%} ({moved[1] / 1e6:.2f} of {written_out / 1e6:.1f} MB)")
        print(f"| {name} | {local:.1f} s | {ray:.1f} s | {shares[0]} | {shares[1]} | {same} |", flush=True)
    server.shutdown()


def _split(command: list) -> tuple[list, list]:
    """(the command, the options it takes on Ray only: those after ``--engine-options``)."""
    if "--engine-options" not in command:
        return command, []
    at = command.index("--engine-options")
    return command[:at], command[at + 1:]


def _rows(corpus: str):
    from refinery.io.corpus import Corpus

    return Corpus.open(corpus).read().to_pydict()


def _tiny_generator(root: str) -> str:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from kill_matrix import make_tiny_generator   # tests/kill_matrix.py

    return make_tiny_generator(os.path.join(root, "generator"))


if __name__ == "__main__":
    main()
