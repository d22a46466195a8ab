"""What a verb prints about z-statistics on the terminal."""
from __future__ import annotations


def label_prior(label_prior: dict) -> str:
    """The label shares the ``null`` feature measures, one line; z*(null, l) where p0 is not the share."""
    def cell(label, v):
        z = f" (z* {v['z']:.1f})" if abs(v["share"] - v["p0"]) > 1e-9 else ""
        return f"{label} {v['share']:.3f}{z}"
    return "label prior (the null feature, not ranked): " + ", ".join(cell(l, v) for l, v in label_prior.items())


def topk(topk: dict, k: int = 5) -> str:
    lines = []
    for label, entries in topk.items():
        lines.append(f"{label}")
        for e in entries[:k]:
            lines.append(f"  {e['z']:8.2f}  n={e['n']:<8,} p={e['p']:.3f}  {e['feature']}")
    return "\n".join(lines)
