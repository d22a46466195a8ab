"""Every stage at scale: each verb with its CLI defaults on N synthetic pairs, each a whole process.

Per stage it prints the wall time, the process's peak resident memory (``wait4``'s ru_maxrss: the process
itself, not Ray's workers), the largest peak of the processes it started (Ray's workers, sampled: a stage run as a
Ray task), under ``--engine ray`` the driver's share of the CPU seconds of it and every process it started (the
serial part: a cluster's speed-up is at most its inverse), rows per second and the ratio to the audit's time in the
same run. For the filters run on both engines
(zfilter, confidence, dedup, decontaminate), Ray's time against the local one's, the driver process's own bytes read and
written of the corpora (``strace`` of its threads, in a second run: the files under the benchmark's folder, not
Python's imports) against the input's and the output's Parquet bytes, and whether the kept ids are the same. Then the
SNLI example's shape (audit → zfilter → confidence → upsample → weights) as one pipeline on the Ray engine,
with the driver's peak memory (the pipeline's own per-stage figures, from ``OUT/pipeline/run.json``).

    .venv/bin/python benchmarks/scale.py --rows 1000000 [--test-rows 100000] [--skip confidence,razor | --only leakage,weights]
    .venv/bin/python benchmarks/scale.py --rows 10000000 --check     # exit 1 when a stage passes the bar
    .venv/bin/python benchmarks/scale.py --rows 2000000 --premise-pool 100000 --hypothesis-pool 1000000   # then 10M:
                                     # the n-grams held as the rows grow, so a peak that still grows follows the rows

``--check`` holds every stage to the bar of 5 minutes and 4 GB of peak RSS at the rows given (its driver's and its
Ray task's; a stage that fails counts as over it) and exits 1 naming those over it, once every stage ran.
decontaminate runs against the first ``--eval-rows`` (200,000) rows of the test split at every size: a user's
evaluation set does not grow with the training corpus.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)

REFINERY = os.path.join(os.path.dirname(sys.executable), "refinery")
BAR_SECONDS, BAR_BYTES = 300, 4e9   # --check: each stage within 5 minutes and 4 GB
SAMPLE_SECONDS = 0.5


class ChildPeak:
    """The largest resident memory of any process a ``refinery`` process started (Ray's workers, where a stage runs
    as a Ray task), sampled every ``SAMPLE_SECONDS`` in a thread while it runs (0 when it started none); and the CPU
    seconds of the process itself and of each of those, as last sampled (``serial``)."""

    def __init__(self, pid: int):
        import threading

        self.peak, self._pid, self._done = 0, pid, threading.Event()
        self.driver_cpu, self.child_cpu = 0.0, {}
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psutil

        while not self._done.wait(SAMPLE_SECONDS):
            try:
                driver = psutil.Process(self._pid)
                times = driver.cpu_times()
                self.driver_cpu = times.user + times.system
                children = driver.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                try:
                    self.peak = max(self.peak, child.memory_info().rss)
                    times = child.cpu_times()
                    self.child_cpu[child.pid] = times.user + times.system
                except psutil.Error:
                    pass

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak

    def serial(self) -> float | None:
        """The driver's CPU seconds ÷ those of it and every process it started (Amdahl's serial part, a bound on a
        cluster's speed-up: 1 / that share); None where it started none."""
        others = sum(self.child_cpu.values())
        return self.driver_cpu / (self.driver_cpu + others) if others else None


