"""generate as a map stage: on Ray its actors read their rows from the input's shards and write what they generated
themselves, to the rows the local engine makes; a killed run prompts again only the units it had not finished (the
endpoint's requests counted), to the output of an uninterrupted run."""
import threading
import time

import pytest
from conftest import killed_when, run_cli
from test_remote import s3  # noqa: F401 (the fixture: the S3 server on loopback)
from test_ibadr import tiny_generator  # noqa: F401 (the fixture)

from refinery.io.checkpoints import CHECKPOINTS, KEY
from refinery.io.corpus import Corpus
from refinery.models.generate import TransformersGenerator
from refinery.models.server import make_server


class _Counted:
    """A generator that counts the prompts it was asked (the endpoint's requests: one a prompt)."""

    def __init__(self, generator):
        self.generator, self.prompts, self.chat = generator, 0, True

    def generate(self, prompts, sampling, advance=None):
        self.prompts += len(prompts)   # the server calls it under its lock, one request at a time
        self.generator.chat = self.chat
        return self.generator.generate(prompts, sampling)


@pytest.fixture(scope="module")
def endpoint(tiny_generator):  # noqa: F811
    """An OpenAI-compatible endpoint on loopback (refinery's server over a tiny local model): (its URL, its count)."""
    counted = _Counted(TransformersGenerator(tiny_generator))
    server = make_server(counted, "tiny", port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", counted
    server.shutdown()


@pytest.fixture(scope="module")
def snli_in_shards(snli_dev_head, tmp_path_factory):
    """SNLI dev's first 300 rows as a corpus of 15 shards."""
    out = tmp_path_factory.mktemp("generate") / "snli"
    run_cli("convert", snli_dev_head, "--preset", "snli", "--shard-rows", 20, "--out", out)
    return out


def _settled(counted: _Counted) -> None:
    """Once the endpoint has answered no prompt for a second."""
    seen = -1
    while counted.prompts != seen:
        seen = counted.prompts
        time.sleep(1.0)


def _generate(corpus, url, *flags):
    return ["generate", corpus, "--backend", "openai", "--base-url", url, "--model", "tiny", "--max-new-tokens", 6,
            "--batch-size", 4, *map(str, flags)]


def _read(out, part="corpus"):
    return Corpus.open(f"{out}/{part}").read()


def test_generation_on_ray_actors_reading_their_shards_equals_the_local_engine(endpoint, snli_in_shards, tmp_path):
    url, _ = endpoint
    args = _generate(snli_in_shards, url, "--target-labels", "all", "--limit", 40, "--shard-rows", 8)
    local = run_cli(*args, "--out", tmp_path / "local").stdout
    assert "rows in 300 = 40 prompted + 260 beyond limit + 0 input rejects (ok)" in local, local
    on_ray = run_cli(*args, "--out", tmp_path / "ray", "--engine", "ray", "--actors", 2).stdout
    assert "120 prompts -> " in on_ray and "(openai, ray)" in on_ray, on_ray
    rows = _read(tmp_path / "local")
    assert rows.num_rows + _read(tmp_path / "local", "failed").num_rows == 120   # every prompt accounted for
    assert set(rows["label"].to_pylist()) == {"entailment", "neutral", "contradiction"}
    assert rows.equals(_read(tmp_path / "ray"))   # the rows of prompts 56-63 span the first two shards
    assert _read(tmp_path / "local", "failed").equals(_read(tmp_path / "ray", "failed"))
    assert not (tmp_path / "ray" / CHECKPOINTS).exists()


def test_killed_generation_prompts_again_only_its_unfinished_units(endpoint, snli_in_shards, tmp_path):
    url, counted = endpoint
    args = _generate(snli_in_shards, url, "--limit", 60, "--shard-rows", 8)   # 60 prompts: 8 units
    killed = tmp_path / "killed"
    killed_when(args, killed, f"{CHECKPOINTS}/generate/shard-?????/{KEY}", at_least=3)
    finished = len(list(killed.glob(f"{CHECKPOINTS}/generate/shard-?????/{KEY}")))
    assert 3 <= finished < 8
    _settled(counted)   # the killed run's requests in flight are answered (and counted) before the rerun
    counted.prompts = 0
    assert f"resumed: {finished} finished shard(s)" in run_cli(*args, "--out", killed).stdout
    assert counted.prompts == 60 - 8 * finished   # the finished units' prompts were not sent again
    run_cli(*args, "--out", tmp_path / "straight")
    assert _read(killed).equals(_read(tmp_path / "straight")) and _read(killed).num_rows > 0
    assert not (killed / CHECKPOINTS).exists()


def test_generation_on_the_s3_server_resumes_there_and_equals_ray_actors_writing_to_it(endpoint, snli_dev_head, s3,
                                                                                     tmp_path):
    """S3 → S3: a run killed once three units are kept on the store prompts again only the others; Ray's actors
    read their rows from the store and write their units there; the two outputs are the same rows."""
    url, counted = endpoint
    run_cli("convert", snli_dev_head, "--preset", "snli", "--shard-rows", 100, "--out", "s3://bucket/snli")
    args = _generate("s3://bucket/snli", url, "--limit", 60, "--shard-rows", 8)   # 60 prompts: 8 units
    pieces = f"{CHECKPOINTS}/generate/shard-?????/{KEY}"
    killed_when(args, s3.root / "bucket" / "killed", pieces, at_least=3, url="s3://bucket/killed")
    finished = len(list((s3.root / "bucket" / "killed").glob(pieces)))
    _settled(counted)
    counted.prompts = 0
    assert f"resumed: {finished} finished shard(s)" in run_cli(*args, "--out", "s3://bucket/killed").stdout
    assert counted.prompts == 60 - 8 * finished
    run_cli(*args, "--out", "s3://bucket/ray", "--engine", "ray")
    assert _read("s3://bucket/killed").equals(_read("s3://bucket/ray")) and _read("s3://bucket/ray").num_rows > 0
    assert not list((s3.root / "bucket").glob(f"*/{CHECKPOINTS}"))


def test_killed_razor_round_prompts_again_only_its_unfinished_shards(endpoint, snli_in_shards, tmp_path):
    """RAZOR's rounds keep each finished shard of their prompts: a run killed half-way through a round's rewrites
    sends again only the prompts of the shards it had not finished, to the corpus an uninterrupted run writes."""
    url, counted = endpoint
    args = ["razor", snli_in_shards, "--backend", "openai", "--base-url", url, "--model", "tiny", "--top-k", 24,
            "--candidates", 2, "--rounds", 1, "--max-new-tokens", 6, "--verify-max-new-tokens", 3, "--batch-size", 4,
            "--shard-rows", 4]   # 24 rewrite prompts: 6 shards of 4
    killed = tmp_path / "killed"
    shards = f"{CHECKPOINTS}/razor/round-001-rewrite-*.parquet"
    killed_when(args, killed, shards, at_least=2)
    finished = len(list(killed.glob(shards)))
    assert 2 <= finished < 6
    _settled(counted)
    counted.prompts = 0
    rerun = run_cli(*args, "--out", killed).stdout
    assert f"resumed: 0 finished round(s) and {finished} shard(s) of prompts" in rerun, rerun
    resumed_prompts, counted.prompts = counted.prompts, 0
    run_cli(*args, "--out", tmp_path / "straight")
    assert resumed_prompts == counted.prompts - 4 * finished > 0   # the finished shards' prompts not sent again
    for part in ("corpus", "scores"):
        assert _read(killed, part).equals(_read(tmp_path / "straight", part))
    assert not (killed / CHECKPOINTS).exists()
