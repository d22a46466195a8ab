"""The audit's counting (METHODS §1): batches stream through ``feature_counts.FeatureCounts`` into a counter
(exact, or sketch: DataSketches fed each batch's counts), then z* of every feature in at least min_count rows.
Partial states merge, so the same counting runs in-process, on Ray workers (``on_ray``), or on new shards added
to a saved state (``update``).
"""
from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from dataclasses import replace

import pyarrow as pa

from refinery.core import stats as zstats
from refinery.core.counts import counter_from_bytes
from refinery.core.feature_counts import load_kernels_in_background
from refinery.core.audit_counters import count_table, new_counter
from refinery.core.table_audit import AuditResult, finish
from refinery.core.weighted_audit_counts import WEIGHT_COLUMN, BadWeights
from refinery.io.corpus import AllRejected, EmptyInput, iter_input_batches, reject_reasons
from refinery.io.location import get_fs
from refinery.io.read_options import ReadOptions
from refinery.io.schema import Mapping
from refinery.methods.audit.config import STATE_FILE, STATE_META, AuditConfig
from refinery.methods.audit.counters import add_probe
from refinery.pipeline.engine import check_engine
from refinery.progress import progress


def count_local(inputs, mapping: Mapping | None, opts: ReadOptions, config: AuditConfig,
                only: pa.Array | None = None, probe: bool = True, on_rejects=None, weighted: bool = False):
    """One pass over ``inputs``: the counter. ``probe``: add the hypothesis-only probe's counts; ``on_rejects``:
    called with each batch of the input's rejects; ``weighted``: count sums of the rows' ``weight``."""
    counter = new_counter(config, only, weighted)
    load_kernels_in_background()
    probe_tables = []
    columns = ["id", "text_a", "text_b", "label"] + ([WEIGHT_COLUMN] if weighted else [])
    with progress(desc="audit" if only is None else "recount", unit=" rows") as bar:
        for path, batch in iter_input_batches(inputs, mapping, opts):
            try:
                count_table(batch.rows, config, counter, only)
            except BadWeights as e:
                raise BadWeights(f"{path}: {e}") from None
            if on_rejects is not None and batch.rejects.num_rows:
                on_rejects(batch.rejects)
            if probe and "hypo-only" in config.features.families:
                probe_tables.append(batch.rows.select(columns))
            bar.update(batch.rows.num_rows)
    add_probe(counter, probe_tables, config, weighted)
    return counter


def audit(inputs, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
          config: AuditConfig = AuditConfig(), engine: str = "local", rejects=None,
          carried: zstats.Prior | None = None, weighted: bool = False) -> AuditResult:
    """Count features over ``inputs`` (added to the saved state of ``config.update`` if given) and compute
    z-statistics. ``rejects``: a corpus writer (``StageOutput.corpus``) that publishes the input's rejects, as a
    corpus of no rows (an ``AllRejected`` error names it when no row was good). ``carried``: the prior rule the
    inputs record (an ``auto`` prior takes it: ``stats.choose_prior``). ``weighted``: the rows carry a ``weight``
    and count as their weight (``core.weighted_audit_counts``: count(x, l) = Σ w, n(x) = Σ w, z* and min_count at
    n_eff(x) = (Σ w)²/Σ w²; exact counts, in memory).

    Sketch mode with ``sketch_recount`` (and no ``state``) reads the inputs twice: the sketches
    bound memory and name the candidate features, then a second pass counts just those exactly,
    so their z* carry no sketch error. An update of a saved state keeps the sketch estimates.
    """
    check_engine(engine)
    if weighted and (config.counting != "exact" or config.update is not None):
        raise ValueError("a weighted audit counts exactly, from scratch: leave out --counting sketch and --update, "
                         "or count rows with --unweighted")
    base, state = None, config.update
    if state is not None:
        base, saved = load_state(state)
        if saved.counter_kind != config.counter_kind:
            raise ValueError(f"{state}: saved with features {saved.features.to_dict()} and {saved.counting} "
                             "counting; the update must use the same")
    if engine == "ray":
        from refinery.methods.audit.on_ray import count_ray as count
    else:
        count = count_local
    opts = replace(opts, row_ids="hypo-only" in config.features.families)   # only the probe's folds read ids
    recount = config.counting == "sketch" and config.sketch_recount and base is None
    reasons = Counter()
    with rejects if rejects is not None else contextlib.nullcontext():
        counter = count(inputs, mapping, opts, config, probe=not recount, on_rejects=(
            (lambda t: reasons.update(reject_reasons(t))) if rejects is None else (lambda t: rejects.write(rejects=t))),
            weighted=weighted)
        reasons = reasons if rejects is None else rejects.reasons
        if base is not None:
            counter = base.merge(counter)
        _check_counted(counter, inputs, reasons)   # before the rejects are published: a previous output stays whole
        if rejects is not None:
            rejects.commit()
    if not counter.rows:
        raise AllRejected(inputs, reasons, rejects and f"{rejects.out} (refinery inspect {rejects.out})")
    recounted = count(inputs, mapping, opts, config, only=counter.candidates()) if recount else None
    return finish(counter, config, sum(reasons.values()), recounted, carried, weighted)


def _check_counted(counter, inputs, reasons: Counter) -> None:
    """Refuse an input with no row at all, or rows of one label (z-statistics compare labels). Every row rejected
    is refused once the rejects are published, so that the user can read their reasons."""
    if not counter.rows and not reasons:
        raise AllRejected(inputs, reasons)
    present = [label for label, n in counter.label_totals.items() if n]
    if len(present) == 1:
        raise EmptyInput(f"only one label ({present[0]!r}) in the {counter.rows:,} rows read "
                         f"({sum(reasons.values()):,} rejected): z-statistics compare labels; check --preset or --map, "
                         "and the rejects' reasons")


def state_files(path: str) -> tuple[str, str]:
    """(the counts, their config) an audit saved in ``path``: its folder, or the folder's ``report/``."""
    fs, root = get_fs(path)
    if not fs.exists(os.path.join(root, STATE_META)) and fs.exists(os.path.join(root, "report", STATE_META)):
        path = f"{path.rstrip('/')}/report"
    return f"{path.rstrip('/')}/{STATE_FILE}", f"{path.rstrip('/')}/{STATE_META}"


def load_state(path: str):
    """The counter and config saved by an audit in ``path`` (its folder, or the folder's ``report/``)."""
    (fs, counts), (_, config) = map(get_fs, state_files(path))
    with fs.open(config) as fh:
        meta = json.load(fh)
    if meta.get("weighted"):
        raise ValueError(f"{path}: its counts are sums of weights (a weighted audit), which an update cannot add "
                         "rows to: audit the corpora together instead")
    with fs.open(counts, "rb") as fh:
        counter = counter_from_bytes(fh.read())
    return counter, AuditConfig.from_dict(meta["config"])
