"""A comparison's figures: each corpus's accuracy on each evaluation set, its gain over the baseline, their
intervals and breakdowns, and what the summary warns and notes.

Uncertainty: with ``seeds`` > 1 each corpus is trained that many times (the transformer with that seed's
initialisation and order; the deterministic n-gram model on that seed's bootstrap replicate of its corpus) and
accuracies are reported as mean ± std. A refined corpus's gain over the baseline on an evaluation set is the mean
over rows of (its seed-averaged correctness − the baseline's), with a paired bootstrap 95% interval over the
evaluation rows.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from refinery.methods.compare.report import CompareReport
from refinery.methods.compare.training import Corpora, weights
from refinery.models.task_model import READS
from refinery.report import format as fmt

BREAKDOWN_LIMIT = 50  # a --by column with more distinct values is reported as too many
COLLAPSE = 0.10       # a label's accuracy falling by more than this against the baseline is a collapse
ONE_LABEL = 0.95      # a model that predicts one label for at least this share of a set's (or slice's) rows


def bootstrapintervals(values: np.ndarray, draws: int, seed: int = 0, chunk: int = 50) -> list[tuple[float, float]]:
    """95% percentile interval of the mean of each row of ``values`` (series × evaluation rows), the evaluation
    rows resampled with replacement, the same draws for every series (paired)."""
    values = np.atleast_2d(values)
    n = values.shape[1]
    if not n:
        return [(float("nan"), float("nan"))] * len(values)
    rng = np.random.default_rng(seed)
    means = np.concatenate([values[:, rng.integers(0, n, (min(chunk, draws - s), n))].mean(axis=2)
                            for s in range(0, draws, chunk)], axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5], axis=1)
    return [(float(a), float(b)) for a, b in zip(lo, hi)]


def paired_bootstrap(diff: np.ndarray, draws: int, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of ``diff`` over rows resampled with replacement."""
    return bootstrapintervals(diff, draws, seed)[0]


def gain(diff: np.ndarray, draws: int) -> dict:
    """A refined corpus's gain over the baseline from the per-row differences of correctness: its mean, the paired
    bootstrap 95% interval, and whether that interval excludes zero."""
    lo, hi = paired_bootstrap(diff, draws)
    return {"delta": round(float(diff.mean()), 4), "ci95": [round(lo, 4), round(hi, 4)],
            "significant": bool(lo > 0 or hi < 0)}


def breakdown(correct: np.ndarray, table: pa.Table, columns: list) -> dict | str:
    """Accuracy (mean over seeds and rows) per value combination of ``columns``."""
    keys = [np.asarray(table[c].to_pylist(), dtype=object) for c in columns]
    joined = np.array([" / ".join(map(str, k)) for k in zip(*keys)], dtype=object)
    values, inverse, counts = np.unique(joined, return_inverse=True, return_counts=True)
    if len(values) > BREAKDOWN_LIMIT:
        return f"{len(values):,} distinct values (more than {BREAKDOWN_LIMIT})"
    per_row = correct.mean(axis=0)
    sums = np.bincount(inverse, weights=per_row, minlength=len(values))
    return {str(v): {"accuracy": round(float(s / c), 4), "rows": int(c)} for v, s, c in zip(values, sums, counts)}


def several_labels(keys: pa.Array, gold: pa.ChunkedArray) -> dict:
    """Inputs that appear with more than one gold label: the rows that carry them, and the best accuracy any
    model can reach (a model gives one input one answer: per input, the share of its commonest label)."""
    t = pa.table({"key": keys, "gold": gold}).group_by(["key", "gold"]).aggregate([([], "count_all")])
    per_key = t.group_by("key").aggregate([("count_all", "sum"), ("count_all", "max"), ("gold", "count")])
    labels = per_key["gold_count"].to_numpy()
    rows, best = per_key["count_all_sum"].to_numpy(), per_key["count_all_max"].to_numpy()
    shared = labels > 1
    total = int(rows.sum())
    return {"rows": int(rows[shared].sum()), "inputs": int(shared.sum()),
            "best_possible_accuracy": round(float(best.sum() / max(total, 1)), 4),
            "separates_models": bool(rows[shared].sum() < total)}


def majority_baseline(labels: pa.ChunkedArray) -> dict:
    """The accuracy of always answering an evaluation set's most frequent label."""
    counts = labels.value_counts()
    best = int(np.argmax(counts.field("counts").to_numpy()))
    return {"label": counts.field("values")[best].as_py(),
            "accuracy": round(counts.field("counts")[best].as_py() / len(labels), 4)}


