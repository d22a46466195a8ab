"""The audit's counting (METHODS §1): batches stream through ``feature_counts.FeatureCounts`` into a counter
(exact, or sketch: DataSketches fed each batch's counts), then z* of every feature in at least min_count rows.
Partial states merge, so the same counting runs in-process, on Ray workers (``on_ray``), or on new shards added
to a saved state (``update``).
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from dataclasses import dataclass, replace

import pyarrow as pa

from refinery.core import stats as zstats
from refinery.core.counts import counter_from_bytes
from refinery.core.feature_counts import load_kernels_in_background
from refinery.core.audit_counters import count_table, new_counter
from refinery.core.table_audit import AuditResult, finish
from refinery.core.weighted_audit_counts import UNWEIGHTED, WEIGHT_COLUMN, BadWeights
from refinery.io.corpus import AllRejected, EmptyInput, reject_reasons
from refinery.io.location import get_fs
from refinery.io.read_options import ReadOptions
from refinery.io.schema import Mapping
from refinery.messages import Message, Refusal, RejectsAt, Setting
from refinery.methods.audit.config import STATE_FILE, STATE_META, AuditConfig
from refinery.methods.audit.counters import PROBE_COLUMNS, add_probe
from refinery.pipeline.engine import check_engine
from refinery.pipeline.stage_input import StageInput
from refinery.progress import progress


def count_local(source: StageInput, config: AuditConfig, only: pa.Array | None = None, probe: bool = True,
                on_rejects=None, weighted: bool = False):
    """One pass over ``source``: the counter. ``probe``: add the hypothesis-only probe's counts; ``on_rejects``:
    called with each batch of the input's rejects; ``weighted``: count sums of the rows' ``weight``."""
    counter = new_counter(config, only, weighted)
    load_kernels_in_background()
    probe_tables = []
    columns = list(PROBE_COLUMNS) + ([WEIGHT_COLUMN] if weighted else [])
    with progress(desc="audit" if only is None else "recount", unit=" rows") as bar:
        for path, batch in source.iter_read():
            try:
                count_table(batch.rows, config, counter, only)
            except BadWeights as e:
                raise BadWeights(f"{path}: ", *e.args) from None
            if on_rejects is not None and batch.rejects.num_rows:
                on_rejects(batch.rejects)
            if probe and "hypo-only" in config.features.families:
                probe_tables.append(batch.rows.select([c for c in columns if c in batch.rows.column_names]))
            bar.update(batch.rows.num_rows)
    add_probe(counter, probe_tables, config, weighted)
    return counter


def count(source: StageInput, config: AuditConfig, on_rejects=None, weighted: bool = False) -> "Counted":
    """The audit's counting pass over ``source`` (added to the saved state of ``config.update`` if given), in-process
    or on Ray workers as ``source.engine`` says: the counter, and with ``on_rejects`` each batch of the input's rejects
    handed to it as it is read (without, their reasons counted). An input of no row at all, or of one label, is
    refused here (``_check_counted``), before its rejects are published; one whose rows were all rejected, by
    ``Counted.finish`` once they are. ``weighted``: the rows carry a ``weight`` and count as their weight
    (``core.weighted_audit_counts``: exact counts, in memory)."""
    check_engine(source.engine)
    if weighted and (config.counting != "exact" or config.update is not None):
        raise Refusal("a weighted audit counts exactly, from scratch: leave out ", Setting("counting", "sketch"),
                      " and ", Setting("update"), ", or count rows with ", UNWEIGHTED, code="conflicting-settings")
    base, state = None, config.update
    if state is not None:
        base, saved = load_state(state)
        if saved.counter_kind != config.counter_kind:
            raise Refusal(f"{state}: saved with features {saved.features.to_dict()} and {saved.counting} "
                          "counting; the update must use the same", code="conflicting-settings")
    source = dataclasses.replace(source, opts=replace(source.opts, row_ids="hypo-only" in config.features.families))
    recount = config.counting == "sketch" and config.sketch_recount and base is None
    reasons = Counter()

    def rejected(rejects: pa.Table) -> None:
        reasons.update(reject_reasons(rejects))
        if on_rejects is not None:
            on_rejects(rejects)

    counted = Counted(source, config, _pass(source)(source, config, probe=not recount, weighted=weighted,
                                                   on_rejects=rejected), reasons, recount, weighted)
    if base is not None:
        counted.counter = base.merge(counted.taken())
    _check_counted(counted.counter, source.paths, reasons)
    return counted


def _pass(source: StageInput):
    if source.engine == "ray":
        from refinery.methods.audit.on_ray import count_ray
        return count_ray
    return count_local


@dataclass
class Counted:
    """The audit's counts of an input (``count``): its ``counter`` (on Ray, exact counts left on the workers:
    ``on_ray.HeldCounts``), the reasons its rejects were given, and whether sketch mode's candidates are counted again
    exactly (``recount``)."""

    source: StageInput
    config: AuditConfig
    counter: object
    reasons: Counter
    recount: bool
    weighted: bool

    def finish(self, carried: zstats.Prior | None = None, rejects_at: str | None = None) -> AuditResult:
        """The z-statistics (METHODS §1; ``carried``: the prior rule the input records, which an ``auto`` prior
        takes: ``stats.choose_prior``). Sketch mode with ``sketch_recount`` reads the input again: the sketches
        bounded memory and named the candidate features, the second pass counts just those exactly, so their z*
        carry no sketch error. An input whose every row was rejected is refused here, naming where its rejects
        are (``rejects_at``)."""
        if not self.counter.rows:
            raise AllRejected(self.source.paths, self.reasons,
                              rejects_at and Message(f"{rejects_at} (", RejectsAt(rejects_at), ")"))
        counter = self.taken()
        recounted = _pass(self.source)(self.source, self.config, only=counter.candidates()) if self.recount else None
        return finish(counter, self.config, sum(self.reasons.values()), recounted, carried, self.weighted)

    @property
    def held(self) -> bool:
        """Whether the counts are left on Ray's workers (``on_ray.HeldCounts``: an exact audit on Ray)."""
        if self.source.engine != "ray":
            return False
        from refinery.methods.audit.on_ray import HeldCounts

        return isinstance(self.counter, HeldCounts)

    def taken(self):
        """The counter, in this process: counts an audit on Ray left on the workers fetched (``held``)."""
        if self.held:
            self.counter = self.counter.counter()
        return self.counter


