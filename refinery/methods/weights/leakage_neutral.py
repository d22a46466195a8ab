"""The leakage-neutral weights of a corpus (Zhang et al. 2019, Algorithm 1; the method: the ``weights`` stage's
module docstring): P̂(y | l) cross-predicted by forests over its sentence graph's leakage features, the weights, and
the corpus given back with a ``weight`` column while its words are counted plain and weighted for the verdict."""
from __future__ import annotations

import functools
import threading
from concurrent.futures import Future
from dataclasses import asdict, replace
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from refinery.core.audit_config import AuditConfig
from refinery.core.features import FeatureConfig
from refinery.core.folds import fold_of
from refinery.core.verdict import Verdict
from refinery.core.weighted_audit_counts import WeightedAuditCounts
from refinery.core.weighted_counts import WEIGHTED_NOTE, WeightedAudits, WeightedCounts, judge_weightings
from refinery.messages import Message, Setting
from refinery.models.leakage_settings import FEATURE_SETS, ForestConfig
from refinery.models.sentence_graph import GraphInput
from refinery.methods.weights.config import clip_setting
from refinery.methods.weights.ips import (SUGGESTED_CLIPS, Cap, cap_in_effect, diagnostics, effective_sample_size,
                                          fit_prior, ips_weights, label_shares, low_ess_warning, prior_cells,
                                          weight_histogram, weighted_accuracy)
from refinery.methods.weights.report import WeightsReport
from refinery.pipeline.table_stage import PartAudit
from refinery.progress import progress

UNNAMED = ""   # the split name of an input given without names: no split is written for it


class Weighing:
    """The leakage-neutral weights of a corpus, as the table executor writes it (``WeightsStage``): the weights of
    every row of ``graph`` under ``config`` (the stage's ``WeightsConfig``) on construction, its words (``features``:
    the audit's) counted meanwhile on a thread of their own (``count_rows``, ``Beside``); ``rows`` gives the corpus
    back with a ``weight`` column while the features in enough rows are counted again, plain and weighted; once every
    row is written, ``measured`` makes both audits (the prior rule decided on the input, or ``carried`` with it) and
    the weighted one's record kept with the corpus; after the commit, ``judged`` makes the report (``WeightsReport``)
    and the verdict.
    Rows keep their split: the name given, or their own ``split`` column; a corpus whose rows have neither has no
    ``split`` column."""

    IN_MANIFEST = ("prior", "observed_shares", "weighted_shares", "diagnostics", "cap", "low_ess_warning",
                   "out_of_fold")

    def __init__(self, graph: GraphInput, config, features: FeatureConfig, inputs: dict, carried=None):
        self.graph, self.config, self.carried = graph, config, carried
        graph.keep_tables_on_disk()
        labels, proba, y = out_of_fold_proba(graph, config)
        # the rows' words counted on one thread beside the prior's search and the caps' fits, which take the other
        # core (after the forests, which take both; the count of every feature is not held beside them)
        self.output_rows = _output_rows(graph)   # the query of the rows as written, counted in the same order
        self.rows_of = WeightedCounts(labels, features, 1, masks=1, replayable=True, one_thread=True)   # rows of each
        self.counting = Beside(functools.partial(count_rows, graph, self.output_rows, self.rows_of),
                               "the count of the rows")
        try:
            w, info = leakage_neutral_weights(proba, y, labels, config)
            cells = info.pop("cells")
            clip = info["cap"].clip   # the cap in effect (None: none)
            clips = [c for c in SUGGESTED_CLIPS if c < w.max() and (clip is None or c < clip)]
            capped_w = [ips_weights(proba, y, fit_prior(proba, y, c, config.tolerance, cells=cells), c)
                        for c in clips]
        except BaseException:
            self.counting.stop()
            raise
        del proba, y
        self.w, self.capped = w, dict(zip(clips, capped_w))
        self.entries = {"labels": info.pop("labels"),   # the report's entries known before the rows are written
                        "low_ess_warning": low_ess_warning(w, clip, self.capped),   # exact ESS
                        **info, "inputs": inputs, "config": asdict(config)}
        self.audit_config = AuditConfig(features=features, prior=config.prior)

    def manifest_entries(self) -> dict:
        """What the weighted corpus's manifest keeps of the weights (``weights``)."""
        kept = {k: self.entries[k] for k in self.IN_MANIFEST}
        return {"weights": {**kept, "cap": kept["cap"].to_json()}}

    def rows(self) -> Iterator[pa.Table]:
        """The corpus with its ``weight`` column, in input order. Its words were counted while the weights were fit
        (``count_rows``); the features in enough rows are counted again, plain and weighted (``_counted_again``),
        while it is written."""
        self.counting.result()
        self.counts = self.rows_of.restricted(2, masks=1, min_rows=self.audit_config.min_count)
        self.tokens, self.rows_of = self.rows_of.tokens, None   # its table of every feature freed before the second look
        self.looking = Beside(functools.partial(_counted_again, self.counts, self.tokens, [self.w]), "the second look")
        try:
            with progress(total=len(self.w), desc="weights: write", unit=" rows") as bar:
                start = 0
                for batch in self.graph.batches(self.output_rows):
                    table = pa.Table.from_batches([batch])
                    yield table.append_column("weight", pa.array(self.w[start:start + batch.num_rows]))
                    start += batch.num_rows
                    bar.update(batch.num_rows)
        except BaseException:   # the writing failed or was cut (the generator closed): the second look with it
            self.looking.stop()
            raise

    def measured(self, label_rows: dict) -> PartAudit:
        """Once every row is written (``label_rows``: the rows per label written): the second look's counts, the
        input's and the weighted audits, the prior rule and the weighted audit's record. The token ids stay on disk
        for the verdict's caps (``judged``)."""
        self.looking.result()
        self.audits = _audits(self.counts, self.audit_config, label_rows, self.carried)
        return PartAudit(self.audits.prior, self.audits.record_of(1, label_rows, weighted=True))

    def judged(self, manifest) -> tuple[WeightsReport, Verdict]:
        """The report (``manifest``: the weighted corpus's ``CorpusManifest``, committed) and the verdict."""
        histogram = weight_histogram(self.w)
        try:
            verdict, checked = _verdict(self.counts, self.tokens, self.audits, self.config, self.entries["cap"].clip,
                                        self.capped)
        finally:
            self.tokens.close()
        return WeightsReport(**self.entries, rows=manifest.rows, rejected=manifest.rejected, histogram=histogram,
                             verdict=verdict.to_dict(), clips_checked=checked), verdict


