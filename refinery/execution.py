"""Where work runs: in-process, or on Ray (local, sized for a small box, or ``RAY_ADDRESS``)."""
from __future__ import annotations

import logging
import os

LOCAL_OBJECT_STORE_BYTES = 1 << 30  # 1 GiB: bounded on a small machine


def ray_init(num_cpus: int | None = None):
    """Connect to the cluster named by ``RAY_ADDRESS``, else start a quiet local Ray.

    The local instance has no dashboard, a bounded object store and quiet logs. Actor pools
    on it must ask for fractional CPUs (see ``actor_cpus``) or they starve the read tasks.
    """
    import ray

    if ray.is_initialized():
        return ray
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    else:
        ray.init(
            address="local",  # a fresh local instance, never a stray head found on the machine
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            logging_level=logging.WARNING,
            log_to_driver=False,
            configure_logging=True,
        )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.verbose_stats_logs = False
    return ray


def actor_cpus() -> float:
    """CPUs per actor: whole on a cluster, a fraction on a small local box."""
    return 1.0 if os.environ.get("RAY_ADDRESS") or (os.cpu_count() or 1) > 8 else 0.5


def ray_shutdown():
    import ray

    if ray.is_initialized() and not os.environ.get("RAY_ADDRESS"):
        ray.shutdown()