def audit(inputs, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
          config: AuditConfig = AuditConfig(), engine: str = "local", carried: zstats.Prior | None = None,
          weighted: bool = False) -> AuditResult:
    """The audit of ``inputs`` (files, folders, corpora; raw files read through ``mapping``): features counted and
    z-statistics computed (``count`` and ``Counted.finish``), its rejects' reasons counted, written nowhere."""
    return count(StageInput({"": list(inputs)}, mapping, opts, engine), config, weighted=weighted).finish(carried)


def _check_counted(counter, inputs, reasons: Counter) -> None:
    """Refuse an input with no row at all, or rows of one label (z-statistics compare labels). Every row rejected
    is refused once the rejects are published, so that the user can read their reasons."""
    if not counter.rows and not reasons:
        raise AllRejected(inputs, reasons)
    present = [label for label, n in counter.label_totals.items() if n]
    if len(present) == 1:
        raise EmptyInput(Message(f"only one label ({present[0]!r}) in the {counter.rows:,} rows read "
                                 f"({sum(reasons.values()):,} rejected): z-statistics compare labels; check ",
                                 Setting("preset"), " or ", Setting("map"), ", and the rejects' reasons"))


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
        raise Refusal(f"{path}: its counts are sums of weights (a weighted audit), which an update cannot add "
                      "rows to: audit the corpora together instead", code="invalid-setting")
    with fs.open(counts, "rb") as fh:
        counter = counter_from_bytes(fh.read())
    return counter, AuditConfig.from_dict(meta["config"])
