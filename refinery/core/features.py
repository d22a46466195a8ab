"""Task-independent features of a row (METHODS §1; Wu et al. 2022, Table 9), vectorized on Arrow.

A batch becomes a long table ``(row, feature)`` with each feature present once per row.
Families: ``unigram``, ``bigram`` (per field: ``w@hypothesis``, ``w1 w2@premise``),
``length`` (``hypo-len<5``), ``ratio`` (hypothesis/premise length ratio), ``overlap``
(``lex-overlap>0.8``, ``lex-overlap>0.9``, ``full-lex-overlap``) and ``null``.
``hypo-only-pred=<label>`` comes from a cross-fitted probe (see ``refinery.audit``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.validation import NOT_EMPTY, Allowed, each_of, setting, validate
from refinery.io.schema import is_pair

FAMILIES = ("unigram", "bigram", "length", "ratio", "overlap", "null", "hypo-only")
DEFAULT_FAMILIES = ("unigram", "bigram", "null")
NULL_FEATURE = "null"                     # the one feature of every row: its p̂(l|null) is the label's share
LENGTH_BUCKETS = (5, 10, 15, 20)          # hypo-len<5, hypo-len<10, ... , hypo-len>=20
RATIO_BUCKETS = (0.25, 0.5, 0.75, 1.0)    # len-ratio<0.25, ... , len-ratio>=1
OVERLAP_THRESHOLDS = (0.8, 0.9)
# Negations and quantifiers: never stopwords. An NLI label often turns on them, and they are among the
# strongest shortcuts of NLI corpora (SICK's contradictions are mostly written with "no" or "not", SNLI's
# with "nobody"): an audit or a correction that dropped them would never see those. A contracted negation is
# one token, "n't" (``TokenizerOptions.tokenize``: "don't" → "do", "n't", as the Penn Treebank splits it), so
# the words it leaves ("do", "wo", "is") are what they are, and "won" or "don" (a win, a name) is no negation.
NOT_CONTRACTED = "n't"
NEGATIONS = tuple("""no not nor never none nobody nothing nowhere neither cannot""".split()) + (NOT_CONTRACTED,)
QUANTIFIERS = tuple("""all any both each every few more most some several many much only""".split())
KEPT_WORDS = frozenset(NEGATIONS + QUANTIFIERS)
# NLTK's English stopword list less the negations and quantifiers: function words only.
STOPWORD_LIST = tuple(w for w in """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their theirs themselves what
which who whom this that that'll these those am is are was were be been being have has had having do does did doing
a an the and but if or because as until while of at by for with about against between into through during before
after above below to from up down in out on off over under again further then once here there when where why how all
any both each few more most other some such no nor not only own same so than too very s t can will just don don't
should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn
wasn't weren weren't won won't wouldn wouldn't""".split() if w not in KEPT_WORDS)


def null_row(features: pa.Array) -> int:
    """The row of the ``null`` feature (the label prior) in an audit's ``features``, −1 where it holds none."""
    return pc.index(features, NULL_FEATURE).as_py() if len(features) else -1


@functools.cache
def _stopwords() -> pa.Array:
    """The stop words as an Arrow array, made on first use (at import, pyarrow's first ``pa.array``
    would import pandas: 0.2 s of every command's start)."""
    return pa.array(sorted(STOPWORD_LIST), pa.string())

_PUNCT = r"([^\p{L}\p{M}\p{N}_\s])"   # not a letter, mark, digit or _ of any script (RE2 \w is ASCII-only)
_CONTRACTED = r"([nN])['’]([tT])\b"   # a word's n't (either apostrophe), split from it as one token
_HELD = "\ua78c"                       # a letter (ꞌ, saltillo) holding n't's apostrophe through the punctuation split