class Beside:
    """``work(check)`` run on a thread of its own while the caller goes on; ``work`` calls ``check()`` between its
    steps, which raises once ``stop`` was called or the main thread has ended (an error or Ctrl-C there), so that it
    never outlives the run. ``result`` waits for it and gives what it returned, or raises in the caller's thread what
    it raised (``what`` names it then)."""

    def __init__(self, work: Callable, what: str):
        self.what = what
        self._stopped = threading.Event()
        self._outcome: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(work,), name=f"refinery-beside: {what}")
        self._thread.start()

    def _run(self, work: Callable) -> None:
        try:
            self._outcome.set_result(work(self.check))
        except BaseException as e:   # handed to ``result``
            self._outcome.set_exception(e)

    def check(self) -> None:
        if self._stopped.is_set() or not threading.main_thread().is_alive():
            raise RuntimeError(f"{self.what} was stopped")

    def result(self):
        self._thread.join()
        return self._outcome.result()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def count_rows(graph: GraphInput, sql: str, counts: WeightedCounts, check: Callable,
               batch_rows: int = 1 << 17) -> WeightedCounts:
    """The rows of the query ``sql`` over ``graph`` counted into ``counts`` in their order (a full scan of ``rows``
    keeps the input order, the weights' order), read on a DuckDB cursor of their own: ``Beside``'s work while the
    connection runs the caller's queries (``check()`` before each batch)."""
    for batch in graph.batches_on_a_cursor(sql, rows=batch_rows):
        check()
        counts.add(pa.Table.from_batches([batch]), None)
    return counts.flush()


def cross_predict(graph: GraphInput, names, labels: list[str], folds: np.ndarray, forest: ForestConfig
                  ) -> np.ndarray:
    """Out-of-fold P̂(y | l) on the features ``names`` of every row of ``graph``: row i is scored by a forest that
    never saw fold(i), grown on the other folds' cells (``GraphInput.cells``: no matrix of the training rows)."""
    proba = np.zeros((len(folds), len(labels)))
    for f in progress(np.unique(folds), desc="cross-predict", unit=" fold"):
        test = folds == f
        model = forest.make()   # its trees score the held-out fold as they grow, then go (summed in one order)
        scores = model.fit_predict_proba(graph.cells(names, labels, rows=~test), graph.matrix(names, rows=test))
        proba[np.ix_(np.nonzero(test)[0], model.classes_)] = scores
    return proba


