"""A damaged corpus for fuzz tests: real SNLI lines with 24 kinds of damage mixed in.

``damaged_corpus(path, rows, seed)`` writes the file and returns a ``Fuzzed``: the number of records
(non-blank lines; blank lines are not rows), the kinds used, and per id the texts and labels a kept
row may carry (an id can repeat: duplicated ids are one of the damages). Texts are what JSON holds,
decoded as the readers document: strings as they are, numbers and booleans as JSON writes them.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

BOM = b"\xef\xbb\xbf"


def _line(record) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode("utf-8")


def _with(rec, **changes) -> bytes:
    return _line({**rec, **changes})


# Each damage turns one good SNLI record into the bytes of one line (no line end).
DAMAGES = {
    "number_as_text": lambda r, g: _with(r, sentence1=g.randint(0, 10**6)),
    "float_as_text": lambda r, g: _with(r, sentence2=g.random() * 100),
    "bool_as_text": lambda r, g: _with(r, sentence2=True),
    "object_as_text": lambda r, g: _with(r, sentence1={"text": r["sentence1"]}),
    "array_as_text": lambda r, g: _with(r, sentence2=[r["sentence2"]]),
    "number_as_label": lambda r, g: _with(r, gold_label=g.randint(0, 2)),
    "label_case_and_space": lambda r, g: _with(r, gold_label=f" {r['gold_label'].upper()} "),
    "null_text": lambda r, g: _with(r, sentence2=None),
    "empty_text": lambda r, g: _with(r, sentence1=""),
    "missing_column": lambda r, g: _line({k: v for k, v in r.items() if k != "sentence2"}),
    "deep_nesting": lambda r, g: b"[" * 5000 + b"]" * 5000,
    "deep_extra_field": lambda r, g: _with(r, extra=json.loads("[" * 100 + "]" * 100)),
    "five_mb_line": lambda r, g: _with(r, sentence2="w " * 2_600_000),
    "not_json": lambda r, g: b"this line is not JSON, " + r["sentence1"].encode(),
    "truncated_json": lambda r, g: _line(r)[: g.randint(5, 40)],
    "json_array_row": lambda r, g: _line([r["sentence1"], r["sentence2"], r["gold_label"]]),
    "json_scalar_row": lambda r, g: b"42",
    "nul_bytes": lambda r, g: _line(r)[:20] + b"\x00\x00" + _line(r)[20:],
    "bad_utf8": lambda r, g: _line(r).replace(b'"sentence1": "', b'"sentence1": "\xff\xfe', 1),
    "lone_surrogate": lambda r, g: _line(r).replace(b'"sentence2": "', b'"sentence2": "\\ud800', 1),
    "trailing_comma": lambda r, g: _line(r)[:-1] + b",}",
    "duplicate_id": lambda r, g: _with(r, pairID="dup-0", sentence1=r["sentence1"] + " (again)"),
    "odd_but_valid_text": lambda r, g: _with(r, sentence1="\ufeff" + r["sentence1"] + "\u200b\t\u05d0",
                                             sentence2=r["sentence2"] + " \\n \u00e9\u0301 \U0001F600"),
    "long_valid_text": lambda r, g: _with(r, sentence2=" ".join([r["sentence2"]] * 2000)),
}
USES = {"five_mb_line": 2, "long_valid_text": 5}  # the big ones, a few times only
# whole-file damage on top: a BOM, CRLF on some lines, blank and whitespace-only lines
FILE_DAMAGES = ("bom", "crlf_lines", "blank_lines")


def text_value(value):
    """A JSON value in a text column as the readers document it: strings as they are, scalars JSON-encoded."""
    return value if value is None or isinstance(value, str) else json.dumps(value)


@dataclass
class Fuzzed:
    path: Path
    records: int
    kinds: list[str]
    allowed: dict[str, set] = field(default_factory=dict)  # id → {(text_a, text_b, label)}

    def altered(self, rows) -> list[dict]:
        """Rows (dicts with id, text_a, text_b, label) whose content no source line with their id holds."""
        return [r for r in rows if (r["text_a"], r["text_b"], r["label"]) not in self.allowed.get(r["id"], ())]


def damaged_corpus(path: Path, source: str, rows: int, seed: int = 0, every: int = 25) -> Fuzzed:
    """``rows`` SNLI lines from ``source`` with one damaged line after every ``every`` good ones."""
    g = random.Random(seed)
    with open(source, encoding="utf-8") as fh:
        good = [json.loads(line) for _, line in zip(range(rows), fh)]
    common = [k for k in DAMAGES if k not in USES]
    schedule = [k for k, n in USES.items() for _ in range(n)]
    schedule += [common[i % len(common)] for i in range(len(good) // every - len(schedule))]
    g.shuffle(schedule)
    out, allowed = [], {}
    for i, rec in enumerate(good):
        rec = {"sentence1": rec["sentence1"], "sentence2": rec["sentence2"], "gold_label": rec["gold_label"],
               "pairID": f"p{i}"}
        out.append(_line(rec))
        candidates = [rec]
        if i % every == every - 1:
            kind = schedule[i // every]
            out.append(DAMAGES[kind](rec, g))
            try:
                candidates.append(json.loads(out[-1].decode("utf-8")))
            except (UnicodeDecodeError, ValueError, RecursionError):
                pass
        for c in candidates:
            if isinstance(c, dict) and isinstance(c.get("pairID"), str):
                allowed.setdefault(c["pairID"], set()).add(
                    (text_value(c.get("sentence1")), text_value(c.get("sentence2")), text_value(c.get("gold_label"))))
        if i % 97 == 13:
            out.append(b"   ")                                   # a whitespace-only line: not a record
    records = sum(1 for line in out if line.strip())
    used = sorted(set(schedule))
    ends = [b"\r\n" if g.random() < 0.1 else b"\n" for _ in out]
    path.write_bytes(BOM + b"".join(line + end for line, end in zip(out, ends)))
    return Fuzzed(path, records, used + list(FILE_DAMAGES), allowed)
