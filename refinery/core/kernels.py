"""The compiled kernels of feature counting (numba; they release the GIL and cache their machine code):
probing and counting in the count tables of ``feature_counts`` (int32 rows ``[key high, key low, stamp,
count per label…]``), the ASCII byte scanner of ``TokenizerOptions.tokenize`` with FNV-1a hashing, and the
token interning table of ``vocabulary``."""
from __future__ import annotations

import numba
import numpy as np

EMPTY = -1   # an unused slot of a table
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)     # Fibonacci hashing multiplier
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)

# ASCII byte classes of TokenizerOptions.tokenize: RE2's \w is a word byte; Arrow's
# utf8_split_whitespace splits on 9–13, 28–32; every other byte is a one-byte punctuation token.
WORD, SPACE, PUNCT = 0, 1, 2
BYTE_CLASS = np.full(128, PUNCT, dtype=np.uint8)
for _c in b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz":
    BYTE_CLASS[_c] = WORD
BYTE_CLASS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = SPACE


@numba.njit(nogil=True, cache=True)
def hash_shift(capacity):
    """64 − log2(capacity): Fibonacci hashing keeps the top bits of key × golden ratio."""
    bits = 0
    while (1 << bits) < capacity:
        bits += 1
    return np.uint64(64 - bits)


@numba.njit(nogil=True, cache=True)
def _find(table, key, shift):
    """Slot of ``key`` in a linear-probing table (or the empty slot where it goes); a row holds
    the key as two int32 halves."""
    mask = len(table) - 1
    hi, lo = np.int32(key >> 32), np.int32(key & 0xFFFFFFFF)
    slot = np.int64((np.uint64(key) * _GOLDEN) >> shift)
    while table[slot, 0] != EMPTY and (table[slot, 0] != hi or table[slot, 1] != lo):
        slot = (slot + 1) & mask
    return slot


@numba.njit(nogil=True, cache=True, inline="always")
def _key_at(values, rows, i, pairs):
    """The key at position i: ``values[i]``, or with ``pairs`` the bigram ``values[i-1] << 32 | values[i]``,
    −1 where that pair spans two rows (keys are ≥ 0)."""
    if not pairs:
        return values[i]
    if rows[i] != rows[i - 1]:
        return np.int64(-1)
    return (values[i - 1] << 32) | values[i]


FULL = -2   # ``_claim``: a new key would pass the table's limit


@numba.njit(nogil=True, cache=True, inline="always")
def _claim(table, key, shift, dense, row, size, limit, grow):
    """(the slot where ``key`` counts for ``row``, keys held): the key placed if new (only with ``grow``; ``FULL``
    where that would make the table hold more than ``limit`` keys) and the slot stamped with ``row``; −1 where the
    key was counted for this row already, or is not held and may not be added."""
    if dense and key >= len(table):   # only without grow: the caller sized a dense table for every key
        return -1, size
    slot = key if dense else _find(table, key, shift)
    if table[slot, 0] == EMPTY:
        if not grow:
            return -1, size
        if size >= limit:
            return FULL, size
        table[slot, 0], table[slot, 1] = key >> 32, key & 0xFFFFFFFF
        size += 1
    if table[slot, 2] == row:
        return -1, size
    table[slot, 2] = row
    return slot, size


