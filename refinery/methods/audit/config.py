"""The audit's config (its verb's options and pipeline keys: ``core.audit_config``'s, the settings of the ruler every
stage's verdict measures with) and the files its saved state is kept in."""
from __future__ import annotations

from refinery.core.audit_config import AuditConfig

STATE_FILE = "state.bin"    # report/'s mergeable counts (``counting.load_state`` reads them back)
STATE_META = "state.json"

__all__ = ["AuditConfig", "STATE_FILE", "STATE_META"]
