"""What a call returns: a stage's ``Result`` (its accounting, its report as data, its refined corpus in the
caller's kind, the rows it set aside), and a pipeline's ``PipelineResult``. A result reads its stage's folder
lazily, and refuses to once a later run replaced it. Which result a stage gets follows from what the stage
published, never from its name: an ``AuditResult`` reads a statistics table, a ``CompareResult`` a
comparison's accuracies."""
from __future__ import annotations

import dataclasses
import html
import json
import re
import warnings
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.api.errors import in_python_terms
from refinery.api.folders import CallFolder
from refinery.api.inputs import Source, kind_of
from refinery.api.returns import as_kind, in_callers_columns, to_hf
from refinery.io.committed import committed_url
from refinery.io.corpus import Corpus, is_corpus
from refinery.io.records import MANIFEST
from refinery.io.hf import datasets_package
from refinery.io.location import get_fs, join
from refinery.messages import Refusal, text
from refinery.pipeline.config import InputSpec, PipelineSpec
from refinery.pipeline.runner import PipelineRun, stage_input
from refinery.pipeline.stage import Output, StageResult, conservation, set_column, stage_class
from refinery.core.records import Comparison, StageReport
from refinery.core.report_record import ReportRecord
from refinery.report.page import scoped_style


@dataclass(repr=False)
class Result:
    """A finished stage: where each row went, its report, and its refined corpus in the caller's kind."""

    stage: str
    out: str                       # the stage's folder
    rows_in: int
    parts: dict                    # {"kept": n, "filtered out": n, "input rejects": n}: sums to rows_in
    _: dataclasses.KW_ONLY
    headline: str
    corpus: str | None             # the refined corpus's folder; None when the rows pass on unchanged
    source: Source
    input: InputSpec
    warnings: tuple = ()
    report_file: str = "report/report.html"
    _report: dict | None = None
    _stamp: bytes | None = None
    splits: tuple = ()       # the named splits the stage read
    untouched: tuple = ()    # the named splits it passed through untouched

    @classmethod
    def of(cls, name: str, folder: str, result: StageResult, source: Source, spec: InputSpec, *, output: Output,
           splits: tuple = (), untouched: tuple = ()) -> "Result":
        """The result of stage ``name``'s run into ``folder`` (``output``: what the stage passes on): of the kind
        that reads what the stage published (the first subclass that ``reads`` it), else a plain ``Result``."""
        corpus = None if output is Output.INPUT else output.next_input(folder, "")
        fields = dict(stage=name, out=folder, rows_in=result.rows_in, parts=dict(result.parts),
                      headline=text(result.headline, "python"), corpus=corpus, source=source, input=spec,
                      warnings=tuple(in_python_terms(w, source) for w in result.warnings), report_file=result.report_file,
                      _report=_as_published(result.report), splits=tuple(splits), untouched=tuple(untouched))
        plain = cls(**fields)
        kind = next((c for c in cls.__subclasses__() if c.reads(plain)), None)
        return kind(**{**fields, "_report": plain._report}) if kind else plain

    @classmethod
    def reads(cls, result: "Result") -> bool:
        """Whether this kind of result reads what ``result``'s stage published."""
        return False

    def stamp(self) -> bytes | None:
        """The run's mark in its folder (``_SUCCESS``; a corpus's manifest), to tell this run from a later one."""
        for name in ("_SUCCESS", MANIFEST):
            if self._exists(name):
                fs, path = get_fs(self._url(name), self._storage)
                return fs.cat_file(path)
        return None

    def _current(self) -> "Result":
        """This result, if its folder still holds its run (a later call with the same ``out`` replaces it)."""
        if self._stamp is not None and self.stamp() != self._stamp:
            raise RuntimeError(f"{self.out} now holds a later run than this result's; use that run's result, "
                               "or give each run an out= of its own")
        return self

    @property
    def accounting(self) -> str:
        """``rows in N = a kept + b filtered out + … (ok)``."""
        return conservation(self.rows_in, **self.parts)

    @property
    def report(self) -> dict:
        """The stage's report as data (its ``report.json``)."""
        if self._report is None:
            names = ("report/report.json", "report/summary.json", "report.json")
            self._current()._report = next((self._json(f) for f in names if self._exists(f)), {})
        return self._report

    def to_arrow(self, canonical: bool = False) -> pa.Table:
        """The refined corpus (for a stage that passes its rows on unchanged: the input) as a pyarrow Table.
        For in-memory data, in the caller's columns and types, the splits passed through untouched included
        (named splits in a ``split`` column). ``canonical=True``: as refinery holds it, in refinery's columns
        (``id``, ``text_a``, ``text_b``, ``label`` as text, …), the splits the stage read only; data given as
        paths always comes back so."""
        if self._current().corpus is not None:
            table = Corpus.open(self.corpus, self._storage).read()
        else:
            table = stage_input(self.input, self.input.read_options()).load()[0]
        if canonical or self.source.kind == "path":
            return table
        pieces = [in_callers_columns(table, self.source, self.input.mapping())]
        for split in self.untouched:
            pieces.append(self._untouched(split))
        return pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]

    def _untouched(self, split: str) -> pa.Table:
        """A split the stage passed through, as the caller gave it (as refinery wrote it to Parquet), in a
        ``split`` column."""
        kind, _ = self.source.parts[split]
        if kind == "path":
            spec = dataclasses.replace(self.input, splits={split: self.source.splits[split]}, paths=[])
            return in_callers_columns(stage_input(spec, spec.read_options()).load()[0], self.source, spec.mapping())
        table = pa.concat_tables([pq.read_table(p) for p in self.source.splits[split]])
        return set_column(table, "split", pa.array([split] * table.num_rows, pa.string()))

    def to_pandas(self, canonical: bool = False):
        return self.to_arrow(canonical).to_pandas()

    def to_polars(self, canonical: bool = False):
        import polars
        return polars.from_arrow(self.to_arrow(canonical))

    def to_hf(self, canonical: bool = False):
        """A ``datasets.Dataset`` (a ``DatasetDict`` when every row carries a named split)."""
        return to_hf(self.to_arrow(canonical), None if canonical else self.source.features)

    @property
    def data(self):
        """The refined corpus in the kind of the data given, with the caller's columns and types: a DataFrame
        for a DataFrame, a ``DatasetDict`` for a ``DatasetDict`` (the splits the stage did not read as they
        were given), …; for paths, the corpus folder's path (for a stage that passes its rows on: the input)."""
        if self.source.kind == "path":
            return self.corpus if self.corpus is not None else self.source.given
        if self.corpus is None:
            return self.source.given
        if not self.source.parts or self.source.split_column:
            return as_kind(self.to_arrow(), self.source.kind, self.source.features)
        read = self.to_arrow(canonical=True)
        read = in_callers_columns(read, self.source, self.input.mapping())
        parts = {}
        for split, (kind, part) in self.source.parts.items():
            if split in self.untouched:
                parts[split] = part
                continue
            rows = read.filter(pc.equal(read["split"], split)) if "split" in read.column_names else read
            rows = rows.drop_columns([c for c in ("split",) if c in rows.column_names])
            parts[split] = as_kind(rows, "arrow" if kind == "path" else kind, self.source.features)
        return datasets_package().DatasetDict(parts) if kind_of(self.source.given) == "hf_dict" else parts

    @property
    def rejected(self):
        """The rows the stage set aside, each with its ``reason``, as a DataFrame (none: no rows), in the
        caller's columns as ``data`` is."""
        folder = join(self._current().out, "rejected")
        table = Corpus.open(folder, self._storage).read() if is_corpus(folder, self._storage) else pa.table({})
        if table.num_rows and self.source.kind != "path":
            table = in_callers_columns(table, self.source, self.input.mapping())
        return table.to_pandas()

    @property
    def input_rejects(self):
        """The input rows refused on reading (file, line, column, reason, raw text), as a DataFrame."""
        if self._current().corpus is not None:
            return Corpus.open(self.corpus, self._storage).read_rejects().to_pandas()
        return stage_input(self.input, self.input.read_options()).load()[1].to_pandas()

    @property
    def report_path(self) -> str | None:
        return self._url(self.report_file) if self.report_file else None

    @property
    def splits_line(self) -> str:
        """Which named splits the stage read and which it passed through ("" for data without splits)."""
        if not self.untouched:
            return f"split {', '.join(self.splits)}" if self.splits else ""
        return f"split {', '.join(self.splits)}; {', '.join(self.untouched)} untouched"

    def __repr__(self) -> str:
        splits = f" [{self.splits_line}]" if self.splits_line else ""
        return f"<refinery {self.stage}{splits}: {self.accounting}; {self.out}>"

    def _repr_html_(self) -> str:
        """The report's own HTML (the body of ``report.html``) under a line with the accounting."""
        splits = f" [{html.escape(self.splits_line)}]" if self.splits_line else ""
        head = (f"<p><b>refinery {html.escape(self.stage)}</b>{splits}: {html.escape(self.accounting)}<br>"
                f"<code>{html.escape(self.out)}</code></p>")
        body = _report_body(self.report_path, self._storage) if self.report_path and self._exists(self.report_file) \
            else ""
        return f'<div class="refinery-report">{head}{body}</div>'

    @property
    def _storage(self) -> dict:
        return dict(self.input.storage_options)

    def _url(self, name: str) -> str:
        """The file ``name`` of the stage's folder, in the run committed there (``committed_url``)."""
        return committed_url(join(self.out, name), self._storage)

    def _exists(self, name: str) -> bool:
        fs, path = get_fs(self._url(name), self._storage)
        return fs.exists(path)

    def _json(self, name: str) -> dict:
        fs, path = get_fs(self._url(name), self._storage)
        return json.loads(fs.cat_file(path))


