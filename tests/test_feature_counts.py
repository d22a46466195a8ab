"""The compiled exact counter gives the counts of the reference path (extract + Arrow group-by)."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import DATA, SNLI_DEV

from refinery.core.feature_counts import FeatureCounts, KeyCounts
from refinery.core.features import FeatureConfig, TokenizerOptions, extract
from refinery.core.stats import COUNTS_SCHEMA
from refinery.core.row_features import row_feature_lists
from refinery.core.vocabulary import TokenIds, string_buffers, token_ids
from refinery.io.corpus import load
from refinery.io.schema import PRESETS

MNLI_HARD = str(DATA / "mnli" / "mnli_dev_matched_hard.jsonl")   # 36 of its rows are not ASCII

ALL_FAMILIES = ("unigram", "bigram", "length", "ratio", "overlap", "null")
OPTIONS = [TokenizerOptions(), TokenizerOptions(lowercase=False, remove_punctuation=True, remove_stopwords=True),
           TokenizerOptions(remove_stopwords=True)]


def reference_counts(table: pa.Table, config: FeatureConfig) -> pa.Table:
    """Per-row distinct features from ``extract``, grouped by (feature, label) in Arrow."""
    long = extract(table, config)
    pairs = pa.table({"feature": pc.dictionary_decode(long["feature"].combine_chunks()),
                      "label": pc.take(table["label"], long["row"])})
    counts = pairs.group_by(["feature", "label"]).aggregate([([], "count_all")])
    return counts.rename_columns(["feature", "label", "count"]).cast(COUNTS_SCHEMA).sort_by(
        [("feature", "ascending"), ("label", "ascending")])


def compiled_counts(table: pa.Table, config: FeatureConfig, batch_rows: int) -> pa.Table:
    counter = FeatureCounts(config)
    for batch in table.to_batches(max_chunksize=batch_rows):
        counter.add(pa.Table.from_batches([batch]))
    return counter.counts(COUNTS_SCHEMA).sort_by([("feature", "ascending"), ("label", "ascending")])


@pytest.fixture(scope="module", params=[(SNLI_DEV, "snli"), (MNLI_HARD, "mnli")], ids=["snli", "mnli"])
def corpus_by_label(request):
    """A real corpus sorted by label, so labels first appear in later batches (tables widen)."""
    table, _ = load([request.param[0]], PRESETS[request.param[1]])
    return table.sort_by("label")


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "cased-nopunct-nostop", "nostop"])
def test_equals_reference_on_real_corpora(corpus_by_label, options):
    config = FeatureConfig(families=ALL_FAMILIES, tokenizer=options)
    expected = reference_counts(corpus_by_label, config)
    assert compiled_counts(corpus_by_label, config, batch_rows=2500).equals(expected)
    single = corpus_by_label.select(["id", "text_b", "label"]).rename_columns(["id", "text_a", "label"])
    config = FeatureConfig(families=("unigram", "bigram", "length", "null"), tokenizer=options)
    assert compiled_counts(single, config, batch_rows=4000).equals(reference_counts(single, config))


def test_non_ascii_and_odd_text_equal_reference():
    table = pa.table({
        "text_a": ["Café au lait, s'il vous plaît!", None, "  ", "A\x0bB\x1cC  d\x00e", "ÉCOLE école", "a\u00a0b c"],
        "text_b": ["naïve café", "x", "", "Ünïcode 😀 smile.", "e e e", "tab\there"],
        "label": ["a", "b", "a", "c", "b", "a"],
    })
    for options in OPTIONS:
        config = FeatureConfig(families=ALL_FAMILIES, tokenizer=options)
        for batch_rows in (2, 6):   # batches all ASCII, all not, and mixed
            assert compiled_counts(table, config, batch_rows).equals(reference_counts(table, config))


@pytest.mark.parametrize("options", OPTIONS[:2], ids=["default", "cased-nopunct-nostop"])
def test_ascii_scanner_matches_arrow_tokenizer_on_every_byte(options):
    texts = pa.array([f"Ab{chr(c)}cD {chr(c)}x{chr(c)}" for c in range(128)], pa.string())
    vocab = TokenIds()
    ids, rows = token_ids(texts, options, vocab)
    words = np.array(vocab.grams(np.arange(len(vocab)), np.full(len(vocab), -1), "").to_pylist(), dtype=object)
    scanned = [list(words[ids[rows == r]]) for r in range(len(texts))]
    assert scanned == options.tokenize(texts).to_pylist()


def test_hash_table_growth_keeps_presence_counts():
    rng = np.random.default_rng(0)
    table = KeyCounts(dense=False, labels=2, capacity=16)
    expected: dict = {}
    first_row = 0
    for _ in range(5):
        rows = np.sort(rng.integers(0, 1000, 20_000))
        keys = rng.integers(0, 50_000, 20_000) * 7919 << 20   # sparse keys, collisions in the low bits
        labels = rng.integers(0, 2, 1000)
        table.add(keys, rows, labels, first_row, 2)
        for key, row in set(zip(keys.tolist(), rows.tolist())):
            expected[(key, labels[row])] = expected.get((key, labels[row]), 0) + 1
        first_row += 1000
    keys, counts = table.items()
    got = {(k, j): c for k, row in zip(keys.tolist(), counts.tolist()) for j, c in enumerate(row) if c}
    assert got == expected and len(table.table) > 16 and table.size == len(set(keys.tolist()))


def test_bigrams_counted_region_by_region_in_a_growing_table():
    """Past ``CACHED_SLOTS`` bigram keys are counted region by region of the table; growth in the
    middle of a batch must not count a (bigram, row) twice or lose one."""
    rng = np.random.default_rng(1)
    table = KeyCounts(dense=False, labels=3, capacity=1 << 10)
    expected: dict = {}
    first_row = 0
    for _ in range(4):
        rows = np.sort(rng.integers(0, 3000, 60_000))
        ids = rng.zipf(1.2, 60_000) % 5000
        labels = rng.integers(0, 3, 3000)
        table.add(ids, rows, labels, first_row, 3, pairs=True)
        seen = {((int(a) << 32) | int(b), int(r)) for a, b, r, r0 in zip(ids[:-1], ids[1:], rows[1:], rows[:-1])
                if r == r0}
        for key, row in seen:
            expected[(key, labels[row])] = expected.get((key, labels[row]), 0) + 1
        first_row += 3000
    keys, counts = table.items()
    got = {(k, j): c for k, row in zip(keys.tolist(), counts.tolist()) for j, c in enumerate(row) if c}
    assert len(table.table) > 4 * KeyCounts.CACHED_SLOTS and got == expected


def test_merged_states_are_summed_a_logarithmic_number_of_times(monkeypatch):
    """A Ray audit merges one state per task: summing everything held at every merge past COMPACT_ROWS made
    10M rows take over 11 minutes. Sums now wait until what was added since outnumbers the last sum."""
    from refinery.core.exact_counts import ExactCounts

    monkeypatch.setattr(ExactCounts, "COMPACT_ROWS", 1_000)
    sums = []
    compact = ExactCounts._compact
    monkeypatch.setattr(ExactCounts, "_compact", lambda self, ordered=False: (sums.append(self._pending),
                                                                              compact(self, ordered))[1])
    rng = np.random.default_rng(0)
    merged, expected = ExactCounts(), {}
    for _ in range(300):   # 300 states of 500 features each, drawn from 20,000: they overlap
        features = [f"w{i}" for i in rng.choice(20_000, 500, replace=False)]
        label = str(rng.choice(["a", "b"]))
        merged.add_counts(pa.table({"feature": features, "label": [label] * 500, "count": [1] * 500},
                                   schema=COUNTS_SCHEMA), {label: 500})
        for f in features:
            expected[f, label] = expected.get((f, label), 0) + 1
    assert 0 < len(sums) <= 12 and sums == sorted(sums)     # against 298 sums of all held before
    got = merged.counts()
    assert got.num_rows == len(expected)
    assert dict(zip(zip(got["feature"].to_pylist(), got["label"].to_pylist()), got["count"].to_pylist())) == expected


def test_a_whole_corpus_added_at_once_is_counted_a_slice_at_a_time(monkeypatch):
    """A table added in one call (the up-sampling guard's whole corpus) is tokenized ``SLICE_ROWS`` rows at a time:
    the byte scanner's buffers (~33 bytes per byte of text) are sized by a slice, not by the table (10M rows once
    asked for a 24 GiB (2**30, 3) int64 array), and the counts are the reference's."""
    from refinery.core.vocabulary import string_buffers

    table, _ = load([SNLI_DEV], PRESETS["snli"])
    monkeypatch.setattr(FeatureCounts, "SLICE_ROWS", 1000)
    config = FeatureConfig(families=ALL_FAMILIES)
    counter = FeatureCounts(config).add(table)
    counts = counter.counts(COUNTS_SCHEMA).sort_by([("feature", "ascending"), ("label", "ascending")])
    assert counts.equals(reference_counts(table, config)) and counter.rows == table.num_rows
    for col, field in counter.fields.items():
        text_bytes = int(pc.sum(pc.binary_length(table[col])).as_py())
        assert field.scanner.out.nbytes < text_bytes // 4 and len(field.scanner.spans) < text_bytes // 4
    # a slice's bytes are just its own, offsets from 0
    data, offsets = string_buffers(pa.array(["ab", "cde", "f", "gh"]).slice(1, 2))
    assert bytes(data) == b"cdef" and offsets.tolist() == [0, 3, 4]