def split_words(texts: pa.Array) -> pa.ListArray:
    """Whitespace split, trimmed first: pyarrow's ``utf8_split_whitespace`` reads past the end of
    an array whose last string ends in whitespace, and when a UTF-8 continuation byte lies there
    it returns the last token with its trailing space (``". "``)."""
    return pc.utf8_split_whitespace(pc.utf8_trim_whitespace(texts))


@dataclass(frozen=True)
class TokenizerOptions:
    lowercase: bool = setting(True, help="Lowercase the text first.")
    remove_punctuation: bool = setting(False, help="Remove punctuation tokens.", option="--strip-punct/--keep-punct")
    remove_stopwords: bool = setting(False, help="Remove English stopwords (negations stay).",
                                     option="--stopwords/--keep-stopwords")

    def tokenize(self, texts) -> pa.ListArray:
        """Split on whitespace and punctuation (punctuation marks become tokens unless removed); a word's ``n't``
        is a token of its own (``don't`` → ``do``, ``n't``; the byte scanner of ``core.kernels`` splits the same)."""
        texts = pc.fill_null(_as_array(texts), "")
        if self.lowercase:
            texts = pc.utf8_lower(texts)
        contracted = pc.or_(*(pc.match_substring(texts, f"n{q}t", ignore_case=True) for q in "'’"))
        any_contracted = pc.any(contracted).as_py()
        if any_contracted:   # the regex only on the rows that may hold an n't (a plain search finds them)
            rows = pc.filter(texts, contracted)
            texts = pc.replace_with_mask(texts, contracted, pc.replace_substring_regex(rows, _CONTRACTED,
                                                                                      rf" \1{_HELD}\2"))
        texts = pc.replace_substring_regex(texts, _PUNCT, " " if self.remove_punctuation else r" \1 ")
        tokens = split_words(texts)
        flat = pc.list_flatten(tokens)
        if any_contracted:
            tokens = pa.ListArray.from_arrays(tokens.offsets, pc.replace_substring(flat, _HELD, "'"))
            flat = pc.list_flatten(tokens)
        keep = pc.greater(pc.binary_length(flat), 0)  # runs of whitespace leave empty strings
        if self.remove_stopwords:
            keep = pc.and_(keep, pc.invert(pc.is_in(flat, value_set=_stopwords())))
        return _filter_list(tokens, keep)


@dataclass(frozen=True)
class FeatureConfig:
    families: tuple = setting(DEFAULT_FAMILIES, each_of(*FAMILIES), f"Feature families: {', '.join(FAMILIES)} "
                              "(or all).", option="--features", parse=lambda v: FAMILIES if v.strip() == "all" else
                              tuple(x.strip() for x in v.split(",") if x.strip()), metavar="A,B,…")
    tokenizer: TokenizerOptions = field(default_factory=TokenizerOptions)
    field_names: tuple | None = setting(None, Allowed(
        lambda v: v is None or isinstance(v, (list, tuple)) and len(v) == 2 and all(map(NOT_EMPTY.test, v))
        and v[0] != v[1], "two different names or none"),
        "Names of text_a and text_b in feature keys (w@hypothesis); none: the preset's, else premise,hypothesis.",
        metavar="NAME_A,NAME_B")
    single_field_name: str | None = setting(None, NOT_EMPTY.or_none(), "Name of the one text in the keys of "
                                            "single-text corpora; none: the preset's, else text.")

    def __post_init__(self):
        validate(self)

    def to_dict(self) -> dict:
        return {"families": list(self.families), "tokenizer": self.tokenizer.__dict__,
                "field_names": list(self.field_names) if self.field_names else None,
                "single_field_name": self.single_field_name}

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureConfig":
        return cls(tuple(d["families"]), TokenizerOptions(**d["tokenizer"]),
                   tuple(d["field_names"]) if d.get("field_names") else None, d.get("single_field_name"))

    def named(self, field_names: tuple | None, single_text: bool = False) -> "FeatureConfig":
        """This config with the names it leaves open taken from the input's preset (``field_names``)."""
        if not field_names or self.field_names:
            return self
        return replace(self, field_names=tuple(field_names),
                       single_field_name=self.single_field_name or (field_names[0] if single_text else None))


