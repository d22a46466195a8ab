import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("REFINERY_DATA", REPO.parent / "shared" / "data"))
SNLI_DEV = str(DATA / "snli" / "snli_dev.jsonl")
SNLI_TEST = str(DATA / "snli" / "snli_test.jsonl")
SNLI_HARD = str(DATA / "snli" / "snli_test_hard.jsonl")
REFINERY = str(Path(sys.executable).parent / "refinery")


def run_cli(*args, check=True, env=None):
    """Run the installed ``refinery`` CLI as a user would."""
    proc = subprocess.run([REFINERY, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"refinery {' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def snli_pair():
    from refinery.io.corpus import load
    from refinery.io.schema import PRESETS

    table, rejects = load([SNLI_DEV, SNLI_TEST], PRESETS["snli"])
    return table


@pytest.fixture(scope="module")
def ray_local():
    from refinery.pipeline.engine import ray_init, ray_shutdown

    ray_init(num_cpus=2)
    yield
    ray_shutdown()


def killed_when(args, out, finished: str, at_least: int = 1) -> list:
    """Start ``refinery ARGS --out OUT`` in its own process group, kill -9 it once ``at_least`` files under
    OUT match the glob ``finished`` (e.g. a stage's first checkpoint), and return those files' names."""
    import signal
    import time

    proc = subprocess.Popen([REFINERY, *map(str, args), "--out", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
    while len(list(Path(out).glob(finished))) < at_least:
        assert proc.poll() is None, f"the run ended before {finished} appeared under {out}"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (Path(out) / "_SUCCESS").exists()
    return sorted(p.name for p in Path(out).glob(finished))
