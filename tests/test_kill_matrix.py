"""The kill matrix (issue 64) in the suite: every built-in stage's overwrite of its own output, and a pipeline's,
cut at a sample of its storage calls (``refinery.testing.run_state.cut_points``) on the local disk, and two stages'
on the S3 server, leaves the old run or the new one whole, the user's files in place, and a rerun equal to an uninterrupted run.
``benchmarks/kill_matrix.py`` cuts at every call."""
from __future__ import annotations

import pytest
from conftest import SNLI_DEV, SNLI_TEST
from kill_matrix import STAGES, kill_matrix, slices
from test_ibadr import tiny_generator  # noqa: F401 (the fixture)
from test_remote import s3  # noqa: F401 (the S3 server on loopback)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_generator):  # noqa: F811
    return slices(str(tmp_path_factory.mktemp("kill_matrix")), SNLI_DEV, SNLI_TEST, tiny_generator)


@pytest.mark.parametrize("stage", list(STAGES))
def test_an_overwrite_cut_leaves_the_old_run_or_the_new_and_the_rerun_is_an_uninterrupted_one(stage, inputs,
                                                                                               tmp_path):
    matrix = kill_matrix(stage, inputs, str(tmp_path / "out"))
    assert "new" in matrix.cuts.values(), matrix


@pytest.mark.parametrize("stage", ["upsample", "dedup"])
def test_an_s3_overwrite_cut_leaves_the_old_run_or_the_new(stage, inputs, s3):  # noqa: F811
    import fsspec

    store = fsspec.filesystem("s3", skip_instance_cache=True)

    def copy(source: str, target: str):   # object by object, through the server (see test_one_commit)
        for key in store.find(source):
            store.copy(key, target + key.removeprefix(source))

    def snapshot(out: str) -> str:
        copy(out.removeprefix("s3://"), "bucket/saved")
        return "bucket/saved"

    def restore(saved: str, out: str) -> None:
        store.rm(out.removeprefix("s3://"), recursive=True)
        copy(saved, out.removeprefix("s3://"))

    matrix = kill_matrix(stage, inputs, f"s3://bucket/{stage}", snapshot=snapshot, restore=restore)
    assert "new" in matrix.cuts.values(), matrix