def _as_array(x) -> pa.Array:
    return x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x


def _filter_list(lists: pa.ListArray, keep_flat) -> pa.ListArray:
    """Drop flattened elements where ``keep_flat`` is false, keeping the list structure."""
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy()
    keep = np.asarray(keep_flat, dtype=bool) if not isinstance(keep_flat, (pa.Array, pa.ChunkedArray)) \
        else keep_flat.to_numpy(zero_copy_only=False)
    lengths = np.bincount(parents[keep], minlength=len(lists))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(keep)))


def ngram_pairs(tokens: pa.ListArray, n: int, suffix: str) -> tuple[np.ndarray, pa.Array]:
    """(row index, ``"w1 … wn@suffix"``) for every n-gram of each row (duplicates within a row kept)."""
    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens).to_numpy()
    if n == 1:
        grams = flat
    else:
        m = len(flat) - n + 1
        if m <= 0:
            return np.empty(0, np.int64), pa.array([], pa.string())
        same = np.ones(m, dtype=bool)
        for k in range(1, n):
            same &= parents[k:k + m] == parents[:m]
        idx = np.nonzero(same)[0]
        parts = [pc.take(flat, pa.array(idx + k)) for k in range(n)]
        grams = pc.binary_join_element_wise(*parts, " ")
        parents = parents[idx]
    return parents.astype(np.int64), pc.binary_join_element_wise(grams, pa.scalar("@" + suffix), "")


def _bucket(values: np.ndarray, edges, name: str, fmt="{:g}") -> pa.Array:
    """``name<edge`` for the first edge above the value, else ``name>=last``."""
    labels = [f"{name}<{fmt.format(e)}" for e in edges] + [f"{name}>={fmt.format(edges[-1])}"]
    return pa.array(np.asarray(labels, dtype=object)[np.searchsorted(edges, values, side="right")], pa.string())


def _overlap_share(tok_a: pa.ListArray, tok_b: pa.ListArray) -> np.ndarray:
    """Share of hypothesis tokens that also occur in the premise, per row (Table 9)."""
    pa_, pb_ = pc.list_parent_indices(tok_a).to_numpy(), pc.list_parent_indices(tok_b).to_numpy()
    fa = pc.list_flatten(tok_a)
    fb = pc.list_flatten(tok_b)
    # key "row\x1ftoken": a hypothesis token overlaps when the same key exists on the premise side
    key_a = pc.binary_join_element_wise(pa.array(pa_.astype(str)), fa, "\x1f")
    key_b = pc.binary_join_element_wise(pa.array(pb_.astype(str)), fb, "\x1f")
    hit = pc.is_in(key_b, value_set=key_a).to_numpy(zero_copy_only=False)
    n = len(tok_b)
    total = np.bincount(pb_, minlength=n)
    hits = np.bincount(pb_, weights=hit, minlength=n)
    return np.divide(hits, total, out=np.zeros(n), where=total > 0)


def text_fields(table: pa.Table, config: FeatureConfig) -> list[tuple[str, str]]:
    """(column, feature suffix) of each text field: premise and hypothesis, or the one text."""
    return fields_of(is_pair(table), config)


def fields_of(pair: bool, config: FeatureConfig) -> list[tuple[str, str]]:
    """``text_fields`` of a corpus of pairs (``pair``) or of single texts."""
    if not pair:
        return [("text_a", config.single_field_name or "text")]
    a, b = config.field_names or ("premise", "hypothesis")
    return [("text_a", a), ("text_b", b)]


class _LazyTokens(dict):
    """Column → token lists, tokenized on first use (row-level families may need none)."""

    def __init__(self, table: pa.Table, tokenizer: TokenizerOptions):
        super().__init__()
        self.table, self.tokenizer = table, tokenizer

    def __missing__(self, col: str) -> pa.ListArray:
        self[col] = self.tokenizer.tokenize(self.table[col])
        return self[col]


