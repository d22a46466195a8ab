"""DuckDB over Parquet: named queries from ``sql/`` (one query a file) or a user's .sql file.

Corpora are exposed as views; user-given names are bound as parameters or quoted as
identifiers, never spliced raw into SQL.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa

from refinery.io.storage import get_fs, is_local

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


def quote_ident(name: str) -> str:
    """A SQL identifier, double-quoted with embedded quotes doubled."""
    return '"' + str(name).replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def connect(threads: int | None = None, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    # spill to the system temp folder, not to ./.tmp of wherever the user happens to stand
    con.execute("SET temp_directory = " + quote_literal(os.path.join(tempfile.gettempdir(), f"refinery-duckdb-{os.getpid()}")))
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute("SET memory_limit = " + quote_literal(memory_limit))
    con.execute("SET preserve_insertion_order = true")
    return con


def _source(con, url: str, storage_options, index: int) -> str:
    """A FROM-clause source for one Parquet file: DuckDB's reader locally, an Arrow dataset over fsspec remotely."""
    fs, path = get_fs(url, storage_options)
    if is_local(fs):
        return f"read_parquet({quote_literal(path)})"
    import pyarrow.dataset as pads

    name = f"__shard_{index}"
    con.register(name, pads.dataset(path, filesystem=fs, format="parquet"))
    return quote_ident(name)


def _columns_with_split(con, source: str, split: str) -> str:
    """The select list of a shard with a ``split`` column: its own where it has one, else ``split``."""
    if "split" in con.sql(f"SELECT * FROM {source} LIMIT 0").columns:
        return f"* EXCLUDE (split), coalesce(split, {quote_literal(split)}) AS split"
    return f"*, {quote_literal(split)} AS split"


def register_corpora(con, corpora: dict[str, list[str]], storage_options=None, view: str = "corpus") -> None:
    """Create view ``corpus`` over the shards of named corpora, with ``split`` and ``shard`` columns.

    ``corpora`` maps a split name to its Parquet files. A corpus's own ``split`` column wins.
    """
    parts = []
    for split, files in corpora.items():
        for url in files:
            source = _source(con, url, storage_options, len(parts))
            parts.append(f"SELECT {_columns_with_split(con, source, split)}, {quote_literal(url)} AS shard "
                         f"FROM {source}")
    con.execute(f"CREATE OR REPLACE VIEW {quote_ident(view)} AS " + " UNION ALL BY NAME ".join(parts))


def load_rows(con, corpora: dict[str, list[str]], storage_options=None, table: str = "rows",
              with_split: bool = True) -> None:
    """Table ``rows(row_id, …, split)``: the shards of named corpora in order, ``row_id`` = position.

    ``corpora`` maps a split name to its Parquet files; a corpus's own ``split`` column wins.
    Without ``with_split`` the rows are taken as they are (no split column is added).
    """
    parts, index = [], 0
    for split, files in corpora.items():
        for url in files:
            source = _source(con, url, storage_options, index)
            columns = _columns_with_split(con, source, split) if with_split else "*"
            parts.append(f"SELECT {columns}, {index} AS __file, row_number() OVER () AS __pos FROM {source}")
            index += 1
    con.execute(f"CREATE OR REPLACE TABLE {quote_ident(table)} AS SELECT (row_number() OVER (ORDER BY __file, __pos) "
                f"- 1)::BIGINT AS row_id, * EXCLUDE (__file, __pos) FROM ({' UNION ALL BY NAME '.join(parts)}) "
                "ORDER BY row_id")


def _bind(sql: str, name: str, params: dict | None) -> dict:
    used = set(re.findall(r"\$([A-Za-z_]\w*)", sql))
    missing = used - set(params or {})
    if missing:
        raise KeyError(f"query {name!r} needs parameters: {', '.join(sorted(missing))}")
    return {k: v for k, v in (params or {}).items() if k in used}


def run_script(con, name: str, params: dict | None = None) -> None:
    """Execute a named statement that creates or changes tables (no result)."""
    sql = load_sql(name)
    con.execute(sql, _bind(sql, name, params) or None)


def run(con, name_or_file: str, params: dict | None = None) -> pa.Table:
    """Run a named or user query; ``$name`` parameters used by the text are bound from ``params``."""
    sql = load_sql(name_or_file)
    return con.sql(sql, params=_bind(sql, name_or_file, params) or None).to_arrow_table()


def split_specs(specs) -> dict[str, list[str]]:
    """``[SPLIT=]PATH`` arguments into {split: [paths]}; the split defaults to the file's stem, and a
    split given more than once (SICK train + trial) is made of all its files."""
    from refinery.io.corpus import parse_split_spec, split_name

    out: dict[str, list[str]] = {}
    for spec in specs:
        name, path = parse_split_spec(spec)
        out.setdefault(name or split_name(path), []).append(path)
    return out


def split_corpora(specs, mapping, opts, workdir: str) -> dict:
    """Finished corpora per split (``[SPLIT=]PATH`` specs, or a {split: path or [paths]} dict): a finished
    corpus as it is, raw inputs converted under ``workdir``. A split without good rows is an error."""
    from refinery.io.corpus import Corpus, EmptyInput, convert, is_corpus

    specs = specs if isinstance(specs, dict) else split_specs(specs)
    corpora: dict[str, list] = {}
    for j, (split, paths) in enumerate(specs.items()):
        paths = [paths] if isinstance(paths, str) else list(paths)
        for i, path in enumerate(paths):
            if not is_corpus(path, opts.storage_options):
                out = os.path.join(workdir, f"split{j}-{i}")  # never a user-given name in a path
                convert([path], out, mapping, opts)
                path = out
            corpora.setdefault(split, []).append(Corpus.open(path, opts.storage_options))
        if not sum(c.manifest["rows"] for c in corpora[split]):
            rejected = sum(c.manifest.get("rejected", 0) for c in corpora[split])
            what = f"split {split!r}" if split else "the input"
            raise EmptyInput(f"{what} ({', '.join(paths)}) has no good rows ({rejected:,} rejected)")
    return corpora


def files_of(corpora: dict) -> dict[str, list[str]]:
    """Parquet files per split of :func:`split_corpora`'s corpora."""
    return {split: [f for c in cs for f in c.files] for split, cs in corpora.items()}


def corpus_files(specs, mapping, opts, workdir: str) -> dict[str, list[str]]:
    """Parquet files per split of ``specs`` (see :func:`split_corpora`)."""
    return files_of(split_corpora(specs, mapping, opts, workdir))


def corpora_rejects(corpora: dict) -> pa.Table:
    """The rejects of every corpus of :func:`split_corpora`, to be carried into an output."""
    from refinery.io.schema import REJECTS_SCHEMA, empty_table

    tables = [c.read_rejects() for cs in corpora.values() for c in cs]
    return pa.concat_tables(tables) if tables else empty_table(REJECTS_SCHEMA)
