"""What a reader finds in an output folder (``state``: every finished run, each corpus as a digest of its rows, each
report without its times), for checks that a run cut anywhere leaves the old output or the new one whole, and that
a rerun equals an uninterrupted run; and a verb run in this process, with its storage calls counted and cut
(``storage_faults``)."""
from __future__ import annotations

import hashlib
import json
import posixpath
import shutil
from pathlib import Path

import fsspec
from click.testing import CliRunner

from refinery.cli.main import main
from refinery.io.ownership import RUN_ID_IN_NAME
from refinery.testing.storage_faults import StorageFaults

VOLATILE = {"peak_rss", "finished", "run", "root", "started", "elapsed", "phases", "headline"}   # what differs between
#            equal runs (times: also ``…seconds``; a store's run folder; a headline's time); and what says that a rerun
#            resumed a killed one (``resumed…``)


def stable(value):
    """``value`` (a report) without what differs between two equal runs (times, memory, run ids)."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items()
                if k not in VOLATILE and not k.startswith("resumed") and not k.endswith("seconds")}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return RUN_ID_IN_NAME.sub("-RUN", value) if isinstance(value, str) else value   # a store's run ids


def state(out: str) -> dict:
    """What a reader finds in ``out``: every finished run in it (a folder holding ``_SUCCESS``: the output, or a
    pipeline's steps) as its record, each corpus of its parts (read through the run's commit) as a digest of its
    rows and each report.json, without their times; a corpus at ``out`` itself (convert's), and on a local disk any
    other report.json (a pipeline's page); missing parts are simply absent."""
    from refinery.io.corpus import Corpus

    fs, root = fsspec.core.url_to_fs(out, skip_instance_cache=True)   # a store's: as it is now
    found: dict = {}
    if not fs.exists(root):
        return found
    runs = sorted(posixpath.dirname(p) for p in fs.find(root) if p.endswith("/_SUCCESS") and not _hidden(p, root))
    corpora = [out] if fs.exists(f"{root}/.refinery/manifest.json") else []
    for run in runs:
        url = out + run.removeprefix(root)
        record = stable(json.loads(fs.cat_file(f"{run}/_SUCCESS")))
        found[f"{url.removeprefix(out)}/_SUCCESS"] = record
        for part in [""] + sorted(record.get("parts", [])):
            corpora += _corpora_under(fs, url, part)
            report = _committed(fs, url, part, "report.json")
            if report is not None:
                found[f"{url.removeprefix(out)}/{part}/report.json"] = stable(json.loads(report))
    if "://" not in out:
        for path in fs.find(root):
            name = path.removeprefix(root)
            if path.endswith("/report.json") and not _hidden(path, root) and not any(
                    name.startswith(k.removesuffix("report.json")) for k in found if k.endswith("report.json")):
                found[name] = stable(json.loads(fs.cat_file(path)))
    for url in sorted(set(corpora)):
        table = Corpus.open(url).read()
        order = [("id", "ascending")] if "id" in table.column_names else []
        table = table.sort_by(order) if order else table   # rows without ids (failed prompts): in written order
        found[url.removeprefix(out) or "/"] = hashlib.sha256(repr(table.to_pydict()).encode()).hexdigest()
    return _by_output(found, [run.removeprefix(root) for run in runs])


def _by_output(found: dict, runs: list) -> dict:
    """``found`` grouped by the output each entry belongs to: the run folder it lies in (``""``: the folder itself;
    a pipeline's steps, each its own output), else its first folder (a pipeline's page)."""
    grouped: dict = {}
    for key, value in found.items():
        owner = max((r for r in runs if key == r or key.startswith(r + "/")), key=len, default=None)
        if owner is None:
            owner = "/" + key.lstrip("/").split("/")[0] if key.count("/") > 1 else ""
        grouped.setdefault(owner, {})[key] = value
    return grouped


def each_output_old_or_new(found: dict, old: dict, new: dict) -> list:
    """The outputs of ``found`` that are neither their old state nor their new one (each output on its own: a
    pipeline commits step by step)."""
    return [g for g in {*found, *old, *new} if found.get(g) not in (old.get(g), new.get(g))]


def _hidden(path: str, root: str) -> bool:
    """A file of refinery's own bookkeeping, not of a finished run: checkpoints, earlier runs on a store, a run's
    temporary folder."""
    rel = path.removeprefix(root)
    return any(f"/{name}/" in rel for name in ("_checkpoints", "_runs")) or ".tmp-" in rel


def _committed(fs, out: str, part: str, name: str) -> bytes | None:
    from refinery.io.committed import committed_url

    url = committed_url(f"{out}/{part}".rstrip("/") if part else out)
    path = fsspec.core.url_to_fs(f"{url}/{name}")[1]
    return fs.cat_file(path) if fs.exists(path) else None


def _corpora_under(fs, out: str, part: str) -> list[str]:
    """The corpora a reader finds in part ``part`` of ``out`` (it, or folders below it, holding a manifest)."""
    from refinery.io.committed import committed_url

    url = committed_url(f"{out}/{part}" if part else out)
    base = fsspec.core.url_to_fs(url)[1]
    if not fs.isdir(base):
        return []
    corpora = []
    for path in fs.find(base):
        if path.endswith("/.refinery/manifest.json") and "/_checkpoints/" not in path:
            below = posixpath.relpath(path.removesuffix("/.refinery/manifest.json"), base)
            corpora.append(posixpath.normpath(posixpath.join(part, below)))
    return [posixpath.join(out, c) if c != "." else out for c in sorted(set(corpora))]


def run(args: list, out: str, faults: StorageFaults | None = None, at: int | None = None, watch: str = ""):
    """``refinery ARGS --out OUT`` in this process; with ``faults``, its calls under ``watch`` counted (and cut from
    call ``at`` on)."""
    if faults is not None:
        faults.watch(watch, at)
    try:
        return CliRunner().invoke(main, [*map(str, args), "--out", out])
    finally:
        if faults is not None:
            faults.stop()


def cut_points(calls: list, every: bool | int) -> list[int]:
    """Where to cut (1-based calls): every one (or every n-th, and the commit's), or the suite's sample — the call
    after the last commit (the folders' exchange, or the write of ``_SUCCESS`` on a store): the new run is
    published, its clean-up and the user's files' return cut."""
    if every:   # every call, or every n-th (and the commit's)
        step = 1 if every is True else int(every)
        return sorted({*range(1, len(calls) + 1, step), *cut_points(calls, False)})
    commits = [i + 1 for i, c in enumerate(calls) if c == "renameat2" or (c.startswith("put_object")
                                                                           and c.endswith("_SUCCESS"))]
    swap = commits[-1] if commits else len(calls)
    return [min(len(calls), swap + 1)]


def save_local(out: str) -> str:
    """A copy of the local folder ``out`` beside it (``OUT.saved``), for ``restore_local``."""
    saved = f"{out}.saved"
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(out, saved, symlinks=True)
    return saved


def restore_local(saved: str, out: str) -> None:
    """``out`` as ``save_local`` saved it, a cut run's temporary folders beside it removed."""
    parent = Path(out).parent
    for leftover in parent.glob(f"{Path(out).name}.tmp-*"):
        shutil.rmtree(leftover)
    shutil.rmtree(out)
    shutil.copytree(saved, out, symlinks=True)


def differences(found, expected, path: str = "") -> list[str]:
    """Where two states differ (the first few paths, with both values)."""
    if isinstance(found, dict) and isinstance(expected, dict):
        return [d for k in sorted({*found, *expected}, key=str)
                for d in differences(found.get(k), expected.get(k), f"{path}/{k}")][:5]
    return [] if found == expected else [f"{path}: {str(found)[:120]} ≠ {str(expected)[:120]}"]
