"""Where work runs: in-process, a local Ray, or the cluster named by ``RAY_ADDRESS``.

The one module that owns Ray. Stages hand it a row-wise function and a source; it returns the mapped batches as a
stream, in input order, whichever engine runs them:

- ``stream_map``: a stateless function over Parquet shards (Ray Data ``read_parquet`` → ``map_batches`` on workers)
  or over a stream of tables read by the driver (a bounded window of Ray tasks). Nothing is materialized: the
  driver holds at most ``window`` batches.
- ``map_reduce``: units mapped to partitioned parts and part p of every unit reduced, all on Ray workers
  (the audit's counts summed by key range), the driver handed the reduced values only.
- ``actor_map``: a stateful, model-holding stage class as a Ray Data actor pool.
- ``actor_pool_map``: a model loaded once per Ray actor, called on each of a stream of units (a map stage's).
- ``map_calls``: independent calls side by side (threads, or Ray tasks).
- ``ray_task.run_as_task`` (a module of its own): a stage whose work is one process (DuckDB, NumPy) as one Ray
  task, so the driver only orchestrates; its progress bars are relayed to the driver and drawn there.

Faults: a task whose worker process or node dies is rerun, and a dead actor restarted (its batch retried), at most
``TASK_RETRIES`` times; an exception raised by the stage's own code is never retried. When the retries are spent
the stage fails with ``StageFailed``, one line that names the stage, and Ray's own traceback of the fault is kept
off the console.

A cluster named by ``RAY_ADDRESS`` must answer within ``ray_timeout()`` seconds (``--ray-timeout``,
``REFINERY_RAY_TIMEOUT``): one that does not, or that refuses the driver, ends the run with one
``RayUnreachable`` line naming the address, before any work.
"""
from __future__ import annotations

import logging
import os
import warnings
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import pyarrow as pa

from refinery.messages import Refusal
from refinery.pipeline.cluster_address import RayUnreachable, check_ray_address, join_cluster
from refinery.termination import sigterm_kept

if TYPE_CHECKING:
    from refinery.pipeline.unit_pieces import UnitPieces
    from refinery.progress import Progress   # tqdm loads when a bar is drawn, not at a command's start


ENGINES = ("local", "ray")
# The driver maps every object-store page it has read from, so over a long stream its RSS grows by
# the store's size: 512 MiB keeps it bounded on a small machine and holds the streaming window twice.
LOCAL_OBJECT_STORE_BYTES = 512 << 20
STREAM_STORE_BYTES = 256 << 20      # what a streamed dataset may buffer ahead of the driver
TASK_RETRIES = 3  # reruns of a task (restarts of an actor) whose worker or node died, then the stage fails


class StageFailed(RuntimeError):
    """A stage's work on Ray was lost more often than ``TASK_RETRIES`` allows."""


_started = {"budget": None, "num_cpus": None, "ours": False}   # the budget and CPUs of the Ray this process started


def ray_init(num_cpus: int | None = None):
    """Connect to the cluster named by ``RAY_ADDRESS``, else start a quiet local Ray.

    Its workers hold the run's memory budget (``io.memory``) and the terms of its messages (``refinery.messages``):
    a local instance's inherit them, a cluster's get them as the job's environment; another budget starts them
    again (not a Ray the caller started).

    A cluster that does not answer, or refuses the driver (say, a head with token authentication and no
    token here), ends it with one ``RayUnreachable`` line naming the address. The local instance has no
    dashboard, a bounded object store and quiet logs. Actor pools on it must ask for fractional CPUs (see
    ``actor_cpus``) or they starve the read tasks.
    """
    import ray

    from refinery.io.memory import MEMORY_BUDGET_ENV
    from refinery.messages import TERMS_ENV

    budget = os.environ.get(MEMORY_BUDGET_ENV)
    if ray.is_initialized():
        if budget == _started["budget"] or not _started["ours"]:   # a Ray the caller started is theirs to keep
            return ray
        ray.shutdown()   # its workers hold another run's memory budget: start them again with this one's
        num_cpus = num_cpus or _started["num_cpus"]
    _started.update(budget=budget, num_cpus=num_cpus, ours=True)
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    # a task's error is raised once, as itself (``faults_named``): not again for each result left unread
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    address = os.environ.get("RAY_ADDRESS")
    if address:
        check_ray_address()
        try:
            # the run's memory budget and the terms its messages are shown in, for the cluster's workers too
            join_cluster(address, {name: os.environ[name] for name in (MEMORY_BUDGET_ENV, TERMS_ENV)
                                   if os.environ.get(name)})
        except RayUnreachable:
            raise
        except (ConnectionError, RuntimeError, ValueError) as e:
            detail = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
            raise RayUnreachable(f"joining the Ray cluster at RAY_ADDRESS={address} failed: {detail}") from e
    else:
        # a private instance turns on Ray's token authentication and says so on every start: keep it, unsaid
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        with sigterm_kept():
            ray.init(
                address="local",  # a fresh local instance, never a stray head found on the machine
                num_cpus=num_cpus or os.cpu_count(),
                include_dashboard=False,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=True,
            )
    return ray


