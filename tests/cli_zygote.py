"""Commands as processes of their own, without an interpreter's start each: a zygote (one per test process) imports
refinery's command line and what most commands load (NumPy, Arrow, pandas, DuckDB, scikit-learn, numba's compiler
state) once, then forks one child per command. The child is the ``refinery`` console script (``cli.entry.run``) in
its own process: its arguments, environment and working folder, its exit code (or the signal that ended it), its
stdout and stderr apart. A fresh interpreter spends about 1.3 s of CPU importing those before any work; the suite
runs about 600 commands.

Protocol: one JSON request per line on the zygote's stdin (``args``, ``env``, ``cwd``, ``stdout``, ``stderr``: the
files the child writes its streams to); one JSON line back on its stdout per request (``returncode``: the exit code,
or −N for a child ended by signal N, as ``subprocess`` says).
"""
from __future__ import annotations

import json
import os
import sys


def _warm() -> None:
    """Import what the commands import, and run one numba kernel so that numba's compiler state (its lowering
    registries: ~0.5 s a process) is built here; no thread is left running (the children are forked)."""
    import duckdb  # noqa: F401
    import numpy as np
    import pandas  # noqa: F401  (pyarrow imports it on its first pa.array)
    import pyarrow.dataset  # noqa: F401
    import sklearn.linear_model  # noqa: F401

    import refinery.cli.main  # noqa: F401
    import refinery.pipeline.runner  # noqa: F401
    from refinery.core import minhash

    minhash._mix(np.uint64(1))


def _child(request: dict) -> None:
    """In the forked child: become the command (``refinery ARGS`` in ``cwd`` with ``env``), never return."""
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        sys.argv = ["refinery", *request["args"]]
        from refinery.cli.entry import run

        run()   # ends the process itself (os._exit)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 — a fresh interpreter would print it and exit 1
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve() -> None:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)   # nothing of the zygote's own reaches the answers
    _warm()
    print(json.dumps({"ready": os.getpid()}), file=answers, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            answers.close()
            _child(request)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        print(json.dumps({"returncode": code}), file=answers, flush=True)


if __name__ == "__main__":
    serve()
