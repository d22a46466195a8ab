"""The machine a benchmark's figures were measured on, as every figure must name it."""
from __future__ import annotations

import os

from refinery.io.memory import MEMORY_BUDGET_ENV, memory_budget, usable_memory
from refinery.report.format import binary_size
from refinery.report.page import cpu_name, machine


def machine_line() -> str:
    """The CPU and its cores, the memory a process may use, and the memory budget the runs hold to."""
    given = "given" if MEMORY_BUDGET_ENV in os.environ else "the default: half of it"
    return (f"CPU: {machine()}; memory {binary_size(usable_memory())}; memory budget "
            f"{binary_size(memory_budget())} ({given})")


__all__ = ["cpu_name", "machine_line"]
