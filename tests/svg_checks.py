"""Checks of a finished figure (tests): the boxes of its texts as the figures estimate them, texts that overlap
and texts outside the viewBox."""
from __future__ import annotations

import html

from refinery.report.figures.measure import overlap, text_box


def _attributes(tag: str) -> dict[str, str]:
    """name → value of the attributes of one start tag (the double-quoted form these figures write)."""
    out, pos = {}, 0
    while True:
        eq = tag.find('="', pos)
        if eq < 0:
            return out
        end = tag.find('"', eq + 2)
        out[tag[:eq].rsplit(None, 1)[-1]] = html.unescape(tag[eq + 2:end])
        pos = end + 1


def _strip_tags(body: str) -> str:
    out, pos = [], 0
    while (lt := body.find("<", pos)) >= 0:
        out.append(body[pos:lt])
        pos = body.find(">", lt) + 1
    out.append(body[pos:])
    return html.unescape("".join(out))


def text_boxes(svg: str) -> list[tuple[float, float, float, float, str]]:
    """(x0, y0, x1, y1, text) of every ``<text>`` of a figure of this module, in viewBox units, estimated as the
    figures place them (x, y, font-size, text-anchor, font-weight and rotate(a cx cy) of each text; the root's
    font-size otherwise)."""
    root = _attributes(svg[svg.find("<svg"):svg.find(">", svg.find("<svg"))])
    default = float(root.get("font-size", 16))
    out, pos = [], 0
    while (start := svg.find("<text", pos)) >= 0:
        close = svg.find(">", start)
        end = svg.find("</text>", close)
        a = _attributes(svg[start + 5:close])
        text = _strip_tags(svg[close + 1:end])
        rotate = None
        if a.get("transform", "").startswith("rotate("):
            rotate = tuple(float(v) for v in a["transform"][7:-1].replace(",", " ").split())
        bold = a.get("font-weight") in ("bold", "600", "700", "800", "900")
        out.append((*text_box(float(a.get("x", 0)), float(a.get("y", 0)), text, float(a.get("font-size", default)),
                          a.get("text-anchor", "start"), bold, rotate), text))
        pos = end + 7
    return out


def text_overlaps(svg: str, pad: float = 0.0) -> list[tuple[str, str]]:
    """Pairs of texts whose estimated boxes intersect (an empty list for a readable figure)."""
    boxes = [b for b in text_boxes(svg) if b[4].strip()]
    return [(a[4], b[4]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if overlap(a, b, pad)]


def text_outside(svg: str) -> list[str]:
    """Texts whose estimated boxes extend outside the viewBox."""
    root = _attributes(svg[svg.find("<svg"):svg.find(">", svg.find("<svg"))])
    _, _, w, h = (float(v) for v in root["viewBox"].split())
    return [b[4] for b in text_boxes(svg) if b[0] < 0 or b[1] < 0 or b[2] > w or b[3] > h]
