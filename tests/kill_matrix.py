"""The kill matrix: each stage's overwrite of its own output, cut at its storage calls (the store, or the process,
gone from that call on: ``storage_faults.StorageFaults``), must leave a reader the finished run before it or the
new one, whole (every corpus's rows and every report, times aside), never a mix; the files the user keeps in the
folder where they were; and a rerun whose output and report equal an uninterrupted run's.

``STAGES`` names each built-in stage's command line (and a pipeline's) on small SNLI slices: the old run reads one
slice, the new one another, so that every stage's two outputs differ. ``cut_points`` picks where to cut: a sample
for the suite (the first write, the swap or commit, and one between), every call for ``benchmarks/kill_matrix.py``.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
from click.testing import CliRunner
from storage_faults import StorageFaults

from refinery.io.ownership import RUN_ID_IN_NAME

VOLATILE = {"peak_rss", "finished", "run", "root", "started", "elapsed", "phases", "headline"}   # what differs between
#            equal runs (times: also ``…seconds``; a store's run folder; a headline's time); and what says that a rerun
#            resumed a killed one (``resumed…``)
USER_FILES = {"notes.txt": "mine", "drafts/a.txt": "deep"}                    # what a user keeps in the folder


@dataclass(frozen=True)
class Inputs:
    """The slices the runs read: ``old`` and ``new`` (SNLI dev rows, JSONL, preset snli) and ``evaluation`` (SNLI
    test rows), and a folder for pipeline files."""

    old: str
    new: str
    evaluation: str
    root: str
    generator: str = ""   # a small generator's folder (the generating stages')


def make_tiny_generator(path: str) -> str:
    """A 1-layer causal LM with the packaged generator's tokenizer, randomly initialized, saved at ``path``: the
    generating stages' model in tests and in the kill matrix (seconds to load and run)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from refinery.models.generate import DEFAULT_GENERATOR, hf_folder
    from refinery.models.registry import resolve

    tokenizer = AutoTokenizer.from_pretrained(hf_folder(resolve(DEFAULT_GENERATOR)))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=256, tie_word_embeddings=True,
                                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def slices(root: str, dev: str, test: str, generator: str = "") -> Inputs:
    """The matrix's inputs under ``root``: rows 0–299 and 150–449 of SNLI dev (``dev``: the old run's input, the new
    one's) and 150 rows of SNLI test (``test``)."""
    with open(dev) as fh:
        rows = fh.readlines()
    with open(test) as fh:
        evaluation = fh.readlines()[:150]
    for name, lines in (("old", rows[:300]), ("new", rows[150:450]), ("eval", evaluation)):
        with open(os.path.join(root, f"{name}.jsonl"), "w") as fh:
            fh.write("".join(lines))
    return Inputs(*(os.path.join(root, f"{n}.jsonl") for n in ("old", "new", "eval")), root, generator)


def _pipeline(inputs: Inputs, source: str) -> list:
    path = os.path.join(inputs.root, f"pipeline-{os.path.basename(source)}.yaml")
    with open(path, "w") as fh:
        json.dump({"input": {"paths": [source], "preset": "snli"},
                   "stages": [{"audit": {}}, {"zfilter": {}}, {"weights": {"folds": 2}}]}, fh)
    return ["run", path]


SNLI = ("--preset", "snli")
STAGES: dict[str, Callable[[Inputs, str], list]] = {
    "audit": lambda i, s: ["audit", s, *SNLI],
    "convert": lambda i, s: ["convert", s, *SNLI],
    "zfilter": lambda i, s: ["zfilter", s, *SNLI],
    "compose": lambda i, s: ["compose", s, *SNLI, "--original", i.evaluation],
    "confidence": lambda i, s: ["confidence", s, *SNLI, "--folds", 2],
    "aflite": lambda i, s: ["aflite", s, *SNLI],
    "datamap": lambda i, s: ["datamap", s, *SNLI, "--epochs", 2],
    "dedup": lambda i, s: ["dedup", s, *SNLI],
    "decontaminate": lambda i, s: ["decontaminate", s, *SNLI, "--against", f"test={i.evaluation}", "--ngram", 8],
    "upsample": lambda i, s: ["upsample", s, *SNLI],
    "weights": lambda i, s: ["weights", s, *SNLI, "--folds", 2],
    "leakage": lambda i, s: ["leakage", "--input", f"train={s}", "--input", f"test={i.evaluation}", *SNLI,
                             "--trees", 10],
    "razor": lambda i, s: ["razor", s, *SNLI, "--score-only"],
    "probe": lambda i, s: ["probe", "--train", s, *SNLI, "--eval", f"test={i.evaluation}"],
    "compare": lambda i, s: ["compare", "--train", f"a={s}", *SNLI, "--eval", f"test={i.evaluation}",
                             "--allow-overlap", "--bootstrap", 100],
    "generate": lambda i, s: ["generate", s, *SNLI, "--model", i.generator, "--limit", 4, "--target-labels", "all",
                              "--max-new-tokens", 8, "--batch-size", 2, "--shard-rows", 4],
    "razor --rewrite": lambda i, s: ["razor", s, *SNLI, "--model", i.generator, "--top-k", 4, "--candidates", 2,
                                     "--rounds", 1, "--max-new-tokens", 8],
    "ibadr": lambda i, s: ["ibadr", s, *SNLI, "--generator", i.generator, "--iterations", 1, "--per-iteration", 4,
                           "--max-new-tokens", 16, "--first-epochs", 1, "--tau", 0],
    "pipeline": _pipeline,
}


