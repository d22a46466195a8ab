"""A local cache of sentence embeddings by content: each text's vector under a key that names everything it depends
on (the encoder's identity, its input length, its pooling and the text: ``models.embeddings.EncoderSpec.keys``), so
a rerun, with any other setting of the stage that reads them, embeds nothing again.

The cache is a folder of shards, ``<root>/embeddings/<namespace>/<digest>.arrow`` (Arrow IPC files: ``key``, 32 bytes,
and ``embedding``, a fixed-size list of float32), one per write of new vectors. Each shard is written whole under a
temporary name and then renamed (``os.replace``), and readers list finished names only, so processes sharing the
cache never read half of an entry; two processes that embed the same text both keep a shard, and either's vector
is read. The root is ``REFINERY_CACHE`` (default ``~/.cache/refinery``), as for the other local caches.
"""
from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

KEY_BYTES = 32          # a sha256 digest
SHARD_ROWS = 131_072    # vectors per shard file at most
SUFFIX = ".arrow"


def cache_root() -> Path:
    """The local caches' root: ``REFINERY_CACHE``, else ``~/.cache/refinery``."""
    return Path(os.environ.get("REFINERY_CACHE", Path.home() / ".cache" / "refinery"))


class EmbeddingCache:
    """The vectors of one encoder setting (``namespace``: a digest of the encoder's identity, length and pooling)."""

    def __init__(self, namespace: str, root: str | Path | None = None):
        self.folder = Path(root or cache_root()) / "embeddings" / namespace

    def shards(self) -> list[Path]:
        """The finished shard files, in name order (temporary files are not listed)."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if p.suffix == SUFFIX and not p.name.startswith("."))

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(found: one bool per key, the vectors of the keys found, in the order of ``keys``); ``keys`` is an array
        of ``S32`` digests. A key in several shards is read from the first."""
        found = np.zeros(len(keys), bool)
        vectors = None
        for shard in self.shards():
            if found.all():
                break
            with pa.memory_map(str(shard)) as source:
                table = pa.ipc.open_file(source).read_all()
            stored = np.frombuffer(table["key"].combine_chunks().buffers()[1], f"S{KEY_BYTES}",
                                   count=table.num_rows)
            wanted = np.flatnonzero(~found)
            order = np.argsort(stored, kind="stable")
            at = np.searchsorted(stored[order], keys[wanted])
            hit = at < len(stored)
            hit[hit] = stored[order][at[hit]] == keys[wanted][hit]
            if not hit.any():
                continue
            column = table["embedding"].combine_chunks()
            dim = column.type.list_size
            matrix = column.values.to_numpy(zero_copy_only=False).reshape(-1, dim)
            if vectors is None:
                vectors = np.zeros((len(keys), dim), np.float32)
            vectors[wanted[hit]] = matrix[order[at[hit]]]
            found[wanted[hit]] = True
        return found, vectors

    def store(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Add ``vectors`` (rows × dim, float32) under ``keys`` (``S32`` digests), a shard of at most ``SHARD_ROWS``
        at a time, each published whole."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for start in range(0, len(keys), SHARD_ROWS):
            part_keys = np.ascontiguousarray(keys[start:start + SHARD_ROWS])
            part = np.ascontiguousarray(vectors[start:start + SHARD_ROWS], np.float32)
            table = pa.table({
                "key": pa.FixedSizeBinaryArray.from_buffers(pa.binary(KEY_BYTES), len(part_keys),
                                                            [None, pa.py_buffer(part_keys.tobytes())]),
                "embedding": pa.FixedSizeListArray.from_arrays(pa.array(part.ravel()), part.shape[1])})
            name = hashlib.sha256(part_keys.tobytes()).hexdigest()[:32] + SUFFIX
            temporary = self.folder / f".{name}.{os.getpid()}-{uuid.uuid4().hex}.tmp"
            with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            os.replace(temporary, self.folder / name)
