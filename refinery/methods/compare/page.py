"""A comparison as people read it: the report page (accuracy bars and table, the bias slices' figures and
tables, breakdowns, the corpora and the configuration) and the console summary."""
from __future__ import annotations

import html

from refinery.methods.compare.config import path_and_split
from refinery.methods.compare.report import CompareReport
from refinery.models.task_model import READS
from refinery.pipeline.output import StageOutput
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report.page import Report, config_table, figure, note, table


def accuracy_cell(entry: dict, ngram: int) -> str:
    """``mean ± std`` of one (corpus, evaluation set), its gain over the baseline in points with the 95%
    interval, and the evaluation rows the corpus contaminates (sharing a run of ``ngram`` words)."""
    cell = f"{entry['mean']:.1%}" + (f" ± {entry['std']:.1%}" if entry["std"] is not None else "")
    if "gain" in entry:
        g = entry["gain"]
        cell += f"   {fmt.points(g['delta'])} [{fmt.interval(g['ci95'])}]"
    if entry.get("overlap_rows"):
        cell += f"   (! {entry['overlap_rows']:,} evaluation rows also in training)"
    k, clean = entry["contaminated_rows"], entry.get("clean_accuracy")
    cell += f"   {ngram}-gram contaminated rows: {k:,}"
    return cell + (f", {clean:.1%} on the others" if clean is not None else " (every row)" if k else "")


SLICES_SHOWN = 5     # features per evaluation set in the console summary (the report has them all)


def console_lines(report: CompareReport) -> list[str]:
    """The console summary: what the models read, each set's accuracies and gains in points, its slices of the
    baseline's most biased features (majority label vs the others, and the gap), then the warnings and notes."""
    names = list(report.train)
    config = report.config
    lines = [f"{config['backend']} reading {READS[report.reads]}, {config['seeds']} seed(s); training rows: "
             + ", ".join(f"{n} {report.train[n]['rows']:,}" for n in names)]
    width = max(len(n) for n in names) + 2
    for ev, per in report.accuracy.items():
        info = report.eval[ev]
        lines.append(f"{ev} ({info['rows']:,} rows; majority class {info['majority']['label']} "
                     f"{info['majority']['accuracy']:.1%})")
        lines += [f"  {n:<{width}} {accuracy_cell(per[n], config['ngram'])}" for n in names]
        slices = report.bias_slices.get(ev)
        if slices and slices["features"]:
            lines.append(f"  {report.baseline}'s most biased features: accuracy on rows of the feature's label "
                         "vs the others (gap)")
            for f in slices["features"][:SLICES_SHOWN]:
                lines.append(f"    {f['feature']} → {f['eval_label']} ({f['rows']:,} rows): "
                             + "; ".join(_slice_cell(f, n) for n in names))
            if len(slices["features"]) > SLICES_SHOWN:
                lines.append(f"    +{len(slices['features']) - SLICES_SHOWN} more in the report")
    lines += [f"WARNING: {w}" for w in report.warnings]
    lines += [f"note: {n}" for n in report.notes]
    return lines


def _slice_cell(f: dict, n: str) -> str:
    """A model on a feature's slices: its accuracy on the rows of the feature's label vs the others, and the gap; or
    that it predicts one label there (its accuracies are then that label's shares, no reading of the rows)."""
    one = (f.get("one_label") or {}).get(n)
    if one:
        return f"{n} predicts {one['label']!r} for {one['share']:.0%} of them (no gap: it reads one label)"
    return (f"{n} {_pct(f['majority']['accuracy'][n])} vs {_pct(f['others']['accuracy'][n])}"
            + (f" (gap {100 * f['gap'][n]:.1f} points)" if f["gap"][n] is not None else ""))


def _pct(v) -> str:
    return "—" if v is None else f"{v:.1%}"


