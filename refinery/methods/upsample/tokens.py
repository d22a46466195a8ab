"""AUDAC's tokens (arXiv 2401.13907, Algorithm 1's S; METHODS §1, §3): the input audit's word features ``w@field``
with the audit's z*, ranked; the band of n(s) whose tokens are corrected; the deficits D_l[s] and copies a token
needs; and why a significant token is left out (under or over the band, no row of a short label, over the cap)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.features import KEPT_WORDS, STOPWORD_LIST
from refinery.messages import Command, Message, Setting

def words(stats: zstats.ZStats, fields: list, drop_stopwords: bool = False) -> zstats.ZStats:
    """AUDAC's tokens (METHODS §1, §3): the audit's unigram features of words, ``w@field`` of the text ``fields``
    ((column, suffix) pairs: ``features.fields_of``), with the audit's counts, p0, min_count and threshold, so that
    a token's z*(s,l) = (p̂(l|s) − p0_l)/sqrt(p0_l(1 − p0_l)/n(s)) is the one ``refinery audit`` gives it. A
    punctuation mark is no word (the paper removes them); with ``drop_stopwords`` stopwords are left out too
    (negations and quantifiers are none: ``features.KEPT_WORDS``)."""
    names = stats.features
    keep = np.zeros(len(names), dtype=bool)
    for _, suffix in fields:
        word = pc.utf8_slice_codeunits(names, 0, -len(suffix) - 1)
        mask = pc.and_(pc.ends_with(names, f"@{suffix}"), pc.and_(
            pc.invert(pc.match_substring(word, " ")), pc.match_substring_regex(word, r"[\p{L}\p{N}]")))
        if drop_stopwords:
            mask = pc.and_(mask, pc.invert(pc.is_in(word, value_set=pa.array(STOPWORD_LIST, pa.string()))))
        keep |= mask.to_numpy(zero_copy_only=False)
    return _subset(stats, keep)


def only(stats: zstats.ZStats, tokens: list) -> zstats.ZStats:
    """``stats`` of just the features ``tokens``."""
    return _subset(stats, pc.is_in(stats.features, value_set=pa.array(tokens, pa.string())).to_numpy(
        zero_copy_only=False))


def _subset(stats: zstats.ZStats, keep: np.ndarray) -> zstats.ZStats:
    return replace(stats, features=stats.features.filter(pa.array(keep)), counts=stats.counts[keep], n=stats.n[keep])


def split_token(token: str, fields: list) -> tuple[str, str]:
    """(word, column) of a token ``w@field`` of the text ``fields`` ((column, suffix) pairs)."""
    for column, suffix in fields:
        if token.endswith(f"@{suffix}"):
            return token[: -len(suffix) - 1], column
    raise RuntimeError(f"{token!r} is no word feature of the fields {', '.join(s for _, s in fields)}")


def deficits(counts: dict, p0: dict) -> dict:
    """D_l = p0_l · max_l′(c_l′/p0_l′) − c_l per label l (rounded up; 0 for the token's own labels)."""
    top = max(counts.get(l, 0) / p for l, p in p0.items())
    return {l: max(0, math.ceil(p * top - counts.get(l, 0) - 1e-6)) for l, p in p0.items()}


def copies_needed(counts: dict, p0: dict) -> dict:
    """Per short label: the copies each of its rows would need for p̂(l|s) to reach p0_l (inf: it has none)."""
    return {l: (math.ceil(d / counts[l]) if counts.get(l, 0) else math.inf)
            for l, d in deficits(counts, p0).items() if d > 0}


def ranked_tokens(stats: zstats.ZStats, min_count: int) -> list[dict]:
    """Tokens with n(s) ≥ min_count by z*(s) = max_l z*(s,l), highest first (ties by token), each with its n, z*,
    label (the first of the largest z*) and counts per label."""
    rows, _, z = stats.eligible(min_count)
    best = z.argmax(axis=1) if len(rows) else np.zeros(0, np.int64)
    top = z[np.arange(len(rows)), best]
    names = stats.features.take(pa.array(rows, pa.int64()))
    order = pc.sort_indices(pa.table({"z": -top, "token": names}), [("z", "ascending"), ("token", "ascending")])
    names, labels = names.to_pylist(), stats.labels
    return [{"token": names[i], "n": int(stats.n[rows[i]]), "z": round(float(top[i]), 4), "label": labels[best[i]],
             "counts": dict(zip(labels, stats.counts[rows[i]].astype(np.int64).tolist()))}
            for i in order.to_numpy()]


@dataclass(frozen=True)
class TokenBand:
    """The n(s) the corrected tokens were taken from: [lo, hi], and whether it was widened from the configured band
    (which held no significant token) to every n ≥ min_count, for the tokens whose correction fits ``max_copies``."""

    lo: int
    hi: int
    widened: bool = False


def select_tokens(stats: zstats.ZStats, labels: list, config, rows: int, threshold: float, p0: dict
                  ) -> tuple[list, list, TokenBand]:
    """(S, uncorrectable, band): the top-k correctable tokens by z* within the count band whose z* passes the
    threshold; where the band holds none, the top-k significant tokens whose correction fits ``max_copies``
    whatever their n (the band then is n ≥ min_count, widened): a band in fractions of the rows misses a small
    corpus's shortcuts, which are in more rows than its upper end. uncorrectable: those some label never co-occurs
    with, passed over."""
    band = TokenBand(*config.band(rows))
    chosen, uncorrectable = _top_tokens(stats, labels, config, threshold, band)
    if chosen:
        return chosen, uncorrectable, band
    wide = TokenBand(config.min_count, rows, widened=True)
    fitting, _ = _top_tokens(stats, labels, config, threshold, wide, lambda e: max(
        copies_needed(e["counts"], p0).values(), default=0) <= config.max_copies)
    return (fitting, uncorrectable, wide) if fitting else (chosen, uncorrectable, band)


def _top_tokens(stats: zstats.ZStats, labels: list, config, threshold: float, band: TokenBand, fits=lambda e: True
                ) -> tuple[list, list]:
    """(the top-k correctable tokens by z* over ``threshold`` with n in ``band`` that ``fits``, the uncorrectable
    ones met on the way: some label never co-occurs with them)."""
    hi = band.hi
    chosen, uncorrectable = [], []
    for e in ranked_tokens(stats, band.lo):
        if len(chosen) == config.k or e["z"] <= threshold:
            break
        if e["n"] <= hi and fits(e):
            entry = {k: e[k] for k in ("token", "n", "z", "label", "counts")}
            (chosen if all(e["counts"].get(l, 0) > 0 for l in labels) else uncorrectable).append(entry)
    return chosen, uncorrectable


def left_out(every_token: zstats.ZStats, fields: list, chosen: list, config, rows: int, threshold: float,
             p0: dict, band: TokenBand) -> tuple[list, str | None]:
    """(tokens, band hint): the tokens S leaves out, stopwords included (``every_token``: ``words`` of the input's
    audit over the text ``fields``): the significant ones among the top k by z*, and every negation or quantifier
    in at least min_count rows, each with the reason and the copies per row its correction would need; and the
    ``--band`` that would take in those outside the ``band`` S was taken from whose correction fits
    ``max_copies`` (None if none)."""
    lo, hi = band.lo, band.hi
    taken = {c["token"] for c in chosen}
    ranked = ranked_tokens(every_token, config.min_count)
    significant = [e for e in ranked if e["z"] > threshold]
    shown = significant[: config.k] + [e for e in ranked if split_token(e["token"], fields)[0] in KEPT_WORDS and
                                       e not in significant[: config.k]]
    out, outside = [], []
    for e in shown:
        if e["token"] in taken:
            continue
        need = copies_needed(e["counts"], p0)
        most = max(need.values(), default=0)
        if e["z"] <= threshold:
            reason = f"z* under the threshold {threshold:.2f}: not a shortcut here, nothing to correct"
        elif config.remove_stopwords and split_token(e["token"], fields)[0] in STOPWORD_LIST:
            reason = Message("a stopword (kept with ", Setting("remove_stopwords", False), ")")
        elif math.isinf(most):
            reason = uncorrectable_reason(e["token"], [l for l, c in need.items() if math.isinf(c)])
        elif most > config.max_copies and band.widened:   # taken from every n: the copies left it out
            reason = over_cap_reason(e["token"], e["counts"], need, config.max_copies)
        elif not lo <= e["n"] <= hi:
            reason = f"n outside the band {lo:,}–{hi:,}"
            if most <= config.max_copies:
                outside.append(e["n"])
            else:
                reason = Message(reason, "; ", over_cap_reason(e["token"], e["counts"], need, config.max_copies))
        else:
            reason = Message(f"not among the top {config.k} in the band (a larger ", Setting("k"), " takes it in)")
        out.append({"token": e["token"], "n": e["n"], "z": e["z"], "label": e["label"], "counts": e["counts"],
                    "copies_needed": None if math.isinf(most) or e["z"] <= threshold else most, "reason": reason,
                    "uncorrectable": math.isinf(most) and e["z"] > threshold})
    if not outside:
        return out, None
    lower = _widened(config.band_min, min(outside), rows, lower=True)
    return out, f"{lower},{_widened(config.band_max, max(outside), rows, lower=False)}"


IBADR = Message("consider generation (", Command("ibadr"), ") for counter-examples")


def uncorrectable_reason(token: str, labels: list) -> str:
    return f"no {' or '.join(labels)} row contains `{token}`: copies cannot correct it; {IBADR}"


def over_cap_reason(token: str, counts: dict, need: dict, cap: int) -> Message:
    """'3 entailment rows contain `no`; correcting it would copy each 40 times (--max-copies 3)'."""
    short = [l for l, c in need.items() if c > cap]
    parts = [f"{counts.get(l, 0):,} {l} {'row contains' if counts.get(l, 0) == 1 else 'rows contain'} `{token}`"
             for l in short]
    most = max(need[l] for l in short)
    return Message(f"{' and '.join(parts)}; correcting it would copy each {most:,} times (", Setting("max_copies", cap),
                   f"); {IBADR}")


def _widened(bound: float, n: int, rows: int, lower: bool) -> str:
    """``bound`` moved out to reach n(s) = n, in its own unit: a count (> 1), or a fraction of the rows (4 decimals)."""
    reach = n if bound > 1 else (math.floor if lower else math.ceil)(n / rows * 1e4) / 1e4
    return f"{(min if lower else max)(bound, reach):g}"
