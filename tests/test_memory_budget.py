"""One memory budget for every stage (``--memory-budget``, a pipeline file's ``memory_budget:``, ``memory_budget=`` in
Python): what it parses to, what holds to it (the audit's exact counts, DuckDB, Ray's workers), and what each step
records and prints of its peak beside it."""
from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import SNLI_DEV, run_cli

from refinery.io import memory
from refinery.io.memory import MEMORY_BUDGET_ENV, budget_of_run, memory_budget, parse_budget, usable_memory
from refinery.messages import Refusal


def test_a_budget_is_bytes_or_a_share_of_the_memory_a_container_may_use(tmp_path, monkeypatch):
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert parse_budget("512M") == parse_budget("512MiB") == 512 << 20 and parse_budget("8G") == 8 << 30
    assert parse_budget("0.25") == int(0.25 * usable_memory()) and parse_budget(None) == parse_budget("none")
    assert parse_budget(None) == int(memory.DEFAULT_SHARE * usable_memory())
    for bad, said in [("lots", "give bytes"), ("1.5", "a fraction of memory is at most 1"),
                      ("-2G", "must be positive")]:
        with pytest.raises(Refusal, match=said) as e:
            parse_budget(bad)
        assert e.value.code == "invalid-setting"
    # a container's cgroup limit under the machine's memory is what the process may use; "max" is no limit
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(memory, "_CGROUP_LIMITS", (str(tmp_path / "v2-absent"), str(limit)))
    limit.write_text(f"{2 << 30}\n")
    assert usable_memory() == 2 << 30 and parse_budget(None) == int(memory.DEFAULT_SHARE * (2 << 30))
    limit.write_text("max\n")
    assert usable_memory() == machine


def test_a_runs_budget_is_set_for_its_processes_and_the_one_before_set_back(monkeypatch):
    from refinery.io.db import connect

    monkeypatch.delenv(MEMORY_BUDGET_ENV, raising=False)
    default = memory_budget()
    with budget_of_run("1G") as budget:
        assert budget == memory_budget() == 1 << 30 and os.environ[MEMORY_BUDGET_ENV] == str(1 << 30)
        with budget_of_run(None) as inner:   # a call without a budget keeps the one set
            assert inner == 1 << 30
        import duckdb

        half = duckdb.connect()
        half.execute("SET memory_limit = '512MB'")   # DuckDB's: half the budget
        setting = "SELECT current_setting('memory_limit')"
        assert connect().execute(setting).fetchall() == half.execute(setting).fetchall()
    assert MEMORY_BUDGET_ENV not in os.environ and memory_budget() == default


def test_every_verb_holds_to_the_budget_it_is_given_and_says_its_peak_beside_it(tmp_path):
    """``--memory-budget 2M`` on the audit: its exact counts spill to disk (the same statistics as in memory), the
    step records its peak and the budget in its ``_SUCCESS``, and the verb prints them; a rerun with ``--mode skip``
    under another budget reuses the output (the budget changes no row); a budget that is not one is refused in one
    line before any work, and a pipeline step given the run's key is told where it goes."""
    tight, roomy = tmp_path / "tight", tmp_path / "roomy"
    proc = run_cli("audit", SNLI_DEV, "--preset", "snli", "--memory-budget", "2M", "--out", tight)
    run_cli("audit", SNLI_DEV, "--preset", "snli", "--out", roomy)
    spilled = json.loads((tight / "report" / "report.json").read_text())
    held = json.loads((roomy / "report" / "report.json").read_text())
    assert spilled["spilled_runs"] > 0 and not held["spilled_runs"] and spilled["features"] == held["features"]
    stats = [pq.read_table(folder / "report" / "stats.parquet") for folder in (tight, roomy)]
    order = [(c, "ascending") for c in stats[0].column_names if c in ("feature", "label")]
    assert stats[0].sort_by(order).equals(stats[1].sort_by(order))
    record = json.loads((tight / "_SUCCESS").read_text())
    assert record["memory_budget"] == 2 << 20 and record["peak_rss"] > 2 << 20   # the process itself is larger
    assert json.loads((roomy / "_SUCCESS").read_text())["memory_budget"] == parse_budget(None)
    assert "peak memory" in proc.stdout and "over its 2 MiB budget" in proc.stdout, proc.stdout
    again = run_cli("audit", SNLI_DEV, "--preset", "snli", "--memory-budget", "0.3", "--mode", "skip", "--out", tight)
    assert "skipped" in again.stdout
    bad = run_cli("audit", SNLI_DEV, "--preset", "snli", "--memory-budget", "1.5", "--out", tmp_path / "x", check=False)
    assert bad.returncode == 2 and "a fraction of memory is at most 1" in bad.stderr and not (tmp_path / "x").exists()
    assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.rstrip().endswith("[invalid-setting]"), bad.stderr
    step_key = tmp_path / "step.yaml"
    step_key.write_text(yaml.safe_dump({"input": {"paths": [str(SNLI_DEV)], "preset": "snli"},
                                        "stages": [{"audit": {"memory_budget": "4G"}}], "out": str(tmp_path / "p")}))
    proc = run_cli("run", step_key, check=False)
    assert proc.returncode == 2 and "memory_budget: the run's, not a step's" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[unknown-setting]"), proc.stderr
    # a file an earlier refinery printed (--print-config) carries the step's key as null: read as before
    step_key.write_text(yaml.safe_dump({"input": {"paths": [str(SNLI_DEV)], "preset": "snli"},
                                        "stages": [{"audit": {"memory_budget": None}}], "out": str(tmp_path / "p")}))
    run_cli("run", step_key)
    hand_set = run_cli("audit", SNLI_DEV, "--preset", "snli", "--out", tmp_path / "h", check=False,
                       env={MEMORY_BUDGET_ENV: "plenty"})   # set by hand in a job's environment: refused, named
    assert hand_set.returncode == 2 and f"{MEMORY_BUDGET_ENV}=plenty" in hand_set.stderr, hand_set.stderr
    assert len(hand_set.stderr.strip().splitlines()) == 1, hand_set.stderr
    assert hand_set.stderr.rstrip().endswith("[invalid-setting]"), hand_set.stderr