def _stable(value):
    """``value`` (a report) without what differs between two equal runs (times, memory, run ids)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items()
                if k not in VOLATILE and not k.startswith("resumed") and not k.endswith("seconds")}
    if isinstance(value, list):
        return [_stable(v) for v in value]
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
        record = _stable(json.loads(fs.cat_file(f"{run}/_SUCCESS")))
        found[f"{url.removeprefix(out)}/_SUCCESS"] = record
        for part in [""] + sorted(record.get("parts", [])):
            corpora += _corpora_under(fs, url, part)
            report = _committed(fs, url, part, "report.json")
            if report is not None:
                found[f"{url.removeprefix(out)}/{part}/report.json"] = _stable(json.loads(report))
    if "://" not in out:
        for path in fs.find(root):
            name = path.removeprefix(root)
            if path.endswith("/report.json") and not _hidden(path, root) and not any(
                    name.startswith(k.removesuffix("report.json")) for k in found if k.endswith("report.json")):
                found[name] = _stable(json.loads(fs.cat_file(path)))
    for url in sorted(set(corpora)):
        table = Corpus.open(url).read()
        order = [("id", "ascending")] if "id" in table.column_names else []
        found[url.removeprefix(out) or "/"] = hashlib.sha256(repr(table.sort_by(order).to_pydict()).encode()
                                                             ).hexdigest()
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


@dataclass
class Matrix:
    """One stage's matrix: ``calls`` counted in the uncut overwrite, the cuts made and what each left."""

    stage: str
    calls: int = 0
    cuts: dict = field(default_factory=dict)   # call → "old" | "new"


def run(args: list, out: str, faults: StorageFaults | None = None, at: int | None = None, watch: str = ""):
    """``refinery ARGS --out OUT`` in this process; with ``faults``, its calls under ``watch`` counted (and cut from
    call ``at`` on)."""
    from refinery.cli.main import main

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


def kill_matrix(stage: str, inputs: Inputs, out: str, every: bool | int = False, snapshot=None, restore=None
                ) -> Matrix:
    """The overwrite old → new of ``stage``'s output ``out``, cut at ``cut_points``: each cut ends with exit 2 and
    one line (or 0, where only a clean-up after the commit was cut), leaves the old state or the new one and the
    user's files in place (local folders), and its rerun leaves the new state."""
    args = STAGES[stage]
    local = "://" not in out
    watch = str(Path(out).parent) if local else out
    faults = StorageFaults()
    first = run(args(inputs, inputs.old), out)
    assert first.exit_code == 0, first.output
    if local:
        for name, text in USER_FILES.items():
            Path(out, name).parent.mkdir(parents=True, exist_ok=True)
            Path(out, name).write_text(text)
    old = state(out)
    saved = (snapshot or _snapshot)(out)
    done = run(args(inputs, inputs.new), out, faults, None, watch)
    assert done.exit_code == 0, done.output
    new, calls = state(out), list(faults.calls)
    assert new != old and len(calls) > 3, (stage, calls)
    matrix = Matrix(stage, len(calls))
    for at in cut_points(calls, every):
        (restore or _restore)(saved, out)
        assert state(out) == old, f"{stage}: the old run restored before the cut at call {at}"
        cut = run(args(inputs, inputs.new), out, faults, at, watch)
        found = state(out)
        mixed = each_output_old_or_new(found, old, new)
        assert not mixed, f"{stage}: cut at call {at} ({calls[at - 1]}): {mixed} neither the old run nor the new"
        matrix.cuts[at] = "old" if found == old else "new" if found == new else "old and new steps"
        assert cut.exit_code != 0 or found == new, (stage, at, cut.output)
        assert cut.exit_code in (0, 2) and "Traceback" not in cut.output and (cut.exit_code == 0 or len(
            cut.output.strip().splitlines()[-1:]) == 1 and cut.output.strip().splitlines()[-1].startswith(
            "error: ")), f"{stage}: cut at call {at} ({calls[at - 1]}) ended with exit {cut.exit_code}: {cut.output}"
        if local:
            for name, text in USER_FILES.items():
                assert Path(out, name).read_text() == text, f"{stage}: cut at call {at}: the user's {name}"
        again = run(args(inputs, inputs.new), out)
        assert again.exit_code == 0, (stage, at, again.output)
        rerun = state(out)
        assert rerun == new, (f"{stage}: the rerun after a cut at call {at} ({calls[at - 1]}) differs in "
                              f"{_differences(rerun, new)}")
    return matrix


def _snapshot(out: str) -> str:
    saved = f"{out}.saved"
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(out, saved, symlinks=True)
    return saved


def _restore(saved: str, out: str) -> None:
    parent = Path(out).parent
    for leftover in parent.glob(f"{Path(out).name}.tmp-*"):
        shutil.rmtree(leftover)
    shutil.rmtree(out)
    shutil.copytree(saved, out, symlinks=True)


def _differences(found, expected, path: str = "") -> list[str]:
    """Where two states differ (the first few paths, with both values)."""
    if isinstance(found, dict) and isinstance(expected, dict):
        return [d for k in sorted({*found, *expected}, key=str)
                for d in _differences(found.get(k), expected.get(k), f"{path}/{k}")][:5]
    return [] if found == expected else [f"{path}: {str(found)[:120]} ≠ {str(expected)[:120]}"]