@numba.njit(nogil=True, cache=True)
def count_present(batch, tables, how, start, size, limit):
    """Count each key once per row: ``batch`` is ``(keys, rows, labels, masks, weights, first_row)``, ``tables``
    ``(table, values)``, ``how`` ``(weighted, dense, pairs, grow)``. The key at position i (≥ ``start``) is ``keys[i]``, or with ``pairs`` the bigram
    ``keys[i-1] << 32 | keys[i]`` when both are in the same row (keys are ≥ 0); its first occurrence in row
    ``first_row + rows[i]`` (r = ``rows[i]``, of label l = ``labels[r]``) adds 1 to count column ``3 + l``, or with
    ``weighted`` its masks ``masks[r, m]`` to count columns ``3 + l × M + m`` and its weights ``weights[r, w]`` to
    ``values`` columns ``l × W + w`` (M and W the masks' and weights' columns). ``table`` rows are int32 ``[key high, key low, stamp (last row counted), counts…]`` (24 bytes
    for 3 labels), so a probe touches one cache line; ``values`` holds float64 sums, a row per slot; ``dense``: the
    key is its own slot. Without ``grow`` only the keys the table holds are counted. Stops before a new key would
    make the table hold more than ``limit`` keys; returns (keys held, position reached)."""
    keys, rows, labels, masks, weights, first_row = batch
    table, values = tables
    weighted, dense, pairs, grow = how
    shift = hash_shift(len(table))
    M, W = masks.shape[1], weights.shape[1]
    for i in range(max(start, 1 if pairs else 0), len(keys)):
        if pairs:   # inline: a helper returning a sentinel for "no key" costs 3× on a dense table
            if rows[i] != rows[i - 1]:
                continue
            key = (keys[i - 1] << 32) | keys[i]
        else:
            key = keys[i]
        slot, size = _claim(table, key, shift, dense, first_row + rows[i], size, limit, grow)
        if slot == FULL:
            return size, i
        if slot < 0:
            continue
        r = rows[i]
        if not weighted:
            table[slot, 3 + labels[r]] += 1
            continue
        label = labels[r]
        for m in range(M):
            table[slot, 3 + label * M + m] += masks[r, m]
        for w in range(W):
            values[slot, label * W + w] += weights[r, w]
    return size, len(keys)


@numba.njit(nogil=True, cache=True)
def by_region(values, rows, pairs, shift, region_bits):
    """The keys of ``values`` (with ``pairs``: bigrams of adjacent ids of a row, as ``count_present``
    forms them) and their rows, stably sorted by the region of the table their slot falls in (the
    top ``region_bits`` of the slot): counted in this order, the probes of a region stay in cache
    instead of missing it on nearly every key of a table larger than the caches. Stable, so each
    key's rows stay in order (presence is counted once per row)."""
    n = len(values)
    regions = np.zeros((1 << region_bits) + 1, dtype=np.int64)
    drop = np.uint64(64) - shift - np.uint64(region_bits)   # slot >> drop: its region
    region = np.empty(n, dtype=np.int64)
    for i in range(n):
        key = np.int64(-1) if pairs and i == 0 else _key_at(values, rows, i, pairs)
        if key < 0:
            region[i] = -1
            continue
        region[i] = np.int64((np.uint64(key) * _GOLDEN) >> shift >> drop)
        regions[region[i] + 1] += 1
    for r in range(1, len(regions)):
        regions[r] += regions[r - 1]
    keys = np.empty(regions[-1], dtype=np.int64)
    key_rows = np.empty(regions[-1], dtype=rows.dtype)
    for i in range(n):
        r = region[i]
        if r < 0:
            continue
        at = regions[r]
        keys[at] = _key_at(values, rows, i, pairs)
        key_rows[at] = rows[i]
        regions[r] = at + 1
    return keys, key_rows


@numba.njit(nogil=True, cache=True)
def clear_slots(table):
    """Mark every slot of a count table unused (key and stamp ``EMPTY``): a compiled loop, so that the first touch
    of a large new table's pages happens without the GIL (numpy's column assignment holds it)."""
    for s in range(len(table)):
        table[s, 0] = EMPTY
        table[s, 2] = EMPTY


@numba.njit(nogil=True, cache=True)
def rehash(table, new_table, values, new_values):
    """Place the used slots of ``table`` (and their rows of ``values``, maybe of no column) in a new table."""
    shift = hash_shift(len(new_table))
    for s in range(len(table)):
        if table[s, 0] != EMPTY:
            key = (np.int64(table[s, 0]) << 32) | (np.int64(table[s, 1]) & 0xFFFFFFFF)
            slot = _find(new_table, key, shift)
            new_table[slot] = table[s]
            new_values[slot] = values[s]


@numba.njit(nogil=True, cache=True)
def used_slots(table, start, end, keys, counts):
    """Copy the key and counts of each used slot in [start, end) of a ``count_present`` table, in slot
    order (one sequential pass: a boolean mask and a gather would read the table three times); the
    number copied."""
    i = 0
    for s in range(start, end):
        if table[s, 0] != EMPTY:
            keys[i] = (np.int64(table[s, 0]) << 32) | (np.int64(table[s, 1]) & 0xFFFFFFFF)
            for j in range(counts.shape[1]):
                counts[i, j] = table[s, 3 + j]
            i += 1
    return i


