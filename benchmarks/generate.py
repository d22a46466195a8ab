"""Generation throughput per backend on the same model and prompts (generated tokens per second).

    .venv/bin/python benchmarks/generate.py [--prompts 32] [--max-new-tokens 48] [--backends transformers,ray,openai,vllm]

``ray`` is the transformers backend as a Ray Data actor stage; ``vllm`` runs bare vLLM and the vLLM
actor stage, in the vLLM venv (REFINERY_VLLM_PYTHON, default .venv-vllm) when this one lacks vllm.
On a GPU machine pass --model with a larger model to compare vLLM stage vs bare vLLM vs transformers.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from refinery.models.generate import Sampling, hf_folder, make_generator  # noqa: E402
from refinery.models.registry import resolve  # noqa: E402
from machine import machine_line  # noqa: E402  (benchmarks/machine.py)


def _prompts(n: int) -> list[str]:
    from refinery.io.corpus import load
    from refinery.io.schema import PRESETS

    table, _ = load([str(REPO.parent / "shared" / "data" / "snli" / "snli_test.jsonl")], PRESETS["snli"])
    return [f"Premise: {p}\nWrite one short sentence that contradicts the premise." for p in
            table["text_a"].to_pylist()[:n]]


def _count_tokens(model: str, texts: list[list[str]]) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_folder(resolve(model)))
    return sum(len(tok(t, add_special_tokens=False)["input_ids"]) for group in texts for t in group)


def _timed(fn, model, label):
    t = time.perf_counter()
    texts = fn()
    wall = time.perf_counter() - t
    tokens = _count_tokens(model, texts)
    print(json.dumps({"backend": label, "seconds": round(wall, 2), "tokens": tokens,
                      "tokens_per_s": round(tokens / wall, 1)}), flush=True)


def _stage(backend, kwargs, prompts, sampling, batch_size):
    import pyarrow as pa

    from refinery.models.actors import generate_table

    out = generate_table(pa.table({"prompt": prompts}), backend, kwargs, sampling, engine="ray",
                         batch_size=batch_size)
    return out["generated"].to_pylist()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--backends", default="transformers,ray,openai,vllm")
    args = p.parse_args()
    print(machine_line())
    prompts = _prompts(args.prompts)
    sampling = Sampling(max_new_tokens=args.max_new_tokens)
    backends = args.backends.split(",")
    print(f"{len(prompts)} prompts, {args.max_new_tokens} new tokens max, model {args.model}", flush=True)
    if "transformers" in backends:
        gen = make_generator("transformers", model=args.model, batch_size=16)
        gen.generate(prompts[:2], Sampling(max_new_tokens=4))  # load outside the timing
        _timed(lambda: gen.generate(prompts, sampling), args.model, "transformers (in-process)")
    if "ray" in backends:
        _timed(lambda: _stage("transformers", {"model": args.model, "batch_size": 16}, prompts, sampling, 16),
               args.model, "transformers as a Ray Data actor stage (incl. actor start)")
    if "openai" in backends:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen([str(Path(sys.executable).parent / "refinery"), "serve", "--model", args.model,
                                   "--port", str(port)], stderr=subprocess.DEVNULL)
        try:
            import requests

            while True:
                try:
                    if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
                        break
                except requests.ConnectionError:
                    time.sleep(0.5)
            gen = make_generator("openai", base_url=f"http://127.0.0.1:{port}/v1", model=args.model, concurrency=4)
            _timed(lambda: gen.generate(prompts, sampling), args.model, "openai client -> refinery serve")
        finally:
            server.terminate()
    if "vllm" in backends:
        try:
            import vllm  # noqa: F401
        except ImportError:
            python = os.environ.get("REFINERY_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))
            subprocess.run([python, __file__, "--prompts", str(args.prompts), "--max-new-tokens",
                            str(args.max_new_tokens), "--model", args.model, "--backends", "vllm"], check=True)
            return
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        gen = make_generator("vllm", model=args.model, max_num_seqs=32)
        gen.generate(prompts[:2], Sampling(max_new_tokens=4))
        _timed(lambda: gen.generate(prompts, sampling), args.model, "vllm (bare LLM)")
        del gen
        _timed(lambda: _stage("vllm", {"model": args.model, "max_num_seqs": 32}, prompts, sampling, len(prompts)),
               args.model, "vllm as a Ray Data actor stage (incl. engine start)")


if __name__ == "__main__":
    main()
