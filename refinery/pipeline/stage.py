"""The stage contract: every method is a ``Stage`` of one of three kinds.

- **stream**: batch in → kept rows and rejected rows with a reason, then a report (zfilter,
  confidence). The engine may run the row-wise part on workers; the decision runs in order.
- **aggregate**: partial state per batch, merged, finished into a report; the rows pass on
  unchanged (audit).
- **corpus**: whole splits in → a corpus and a report (upsample, weights, leakage, generate,
  compose, razor, ibadr).

A stage has a registered name, a config dataclass (validated on construction, round-tripping
to YAML/JSON through ``pipeline.config``), the columns it needs and adds, and the resources a
worker needs. ``run`` reads ``StageInput`` and publishes its parts under ``out``; the part the
next stage reads is ``output`` (``None``: the stage's input passes on). Config fields named in
``references`` may name an earlier step of the pipeline (``input``, a stage's name, or its folder
``NN-name``) instead of a path; the runner resolves them to that step's output.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping

KINDS = ("stream", "aggregate", "corpus")


@dataclass(frozen=True)
class Resources:
    """What one worker of the stage asks the engine for."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_gb: float = 1.0


@dataclass
class StageInput:
    """The corpora a stage reads (finished corpora in a pipeline; raw files need ``mapping``)."""

    paths: list
    mapping: Mapping | None = None
    opts: ReadOptions = field(default_factory=ReadOptions)
    engine: str = "local"


@dataclass
class StageResult:
    """A finished stage: the rows it read, where each went, and its report."""

    rows_in: int
    parts: dict                 # {"kept": n, "filtered out": n, "input rejects": n}: sums to rows_in
    report: dict
    headline: str = ""          # one line for the terminal

    @property
    def balanced(self) -> bool:
        return self.rows_in == sum(self.parts.values())

    def conservation(self) -> str:
        return conservation(self.rows_in, **self.parts)


def conservation(rows_in: int, **parts: int) -> str:
    """A run's accounting line: every input row is in an output or among the rejects."""
    terms = " + ".join(f"{n:,} {name}" for name, n in parts.items())
    return f"rows in {rows_in:,} = {terms} ({'ok' if rows_in == sum(parts.values()) else 'MISMATCH'})"


class Stage(ABC):
    name: ClassVar[str]
    kind: ClassVar[str]
    Config: ClassVar[type]
    needs: ClassVar[tuple] = ("id", "text_a", "label")
    adds: ClassVar[tuple] = ()
    resources: ClassVar[Resources] = Resources()
    output: ClassVar[str | None] = "kept"
    references: ClassVar[tuple] = ()   # config fields holding corpora: paths or earlier steps' names

    def __init__(self, config=None):
        self.config = config if config is not None else self.Config()
        if not isinstance(self.config, self.Config):
            raise TypeError(f"{self.name}: config must be a {self.Config.__name__}")

    @abstractmethod
    def run(self, source: StageInput, out: str) -> StageResult:
        """Read ``source``, publish the stage's parts under ``out``, return its accounting."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


# name → "module:Class", imported on first use so a pipeline loads only the methods it runs
REGISTRY = {
    "audit": "refinery.methods.audit:AuditStage",
    "zfilter": "refinery.methods.zfilter:ZFilterStage",
    "confidence": "refinery.methods.confidence:ConfidenceStage",
    "upsample": "refinery.methods.upsample:UpsampleStage",
    "weights": "refinery.methods.weights:WeightsStage",
    "leakage": "refinery.methods.leakage:LeakageStage",
    "generate": "refinery.methods.generation:GenerateStage",
    "compose": "refinery.methods.zfilter:ComposeStage",
    "razor": "refinery.methods.razor:RazorStage",
    "ibadr": "refinery.methods.ibadr:IbadrStage",
    "compare": "refinery.methods.compare:CompareStage",
}


def stage_class(name: str) -> type[Stage]:
    if name not in REGISTRY:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(sorted(REGISTRY))}")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)
