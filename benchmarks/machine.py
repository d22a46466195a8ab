"""The machine a benchmark's figures were measured on, as every figure must name it."""
from __future__ import annotations

from refinery.report.page import cpu_name, machine


def machine_line() -> str:
    return f"CPU: {machine()}"


__all__ = ["cpu_name", "machine_line"]
