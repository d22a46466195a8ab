"""DuckDB connections, local copies of a store's Parquet files for them (``local_copy``), and the SQL text of the
named queries in ``sql/`` (one query a file), of those in a method package's own ``sql/`` (its algorithm, e.g.
``refinery/methods/upsample/sql/``) or of a user's .sql file: what the readers' id hashing, the spill runs, the corpus
queries and the methods' SQL all stand on."""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from refinery.io.location import get_fs, on_store
from refinery.io.memory import memory_budget
from refinery.io.scratch import process_folder, scratch_folder
from refinery.messages import Refusal

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    import duckdb


def named_queries(package: str | None = None) -> dict[str, Traversable]:
    """The named queries of ``package``'s ``sql/`` folder (a method's package, by name: the caller's
    ``__package__``), by name; without ``package`` io's own, shipped in refinery/io/sql/ (the top-level sql/
    links there), which ``refinery sql`` runs by name but for those named ``_…``: refinery's own steps
    (``user_queries``)."""
    folder = files(package or __package__) / "sql"
    return {q.name.removesuffix(".sql"): q for q in sorted(folder.iterdir(), key=lambda q: q.name)
            if q.name.endswith(".sql")}


def load_sql(name_or_file: str, package: str | None = None) -> str:
    """The text of a user's ``FILE.sql`` or of the named query ``sql/NAME.sql`` (``package``'s own, else io's:
    ``named_queries``)."""
    if name_or_file.endswith(".sql") and Path(name_or_file).exists():
        return Path(name_or_file).read_text()
    queries = named_queries(package)
    if name_or_file not in queries:
        raise Refusal(f"no query named {name_or_file!r}; named queries: {', '.join(user_queries())}",
                      code="unknown-setting")
    return queries[name_or_file].read_text()


def user_queries() -> list[str]:
    """The names of the queries ``refinery sql`` runs over a user's corpora (io's own ``_…`` steps aside)."""
    return [name for name in named_queries() if not name.startswith("_")]


def quote_literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


QUERY_MEMORY = 4 << 30   # the most a connection's queries take by default (a stage may ask for less)


QUERY_SHARE = 0.5   # of the run's memory budget, the most DuckDB takes before it spills
LEAST_QUERY_MEMORY = 256 << 20


def memory_limit(most: int = QUERY_MEMORY) -> str:
    """DuckDB's memory limit: ``QUERY_SHARE`` of the run's memory budget (``io.memory``), at most ``most`` bytes (what
    the stage's queries need; DuckDB's own default, 80% of the memory, would take what the process's Arrow tables,
    models and other stages need) and at least ``LEAST_QUERY_MEMORY``. Beyond the limit it spills to disk."""
    return f"{max(LEAST_QUERY_MEMORY, min(most, int(QUERY_SHARE * memory_budget()))) >> 20}MB"


def connect(most_memory: int = QUERY_MEMORY) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that spills to the system temp folder past ``memory_limit(most_memory)`` and keeps the
    insertion order. DuckDB is imported here, by the first query: the readers' id hashing and every command's
    start (its --help) import this module without running one."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET memory_limit = " + quote_literal(memory_limit(most_memory)))
    # spill to the process's scratch folder (removed at exit, or by the next run where this one was killed), not to
    # ./.tmp of wherever the user happens to stand
    con.execute("SET temp_directory = " + quote_literal(os.path.join(process_folder(), "duckdb")))
    con.execute("SET preserve_insertion_order = true")
    return con



def local_copy(con: duckdb.DuckDBPyConnection, url: str, storage_options: dict | None = None) -> str:
    """A local copy of the store's file ``url`` (a remote Parquet shard), for ``con`` to read with DuckDB's own
    reader; the copies are removed with the connection (or at exit). A store's failure is one line naming the file
    and the operation (``on_store``), raised here, before any query.

    Why not a pyarrow dataset over the fsspec filesystem, which DuckDB would scan: its scanner calls the filesystem
    on Arrow's threads, and a store's failure there could deadlock the run (Arrow words the Python error under its
    scheduler's lock, needing the GIL that the DuckDB thread starting the scan holds while it waits for that lock),
    or end it as DuckDB's error with no operation named (issue 64: a store killed during ``upsample``)."""
    fs, path = get_fs(url, storage_options)
    handle, target = tempfile.mkstemp(suffix=".parquet", dir=_copies_of(con))
    os.close(handle)
    with on_store(url, "reading"):
        fs.get_file(path, target)
    return target


_COPIES: dict[int, str] = {}   # id of a connection → the folder of its local copies (``local_copy``)


def _copies_of(con) -> str:
    """The folder of ``con``'s local copies, made with the first one and removed when ``con`` is."""
    if id(con) not in _COPIES:
        folder = scratch_folder("shards-")
        _COPIES[id(con)] = folder
        weakref.finalize(con, _remove_copies, id(con), folder)
    return _COPIES[id(con)]


def _remove_copies(key: int, folder: str) -> None:
    _COPIES.pop(key, None)
    shutil.rmtree(folder, ignore_errors=True)
