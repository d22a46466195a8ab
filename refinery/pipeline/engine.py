"""Where work runs: in-process, a local Ray, or the cluster named by ``RAY_ADDRESS``.

The one module that owns Ray. Stages hand it a row-wise function and a source; it returns the
mapped batches as a stream, in input order, whichever engine runs them:

- ``stream_map``: a stateless function over Parquet shards (Ray Data ``read_parquet`` →
  ``map_batches`` on workers) or over a stream of tables read by the driver (a bounded window
  of Ray tasks). Nothing is materialized: the driver holds at most ``window`` batches.
- ``actor_map``: a stateful, model-holding stage class as a Ray Data actor pool.
"""
from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pyarrow as pa
from tqdm.auto import tqdm

ENGINES = ("local", "ray")
# The driver maps every object-store page it has read from, so over a long stream its RSS grows by
# the store's size: 512 MiB keeps it bounded on a small machine and holds the streaming window twice.
LOCAL_OBJECT_STORE_BYTES = 512 << 20
STREAM_STORE_BYTES = 256 << 20      # what a streamed dataset may buffer ahead of the driver


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


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    return engine


@dataclass(frozen=True)
class ParquetSource:
    """Parquet shards (a finished corpus's files) that workers read themselves."""

    files: tuple
    storage_options: dict = field(default_factory=dict)


def _ordered(ds):
    """Ray Data keeps block order only when asked; set it on this dataset, not globally."""
    ds.context.execution_options.preserve_order = True
    return ds


def _bounded(ds, store_bytes: int = STREAM_STORE_BYTES):
    """Cap the object-store memory the dataset's operators may fill ahead of the consumer: the
    driver maps the blocks it reads, so what is buffered shows in its memory."""
    from ray.data._internal.execution.interfaces.execution_options import (
        ExecutionResources,
    )

    options = ds.context.execution_options
    options.resource_limits = options.resource_limits.copy(object_store_memory=store_bytes) \
        if options.resource_limits else ExecutionResources(object_store_memory=store_bytes)
    return ds


def _pyarrow_fs(url: str, storage_options: dict):
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    from refinery.io.storage import get_fs, is_local

    fs, _ = get_fs(url, storage_options)
    return None if is_local(fs) else PyFileSystem(FSSpecHandler(fs))


def stream_map(source: ParquetSource | Iterable[pa.Table], fn: Callable[..., pa.Table], engine: str = "local",
               fn_kwargs: dict | None = None, batch_rows: int = 65_536, window: int | None = None
               ) -> Iterator[pa.Table]:
    """``fn(batch, **fn_kwargs)`` over every batch of ``source``, yielded in input order.

    ``local`` runs it in-process; ``ray`` runs it on workers: Parquet shards are read there by
    Ray Data, a driver-side stream is shipped in a window of at most ``window`` tasks in flight.
    """
    kwargs = fn_kwargs or {}
    if check_engine(engine) == "local":
        if isinstance(source, ParquetSource):
            from refinery.io.corpus import iter_parquet

            source = iter_parquet(source.files, source.storage_options, batch_rows=batch_rows)
        for t in source:
            yield fn(t, **kwargs)
        return
    ray = ray_init()
    if isinstance(source, ParquetSource):
        from refinery.io.storage import get_fs

        paths = [get_fs(f, source.storage_options)[1] for f in source.files]
        filesystem = _pyarrow_fs(source.files[0], source.storage_options)
        ds = _bounded(_ordered(ray.data.read_parquet(paths, filesystem=filesystem)))
        ds = ds.map_batches(fn, fn_kwargs=kwargs, batch_format="pyarrow", batch_size=batch_rows)
        yield from ds.iter_batches(batch_format="pyarrow", batch_size=None)
        return
    remote = ray.remote(fn)
    in_flight: deque = deque()
    limit = window or 2 * int(ray.cluster_resources().get("CPU", 1))
    for t in source:
        in_flight.append(remote.remote(t, **kwargs))
        if len(in_flight) >= limit:
            yield ray.get(in_flight.popleft())
    while in_flight:
        yield ray.get(in_flight.popleft())


def actor_map(table: pa.Table, stage_cls, stage_kwargs: dict, engine: str = "local", batch_size: int = 32,
              actors: int = 1, gpus_per_actor: float = 0, desc: str = "stage") -> pa.Table:
    """A stateful stage class (a model loaded once) over ``table``: in-process, or a Ray Data actor
    pool of ``actors`` (``gpus_per_actor`` each); rows keep their order."""
    if check_engine(engine) == "local":
        stage = stage_cls(**stage_kwargs)
        parts = [stage(table.slice(s, batch_size))
                 for s in tqdm(range(0, table.num_rows, batch_size), desc=desc, unit=" batch", disable=None)]
        return pa.concat_tables(parts) if parts else stage(table)
    ray = ray_init()
    ds = _ordered(ray.data.from_arrow(table)).map_batches(
        stage_cls, fn_constructor_kwargs=stage_kwargs, batch_size=batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=actors), num_gpus=gpus_per_actor or None,
        num_cpus=None if gpus_per_actor else actor_cpus())
    return pa.concat_tables([ray.get(ref) for ref in ds.to_arrow_refs()])
