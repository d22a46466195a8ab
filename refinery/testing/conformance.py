"""``check_stage``: a stage, built-in or a plugin, held to refinery's contract, as scikit-learn's ``check_estimator``
holds an estimator to its own. The stage is run as a user runs it, through its verb (``refinery NAME INPUT OPTIONS
--out OUT``, the one-stage pipeline every front door runs), on small planted corpora (``refinery synth``: shortcut
words planted with their labels), and each promise is checked:

- **accounting**: the run's record says rows in = the sum of its parts, and rows in = the input's rows + its rejects;
- **whole corpora**: every corpus it wrote opens, its manifest's rows are the rows its shards hold;
- **rows of a filter**: kept/ and rejected/ hold each input row once, and every rejected row has a reason;
- **its report a record**: report.json is the JSON of the report record the stage declares (``Stage.report_type``),
  read back entry for entry by its ``from_json``;
- **verdict = a fresh audit**: where its report has a verdict, its after side is what ``refinery audit`` of the
  corpus it passes on prints (each label's max z*, the threshold, the features left over it);
- **engines**: under ``--engine ray`` it writes the same corpora, row for row;
- **killed, then rerun**: a run whose storage is cut at a few of its calls (the first write, the commit, between)
  leaves no finished output or a whole one, and its rerun equals an uninterrupted run;
- **killed mid-overwrite**: over a finished run on other rows, a cut leaves the old output or the new one whole,
  never a mix, and the rerun leaves the new one.

Cuts are made in this process (``storage_faults``): each storage call under the output counted and, from the cut
on, failed, as a killed process or a vanished disk leaves things.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from refinery.testing.run_state import (cut_points, differences, each_output_old_or_new, restore_local, run,
                                        save_local, state)
from refinery.testing.storage_faults import StorageFaults

INPUT, EVALUATION = "{input}", "{evaluation}"   # where a command names its input and an evaluation corpus
PLANTED = ("--planted", "nobody:contradiction:0.9,outdoors:entailment:0.6")


@dataclass(frozen=True)
class Check:
    """One promise checked: its name, whether it holds, and what was found where it does not (or why it did not
    apply)."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class StageCheck:
    """What ``check_stage`` found of a stage: each check in the order made."""

    command: list
    checks: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list:
        return [c for c in self.checks if not c.ok]

    def add(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        return bool(ok)

    def __str__(self) -> str:
        lines = [f"refinery {' '.join(map(str, self.command))}"]
        lines += [f"  {'ok  ' if c.ok else 'FAIL'} {c.name}" + (f": {c.detail}" if c.detail else "") for c in self.checks]
        return "\n".join(lines)


def check_stage(command: list, *, engines: tuple = ("local", "ray"), rows: int = 2000, folder: str | None = None,
                kill: bool = True) -> StageCheck:
    """Run the stage of ``command`` (its verb and options, ``{input}`` where its input goes, e.g. ``["zfilter",
    "{input}", "--k", 20]``; ``{evaluation}`` names an evaluation corpus) on planted corpora of ``rows`` rows, on
    each of ``engines``, killed and rerun (``kill``), and check every promise of the contract (see the module).
    Returns every check; ``assert result.ok, result`` prints what failed."""
    root = folder or tempfile.mkdtemp(prefix="check-stage-")
    old, new, evaluation = (_planted(root, name, rows, seed) for name, seed in
                            (("old", 1), ("new", 2), ("evaluation", 3)))
    result = StageCheck(list(command))

    def args(source: str) -> list:
        return [str(a).replace(INPUT, source).replace(EVALUATION, evaluation) for a in command]

    out = os.path.join(root, "local")
    done = run(args(new), out)
    if not result.add("runs", done.exit_code == 0, "" if done.exit_code == 0 else done.output.strip()[-2000:]):
        return result
    inputs = _inputs(out, args(new), new)
    _accounting(result, out, inputs)
    _whole_corpora(result, out)
    _filter_rows(result, out, inputs)
    _report_record(result, out)
    _verdict(result, out, root)
    uninterrupted = _as_written_at(state(out), out)
    for engine in engines:
        if engine != "local":
            other = os.path.join(root, engine)
            ran = run([*args(new), "--engine", engine], other)
            result.add(f"runs on {engine}", ran.exit_code == 0, ran.output.strip()[-2000:] if ran.exit_code else "")
            if ran.exit_code == 0:
                _same_corpora(result, f"{engine} writes the local engine's corpora and figures", uninterrupted,
                              _as_written_at(state(other), other))
    if kill:
        _killed_and_rerun(result, args(new), os.path.join(root, "killed"), uninterrupted)
        _killed_mid_overwrite(result, args(old), args(new), os.path.join(root, "overwritten"), uninterrupted)
    if folder is None:
        shutil.rmtree(root, ignore_errors=True)
    return result


def _planted(root: str, name: str, rows: int, seed: int) -> str:
    path = os.path.join(root, name)
    if not os.path.exists(os.path.join(path, "_SUCCESS")) and not os.path.exists(os.path.join(path, ".refinery")):
        made = run(["synth", "--rows", rows, *PLANTED, "--seed", seed], path)
        if made.exit_code != 0:
            raise RuntimeError(f"refinery synth failed: {made.output}")
    return path


def _record(out: str) -> dict:
    with open(os.path.join(out, "_SUCCESS")) as fh:
        return json.load(fh)


def _inputs(out: str, args: list, source: str) -> list:
    """The corpora the stage read as its input: those its corpora's manifests name (a composition's original too),
    else those of the command's ``--input NAME=PATH`` options, else ``source``."""
    from refinery.io.splits import parse_split_spec

    for corpus in _corpora(out).values():
        if corpus.manifest.inputs:
            return [parse_split_spec(spec)[1] for spec in corpus.manifest.inputs]
    named = [parse_split_spec(args[i + 1])[1] for i, a in enumerate(args[:-1]) if a == "--input"]
    return named or [source]


def _accounting(result: StageCheck, out: str, inputs: list) -> None:
    from refinery.io.corpus import Corpus

    record = _record(out)
    parts = record.get("accounting") or {}
    result.add("accounting: rows in = its parts", record.get("rows_in") == sum(parts.values()),
               f"rows in {record.get('rows_in')}, parts {parts}")
    given = sum(m.rows + m.rejected for m in (Corpus.open(p).manifest for p in inputs))
    result.add("accounting: rows in = the input's rows and rejects", record.get("rows_in") == given,
               f"rows in {record.get('rows_in')}, the input holds {given}")


def _report_record(result: StageCheck, out: str) -> None:
    from refinery.core.report_record import ReportRecord
    from refinery.pipeline.stage import stage_class

    record = _record(out)
    path = os.path.join(out, os.path.dirname(record.get("report_file") or ""), "report.json")
    if not record.get("report_file") or not os.path.exists(path):
        return
    with open(path) as fh:
        data = json.load(fh)
    kind = stage_class(record["stage"]).report_type
    declared = kind is not ReportRecord
    back = json.loads(json.dumps(kind.from_json(data).to_json(), default=str)) if declared else None
    result.add("its report.json is the record it declares", declared and back == data,
               f"{kind.__name__} is no stage's record" if not declared else
               f"read back by {kind.__name__}: " + "; ".join(sorted(str(k) for k in data.keys() ^ back.keys()) or
                                                          [k for k in data if data[k] != back.get(k)]))


def _corpora(out: str) -> dict:
    """{part: Corpus} of the corpora a finished stage folder holds."""
    from refinery.io.corpus import Corpus, stage_parts

    return {os.path.basename(p): Corpus.open(p) for p in stage_parts(out)}


def _whole_corpora(result: StageCheck, out: str) -> None:
    broken = []
    for part, corpus in _corpora(out).items():
        try:
            read = corpus.read().num_rows
        except Exception as e:   # a shard missing or unreadable: what the check is for
            broken.append(f"{part}: {type(e).__name__}: {e}")
            continue
        if read != corpus.manifest.rows:
            broken.append(f"{part}: manifest says {corpus.manifest['rows']} rows, its shards hold {read}")
    result.add("every corpus it wrote is whole", not broken, "; ".join(broken))


def _filter_rows(result: StageCheck, out: str, inputs: list) -> None:
    """A filter's kept/ and rejected/: each input row once, each rejected row with a reason."""
    from refinery.io.corpus import Corpus

    parts = _corpora(out)
    if "kept" not in parts or "rejected" not in parts:
        return
    given = [i for path in inputs for i in Corpus.open(path).read(["id"])["id"].to_pylist()]
    kept = parts["kept"].read(["id"])["id"].to_pylist()
    rejected = parts["rejected"].read()
    ids = kept + rejected["id"].to_pylist()
    result.add("a filter's kept/ and rejected/ hold each input row once", sorted(ids) == sorted(given),
               f"{len(kept)} kept + {rejected.num_rows} rejected of {len(given)} rows, {len(set(ids))} distinct")
    reasons = rejected["reason"].to_pylist() if "reason" in rejected.column_names else [None] * rejected.num_rows
    missing = sum(not r for r in reasons)
    result.add("every rejected row has its reason", not missing, f"{missing} of {len(reasons)} without one")


def _verdict(result: StageCheck, out: str, root: str) -> None:
    """The verdict's after side against ``refinery audit`` of the corpus the stage passes on."""
    from refinery.io.corpus import stage_parts

    report_file = os.path.join(out, "report", "report.json")
    if not os.path.exists(report_file):
        return
    with open(report_file) as fh:
        verdict = json.load(fh).get("verdict")
    passed_on = [p for p in stage_parts(out) if os.path.basename(p) in (_record(out).get("passes_on") or
                                                                          ("kept", "corpus", "pool"))]
    if not verdict or not passed_on:
        return
    audit_out = os.path.join(root, "fresh-audit")
    audited = run(["audit", passed_on[0]], audit_out)
    if not result.add("its output can be audited", audited.exit_code == 0,
                      audited.output.strip()[-500:] if audited.exit_code else ""):
        return
    with open(os.path.join(audit_out, "report", "report.json")) as fh:
        fresh = json.load(fh)
    found = []
    if not math.isclose(verdict["threshold"], fresh["threshold"], abs_tol=1e-4):
        found.append(f"threshold {verdict['threshold']} ≠ {fresh['threshold']}")
    for label, m in verdict["max_z"].items():
        after, audit = m.get("after"), fresh["max_z"].get(label)
        if (after is None) != (audit is None) or (after is not None and not math.isclose(after, audit, abs_tol=1e-3)):
            found.append(f"max z* of {label}: {after} ≠ {audit}")
    if verdict.get("remaining_total") != fresh.get("significant"):
        found.append(f"features over the threshold {verdict.get('remaining_total')} ≠ {fresh.get('significant')}")
    result.add("its verdict is the audit a user runs next", not found, "; ".join(found))


ENGINE_KEYS = {"engine", "_SUCCESS"}   # what names the engine a run ran on (a report's, the run's record)


def _results_of(found: dict) -> dict:
    """A ``state``'s corpora (their digests) and reports' figures, by output and part, without what names the
    engine."""
    def without_engine(value):
        if isinstance(value, dict):
            return {k: without_engine(v) for k, v in value.items() if k not in ENGINE_KEYS}
        return [without_engine(v) for v in value] if isinstance(value, list) else value

    return {k: without_engine(v) for group in found.values() for k, v in group.items()
            if not k.endswith("_SUCCESS")}


def _same_corpora(result: StageCheck, name: str, expected: dict, found: dict) -> None:
    a, b = _results_of(expected), _results_of(found)
    result.add(name, a == b and bool(a), "; ".join(differences(b, a)) or ("nothing written" if not a else ""))


def _as_written_at(found, out: str):
    """A ``state`` with the output's own folder named ``OUT`` where a report names it (a composition's parts), so
    that outputs written to two folders compare."""
    if isinstance(found, dict):
        return {k: _as_written_at(v, out) for k, v in found.items()}
    if isinstance(found, list):
        return [_as_written_at(v, out) for v in found]
    return found.replace(out, "OUT") if isinstance(found, str) else found


def _killed_and_rerun(result: StageCheck, args: list, out: str, uninterrupted: dict) -> None:
    """A first run cut at a few of its storage calls: nothing finished or the whole output, and a rerun equal to an
    uninterrupted run."""
    faults, watch = StorageFaults(), os.path.dirname(out)
    shutil.rmtree(out, ignore_errors=True)
    run(args, out, faults, None, watch)
    calls = list(faults.calls)
    bad = []
    for at in _sample(calls):
        shutil.rmtree(out, ignore_errors=True)
        run(args, out, faults, at, watch)
        left = _as_written_at(state(out), out)
        if left and each_output_old_or_new(left, {}, uninterrupted):
            bad.append(f"cut at call {at} ({calls[at - 1]}) left part of an output")
        again = run(args, out)
        rerun = _as_written_at(state(out), out)
        if again.exit_code != 0 or rerun != uninterrupted:
            bad.append(f"the rerun after a cut at call {at} ({calls[at - 1]}): exit {again.exit_code}, "
                       + "; ".join(differences(rerun, uninterrupted)))
    result.add(f"killed at {len(_sample(calls))} of its {len(calls)} storage calls, its rerun equals an "
               "uninterrupted run", not bad, "; ".join(bad))


def _killed_mid_overwrite(result: StageCheck, old_args: list, new_args: list, out: str, uninterrupted: dict
                          ) -> None:
    """Over a finished run on other rows, a run cut at a few of its storage calls leaves the old output or the new
    one whole, and its rerun the new one."""
    faults, watch = StorageFaults(), os.path.dirname(out)
    shutil.rmtree(out, ignore_errors=True)
    run(old_args, out)
    old, saved = state(out), save_local(out)
    run(new_args, out, faults, None, watch)
    new, calls = state(out), list(faults.calls)
    bad = []
    for at in _sample(calls):
        restore_local(saved, out)
        cut = run(new_args, out, faults, at, watch)
        mixed = each_output_old_or_new(state(out), old, new)
        if mixed:
            bad.append(f"cut at call {at} ({calls[at - 1]}) left neither the old output nor the new: {mixed}")
        if cut.exit_code not in (0, 2) or "Traceback" in cut.output:
            bad.append(f"cut at call {at} ended with exit {cut.exit_code}: {cut.output.strip()[-300:]}")
        again = run(new_args, out)
        if again.exit_code != 0 or state(out) != new:
            bad.append(f"the rerun after a cut at call {at}: " + "; ".join(differences(state(out), new)))
    result.add(f"killed mid-overwrite at {len(_sample(calls))} of its {len(calls)} storage calls, the old output or "
               "the new is whole", not bad, "; ".join(bad))
    _same_corpora(result, "an overwrite writes what a first run writes", uninterrupted, _as_written_at(new, out))


def _sample(calls: list) -> list[int]:
    """Where to cut: the first storage call, one half-way, and the commit's next (``run_state.cut_points``)."""
    return sorted({1, max(1, len(calls) // 2), *cut_points(calls, False)}) if calls else []