def reference_row_lists(table: pa.Table, config: FeatureConfig) -> list:
    """Each row's distinct features as ``extract`` finds them (its order within a row), by a sort of its rows."""
    long = extract(table, config)
    order = np.argsort(long["row"].to_numpy(), kind="stable")
    features = pc.dictionary_decode(long["feature"].combine_chunks()).take(pa.array(order))
    counts = np.bincount(long["row"].to_numpy(), minlength=table.num_rows)
    return pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(counts)].astype(np.int32)), features).to_pylist()


def listed(lists: pa.ListArray) -> list:
    flat = pc.list_flatten(lists)
    return pa.ListArray.from_arrays(lists.offsets, flat.dictionary.take(flat.indices)).to_pylist()


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "cased-nopunct-nostop", "nostop"])
def test_row_feature_lists_are_extracts_features_in_its_order(corpus_by_label, options):
    """z-filtering's rows (``row_features``, listed by a kernel over token ids) hold ``extract``'s features in its
    order; the dictionary lists the batch's features in the order of their first use (the ids Z gives them)."""
    odd = pa.table({"text_a": ["Café au lait n't, don't!", None, "  ", "a a a a b a b", "ÉCOLE école", "x@premise y"],
                    "text_b": ["Nobody DOESN'T won't", "x", "", "a b a b", "e e e", "y"],
                    "label": ["a", "b", "a", "c", "b", "a"]})
    for table in (corpus_by_label.slice(0, 3000), odd):
        for families in (("unigram", "bigram", "null"), ALL_FAMILIES, ("bigram",), ("ratio", "overlap", "null")):
            config = FeatureConfig(families=families, tokenizer=options)
            lists = row_feature_lists(table, config)
            assert listed(lists) == reference_row_lists(table, config)
            flat = pc.list_flatten(lists)
            first_use = pd.unique(flat.indices.to_numpy())
            assert np.array_equal(first_use, np.arange(len(flat.dictionary)))
    single = corpus_by_label.slice(0, 2000).select(["text_b", "label"]).rename_columns(["text_a", "label"])
    config = FeatureConfig(families=("unigram", "bigram", "length", "null"), tokenizer=options)
    assert listed(row_feature_lists(single, config)) == reference_row_lists(single, config)


