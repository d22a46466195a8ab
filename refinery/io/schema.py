"""The canonical record (METHODS §0) and the presets that map public releases onto it."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

import pyarrow as pa

from refinery.io.records import FIELD_NAMES, SINGLE_TEXT
from refinery.messages import Refusal, Setting

CANONICAL_FIELDS = ("id", "text_a", "text_b", "label")
OPTIONAL_FIELDS = {
    "weight": pa.float64(),
    "source": pa.string(),
    "origin_id": pa.string(),
    "split": pa.string(),
}


def is_pair(table: pa.Table) -> bool:
    """Whether rows are pairs (premise/hypothesis, claim/evidence): some row has a ``text_b``."""
    return "text_b" in table.column_names and table["text_b"].null_count < table.num_rows


CANONICAL_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("text_a", pa.string(), nullable=False),
        pa.field("text_b", pa.string()),
        pa.field("label", pa.string(), nullable=False),
    ]
)

REJECTS_SCHEMA = pa.schema(
    [
        pa.field("source_file", pa.string()),
        pa.field("line", pa.int64()),
        pa.field("column", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("raw", pa.string()),
    ]
)


@dataclass(frozen=True)
class Mapping:
    """How one release's columns become the canonical record.

    ``columns`` maps canonical names (text_a, text_b, label, id, and optionally
    node_a/node_b, the sentence ids used by the leakage graph, kept as columns of those
    names) to source column names.
    ``labels`` maps raw label values to class names; ``label_set`` is the declared set
    of classes (rows outside it are rejected), or None to accept any non-empty label.
    ``optional`` names the canonical fields whose column a file may lack: a preset's ids are
    then content hashes and its sentence ids left out, since releases differ in what they ship;
    every other mapped column must be in every file (a ``--map`` names only what the user asked for).
    ``format`` is the format of files whose extension names none; ``csv_quoting`` None
    reads CSV by RFC 4180 and TSV without quoting (tab-separated values have no quotes).
    ``field_names`` are the task's names for text_a and text_b (claim/evidence, question1/question2).
    """

    columns: dict
    labels: dict = field(default_factory=dict)
    label_set: tuple | None = None
    format: str | None = None  # jsonl|json|csv|tsv|parquet|arrow, for files whose extension names none
    csv_quoting: bool | None = None
    optional: tuple = ("id", "node_a", "node_b")
    field_names: tuple = ("premise", "hypothesis")
    preset: str | None = None  # the preset's name, for messages

    @property
    def names(self) -> tuple[tuple | None, bool]:
        """The names of text_a and text_b a preset gives features (none for an explicit map) and whether it reads one
        text: what a corpus read through it records (``FIELD_NAMES``, ``SINGLE_TEXT``)."""
        if self.preset is None:
            return None, False
        return self.field_names, self.columns.get("text_b") is None

    def recorded_names(self) -> dict:
        """The manifest entries of ``names`` (none for an explicit map)."""
        names, single = self.names
        return {FIELD_NAMES: list(names), SINGLE_TEXT: single} if names else {}

    @property
    def required(self) -> dict:
        """Canonical field → source column, for the columns every file must have."""
        return {k: v for k, v in self.columns.items() if v is not None and k not in self.optional}


NLI3 = ("entailment", "neutral", "contradiction")
NLI_PAIR = {"text_a": "sentence1", "text_b": "sentence2", "label": "gold_label", "id": "pairID"}
FEVER_LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")

PRESETS: dict[str, Mapping] = {name: replace(m, preset=name) for name, m in {
    "snli": Mapping(NLI_PAIR, label_set=NLI3),
    "mnli": Mapping(NLI_PAIR, label_set=NLI3),
    "hans": Mapping(NLI_PAIR, label_set=("entailment", "non-entailment"), format="tsv"),
    "qqp": Mapping(
        {
            "text_a": "question1",
            "text_b": "question2",
            "label": "is_duplicate",
            "id": "id",
            "node_a": "qid1",
            "node_b": "qid2",
        },
        labels={"0": "not_duplicate", "1": "duplicate"},
        label_set=("not_duplicate", "duplicate"),
        format="tsv",
        field_names=("question1", "question2"),
    ),
    "fever": Mapping(
        {"text_a": "claim", "text_b": "evidence", "label": "label", "id": "id"},
        label_set=FEVER_LABELS,
        field_names=("claim", "evidence"),
    ),
    "fever_claims": Mapping(  # FEVER's claims alone (its releases ship evidence as ids, not text)
        {"text_a": "claim", "label": "label", "id": "id"},
        label_set=FEVER_LABELS,
        field_names=("claim", "evidence"),
    ),
    "sick": Mapping(
        {"text_a": "sentence_A", "text_b": "sentence_B", "label": "entailment_judgment", "id": "pair_ID"},
        labels={"ENTAILMENT": "entailment", "NEUTRAL": "neutral", "CONTRADICTION": "contradiction"},
        label_set=NLI3,
        format="tsv",
    ),
    "msrp": Mapping(
        {
            "text_a": "#1 String",
            "text_b": "#2 String",
            "label": "Quality",
            "node_a": "#1 ID",
            "node_b": "#2 ID",
        },
        labels={"0": "not_paraphrase", "1": "paraphrase"},
        label_set=("not_paraphrase", "paraphrase"),
        format="tsv",
        field_names=("sentence1", "sentence2"),
    ),
}.items()}


MAPPED_FIELDS = ("text_a", "text_b", "label", "id", "node_a", "node_b", "split", "weight")   # what --map may name
AS_IS = ("id", "text_a", "text_b", "label", "node_a", "node_b")   # refinery's columns, read as they are without a map
AS_IS_REQUIRED = ("text_a", "label")   # ... where the data has at least these


def canonical_mapping(columns) -> Mapping | None:
    """The mapping of data already in refinery's columns (``text_a`` and ``label`` at least): each of ``AS_IS``
    that ``columns`` holds read as itself; None where the data is not in refinery's columns."""
    if not all(c in columns for c in AS_IS_REQUIRED):
        return None
    return Mapping({c: c for c in AS_IS if c in columns})


