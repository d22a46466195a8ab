"""A refining stage's verdict: did its output lose the shortcuts its input had, and did it make none?

A stage's input and output are audited with the same features, the same prior rule and the same
``min_count`` (two ``ZStats``; weighted counts where rows carry weights), and compared feature by
feature on the z-statistic of Gardner et al. 2021 (their §3; METHODS §1):

    p̂(l|x) = count(x, l) / n(x),     z*(x, l) = (p̂(l|x) − p0) / sqrt(p0 (1 − p0) / n(x)),

against the significance threshold t = Φ⁻¹(1 − α/m), the one-sided normal quantile Bonferroni-corrected
for the m (feature, label) tests of that side's audit (the curve p0 + t·sqrt(p0(1 − p0)/n) Gardner et al.
draw). Each side is exactly the audit ``refinery audit`` prints for that corpus with its defaults: its own p0 (the
prior rule decided once, on the input, applied to that side's label shares) and its own t; a feature is
significant on a side when its z* there is over that side's t. So the verdict is two audits compared, and the
audit a user runs next on the output agrees with it. The ``null`` feature (in every row) is the label prior, never
a bias, and is left out; so are the cells over t by the prior's drift alone (below). Weighted rows: pass a
``ZStats`` whose counts are sums of weights (``count(x, l) = Σ w`` over the rows of x with label l, n(x) = Σ w),
as ``stats.from_matrix`` builds from a float matrix; z* is then computed on the weighted n and counts.

The verdict reports
- each label's max z* before → after (and the feature that holds it), against t (before → after);
- the features still over t after the stage (``remaining``);
- every feature that *worsened*: crossed t (not significant before, significant after, including features
  too rare to be tested before) or, already significant, rose by at least ``margin``; a rise under
  ``JITTER`` (0.5) is sampling jitter, not a crossing, and a label's max z* counts as risen past it;
- each feature's effect beside its z*: δ(x, l) = p̂(l|x) − p0(l), in points. z* is δ in units of its standard
  error sqrt(p0 (1 − p0) / n), so a rise of ``margin`` in z* is δ moving by that many standard errors: beyond
  its sampling interval. A standard error shrinks with √n (a hundredth of a point at n = 10⁶), so a rise or a
  crossing counts only where it is material too: δ rose by at least ``MIN_EFFECT_RISE`` (one point), or z*
  grew by at least ``MIN_Z_GROWTH`` (a tenth: the same δ carried by a fifth more rows, as copies add);
  smaller ones are listed with the jitter. On corpora of thousands of rows a rise of one standard error is
  more than a point, or a tenth of z*, so this changes nothing there. Lists are short (``LISTED``), ranked by z* after, each with its δ;
- how many significant features of the input are no longer significant (``fixed``);
- the rows of each label before → after (the ``null`` feature's counts, sums of weights for weighted rows), the
  share of them kept and its share of the corpus before → after; a label kept at under half the other labels'
  rate is lost (``core.label_rows``: it lost rows and r_l / b_l < ½ · Σ_{k≠l} r_k / Σ_{k≠l} b_k, or none kept);
- the cells over the threshold by the label prior's drift alone (``core.prior_drift``: p̂(l|x) within sampling
  error of the label's share on that side, e.g. a full stop in every row under a uniform prior once the shares
  moved): not shortcuts, neither significant nor ranked on either side, as in the audit; listed
  (``drifted``) with a note that the label shares changed.

A stage states its promise: ``under_threshold=True`` (a filter: every label's max z* ends under t) or
``False`` (it must only make nothing worse: no label's max z* above the input's while over t, no feature
worsened); either way no label is lost. ``ok`` is True when the promise held. Its rendering: ``Verdict.line`` (one console line when
ok), ``Verdict.lines`` (the console summary: the line, then the warning with the features and the remedy),
``Verdict.to_dict`` (report.json), and ``refinery.report.verdict.section`` (the HTML section).

Usage::

    from refinery.core.verdict import judge
    v = judge(input_stats, output_stats, stage="upsample", under_threshold=False,
              remedy_remaining="…", remedy_worsened="lower --max-copies (now 5) …")
    print(*v.lines(), sep="\\n"); report["verdict"] = v.to_dict()

The cost follows the features over the threshold, not the vocabulary: both sides' z* are computed once
(vectorised), and only the significant cells are matched by name.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import NULL_FEATURE
from refinery.core.label_rows import LABEL_KEPT, LabelRows, count, lost_labels, of_audits, rest_kept
from refinery.core.prior_drift import prior_drift
from refinery.core.records import VerdictSummary
from refinery.core.stats import ZStats
from refinery.messages import Command, Message

LOST_LABEL_REMEDY = Message("add rows of the label rather than filter them away (", Command("upsample"), ", ",
                            Command("generate"), "), or filter less")
MARGIN = 1.0        # a significant feature whose z* rose by at least this much has worsened
MIN_EFFECT_RISE = 0.01   # ... and whose effect p̂ − p0 rose by at least one point (z* grows with √n),
MIN_Z_GROWTH = 0.1       # or whose z* grew by at least a tenth (the same effect over more rows: n × 1.21)
LISTED = 10         # features listed per label (remaining) and in all (worsened, fixed); the totals are kept
JITTER = 0.5        # rises smaller than this are sampling jitter: one row more or less moves z* of a feature
                    # in n ≈ 20 rows by about 1 / sqrt(n p0 (1 − p0)) ≈ 0.45


@dataclass(frozen=True)
class FeatureChange:
    """One (feature, label) cell before and after: z* (None: n < min_count on that side), n (None: under min_count,
    in an audit that keeps only the features it tests), p̂(l|x) after, and the effect δ = p̂(l|x) − p0(l) on each
    side (None: untested)."""

    feature: str
    label: str
    z_before: float | None
    z_after: float | None
    n_before: float | None
    n_after: float | None
    p_after: float | None = None
    effect_before: float | None = None
    effect_after: float | None = None

    @property
    def effect_rise(self) -> float:
        """δ after − δ before (infinite where the feature was untested before)."""
        if self.effect_before is None or self.effect_after is None:
            return np.inf
        return self.effect_after - self.effect_before

    def text(self) -> str:
        """``not@hypothesis`` (contradiction) z* 3.10 → 6.20, δ +4.1 → +9.8 points, n 40 → 120."""
        def z(v):
            return "untested" if v is None else f"{v:.2f}"
        def n(v):
            return "under min_count" if v is None else count(v)
        return (f"{self.feature} ({self.label}) z* {z(self.z_before)} → {z(self.z_after)}, "
                f"δ {points(self.effect_before)} → {points(self.effect_after)}, n {n(self.n_before)} → {n(self.n_after)}")


@dataclass(frozen=True)
class LabelMax:
    """A label's largest z* before and after (exact: a value at the threshold is not over it), and the features
    that hold them (None: no feature tested)."""

    before: float | None
    after: float | None
    feature_before: str | None = None
    feature_after: str | None = None


@dataclass
class Verdict:
    """What a stage did to its corpus's shortcuts; see the module's docstring for each field."""

    stage: str
    threshold: float          # the output's audit's t
    margin: float
    under_threshold: bool
    max_z: dict[str, LabelMax]
    remaining: dict[str, list[FeatureChange]]       # per label, by z* after, at most LISTED
    remaining_total: dict[str, int]
    worsened: list[FeatureChange]                   # by z* after, at most LISTED
    worsened_total: int
    fixed: list[FeatureChange]                      # by z* before, at most LISTED
    fixed_total: int
    significant_before: int
    remedy_remaining: str = ""
    remedy_worsened: str = ""
    prior: str = ""
    notes: list[str] = field(default_factory=list)
    jittered: list[FeatureChange] = field(default_factory=list)   # crossed t by less than JITTER, or by less than
    #                                  MIN_EFFECT_RISE in δ: said, not worse (at most LISTED, by z* after)
    jittered_total: int = 0
    label_rows: dict[str, LabelRows] = field(default_factory=dict)   # empty: the audits hold no ``null`` feature
    remedy_labels: str = ""
    threshold_before: float | None = None   # the input's audit's t (None: the same as ``threshold``)
    drifted: list[FeatureChange] = field(default_factory=list)   # over t after by the label prior's drift alone
    #                                  (``core.prior_drift``): the shares' change, not shortcuts (at most LISTED)
    drifted_total: int = 0

    @property
    def lost(self) -> list[str]:
        """Labels that lost rows and kept under ``LABEL_KEPT`` of the rate the other labels kept, or none."""
        return lost_labels(self.label_rows)

    @property
    def risen(self) -> list[str]:
        """Labels whose max z* is over the threshold and above the input's by more than ``JITTER``."""
        return [l for l, m in self.max_z.items() if m.after is not None and m.after > self.threshold
                and (m.before is None or m.after > m.before + JITTER)]

    @property
    def over(self) -> list[str]:
        """Labels whose max z* ends over the threshold."""
        return [l for l, m in self.max_z.items() if m.after is not None and m.after > self.threshold]

    @property
    def ok(self) -> bool:
        if self.worsened_total or self.risen or self.lost:
            return False
        return not (self.under_threshold and self.over)

    def weakened_nothing(self) -> bool:
        """Whether no shortcut was weakened where the input had some: no significant feature of the input stopped
        being one and no label's max z* fell by more than ``JITTER``."""
        fell = any(m.before is not None and m.after is not None and m.after < m.before - JITTER
                   for m in self.max_z.values())
        return self.significant_before > 0 and not self.fixed_total and not fell

    def _thresholds(self) -> str:
        """The two audits' thresholds, ``4.65 → 4.23`` (one where they agree to the hundredth)."""
        before = self.threshold if self.threshold_before is None else self.threshold_before
        return f"{self.threshold:.2f}" if f"{before:.2f}" == f"{self.threshold:.2f}" else \
            f"{before:.2f} → {self.threshold:.2f}"

    def _maxima(self) -> str:
        return ", ".join(f"{l} {_z(m.before)} → {_z(m.after)}" for l, m in self.max_z.items())

    def line(self) -> str:
        """One line: the verdict and each label's max z* before → after against the threshold."""
        head = f"verdict {'ok' if self.ok else 'WARNING'}: max z* {self._maxima()} (threshold {self._thresholds()})"
        if self.ok:
            done = ("every label under the threshold" if not self.over else
                    f"nothing worse, not debiased: {sum(self.remaining_total.values()):,} feature(s) still over the "
                    f"threshold, no label's max z* rose by ≥ {JITTER:g}")
            crossed = ("no feature crossed it" if not self.jittered_total else
                       f"no feature crossed it by ≥ {JITTER:g} in z*, and {100 * MIN_EFFECT_RISE:g} point in δ or a tenth of z* "
                       f"({self.jittered_total:,} by less, sampling jitter: "
                       + ", ".join(f"{c.feature} ({c.label}) {_z(c.z_before)} → {_z(c.z_after)}"
                                   for c in self.jittered[:3]) + (", …" if self.jittered_total > 3 else "") + ")")
            return f"{head}; {done}, {crossed}" + (
                f", {self.fixed_total:,} of {self.significant_before:,} significant features no longer are"
                if self.significant_before else "")
        return head

    def warnings(self) -> list[str]:
        """What went wrong, one finding a line with the features named, then the remedy (empty when ok)."""
        if self.ok:
            return []
        out = []
        if self.worsened_total:
            out.append(f"{self.worsened_total:,} feature(s) crossed the threshold or rose by ≥ {self.margin:g} in z* "
                       f"(and {100 * MIN_EFFECT_RISE:g} point in δ or a tenth of z*): "
                       + "; ".join(c.text() for c in self.worsened[:5])
                       + (f"; +{self.worsened_total - 5:,} more" if self.worsened_total > 5 else ""))
        for label in self.lost:
            rows, rest = self.label_rows[label], rest_kept(self.label_rows, label)
            out.append(f"{rows.text(label)}: the label is lost, {100 * rows.kept:.0f}% of its rows kept where the "
                       f"other labels kept {100 * rest:.0f}% of theirs (under {LABEL_KEPT:.0%} of their rate): the stage "
                       "removed the label with its shortcuts")
        for label in self.risen if not self.under_threshold else self.over:
            feats = self.remaining.get(label, [])
            total = self.remaining_total.get(label, 0)
            out.append(f"{label}: max z* {_z(self.max_z[label].after)} over the threshold, "
                       f"{total:,} feature(s) over it: " + ", ".join(f"{c.feature} {_z(c.z_after)} (δ {points(c.effect_after)})"
                                                             for c in feats[:5])
                       + (f", +{total - 5:,} more" if total > 5 else ""))
        remedy = str(self.remedy_worsened) if self.worsened_total or self.risen else ""
        if self.under_threshold and self.over and self.remedy_remaining and str(self.remedy_remaining) != remedy:
            remedy = _then(remedy, self.remedy_remaining)
        if self.lost:
            remedy = _then(remedy, self.remedy_labels or LOST_LABEL_REMEDY)
        if remedy:
            out.append(f"remedy: {remedy}")
        return out

    def labels_line(self) -> str:
        """Each label's rows before → after, the share of them kept and its share of the corpus before → after
        (empty where the audits hold no ``null`` feature)."""
        return "; ".join(r.text(l) for l, r in self.label_rows.items())

    def lines(self) -> list[str]:
        """The console summary: ``line()``, the labels' rows, then the warnings, indented."""
        labels = [f"  labels: {self.labels_line()}"] if self.label_rows else []
        return [self.line(), *labels, *(f"  {w}" for w in self.warnings()), *(f"  note: {n}" for n in self.notes)]

    def summary(self) -> VerdictSummary:
        """What readers of report.json show: ok, the line, the labels' rows and the warnings."""
        return VerdictSummary(self.ok, self.line(), tuple(self.warnings()), self.labels_line())

    def to_dict(self) -> dict:
        """report.json's ``verdict``: exact values, the lists and their totals."""
        return {"stage": self.stage, **self.summary().to_json(),
                "threshold": round(self.threshold, 4), "margin": self.margin, "prior": self.prior,
                "threshold_before": round(self.threshold if self.threshold_before is None else self.threshold_before,
                                          4),
                "promise": "every label's max z* under the threshold" if self.under_threshold
                else "no label's max z* above the input's, no feature crossing the threshold",
                "max_z": {l: _rounded(asdict(m)) for l, m in self.max_z.items()},
                "labels_over_threshold": self.over, "labels_risen": self.risen, "labels_lost": self.lost,
                "label_rows": {l: asdict(r) for l, r in self.label_rows.items()},
                "remaining": {l: [asdict(c) for c in cs] for l, cs in self.remaining.items()},
                "remaining_total": self.remaining_total,
                "worsened": [asdict(c) for c in self.worsened], "worsened_total": self.worsened_total,
                "fixed": [asdict(c) for c in self.fixed], "fixed_total": self.fixed_total,
                "significant_before": self.significant_before, "jittered": [asdict(c) for c in self.jittered],
                "jittered_total": self.jittered_total,
                "drifted": [asdict(c) for c in self.drifted], "drifted_total": self.drifted_total,
                "remedy": self.warnings()[-1][len("remedy: "):] if self.warnings()
                and self.warnings()[-1].startswith("remedy: ") else None,
                "notes": self.notes}


