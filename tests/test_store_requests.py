"""Requests to an object store near the least (issue 66): a verb from S3 to S3 asks the store little more than the
files it reads and writes, and a run that skips asks it a few times — counted in the real S3 server's own log of the
requests it answered."""
import subprocess
import sys

import s3fs
import yaml
from conftest import SNLI_DEV, run_cli
from store_log import requests
from test_remote import s3  # noqa: F401 — the real S3 server (rclone) on loopback

from refinery.io import store_answers
from refinery.io.corpus_writer import convert
from refinery.io.location import get_fs
from refinery.io.schema import PRESETS


def _run(log, *args, env):
    """The command's output and the requests the server answered meanwhile (``store_log``)."""
    before = log.read_text()
    proc = run_cli(*args, env=env)
    return proc, log.read_text()[len(before):]


def test_a_verb_on_a_store_asks_it_about_as_often_as_the_files_it_reads_and_writes(s3, tmp_path):
    convert([SNLI_DEV], "s3://bucket/dev", PRESETS["snli"])   # one shard
    log = tmp_path / "requests.log"
    s3.stop()
    s3.start(log)
    for verb in ("audit", "zfilter", "zfilter"):   # zfilter twice: the second overwrites the first
        _, text = _run(log, verb, "s3://bucket/dev", "--out", f"s3://bucket/{verb}", env=s3.env)
        asked = requests(text, s3.root)
        assert asked.total <= asked.bound, (verb, asked)
        assert asked.total < 40   # 253 (audit) and 266 (zfilter) before answers were kept within a run
    proc, text = _run(log, "zfilter", "s3://bucket/dev", "--out", "s3://bucket/zfilter", "--mode", "skip", env=s3.env)
    # the output's listing and marker, the input's _SUCCESS and manifest, the output's _SUCCESS
    assert "skipped" in proc.stdout and requests(text, s3.root).total <= 5, requests(text, s3.root)
    convert([SNLI_DEV], "s3://bucket/shards", PRESETS["snli"], shard_rows=500)   # 20 shards: each opened once
    _, text = _run(log, "zfilter", "s3://bucket/shards", "--out", "s3://bucket/z20", env=s3.env)
    asked = requests(text, s3.root)
    assert asked.read >= 21 and asked.total <= asked.bound, asked   # a HEAD a shard too before the listing answered


def test_kept_answers_never_hide_a_write_of_the_run_nor_outlive_it(s3):
    """Within a run the store's answers are kept, but a write drops those it changes, and the next run asks again."""
    fs, _ = get_fs("s3://bucket/x")
    other = s3fs.S3FileSystem(key="testkey", secret="testsecret", skip_instance_cache=True,   # another process's
                              client_kwargs={"endpoint_url": s3.env["AWS_ENDPOINT_URL"]})
    with store_answers.within_a_run():
        assert not fs.isfile("bucket/x/_SUCCESS")
        assert fs.ls("bucket/x") if fs.exists("bucket/x") else True
        fs.pipe_file("bucket/x/_SUCCESS", b"one")
        assert fs.isfile("bucket/x/_SUCCESS") and fs.cat_file("bucket/x/_SUCCESS") == b"one"
        fs.invalidate_cache()
        assert [p.rsplit("/", 1)[-1] for p in fs.ls("bucket/x")] == ["_SUCCESS"]
        other.pipe_file("bucket/x/_SUCCESS", b"two")                   # another process, behind the run's back
        assert fs.cat_file("bucket/x/_SUCCESS") == b"one"            # the run reads what it read (or wrote)
        fs.pipe_file("bucket/x/_SUCCESS", b"three")
        assert fs.cat_file("bucket/x/_SUCCESS") == b"three"
        fs.rm("bucket/x/_SUCCESS")
        assert not fs.isfile("bucket/x/_SUCCESS")
    other.pipe_file("bucket/x/_SUCCESS", b"four")
    assert fs.cat_file("bucket/x/_SUCCESS") == b"four"   # outside a run, the store is asked


def test_a_store_used_through_fsspec_before_refinery_is_still_refinerys():
    """A notebook that read ``s3://`` through fsspec first (pandas, Arrow) left s3fs's own class registered: every
    refinery call on S3 then went without its deadlines, its named failures and its kept answers."""
    code = ("import fsspec; fsspec.filesystem('s3', anon=True); from refinery.io.location import get_fs; "
            "print(type(get_fs('s3://bucket/x')[0]).__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "S3WithDeadlines", proc.stdout + proc.stderr


def test_a_pipelines_skipped_steps_ask_the_store_a_few_times_each(s3, tmp_path):
    """A pipeline run again on an unchanged input skips every step: each skipped step (its folder's listing, its
    _SUCCESS) and the figures the pipeline's report reads of it (its report, its kept audit) cost a few requests."""
    convert([SNLI_DEV], "s3://bucket/dev", PRESETS["snli"])
    log = tmp_path / "requests.log"
    s3.stop()
    s3.start(log)
    again = {}
    for steps in (["zfilter"], ["zfilter", "audit", "upsample"]):
        spec = tmp_path / f"{len(steps)}.yaml"
        spec.write_text(yaml.safe_dump({"input": {"paths": ["s3://bucket/dev"]}, "out": f"s3://bucket/p{len(steps)}",
                                        "stages": [{name: {}} for name in steps]}))
        run_cli("run", spec, env=s3.env)
        proc, text = _run(log, "run", spec, env=s3.env)
        again[len(steps)] = requests(text, s3.root).total
        assert proc.stdout.count("unchanged, skipped") == len(steps) + 1   # the input's step too
    per_step = (again[3] - again[1]) / 2
    assert per_step <= 7, again   # 110 a step before a run kept the store's answers
