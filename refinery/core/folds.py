"""Each row's fold for K-fold cross-fitting, by its id: the same under reordering and appends."""
from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa


def fold_of(ids, k: int, seed: int = 0) -> np.ndarray:
    """Deterministic fold per row id (stable under reordering and appends); ``ids`` a list or an Arrow
    array, read a million at a time."""

    def folds(chunk) -> np.ndarray:
        return np.fromiter((int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(),
                                           "little") % k for i in chunk), dtype=np.int64, count=len(chunk))

    if not isinstance(ids, (pa.Array, pa.ChunkedArray)):
        return folds(list(ids))
    step = 1 << 20
    return np.concatenate([folds([]), *(folds(ids.slice(s, step).to_pylist()) for s in range(0, len(ids), step))])
