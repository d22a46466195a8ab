"""The Python API: ``import refinery as rf``, one function per stage over the data a notebook holds.

``rf.audit(data, k=20)``, ``rf.zfilter(data, k=20)``, … take ``data`` as any of: a path, URL, glob or list of
them; a pandas or polars DataFrame; a pyarrow Table, RecordBatch, RecordBatchReader or Dataset; a Hugging Face
``Dataset``; a Ray Dataset; or named splits: a ``DatasetDict`` or ``{split: any of these}``. The keyword
arguments are the stage config's keys, named as in a pipeline file (a nested config also by its options'
flat names, as on the CLI: ``band_min=``), with the input's (``preset=``, ``map=``, ``labels=``, …): one
``from_dict`` builds and validates them for the CLI, the pipeline file and this API alike. The stage runs
through the same runner as its verb; in-memory data is written as Parquet first, into the call's folder.

Each function returns a ``Result``: the accounting, the report as data, the refined corpus in the caller's
kind (``result.data``; ``to_pandas()``, ``to_arrow()``, ``to_polars()``, ``to_hf()``), the rows set aside
with their reasons, and the report's HTML inline in Jupyter.

Every registered stage has its function, made when it is first asked for: a stage registered after this
module was imported too, and a hyphenated name with underscores (stage ``my-filter`` is ``rf.my_filter``).
The modules: ``inputs`` (the caller's data as the runner's input), ``returns`` (the rows handed back as they
came), ``keywords`` (keyword arguments as configs), ``errors`` (messages in the API's words), ``folders``
(where a call writes), ``results`` and ``calls``.
"""
from refinery.api.calls import SplitsNotice, read, run, stage_function
from refinery.api.results import AuditResult, CompareResult, PipelineResult, Result
from refinery.pipeline.stage import stage_class, stage_names

__all__ = ["read", "run", "Result", "AuditResult", "CompareResult", "PipelineResult", "SplitsNotice"]


def _stage_named(name: str) -> str | None:
    """The registered stage whose function is ``name`` (its name with hyphens as underscores)."""
    return next((stage for stage in stage_names() if stage.replace("-", "_") == name), None)


def public_names() -> list[str]:
    """What ``rf.`` offers now: ``__all__`` and the function of every stage registered so far."""
    return [*__all__, *(n for n in (s.replace("-", "_") for s in stage_names()) if n not in __all__)]


def __getattr__(name: str):
    """``rf.audit``, ``rf.zfilter``, …: the function of the stage registered under ``name`` when it is asked for."""
    stage = _stage_named(name)
    if stage is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return stage_function(stage, stage_class(stage))


def __dir__() -> list[str]:
    return sorted({*globals(), *public_names()})