def report_page(report: CompareReport, train: dict, evals: dict, out: StageOutput) -> Report:
    """The report page of ``report``: headed by the training corpora ({name: paths}) and listing them and the
    evaluation sets ({name: paths}) it read."""
    acc, names, base = report.accuracy, list(report.train), report.baseline
    seeds = report.config["seeds"]
    read = [f"{n}: {p}" for n, paths in train.items() for p in paths] + \
           [f"{n} (evaluation): {p}" for n, paths in evals.items() for p in paths]
    title = "Compare: the same model trained on each corpus, scored on evaluation sets"
    page = out.report_page(title, corpora=[path_and_split(p)[0] for paths in train.values() for p in paths], read=read)
    findings = [f'<p class="bad">{html.escape("Warning: " + w)}</p>' for w in report.warnings]
    findings += [note(n) for n in report.notes]
    if findings:
        page.section("Warnings and notes", *findings)
    page.section("Accuracy", figure(_bars(report), (
        f"Bars: accuracy on each evaluation set{' (mean over seeds)' if seeds > 1 else ''}, from 0%; whiskers: "
        "its 95% interval (bootstrap over the evaluation rows). Dashed line: always answering the set's majority "
        "class." + (f" A refined corpus's gain over {base}, in points, and its paired bootstrap 95% interval are in "
                    "the table; a gain whose interval excludes 0 is significant." if len(names) > 1 else ""))),
        table(*_accuracy_rows(report)), note(f"The models read {READS[report.reads]}. " + _contamination_rule(
            report)))
    examples = [{"evaluation set": ev, "training corpus": n, "evaluation id": x["id"], "training id": x["training_id"]}
                for ev, info in report.eval.items() for n, k in info["contaminated"].items() for x in k["examples"]]
    if examples:
        page.section("Contaminated rows", note(f"A few per evaluation set and training corpus (all of them counted "
                                               "in the accuracy table), each with a training row it shares a run of "
                                               f"{report.config['ngram']} words with."), table(examples))
    for ev, slices in report.bias_slices.items():
        page.section(f"{ev}: does the model follow {base}'s shortcuts?", *_slice_blocks(slices, names, base))
    for ev, per in acc.items():
        for what in per[base]["breakdown"]:
            cells = {n: per[n]["breakdown"][what] for n in names}
            if isinstance(cells[base], str):
                page.section(f"{ev} by {what}", note(f"Not broken down: {cells[base]}."))
                continue
            rows = [{what: value, "rows": cells[base][value]["rows"],
                     **{n: cells[n][value]["accuracy"] for n in names}} for value in cells[base]]
            page.section(f"{ev} by {what}", table(rows, [what, "rows", *names], {n: fmt.percent for n in names}))
    page.section("Training corpora", table([
        {"corpus": n, "role": "baseline" if n == base else "refined", "rows": v["rows"], "input rejects": v["rejected"],
         "other splits left out": v["other_splits_left_out"], "weighted": "yes" if v["weighted"] else "no"}
        for n, v in report.train.items()]))
    page.section("Evaluation sets", table([
        {"set": n, "rows": v["rows"], "input rejects": v["rejected"], "majority class": v["majority"]["label"],
         "its accuracy": v["majority"]["accuracy"],
         "training labels mapped": ", ".join(f"{a} → {b}" for a, b in v["label_map"].items() if a != b) or "none",
         "training labels it lacks": ", ".join(v["training_labels_unscored"]) or "none",
         "rows also in training": ", ".join(f"{k} {c:,}" for k, c in v["leaked_rows"].items() if c) or "none"}
        for n, v in report.eval.items()], formats={"its accuracy": fmt.percent}),
        note("A prediction of a mapped training label counts as the label it maps to (the probabilities of the "
             "training labels mapping to one label are summed). A training label a set lacks, mapped to none of its "
             "labels, is never predicted on it: its probability is left out and each row gets the likeliest of the "
             "set's labels."))
    config = dict(report.config)
    if config.get("backend") == "ngram":
        for key in ("model", "epochs", "lr", "batch_size", "max_length", "train_precision"):
            config.pop(key, None)
    page.section("Configuration", config_table(config), note(
        "The n-gram backend: the transformer's settings (model, epochs, learning rate, batch size, length, "
        "precision) do not apply.") if report.config.get("backend") == "ngram" else "")
    return page


