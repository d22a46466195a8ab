"""Does the model rely less on the shortcut? AUDAC's test (Figures 2 and 4, Table 1): the baseline corpus's most
biased features, and on the evaluation rows that contain each, every corpus's accuracy on the rows whose gold
label is the feature's label (the shortcut points the right way) and on the others (it misleads)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.methods.compare.statistics import bootstrapintervals, gain, one_label
from refinery.methods.compare.training import Corpora


def bias_features(stats, k: int, reads: str, hypothesis_suffix: str) -> list[dict]:
    """The baseline corpus's k most biased features: its audit's top-k by z* over every label, each feature once
    (at the label of its largest z*, the label it leans to), significant ones only, the ``null`` prior apart; a
    model of the hypothesis alone reads only features of the hypothesis."""
    ranked = sorted((e["z"], e["feature"], label, e["n"]) for label, entries in stats.top_k(k).items()
                    for e in entries if e["z"] > stats.threshold
                    and (reads != "text_b" or e["feature"].endswith("@" + hypothesis_suffix)))
    out: dict = {}
    for z, feature, label, n in reversed(ranked):
        if feature not in out and len(out) < k:
            out[feature] = {"feature": feature, "label": label, "z": z, "n": n}
    return list(out.values())


def bias_slices(data: Corpora, features, correct: dict, predicted: dict) -> dict:
    """Per evaluation set, for each of the baseline's top biased features (read with ``features``) present in the
    set, the accuracy of every corpus's model on the rows that contain it whose gold label is the feature's label
    and on the others, with 95% intervals, each refined corpus's gain, and the gap between the two slices (how far
    the model follows the shortcut). A model that predicts one label for (nearly) every row of the feature
    (``one_label``, from ``predicted``: seeds × rows labels) has no gap: its slices' accuracies are that label's
    shares among them."""
    from refinery.core.features import extract, text_fields
    from refinery.core.audit_config import AuditConfig
    from refinery.core.table_audit import audit_table

    config, names = data.config, data.names
    if not config.slices:
        return {}
    base_table = data.tables[names[0]]
    audit = audit_table(base_table, AuditConfig(features=features, k=config.slices))
    suffix = text_fields(base_table, features)[-1][1]
    top = bias_features(audit.stats, config.slices, data.reads, suffix)
    head = {"threshold": round(audit.stats.threshold, 4), "prior": str(audit.prior), "features": top}
    out = {}
    for e in data.evals:
        t = data.eval_tables[e.name]
        long = extract(t, features)
        names_of = pc.dictionary_decode(long["feature"].combine_chunks())
        wanted = pc.is_in(names_of, value_set=pa.array([f["feature"] for f in top], pa.string()))
        rows = long["row"].filter(wanted).to_numpy()
        which = names_of.filter(wanted).to_pylist()
        gold = np.asarray(t["label"].to_pylist(), dtype=object)
        per_row = {n: correct[(n, e.name)].mean(axis=0) for n in names}
        present, absent = [], []
        for f in top:
            contain = rows[[w == f["feature"] for w in which]] if which else np.empty(0, np.int64)
            target = data.label_maps[e.name].get(f["label"])
            if not len(contain) or target is None:
                absent.append(f["feature"])
                continue
            majority = contain[gold[contain] == target]
            others = contain[gold[contain] != target]
            entry = {**f, "eval_label": target, "rows": len(contain),
                     "majority": _slice(per_row, names, majority, config.bootstrap),
                     "others": _slice(per_row, names, others, config.bootstrap)}
            entry["one_label"] = {n: one_label(predicted[(n, e.name)][:, contain]) for n in names}
            entry["gap"] = {n: None if entry["majority"]["rows"] == 0 or entry["others"]["rows"] == 0
                            or entry["one_label"][n] else
                            round(entry["majority"]["accuracy"][n] - entry["others"]["accuracy"][n], 4)
                            for n in names}
            present.append(entry)
        out[e.name] = {**head, "features": present, "absent": absent}
    return out


def _slice(per_row: dict, names: list, rows: np.ndarray, draws: int) -> dict:
    """Accuracy of each corpus's model on ``rows`` with its 95% interval, and each refined corpus's gain."""
    if not len(rows):
        return {"rows": 0, "accuracy": {n: None for n in names}, "ci95": {n: None for n in names}, "gain": {}}
    values = np.vstack([per_row[n][rows] for n in names])
    intervals = bootstrapintervals(values, draws)
    return {"rows": int(len(rows)), "accuracy": {n: round(float(v.mean()), 4) for n, v in zip(names, values)},
            "ci95": {n: [round(lo, 4), round(hi, 4)] for n, (lo, hi) in zip(names, intervals)},
            "gain": {n: gain(values[i] - values[0], draws) for i, n in enumerate(names) if i}}
