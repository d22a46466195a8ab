"""How raw inputs are read (``ReadOptions``): rows per batch, the longest text and raw record, what a bad row does,
the store's options. Apart from the readers, so that a command's options build without loading them."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.messages import Refusal

DEFAULT_BATCH_ROWS = 65_536
DEFAULT_MAX_CHARS = 20_000
DEFAULT_MAX_ROW_BYTES = 4 << 20


@dataclass(frozen=True)
class ReadOptions:
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_chars: int = DEFAULT_MAX_CHARS
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES  # a longer raw line or record is that row's reject
    on_bad_row: str = "quarantine"  # or "fail"
    storage_options: dict | None = None
    row_ids: bool = True  # False: rows without an id column get a null id, not a content hash (a pass that reads no ids)
    csv_multiline: bool = False  # a CSV record whose quoted field runs over several lines is one row, not rejects

    def __post_init__(self):
        """Refuse what would break the reading later (a zero batch divides by zero), in the words of the configs."""
        for name in ("batch_rows", "max_chars", "max_row_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise Refusal(f"{name} must be a positive integer, got {value!r}", code="invalid-setting")
        if self.on_bad_row not in ("quarantine", "fail"):
            raise Refusal(f"on_bad_row must be one of quarantine, fail, got {self.on_bad_row!r}",
                          code="invalid-setting")
