"""Files like the ones users bring, written the way the tools they use write them.

``write_cases(root, rows)`` writes every case it can (polars and Hugging Face ``datasets`` only when they are
installed) from real SNLI rows and returns ``{name: Case}``. A case knows how to read it (``flags``), which column
of the canonical corpus names a row's source record (``key``), and which lines or records were damaged on purpose
(``rejects``); what the file holds is left for the tests to count from its bytes or its Arrow metadata.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

SICK_HEADER = ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment"]
MSRP_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
NLI_COLUMNS = ["row", "sentence1", "sentence2", "gold_label"]
STRAY_QUOTES = ('"{}', '{}"', 'He said "{}', '"{}" he said', "''{}''", '{} 12" tall')
NAMES = ("msrp_map", "msrp_preset", "sick", "csv_quotes", "header_only", "duplicate_unmapped", "wide",
         "pandas_parquet", "large_string_parquet", "string_view_parquet", "qqp_int_parquet", "bool_label_feather",
         "ipc_stream", "duckdb_parquet", "polars_parquet", "polars_ipc", "hf_dataset", "hf_dataset_dict",
         "hf_layout", "hf_layout_dict", "mixed_folder", "fever_claims")


@dataclass
class Case:
    input: Path                  # a file or folder, as given on the command line
    flags: list                  # --preset / --map
    key: str                     # the canonical column whose value names a row's source record
    kind: str                    # "tsv", "csv", "jsonl" (counted by lines), "records" (Parquet, Arrow), "mixed"
    rejects: set = field(default_factory=set)   # lines (records) that are rejects by design
    splits: tuple = ()           # a DatasetDict's split names, in order


def snli_rows(path, n: int) -> list[dict]:
    """The first ``n`` gold-labelled SNLI rows as (row number, sentence1, sentence2, gold_label)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["gold_label"] != "-":
                rows.append({"row": len(rows), "sentence1": r["sentence1"], "sentence2": r["sentence2"],
                             "gold_label": r["gold_label"]})
            if len(rows) == n:
                return rows
    return rows


def _tsv(path: Path, header: list, lines: list[list[str]], end: str = "\n", bom: bool = False,
         trailing_newline: bool = True, encode=lambda i, text: text.encode("utf-8")) -> None:
    body = [encode(i, "\t".join(fields)) for i, fields in enumerate([header, *lines])]
    data = end.encode().join(body) + (end.encode() if trailing_newline else b"")
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)


def msrp_like(root: Path, rows: list[dict]) -> Path:
    """MSRP's layout (BOM, ``Quality  #1 ID  #2 ID  #1 String  #2 String``) with stray quotes in a seventh of the
    texts: unbalanced, leading, trailing, inches; TSV has no quoting, so every line is one row."""
    lines = []
    for r in rows:
        s1 = STRAY_QUOTES[r["row"] % len(STRAY_QUOTES)].format(r["sentence1"]) if r["row"] % 7 == 0 else r["sentence1"]
        lines.append([str(int(r["gold_label"] == "entailment")), str(100_000 + r["row"]), str(900_000 + r["row"]),
                      s1, r["sentence2"]])
    path = root / "msr_paraphrase_train.txt"
    _tsv(path, MSRP_HEADER, lines, end="\r\n", bom=True)
    return path


def sick_like(root: Path, rows: list[dict]) -> tuple[Path, set]:
    """SICK's layout with CRLF ends, no last newline, a blank and a whitespace-only line, quotes in texts, a row
    short of a column and a row in Windows-1252 (both rejects, by their physical line)."""
    lines, rejects = [], set()
    for r in rows:
        s2 = f'{r["sentence2"]} "quoted"' if r["row"] % 5 == 0 else r["sentence2"]
        lines.append([str(r["row"]), r["sentence1"], s2, f"{1 + r['row'] % 40 / 10:.1f}", r["gold_label"].upper()])
    lines[10] = lines[10][:4]                       # short of a column
    lines[20][1] = "Un caf\u00e9 \u201cnoir\u201d"  # written in Windows-1252 below
    lines.insert(30, [""])                          # blank line
    lines.insert(40, ["  \t "])                     # whitespace only
    rejects = {12, 22}                              # physical lines: the header is line 1
    path = root / "SICK_train.txt"
    _tsv(path, SICK_HEADER, lines, end="\r\n", trailing_newline=False,
         encode=lambda i, text: text.encode("cp1252" if i == 21 else "utf-8"))
    return path, rejects


