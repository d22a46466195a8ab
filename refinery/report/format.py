"""Numbers for people: thousands separators, three significant digits, percentages with one decimal.

JSON reports keep the exact values; these strings are what HTML reports and terminals show.
"""
from __future__ import annotations

import math
import numbers

MISSING = "—"


MINUS = "−"   # U+2212: a figure's negative numbers (a hyphen is shorter than a plus)


def count(n) -> str:
    """12771 → "12,771" (a weighted count rounded)."""
    return f"{int(round(n)):,}"


def count_label(value: float) -> str:
    """10 → "10", 1000 → "1k", 10⁶ → "1M": tick labels of a log count axis."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def number(x, digits: int = 3, *, zeros: bool = False, minus: str = "-") -> str:
    """A float to ``digits`` significant digits without exponent where a person reads it easily:
    4.8979 → "4.9", 0.56038 → "0.56", 150.74 → "151", 12345.6 → "12,346", 3.2e-7 → "3.2e-07"; ``zeros`` keeps
    trailing zeros ("12.0"), ``minus`` is the sign of a negative number (``MINUS`` in figures)."""
    if x is None:
        return MISSING
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, numbers.Integral):
        return count(x).replace("-", minus)
    x = float(x)
    if not math.isfinite(x):
        return "∞" if x > 0 else ("−∞" if x < 0 else "NaN")
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude < -4:
        return f"{x:.{digits - 1}e}"   # the exponent's sign stays a hyphen
    if magnitude >= digits - 1:
        text = f"{round(x):,}"
    else:
        text = f"{x:.{digits - 1 - magnitude}f}"
        text = text.rstrip("0").rstrip(".") if "." in text and not zeros else text
    return text.replace("-", minus)


def z(x) -> str:
    """z* with two decimals: "16.48"; the Bonferroni threshold reads the same way."""
    return MISSING if x is None or not math.isfinite(float(x)) else f"{float(x):.2f}"


def percent(share, decimals: int = 1) -> str:
    """0.1234 → "12.3%"."""
    return MISSING if share is None else f"{100 * float(share):.{decimals}f}%"


def points(delta) -> str:
    """An accuracy difference in percentage points: 0.0123 → "+1.2 points"; a rounded zero unsigned."""
    return f"{100 * delta:+.1f} points" if round(100 * delta, 1) else "0.0 points"


def interval(ci) -> str:
    """A 95% interval of a difference in points: "-1.5 to +0.3 points"; an end that rounds to zero without being
    zero keeps its sign and two decimals ("-1.1 to -0.03 points"), so an interval that excludes 0 never reads as
    touching it."""
    def end(delta) -> str:
        shown = 100 * delta
        return f"{shown:+.2f}" if delta and not round(shown, 1) else points(delta).split()[0]

    return f"{end(ci[0])} to {end(ci[1])} points"


def seconds(s) -> str:
    """0.42 → "0.4 s", 95 → "1 min 35 s", 4000 → "1 h 7 min"."""
    s = float(s)
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def held(peak: int, budget: int | None) -> str:
    """A peak beside the run's memory budget, in the budget's binary units (``--memory-budget 4G`` is 4 GiB):
    "peak memory 3.2 GiB of a 4 GiB budget", "peak memory 400 MiB, over its 300 MiB budget"."""
    if not budget:
        return f"peak memory {binary_size(peak)}"
    return f"peak memory {binary_size(peak)}" + (f" of a {binary_size(budget)} budget" if peak <= budget else
                                                 f", over its {binary_size(budget)} budget")


def binary_size(nbytes) -> str:
    """1 << 30 → "1 GiB", 1.5e9 → "1.4 GiB", 3e8 → "286 MiB" (powers of 1,024)."""
    return _scaled(nbytes, 1024, ("B", "KiB", "MiB", "GiB", "TiB"))


def size(nbytes) -> str:
    """1.5e9 → "1.5 GB" (powers of 1,000)."""
    return _scaled(nbytes, 1000, ("B", "kB", "MB", "GB", "TB"))


def _scaled(nbytes, base: int, units: tuple) -> str:
    """``nbytes`` in the largest of ``units`` (each ``base`` times the one before) under which it is ≥ 1."""
    value = float(nbytes)
    for unit in units:
        if abs(value) < base or unit == units[-1]:
            return f"{value:.0f} {unit}" if unit == units[0] else f"{number(value)} {unit}"
        value /= base
    raise AssertionError("unreachable")


def value(v) -> str:
    """Any scalar for a table cell: counts with separators, floats to 3 significant digits, true/false,
    an unset option as "—", lists joined with commas."""
    if v is None:
        return MISSING
    if isinstance(v, (bool, numbers.Number)):
        return number(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) for x in v) if v else MISSING
    return str(v)


def significance(significant: int, listed: int, threshold: float) -> str:
    """One line on a top-k list: how many of its features are significant, or that none is a bias."""
    if not significant:
        return (f"No feature is significant: every z* is at most the threshold {z(threshold)} (Bonferroni). "
                "Nothing here is a bias; the largest z* are listed for reference.")
    return (f"{significant:,} of the {listed:,} features listed are significant (z* > {z(threshold)}, "
            "Bonferroni): these are the biases; the others are within what chance gives.")