def _slice_blocks(slices: dict, names: list, base: str) -> list[str]:
    """An evaluation set's bias-slice figure and table (AUDAC's Figures 2 and 4 and Table 1)."""
    count = len(slices["features"]) + len(slices["absent"])
    about = note(f"The {count} feature{'s' if count != 1 else ''} of {base} with the largest z* "
                 f"over the threshold {slices['threshold']:.2f} (prior {slices['prior']}), each at the label it leans "
                 "to. For each feature in this set: the accuracy on its rows whose gold label is that label (the "
                 "shortcut points the right way) and on its other rows (the shortcut misleads). A model that relies "
                 "on the shortcut scores high on the first and low on the second; a smaller gap relies on it less.")
    if not slices["features"]:
        return [about, note("None of them is in this set." if slices["absent"] else
                            f"{base} has no feature over the threshold.")]
    rows = []
    for f in slices["features"]:
        for which, title in (("majority", f["eval_label"]), ("others", "other labels")):
            part = f[which]
            row = {"feature → its label": f"{f['feature']} → {f['eval_label']}", "z*": f["z"], "gold label": title,
                   "rows": part["rows"]}
            for n in names:
                row[n] = (part["accuracy"][n], part["ci95"][n])
                if n in part["gain"]:
                    row[f"{n} gain, points"] = part["gain"][n]
            rows.append(row)
    columns = ["feature → its label", "z*", "gold label", "rows"] + [c for n in names for c in (
        (n,) if n == base else (n, f"{n} gain, points"))]
    formats = {"z*": fmt.z, **{n: _accuracy_interval for n in names},
               **{f"{n} gain, points": _gain_interval for n in names}}
    shown = min(len(slices["features"]), FIGURE_FEATURES)
    blocks = [about, figure(_slice_bars(slices, names), (
        f"Bars: accuracy on the rows of each feature's label (solid) and of the other labels (light), per training "
        f"corpus, from 0%; whiskers: 95% intervals (bootstrap over the rows). The {shown} features of largest z*"
        + (f"; all {len(slices['features'])} are in the table." if shown < len(slices["features"]) else "."))),
        table(rows, columns, formats), note("Accuracy [95% interval, in %]; gain over the baseline in points "
                                            "[paired bootstrap 95% interval].")]
    one = [f"{f['feature']}: {n} predicts {o['label']!r} for {o['share']:.0%} of its rows"
           for f in slices["features"] for n, o in (f.get("one_label") or {}).items() if o]
    if one:
        blocks.append(note("These models predict one label for (nearly) every row of a feature, so their two "
                           "accuracies are that label's shares and their gap says nothing about the shortcut: "
                           + "; ".join(one) + "."))
    if slices["absent"]:
        blocks.append(note(f"Not in this set: {', '.join(slices['absent'])}."))
    return blocks


FIGURE_FEATURES = 6     # features drawn in a bias-slice figure (the table lists them all)


def _accuracy_interval(cell) -> str:
    """``70.7% [58.6–82.8]``: an accuracy and its 95% interval."""
    accuracy, ci = cell
    return "—" if accuracy is None else f"{accuracy:.1%} [{100 * ci[0]:.1f}–{100 * ci[1]:.1f}]"


def _gain_interval(g) -> str:
    """``+10.3 [0.0 to +20.7]``: a gain in points and its 95% interval."""
    return f"{fmt.points(g['delta']).split()[0]} [{fmt.interval(g['ci95']).removesuffix(' points')}]"


