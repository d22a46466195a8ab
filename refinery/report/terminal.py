"""What a verb prints about z-statistics on the terminal."""
from __future__ import annotations

from refinery.report import format as fmt


def label_prior(label_prior: dict) -> str:
    """The label shares the ``null`` feature measures, one line; z*(null, l) where p0 is not the share."""
    def cell(label, v):
        z = f" (z* {v['z']:.1f})" if abs(v["share"] - v["p0"]) > 1e-9 else ""
        return f"{label} {v['share']:.3f}{z}"
    return "label prior (the null feature, not ranked): " + ", ".join(cell(l, v) for l, v in label_prior.items())


def topk(topk: dict, k: int = 5, threshold: float | None = None) -> str:
    """The top ``k`` features per label, one a line: z*, n, p̂ and the feature; with the audit's ``threshold``,
    a ``*`` marks the significant ones (z* > threshold) and a last line counts them, or says none is a bias."""
    lines = []
    listed = significant = 0
    for label, entries in topk.items():
        lines.append(f"{label}")
        for e in entries[:k]:
            mark = "*" if threshold is not None and e["z"] > threshold else " "
            listed += 1
            significant += mark == "*"
            lines.append(f" {mark}{e['z']:8.2f}  n={e['n']:<8,} p={e['p']:.3f}  {e['feature']}")
    if threshold is not None and listed:
        lines.append(("* = significant; " if significant else "") + fmt.significance(significant, listed, threshold))
    return "\n".join(lines)