@numba.njit(nogil=True, cache=True)
def scan_ascii(data, offsets, skip, lowercase, keep_punct, byte_class, found):
    """Tokenize the ASCII strings ``data[offsets[r]:offsets[r+1]]`` (rows with ``skip[r]`` left
    out): runs of word bytes are tokens, punctuation bytes one-byte tokens (dropped unless
    ``keep_punct``), space bytes separators; a negation's contraction ``n't`` ending a word is a token of its
    own, kept with its apostrophe (``don't`` → ``do``, ``n't``). Writes into ``found`` = ``(out, starts, ends,
    parents, hashes)`` the (lowercased) bytes and each token's span, row and FNV-1a hash (computed as the bytes
    go by); returns the number of tokens."""
    out, starts, ends, parents, hashes = found
    n = 0
    for r in range(len(offsets) - 1):
        if skip[r]:
            continue
        start = -1
        h = _FNV_OFFSET
        i, end = offsets[r], offsets[r + 1]
        while i < end:
            b = data[i]
            if lowercase and 65 <= b <= 90:
                b += 32
            out[i] = b
            cls = byte_class[b]
            if cls == WORD:
                if start < 0:
                    start = i
                    h = _FNV_OFFSET
                h = (h ^ np.uint64(b)) * _FNV_PRIME
                i += 1
                continue
            if b == 39 and start >= 0 and out[i - 1] | 32 == 110 and i + 1 < end and data[i + 1] | 32 == 116 \
                    and (i + 2 == end or byte_class[data[i + 2]] != WORD):
                t = data[i + 1] + 32 if lowercase and data[i + 1] == 84 else data[i + 1]
                out[i + 1] = t
                if i - 1 > start:   # the word before the n
                    starts[n], ends[n], parents[n], hashes[n] = start, i - 1, r, _fnv_span(out, start, i - 1)
                    n += 1
                starts[n], ends[n], parents[n], hashes[n] = i - 1, i + 2, r, _fnv_span(out, i - 1, i + 2)
                n += 1
                start = -1
                i += 2
                continue
            if start >= 0:
                starts[n], ends[n], parents[n], hashes[n] = start, i, r, h
                n += 1
                start = -1
            if cls == PUNCT and keep_punct:
                starts[n], ends[n], parents[n], hashes[n] = i, i + 1, r, (_FNV_OFFSET ^ np.uint64(b)) * _FNV_PRIME
                n += 1
            i += 1
        if start >= 0:
            starts[n], ends[n], parents[n], hashes[n] = start, end, r, h
            n += 1
    return n


@numba.njit(nogil=True, cache=True)
def _fnv_span(data, start, end):
    """FNV-1a hash of ``data[start:end]``."""
    h = _FNV_OFFSET
    for j in range(start, end):
        h = (h ^ np.uint64(data[j])) * _FNV_PRIME
    return h


@numba.njit(nogil=True, cache=True)
def fnv(data, starts, ends):
    """FNV-1a hash of each token ``data[starts[i]:ends[i]]``."""
    hashes = np.empty(len(starts), dtype=np.uint64)
    for i in range(len(starts)):
        hashes[i] = _fnv_span(data, starts[i], ends[i])
    return hashes


@numba.njit(nogil=True, cache=True)
def _token_start(token_ends, t):
    return token_ends[t - 1] if t > 0 else 0


FREE_SLOT = np.uint64(0xFFFFFFFFFFFFFFFF)   # an unused slot of an ``intern_tokens`` table (no id is 2³² − 1)
_LOW = np.uint64(0xFFFFFFFF)


@numba.njit(nogil=True, cache=True, inline="always")
def _same_bytes(arena, a, data, b, length):
    for j in range(length):
        if arena[a + j] != data[b + j]:
            return False
    return True


_GATHER = 512   # tokens whose slots and candidates ``intern_tokens`` reads ahead at a time