def summarize(data: Corpora, correct: dict, predicted: dict, slices: dict) -> CompareReport:
    """The report from ``predicted`` ({(corpus, set): seeds × rows labels}) and ``correct`` (the same, seeds × rows
    correctness): per evaluation set and corpus its accuracy (mean, std and each seed's), breakdowns, weighted
    accuracy, overlapping rows, contaminated rows and the accuracy on the others, 95% interval and gain over the
    baseline, the share of its commonest prediction; ``slices`` (``slices.bias_slices``); what was trained on and
    scored, and what the comparison warns and notes."""
    config, base = data.config, data.names[0]
    accuracy = _accuracies(data, correct)
    for (name, ev), labels in predicted.items():
        accuracy[ev][name]["one_label"] = one_label(labels)
    sets = _eval_sets(data)
    warnings = [w for e in data.evals if (w := e.scored_on_part(data.eval_tables[e.name].num_rows,
                                                                data.eval_rejects[e.name]))] \
        + label_collapses(accuracy, base)
    notes = label_notes(sets, data.train_labels) + reading_notes(sets, accuracy, data.reads) \
        + one_label_notes(accuracy)
    return CompareReport(
        config={k: (list(v) if isinstance(v, tuple) else v) for k, v in config.__dict__.items()}, baseline=base,
        training_labels=data.train_labels,
        train={n: {"rows": data.tables[n].num_rows, "rejected": data.rejects[n].num_rows,
                   "other_splits_left_out": data.other_splits[n],
                   "weighted": "weight" in data.tables[n].column_names} for n in data.names},
        eval=sets, accuracy=accuracy, reads=data.reads, bias_slices=slices, warnings=warnings, notes=notes)


def passed_on(report: CompareReport, name: str) -> tuple[int, int]:
    """(rows, input rejects) of the training corpus ``name``: the rows it passes on (the splits it did not train
    on too) and those its reading rejected."""
    trained = report.train[name]
    return trained["rows"] + trained["other_splits_left_out"], trained["rejected"]


def _eval_sets(data: Corpora) -> dict:
    """Each evaluation set as the report holds it: its rows and rejects, labels and label map, the training labels
    it lacks or merges, its majority class, the rows each training corpus leaks or contaminates, whether its pairs
    are read as one text, and the inputs it gives several gold labels."""
    return {e.name: {"rows": data.eval_tables[e.name].num_rows, "rejected": data.eval_rejects[e.name].num_rows,
                     "labels": data.eval_labels[e.name], "label_map": data.label_maps[e.name],
                     "training_labels_unscored": data.labels_unscored(e.name),
                     "labels_merged": data.labels_merged(e.name),
                     "majority": majority_baseline(data.eval_tables[e.name]["label"]),
                     "leaked_rows": data.leaks[e.name],
                     "contaminated": {n: {"rows": k.count, "share": round(k.count / len(k.rows), 4),
                                          "examples": k.examples}
                                      for n, k in data.contamination[e.name].items()},
                     "pairs_read_as_one_text": data.reads == "text_a" and data.eval_pairs[e.name],
                     "inputs_with_several_labels": several_labels(data.eval_keys[e.name],
                                                                  data.eval_tables[e.name]["label"])}
            for e in data.evals}


def _accuracies(data: Corpora, correct: dict) -> dict:
    """Each evaluation set's accuracies from ``correct`` ({(corpus, set): seeds × rows correctness}): {set:
    {corpus: its figures}} (``summarize``)."""
    config, names = data.config, data.names
    base = names[0]
    summary = {}
    for e in data.evals:
        t = data.eval_tables[e.name]
        columns = [["label"]] + ([["heuristic", "label"]] if "heuristic" in t.column_names else []) + \
            [[c] for c in config.by]
        w = weights(t)
        per = {}
        for n in names:
            c = correct[(n, e.name)]
            acc = c.mean(axis=1)
            entry = {"mean": round(float(acc.mean()), 4), "std": round(float(acc.std(ddof=1)), 4) if len(acc) > 1
                     else None, "seeds": [round(float(a), 4) for a in acc],
                     "breakdown": {" × ".join(cols): breakdown(c, t, cols) for cols in columns}}
            if w is not None:
                entry["weighted_accuracy"] = round(float((c.mean(axis=0) * w).sum() / w.sum()), 4)
            if data.leaks[e.name][n]:
                entry["overlap_rows"] = data.leaks[e.name][n]
            entry.update(clean_accuracy(c, data.contamination[e.name][n].rows))
            if n != base:
                entry["gain"] = gain(c.mean(axis=0) - correct[(base, e.name)].mean(axis=0), config.bootstrap)
            per[n] = entry
        own = bootstrapintervals(np.vstack([correct[(n, e.name)].mean(axis=0) for n in names]), config.bootstrap)
        for n, (lo, hi) in zip(names, own):
            per[n]["ci95"] = [round(lo, 4), round(hi, 4)]
        summary[e.name] = per
    return summary


def clean_accuracy(correct: np.ndarray, contaminated: np.ndarray) -> dict:
    """A corpus's contaminated rows C of an evaluation set (``contamination``), and, where some rows are
    contaminated and some clean, its accuracy on the clean ones,

        acc_clean = 1 / (S · |R ∖ C|) · Σ_s Σ_{i ∈ R ∖ C} correct[s, i]

    over its S seeds and the set's rows R: near the accuracy, the score holds without the leak."""
    out = {"contaminated_rows": int(contaminated.sum())}
    if 0 < out["contaminated_rows"] < len(contaminated):
        out["clean_accuracy"] = round(float(correct[:, ~contaminated].mean()), 4)
    return out