def out_of_fold_proba(graph: GraphInput, config) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(labels, P̂(y | l) of every row, its label's code): Algorithm 1 steps 01–02 of Zhang et al., each row's
    P̂ cross-predicted (``cross_predict``) over ``config.folds`` folds of the ids (the stage's ``WeightsConfig``),
    floored at ``config.min_proba`` and renormalized."""
    labels = graph.labels()
    folds = np.concatenate([fold_of(batch.column(0), config.folds, config.fold_seed) for batch in
                            progress(graph.batches("SELECT id FROM rows", rows=1 << 20), desc="weights: folds",
                                     unit=" batch")])
    with graph.tables_on_disk():
        y = graph.codes("label", labels)
        proba = cross_predict(graph, FEATURE_SETS[config.features], labels, folds, config.forest)
    del folds
    np.clip(proba, config.min_proba, 1.0, out=proba)
    proba /= proba.sum(axis=1, keepdims=True)
    return labels, proba, y


def leakage_neutral_weights(proba: np.ndarray, y: np.ndarray, labels: list[str], config) -> tuple[np.ndarray, dict]:
    """(w per row, info): Algorithm 1 steps 03–04 of Zhang et al. from the out-of-fold P̂ of each row and its
    label's code (``out_of_fold_proba``) under ``config`` (the stage's ``WeightsConfig``); the low-ESS warning is
    ``Weighing``'s, which refits the gentler caps."""
    cells = prior_cells(proba, y)   # every cap's prior is searched over these (P̂, y) cells
    clip = cap_in_effect(config.clip, cells, config.tolerance)
    prior = fit_prior(proba, y, clip, config.tolerance, cells=cells)
    w = ips_weights(proba, y, prior, clip)
    predicted = proba.argmax(axis=1)
    observed = np.bincount(y, minlength=len(labels)) / len(y)
    weighted = label_shares(w, y, len(labels))
    info = {
        "labels": labels,
        "prior": dict(zip(labels, map(float, prior))),
        "observed_shares": dict(zip(labels, map(float, observed))),
        "weighted_shares": dict(zip(labels, map(float, weighted))),
        "diagnostics": diagnostics(w),
        "cap": Cap(config.clip, clip, effective_sample_size(w), len(w)),
        "out_of_fold": {"accuracy": float((predicted == y).mean()),
                        "weighted_accuracy": weighted_accuracy(predicted == y, w),
                        "majority_accuracy": float(observed.max()),
                        "weighted_majority_accuracy": float(weighted.max())},
    }
    return w, {**info, "cells": cells}


def _counted_again(counts: WeightedCounts, tokens, weights: list, check: Callable | None = None) -> None:
    """The rows counted again into ``counts`` (``WeightedCounts.restricted``: the features the first count found in
    at least ``min_count`` rows, or the few a verdict checks caps on) under weights 1 and under each of ``weights``
    (the weights written, or the caps): n_eff(x) = (Σ w)² / Σ w² ≤ rows(x) (Cauchy–Schwarz), so no other feature is
    tested under any weighting, and the weighted sums of every feature (16 bytes a label and weighting, most
    features in one row) are never held. The rows come from the token ids the first count kept on disk as they were
    written (``tokens``, ``WeightedCounts.replay``): no text is read or tokenized twice. ``check``: ``Beside``'s
    (counted beside the writing, which shows its own bar), called after each slice; else a bar of its own."""
    if check is not None:
        counts.replay(tokens, None, *weights, done=lambda rows: check())
    else:
        with progress(total=len(weights[0]), desc="weights: count", unit=" rows") as bar:
            counts.replay(tokens, None, *weights, done=bar.update)
    counts.flush()


def _audits(counts: WeightedCounts, audit_config, label_rows: dict, carried) -> WeightedAudits:
    """The input's audit (weighting 0: every row once) and the output's (weighting 1: the weights) of the one pass
    over the rows, each made by the audit's own code (``core.table_audit.finish`` of a ``WeightedAuditCounts``, as
    ``refinery audit`` makes it of a weighted corpus: counts, n and p0 on sums of weights), the prior rule decided on
    the input (or ``carried`` with it) and carried to the output: the verdict's after side is the audit of corpus/,
    by construction. Both on the features tested on either side (``WeightedCounts.tested``)."""
    from refinery.core.table_audit import finish

    rows = counts.tested((0, 1), audit_config.min_count)
    read = (rows, counts.names(rows))
    before = finish(WeightedAuditCounts.view(counts, 0, label_rows, read), audit_config, carried=carried,
                    weighted=True)
    after = finish(WeightedAuditCounts.view(counts, 1, label_rows, read), audit_config, carried=before.prior,
                   weighted=True)
    return WeightedAudits(before.prior, rows, [before.stats, after.stats], audit_config.features,
                          tuple(counts.left_out))


def _verdict(counts: WeightedCounts, tokens, audits: WeightedAudits, config, clip: float | None,
             capped: dict) -> tuple[Verdict, list[dict]]:
    """(the weighted audit's verdict against the plain one, the caps checked): ``audits``, both, under the input's
    prior rule; ``clip``, the cap the weights were written under (None: none). Only where it warns are the caps of
    ``capped`` ({clip: the weights --clip gives}) judged, on the features over the threshold, counted again from
    ``tokens`` (``_caps_checked``), and the gentlest under which none of them worsens is named as the remedy."""
    options = {"stage": "weights", "under_threshold": False, "prior": config.prior, "notes": (WEIGHTED_NOTE,),
               "carried": audits.prior}
    verdict = judge_weightings(counts, audits=audits, **options)
    checked = [] if verdict.ok or not capped else _caps_checked(
        counts.restricted(1 + len(capped), masks=1, rows=audits.significant(verdict.threshold)), tokens, verdict,
        capped, options)
    now = "no cap now" if clip is None else f"now {clip:.3g}"
    larger_floor = Message("a larger ", Setting("min_proba"), f" (now {config.min_proba:g})")
    others = larger_floor if config.features == "basic" else Message(
        "fewer leakage features (", Setting("features", "basic"), ") or ", larger_floor)
    holds = next((c for c in checked if c["ok"]), None)
    if holds:
        remedy = Message("cap the weights: ", clip_setting(holds["clip"]), f" ({now}) keeps every row under "
                         f"{holds['clip']:g}× the mean weight; under it none of the features over the threshold here "
                         f"worsens (effective sample size {holds['effective_sample_size']:,.0f}).")
    elif checked:
        tightest = checked[-1]
        remedy = Message("cap the weights: even ", clip_setting(tightest["clip"]), f" ({now}) leaves "
                         f"{tightest['worsened']:,} of the features over the threshold here worsened; the leakage "
                         "features single out a few rows: try ", others, ".")
    else:
        remedy = Message("the leakage features single out a few rows: try ", others, ".")
    return replace(verdict, remedy_worsened=remedy), checked


def _caps_checked(flagged: WeightedCounts, tokens, verdict, capped: dict, options: dict) -> list[dict]:
    """Each cap of ``capped`` ({clip: its weights}, gentlest first) judged as the weights written were, against the
    input's threshold, on the features over it in the plain or the weighted audit (``flagged``: a counter of those
    only, the rows counted into it from ``tokens`` plain, then under each cap: weightings 1, 2, …). A cap can also
    lift a feature under the threshold in both over it (it moves weight onto the light rows): the advice is about
    the features this verdict judged, and a run with the cap gets its own verdict."""
    _counted_again(flagged, tokens, list(capped.values()))
    checked = []
    for i, (clip, w) in enumerate(capped.items()):
        v = judge_weightings(flagged, after=1 + i, threshold=verdict.threshold, **options)
        checked.append({"clip": clip, "ok": v.ok, "worsened": v.worsened_total, "labels_risen": v.risen,
                        "effective_sample_size": effective_sample_size(w),
                        "max_z": {l: m.after for l, m in v.max_z.items()}})
    return checked


def _output_rows(graph: GraphInput) -> str:
    """The query of the rows as written: the input's columns but an earlier ``weight`` (replaced), with the split
    named only where the input named one (an unnamed input's rows keep a ``split`` column of their own)."""
    columns = graph.con.sql("SELECT * FROM rows LIMIT 0").columns
    exclude = [c for c in ("row_id", "weight", "split") if c in columns]
    named = graph.con.sql("SELECT count(*) FROM rows WHERE split <> $unnamed", params={"unnamed": UNNAMED}
                          ).fetchall()[0][0]
    split = f", nullif(split, '{UNNAMED}') AS split" if named else ""
    return f"SELECT * EXCLUDE ({', '.join(exclude)}){split} FROM rows"
