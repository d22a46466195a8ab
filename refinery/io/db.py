"""DuckDB connections and the SQL text of the named queries in ``sql/`` (one query a file) or of a
user's .sql file: what the readers' id hashing, the spill runs and the corpus queries all stand on."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

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


def connect() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that spills to the system temp folder and keeps the insertion order."""
    con = duckdb.connect()
    # spill to the system temp folder, not to ./.tmp of wherever the user happens to stand
    con.execute("SET temp_directory = " + quote_literal(os.path.join(tempfile.gettempdir(), f"refinery-duckdb-{os.getpid()}")))
    con.execute("SET preserve_insertion_order = true")
    return con