def run(args: list, log: str, check: bool = True, program: list | None = None,
        children: dict | None = None) -> tuple[float, int]:
    """(wall seconds, peak RSS in bytes) of one ``refinery`` process (``program``: another command line taking the
    same arguments); its output goes to ``log``; ``children`` given: its "peak" set to ``ChildPeak``'s. A failed
    process ends the benchmark, or with ``check`` False gives (inf, its peak)."""
    with open(log, "w") as out:
        start = time.perf_counter()
        proc = subprocess.Popen([*(program or [REFINERY]), *map(str, args)], stdout=out, stderr=subprocess.STDOUT)
        sampled = ChildPeak(proc.pid) if children is not None else None
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        if sampled is not None:
            children["peak"] = sampled.stop()
            children["serial"] = sampled.serial()
    if os.waitstatus_to_exitcode(status):
        if not check:
            print(f"refinery {' '.join(map(str, args[:2]))} failed; see {log}", flush=True)
            return float("inf"), usage.ru_maxrss * 1024
        raise SystemExit(f"refinery {' '.join(map(str, args[:2]))} failed; see {log}")
    return seconds, usage.ru_maxrss * 1024


def stages(root: str, train: str, test: str, evaluation: str | None = None) -> dict:
    """Each verb as a user runs it, with its defaults (the confidence model and folds must be given); decontaminate
    against ``evaluation`` (default: the test split)."""
    splits = ["--input", f"train={train}", "--input", f"test={test}"]
    return {
        "audit": ["audit", train, "--out", f"{root}/audit"],
        "zfilter": ["zfilter", train, "--out", f"{root}/zfilter"],
        "confidence": ["confidence", train, "--model", "ngram", "--folds", 5, "--out", f"{root}/confidence"],
        "upsample": ["upsample", train, "--out", f"{root}/upsample"],
        "aflite": ["aflite", train, "--out", f"{root}/aflite"],
        "datamap": ["datamap", train, "--out", f"{root}/datamap"],
        "leakage": ["leakage", *splits, "--out", f"{root}/leakage"],
        "weights": ["weights", *splits, "--folds", 5, "--out", f"{root}/weights"],
        "razor --score-only": ["razor", train, "--score-only", "--out", f"{root}/razor"],
        "audit --engine ray": ["audit", train, "--engine", "ray", "--out", f"{root}/audit-ray"],
        "zfilter --engine ray": ["zfilter", train, "--engine", "ray", "--out", f"{root}/zfilter-ray"],
        "confidence --engine ray": ["confidence", train, "--model", "ngram", "--folds", 5, "--engine", "ray",
                                    "--out", f"{root}/confidence-ray"],
        "dedup": ["dedup", train, "--out", f"{root}/dedup"],
        "dedup --engine ray": ["dedup", train, "--engine", "ray", "--out", f"{root}/dedup-ray"],
        "decontaminate": ["decontaminate", train, "--against", f"test={evaluation or test}",
                          "--out", f"{root}/decontaminate"],
        "decontaminate --engine ray": ["decontaminate", train, "--against", f"test={evaluation or test}",
                                       "--engine", "ray", "--out", f"{root}/decontaminate-ray"],
        "aflite --engine ray": ["aflite", train, "--engine", "ray", "--out", f"{root}/aflite-ray"],
        "datamap --engine ray": ["datamap", train, "--engine", "ray", "--out", f"{root}/datamap-ray"],
        "upsample --engine ray": ["upsample", train, "--engine", "ray", "--out", f"{root}/upsample-ray"],
        "weights --engine ray": ["weights", *splits, "--folds", 5, "--engine", "ray", "--out", f"{root}/weights-ray"],
        "leakage --engine ray": ["leakage", *splits, "--engine", "ray", "--out", f"{root}/leakage-ray"],
        "razor --score-only --engine ray": ["razor", train, "--score-only", "--engine", "ray",
                                            "--out", f"{root}/razor-ray"],
    }


def pipeline(root: str, train: str, test: str) -> str:
    """The SNLI example's shape on the synthetic corpus, on Ray: a pipeline file under ``root``."""
    path = f"{root}/pipeline.yaml"
    with open(path, "w") as fh:
        yaml.safe_dump({"input": {"splits": {"train": train, "test": test}}, "engine": "ray", "stages": [
            {"audit": {}}, {"zfilter": {}}, {"confidence": {"model": "ngram", "folds": 5, "tau": 0.2}}, {"upsample": {}},
            {"weights": {"folds": 5}}]}, fh)
    return path