def ray_data():
    """``ray_init``'s Ray with Ray Data set up for refinery's streams: no progress bars or plan notes of its own, its
    errors off the console, Parquet read by plain retried tasks. Called where a stream goes through Ray Data (its
    import, about a second of the driver's CPU, is left to those: tasks and reducers do without it)."""
    ray = ray_init()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.verbose_stats_logs = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)   # its plan and progress notes stay in its log file
    # Parquet reads as plain retried tasks: the V2 reader lists files through actors that are not
    # restarted, so losing a node while it lists fails the read past any retry budget
    ctx.use_datasource_v2 = False
    for handler in logging.getLogger("ray.data").handlers:
        if handler.get_name() == "console" and _for_the_console not in handler.filters:
            handler.addFilter(_for_the_console)
    return ray


# Ray Data's notes about its own machinery, kept in its log file: refinery draws its own progress bars, and
# the memory its tasks use is the stages' business (a stage states its resources), not the user's
_NOTES_OFF_THE_CONSOLE = ("ray.data._internal.progress", "ray.data._internal.issue_detection")


def _for_the_console(record: logging.LogRecord) -> bool:
    """Ray Data's console shows no errors: a failed execution's tracebacks stay in its log file
    (``ray-data.log`` in the session's logs), and the exception that ends the stage says it in one line;
    nor the notes of ``_NOTES_OFF_THE_CONSOLE``."""
    return record.levelno < logging.ERROR and not record.name.startswith(_NOTES_OFF_THE_CONSOLE)


def cluster_cpus() -> int:
    """The CPUs of the Ray cluster (started here if none is)."""
    return max(1, int(ray_init().cluster_resources().get("CPU", 1)))


def single_node() -> bool:
    """Whether the Ray cluster (started here if none is) is this machine alone: its workers reach this disk."""
    return sum(1 for node in ray_init().nodes() if node.get("Alive")) <= 1


def actor_cpus() -> float:
    """CPUs per actor: whole on a cluster, a fraction on a small local box."""
    return 1.0 if os.environ.get("RAY_ADDRESS") or (os.cpu_count() or 1) > 8 else 0.5


def ray_shutdown():
    import ray

    if ray.is_initialized() and not os.environ.get("RAY_ADDRESS"):
        ray.shutdown()
    _started.update(budget=None, num_cpus=None, ours=False)   # a Ray started next is the caller's until ours


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise Refusal(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}", code="invalid-setting")
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