@numba.njit(nogil=True, cache=True)
def intern_tokens(tokens, ids, start, vocabulary, arena_used, n_ids, limit):
    """Set ``ids[i]`` (i ≥ ``start``) to the dense id of token ``data[starts[i]:ends[i]]`` (FNV-1a
    hash ``token_hashes[i]``; ``tokens`` is ``(data, starts, ends, token_hashes)``), adding unseen tokens
    to the arena; stops before the vocabulary would pass ``limit`` tokens.

    ``vocabulary`` is ``(arena, token_ends, table)``; ``table``: linear-probing uint64 slots, a token's first its
    hash's top log2(slots) bits (``_home_shift``), each holding the hash's high 32 bits (so that a probe rejects another
    token without reading it, and a larger table finds the token's place from the slot alone: ``reinsert``) and the
    token's id; token ``id`` is ``arena[token_ends[id - 1]:token_ends[id]]`` (the arena grows in id order, so one end
    per token locates it). The tokens go ``_GATHER`` at a time: their first slots are read in one loop, the
    candidates' ends in a second, so that the memory reads of many tokens are under way together; each token is
    then confirmed by its bytes, or probed for (and added) one by one. Returns (arena_used, n_ids, position
    reached)."""
    data, starts, ends, token_hashes = tokens
    arena, token_ends, table = vocabulary
    mask = np.uint64(len(table) - 1)
    shift = _home_shift(len(table))
    first = np.empty(_GATHER, np.uint64)
    at = np.empty(_GATHER, np.int64)
    for g in range(start, len(starts), _GATHER):
        stop = min(g + _GATHER, len(starts))
        for i in range(g, stop):
            first[i - g] = table[token_hashes[i] >> shift]
        for i in range(g, stop):
            entry = first[i - g]
            at[i - g] = -1
            if entry != FREE_SLOT and (entry & ~_LOW) == (token_hashes[i] & ~_LOW):
                t = np.int64(entry & _LOW)
                a = _token_start(token_ends, t)
                if token_ends[t] - a == ends[i] - starts[i]:
                    at[i - g] = a
        for i in range(g, stop):
            if at[i - g] >= 0 and _same_bytes(arena, at[i - g], data, starts[i], ends[i] - starts[i]):
                ids[i] = np.int64(first[i - g] & _LOW)
                continue
            h = token_hashes[i]
            tag = h & ~_LOW
            slot = h >> shift
            length = ends[i] - starts[i]
            while True:
                entry = table[slot]
                if entry == FREE_SLOT:
                    if n_ids >= limit:
                        return arena_used, n_ids, i
                    arena[arena_used:arena_used + length] = data[starts[i]:ends[i]]
                    token_ends[n_ids] = arena_used + length
                    table[slot] = tag | np.uint64(n_ids)
                    ids[i] = n_ids
                    arena_used += length
                    n_ids += 1
                    break
                if (entry & ~_LOW) == tag:
                    t = np.int64(entry & _LOW)
                    a = _token_start(token_ends, t)
                    if token_ends[t] - a == length and _same_bytes(arena, a, data, starts[i], length):
                        ids[i] = t
                        break
                slot = (slot + np.uint64(1)) & mask
    return arena_used, n_ids, len(starts)


@numba.njit(nogil=True, cache=True)
def _home_shift(slots):
    """64 − log2(``slots``): a hash shifted right by it is its token's first slot among ``slots`` (a power of two,
    at most 2³², so that the hash's high 32 bits a slot keeps hold it)."""
    bits = 0
    while (1 << bits) < slots:
        bits += 1
    return np.uint64(64 - bits)


@numba.njit(nogil=True, cache=True)
def reinsert(old, table):
    """Place the tokens of ``old`` in ``table`` (a larger ``intern_tokens`` table): each slot holds its token's hash's
    high 32 bits, which hold its first slot in any table of up to 2³² slots, so the tokens move in one pass over
    ``old``, in the order of their slots (their new places ascend with it), without their bytes."""
    mask = np.uint64(len(table) - 1)
    shift = _home_shift(len(table))
    for entry in old:
        if entry == FREE_SLOT:
            continue
        slot = entry >> shift
        while table[slot] != FREE_SLOT:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = entry


@numba.njit(nogil=True, cache=True)
def _copy(src, start, end, dst, pos):
    for j in range(start, end):
        dst[pos] = src[j]
        pos += 1
    return pos


@numba.njit(nogil=True, cache=True)
def gram_bytes(arena, token_ends, first, second, suffix, offsets):
    """Bytes of ``"w1@suffix"`` (``second[i] < 0``) or ``"w1 w2@suffix"`` per gram, the words
    being the arena bytes of token ids; fills ``offsets`` (n + 1)."""
    n = len(first)
    offsets[0] = 0
    for i in range(n):
        size = token_ends[first[i]] - _token_start(token_ends, first[i]) + len(suffix)
        if second[i] >= 0:
            size += 1 + token_ends[second[i]] - _token_start(token_ends, second[i])
        offsets[i + 1] = offsets[i] + size
    out = np.empty(offsets[n], dtype=np.uint8)
    for i in range(n):
        pos = _copy(arena, _token_start(token_ends, first[i]), token_ends[first[i]], out, offsets[i])
        if second[i] >= 0:
            out[pos] = 32
            pos = _copy(arena, _token_start(token_ends, second[i]), token_ends[second[i]], out, pos + 1)
        _copy(suffix, 0, len(suffix), out, pos)
    return out



