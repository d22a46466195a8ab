"""Checks of refinery's contract for a stage of your own (``check_stage``) and what they stand on: a run's storage
calls counted and cut (``storage_faults``), what a reader finds in an output folder (``run_state``)."""
from refinery.testing.conformance import Check, StageCheck, check_stage

__all__ = ["Check", "StageCheck", "check_stage"]