def test_a_pipeline_and_a_python_call_take_the_budget_and_record_it(tmp_path, snli_dev_head, monkeypatch):
    """``memory_budget:`` at the top of a pipeline file (``refinery run --memory-budget`` wins) and
    ``memory_budget=`` of ``rf.audit`` and ``rf.run``: each step's record and ``run.json`` hold it, and the process's
    budget is the one before once the call returns."""
    import refinery as rf

    monkeypatch.delenv(MEMORY_BUDGET_ENV, raising=False)
    spec = {"input": {"paths": [str(snli_dev_head)], "preset": "snli"}, "memory_budget": "300M",
            "stages": [{"audit": {}}, {"zfilter": {"k": 5}}], "out": str(tmp_path / "p")}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec))
    proc = run_cli("run", tmp_path / "p.yaml")
    steps = json.loads((tmp_path / "p" / "pipeline" / "run.json").read_text())["stages"]
    assert {s["memory_budget"] for s in steps} == {300 << 20}, steps
    assert proc.stdout.count(" 300 MiB budget") == 3, proc.stdout   # the input, the audit, the z-filter
    run_cli("run", tmp_path / "p.yaml", "--memory-budget", "200M", "--out", tmp_path / "q")
    assert {s["memory_budget"] for s in json.loads((tmp_path / "q" / "pipeline" / "run.json").read_text())["stages"]} \
        == {200 << 20}
    result = rf.audit(str(snli_dev_head), preset="snli", memory_budget="64M", out=str(tmp_path / "a"))
    assert json.loads((tmp_path / "a" / "_SUCCESS").read_text())["memory_budget"] == 64 << 20
    assert len(result.stats) > 0 and MEMORY_BUDGET_ENV not in os.environ
    done = rf.run(spec, out=str(tmp_path / "r"), memory_budget="100M")
    assert {s["memory_budget"] for s in json.loads((tmp_path / "r" / "pipeline" / "run.json").read_text())["stages"]} \
        == {100 << 20} and done is not None
    with pytest.raises(Refusal, match="memory budget 'plenty'") as e:
        rf.audit(str(snli_dev_head), preset="snli", memory_budget="plenty")
    assert e.value.code == "invalid-setting"


def test_rays_workers_hold_the_runs_budget(ray_local, monkeypatch):
    """A Ray worker's budget is the run's: the local Ray started before the run is started again with it, and
    without one each worker takes its machine's default share."""
    from refinery.pipeline.engine import map_calls

    monkeypatch.delenv(MEMORY_BUDGET_ENV, raising=False)
    assert map_calls(memory_budget, [{}], engine="ray") == [parse_budget(None)]
    with budget_of_run("700M"):
        assert map_calls(memory_budget, [{}, {}], engine="ray") == [700 << 20] * 2
    assert map_calls(memory_budget, [{}], engine="ray") == [parse_budget(None)]