def _then(remedy: str, more) -> str:
    """Two remedies in one line, one clause after the other."""
    more = str(more).strip()
    return f"{remedy.rstrip().rstrip('.')}; {more}" if remedy.strip() else more


def _z(v) -> str:
    return "—" if v is None else f"{v:.2f}"


def points(effect: float | None) -> str:
    """An effect p̂ − p0 in points (+4.1 points), or ``untested``."""
    return "untested" if effect is None else f"{100 * effect:+.1f} points"


def _rounded(values: dict) -> dict:
    """``values`` with its floats to 4 decimals (report.json; the comparisons use the exact values)."""
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


class _Side:
    """One audit's tested cells (n ≥ min_count, ``null`` left out): names, n, p̂, z*, which cells are over the
    side's threshold by the label prior's drift alone (``drift``) and which are significant (``over``: a shortcut),
    and a name → row index."""

    def __init__(self, stats: ZStats, labels: list, threshold: float):
        rows, p, z = stats.eligible()
        drift = prior_drift(stats, p, z, threshold)
        names = stats.features.take(pa.array(rows, pa.int64()))
        ranked = pc.not_equal(names, NULL_FEATURE).to_numpy(zero_copy_only=False) if len(rows) else \
            np.zeros(0, bool)
        order = [stats.labels.index(l) for l in labels]
        self.names = names.filter(pa.array(ranked))
        self.n = stats.n[rows][ranked]
        self.p = p[ranked][:, order]
        self.z = z[ranked][:, order]
        self.drift = drift[ranked][:, order]
        self.over = (self.z > threshold) & ~self.drift
        self.p0 = stats.p0[order]
        self._features, self._n = stats.features, stats.n
        self._untested = stats.effective_n < stats.min_count   # features it holds but does not test

    def counts(self, names: pa.Array, rows: np.ndarray) -> np.ndarray:
        """n of each of ``names`` (its row here, ``rows``, −1 where untested): an untested feature's among all the
        audit's features; where it is not among them, 0 if the audit holds features under min_count (by their
        effective size, for weighted rows: it holds every one), else NaN (it kept only those it tests: the
        feature's n is under min_count, not known)."""
        n = (self.n[np.maximum(rows, 0)] if len(self.n) else np.zeros(len(rows))).astype(float)
        untested = np.flatnonzero(rows < 0)
        if len(untested):
            at = pc.fill_null(pc.index_in(names.take(pa.array(untested)), value_set=self._features), -1)
            at = at.to_numpy(zero_copy_only=False)
            absent = 0.0 if self._untested.any() else np.nan
            n[untested] = np.where(at >= 0, self._n[np.maximum(at, 0)] if len(self._n) else 0, absent)
        return n

    def lookup(self, names: pa.Array) -> np.ndarray:
        """Row of each of ``names`` here, −1 where it is not tested."""
        return pc.fill_null(pc.index_in(names, value_set=self.names), -1).to_numpy(zero_copy_only=False)

    def significant_at(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Whether the cells at (``rows``, ``columns``) are significant here (False where the row is −1: untested)."""
        if not len(self.over):
            return np.zeros(len(rows), bool)
        return (rows >= 0) & self.over[np.maximum(rows, 0), columns]


def judge(before: ZStats, after: ZStats, *, stage: str, under_threshold: bool = True,
          threshold: float | None = None, margin: float = MARGIN, remedy_remaining: str = "",
          remedy_worsened: str = "", prior: str = "", listed: int = LISTED, remedy_labels: str = "") -> Verdict:
    """The verdict on a stage whose input audits as ``before`` and whose output audits as ``after``.

    Both must be audits of the same features with the same prior rule and ``min_count`` (z* of Gardner et
    al. 2021 per (feature, label); ``after`` may carry weighted counts), each with its own p0 and threshold
    (Φ⁻¹(1 − α/m) for its m tests): significant before is over ``before.threshold``, after over ``threshold``,
    which defaults to ``after.threshold``, either side leaving out the cells over it by the label prior's drift
    alone (``core.prior_drift``). ``under_threshold``: the stage promised that
    every label's max z* ends under the threshold (a filter); else only that nothing got worse.
    ``remedy_remaining`` / ``remedy_worsened``: what the user should do, naming the option that applies,
    when features remain over the threshold / when something got worse; ``remedy_labels``, when a label is lost.
    """
    labels = list(before.labels)
    if sorted(labels) != sorted(after.labels):
        raise RuntimeError(f"the audits' labels differ: {before.labels} before, {after.labels} after")
    t = after.threshold if threshold is None else float(threshold)
    t_before = before.threshold
    b, a = _Side(before, labels, t_before), _Side(after, labels, t)

    max_z = {label: _label_max(b, a, j) for j, label in enumerate(labels)}

    # cells significant after: remaining; of those, the ones not significant before (or rose): worsened
    changes = _after(b, a, *np.nonzero(a.over), labels)
    remaining = {l: [] for l in labels}
    remaining_total = {l: 0 for l in labels}
    worsened: list[FeatureChange] = []
    jittered: list[FeatureChange] = []
    for c, was in changes:
        remaining_total[c.label] += 1
        if len(remaining[c.label]) < listed:
            remaining[c.label].append(c)
        rise = np.inf if c.z_before is None else c.z_after - c.z_before
        material = c.effect_rise >= MIN_EFFECT_RISE or c.z_before is None or \
            c.z_after >= c.z_before + MIN_Z_GROWTH * abs(c.z_before)
        if material and (rise >= margin or (not was and rise >= JITTER)):
            worsened.append(c)
        elif not was:
            jittered.append(c)
    drifted = [c for c, _ in _after(b, a, *np.nonzero(a.drift), labels)]

    # cells significant before and not after (untested after counts as not significant): fixed
    rb, jb = np.nonzero(b.over)
    ra_of = a.lookup(b.names.take(pa.array(rb, pa.int64()))) if len(rb) else np.empty(0, np.int64)
    z_after = _z_at(a, ra_of, jb, -np.inf)
    gone = ~a.significant_at(ra_of, jb)
    n_after = a.counts(b.names.take(pa.array(rb, pa.int64())), ra_of)
    effect_after = _effect_at(a, ra_of, jb)
    fixed = [FeatureChange(b.names[int(r)].as_py(), labels[j], round(float(b.z[r, j]), 4),
                           None if ro < 0 else round(float(za), 4), float(b.n[r]), None if np.isnan(na) else float(na),
                           None if ro < 0 else round(float(a.p[ro, j]), 4), round(float(b.p[r, j] - b.p0[j]), 6),
                           None if ro < 0 else round(float(ea), 6))
             for r, j, ro, za, na, ea in itertools.islice(_by(-b.z[rb[gone], jb[gone]], _named(b, rb[gone]), rb[gone],
                                                              jb[gone], ra_of[gone], z_after[gone], n_after[gone],
                                                              effect_after[gone]), listed)]   # only those listed
    rows = of_audits(before, after, labels)
    return Verdict(stage=stage, threshold=t, margin=margin, under_threshold=under_threshold, max_z=max_z,
                   remaining=remaining, remaining_total=remaining_total, worsened=worsened[:listed],
                   worsened_total=len(worsened), fixed=fixed, fixed_total=int(gone.sum()),
                   significant_before=len(rb), remedy_remaining=remedy_remaining, remedy_worsened=remedy_worsened,
                   prior=prior, jittered=jittered[:listed], jittered_total=len(jittered),
                   label_rows=rows, remedy_labels=remedy_labels, threshold_before=t_before,
                   drifted=drifted[:listed], drifted_total=len(drifted),
                   notes=[_drift_note(drifted, rows, dict(zip(labels, a.p0)))] if drifted else [])


def _after(b: _Side, a: _Side, ra: np.ndarray, ja: np.ndarray, labels: list) -> list[tuple[FeatureChange, bool]]:
    """The cells of ``a`` at (``ra``, ``ja``) before → after, by z* after (ties by name), each with whether it was
    significant before."""
    rb_of = b.lookup(a.names.take(pa.array(ra, pa.int64()))) if len(ra) else np.empty(0, np.int64)
    z_before = _z_at(b, rb_of, ja, np.nan)
    n_before = b.counts(a.names.take(pa.array(ra, pa.int64())), rb_of)
    effect_before = _effect_at(b, rb_of, ja)
    was = b.significant_at(rb_of, ja)
    return [(FeatureChange(a.names[int(r)].as_py(), labels[j], None if rb < 0 else round(float(zb), 4),
                           round(float(a.z[r, j]), 4), None if np.isnan(nb) else float(nb), float(a.n[r]),
                           round(float(a.p[r, j]), 4), None if rb < 0 else round(float(eb), 6),
                           round(float(a.p[r, j] - a.p0[j]), 6)), bool(w))
            for r, j, rb, zb, nb, eb, w in _by(-a.z[ra, ja], _named(a, ra), ra, ja, rb_of, z_before, n_before,
                                               effect_before, was)]


def _drift_note(drifted: list[FeatureChange], rows: dict[str, LabelRows], p0: dict) -> str:
    """What the cells over the threshold by the label prior's drift are: the labels' shares against p0 (before →
    after where the stage moved them by a tenth of a point or more), and the commonest such features (by n)."""
    labels = list(dict.fromkeys(c.label for c in drifted))
    shown = {l: (f"{100 * rows[l].share_before:.1f}%", f"{100 * rows[l].share_after:.1f}%")
             for l in labels if l in rows}
    moved = any(before != after for before, after in shown.values())
    shares = "; ".join(f"{l} {' → '.join(dict.fromkeys(shown[l]))} of the rows, p0 {100 * p0[l]:.1f}%" if l in shown
                       else f"{l} p0 {100 * p0[l]:.1f}%" for l in labels)
    common = sorted(drifted, key=lambda c: (-c.n_after, c.feature, c.label))[:3]
    return (f"the label shares {'drifted from' if moved else 'differ from'} p0 ({shares}): {len(drifted):,} "
            "feature(s) over the threshold by that alone, each as often of the label as the label's share of the rows, "
            "within sampling error (α uncorrected), e.g. "
            + ", ".join(f"{c.feature} ({c.label}) z* {c.z_after:.2f} in {count(c.n_after)} rows" for c in common)
            + f": the label shares{' and their change' if moved else ''} (labels above), not shortcuts, left out "
            "of the counts as the null feature is")


def _z_at(side: _Side, rows: np.ndarray, columns: np.ndarray, untested: float) -> np.ndarray:
    """z* of ``side`` at (``rows``, ``columns``), ``untested`` where the row is −1 (a side may test no feature:
    a stage's output too small for any feature to reach ``min_count``)."""
    if not len(side.z):
        return np.full(len(rows), untested)
    return np.where(rows >= 0, side.z[np.maximum(rows, 0), columns], untested)


def _effect_at(side: _Side, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """δ = p̂ − p0 of ``side`` at (``rows``, ``columns``), NaN where the row is −1 (untested)."""
    if not len(side.p):
        return np.full(len(rows), np.nan)
    return np.where(rows >= 0, side.p[np.maximum(rows, 0), columns] - side.p0[columns], np.nan)


def _named(side: _Side, rows: np.ndarray) -> np.ndarray:
    """The names of ``side``'s features at ``rows``, as strings that sort."""
    return side.names.take(pa.array(rows, pa.int64())).to_numpy(zero_copy_only=False).astype(str)


def _by(key: np.ndarray, names: np.ndarray, *columns):
    """Rows of ``columns`` in the order of ``key`` (ascending), ties by feature name: the order does not depend on
    the order the features were counted in (in one pass or in units summed)."""
    order = np.lexsort((names, key))
    return zip(*(c[order] for c in columns))


def _label_max(b: _Side, a: _Side, j: int) -> LabelMax:
    """Label ``j``'s largest z* on each side among the tested cells, those over the threshold by the label prior's
    drift left out (None where none is left)."""
    def best(side: _Side):
        if not len(side.z) or side.drift[:, j].all():
            return None, None
        column = np.where(side.drift[:, j], -np.inf, side.z[:, j])
        r = int(np.argmax(column))
        top = np.flatnonzero(column == column[r])   # ties: the first by name
        r = int(top[np.argmin(_named(side, top))]) if len(top) > 1 else r
        return float(side.z[r, j]), side.names[r].as_py()
    zb, fb = best(b)
    za, fa = best(a)
    return LabelMax(zb, za, fb, fa)