class AuditResult(Result):
    """A stage that published a statistics table (an audit): ``stats`` (every feature's n, count, p̂ and z* per
    label), ``top(k)`` and ``threshold``."""

    STATS = "report/stats.parquet"

    @classmethod
    def reads(cls, result: Result) -> bool:
        return result._exists(cls.STATS)

    @property
    def stats(self):
        """Features × labels with n (rows with the feature), count, p̂(label|feature) and z*, as a DataFrame."""
        fs, path = get_fs(join(self._current().out, self.STATS), self._storage)
        with fs.open(path, "rb") as fh:
            return pq.read_table(fh).to_pandas()

    def top(self, k: int = 10, label: str | None = None):
        """The ``k`` features of highest z* per label (or of ``label``), ranked, as a DataFrame."""
        stats = self.stats
        if label is not None:
            if label not in set(stats["label"]):
                raise Refusal(f"no label {label!r}; labels: {', '.join(sorted(set(stats['label'])))}",
                              code="invalid-setting")
            stats = stats[stats["label"] == label]
        top = (stats[stats["feature"] != "null"].sort_values(["label", "z"], ascending=[True, False], kind="stable")
               .groupby("label", sort=True).head(k).reset_index(drop=True))
        top.insert(0, "rank", top.groupby("label").cumcount() + 1)
        return top[["label", "rank", "feature", "z", "n", "count", "p_hat"]]

    @property
    def threshold(self) -> float:
        """The Bonferroni-corrected z* a feature must exceed to count as a bias."""
        return StageReport.from_json(self.report).audit.threshold


