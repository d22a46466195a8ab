"""p_M(label | text) of every row (the confidence filter's scores; ``stage``'s docstring tells the method): from a
column, a saved classifier, or K-fold cross-fitting (the SGD n-gram model streaming the input, the others on the
whole input, their finished folds checkpointed), τ per label (given, or auto: the quantile that keeps a share of
each label's rows), a τ that would keep no rows or one label's refused, and the rows split by it against τ, each
dropped row with its reason."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.messages import Message, Refusal, Setting, Together
from refinery.methods.confidence.config import AUTO, ConfidenceConfig
from refinery.models.base import CLASSIFIERS
from refinery.pipeline.stage import set_column
from refinery.pipeline.stage_input import StageInput


def label_confidence(table: pa.Table, model=None, proba_column: str | None = None) -> np.ndarray:
    """p_M(label | text) per row: from a fitted classifier, or from a column holding that probability."""
    if (model is None) == (proba_column is None):
        raise TypeError("give exactly one of a model or a probability column")
    if proba_column is not None:
        if proba_column not in table.column_names:
            raise Refusal(f"no column {proba_column!r}; columns: {table.column_names}", code="missing-columns")
        return _probabilities(table, proba_column)
    from refinery.models.base import own_label_proba

    return own_label_proba(model, table)


def _probabilities(table: pa.Table, column: str) -> np.ndarray:
    """The probabilities of ``column``, numbers or their text (a CSV's), a missing value (null, NaN, empty text) as
    0; a value that is no number or outside [0, 1] is refused naming its row (an id) and the fix."""
    values = table[column]
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = pc.if_else(pc.equal(pc.utf8_trim_whitespace(values), ""), pa.scalar(None, values.type), values)
        try:
            values = values.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad = next(i for i, v in enumerate(values.to_pylist()) if v is not None and not _is_number(v))
            raise Refusal(Setting("proba_column", column), f": row {table['id'][bad].as_py()!r} holds "
                          f"{values[bad].as_py()!r}, not a number; give p_M(label | text) as a number in [0, 1]",
                          code="bad-input") \
                from None
    elif not (pa.types.is_floating(values.type) or pa.types.is_integer(values.type) or pa.types.is_null(values.type)):
        raise Refusal(Setting("proba_column", column), f" holds {values.type}, not numbers in [0, 1]", code="bad-input")
    p = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    p = np.where(np.isnan(p), 0.0, p)   # null and NaN: missing
    outside = np.flatnonzero((p < 0) | (p > 1))
    if len(outside):
        i = int(outside[0])
        raise Refusal(Setting("proba_column", column), f": row {table['id'][i].as_py()!r} holds {p[i]:g}, outside "
                      f"[0, 1] ({len(outside):,} of {len(p):,} rows); give p_M(label | text), a probability",
                      code="bad-input")
    return p


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def config_confidence(table: pa.Table, config: ConfidenceConfig, checkpoints=None) -> np.ndarray:
    """p_M(label | text) as ``config`` says, but by the streaming SGD model (``source_confidence``): a column, or a
    model's (``config_proba``)."""
    if config.proba_column is not None:
        return label_confidence(table, proba_column=config.proba_column)
    from refinery.models.base import label_proba

    return label_proba(*config_proba(table, config, checkpoints), table["label"].to_pylist())


def config_proba(table: pa.Table, config: ConfidenceConfig, checkpoints=None) -> tuple[np.ndarray, list]:
    """(p_M(l | x) of every row and label, the labels of its columns) by a saved classifier, or by K-fold
    cross-fitting fold by fold (its finished folds kept in ``checkpoints``, an ``io.checkpoints.Checkpoints``)."""
    from refinery.models.base import cross_fit_proba, load_classifier, make_classifier

    if config.model in CLASSIFIERS:
        return cross_fit_proba(lambda: make_classifier(config.model), table, config.folds, config.seed, checkpoints)
    model = load_classifier(config.model)
    refuse_unknown_labels(table, model.classes_, config.model)
    return model.predict_proba(table), list(model.classes_)


def refuse_unknown_labels(table: pa.Table, classes, model: str) -> None:
    """A saved classifier gives a label it was never trained on p = 0: every row of it would be dropped, whatever
    the model thinks of its text. Refused in one line naming the labels and the fix."""
    counts = pc.value_counts(table["label"]).to_pylist()
    unknown = sorted(((c["counts"], c["values"]) for c in counts if c["values"] not in set(classes)), reverse=True)
    if unknown:
        named = ", ".join(f"{label!r} ({n:,} rows)" for n, label in unknown[:3])
        label, be = ("labels", "are") if len(unknown) > 1 else ("label", "is")
        raise Refusal(Setting("model", model), f" was trained on the labels {', '.join(map(str, classes))}; the "
                      f"input's {label} {named} {be} none of them, so its rows would all score 0 and be dropped: "
                      "give a model trained on this corpus's labels, or read the input with the preset or ",
                      Setting("map"), " whose labels the model knows", code="model")


def split_by_confidence(table: pa.Table, conf: np.ndarray, tau: float):
    """(kept rows, rejected rows with ``reason``): kept iff p_M(label | text) > τ; both get ``confidence``."""
    keep = conf > tau
    scored = set_column(table, "confidence", pa.array(conf))
    rejected = scored.filter(pa.array(~keep))
    return scored.filter(pa.array(keep)), set_column(rejected, "reason", pa.array(
        [_reason(c, tau) for c in conf[~keep]], pa.string()))


def _reason(confidence: float, tau: float) -> str:
    return f"p_M(label | text) = {confidence:.3f} <= tau {tau_text(tau)}"


def tau_text(tau: float) -> str:
    """τ as the reasons, the headline and the refusal print it (4 significant digits: 0.95, 0.3417)."""
    return f"{tau:.4g}"


class Reasons:
    """Each row's reason, written only for the rows a filter drops (the many kept rows need none): its p_M
    against its label's τ (``tau``, one per row)."""

    def __init__(self, confidence: np.ndarray, tau: np.ndarray):
        self.confidence, self.tau = confidence, tau

    def __getitem__(self, i: int) -> str:
        return _reason(self.confidence[i], self.tau[i])


@dataclass
class LabelScores:
    """p_M(label | text) of every row and its label (``label[i]`` indexes ``labels``), in the order the rows were
    read; ``proba``: p_M(l | x) of every label (column j: ``labels[j]``, float32), where label issues need it."""

    confidence: np.ndarray
    label: np.ndarray
    labels: tuple
    proba: np.ndarray | None = None


def source_confidence(source: StageInput, config: ConfidenceConfig, checkpoints=None) -> LabelScores:
    """p_M(label | text) and the label of every row of ``source``, in its batches' order (the SGD model reads them
    one at a time; the others see the whole input at once, and keep finished folds in ``checkpoints``), with p_M of
    every label where ``config.label_issues``."""
    if config.streams:
        from refinery.models.ngram import cross_fit_sgd

        batches = (b.rows for b in source.iter_batches() if b.rows.num_rows)
        proba, classes, y = cross_fit_sgd(batches, config.folds, config.seed, epochs=config.epochs,
                                          engine=source.engine)
        return LabelScores(proba[np.arange(len(y)), y], y, tuple(classes),
                           proba.astype(np.float32) if config.label_issues else None)
    table = source.read_columns(("id", "text_a", "text_b", "label", "split",
                                 *([config.proba_column] if config.proba_column else [])))
    labels, label = np.unique(table["label"].to_numpy(zero_copy_only=False), return_inverse=True)   # sorted, as
    labels = tuple(labels.tolist())                                                                   # SGD's
    if not config.label_issues:
        return LabelScores(config_confidence(table, config, checkpoints), label, labels)
    proba, classes = config_proba(table, config, checkpoints)
    column = {c: j for j, c in enumerate(classes)}   # a saved model's labels hold the input's (refused otherwise)
    proba = proba[:, [column[l] for l in labels]]
    return LabelScores(proba[np.arange(len(label)), label], label, labels, proba.astype(np.float32))


@dataclass
class Thresholds:
    """τ per label (``tau[j]`` for ``labels[j]``) and each label's rows: in the input, and kept
    (p_M(label | text) > τ_label); ``keep_share``: the share auto kept of each label, None for a τ given."""

    labels: tuple
    tau: np.ndarray
    rows: np.ndarray
    kept: np.ndarray
    keep_share: float | None = None

    def by_label(self) -> dict:
        """{label: {"tau", "rows", "kept"}}, as report.json holds it."""
        return {l: {"tau": float(t), "rows": int(n), "kept": int(k)}
                for l, t, n, k in zip(self.labels, self.tau, self.rows, self.kept)}

    def line(self) -> str:
        """τ in effect and the rows kept per label, in one line (the verb's and the pipeline's headline)."""
        if self.keep_share is None:
            return f"tau {tau_text(self.tau[0])} keeps " + _per_label(self.labels, self.kept, self.rows)
        return (f"tau auto, {self.keep_share:.0%} of each label: " + ", ".join(
            f"{l} > {tau_text(t)} keeps {k:,} of {n:,}" for l, t, n, k in zip(self.labels, self.tau, self.rows,
                                                                             self.kept) if n))


def _per_label(labels, kept, rows) -> str:
    return ", ".join(f"{l} {k:,} of {n:,}" for l, k, n in zip(labels, kept, rows) if n)


def share_tau(confidence: np.ndarray, share: float) -> float:
    """τ_l of auto for one label's p_M(l | x) (sorted ascending p_(1) ≤ … ≤ p_(n)): the largest τ that keeps
    at least ⌈s·n⌉ of them by p > τ, τ_l = max{p_(i) : p_(i) < p_(n − ⌈s·n⌉ + 1)} (0 where no score lies
    below): exactly the share for distinct scores, the whole tie where scores tie at the boundary."""
    p = np.sort(confidence)
    k = max(1, math.ceil(share * len(p) - 1e-9))
    below = p[:len(p) - k][p[:len(p) - k] < p[len(p) - k]]
    return float(below[-1]) if len(below) else 0.0


def thresholds(scores: LabelScores, tau: float | str, keep_share: float) -> Thresholds:
    """τ per label (``tau`` auto: ``share_tau`` of each label's scores with ``keep_share``; a number: that τ for
    all) and the rows each keeps."""
    n = len(scores.labels)
    if tau == AUTO:
        taus = np.array([share_tau(scores.confidence[scores.label == j], keep_share)
                         if (scores.label == j).any() else 0.0 for j in range(n)])
    else:
        taus = np.full(n, float(tau))
    return Thresholds(scores.labels, taus, *_rows_kept(scores, taus, n),
                      keep_share=keep_share if tau == AUTO else None)


def _rows_kept(scores: LabelScores, tau: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows per label, rows kept per label: p_M(label | text) > τ_label)."""
    keep = scores.confidence > tau[scores.label]
    return np.bincount(scores.label, minlength=n), np.bincount(scores.label[keep], minlength=n)


def usable(chosen: Thresholds) -> bool:
    """Whether the rows kept make a corpus the next audit can judge: rows of two labels or more (of the one, where
    the input holds one label only; an input without rows has nothing to keep)."""
    return int((chosen.kept > 0).sum()) >= min(int((chosen.rows > 0).sum()), 2)


def refuse_unusable(scores: LabelScores, chosen: Thresholds, config: ConfidenceConfig) -> None:
    """Refuse, before a row is written, a τ that keeps no row, or the rows of one label only (of an input with
    more): the next audit could judge neither. One line naming τ, the rows it keeps per label and the τ that work:
    auto (with the rows it keeps), one τ for every label that keeps at least ``keep_share`` of each (the lowest of
    auto's τ_l, where that holds) and the highest τ that keeps rows of every label (just under the lowest of the
    labels' highest p_M)."""
    if usable(chosen):
        return
    given = Message(Together((Setting("tau", AUTO), Setting("keep_share", config.keep_share)))) if config.auto else \
        _tau(tau_text(config.tau))
    what = "no row" if not chosen.kept.sum() else "the rows of one label only"
    said = [Message(given, f" would keep {what} ({_per_label(chosen.labels, chosen.kept, chosen.rows)}), which the "
                    "next audit cannot judge; nothing was written")]
    present = np.flatnonzero(chosen.rows > 0)
    highest = {j: scores.confidence[scores.label == j].max() for j in present}
    never = [chosen.labels[j] for j, p in highest.items() if p <= 0]
    if never:
        said.append(Message(f"no τ keeps a row of {', '.join(map(str, never))}: p_M(label | text) is 0 on all its "
                            "rows; check the model or ", Setting("proba_column")))
        raise Refusal(Message.joined(said, "; "), code="label-emptied")
    n, share = len(chosen.labels), config.keep_share
    auto = None if config.auto else thresholds(scores, AUTO, share)
    if auto is not None and usable(auto):
        said.append(Message(Setting("tau", AUTO), " (τ per label, ", Setting("keep_share", share), ") keeps "
                            + ", ".join(f"{l} {k:,}" for l, k, r in zip(auto.labels, auto.kept, auto.rows) if r)))
    if auto is not None:
        one = math.floor(auto.tau[present].min() * 100) / 100
        if (_rows_kept(scores, np.full(n, one), n)[1] >= share * chosen.rows).all():
            said.append(Message(_tau(f"{one:.2f}"), f" keeps at least {share:.0%} of every label"))
    top = math.floor(min(highest.values()) * 100) / 100
    top = top - 0.01 if top >= min(highest.values()) else top
    said.append(Message(_tau(f"{top:.2f}"), " is the highest τ that keeps rows of every label"))
    raise Refusal(Message.joined(said, "; "), code="label-emptied")


def _tau(digits: str) -> Setting:
    """τ as a refusal gives it, with the digits it prints (0.90, 0.3417): shown bare in every front door's terms."""
    return Setting("tau", digits, placeholder=True)


def confidence_filter(table: pa.Table, tau: float = 0.95, model=None, proba_column: str | None = None):
    """(kept rows, rejected rows with ``reason``) by a fitted model or a probability column."""
    return split_by_confidence(table, label_confidence(table, model, proba_column), tau)