def _slice_bars(slices: dict, names: list) -> str:
    """Per feature, per corpus, the accuracy on the rows of its label and on the others, with their intervals."""
    features = slices["features"][:FIGURE_FEATURES]
    series, values, low, high = [], [], [], []
    for n in names:
        for which, title in (("majority", "its label"), ("others", "other labels")):
            series.append(f"{n}: {title}")
            values.append([f[which]["accuracy"][n] for f in features])
            low.append([f[which]["ci95"][n] and f[which]["ci95"][n][0] for f in features])
            high.append([f[which]["ci95"][n] and f[which]["ci95"][n][1] for f in features])
    return figures.bars([f"{f['feature']} → {f['eval_label']}" for f in features], series, values, low, high,
                        y_label="accuracy", percent=True, paired=True)


def _accuracy_rows(report: CompareReport) -> tuple[list, list, dict]:
    """One row per (evaluation set, corpus) after the set's majority class: accuracy, the rows the corpus
    contaminates and the accuracy on the others, ± std over seeds, the gain over the baseline and its 95% interval,
    the weighted accuracy and overlapping rows where there are any."""
    acc, base = report.accuracy, report.baseline
    rows = []
    for ev, per in acc.items():
        majority = report.eval[ev]["majority"]
        rows.append({"evaluation set": ev, "training corpus": f"(majority class: {majority['label']})",
                     "accuracy": majority["accuracy"]})
        for n, e in per.items():
            g = e.get("gain")
            rows.append({"evaluation set": ev, "training corpus": n + (" (baseline)" if n == base else ""),
                         "accuracy": e["mean"], "± std over seeds": e["std"],
                         f"gain over {base}": g and g["delta"], "gain 95% interval": g and g["ci95"],
                         "significant": g and ("yes" if g["significant"] else "no"),
                         "weighted accuracy": e.get("weighted_accuracy"),
                         "evaluation rows also in training": e.get("overlap_rows"),
                         "contaminated rows": e["contaminated_rows"],
                         "accuracy on the other rows": e.get("clean_accuracy")})
    columns = ["evaluation set", "training corpus", "accuracy", "contaminated rows", "accuracy on the other rows",
               "± std over seeds", f"gain over {base}", "gain 95% interval", "significant", "weighted accuracy",
               "evaluation rows also in training"]
    columns = columns[:2] + [c for c in columns[2:] if any(r.get(c) is not None for r in rows)]
    rows = [{c: "" if r.get(c) is None else r[c] for c in columns} for r in rows]   # blank where it does not apply
    formats = {"accuracy": fmt.percent, "± std over seeds": fmt.percent, f"gain over {base}": fmt.points,
               "gain 95% interval": fmt.interval, "weighted accuracy": fmt.percent,
               "evaluation rows also in training": fmt.count, "contaminated rows": fmt.count,
               "accuracy on the other rows": fmt.percent}
    return rows, columns, {c: _or_blank(f) for c, f in formats.items() if c in columns}


def _contamination_rule(report: CompareReport) -> str:
    """What a contaminated row is."""
    n = report.config["ngram"]
    return (f"Contaminated rows: the evaluation rows that share a run of {n} words with a row of the training corpus "
            f"(what the models read, normalized: case, punctuation and whitespace folded; a row of fewer than {n} "
            "words matched whole), decontaminate's rule; the accuracy on the other rows says whether the score "
            "holds without them.")


def _or_blank(format_):
    return lambda v: "" if v == "" else format_(v)


def _bars(report: CompareReport) -> str:
    """Grouped bars from 0%: one group per evaluation set, one bar per training corpus, whiskers its accuracy's
    95% interval; the majority class as each group's reference."""
    acc, names = report.accuracy, list(report.train)
    evals = list(acc)
    values = [[acc[ev][n]["mean"] for ev in evals] for n in names]     # values[series][group]
    low = [[acc[ev][n]["ci95"][0] for ev in evals] for n in names]
    high = [[acc[ev][n]["ci95"][1] for ev in evals] for n in names]
    reference = [report.eval[ev]["majority"]["accuracy"] for ev in evals]
    return figures.bars(evals, names, values, low, high, reference, reference_label="majority class",
                        y_label="accuracy", percent=True)