class CompareResult(Result):
    """A stage whose report compares training corpora (compare): ``table``, the accuracy of each training corpus
    on each evaluation set."""

    @classmethod
    def reads(cls, result: Result) -> bool:
        return StageReport.from_json(result.report).comparison is not None

    @property
    def table(self):
        """One row per (evaluation set, training corpus): mean accuracy over seeds and its std, the gain on the
        baseline with its paired-bootstrap 95% interval, and the evaluation set's majority-class accuracy."""
        import pandas as pd

        def row(r) -> dict:
            low, high = map(_number, r.ci95 or (None, None))
            return {"eval": r.eval, "train": r.train, "accuracy": r.accuracy, "std": _number(r.std),
                    "gain": _number(r.gain), "gain_ci_low": low, "gain_ci_high": high, "majority": r.majority}

        return pd.DataFrame([row(r) for r in Comparison.from_json(self.report).rows])


def _number(value) -> float:
    """A figure of a table: NaN where there is none (one seed has no std; the baseline no gain)."""
    return float("nan") if value is None else value



def stage_result(name: str, result: StageResult, source: Source, spec_in: InputSpec, folder: CallFolder, *,
                 output: Output, stage_folder: str | None = None, splits: tuple = ((), ()),
                 result_class: type = Result, caller_depth: int = 3) -> Result:
    """The ``Result`` of stage ``name``'s run into ``stage_folder`` (default: the call's ``out``; ``output``:
    what the stage passes on). It holds the call's folder, so that the scratch folder lives as long as the
    result; the stage's warnings are warned in the API's words, at the caller's line (``caller_depth``: the calls
    between it and here)."""
    stage_folder = stage_folder or folder.out
    read, untouched = splits
    done = result_class.of(name, stage_folder, result, source, spec_in, output=output, splits=read,
                           untouched=untouched)
    done._folder = folder
    if source.kind == "path" and done.corpus is not None and stage_folder.startswith(folder.scratch):
        folder.keep_until_exit()   # result.data is a path into it
    done._stamp = done.stamp()
    for warning in done.warnings:
        warnings.warn(f"{name}: {warning}",
                      stacklevel=caller_depth + 1)
    return done