def parquet_bytes(*corpora: str) -> int:
    """The bytes of the Parquet shards (rows and rejects) the corpora's manifests list."""
    from refinery.io.corpus import Corpus

    return sum(os.path.getsize(f) for c in map(Corpus.open, corpora) for f in c.files + c.reject_files)


def traced_io(command: list, root: str, log: str) -> tuple[int, int] | None:
    """(bytes read, bytes written) by the threads of one ``refinery`` process on files under ``root`` (the
    benchmark's corpora: its input and output), from ``strace -f -y`` of its read and write calls (Python's imports,
    /proc and the cluster's sockets aside); None where strace is not installed. Every thread of the driver is
    counted (Arrow reads a file in threads of its own), none of the processes it starts (Ray's workers): a thread
    is the driver's when a thread of it made it by a clone with CLONE_THREAD."""
    import re
    import shutil

    if shutil.which("strace") is None:
        return None
    calls = "read,pread64,readv,preadv,write,pwrite64,writev,pwritev,clone,clone3"
    run(command, log, program=["strace", "-f", "-y", "-e", f"trace={calls}", "-o", f"{log}.strace", REFINERY])
    moved = {"read": 0, "write": 0}
    root = os.path.realpath(root)
    line_of = re.compile(r"^(\d+)\s+(.*)$")
    io_call = re.compile(r"^(p?(?:read|write)v?(?:64)?)\(\d+<([^>]*)>.*= (\d+)$")
    made = re.compile(r"^clone3?\(.*CLONE_THREAD.*= (\d+)$")
    driver: set[str] = set()
    with open(f"{log}.strace") as fh:
        for line in fh:
            found = line_of.match(line.strip())
            if not found:
                continue
            tid, call = found.groups()
            driver = driver or {tid}   # the first thread strace saw: the refinery process it started
            if tid not in driver:
                continue
            thread = made.match(call)
            if thread:
                driver.add(thread.group(1))
            io = io_call.match(call)
            if io and io.group(2).startswith(root + "/"):
                moved["write" if "write" in io.group(1) else "read"] += int(io.group(3))
    os.remove(f"{log}.strace")
    return moved["read"], moved["write"]


def on_ray_against_local(root: str, train: str, figures: dict, commands: dict) -> None:
    """For each stage run on both engines: Ray's time against the local one's; the bytes the driver itself read
    and wrote of the corpora (``traced_io``, a second run) against the input's and the output's Parquet bytes (every
    corpus the stage wrote); whether every corpus it wrote holds the same rows on both engines."""
    from refinery.io.corpus import Corpus, stage_parts

    print("\n| stage | local | Ray | Ray ÷ local | driver's reads of the corpora ÷ input | its writes ÷ output | "
          "outputs equal |\n|---|---|---|---|---|---|---|", flush=True)
    for name in ("zfilter", "confidence", "dedup", "decontaminate", "aflite", "datamap", "upsample", "weights",
                 "leakage", "razor --score-only"):
        on_ray = f"{name} --engine ray"
        if name not in figures or on_ray not in figures:
            continue
        (local, _), (ray, _) = figures[name], figures[on_ray]
        folders = [command[command.index("--out") + 1] for command in (commands[name], commands[on_ray])]
        parts = [sorted(stage_parts(folder)) for folder in folders]
        same = [p.rsplit("/", 1)[-1] for p in parts[0]] == [p.rsplit("/", 1)[-1] for p in parts[1]] and all(Corpus.open(a).read().equals(Corpus.open(b).read())
                                            for a, b in zip(*parts))
        sizes = parquet_bytes(train), parquet_bytes(*parts[1])
        moved = traced_io(commands[on_ray], root, f"{root}/{name.split()[0]}-traced.log")
        shares = ["(strace not installed)"] * 2 if moved is None else \
            [f"{b / 1e6:,.2f} MB ÷ {size / 1e6:,.1f} MB = {b / size:.1%}" if size else f"{b / 1e6:,.2f} MB (no corpus)"
             for b, size in zip(moved, sizes)]
        print(f"| {name} | {local:,.1f} s | {ray:,.1f} s | {ray / local:.2f}× | {shares[0]} | {shares[1]} | "
              f"{same} |", flush=True)