def parse_mapping(spec: str, labels: str | None = None) -> Mapping:
    """Parse ``text_a=COL,text_b=COL,label=COL,id=COL`` (and an optional ``a,b,c`` label set)."""
    columns = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if "=" not in part:
            raise Refusal(Setting("map"), f" entry {part!r} is not NAME=COLUMN", code="invalid-setting")
        key, col = (s.strip() for s in part.split("=", 1))
        if key not in MAPPED_FIELDS:
            close = difflib.get_close_matches(key, MAPPED_FIELDS, n=1)
            raise Refusal(Setting("map"), f": unknown canonical field {key!r}" + (
                f"; did you mean {close[0]!r}?" if close else "") + f" (fields: {', '.join(MAPPED_FIELDS)})",
                          code="unknown-setting")
        columns[key] = col
    for required in ("text_a", "label"):
        if required not in columns:
            raise Refusal(Setting("map"), f" must name {required}=COLUMN", code="missing-setting")
    label_set = tuple(s.strip() for s in labels.split(",")) if labels else None
    return Mapping(columns, label_set=label_set, optional=())


def resolve_mapping(preset: str | None, mapping: str | None, labels: str | None = None) -> Mapping | None:
    """The mapping named by ``--preset`` or spelled by ``--map`` (None: inputs are canonical corpora)."""
    if preset and mapping:
        raise Refusal("give either ", Setting("preset"), " or ", Setting("map"), ", not both",
                      code="conflicting-settings")
    if preset:
        try:
            m = PRESETS[preset.lower()]
        except KeyError:
            close = difflib.get_close_matches(preset.lower(), PRESETS, n=1)
            raise Refusal(f"unknown preset {preset!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                          + f" (presets: {', '.join(PRESETS)})", code="invalid-setting") from None
        return replace(m, label_set=_preset_labels(preset.lower(), m, labels)) if labels else m
    if mapping:
        return parse_mapping(mapping, labels)
    return None


def _preset_labels(preset: str, mapping: Mapping, labels: str) -> tuple:
    """``--labels`` over a preset's: a subset of its labels, or labels of its own; one a letter or two from a
    preset's label (a typo that would reject every row of that label as outside the set) is refused, named."""
    given = tuple(s.strip() for s in labels.split(","))
    known = tuple(mapping.label_set or ()) + tuple(mapping.labels.values())
    for label in given:
        close = [k for k in difflib.get_close_matches(label, known, n=1, cutoff=0.8) if k != label]
        if label not in known and close:
            raise Refusal(Setting("labels"), f": {label!r} is not one of {preset}'s labels "
                          f"({', '.join(dict.fromkeys(known))}); did you mean {close[0]!r}? (its rows would all be "
                          "rejected as outside the label set)", code="invalid-setting")
    return given


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` with no rows (``Schema.empty_table`` imports pandas: 0.3 s on every CLI start)."""
    return pa.Table.from_batches([], schema=schema)
