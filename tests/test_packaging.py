"""A non-editable install (what a wheel on a Ray worker is) carries its named queries (io's and each method's own)
and runs."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO, SNLI_HARD

SOURCES = shutil.ignore_patterns(".git", ".venv*", "*.egg-info", "build", "__pycache__", "demo-out", "out")


def test_pip_install_dot_has_the_sql_and_runs(tmp_path):
    src, site = tmp_path / "src", tmp_path / "site"
    shutil.copytree(REPO, src, ignore=SOURCES, symlinks=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(src)], check=True, capture_output=True)
    shipped = {q.relative_to(site) for q in (site / "refinery").rglob("*.sql")}
    assert {q.relative_to(REPO) for q in (REPO / "refinery").rglob("*.sql")} == shipped   # io's and the methods'
    assert Path("refinery/methods/upsample/sql/audac_draw.sql") in shipped
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
    up = subprocess.run([*cli, "upsample", SNLI_HARD, "--preset", "snli", "--out", str(tmp_path / "up")],
                        cwd=tmp_path, env=env, capture_output=True, text=True)   # its SQL: methods/upsample/sql/
    assert up.returncode == 0 and (tmp_path / "up" / "_SUCCESS").is_file(), up.stderr
    pipeline = tmp_path / "one-stage.yaml"
    pipeline.write_text(f"input: {{paths: [{SNLI_HARD}], preset: snli}}\nstages:\n  - zfilter: {{k: 5}}\n")
    run = subprocess.run([*cli, "run", str(pipeline), "--out", str(tmp_path / "pipe")], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "rows in 3,261 = " in run.stdout and (tmp_path / "pipe" / "01-zfilter" / "_SUCCESS").is_file()


HEAVY = ("numba", "duckdb", "scipy", "sklearn", "torch", "transformers", "ray", "datasets", "vllm", "matplotlib")


def test_a_verbs_help_imports_no_heavy_dependency():
    """Issue 42: `refinery VERB --help` is built without the methods' heavy dependencies (their modules import
    them where the work is), so every command starts fast. One process builds every verb's help in turn."""
    code = f"""
import sys
import click
from refinery.cli.main import main

heavy = {HEAVY!r}
ctx = click.Context(main)
assert not [m for m in heavy if m in sys.modules], "refinery.cli.main imports them"
for verb in main.list_commands(ctx):
    main.get_command(ctx, verb).get_help(click.Context(main.get_command(ctx, verb), info_name=verb, parent=ctx))
    loaded = [m for m in heavy if m in sys.modules]
    if loaded:
        print(verb, loaded)
        break
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", f"a verb's --help imports (verb [modules]): {done.stdout}"



def test_an_installed_plugin_is_a_verb_a_pipeline_key_and_an_rf_name(tmp_path):
    """A package that declares a stage under the entry-point group ``refinery.stages`` (what `pip install` of a
    plugin leaves in site-packages: its module and its dist-info) gives the stock `refinery` script a verb, a
    pipeline key and an `rf.` function, with the same rows."""
    site = tmp_path / "site"
    info = site / "short_text_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "short_text_plugin.py").write_text((Path(__file__).parent / "short_text_plugin.py").read_text())
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: short-text-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[refinery.stages]\nshort-text = short_text_plugin:ShortText\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    cli = [os.path.join(os.path.dirname(sys.executable), "refinery")]

    def run(*args):
        done = subprocess.run([*cli, *args], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert re.search(r"\n  short-text +Drop pairs whose hypothesis is shorter than min_words words\.", run("--help"))
    assert "rows in 3,261 = " in run("short-text", SNLI_HARD, "--preset", "snli", "--min-words", "6",
                                     "--out", str(tmp_path / "verb"))
    (tmp_path / "p.yaml").write_text(f"input: {{paths: [{SNLI_HARD}], preset: snli}}\n"
                                     "stages: [{short-text: {min_words: 6}}]\n")
    run("run", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "pipe"))
    api = subprocess.run([sys.executable, "-c", "import sys, refinery as rf\n"
                          f"r = rf.short_text({SNLI_HARD!r}, preset='snli', min_words=6, out={str(tmp_path / 'api')!r})\n"
                          "print(r.parts['kept'])"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert api.returncode == 0, api.stderr

    import pyarrow.dataset as ds

    def kept(folder):
        return sorted(ds.dataset(str(folder / "kept"), format="parquet").to_table(columns=["id"])["id"].to_pylist())

    ids = kept(tmp_path / "verb")
    assert 0 < len(ids) < 3261 and int(api.stdout) == len(ids)
    assert kept(tmp_path / "pipe" / "01-short-text") == ids == kept(tmp_path / "api")
