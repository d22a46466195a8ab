"""Wu et al. 2022 §4.2, the filterings of a composition: ``zaug`` = D0 ∪ Z(G | D0); ``parz`` = Z(D0) ∪ Z(G);
``seqz`` = Z(D0) ∪ Z(G | Z(D0)).

Each filtering is a ``ZFilterStage`` run under OUT/stages with its own report (``z_original``, ``z_generated``;
Z-Aug keeps D0 whole, read as it is). The composition's kept/ is D0's rows (as kept by its
filtering, or whole) and then G's; rejected/ D0's rows filtered out and then G's; each row's ``source`` is
``original`` or ``generated`` where it has none. ``ComposeStage`` streams G's rows itself, so what this module
hands it is G's decisions, D0's rows that lead each part, and every row counted per part for the report.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.features import FeatureConfig
from refinery.core.row_features import row_feature_lists
from refinery.core.incremental_counts import IncrementalCounts
from refinery.methods.zfilter.decisions import Decisions
from refinery.methods.zfilter.config import PARTS, ZFilterConfig
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage_input import StageInput


@dataclass
class Composition:
    """A composition's filterings, done: G's rejected rows (``decisions``), D0's rows as kept and rejected (each a
    ``StageInput``: its filtering's corpus, or D0 itself where it is kept whole; ``d0_rejected`` None then), every
    row counted per part (``audit``) and the input rejects per part."""

    kind: str
    decisions: Decisions
    d0_kept: StageInput
    d0_rejected: StageInput | None
    audit: "PartCounts"
    input_rejects: dict

    def leading(self, part: str) -> Iterator[tuple[pa.Table | None, pa.Table | None]]:
        """D0's rows that lead the composition's ``part`` (kept, with D0's input rejects; rejected), each with
        ``source`` original where it has none."""
        d0 = self.d0_kept if part == "kept" else self.d0_rejected
        if d0 is None:
            return
        for batch in d0.iter_batches():
            if batch.rows.num_rows:
                yield with_source(_untagged(batch.rows), "original"), None
            if part == "kept" and batch.rejects.num_rows:
                yield None, batch.rejects


def compose(kind: str, original: list, source: StageInput, out: StageOutput, config: ZFilterConfig,
            zfilter_stage: type) -> Composition:
    """The filterings of the composition ``kind`` of D0 (``original``) and G (``source``) under ``out``/stages,
    each a run of ``zfilter_stage`` (the zfilter stage's class); Z-Aug's D0, kept whole, is read as it is."""
    stages = out.part("stages")

    def corpus(paths: list, mapping=None) -> StageInput:
        return StageInput({"": list(paths)}, mapping, source.opts, source.engine, source.field_names,
                          source.single_text)

    d0 = corpus(original, source.mapping)
    if kind == "zaug":
        d0_kept, d0_rejected, seed = d0, None, tuple(original)
    else:
        z_original = stages.part("z_original", original, {})
        _filtering(zfilter_stage(replace(config, seed_corpus=())), d0, z_original)
        d0_kept, d0_rejected = corpus([z_original.written("kept")]), corpus([z_original.written("rejected")])
        seed = () if kind == "parz" else (z_original.written("kept"),)
    g_out = stages.part("z_generated", source.paths, {})
    g = _filtering(zfilter_stage(replace(config, seed_corpus=seed)), source, g_out)
    g_kept, g_rejected = corpus([g_out.written("kept")]), corpus([g_out.written("rejected")])
    kept = [(d0_kept, "original"), (g_kept, "generated")] if kind == "parz" else [(g_kept, "generated")]
    rejected = [(d0_rejected, "original")] * (d0_rejected is not None) + [(g_rejected, "generated")]
    audit, input_rejects = _count(kept, rejected, [(d0_kept, "original"), (g_kept, "generated")], config)
    return Composition(kind, g.decisions, d0_kept, d0_rejected, audit, input_rejects)


def _filtering(stage, source: StageInput, out: StageOutput):
    """One z-filtering of the composition, a zfilter ``stage`` run into ``out``; the stage, with its decisions."""
    out.settings = {"zfilter": stage.config.to_dict()}
    stage.run(source, out)
    return stage


class PartCounts:
    """Feature–label counts of a composition's rows read (``input``) and kept (``kept``), per part (original,
    generated) and together, on one vocabulary: every part is audited on the same features."""

    def __init__(self, labels: list, features: FeatureConfig):
        self.features = features
        first = IncrementalCounts(labels)
        self.counts = {(side, part): IncrementalCounts(labels, vocabulary=first)
                       for side in ("input", "kept") for part in PARTS}

    def add(self, table: pa.Table, parts: np.ndarray, kept: bool) -> None:
        """Count ``table``'s rows (``parts``: each row's part) as read and, when ``kept``, as kept."""
        first = self.counts["input", "together"]
        feats = row_feature_lists(table, self.features)
        rows = pc.list_parent_indices(feats).to_numpy()
        fids = first.ids(pc.list_flatten(feats))
        labels = table["label"].to_pylist()
        lab = np.array([first.label_index[l] for l in labels], dtype=np.int64)
        for part in ("original", "generated"):
            mine = parts == part
            pairs = mine[rows]
            row_label_ids = lab[mine]
            for side in ("input", "kept") if kept else ("input",):
                for counted in (part, "together"):
                    self.counts[side, counted].add(fids[pairs], lab[rows[pairs]], row_label_ids)

    def stats(self, side: str, part: str, prior: str, config: ZFilterConfig) -> zstats.ZStats:
        return self.counts[side, part].stats(prior, config.min_count, config.alpha)



def _count(kept: list, rejected: list, reject_sources: list, config: ZFilterConfig) -> tuple[PartCounts, dict]:
    """Every row of the filterings' outputs ([(its ``StageInput``, part)]) counted per part, as read and, from
    ``kept``, as kept (a row a filtering kept as its seed, ``source_stage`` seed, is D0's); and the input rejects of
    ``reject_sources`` per part."""
    labels = sorted({l for d, _ in kept + rejected for l in d.rows_per_label()})
    audit = PartCounts(labels, config.features)
    for sources, is_kept in ((kept, True), (rejected, False)):
        for d, part in sources:
            for table in (b.rows for b in d.iter_batches() if b.rows.num_rows):
                parts = np.full(table.num_rows, part, dtype=object)
                if "source_stage" in table.column_names:
                    parts[np.asarray(table["source_stage"].to_pylist(), dtype=object) == "seed"] = "original"
                audit.add(_untagged(table), parts, is_kept)
    input_rejects = {"original": 0, "generated": 0}
    for d, part in reject_sources:
        input_rejects[part] += d.read_rejects().num_rows
    return audit, input_rejects


def _untagged(table: pa.Table) -> pa.Table:
    """A filtering's rows without its ``source_stage``: the composition's rows say their part in ``source``."""
    return table.drop_columns([c for c in ("source_stage",) if c in table.column_names])


def with_source(table: pa.Table, part: str) -> pa.Table:
    """``source`` = the row's part where the row has no source of its own (``original``, ``generated``)."""
    values = pa.array([part] * table.num_rows, pa.string())
    if "source" not in table.column_names:
        return table.append_column("source", values)
    i = table.column_names.index("source")
    return table.set_column(i, "source", pc.coalesce(table["source"].cast(pa.string()), values))
