"""Text geometry of the figures: each label's box estimated from DejaVu Sans's advance widths (the widest common
sans; ``system-ui`` on Linux), so that labels are placed without overlapping and cut to the room they have."""
from __future__ import annotations

import math


# Advance widths of DejaVu Sans, % of the font size, for chr(32)…chr(126) (measured in Chromium).
_ASCII = (32, 41, 46, 84, 64, 96, 78, 28, 40, 40, 50, 84, 32, 37, 32, 34, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
          34, 34, 84, 84, 84, 54, 100, 69, 69, 70, 78, 64, 58, 78, 76, 30, 30, 66, 56, 87, 75, 79, 61, 79, 70, 64,
          62, 74, 69, 99, 69, 62, 69, 40, 34, 40, 84, 50, 50, 62, 64, 55, 64, 62, 36, 64, 64, 28, 28, 58, 28, 98,
          64, 62, 64, 64, 42, 53, 40, 64, 60, 82, 60, 60, 53, 64, 34, 64, 84)
_OTHER = {"…": 100, "α": 66, "·": 32, "–": 50, "—": 100, "−": 84, "≥": 84, "≤": 84, "×": 84, "→": 84}
ASCENT, DESCENT = 1.06, 0.27          # a text's box above and below its baseline, in font sizes (Segoe UI's


def text_width(text: str, size: float, bold: bool = False) -> float:
    """Estimated rendered width of ``text`` in px (DejaVu Sans advances; bold 10% wider)."""
    total = 0
    for ch in text:
        o = ord(ch)
        if 32 <= o < 127:
            total += _ASCII[o - 32]
        elif 0x300 <= o < 0x370:        # combining marks (the hat of p̂)
            continue
        else:
            total += _OTHER.get(ch, 100 if o >= 0x2E80 else 84)
    return total / 100 * size * (1.1 if bold else 1.0)


def text_box(x, y, text, size, anchor="start", bold=False, rotate=None):
    """(x0, y0, x1, y1) of a text drawn at (x, y); ``rotate`` = (degrees, cx, cy) as SVG's rotate()."""
    w = text_width(text, size, bold)
    x0 = x - {"start": 0.0, "middle": w / 2, "end": w}[anchor]
    box = (x0, y - ASCENT * size, x0 + w, y + DESCENT * size)
    if not rotate:
        return box
    a, cx, cy = math.radians(rotate[0]), rotate[1], rotate[2]
    pts = [(px, py) for px in (box[0], box[2]) for py in (box[1], box[3])]
    xs = [cx + (px - cx) * math.cos(a) - (py - cy) * math.sin(a) for px, py in pts]
    ys = [cy + (px - cx) * math.sin(a) + (py - cy) * math.cos(a) for px, py in pts]
    return (min(xs), min(ys), max(xs), max(ys))


def overlap(a, b, pad=0.0) -> bool:
    return a[0] < b[2] + pad and b[0] < a[2] + pad and a[1] < b[3] + pad and b[1] < a[3] + pad


def fit(text: str, width: float, size: float, bold: bool = False) -> str:
    """``text``, cut with "…" to at most ``width`` px."""
    text = str(text)
    if text_width(text, size, bold) <= width:
        return text
    lo, hi = 0, len(text)
    while lo < hi:                      # the longest prefix that fits with its ellipsis
        mid = (lo + hi + 1) // 2
        if text_width(text[:mid] + "…", size, bold) <= width:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + "…" if lo else ("…" if text_width("…", size, bold) <= width else "")


def fit_middle(text: str, width: float, size: float) -> str:
    """``text`` with its middle cut to "…" to fit ``width`` px: both ends of a feature name (its words and its
    @field) stay readable."""
    text = str(text)
    if text_width(text, size) <= width:
        return text
    keep = len(text)
    while keep > 1:
        keep -= 1
        head, tail = text[:(keep + 1) // 2], text[len(text) - keep // 2:]
        if text_width(head + "…" + tail, size) <= width:
            return head + "…" + tail
    return fit(text, width, size)


def wrap(text: str, width: float, size: float, lines: int = 2) -> list[str]:
    """``text`` in at most ``lines`` lines of ``width`` px, broken after spaces, _, - or /; the last cut with …."""
    text = str(text)
    if text_width(text, size) <= width or lines <= 1:
        return [fit(text, width, size)]
    cut = 0
    for i, ch in enumerate(text):
        if ch in " _-/." and text_width(text[:i + 1].rstrip(), size) <= width:
            cut = i + 1
    if not cut:
        return [fit(text, width, size)]
    return [text[:cut].rstrip()] + wrap(text[cut:].lstrip(), width, size, lines - 1)