@contextmanager
def _quiet_remote_args_deprecation():
    """Ray Data (2.60) takes a retry budget only as a remote argument, deprecated with no replacement yet."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@contextmanager
def faults_named(stage: str):
    """A worker, actor, node or object lost past the retries, as one ``StageFailed`` line naming ``stage``; an error
    a task raised (a bad row, an unreadable file) as itself, as it would be raised in this process."""
    from ray import exceptions as rx

    try:
        yield
    except (rx.WorkerCrashedError, rx.RayActorError, rx.NodeDiedError, rx.LocalRayletDiedError,
            rx.ObjectLostError, rx.OutOfMemoryError) as e:
        detail = next(iter(str(e).strip().splitlines()), "")
        raise StageFailed(f"stage {stage}: a Ray worker or node died running its batches, past {TASK_RETRIES} "
                          f"retries ({type(e).__name__}: {detail})") from e
    except rx.RayTaskError as e:
        raise (e.cause if isinstance(e.cause, Exception) else e) from None


def stream_map(source: ParquetSource | Iterable, fn: Callable, engine: str = "local", fn_kwargs: dict | None = None,
               batch_rows: int = 65_536, *, window: int | None = None, stage: str | None = None,
               resources=None, ahead: int = 0) -> Iterator:
    """``fn(batch, **fn_kwargs)`` over every batch of ``source``, yielded in input order.

    ``local`` runs it in-process (with ``ahead``, reading and mapping the next ``ahead`` batches in a thread of
    their own while the caller works on the earlier ones: for a compiled ``fn`` that releases the GIL beside a
    caller whose own work does); ``ray`` runs it on workers: Parquet shards are read there by
    Ray Data (``fn`` returns a table), a driver-side stream (of tables, or any picklable items; ``fn``
    returns any picklable value) is shipped in a window of at most ``window`` tasks in flight, each asking
    for ``resources`` (a ``stage.Resources``), ``fn_kwargs`` put in the object store once for all of them.
    ``stage`` (default: ``fn``'s name) is what a failure past the retries names.
    """
    kwargs = fn_kwargs or {}
    if check_engine(engine) == "local":
        if isinstance(source, ParquetSource):
            from refinery.io.corpus import iter_parquet

            source = iter_parquet(source.files, source.storage_options, batch_rows=batch_rows)
        mapped = (fn(t, **kwargs) for t in source)
        return computed_ahead(mapped, ahead) if ahead else mapped
    # Ray is started here, in the caller's thread, not when the first batch is asked for: the stream may be read by
    # another thread (``computed_ahead``), where Ray can set no signal handlers (its local instance then dies)
    ray = ray_data() if isinstance(source, ParquetSource) else ray_init()
    return _mapped_on_ray(ray, source, fn, kwargs, batch_rows, window=window, stage=stage, resources=resources)


def _mapped_on_ray(ray, source: ParquetSource | Iterable, fn: Callable, kwargs: dict, batch_rows: int, *,
                   window: int | None, stage: str | None, resources) -> Iterator:
    """``stream_map`` on the Ray that ``ray`` started."""
    with faults_named(stage or fn.__name__):
        if isinstance(source, ParquetSource):
            from refinery.io.location import get_fs, pyarrow_filesystem

            paths = [get_fs(f, source.storage_options)[1] for f in source.files]
            filesystem = pyarrow_filesystem(source.files[0], source.storage_options)
            with _quiet_remote_args_deprecation():
                ds = ray.data.read_parquet(paths, filesystem=filesystem, ray_remote_args={"max_retries": TASK_RETRIES})
                ds = _bounded(_ordered(ds)).map_batches(fn, fn_kwargs=kwargs, batch_format="pyarrow",
                                                        batch_size=batch_rows, max_retries=TASK_RETRIES,
                                                        **ray_options(resources))
            yield from ds.iter_batches(batch_format="pyarrow", batch_size=None)
            return
        remote = ray.remote(max_retries=TASK_RETRIES, **ray_options(resources))(fn)
        shared = {name: ray.put(value) for name, value in kwargs.items()}
        in_flight: deque = deque()
        limit = window or 2 * cluster_cpus()
        for t in source:
            in_flight.append(remote.remote(t, **shared))
            if len(in_flight) >= limit:
                yield ray.get(in_flight.popleft())
        while in_flight:
            yield ray.get(in_flight.popleft())


def computed_ahead(items: Iterator, ahead: int) -> Iterator:
    """``items`` in order, the next ``ahead`` of them computed meanwhile by a thread of their own. What computing
    ``items`` raises is raised here, in its place in the order; closing this generator (the caller's error, a
    Ctrl-C) stops the thread before its next item."""
    import queue
    import threading

    end = object()
    waiting: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def hand_on(entry) -> bool:
        while not stop.is_set():
            try:
                waiting.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def compute() -> None:
        try:
            for item in items:
                if not hand_on((item, None)):
                    return
            hand_on((end, None))
        except BaseException as e:   # raised in the caller's thread, where the item it could not compute was due
            hand_on((end, e))

    threading.Thread(target=compute, name="refinery-ahead", daemon=True).start()
    try:
        while True:
            item, error = waiting.get()
            if item is end:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()


def map_reduce(units: list, map_fn: Callable, reduce_fn: Callable, partitions: int, *, shared: dict | None = None,
               stage: str | None = None, resources=None, on_mapped: Callable = lambda read: None,
               held: bool = False) -> list:
    """A reduce by key range on Ray workers, the driver holding only what it is handed.

    ``map_fn(unit, **shared)`` returns (what the driver reads of the unit, what every reducer reads of it, the
    unit's ``partitions`` parts). ``on_mapped`` gets what each unit hands the driver, in the order of ``units``.
    ``reduce_fn(parts, common)`` combines part p of every unit with the list of what every unit hands every
    reducer (each put in the object store once), on a worker too, as soon as the maps it reads are done: the
    parts go from worker to worker, never through the driver, and are freed once reduced. Returns the
    ``partitions`` reduced values, or with ``held`` their refs (once every reducer is done), the values left in the
    object store for a task to take. Every task asks for ``resources`` and is rerun if its worker dies (``shared``
    put in the object store once).
    """
    ray = ray_init()
    with faults_named(stage or map_fn.__name__):
        refs = {name: ray.put(value) for name, value in (shared or {}).items()}
        mapping = ray.remote(num_returns=partitions + 2, max_retries=TASK_RETRIES, **ray_options(resources))(_flat)
        reducing = ray.remote(max_retries=TASK_RETRIES, **ray_options(resources))(_reduced)
        mapped = [mapping.remote(map_fn, unit, refs) for unit in units]
        reduced = [reducing.remote(reduce_fn, len(mapped), *(unit[1] for unit in mapped),
                                   *(unit[2 + p] for unit in mapped)) for p in range(partitions)]
        reads = [unit[0] for unit in mapped]
        del mapped   # the reducers hold the parts now
        for read in reads:
            on_mapped(ray.get(read))
        if held:
            ray.wait(reduced, num_returns=len(reduced), fetch_local=False)
            return reduced
        return ray.get(reduced)


def _flat(map_fn: Callable, unit, shared: dict) -> tuple:
    """In a map task: what the driver reads, what every reducer reads, then each part as a value of its own (an
    object of its own)."""
    import ray

    read, common, parts = map_fn(unit, **{name: ray.get(ref) for name, ref in shared.items()})
    return (read, common, *parts)


def _reduced(reduce_fn: Callable, units: int, *values):
    """In a reduce task: ``values`` are every unit's common value, then its part."""
    return reduce_fn(list(values[units:]), list(values[:units]))


def ray_options(resources) -> dict:
    """What a task asks Ray for: the stage's ``resources`` (``stage.Resources.ray_options``), or Ray's defaults."""
    return resources.ray_options() if resources is not None else {}


def actor_map(table: pa.Table, actor_cls, actor_kwargs: dict, engine: str = "local", batch_size: int = 32,
              actors: int = 1, resources=None, *, desc: str = "model", bar: Progress | None = None,
              pieces: "UnitPieces | None" = None) -> pa.Table:
    """A model actor class (``models.actors``: a model loaded once, called on batches) over ``table``, one output
    row per input row in order: in-process, or a Ray Data actor pool of ``actors``, each asking for ``resources``.
    Progress is rows done, on a bar named ``desc`` or a caller's ``bar`` (generation's shards), per batch and within
    one where the actor has an ``advance`` attribute (locally, called with the batch's rows done so far). With
    ``pieces`` (``unit_pieces.UnitPieces``) the units a killed run finished are read back, the others mapped."""
    from refinery.progress import progress

    own = bar is None
    bar = progress(total=table.num_rows, desc=desc, unit=" row") if own else bar
    try:
        def blocks(rows: pa.Table) -> Iterator[pa.Table]:
            return _actor_blocks(rows, actor_cls, actor_kwargs, engine, batch_size, actors=actors,
                                 resources=resources, desc=desc, bar=bar)
        if pieces is not None:
            return pieces.mapped(table, blocks, batch_size, bar)
        parts = list(blocks(table))
        return pa.concat_tables(parts) if parts else table.slice(0, 0)
    finally:
        if own:
            bar.close()


def _actor_blocks(table: pa.Table, actor_cls, actor_kwargs: dict, engine: str, batch_size: int, *, actors: int,
                  resources, desc: str, bar: Progress) -> Iterator[pa.Table]:
    """``actor_map``'s output blocks, in order, as they come (locally, an empty table mapped: its columns)."""
    from refinery.progress import RowsDone

    if check_engine(engine) == "local":
        actor = actor_cls(**actor_kwargs)
        if not table.num_rows:
            yield actor(table)
        for start in range(0, table.num_rows, batch_size):
            within = RowsDone(bar)
            if hasattr(actor, "advance"):   # an actor that says how far into a batch it is (a generator)
                actor.advance = within
            block = actor(table.slice(start, batch_size))
            within(block.num_rows)
            yield block
        return
    ray = ray_data()
    options = _actor_options(resources)   # Ray Data's: no GPU count where none are asked, no CPU count beside GPUs
    gpus = options["num_gpus"]
    options.update(num_gpus=gpus or None, num_cpus=None if gpus else options["num_cpus"])
    with faults_named(desc), _quiet_remote_args_deprecation():
        ds = _ordered(ray.data.from_arrow(table)).map_batches(
            actor_cls, fn_constructor_kwargs=actor_kwargs, batch_size=batch_size, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=actors), max_restarts=TASK_RETRIES,
            max_task_retries=TASK_RETRIES, **options)
        for block in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            bar.update(block.num_rows)
            yield block


def _actor_options(resources) -> dict:
    """What one actor of a stage asks Ray for: its ``resources`` (one CPU by default), its CPUs at most
    ``actor_cpus()``, its GPUs (0 where none are asked)."""
    options = {"num_cpus": 1, "num_gpus": 0, **ray_options(resources)}
    options["num_cpus"] = min(options["num_cpus"], actor_cpus())
    return options


def actor_pool_map(items: Iterable, worker_cls, worker_kwargs: dict, *, actors: int = 1, resources=None,
                   stage: str = "model", on_done: Callable = lambda value: None) -> None:
    """``worker_cls(**worker_kwargs)`` (a model loaded once) on each of ``actors`` Ray actors, each asking for
    ``resources`` (GPUs where the stage asks for them); every item of ``items`` (read as they are handed out: a
    stream) called on a free actor, ``on_done`` given each call's value as it comes (in any order). A dead actor is
    restarted and its call retried, at most ``TASK_RETRIES`` times."""
    from ray.util import ActorPool

    ray = ray_init()
    remote = ray.remote(worker_cls).options(max_restarts=TASK_RETRIES, max_task_retries=TASK_RETRIES,
                                            **_actor_options(resources))
    with faults_named(stage):   # the arguments are small (a stage, its input's shard list): in the actor's spec,
        #                           where a restarted actor finds them again
        pool = ActorPool([remote.remote(**worker_kwargs) for _ in range(actors)])
        for item in items:
            while not pool.has_free():
                on_done(pool.get_next_unordered())
            pool.submit(lambda actor, value: actor.__call__.remote(value), item)
        while pool.has_next():
            on_done(pool.get_next_unordered())


def map_calls(fn: Callable, calls: list[dict], shared: dict | None = None, engine: str = "local",
              desc: str | None = None, threads: int | None = None, cpus: float = 1) -> list:
    """``[fn(**shared, **call) for call in calls]``, independent calls run side by side, with a bar of those done.

    ``local`` runs them on ``threads`` threads (default: the machine's cores; ``fn`` should spend its time
    in code that releases the GIL, as NumPy and scikit-learn's solvers do); ``ray`` runs each as a task,
    the large ``shared`` arguments put in the object store once and read zero-copy by every task.
    ``desc`` names the work in the bar and in a failure past the retries; ``cpus``: what each task asks for
    (0 for a task that mostly waits on tasks of its own).
    """
    from refinery.progress import progress

    shared, results = shared or {}, [None] * len(calls)
    desc = desc or fn.__name__
    with progress(total=len(calls), desc=desc, unit=" task") as bar:
        if check_engine(engine) == "local":
            from concurrent.futures import ThreadPoolExecutor, as_completed

            with ThreadPoolExecutor(max_workers=max(1, min(len(calls), threads or os.cpu_count() or 1))) as pool:
                futures = {pool.submit(fn, **shared, **call): i for i, call in enumerate(calls)}
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update(1)
            return results
        ray = ray_init()
        with faults_named(desc):
            refs = {name: ray.put(value) for name, value in shared.items()}
            remote = ray.remote(max_retries=TASK_RETRIES, num_cpus=cpus)(fn)
            pending = {remote.remote(**refs, **call): i for i, call in enumerate(calls)}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                results[pending.pop(done[0])] = ray.get(done[0])
                bar.update(1)
    return results