def one_label(predictions: np.ndarray) -> dict | None:
    """The label a model predicts for at least ``ONE_LABEL`` of ``predictions`` (its seeds × rows pooled), with that
    share; None where it predicts several. Its accuracy on those rows is then the share of that label among them,
    not a reading of the rows, and a gain or a gap between slices says nothing about a shortcut."""
    values = np.asarray(predictions, dtype=object).ravel()
    if not len(values):
        return None
    labels, counts = np.unique(values.astype(str), return_counts=True)
    top = int(np.argmax(counts))
    share = counts[top] / len(values)
    return {"label": str(labels[top]), "share": round(float(share), 4)} if share >= ONE_LABEL else None


def one_label_notes(accuracy: dict) -> list[str]:
    """A note for every (evaluation set, corpus) whose model predicts one label for (nearly) every row
    (``accuracy``: the report's)."""
    return [f"{ev}: {n}'s model predicts {e['one_label']['label']!r} for {e['one_label']['share']:.1%} of the rows: "
            f"its accuracy is that label's share of the set, not a reading of the pairs, and its slices mean nothing"
            for ev, per in accuracy.items() for n, e in per.items() if e.get("one_label")]


def label_collapses(accuracy: dict, base: str) -> list[str]:
    """A warning for every (evaluation set, refined corpus, gold label) whose accuracy (``accuracy``: the report's)
    fell by more than ``COLLAPSE`` against the baseline ``base``'s: the headline's mean over labels can hide one
    label's collapse."""
    out = []
    for ev, per in accuracy.items():
        by_label = {n: e["breakdown"]["label"] for n, e in per.items()}
        for n, cells in by_label.items():
            if n == base or isinstance(cells, str):
                continue
            for label, cell in cells.items():
                before = by_label[base][label]["accuracy"]
                if before - cell["accuracy"] > COLLAPSE:
                    out.append(f"{ev}: {n}'s accuracy on {label} fell from {before:.1%} to {cell['accuracy']:.1%} "
                               f"({fmt.points(cell['accuracy'] - before)}, {cell['rows']:,} rows) against {base}, "
                               f"while its accuracy overall changed by {fmt.points(per[n]['gain']['delta'])}")
    return out


def label_notes(sets: dict, training_labels: list) -> list[str]:
    """A note for every evaluation set (``sets``: the report's) whose labels are not the training labels one to
    one: the training labels it lacks (no row is scored against them and no prediction is one of them: the models
    answer among its labels), and the training labels predicted as another of its labels."""
    out = []
    for ev, info in sets.items():
        unscored = info["training_labels_unscored"]
        if unscored:
            out.append(f"{ev} has no {_listed(unscored)} rows (its labels: {', '.join(info['labels'])}; the models "
                       f"were trained on {', '.join(training_labels)}): its accuracy is over its "
                       f"{len(info['labels'])} labels only, each row given the likeliest of them and a prediction of "
                       f"{_listed(unscored)} left out")
        out += [f"{ev}: the models' {_listed(ts)} predictions are scored as its {e}"
                for e, ts in info["labels_merged"].items()]
    return out


def _listed(labels: list) -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    quoted = [repr(l) for l in labels]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def reading_notes(sets: dict, accuracy: dict, reads: str) -> list[str]:
    """Notes on how to read the scores (``sets``, ``accuracy``, ``reads``: the report's): an evaluation set on
    which every model is under its majority class, pairs scored on one text, and evaluation sets in which one input
    carries several gold labels (a model answers an input one way: those rows cap every model's accuracy alike)."""
    out = []
    for ev, info in sets.items():
        majority, means = info["majority"], [v["mean"] for v in accuracy[ev].values()]
        if means and max(means) < majority["accuracy"]:
            out.append(f"{ev}: every model scores under its majority class ({majority['label']!r}, "
                       f"{majority['accuracy']:.1%}; the best {max(means):.1%}): a gain here is among models that do "
                       f"worse than always answering {majority['label']!r}")
        if info["pairs_read_as_one_text"]:
            out.append(f"{ev}: the models were trained on single texts, so its pairs are scored on their text_a "
                       "alone (text_b is not read)")
        shared = info["inputs_with_several_labels"]
        if not shared["rows"]:
            continue
        what = f"{ev}: {shared['rows']:,} of its {info['rows']:,} rows share what the models read, " \
               f"{READS[reads]}, with a row of another gold label, so no model can score over " \
               f"{shared['best_possible_accuracy']:.1%}"
        if not shared["separates_models"]:
            what += "; every input carries several labels: this set cannot separate the models"
        out.append(what)
    return out
