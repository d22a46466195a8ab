"""AFLite's random partitions (Le Bras et al. 2020, Algorithm 1): each T_j a random t of the rows of S, the m of an
iteration drawn in order from one seeded generator.

T_j is the first t of ``rng.permutation(rows)``, as a set. NumPy's permutation shuffles ``arange(rows)`` by
Fisher–Yates from the end, step i (rows − 1 down to 1) swapping position i with a position drawn uniformly in
[0, i]; the steps below t only reorder the first t positions, so the set is settled after step t. For NumPy's
default bit generator (PCG64) the draws are replayed here as NumPy makes them (its bounded draw: 32-bit halves of the
raw 64-bit outputs, the low half first, masked to the smallest 2^k − 1 ≥ i and drawn again while over i), the swaps
done only down to t, and the generator left in the state the permutation leaves: half the random memory accesses,
the same T_j and the same later draws. Any other generator takes NumPy's permutation itself.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator

import numba
import numpy as np


def draw_partitions(rows: int, train_share: float, partitions: int, rng: np.random.Generator
                    ) -> Iterator[np.ndarray]:
    """The ``partitions`` partitions of S (``rows`` rows), one at a time: each the positions of T_j, a random
    ``train_share`` of the rows (at least 1, at most rows − 1)."""
    t = min(max(1, round(train_share * rows)), rows - 1)
    for _ in range(partitions):
        yield first_of_permutation(rng, rows, t)


def membership(rows: int, partitions, most: int | None = None) -> np.ndarray:
    """Which rows train which of ``partitions`` (an iterable, each the positions of T_j; ``most``: only its next
    that many): rows × the partitions taken, True in T_j. Each partition is drawn when its column is filled and
    dropped after, so what is held is a byte per row and partition, not the positions of all (4 bytes per row and
    partition: each partition's positions are a view of its whole permutation)."""
    if most is None:   # every partition: their positions listed first, to size the matrix
        partitions = list(partitions)
        most = len(partitions)
    train, taken = np.zeros((rows, most), np.bool_), 0
    for positions in itertools.islice(partitions, most):
        train[positions, taken] = True
        taken += 1
    return train if taken == most else np.ascontiguousarray(train[:, :taken])


def first_of_permutation(rng: np.random.Generator, n: int, t: int) -> np.ndarray:
    """The set of ``rng.permutation(n)[:t]`` (in another order), ``rng`` advanced as that call advances it."""
    generator = rng.bit_generator
    if type(generator) is not np.random.PCG64 or n > 0xFFFFFFFF:
        return rng.permutation(n)[:t]
    start = generator.state
    values = np.arange(n, dtype=np.int32 if n < 2 ** 31 else np.int64)
    has_half, half = np.uint64(start["has_uint32"]), np.uint64(start["uinteger"])
    step, used = n - 1, 0
    while step >= 1:   # raw outputs asked for in chunks; a step left unfinished at a chunk's end goes on in the next
        raw = generator.random_raw(int(0.75 * step) + 1024)
        step, taken, has_half, half = _steps_down_to(raw, has_half, half, step, t, values)
        used += taken
    generator.state = start
    generator.advance(used)   # exactly the raw outputs the permutation's draws took
    state = generator.state
    state["has_uint32"], state["uinteger"] = int(has_half), int(half)
    generator.state = state
    return values[:t]


@numba.njit(nogil=True, cache=True)
def _steps_down_to(raw, has_half, half, step, t, values):
    """Fisher–Yates steps ``step`` down to 1 with NumPy's bounded 32-bit draws from ``raw`` (and the buffered half
    ``half`` where ``has_half``), swapping only at steps ≥ ``t``: (the step to go on from, 0 when done; the raw
    outputs taken; the buffered half after)."""
    taken = 0
    while step >= 1:
        mask = np.uint64(step)
        mask |= mask >> np.uint64(1)
        mask |= mask >> np.uint64(2)
        mask |= mask >> np.uint64(4)
        mask |= mask >> np.uint64(8)
        mask |= mask >> np.uint64(16)
        while True:
            if has_half:
                has_half, drawn = np.uint64(0), half
            else:
                if taken == len(raw):
                    return step, taken, has_half, half
                output = raw[taken]
                taken += 1
                has_half, half, drawn = np.uint64(1), output >> np.uint64(32), output & np.uint64(0xFFFFFFFF)
            drawn &= mask
            if drawn <= np.uint64(step):
                break
        if step >= t:
            j = np.int64(drawn)
            values[step], values[j] = values[j], values[step]
        step -= 1
    return step, taken, has_half, half
