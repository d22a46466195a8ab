"""DuckDB over finished corpora: the inputs of each split made corpora, their Parquet files exposed as a
view or a table, and named queries from ``sql/`` (io's, a method package's own, or a user's .sql file) run over them.

User-given names are bound as parameters or quoted as identifiers, never spliced raw into SQL.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter

import duckdb
import pyarrow as pa

from refinery.io import db
from refinery.io.corpus import AllRejected, Corpus, is_corpus
from refinery.io.corpus_writer import convert
from refinery.io.db import load_sql, quote_literal
from refinery.io.read_options import ReadOptions
from refinery.io.schema import REJECTS_SCHEMA, Mapping, empty_table
from refinery.io.scratch import temporary_folder
from refinery.io.splits import split_specs
from refinery.io.location import get_fs, is_local
from refinery.messages import Refusal


def quote_ident(name: str) -> str:
    """A SQL identifier, double-quoted with embedded quotes doubled."""
    return '"' + str(name).replace('"', '""') + '"'


def connect(threads: int | None = None, most_memory: int = db.QUERY_MEMORY) -> duckdb.DuckDBPyConnection:
    """A connection for queries (``db.connect``), on at most ``threads`` threads (None: DuckDB's default), its memory
    at most ``most_memory`` bytes (DuckDB spills past it)."""
    con = db.connect(most_memory)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def _source(con, url: str, storage_options) -> str:
    """A FROM-clause source for one Parquet file: DuckDB's reader, of a local copy where it is on a store
    (``db.local_copy``)."""
    fs, path = get_fs(url, storage_options)
    return f"read_parquet({quote_literal(path if is_local(fs) else db.local_copy(con, url, storage_options))})"


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
            source = _source(con, url, storage_options)
            parts.append(f"SELECT {_columns_with_split(con, source, split)}, {quote_literal(url)} AS shard "
                         f"FROM {source}")
    con.execute(f"CREATE OR REPLACE VIEW {quote_ident(view)} AS " + " UNION ALL BY NAME ".join(parts))


def load_rows(con, corpora: dict[str, list[str]], storage_options=None, table: str = "rows",
              with_split: bool = True) -> None:
    """Table ``rows(row_id, …, split)``: the shards of named corpora in order, ``row_id`` = position.

    ``corpora`` maps a split name to its Parquet files; a corpus's own ``split`` column wins.
    Without ``with_split`` the rows are taken as they are (no split column is added). The table takes the
    columns of every shard (``UNION ALL BY NAME``: a column a shard lacks is null in its rows), and the shards are
    appended one after the other, each numbered on from the rows before it as DuckDB reads it: the table keeps
    that order, and no window or sort runs over every row and its texts (which held DuckDB at its memory limit,
    and failed there now and then, with 11M pairs)."""
    shards = []
    for split, files in corpora.items():
        for url in files:
            source = _source(con, url, storage_options)
            shards.append(f"SELECT {_columns_with_split(con, source, split) if with_split else '*'} FROM {source}")
    name = quote_ident(table)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT 0::BIGINT AS row_id, * "
                f"FROM ({' UNION ALL BY NAME '.join(shards)}) LIMIT 0")
    rows = 0
    for shard in shards:
        rows += con.execute(f"INSERT INTO {name} BY NAME SELECT ({rows} + row_number() OVER () - 1)::BIGINT AS row_id, "
                            f"* FROM ({shard})").fetchall()[0][0]


def _bind(sql: str, name: str, params: dict | None) -> dict:
    used = set(re.findall(r"\$([A-Za-z_]\w*)", sql))
    missing = used - set(params or {})
    if missing:
        raise Refusal(f"query {name!r} needs parameters: {', '.join(sorted(missing))}", code="missing-setting")
    return {k: v for k, v in (params or {}).items() if k in used}


def run_script(con, name: str, params: dict | None = None, *, package: str | None = None) -> None:
    """Execute a named statement that creates or changes tables (no result); ``package``: the method package whose
    ``sql/`` holds it (``db.load_sql``)."""
    sql = load_sql(name, package)
    con.execute(sql, _bind(sql, name, params) or None)


def create_table(con, table: str, name: str, params: dict | None = None, *, package: str | None = None) -> None:
    """Table ``table`` made of a named query's result (kept in DuckDB, spilled past its memory limit); ``package``:
    the method package whose ``sql/`` holds it (``db.load_sql``)."""
    sql = load_sql(name, package)
    con.execute(f"CREATE OR REPLACE TABLE {quote_ident(table)} AS {sql}", _bind(sql, name, params) or None)


def run(con, name_or_file: str, params: dict | None = None, *, package: str | None = None) -> pa.Table:
    """Run a named or user query; ``$name`` parameters used by the text are bound from ``params``; ``package``: the
    method package whose ``sql/`` holds a named one (``db.load_sql``; none: io's own, as ``refinery sql`` runs)."""
    sql = load_sql(name_or_file, package)
    relation = con.sql(sql, params=_bind(sql, name_or_file, params) or None)
    if relation is None:   # a file of comments or nothing: no statement that gives rows
        raise Refusal(f"{name_or_file}: holds no query that gives rows", code="invalid-setting")
    return relation.to_arrow_table()


def csv_ready(table: pa.Table) -> pa.Table:
    """``table`` with its nested columns (lists, structs, maps), which CSV cannot hold, as JSON text:
    ``["dev", "test"]``."""
    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            text = [None if v is None else json.dumps(v, ensure_ascii=False, default=str)
                    for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(text, pa.string()))
    return table


def save_result(table: pa.Table, target: str, fmt: str) -> None:
    """Write a query's result to the file ``target`` (``refinery sql --output``): ``parquet``, ``csv`` (nested
    columns as JSON text: ``csv_ready``), any other format as JSON, a list of rows."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    if fmt == "parquet":
        pq.write_table(table, target)
    elif fmt == "csv":
        pcsv.write_csv(csv_ready(table), target)
    else:
        with open(target, "w") as fh:
            json.dump(table.to_pylist(), fh, default=str, indent=1)


def split_corpora(specs, mapping, opts, workdir: str) -> dict:
    """Finished corpora per split (``[SPLIT=]PATH`` specs, or a {split: path or [paths]} dict): a finished
    corpus as it is, raw inputs converted under ``workdir``. A split without good rows is an error."""
    specs = specs if isinstance(specs, dict) else split_specs(specs)
    corpora: dict[str, list] = {}
    for j, (split, paths) in enumerate(specs.items()):
        paths = [paths] if isinstance(paths, str) else list(paths)
        named = [f"{split}={p}" if split else p for p in paths]
        reasons = Counter()
        for i, path in enumerate(paths):
            if not is_corpus(path, opts.storage_options):
                out = os.path.join(workdir, f"split{j}-{i}")  # never a user-given name in a path
                try:
                    convert([path], out, mapping, opts)
                except AllRejected as e:   # converted into a temporary folder: its rejects are named by reason
                    raise AllRejected(named, e.reasons) from None
                path = out
            corpus = Corpus.open(path, opts.storage_options)
            corpora.setdefault(split, []).append(corpus)
            reasons.update(corpus.manifest.reject_reasons)
        if not sum(c.manifest.rows for c in corpora[split]):
            raise AllRejected(named, reasons or Counter({"reason not recorded": sum(
                c.manifest.rejected for c in corpora[split])}))   # the rejects are in those corpora
    return corpora


def files_of(corpora: dict) -> dict[str, list[str]]:
    """Parquet files per split of :func:`split_corpora`'s corpora."""
    return {split: [f for c in cs for f in c.files] for split, cs in corpora.items()}


def corpus_files(specs, mapping, opts, workdir: str) -> dict[str, list[str]]:
    """Parquet files per split of ``specs`` (see :func:`split_corpora`)."""
    return files_of(split_corpora(specs, mapping, opts, workdir))


def load_input(con, splits: dict, mapping: Mapping | None, opts: ReadOptions, with_split: bool = True) -> pa.Table:
    """Table ``rows`` of ``con`` (``load_rows``): the rows of ``splits`` ({split: path or [paths]}: raw inputs read
    through ``mapping`` into a scratch folder, removed once loaded; finished corpora as they are) in input order;
    the rejects of every input, which an output carries so that no row goes missing."""
    with temporary_folder("rows-") as work:
        corpora = split_corpora(splits, mapping, opts, work)
        load_rows(con, files_of(corpora), opts.storage_options, with_split=with_split)
        return corpora_rejects(corpora)


def corpora_rejects(corpora: dict) -> pa.Table:
    """The rejects of every corpus of :func:`split_corpora`, to be carried into an output."""
    tables = [c.read_rejects() for cs in corpora.values() for c in cs]
    return pa.concat_tables(tables) if tables else empty_table(REJECTS_SCHEMA)
