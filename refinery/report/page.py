"""One report builder for every stage, the pipeline and compare: a header naming the corpus, the date, the
machine and refinery's version, then sections of tables, figures and prose. The HTML is for reading (numbers
formatted by ``report.format``, dicts as tables); each report's JSON keeps the exact values.
"""
from __future__ import annotations

import datetime
import hashlib
import html
import os
import platform
import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache

from refinery import __version__
from refinery.io.corpus import Corpus, is_corpus
from refinery.report import format as fmt

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1.2em 1.5em;max-width:940px;color:#222;line-height:1.4}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd}
header p{margin:.15em 0;color:#555;font-size:13px;overflow-wrap:anywhere}
pre{background:#f6f6f6;padding:.6em;font-size:12px;overflow-x:auto;white-space:pre-wrap}nav{font-size:13px;margin:.6em 0}
nav a{margin-right:.9em}p.note{color:#555;font-size:13px}.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;
text-align:left;vertical-align:top;overflow-wrap:break-word}th{background:#f3f3f3}td.num,th.num{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}table table{margin:0}figure{margin:.5em 0 1em}
figcaption{font-size:13px;color:#555}svg{max-width:100%;height:auto}.bad{color:#b00020;font-weight:600}
@media print{body{max-width:none;padding:0}nav{display:none}h2{break-after:avoid}figure,table{break-inside:avoid}}
"""


def scoped_style(scope: str) -> str:
    """The reports' CSS for a report shown inside another page (a notebook): every rule under ``scope``."""
    rules = re.sub(r"@media print\{.*\}\s*$", "", _STYLE.strip(), flags=re.S)
    return "".join(",".join(f"{scope} {sel.strip()}" if sel.strip() != "body" else scope for sel in head.split(","))
                   + "{" + body + "}" for head, body in re.findall(r"([^{}]+)\{([^{}]*)\}", rules))


def cpu_name() -> str:
    """CPU model, family/model numbers and the wide-vector instruction sets (AVX2, AVX512, BF16, AMX)."""
    try:
        with open("/proc/cpuinfo") as fh:
            info = dict(line.split(":", 1) for line in fh.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return platform.processor() or platform.machine() or "unknown CPU"
    info = {k.strip(): v.strip() for k, v in info.items()}
    flags = set(info.get("flags", "").split())
    wide = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return (f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family')}, model {info.get('model')}; "
            f"{', '.join(wide) or 'no AVX2'})")


@lru_cache(1)
def machine() -> str:
    """The CPU (``cpu_name``) and its core count: what every figure of a report was measured on."""
    return f"{cpu_name()}, {os.cpu_count()} cores"


def corpus_name(paths, storage_options: dict | None = None) -> str:
    """The files a report's rows came from, by name ("snli_dev.jsonl + snli_test.jsonl"): a refinery corpus
    (a pipeline's step) is named by the inputs its manifest lists, back to the raw files."""
    names = list(dict.fromkeys(name for p in paths for name in _origins(str(p), storage_options or {}, 8)))
    return " + ".join(names[:3]) + (f" + {len(names) - 3} more" if len(names) > 3 else "")


def _origins(path: str, storage_options: dict, depth: int) -> list[str]:
    if depth and is_corpus(path, storage_options):
        inputs = Corpus.open(path, storage_options).manifest.inputs
        if inputs:
            return [name for p in inputs for name in _origins(p, storage_options, depth - 1)]
    return [posixpath.basename(path.rstrip("/")) or path]


# ---------------------------------------------------------------- blocks: each returns an HTML fragment

def _cell(v) -> str:
    """A table cell: numbers right-aligned and formatted, dicts as nested tables, lists of dicts as tables."""
    if isinstance(v, dict):
        return f"<td>{fields(v)}</td>" if v else f"<td>{fmt.MISSING}</td>"
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v):
        return f"<td>{table(v)}</td>"
    numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
    return f'<td class="num">{fmt.value(v)}</td>' if numeric else f"<td>{html.escape(fmt.value(v))}</td>"


def _head(name, numeric: bool = False) -> str:
    return f'<th class="num">{html.escape(str(name))}</th>' if numeric else f"<th>{html.escape(str(name))}</th>"


def _scroll(inner: str) -> str:
    return f'<div class="scroll">{inner}</div>'


def humanize(key) -> str:
    """A JSON key as a heading: "max_z_before" → "max z before"."""
    return str(key).replace("_", " ")


def fields(d: dict, formats: dict | None = None) -> str:
    """A dict as a two-column table; a dict of dicts sharing their keys as a grid (one row per key)."""
    formats = formats or {}
    inner = [v for v in d.values() if isinstance(v, dict)]
    if d and len(inner) == len(d) and len({tuple(v) for v in inner}) == 1 and len(inner[0]) > 1:
        columns = list(inner[0])
        return table([{"": k, **v} for k, v in d.items()], ["", *columns], formats)
    rows = "".join(f"<tr><th>{html.escape(humanize(k))}</th>"
                   + (f'<td class="num">{formats[k](v)}</td>' if k in formats and v is not None else _cell(v))
                   + "</tr>" for k, v in d.items())
    return _scroll(f"<table>{rows}</table>")


def table(rows: list, columns: list | None = None, formats: dict | None = None) -> str:
    """Rows (dicts, or lists in the order of ``columns``) as a table; ``formats`` maps a column to a function
    giving its text (``report.format.percent``, …)."""
    if not rows:
        return '<p class="note">none</p>'
    formats = formats or {}
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    dicts = [r if isinstance(r, dict) else dict(zip(columns, r)) for r in rows]
    numeric = {c: all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
                      for r in dicts if r.get(c) is not None) and any(r.get(c) is not None for r in dicts)
               for c in columns}
    head = "".join(_head(humanize(c), numeric[c] or c in formats) for c in columns)
    body = "".join("<tr>" + "".join(
        (f'<td class="num">{html.escape(formats[c](r[c]))}</td>' if c in formats and r.get(c) is not None
         else _cell(r.get(c))) for c in columns) + "</tr>" for r in dicts)
    return _scroll(f"<table><tr>{head}</tr>{body}</table>")


def config_table(d: dict) -> str:
    """A stage's configuration: nested settings flattened to dotted names ("features.tokenizer.lowercase")."""
    flat = {}

    def walk(prefix, v):
        if isinstance(v, dict) and v:
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        else:
            flat[prefix] = v
    walk("", d)
    rows = "".join(f"<tr><th>{html.escape(k)}</th>{_cell(v if not isinstance(v, dict) else None)}</tr>"
                   for k, v in flat.items())
    return _scroll(f"<table>{rows}</table>")


def code(text: str) -> str:
    """Preformatted text (a pipeline file, a command)."""
    return f"<pre>{html.escape(text)}</pre>"


def figure(svg: str, caption: str = "") -> str:
    return f"<figure>{svg}" + (f"<figcaption>{html.escape(caption)}</figcaption>" if caption else "") + "</figure>"


def note(text) -> str:
    """A note: text, or a ``refinery.messages.Message`` worded in the run's terms."""
    return f'<p class="note">{html.escape(str(text))}</p>'


def link(href: str, text: str) -> str:
    return f'<a href="{html.escape(href)}">{html.escape(text)}</a>'


# ---------------------------------------------------------------- the page

@dataclass
class Report:
    """An HTML report: ``Report(title, corpus).section(heading, block, …)…html()``."""

    title: str
    corpus: str = ""                 # what the rows are (``corpus_name``)
    inputs: list = field(default_factory=list)   # the paths read, listed in the header
    sections: list = field(default_factory=list)

    def section(self, heading: str, *blocks: str) -> "Report":
        self.sections.append((heading, "".join(blocks)))
        return self

    def header(self) -> str:
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"<h1>{html.escape(self.title)}</h1>"]
        if self.corpus:
            lines.append(f"<p><b>Corpus</b> {html.escape(self.corpus)}</p>")
        if self.inputs and [str(p) for p in self.inputs] != [self.corpus]:
            lines.append(f"<p><b>Read from</b> {html.escape(', '.join(map(str, self.inputs)))}</p>")
        lines.append(f'<p><b>Run</b> <time>{date}</time> · {html.escape(machine())} · refinery {__version__}</p>')
        return "<header>" + "".join(lines) + "</header>"

    def html(self) -> str:
        key = hashlib.sha1(f"{self.title}\n{self.corpus}".encode()).hexdigest()[:6]   # ids apart from other reports'
        anchors = [f"r{key}-{i}" for i in range(len(self.sections))]
        nav = "<nav>" + "".join(f'<a href="#{a}">{html.escape(h)}</a>'
                                for a, (h, _) in zip(anchors, self.sections)) + "</nav>" if len(self.sections) > 2 else ""
        body = "".join(f'<section id="{a}"><h2>{html.escape(h)}</h2>{content}</section>'
                       for a, (h, content) in zip(anchors, self.sections))
        title = f"{self.title} · {self.corpus}" if self.corpus else self.title
        return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
                f'content="width=device-width,initial-scale=1"><title>{html.escape(title)}</title>'
                f"<style>{_STYLE}</style></head><body>{self.header()}{nav}{body}</body></html>")


# ---------------------------------------------------------------- blocks shared by the z-statistics reports

def top_features(topk: dict, threshold: float | None = None) -> str:
    """``ZStats.top_k``'s features per label: rank, feature, z*, n and p̂(l|x); with the audit's ``threshold``,
    whether each is significant (z* > threshold), and a line saying how many are, or that none is a bias."""
    rows = [{"label": label, "#": rank, "feature": e["feature"], "z*": e["z"], "n": e["n"], "p̂": e["p"]}
            for label, entries in topk.items() for rank, e in enumerate(entries, 1)]
    columns = ["label", "#", "feature", "z*", "n", "p̂"]
    if threshold is None or not rows:
        return table(rows, columns, {"z*": fmt.z, "p̂": fmt.number})
    for r in rows:
        r["significant"] = "yes" if r["z*"] > threshold else "no"
    significant = sum(r["significant"] == "yes" for r in rows)
    summary = note(fmt.significance(significant, len(rows), threshold))
    return summary + table(rows, [*columns, "significant"], {"z*": fmt.z, "p̂": fmt.number})


def per_label(label_prior: dict, formats: dict | None = None, **columns: dict) -> str:
    """One row per label: its rows' share, the prior p0, z*(null, l) (the ``null`` feature, in every row: a
    baseline, not a bias) and any further ``{column: {label: value}}``."""
    rows = [{"label": label, "share of rows": v["share"], "prior p0": v["p0"],
             "z*(null)": None if abs(v["share"] - v["p0"]) < 1e-9 else v["z"],   # p0 is the label's share
             **{name: col.get(label) for name, col in columns.items()}} for label, v in label_prior.items()]
    return table(rows, formats={"share of rows": fmt.percent, "prior p0": fmt.number, "z*(null)": fmt.z,
                                **(formats or {})})