class NoStage(Refusal, KeyError):
    """A stage a pipeline's result does not hold (``result["zfiltre"]``): a ``KeyError``, as a mapping's is, and a
    refusal of an unknown name."""

    code = "unknown-setting"


class PipelineResult:
    """A finished pipeline: each stage's ``Result`` (``result["zfilter"]`` or ``result[2]``) and the final corpus."""

    def __init__(self, done: PipelineRun, source: Source, spec: PipelineSpec, folder: CallFolder):
        self.out, self._folder, self._source = done.out, folder, source
        self._storage = dict(spec.input.storage_options)
        self.stages: dict[str, Result] = {}
        for step, stage_spec in zip(done.stages[1:], spec.stages):
            output = stage_class(stage_spec.name)(stage_spec.config).output
            self.stages[step.folder] = stage_result(stage_spec.name, step.result, source, spec.input, folder,
                                                    output=output, stage_folder=join(done.out, step.folder))
        self.final = self.stages[done.stages[-1].folder] if len(done.stages) > 1 else None
        self.lines = [f"{s.folder}: {s.status}, {s.result.conservation()}" for s in done.stages]

    def __getitem__(self, key):
        if isinstance(key, int):
            return list(self.stages.values())[key]
        matches = [r for folder, r in self.stages.items() if key in (folder, r.stage)]
        if not matches:
            raise NoStage(f"no stage {key!r}; stages: {', '.join(self.stages)}")
        return matches[-1]

    @property
    def data(self):
        """The pipeline's final corpus in the caller's kind (see ``Result.data``)."""
        corpus = next((r for r in reversed(self.stages.values()) if r.corpus is not None), None)
        return corpus.data if corpus else self._source.given

    def __repr__(self) -> str:
        return f"<refinery pipeline: {len(self.stages)} stage(s); {self.out}>"

    @property
    def receipt(self) -> dict:
        """The pipeline report as data (``pipeline/receipt.json``): each step's rows, labels, max z* and the
        input's top features' z*."""
        fs, path = get_fs(join(self.out, "pipeline", "receipt.json"), self._storage)
        return json.loads(fs.cat_file(path))

    def _repr_html_(self) -> str:
        rows = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines)
        body = _report_body(join(self.out, "pipeline", "report.html"), self._storage)
        return (f'<div class="refinery-report"><b>refinery pipeline</b> <code>{html.escape(self.out)}</code>'
                f"<ul>{rows}</ul>{body}</div>")


def _as_published(report: ReportRecord) -> dict | None:
    """A stage's report as its ``report.json`` holds it: in-memory inputs named as what they hold."""
    from refinery.io.scratch import in_memory_names

    data = report.to_json()
    return json.loads(in_memory_names(json.dumps(data, default=str))) if data else None


def _report_body(report: str, storage_options: dict) -> str:
    """A report page's body without its title: what a notebook shows under a result's own line."""
    fs, path = get_fs(report, storage_options)
    match = re.search(r"<body>(.*)</body>", fs.cat_file(path).decode(), re.S)
    body = re.sub(r"<h1>.*?</h1>", "", match.group(1) if match else "", count=1, flags=re.S)
    return f"<style>{scoped_style('.refinery-report')}</style>{body}"

