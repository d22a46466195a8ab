"""RAZOR's verdict (``core.verdict``): the rewritten corpus audited with the input's features and prior rule and
compared with the input. RAZOR promises to make no shortcut stronger (no feature crossing the threshold, no label's
max z* rising) and to weaken the shortcuts of the rows it rewrites; where no label's max z* fell and no significant
feature stopped being one, the verdict says so in a note. The audit counts the input once and only the rewritten
rows again (``WeightedCounts``: the input with weights 1 and, for the output, 0 on the replaced rows; the rewrites
with weights 0 and 1), so it costs a tokenization of the input.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.audit_record import AuditRecord
from refinery.core.features import FeatureConfig
from refinery.core.stats import Prior
from refinery.core.verdict import Verdict
from refinery.core.weighted_counts import WeightedCounts, audit_weightings, judge_audits
from refinery.messages import Message, Setting
from refinery.methods.razor.config import RazorConfig
from refinery.methods.razor.scores import scored_field


def verdict(table: pa.Table, refined: pa.Table, features: FeatureConfig, config: RazorConfig,
            prior: Prior | None = None) -> tuple[Verdict, AuditRecord | None]:
    """The audit of ``refined`` (``table`` with the scored field of some rows rewritten, row for row) against the
    audit of ``table``: the same features, the input's prior rule (``prior``, else decided on ``table``; the labels
    do not change). The input is counted once; only the rewritten rows are counted again. With the verdict, the
    audit of ``refined`` (its after side) to keep with it."""
    target = scored_field(table)
    rewritten = pc.fill_null(pc.not_equal(table[target], refined[target]), False).to_numpy(zero_copy_only=False)
    counts = WeightedCounts(None, features, 2).add(table, None, (~rewritten).astype(np.float64))
    if rewritten.any():
        counts.add(refined.filter(pa.array(rewritten)), np.zeros(int(rewritten.sum())), None)
    audits = audit_weightings(counts, (0, 1), carried=prior)
    v = judge_audits(audits, stage="razor", under_threshold=False, remedy_worsened=Message(
        "the rewrites carry these features more often than the rows they replaced: rewrite fewer rows (",
        Setting("top_k"), f", now {config.top_k}; ", Setting("rounds"), f", now {config.rounds}) or use another "
        "generator (", Setting("model"), "); the report's examples show what the rewrites add."))
    if v.ok and v.weakened_nothing():
        v.notes.append(str(Message(   # a verdict's notes are text: its page escapes them
            f"no shortcut weakened by the {int(rewritten.sum()):,} rewritten rows; to rewrite more, raise ",
            Setting("top_k"), f" (now {config.top_k}) or ", Setting("rounds"), f" (now {config.rounds}).")))
    return v, audits.record_of(1, zstats.rows_per_label(refined["label"]))
