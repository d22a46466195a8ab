"""A stage's work that is one process (DuckDB, NumPy) run as one Ray task (``run_as_task``), so that the driver only
orchestrates: the task's progress bars relayed to the driver and drawn there, its exception raised as itself, its
peak memory measured where it ran."""
from __future__ import annotations

from typing import Callable

from refinery.pipeline.engine import TASK_RETRIES, faults_named, ray_init, ray_options

RELAY_POLL_SECONDS = 0.5   # how often the driver reads the progress bars of a stage run as a task


def run_as_task(fn: Callable, args: tuple, resources=None, desc: str = "stage", on_this_node: bool = True
                ) -> tuple[object, int | None]:
    """``(fn(*args), the task's peak resident memory)`` with ``fn`` run as one Ray task asking for ``resources``
    (cpus, gpus, memory); ``on_this_node`` keeps it on the driver's node (outputs on the driver's local disk), asking
    for no CPUs there.

    The task's progress bars are drawn by the driver as they advance (and recorded there); an exception
    raised by ``fn`` is raised here as itself, not wrapped in Ray's traceback; Ctrl-C cancels the task.
    """
    from ray import exceptions as rx
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from refinery.progress import Mirror

    ray = ray_init()
    board = ray.remote(num_cpus=0)(_ProgressBoard).remote()
    options = {**ray_options(resources), "max_retries": TASK_RETRIES}
    if on_this_node:   # beside the driver, as in-process work would be: asking no CPUs, as a head may have none
        options.update(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False))
    ref = ray.remote(_relaying).options(**options).remote(fn, args, board)
    mirror = Mirror()
    try:
        with faults_named(desc):
            while True:
                done, _ = ray.wait([ref], timeout=RELAY_POLL_SECONDS)
                mirror.update(ray.get(board.states.remote()))
                if done:
                    return ray.get(ref)
    except rx.RayTaskError as e:
        raise (e.cause if isinstance(e.cause, Exception) else e) from None
    except KeyboardInterrupt:
        ray.cancel(ref, force=True)
        raise
    finally:
        mirror.close()
        ray.kill(board)


class _ProgressBoard:
    """The latest state of each progress bar of a task (a Ray actor the task writes and the driver reads)."""

    def __init__(self):
        self._states: dict = {}

    def put(self, key: int, state: dict) -> None:
        self._states[key] = state

    def states(self) -> dict:
        return self._states


def _relaying(fn: Callable, args: tuple, board) -> tuple[object, int | None]:
    """In the task: ``fn(*args)`` with every progress bar's state sent to ``board``, and this process's peak memory."""
    import ray

    from refinery.progress import peak_rss, relayed, reset_peak_rss

    reset_peak_rss()
    with relayed(lambda key, state: board.put.remote(key, state)):
        value = fn(*args)
    ray.get(board.states.remote())   # after this task's own puts, in order: the driver reads the last states
    return value, peak_rss()
