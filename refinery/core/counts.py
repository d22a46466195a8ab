"""Feature–label counters by mode, all answering in one schema ``(feature, label, count)``: ``exact``
(``exact_counts``) or ``sketch`` (``sketch_counts``), new or read back from a saved state."""
from __future__ import annotations

from refinery.core.exact_counts import ExactCounts
from refinery.core.sketch_counts import SketchCounts
from refinery.messages import Refusal


def make_counter(mode: str, **kwargs):
    if mode == "exact":
        return ExactCounts(**kwargs)
    if mode == "sketch":
        return SketchCounts(**kwargs)
    raise Refusal(f"counting mode must be exact or sketch, not {mode!r}", code="invalid-setting")


def counter_from_bytes(data: bytes):
    """An ``ExactCounts`` (an Arrow IPC file, or Parquet from an earlier version) or a ``SketchCounts``."""
    exact = data[:6] == b"ARROW1" or data[:4] == b"PAR1"
    return ExactCounts.from_bytes(data) if exact else SketchCounts.from_bytes(data)