def extract(table: pa.Table, config: FeatureConfig) -> pa.Table:
    """Long table ``(row: int64, feature: string)`` of the features of each row, deduplicated per row."""
    n = table.num_rows
    fam = set(config.families)
    single = not is_pair(table)
    fields = text_fields(table, config)
    tokens = _LazyTokens(table, config.tokenizer)
    rows: list[np.ndarray] = []
    feats: list[pa.Array] = []

    def add(r, f):
        rows.append(np.asarray(r, dtype=np.int64))
        feats.append(f)

    for col, name in fields:
        if "unigram" in fam:
            add(*ngram_pairs(tokens[col], 1, name))
        if "bigram" in fam:
            add(*ngram_pairs(tokens[col], 2, name))
    all_rows = np.arange(n, dtype=np.int64)
    hyp = "text_a" if single else "text_b"
    if fam & {"length", "ratio", "overlap"}:
        hyp_len = pc.list_value_length(tokens[hyp]).to_numpy(zero_copy_only=False)
    if "length" in fam:
        add(all_rows, _bucket(hyp_len, LENGTH_BUCKETS, "hypo-len"))
    if not single and "ratio" in fam:
        prem_len = pc.list_value_length(tokens["text_a"]).to_numpy(zero_copy_only=False)
        ratio = np.divide(hyp_len, prem_len, out=np.zeros(n), where=prem_len > 0)
        add(all_rows, _bucket(ratio, RATIO_BUCKETS, "len-ratio"))
    if not single and "overlap" in fam:
        share = _overlap_share(tokens["text_a"], tokens["text_b"])
        for t in OVERLAP_THRESHOLDS:
            mask = share > t
            add(all_rows[mask], pa.array([f"lex-overlap>{t:g}"] * int(mask.sum()), pa.string()))
        mask = (share >= 1.0) & (hyp_len > 0)
        add(all_rows[mask], pa.array(["full-lex-overlap"] * int(mask.sum()), pa.string()))
    if "null" in fam:
        add(all_rows, pa.array([NULL_FEATURE] * n, pa.string()))
    if not rows:
        return pa.table({"row": pa.array([], pa.int64()),
                         "feature": pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))})
    return dedupe(np.concatenate(rows), pa.concat_arrays([_as_array(f) for f in feats]))


def dedupe(rows: np.ndarray, features: pa.Array) -> pa.Table:
    """Distinct (row, feature) pairs, the feature dictionary-encoded (presence counts once per row).

    Features are dictionary-encoded and each pair packed into one int64 key, so the
    distinct step is a single hash pass.
    """
    encoded = pc.dictionary_encode(features)
    key = (rows.astype(np.int64) << 32) | encoded.indices.to_numpy().astype(np.int64)
    key = pc.unique(pa.array(key)).to_numpy()   # first occurrences, in order
    indices = pa.array((key & 0xFFFFFFFF).astype(np.int32))
    return pa.table({"row": key >> 32, "feature": pa.DictionaryArray.from_arrays(indices, encoded.dictionary)})


def dictionary_ids(values, index: dict, names: list | None = None) -> np.ndarray:
    """Ids of the strings of ``values`` in ``index`` (string → id), unseen ones registered with
    the next id (and appended to ``names``). The array is dictionary-encoded first (unless it is
    already), so the Python dict is consulted once per distinct string, not once per value."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    encoded = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
    if encoded.null_count:
        raise RuntimeError("dictionary_ids: values must not be null")
    local = np.empty(len(encoded.dictionary), dtype=np.int64)
    for i, value in enumerate(encoded.dictionary.to_pylist()):
        j = index.get(value)
        if j is None:
            j = index[value] = len(index)
            if names is not None:
                names.append(value)
        local[i] = j
    return local[encoded.indices.to_numpy(zero_copy_only=False)]
