"""DuckDB connections and the SQL text of the named queries in ``sql/`` (one query a file) or of a
user's .sql file: what the readers' id hashing, the spill runs and the corpus queries all stand on."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

SQL_DIR = Path(__file__).resolve().parent / "sql"  # shipped inside the package (top-level sql/ links here)


def named_queries() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SQL_DIR.glob("*.sql"))}


def load_sql(name_or_file: str) -> str:
    """The text of ``sql/NAME.sql`` or of a user's ``FILE.sql``."""
    if name_or_file.endswith(".sql") and Path(name_or_file).exists():
        return Path(name_or_file).read_text()
    queries = named_queries()
    if name_or_file not in queries:
        raise KeyError(f"no query named {name_or_file!r}; named queries: {', '.join(queries)}")
    return queries[name_or_file].read_text()


def quote_literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def memory_limit() -> str:
    """DuckDB's memory limit: ``REFINERY_DUCKDB_MEMORY`` (e.g. ``6GB``), else a quarter of the machine's memory
    up to 4 GiB. DuckDB's own default, 80% of the memory, lets one query take what the process's Arrow
    tables, models and other stages need; beyond the limit it spills to disk."""
    given = os.environ.get("REFINERY_DUCKDB_MEMORY")
    if given:
        return given
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1 << 30, min(4 << 30, total // 4)) >> 20}MB"


def connect() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that spills to the system temp folder past ``memory_limit()`` and keeps the
    insertion order. DuckDB is imported here, by the first query: the readers' id hashing and every command's
    start (its --help) import this module without running one."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET memory_limit = " + quote_literal(memory_limit()))
    # spill to the system temp folder, not to ./.tmp of wherever the user happens to stand
    con.execute("SET temp_directory = " + quote_literal(os.path.join(tempfile.gettempdir(), f"refinery-duckdb-{os.getpid()}")))
    con.execute("SET preserve_insertion_order = true")
    return con