def confidence_quality(train: str, rows: int) -> None:
    """Out-of-fold log-loss and accuracy of the confidence stage's SGD fit against L-BFGS's, on the first
    ``rows`` rows of the train split (L-BFGS takes about 20 minutes at a million)."""
    from confidence import out_of_fold, quality   # benchmarks/confidence.py

    from refinery.io.corpus import Corpus

    table = Corpus.open(train).read().slice(0, rows)
    print(f"\nconfidence model on the first {table.num_rows:,} rows, 5 folds (benchmarks/confidence.py):", flush=True)
    runs = {solver: out_of_fold(table, solver, 5) for solver in ("lbfgs", "sgd")}
    for solver, r in runs.items():
        q = quality(table, r, 0.95)
        print(f"  {solver:<5} log-loss {q['log_loss']:.4f}, accuracy {q['accuracy']:.4f}, {r['seconds']:.1f} s "
              f"({r['seconds'] / runs['lbfgs']['seconds']:.3f}× L-BFGS)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--test-rows", type=int, default=None, help="Rows of the test split (default: rows / 10).")
    parser.add_argument("--premise-pool", type=int, default=None, help="Default: rows / 20.")
    parser.add_argument("--hypothesis-pool", type=int, default=0,
                        help="Draw the hypotheses from a pool of this size (default 0: each fresh). With a fixed "
                             "--premise-pool, the n-grams stop growing with the rows: the peaks that still grow "
                             "follow the rows, not the vocabulary.")
    parser.add_argument("--eval-rows", type=int, default=200_000,
                        help="Rows of decontaminate's evaluation set (the first of the test split's): fixed, as a "
                             "user's evaluation set does not grow with the training corpus.")
    parser.add_argument("--skip", default="", help="Comma-separated stages not to run (e.g. confidence,pipeline).")
    parser.add_argument("--only", default="", help="Comma-separated stages to run, the others skipped (e.g. "
                                                   "leakage,weights; a verb names all its variants).")
    parser.add_argument("--keep", help="Folder to keep the outputs in (default: a temporary folder).")
    parser.add_argument("--check", action="store_true", help="Exit 1 when a stage takes over 5 minutes or 4 GB "
                                                            "(or fails), once every stage ran.")
    parser.add_argument("--quality-rows", type=int, default=100_000,
                        help="Rows of the train split on which the confidence model's SGD fit is compared with "
                             "L-BFGS's (benchmarks/confidence.py; 0: skip).")
    args = parser.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    test_rows = args.test_rows or max(args.rows // 10, 1000)
    pool = args.premise_pool or max(args.rows // 20, 100)
    root = args.keep or tempfile.mkdtemp(prefix="refinery-scale-")
    os.makedirs(root, exist_ok=True)
    hypotheses = ["--hypothesis-pool", args.hypothesis_pool] if args.hypothesis_pool else []
    print(f"{machine_line()}; {args.rows:,} synthetic pairs (premise pool {pool:,}"
          + (f", hypothesis pool {args.hypothesis_pool:,}" if hypotheses else "")
          + f"), test split {test_rows:,}, decontaminate's evaluation set {args.eval_rows:,}; "
          f"outputs in {root}", flush=True)
    train, test = f"{root}/train", f"{root}/test"
    # --keep a folder of an earlier run: its corpora are reused when made with the same settings
    evaluation = f"{root}/eval"
    for rows, split, out in ((args.rows, "train", train), (test_rows, "test", test), (args.eval_rows, "test",
                                                                                        evaluation)):
        run(["synth", "--rows", rows, "--premise-pool", pool, *hypotheses, "--split", split, "--out", out,
             "--mode", "skip"], f"{root}/synth-{os.path.basename(out)}.log")
    print("\n| stage | time | peak RSS | its Ray workers' peak | the driver's share of CPU seconds | rows/s | × audit "
          "|\n|---|---|---|---|---|---|---|", flush=True)
    audit_seconds = None
    over, figures = [], {}
    for name, command in stages(root, train, test, evaluation).items():
        if name.split()[0] in skip or name in skip or only and not (name.split()[0] in only or name in only):
            continue
        children: dict = {}
        seconds, peak = run(command, f"{root}/{command[0]}-{len(name)}.log", check=not args.check,
                            children=children)
        figures[name] = (seconds, peak)
        if seconds > BAR_SECONDS or max(peak, children["peak"]) > BAR_BYTES:
            over.append(f"{name} ({seconds:,.1f} s, {peak / 1e9:.2f} GB, its Ray workers' "
                        f"{children['peak'] / 1e9:.2f} GB)")
        audit_seconds = audit_seconds or (seconds if name == "audit" else None)
        ratio = f"{seconds / audit_seconds:.1f}×" if audit_seconds else "—"
        rows = args.rows + (test_rows if "--input" in command else 0)   # leakage and weights read both splits
        workers = f"{children['peak'] / 1e9:.2f} GB" if children["peak"] else "—"
        serial = f"{children['serial']:.1%}" if "--engine" in command and children["serial"] is not None else "—"
        print(f"| {name} | {seconds:,.1f} s | {peak / 1e9:.2f} GB | {workers} | {serial} | {rows / seconds:,.0f} | "
              f"{ratio} |", flush=True)
    on_ray_against_local(root, train, figures, stages(root, train, test, evaluation))
    if "pipeline" not in skip and (not only or "pipeline" in only):
        out = f"{root}/pipeline-out"
        seconds, peak = run(["run", pipeline(root, train, test), "--out", out], f"{root}/pipeline.log")
        with open(f"{out}/pipeline/run.json") as fh:
            steps = json.load(fh)["stages"]
        driver = max(step["peak_rss"] or 0 for step in steps)
        print(f"\npipeline on Ray (audit → zfilter → confidence → upsample → weights): {seconds:,.1f} s, "
              f"driver peak RSS {driver / 1e9:.2f} GB (wait4: {peak / 1e9:.2f} GB)", flush=True)
        for step in steps:   # upsample and weights run as one Ray task each: the task's peak is its own
            task = f", its Ray task {step['task_peak_rss'] / 1e9:.2f} GB" if step.get("task_peak_rss") else ""
            print(f"  {step['folder']:<16} {step['rows_in']:>11,} rows in {step['seconds']:>8,.1f} s  "
                  f"driver peak {(step['peak_rss'] or 0) / 1e9:.2f} GB{task}")
            # each step is held to the bar (wait4's peak is only the last step's: the runner resets VmHWM per step)
            step_peak = max(step["peak_rss"] or 0, step.get("task_peak_rss") or 0)
            if step["seconds"] > BAR_SECONDS or step_peak > BAR_BYTES:
                over.append(f"pipeline {step['folder']} ({step['seconds']:,.1f} s, {step_peak / 1e9:.2f} GB)")
    if args.check:
        if over:
            raise SystemExit(f"over the bar of {BAR_SECONDS // 60} minutes and {BAR_BYTES / 1e9:g} GB at "
                             f"{args.rows:,} rows: {'; '.join(over)}")
        print(f"every stage within {BAR_SECONDS // 60} minutes and {BAR_BYTES / 1e9:g} GB at {args.rows:,} rows")


if __name__ == "__main__":
    main()
