"""generate as a map stage: on Ray its actors read their rows from the input's shards and write what they generated
themselves, to the rows the local engine makes; a killed run prompts again only the units it had not finished (the
endpoint's requests counted), to the output of an uninterrupted run."""
import threading
import time

import pytest
from conftest import killed_when, run_cli
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
    """SNLI dev's first 300 rows as a corpus of three shards."""
    out = tmp_path_factory.mktemp("generate") / "snli"
    run_cli("convert", snli_dev_head, "--preset", "snli", "--shard-rows", 100, "--out", out)
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
    return Corpus.open(str(out / part)).read()


def test_generation_on_ray_actors_reading_their_shards_equals_the_local_engine(endpoint, snli_in_shards, tmp_path,
                                                                               ray_local):
    url, _ = endpoint
    args = _generate(snli_in_shards, url, "--target-labels", "all", "--limit", 150, "--shard-rows", 8)
    local = run_cli(*args, "--out", tmp_path / "local").stdout
    assert "rows in 300 = 150 prompted + 150 beyond limit + 0 input rejects (ok)" in local, local
    on_ray = run_cli(*args, "--out", tmp_path / "ray", "--engine", "ray", "--actors", 2).stdout
    assert "450 prompts -> " in on_ray and "(openai, ray)" in on_ray, on_ray
    rows = _read(tmp_path / "local")
    assert rows.num_rows + _read(tmp_path / "local", "failed").num_rows == 450   # every prompt accounted for
    assert set(rows["label"].to_pylist()) == {"entailment", "neutral", "contradiction"}
    assert rows.equals(_read(tmp_path / "ray"))   # the rows of prompts 296-303 span the first two shards
    assert _read(tmp_path / "local", "failed").equals(_read(tmp_path / "ray", "failed"))
    assert not (tmp_path / "ray" / CHECKPOINTS).exists()


def test_killed_generation_prompts_again_only_its_unfinished_units(endpoint, snli_in_shards, tmp_path):
    url, counted = endpoint
    args = _generate(snli_in_shards, url, "--limit", 120, "--shard-rows", 12)   # 120 prompts: 10 units of 12
    killed = tmp_path / "killed"
    killed_when(args, killed, f"{CHECKPOINTS}/generate/shard-*/{KEY}", at_least=3)
    finished = len(list(killed.glob(f"{CHECKPOINTS}/generate/shard-*/{KEY}")))
    assert 3 <= finished < 10
    _settled(counted)   # the killed run's requests in flight are answered (and counted) before the rerun
    counted.prompts = 0
    assert f"resumed: {finished} finished shard(s)" in run_cli(*args, "--out", killed).stdout
    assert counted.prompts == 120 - 12 * finished   # the finished units' prompts were not sent again
    run_cli(*args, "--out", tmp_path / "straight")
    assert _read(killed).equals(_read(tmp_path / "straight")) and _read(killed).num_rows > 0
    assert not (killed / CHECKPOINTS).exists()
