"""A non-editable install (what a wheel on a Ray worker is) carries its named queries and runs."""
import json
import os
import shutil
import subprocess
import sys

from conftest import REPO, SNLI_HARD

SOURCES = shutil.ignore_patterns(".git", ".venv*", "*.egg-info", "build", "__pycache__", "demo-out", "out")


def test_pip_install_dot_has_the_sql_and_runs(tmp_path):
    src, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(REPO, src, ignore=SOURCES, symlinks=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(src)], check=True, capture_output=True)
    assert (site / "refinery" / "io" / "sql" / "label_distribution.sql").is_file()
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import refinery; print(refinery.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site))                                  # the installed copy, not the source tree
    cli = [sys.executable, str(site / "bin" / "refinery")]
    out = subprocess.run([*cli, "sql", "label_distribution", SNLI_HARD, "--preset", "snli", "--format", "json"],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert sum(r["n"] for r in json.loads(out.stdout)) == 3261
    zf = subprocess.run([*cli, "zfilter", SNLI_HARD, "--preset", "snli", "--out", str(tmp_path / "zf")],
                        cwd=tmp_path, env=env, capture_output=True, text=True)
    assert zf.returncode == 0 and "rows in 3,261 = " in zf.stdout, zf.stderr
    pipeline = tmp_path / "one-stage.yaml"
    pipeline.write_text(f"input: {{paths: [{SNLI_HARD}], preset: snli}}\nstages:\n  - zfilter: {{k: 5}}\n")
    run = subprocess.run([*cli, "run", str(pipeline), "--out", str(tmp_path / "pipe")], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "rows in 3,261 = " in run.stdout and (tmp_path / "pipe" / "01-zfilter" / "_SUCCESS").is_file()
