"""Each row's distinct features as a list (z-filtering's rows, METHODS §2): ``features.extract``'s features, in its
order, listed by a compiled kernel over token ids instead of built as a string per (row, feature) and deduplicated.

Per text field the batch is tokenized to ids (``vocabulary.token_ids``, the audit's byte scanner), each row's
unigrams and bigrams become packed integer keys (``kernels.row_feature_keys``), listed once per row and numbered
in the order of their first use; each distinct key's string (``"w1 w2@premise"``) is built once per batch.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import NULL_FEATURE, STOPWORD_LIST, FeatureConfig, extract, text_fields
from refinery.core.row_kernels import ROW_KEY_CODE_SHIFT, ROW_KEY_WORD_BITS, row_feature_keys
from refinery.core.vocabulary import TokenIds, token_ids
from refinery.messages import Refusal

_WORD_MASK = np.uint64((1 << ROW_KEY_WORD_BITS) - 1)
ROW_FAMILIES = ("length", "ratio", "overlap")   # features of a whole row, from ``features.extract``


def row_feature_lists(table: pa.Table, config: FeatureConfig) -> pa.ListArray:
    """The distinct features of each row as a list column (row order kept): its values dictionary-encoded, the
    dictionary the batch's distinct feature strings in the order of their first use, row after row. Each row lists
    its features as ``features.extract`` finds them: per text field its unigrams, then its bigrams, then the
    row-level families, ``null`` last; each once, where it first occurs."""
    families = set(config.families)
    orders = np.array(["unigram" in families, "bigram" in families])
    fields = text_fields(table, config) if orders.any() else []
    stopwords = len(STOPWORD_LIST) if config.tokenizer.remove_stopwords else 0
    vocabularies, tokens, rows = [], [], []
    for column, _ in fields:
        vocabulary = TokenIds(seed=STOPWORD_LIST if stopwords else ())
        ids, parents = token_ids(table[column], config.tokenizer, vocabulary, stopwords)
        if len(vocabulary) >= 1 << ROW_KEY_WORD_BITS:
            raise Refusal(f"row_feature_lists: {len(vocabulary):,} distinct tokens in one batch; use smaller "
                          "batches", code="over-budget")
        vocabularies.append(vocabulary)
        tokens.append(ids)
        rows.append(parents)
    field_starts = np.r_[0, np.cumsum([len(t) for t in tokens])].astype(np.int64)
    extra_offsets, extra_ids, extra_names = _row_level(table, config)
    values, offsets, keys = row_feature_keys(
        np.concatenate(tokens or [np.zeros(0, np.int64)]).astype(np.int64),
        np.concatenate(rows or [np.zeros(0, np.int64)]).astype(np.int64), field_starts,
        np.array([len(v) for v in vocabularies] + [len(extra_names)], np.int64), orders, (extra_offsets, extra_ids),
        table.num_rows)
    names = _names(keys, vocabularies, ["@" + name for _, name in fields], extra_names)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                    pa.DictionaryArray.from_arrays(pa.array(values), names))


def _row_level(table: pa.Table, config: FeatureConfig) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """The row-level features of each row (offsets, indices into the names, names): ``extract``'s of the families of
    ``ROW_FAMILIES`` in its order, then ``null``."""
    n = table.num_rows
    families = tuple(f for f in config.families if f in ROW_FAMILIES)
    null = "null" in config.families
    if families:
        long = extract(table, FeatureConfig(families, config.tokenizer, config.field_names,
                                            config.single_field_name))
        row = long["row"].to_numpy()
        order = np.argsort(row, kind="stable")
        feature = long["feature"].combine_chunks() if isinstance(long["feature"], pa.ChunkedArray) \
            else long["feature"]
        ids = feature.indices.to_numpy(zero_copy_only=False).astype(np.int64)[order]
        names, counts = feature.dictionary, np.bincount(row, minlength=n)
    else:
        ids, names, counts = np.zeros(0, np.int64), pa.array([], pa.string()), np.zeros(n, np.int64)
    if null:   # last in each row
        at = np.cumsum(counts)
        ids = np.insert(ids, at, len(names))
        names = pa.concat_arrays([names.cast(pa.string()), pa.array([NULL_FEATURE], pa.string())])
        counts = counts + 1
    return np.r_[0, np.cumsum(counts)].astype(np.int64), ids, names


def _names(keys: np.ndarray, vocabularies: list[TokenIds], suffixes: list[str], extra_names: pa.Array) -> pa.Array:
    """The string of each key (``kernels.row_feature_keys``), in the keys' order."""
    codes = (keys >> ROW_KEY_CODE_SHIFT).astype(np.int64)
    first = ((keys >> np.uint64(ROW_KEY_WORD_BITS)) & _WORD_MASK).astype(np.int64)
    second = (keys & _WORD_MASK).astype(np.int64) - 1
    parts, where = [], []
    for code in np.unique(codes):
        mine = np.flatnonzero(codes == code)
        field = code // 2
        parts.append(extra_names.take(pa.array(first[mine])) if field == len(vocabularies) else
                     vocabularies[field].grams(first[mine], second[mine], suffixes[field]))
        where.append(mine)
    if not parts:
        return pa.array([], pa.string())
    kind = pa.string() if sum(p.nbytes for p in parts) < 2**31 - 1 else pa.large_string()
    strings = pa.concat_arrays([p.cast(kind) for p in parts])
    inverse = np.empty(len(keys), np.int64)
    inverse[np.concatenate(where)] = np.arange(len(keys))
    return strings.take(pa.array(inverse))
