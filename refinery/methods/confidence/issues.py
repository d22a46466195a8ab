"""Label issues (``label_issues``): the rows whose given label is likely wrong, by confident learning (Northcutt,
Jiang and Chuang 2021, "Confident Learning: Estimating Uncertainty in Dataset Labels", JAIR 70) over the
cross-fitted p_M(l | x) of every label, as cleanlab implements it (``cleanlab.filter.find_label_issues``, its
default ``prune_by_noise_rate``): the confident joint C[i][j] counts the rows given label i whose p_M(j | x) reaches
label j's average self-confidence t_j = mean of p_M(j | x) over the rows given j (eq. 1 of the paper); calibrated
to the input's label counts, its off-diagonal cell (i, j) estimates how many rows given i belong to j, and that many
rows given i, those with the largest margin p_M(j | x) − p_M(i | x), are flagged (§3.2, "prune by noise rate").
At least one row of each label is kept, so a corpus of several labels keeps them all."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from refinery.methods.confidence.scoring import LabelScores

LABEL_ISSUE = "label issue"
EXAMPLES = 10   # flagged rows shown in the report: the widest margins p_M(suggested) − p_M(given)


@dataclass
class LabelIssues:
    """Confident learning's decision on every row of the input (in the order ``prepare`` read them):
    ``flagged[i]``: row i's label is likely wrong; ``suggested[i]`` (an index into ``labels``): the likeliest label
    other than the given one, argmax_{l ≠ y_i} p_M(l | x_i) (p_M's argmax wherever that is not the given label), and
    ``suggested_p[i]`` its p_M. ``rows``/``kept``: each label's rows and rows not flagged; ``pairs[i, j]``: the rows
    given ``labels[i]`` flagged with ``labels[j]`` suggested; ``examples``: a few flagged rows, each a dict."""

    labels: tuple
    flagged: np.ndarray
    suggested: np.ndarray
    suggested_p: np.ndarray
    rows: np.ndarray
    kept: np.ndarray
    pairs: np.ndarray
    examples: list

    def by_label(self) -> dict:
        """{label: {"rows", "flagged"}}, as report.json holds it."""
        return {l: {"rows": int(n), "flagged": int(n - k)} for l, n, k in zip(self.labels, self.rows, self.kept)}

    def by_pair(self) -> list:
        """[{"given", "suggested", "rows"}] of every pair with a flagged row, the most rows first (the confusion
        table of the report)."""
        given, suggested = np.nonzero(self.pairs)
        order = np.argsort(-self.pairs[given, suggested], kind="stable")
        return [{"given": self.labels[i], "suggested": self.labels[j], "rows": int(self.pairs[i, j])}
                for i, j in zip(given[order], suggested[order])]

    def line(self) -> str:
        """The rows flagged and their pairs, in one line (the verb's and the pipeline's headline)."""
        flagged = int(self.pairs.sum())
        pairs = ", ".join(f"{p['given']} → {p['suggested']} {p['rows']:,}" for p in self.by_pair())
        return f"label issues: {flagged:,} of {int(self.rows.sum()):,} rows flagged" + (f": {pairs}" if pairs else "")


def find_label_issues(scores: LabelScores) -> LabelIssues:
    """Each row flagged or not by cleanlab's ``find_label_issues`` (the module's docstring) on ``scores.proba``,
    each row renormalized over the input's labels (a saved model's other labels are no suggestion), with the
    likeliest other label of every row. ``examples`` are filled by ``pick_examples``."""
    from cleanlab.filter import find_label_issues as confident_learning

    proba, label = scores.proba, scores.label
    n, k = proba.shape
    normalized = proba / np.maximum(proba.sum(axis=1, keepdims=True), np.finfo(np.float32).tiny)
    flagged = confident_learning(label, normalized, filter_by="prune_by_noise_rate", n_jobs=1) if n else \
        np.zeros(0, bool)
    others = proba.copy()
    others[np.arange(n), label] = -1
    suggested = others.argmax(axis=1).astype(np.int16) if n else np.zeros(0, np.int16)
    suggested_p = proba[np.arange(n), suggested]
    rows = np.bincount(label, minlength=k)
    pairs = np.zeros((k, k), np.int64)
    np.add.at(pairs, (label[flagged], suggested[flagged]), 1)
    return LabelIssues(scores.labels, flagged, suggested, suggested_p, rows, rows - pairs.sum(axis=1), pairs, [])


def example_rows(issues: LabelIssues, confidence: np.ndarray) -> np.ndarray:
    """The numbers of the flagged rows the report shows: the ``EXAMPLES`` with the widest margin p_M(suggested) −
    p_M(given), in input order."""
    flagged = np.flatnonzero(issues.flagged)
    margin = issues.suggested_p[flagged] - confidence[flagged]
    return np.sort(flagged[np.argsort(-margin, kind="stable")[:EXAMPLES]])


def pick_examples(issues: LabelIssues, confidence: np.ndarray, batches) -> None:
    """Fill ``issues.examples`` with the rows of ``example_rows``, read from ``batches`` (the input's good rows in
    the order ``prepare`` read them), stopping once the last of them is read."""
    wanted = example_rows(issues, confidence)
    start = 0
    for batch in batches:
        if not len(wanted) or start > wanted[-1]:
            break
        inside = wanted[(wanted >= start) & (wanted < start + batch.num_rows)]
        for i, row in zip(inside, batch.take(pa.array(inside - start)).to_pylist()):
            issues.examples.append({
                "id": row["id"], "text_a": row["text_a"], **({"text_b": row["text_b"]} if "text_b" in row else {}),
                "given": row["label"], "p_M(given)": float(confidence[i]),
                "suggested": issues.labels[issues.suggested[i]], "p_M(suggested)": float(issues.suggested_p[i])})
        start += batch.num_rows


class IssueReasons:
    """Each flagged row's reason: its given and suggested labels with their p_M (``label``, ``confidence``: every
    input row's given label and its p_M; ``rows``: the batch's row numbers in the input)."""

    def __init__(self, issues: LabelIssues, label: np.ndarray, confidence: np.ndarray, rows: np.ndarray):
        self.issues, self.label, self.confidence, self.rows = issues, label, confidence, rows

    def __getitem__(self, i: int) -> str:
        r, labels = self.rows[i], self.issues.labels
        return (f"{LABEL_ISSUE}: {labels[self.label[r]]} → {labels[self.issues.suggested[r]]} (p_M "
                f"{self.confidence[r]:.3f} → {self.issues.suggested_p[r]:.3f})")


def issue_kind(reason: str) -> str:
    """A label issue's reason without the row's p_M: its (given → suggested) pair."""
    return reason.partition(" (")[0]