def csv_quotes(root: Path, rows: list[dict]) -> tuple[Path, set]:
    """RFC 4180 CSV from Python's csv writer (quoted commas and doubled quotes, a 210,000-character quoted field),
    with damage a spreadsheet or a hand edit leaves: a quoted field over two lines, an unbalanced quote, a stray
    quote inside a field (kept: a quote opens a field only at its start), a row with an extra field, a
    Windows-1252 line, blank lines."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "premise", "hypothesis", "label", "note"])
    for r in rows:
        premise = f'{r["sentence1"]}, "so to speak"' if r["row"] % 4 == 0 else r["sentence1"]
        writer.writerow([f"r{r['row']}", premise, r["sentence2"], r["gold_label"],
                         "x, " * 70_000 if r["row"] == 3 else ""])
    lines = buf.getvalue().encode("utf-8").split(b"\n")[:-1]
    lines[5] = b'r-multi,"one line\nand the next",' + b"h,neutral,"     # a record over physical lines 6-7
    lines[9] = b'r-unbalanced,"opens and never closes,h,neutral,'          # line 11 (after the one above)
    lines[12] = b'r-stray,a 6" ruler,h,neutral,'                           # kept as it is
    lines[15] = b"r-wide,a,b,neutral,,extra"
    lines[18] = "r-cp1252,caf\u00e9 cr\u00e8me,h,neutral,".encode("cp1252")
    lines.insert(25, b"")
    data = b"\n".join(lines) + b"\n\n"
    path = root / "pairs.csv"
    path.write_bytes(data)
    return path, {6, 7, 11, 17, 20}


def header_only(root: Path) -> Path:
    path = root / "header_only.txt"
    _tsv(path, SICK_HEADER, [])
    return path


def duplicate_unmapped(root: Path, rows: list[dict]) -> Path:
    """A spreadsheet export: two empty header cells (trailing tabs), which pass through renamed."""
    path = root / "exported.tsv"
    _tsv(path, [*NLI_COLUMNS, "", ""], [[str(r["row"]), r["sentence1"], r["sentence2"], r["gold_label"], "", "x"]
                                        for r in rows])
    return path


def wide(root: Path, rows: list[dict], extra: int = 3000) -> tuple[Path, set]:
    """Rows of 3,004 columns, one of them a column short."""
    header = NLI_COLUMNS + [f"feature_{i}" for i in range(extra)]
    lines = [[str(r["row"]), r["sentence1"], r["sentence2"], r["gold_label"], *(str(i) for i in range(extra))]
             for r in rows]
    lines[7] = lines[7][:-1]
    path = root / "wide.tsv"
    _tsv(path, header, lines)
    return path, {9}


def _nli_table(rows: list[dict], text=pa.string(), label=None) -> pa.Table:
    labels = pa.array([r["gold_label"] for r in rows], text)
    return pa.table({"row": pa.array([r["row"] for r in rows], pa.int64()),
                     "sentence1": pa.array([r["sentence1"] for r in rows], text),
                     "sentence2": pa.array([r["sentence2"] for r in rows], text),
                     "gold_label": labels.dictionary_encode() if label == "dictionary" else labels})


def arrow_cases(root: Path, rows: list[dict]) -> dict[str, Case]:
    """Parquet and Arrow IPC as pandas, pyarrow, DuckDB and polars write them."""
    snli = ["--preset", "snli"]
    cases = {}
    frame = pd.DataFrame(rows)
    frame.loc[3, "sentence2"] = None                                      # a null text: that record's reject
    frame["gold_label"] = frame["gold_label"].astype("category")
    frame.to_parquet(root / "pandas.parquet")                             # pandas 3: large_string + dictionary
    cases["pandas_parquet"] = Case(root / "pandas.parquet", snli, "row", "records", {4})
    pq.write_table(_nli_table(rows, pa.large_string(), "dictionary"), root / "large.parquet")
    cases["large_string_parquet"] = Case(root / "large.parquet", snli, "row", "records")
    pq.write_table(_nli_table(rows, pa.string_view()), root / "view.parquet")
    cases["string_view_parquet"] = Case(root / "view.parquet", snli, "row", "records")

    qqp = pa.table({"id": pa.array([r["row"] for r in rows], pa.int64()),
                    "qid1": pa.array([2 * r["row"] for r in rows], pa.int32()),
                    "qid2": pa.array([2 * r["row"] + 1 for r in rows], pa.int32()),
                    "question1": [r["sentence1"] for r in rows], "question2": [r["sentence2"] for r in rows],
                    "is_duplicate": pa.array([int(r["gold_label"] == "entailment") for r in rows], pa.int8())})
    pq.write_table(qqp, root / "qqp.parquet")
    cases["qqp_int_parquet"] = Case(root / "qqp.parquet", ["--preset", "qqp"], "id", "records")

    claims = pa.table({"row": [r["row"] for r in rows], "claim": pa.array([r["sentence1"] for r in rows],
                                                                          pa.large_string()),
                       "supported": pa.array([r["gold_label"] == "entailment" for r in rows], pa.bool_())})
    feather.write_feather(claims, root / "claims.feather", compression="zstd")   # Feather 2: the IPC file format
    cases["bool_label_feather"] = Case(root / "claims.feather", ["--map", "text_a=claim,label=supported"], "row",
                                       "records")

    table = _nli_table(rows, pa.large_string(), "dictionary")
    with pa.ipc.new_stream(root / "stream.arrow", table.schema) as writer:      # the IPC stream format
        for batch in table.to_batches(max_chunksize=97):
            writer.write_batch(batch)
    cases["ipc_stream"] = Case(root / "stream.arrow", snli, "row", "records")

    con = duckdb.connect()
    con.register("nli", _nli_table(rows))
    con.execute(f"""COPY (SELECT row::INTEGER AS row, sentence1,
                                 CASE WHEN row = 5 THEN NULL ELSE sentence2 END AS sentence2, gold_label
                          FROM nli ORDER BY row) TO '{root / "duckdb.parquet"}' (FORMAT parquet)""")
    cases["duckdb_parquet"] = Case(root / "duckdb.parquet", snli, "row", "records", {6})

    try:
        import polars as pl
    except ImportError:
        return cases
    frame = pl.DataFrame(rows).with_columns(pl.col("gold_label").cast(pl.Categorical))
    frame.write_parquet(root / "polars.parquet")
    frame.write_ipc(root / "polars.arrow")                                     # string_view + categorical
    cases["polars_parquet"] = Case(root / "polars.parquet", snli, "row", "records")
    cases["polars_ipc"] = Case(root / "polars.arrow", snli, "row", "records")
    return cases


def hf_layout(root: Path, rows: list[dict], splits=("train", "test")) -> tuple[Path, Path]:
    """What ``datasets``' ``save_to_disk`` writes, made by hand: a Dataset folder (``state.json``,
    ``dataset_info.json``, Arrow stream shards listed out of name order) and a DatasetDict folder of splits."""
    def dataset(folder: Path, part: list[dict]) -> Path:
        folder.mkdir(parents=True)
        table = _nli_table(part, pa.large_string())
        names = ["data-00001-of-00002.arrow", "data-00000-of-00002.arrow"]   # state.json's order, not the names'
        half = len(part) // 2
        for name, piece in zip(names, (table.slice(0, half), table.slice(half))):
            with pa.ipc.new_stream(folder / name, piece.schema) as writer:
                writer.write_table(piece)
        (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names],
                                                       "_fingerprint": "0", "_split": folder.name}))
        (folder / "dataset_info.json").write_text(json.dumps({"features": {c: {"dtype": "string"} for c in
                                                                          table.column_names}}))
        return folder

    single = dataset(root / "hf_layout", rows)
    whole = root / "hf_layout_dict"
    step = len(rows) // len(splits)
    for i, split in enumerate(splits):
        dataset(whole / split, rows[i * step:(i + 1) * step])
    (whole / "dataset_dict.json").write_text(json.dumps({"splits": list(splits)}))
    return single, whole


def hf_datasets(root: Path, rows: list[dict]) -> dict[str, Case]:
    """The same with Hugging Face ``datasets`` itself, when it is installed."""
    try:
        import datasets
    except ImportError:
        return {}
    ds = datasets.Dataset.from_list(rows)
    ds.save_to_disk(str(root / "hf_dataset"))
    half = len(rows) // 2
    datasets.DatasetDict({"validation": ds.select(range(half)), "train": ds.select(range(half, len(rows)))}) \
        .save_to_disk(str(root / "hf_dataset_dict"))
    snli = ["--preset", "snli"]
    return {"hf_dataset": Case(root / "hf_dataset", snli, "row", "records"),
            "hf_dataset_dict": Case(root / "hf_dataset_dict", snli, "row", "records", splits=("validation", "train"))}


def mixed_folder(root: Path, rows: list[dict]) -> Path:
    """One corpus in four formats (SNLI's columns, ``pairID`` a string), each file read by its extension."""
    folder = root / "mixed"
    folder.mkdir()
    rows = [{"pairID": f"p{r['row']}", **{k: r[k] for k in NLI_COLUMNS[1:]}} for r in rows]
    part = len(rows) // 4
    a, b, c, d = (rows[i * part:(i + 1) * part] for i in range(4))
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in a))
    pq.write_table(pa.Table.from_pylist(b, pa.schema([(k, pa.large_string()) for k in b[0]])), folder / "b.parquet")
    with open(folder / "c.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(c[0]))
        writer.writeheader()
        writer.writerows(c)
    _tsv(folder / "d.tsv", list(d[0]), [list(r.values()) for r in d])
    return folder


def fever_claims(root: Path, rows: list[dict]) -> Path:
    """FEVER's claims file: ``id``, ``verifiable``, ``label``, ``claim``, and no evidence text."""
    labels = {"entailment": "SUPPORTS", "contradiction": "REFUTES", "neutral": "NOT ENOUGH INFO"}
    path = root / "fever_train.jsonl"
    path.write_text("".join(json.dumps({"id": 75000 + r["row"], "verifiable": "VERIFIABLE", "label":
                                        labels[r["gold_label"]], "claim": r["sentence1"]}) + "\n" for r in rows))
    return path


def write_cases(root: Path, rows: list[dict]) -> dict[str, Case]:
    msrp = msrp_like(root, rows)
    sick, sick_rejects = sick_like(root, rows)
    pairs, csv_rejects = csv_quotes(root, rows)
    wide_path, wide_rejects = wide(root, rows[:60])
    single, whole = hf_layout(root, rows)
    nli = ["--preset", "snli"]
    cases = {
        "msrp_map": Case(msrp, ["--map", "text_a=#1 String,text_b=#2 String,label=Quality"], "#1 ID", "tsv"),
        "msrp_preset": Case(msrp, ["--preset", "msrp"], "node_a", "tsv"),
        "sick": Case(sick, ["--preset", "sick"], "id", "tsv", sick_rejects),
        "csv_quotes": Case(pairs, ["--map", "text_a=premise,text_b=hypothesis,label=label,id=id"], "id", "csv",
                           csv_rejects),
        "header_only": Case(header_only(root), ["--preset", "sick"], "id", "tsv"),
        "duplicate_unmapped": Case(duplicate_unmapped(root, rows), nli, "row", "tsv"),
        "wide": Case(wide_path, nli, "row", "tsv", wide_rejects),
        "hf_layout": Case(single, nli, "row", "records"),
        "hf_layout_dict": Case(whole, nli, "row", "records", splits=("train", "test")),
        "mixed_folder": Case(mixed_folder(root, rows), nli, "id", "mixed"),
        "fever_claims": Case(fever_claims(root, rows), ["--map", "text_a=claim,label=label,id=id"], "id", "jsonl"),
        **arrow_cases(root, rows),
        **hf_datasets(root, rows),
    }
    return cases