def test_interning_table_growth_keeps_every_id():
    """Tokens interned across many doublings of the table (slots moved by the hash bits they keep) keep their ids,
    and tokens of the same hash, whose slots and kept bits are alike, are told apart by their bytes."""
    vocab = TokenIds()
    words = pa.array([f"w{i}" for i in range(300_000)], pa.string())
    first = vocab.ids(words)
    assert np.array_equal(first, np.arange(300_000)) and len(vocab.table) >= 600_000
    again = vocab.ids(pa.array([f"w{i}" for i in range(299_999, -1, -7)] + ["new"], pa.string()))
    assert np.array_equal(again[:-1], np.arange(299_999, -1, -7)) and again[-1] == 300_000
    assert vocab.grams(np.array([12345, 300_000]), np.array([-1, -1]), "@x").to_pylist() == ["w12345@x", "new@x"]
    same = TokenIds()   # 40,000 tokens of one hash, across the table's doublings
    data, offsets = string_buffers(pa.array([f"s{i}" for i in range(40_000)], pa.string()))
    hashes = np.full(40_000, 0x9E3779B97F4A7C15, np.uint64)
    assert np.array_equal(same.intern(data, offsets[:-1], offsets[1:], hashes), np.arange(40_000))
    back = np.arange(39_999, -1, -13)
    assert len(same.table) > 1 << 15 and np.array_equal(
        same.intern(data, offsets[back], offsets[back + 1], hashes[back]), back)