# A feature as one uint64 of indices into a list of strings (``feature_counts.pack_keys``): the suffix's in the top
# SUFFIX_BITS, the first word's in the next WORD_BITS, the second word's plus one (0: none) in the lowest.
SUFFIX_BITS, WORD_BITS = 4, 30
WORD_MASK = np.uint64((1 << WORD_BITS) - 1)
_SECOND_SHIFT, _SUFFIX_SHIFT = np.uint64(WORD_BITS), np.uint64(2 * WORD_BITS)
EMPTY_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)   # never a key: a word's index is below WORD_MASK


@numba.njit(nogil=True, cache=True)
def mix64(x):
    """splitmix64's finalizer: every bit of ``x`` moves every bit of the result."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(nogil=True, cache=True)
def scatter_by_part(keys, counts, word_hashes, suffix_hashes, partitions):
    """Rows of ``keys`` (packed indices into a unit's strings) and ``counts`` grouped by part: the part of a
    feature is a hash of its strings' hashes (``word_hashes``, ``suffix_hashes``), so it is the same in every unit
    whatever indices its strings have there. Returns (keys, counts, where each part starts, and the end)."""
    n = len(keys)
    part = np.empty(n, np.int32)
    starts = np.zeros(partitions + 1, np.int64)
    for i in range(n):
        key = keys[i]
        second = key & WORD_MASK
        h = mix64(suffix_hashes[key >> _SUFFIX_SHIFT] ^ mix64(word_hashes[(key >> _SECOND_SHIFT) & WORD_MASK]
                   ^ mix64(word_hashes[second - np.uint64(1)] if second else np.uint64(0))))
        part[i] = np.int32(((h >> np.uint64(32)) * np.uint64(partitions)) >> np.uint64(32))
        starts[part[i] + 1] += 1
    for p in range(partitions):
        starts[p + 1] += starts[p]
    at = starts[:-1].copy()
    out_keys = np.empty_like(keys)
    out_counts = np.empty_like(counts)
    for i in range(n):
        j = at[part[i]]
        at[part[i]] += 1
        out_keys[j] = keys[i]
        out_counts[j] = counts[i]
    return out_keys, out_counts, starts


@numba.njit(nogil=True, cache=True)
def add_translated(keys, counts, columns, word_map, suffix_map, table_keys, table_counts):
    """Add rows of a unit to a linear-probing table: ``keys`` (packed indices into the unit's strings) translated
    by ``word_map`` and ``suffix_map`` into indices of one dictionary, ``counts`` column j added to column
    ``columns[j]``. ``table_keys`` (power-of-two length, ``EMPTY_KEY`` where free) must have room. Returns the
    keys it holds."""
    mask = np.uint64(len(table_keys) - 1)
    held = 0
    for i in range(len(keys)):
        key = keys[i]
        second = key & WORD_MASK
        if second:
            second = np.uint64(word_map[second - np.uint64(1)]) + np.uint64(1)
        joined = (np.uint64(suffix_map[key >> _SUFFIX_SHIFT]) << _SUFFIX_SHIFT) \
            | (np.uint64(word_map[(key >> _SECOND_SHIFT) & WORD_MASK]) << _SECOND_SHIFT) | second
        slot = mix64(joined) & mask
        while table_keys[slot] != EMPTY_KEY and table_keys[slot] != joined:
            slot = (slot + np.uint64(1)) & mask
        if table_keys[slot] == EMPTY_KEY:
            table_keys[slot] = joined
            held += 1
        for j in range(counts.shape[1]):
            table_counts[slot, columns[j]] += counts[i, j]
    return held


@numba.njit(nogil=True, cache=True)
def first_use(indices, size):
    """The distinct values of ``indices`` (each in ``0..size-1``) in the order of their first occurrence."""
    seen = np.zeros(size, np.bool_)
    out = np.empty(size, np.int64)
    n = 0
    for i in indices:
        if not seen[i]:
            seen[i] = True
            out[n] = i
            n += 1
    return out[:n]
