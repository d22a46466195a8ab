"""A local scratch folder and the Parquet written into it: what the Python API needs to hand in-memory data
(a DataFrame, a Hugging Face ``Dataset``, …) to the runner, which reads files. The folder is the caller's to
remove (``remove_folder``) once nothing reads it any more. What refinery publishes names such a file as the
object it holds (``in_memory_names``), not by its passing path."""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq


def scratch_folder(prefix: str) -> str:
    """A new, empty local folder under the temporary directory (``tempfile.tempdir``), named ``prefix…``."""
    return tempfile.mkdtemp(prefix=prefix)


def remove_folder(path: str) -> None:
    """Remove a scratch folder and all it holds; one already gone is no error."""
    shutil.rmtree(path, ignore_errors=True)


_SHOWN: dict[str, str] = {}   # a scratch file of in-memory data → how reports name it


def write_parquet_file(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch], shown: str) -> int:
    """Write ``batches`` (cast to ``schema`` where a batch's schema differs) as one local Parquet file,
    making its folder, named ``shown`` in what refinery publishes; the rows written."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _SHOWN[path] = shown
    rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        for batch in batches:
            writer.write_batch(batch if batch.schema == schema else batch.cast(schema))
            rows += batch.num_rows
    return rows


def show_as(path: str, shown: str) -> None:
    """Name the local ``path`` as ``shown`` in what refinery publishes and says (a run's folder before its commit
    by the folder it is published as)."""
    _SHOWN[path] = shown


def forget_shown(path: str) -> None:
    _SHOWN.pop(path, None)


def in_memory_names(text: str) -> str:
    """``text`` with every scratch file of in-memory data named as what it holds (``pandas.DataFrame (in
    memory)``): a report's inputs, not a temporary path that is gone once the process ends."""
    for path, shown in _SHOWN.items():
        if path in text:
            text = text.replace(path, shown)
    return text
