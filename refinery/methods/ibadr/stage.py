"""The ``ibadr`` stage: iterative bias-aware generation of low-bias pseudo samples (Wang et al. 2023).

Light to import (the verb's options are its config's fields): the loop, an iteration, the audit and the report are in
the sibling modules, imported when the stage runs.
"""
from __future__ import annotations

from refinery.core.features import FeatureConfig
from refinery.methods.ibadr.config import PROFILES, RESOURCES, IbadrConfig
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult


def accounting(report: dict) -> tuple[int, dict]:
    """(rows in, where they went) of a run's report: every input row is in the pool, not sampled, or rejected."""
    return report["original_rows"] + report["not_sampled"] + report["input_rejected"], {
        "in the pool": report["original_rows"], "not sampled": report["not_sampled"],
        "input rejects": report["input_rejected"]}


class IbadrStage(Stage):
    """IBADR: iterative bias-aware generation of low-bias pseudo samples (Wang et al. 2023).

    Writes ``pool/`` (the corpus and the accepted pseudo samples: what a pipeline's next stage reads),
    ``generated/`` (every pseudo sample, its status and reason), ``report/`` and ``checkpoints/``.
    """

    name, Config = "ibadr", IbadrConfig
    needs = ("id", "text_a", "label")
    adds = ("source", "iteration", "indicator", "confidence")
    resources = RESOURCES
    output = Output.POOL
    profiles = PROFILES
    version = 2   # 2: the verdict on the pool and the original's top features measured under its p0 in report/
    one_task = True   # the loop trains on the whole pool: on Ray one task reads and writes it (its generator's
    #                   actors are that task's)

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        """IBADR over the input (or its ``sample_rows``): ``pool/``, ``generated/``, ``report/`` and
        ``checkpoints/`` (see the class); the audit's features are the input's preset's names."""
        from refinery.methods.ibadr.report import console_lines

        from refinery.methods.ibadr.pool import grow_pool
        from refinery.pipeline.filter import verdict_headline

        table, rejects = source.load()
        r = grow_pool(table, rejects, self.config, out, engine=source.engine,
                      features=FeatureConfig().named(source.field_names, source.single_text))
        v = r["verdict"]
        return StageResult(*accounting(r), r, f"{r['generated']:,} pseudo samples, {r['accepted']:,} accepted "
                                              f"-> pool {r['pool_rows']:,}; {verdict_headline(v)}", console_lines(r),
                           () if v["ok"] else tuple(v["warnings"]))
