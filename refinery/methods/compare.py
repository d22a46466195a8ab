"""Does it help? The same task model trained on each training corpus, scored on challenge sets.

The first training corpus is the baseline, the others its refined versions (z-filtered, up-sampled,
re-weighted, rewritten, augmented). Each evaluation set keeps its own columns and label set:
predictions are mapped onto it by a label map (HANS: neutral and contradiction → non-entailment),
the probabilities of the training labels that map to one evaluation label are summed, and the most
likely evaluation label is the prediction. Every (corpus, seed) run is checkpointed under
``out/runs/``, so an interrupted comparison resumes; ``out/report/`` holds ``report.json``,
``report.html`` and ``predictions.parquet``.

Uncertainty: with ``seeds`` > 1 each corpus is trained that many times (the transformer with
that seed's initialisation and order; the deterministic n-gram model on that seed's bootstrap
replicate of its corpus) and accuracies are reported as mean ± std. A refined corpus's gain over
the baseline on an evaluation set is the mean over rows of (its seed-averaged correctness − the
baseline's), with a paired bootstrap 95% interval over the evaluation rows.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.validation import NOT_EMPTY, at_least, number_in, one_of, setting, validate
from refinery.io.corpus import input_fingerprints, load
from refinery.io.readers import ReadOptions
from refinery.io.schema import PRESETS, Mapping
from refinery.io.storage import AtomicDir, get_fs, join
from refinery.models.base import make_classifier
from refinery.models.precision import PRECISIONS
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult
from refinery.progress import progress
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report.page import Report, config_table, corpus_name, figure, note, table

# predictions of a 3-class NLI model onto the label sets of presets that have fewer labels
PRESET_LABEL_MAPS = {"hans": {"neutral": "non-entailment", "contradiction": "non-entailment"}}
BREAKDOWN_LIMIT = 50  # a --by column with more distinct values is reported as too many


@dataclass
class EvalSet:
    """An evaluation set: its inputs, how to read them (default: the training corpora's mapping), and a
    label map from the training labels onto its own (default: the preset's, then case-insensitive names)."""

    name: str
    paths: tuple
    preset: str | None = None
    label_map: dict = field(default_factory=dict)

    def mapping(self, default: Mapping | None) -> Mapping | None:
        return PRESETS[self.preset] if self.preset else default

    def full_label_map(self) -> dict:
        return {**PRESET_LABEL_MAPS.get(self.preset or "", {}), **self.label_map}


@dataclass
class CompareConfig:
    """The task model (``backend`` ngram | transformer, the transformer's encoder and training),
    what it reads (``inputs`` pair | hypothesis: the bias probe), seeds, bootstrap draws, and the
    extra columns to break accuracy down by. Its fields are the options of ``refinery compare`` and the
    keys under ``model:`` of a pipeline's ``compare`` step."""

    backend: str = setting("ngram", one_of("ngram", "transformer"),
                           "An n-gram classifier, or a fine-tuned transformer encoder (--model).")
    inputs: str = setting("pair", one_of("pair", "hypothesis"),
                          "What the model reads: the pair, or the hypothesis alone (the hypothesis-only bias probe).")
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         "Encoder of the transformer backend (name or folder).")
    epochs: int = setting(2, at_least(1), "Transformer fine-tuning epochs.")
    lr: float = setting(5e-5, number_in(0, open_low=True), "Transformer learning rate.")
    batch_size: int = setting(32, at_least(1), "Transformer batch size.", option="--batch")
    max_length: int = setting(128, at_least(1), "Transformer input length, in tokens.")
    precision: str = setting("auto", one_of(*PRECISIONS), "Transformer fine-tuning precision. auto: bf16 autocast "
                             "where the device computes bf16 natively, float32 elsewhere.", option="--train-precision")
    seeds: int = setting(1, at_least(1), "Runs per corpus (n-gram: bootstrap replicates of the corpus; transformer: "
                                         "initialisations).")
    bootstrap: int = setting(1000, at_least(100), "Draws of the paired bootstrap.")
    by: tuple = setting((), help="Also break accuracy down by this column (repeat for more).", multiple=True)
    allow_overlap: bool = setting(False, help="Score evaluation rows also found in a training corpus (marked in the "
                                              "report) instead of failing.")

    def __post_init__(self):
        validate(self)

    def classifier(self, seed: int):
        if self.backend == "ngram":
            return make_classifier("ngram", self.inputs)
        return make_classifier("transformer", self.inputs, model=self.model, epochs=self.epochs, lr=self.lr,
                               batch_size=self.batch_size, max_length=self.max_length, seed=seed,
                               precision=self.precision)

    def model_key(self) -> dict:
        """What a finished run depends on (not the seed count, bootstrap draws or breakdowns)."""
        keep = ("backend", "inputs") + (() if self.backend == "ngram" else
                                         ("model", "epochs", "lr", "batch_size", "max_length", "precision"))
        return {k: getattr(self, k) for k in keep}


def parse_named(specs, option: str) -> dict:
    """``NAME=PATH`` specs into {name: [path]}; a name given twice is an error (the second would hide the first)."""
    named: dict = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{option} {spec!r} is not NAME=PATH")
        if name in named:
            raise ValueError(f"{option} names {name!r} twice ({named[name][0]} and {path}); give each a name of its own")
        named[name] = [path]
    return named


_SPLIT_SELECTOR = re.compile(r"@([\w.-]+)$")


def train_split(path: str) -> tuple[str, str | None]:
    """``PATH@SPLIT`` → (PATH, SPLIT); a plain path → (path, None)."""
    match = _SPLIT_SELECTOR.search(path)
    return (path[: match.start()], match.group(1)) if match and "/" not in match.group(1) else (path, None)


SPLIT_HINT = "NAME=PATH@SPLIT on the command line, compare's split: key in a pipeline"


def training_rows(name: str, table: pa.Table, split: str | None) -> tuple[pa.Table, int]:
    """The rows a model trains on: a corpus with named splits gives its ``split`` rows (default: ``train``, or
    its only split); the number of rows of other splits left out."""
    present = sorted(set(table["split"].drop_null().to_pylist())) if "split" in table.column_names else []
    if not present:
        if split:
            raise ValueError(f"training corpus {name}: split {split!r} was asked for, but it has no named splits")
        return table, 0
    chosen = split or ("train" if "train" in present or len(present) > 1 else present[0])
    if chosen not in present:
        raise ValueError(f"training corpus {name} has splits {', '.join(present)} and no {chosen!r} split; "
                         f"name the one to train on ({SPLIT_HINT})")
    keep = pc.fill_null(pc.equal(table["split"], chosen), False)
    kept = table.filter(keep)
    return kept, table.num_rows - kept.num_rows


def parse_eval_set(spec: str, label_maps: dict | None = None) -> EvalSet:
    """``NAME=PATH[:PRESET]`` (a path may itself hold ``:``, as in ``s3://``) into an ``EvalSet``."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"evaluation set {spec!r} is not NAME=PATH[:PRESET]")
    head, colon, preset = path.rpartition(":")
    if colon and preset.lower() in PRESETS:
        path = head
    else:
        preset = None
    return EvalSet(name, (path,), preset.lower() if preset else None, dict((label_maps or {}).get(name, {})))


# ---------------------------------------------------------------- label maps and rows

def resolve_label_map(train_labels: list, eval_labels: list, explicit: dict, where: str) -> dict:
    """{training label: evaluation label}: ``explicit`` first, then names equal up to case. Every
    evaluation label must be reached, or the scores would be meaningless: a clear error."""
    by_fold = {str(e).casefold(): e for e in eval_labels}
    out = {}
    for t in train_labels:
        target = explicit.get(t, by_fold.get(str(t).casefold()))
        if target is not None:
            if target not in eval_labels:
                raise ValueError(f"{where}: label map sends {t!r} to {target!r}, which is not one of its labels "
                                 f"({', '.join(map(str, eval_labels))})")
            out[t] = target
    unreached = [e for e in eval_labels if e not in out.values()]
    if unreached:
        raise ValueError(f"{where}: no training label maps to {', '.join(map(repr, unreached))}; training labels are "
                         f"{', '.join(map(repr, train_labels))} (give --label-map {where}=FROM:TO,…)")
    return out


def project(proba: np.ndarray, classes: list, label_map: dict, eval_labels: list) -> np.ndarray:
    """Probabilities over the evaluation labels: the sum over the training labels mapped to each."""
    out = np.zeros((len(proba), len(eval_labels)))
    index = {e: j for j, e in enumerate(eval_labels)}
    for c, col in zip(classes, proba.T):
        if c in label_map:
            out[:, index[label_map[c]]] += col
    return out


def text_keys(table: pa.Table) -> pa.Array:
    """Normalized ``text_a \\t text_b``, the leak check's identity: case-folded, with only letters and digits
    kept, so that a tokenized release (``dog 's .``) and its raw text (``dog's.``) are the same row."""
    def norm(col):
        return pc.replace_substring_regex(pc.utf8_lower(col), r"[^\w]+|_", "")
    b = table["text_b"] if "text_b" in table.column_names else pa.nulls(table.num_rows, pa.string())
    return pc.binary_join_element_wise(norm(table["text_a"]), pc.fill_null(norm(b), ""), "\t")


def _weights(table: pa.Table) -> np.ndarray | None:
    if "weight" not in table.column_names:
        return None
    return table["weight"].to_numpy(zero_copy_only=False).astype(np.float64)


def paired_bootstrap(diff: np.ndarray, draws: int, seed: int = 0, chunk: int = 50) -> tuple[float, float]:
    """95% percentile interval of the mean of ``diff`` over rows resampled with replacement."""
    rng = np.random.default_rng(seed)
    n = len(diff)
    means = np.concatenate([diff[rng.integers(0, n, (min(chunk, draws - s), n))].mean(axis=1)
                            for s in range(0, draws, chunk)])
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


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


# ---------------------------------------------------------------- runs

def _fingerprint(config: CompareConfig, train_print: dict, seed: int, eval_prints: list) -> str:
    """A run's identity: the model, the seed, and the training corpus and evaluation sets as
    ``input_fingerprints`` sees them (a finished corpus by its manifest, a raw file by size and checksum)."""
    data = {"model": config.model_key(), "seed": seed, "replicate": config.backend == "ngram" and config.seeds > 1,
            "train": train_print, "eval": eval_prints}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _fit(config: CompareConfig, table: pa.Table, seed: int):
    """The task model fitted on ``table`` (weights as sample weights); the n-gram model, being
    deterministic, on a bootstrap replicate of it when several seeds are asked for."""
    if config.backend == "ngram" and config.seeds > 1:
        table = table.take(pa.array(np.random.default_rng(seed).integers(0, table.num_rows, table.num_rows)))
    model = config.classifier(seed)
    w = _weights(table)
    return model.fit(table, sample_weight=w) if w is not None else model.fit(table)


def _predict(model, table: pa.Table, label_map: dict, eval_labels: list) -> tuple[np.ndarray, np.ndarray]:
    p = project(model.predict_proba(table), list(model.classes_), label_map, eval_labels)
    best = p.argmax(axis=1)
    return best, p[np.arange(len(best)), best]


def run(train: dict, evals: list, out: str, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
        config: CompareConfig = CompareConfig(), split: str | None = None) -> dict:
    """Train ``config``'s model on each of ``train`` ({name: paths}, a path may end in ``@SPLIT``, else it trains
    on ``split``: see ``training_rows``; the first is the baseline) for each seed, score every ``EvalSet``; write
    ``out/runs/`` (checkpoints) and ``out/report/``.

    Honest by construction: evaluation rows whose texts are in a training corpus fail the run unless
    ``config.allow_overlap`` (then the report marks those cells)."""
    if not train or not evals:
        raise ValueError("compare needs at least one training corpus and one evaluation set")
    repeated = sorted({e.name for e in evals if [x.name for x in evals].count(e.name) > 1})
    if repeated:
        raise ValueError(f"evaluation set {repeated[0]!r} is named twice; give each a name of its own")
    so = opts.storage_options
    names = list(train)
    tables, rejects, other_splits = {}, {}, {}
    for name, paths in train.items():
        selected = [train_split(p) for p in paths]
        splits = {s for _, s in selected}
        if len(splits) > 1:
            raise ValueError(f"training corpus {name}: its paths name different splits ({', '.join(map(str, splits))})")
        table, rejects[name] = load([p for p, _ in selected], mapping, opts)
        tables[name], other_splits[name] = training_rows(name, table, splits.pop() or split)
        if not tables[name].num_rows:
            raise ValueError(f"training corpus {name}: no good rows in {', '.join(paths)}")
    train_labels = sorted(set().union(*(set(t["label"].to_pylist()) for t in tables.values())))
    eval_tables, eval_rejects, label_maps, eval_labels = {}, {}, {}, {}
    for e in evals:
        eval_tables[e.name], eval_rejects[e.name] = load(list(e.paths), e.mapping(mapping), opts)
        if not eval_tables[e.name].num_rows:
            raise ValueError(f"evaluation set {e.name}: no good rows in {', '.join(e.paths)}")
        eval_labels[e.name] = sorted(set(eval_tables[e.name]["label"].to_pylist()))
        label_maps[e.name] = resolve_label_map(train_labels, eval_labels[e.name], e.full_label_map(), e.name)
    for col in config.by:
        for e in evals:
            if col not in eval_tables[e.name].column_names:
                raise ValueError(f"evaluation set {e.name} has no column {col!r} to break down by "
                                 f"(columns: {', '.join(eval_tables[e.name].column_names)})")
    train_keys = {n: text_keys(t) for n, t in tables.items()}
    leaks = {e.name: {n: int(pc.sum(pc.is_in(text_keys(eval_tables[e.name]), value_set=keys)).as_py() or 0)
                      for n, keys in train_keys.items()} for e in evals}
    overlap = [(ev, n, c) for ev, per in leaks.items() for n, c in per.items() if c]
    if overlap and not config.allow_overlap:
        ev, n, c = overlap[0]
        raise ValueError(f"{c:,} of the {eval_tables[ev].num_rows:,} rows of evaluation set {ev} are also in training "
                         f"corpus {n} (same texts): its scores would be inflated. Train on another split "
                         f"({SPLIT_HINT}), remove those rows, or allow the overlap to report them marked "
                         "(--allow-overlap; allow_overlap: true under compare's model: in a pipeline)")
    train_prints = {n: (input_fingerprints([train_split(p)[0] for p in paths], so),
                        [train_split(p)[1] or split for p in paths]) for n, paths in train.items()}
    eval_prints = [(e.name, e.preset, sorted(e.full_label_map().items()), input_fingerprints(list(e.paths), so))
                   for e in evals]

    runs_root = join(out, "runs")
    correct: dict = {}    # (corpus, eval) -> seeds × rows booleans
    preds: list[pa.Table] = []
    jobs = [(n, s) for n in names for s in range(config.seeds)]
    for name, seed in progress(jobs, desc="compare", unit=" run"):
        key = _fingerprint(config, train_prints[name], seed, eval_prints)
        folder = join(runs_root, f"{_safe(name)}-seed{seed}")
        table = _finished_run(folder, key, so)
        if table is None:
            model = _fit(config, tables[name], seed)
            parts = []
            for e in evals:
                t = eval_tables[e.name]
                best, prob = _predict(model, t, label_maps[e.name], eval_labels[e.name])
                n = t.num_rows
                parts.append(pa.table({
                    "corpus": pa.array([name] * n, pa.string()), "seed": pa.array([seed] * n, pa.int32()),
                    "eval": pa.array([e.name] * n, pa.string()), "id": t["id"], "gold": t["label"],
                    "prediction": pa.array([eval_labels[e.name][i] for i in best], pa.string()),
                    "probability": pa.array(prob)}))
            table = pa.concat_tables(parts)
            with AtomicDir(folder, so) as d:   # a finished run survives an interrupted comparison
                d.write_parquet("predictions.parquet", table)
                d.write_text("run.json", json.dumps({"fingerprint": key, "corpus": name, "seed": seed}))
                d.commit()
        preds.append(table)
        for e in evals:
            part = table.filter(pc.equal(table["eval"], e.name))
            ok = pc.equal(part["prediction"], part["gold"]).to_numpy(zero_copy_only=False)
            correct.setdefault((name, e.name), []).append(ok)

    report = _summarize(config, names, tables, rejects, other_splits, evals, eval_tables, eval_rejects, eval_labels,
                        label_maps, leaks, {k: np.vstack(v) for k, v in correct.items()})
    _write_report(out, report, pa.concat_tables(preds), so, train, {e.name: list(e.paths) for e in evals})
    return report


def _finished_run(folder: str, key: str, storage_options) -> pa.Table | None:
    """The predictions of a finished run with fingerprint ``key`` in ``folder``, else None."""
    import pyarrow.parquet as pq

    fs, path = get_fs(folder, storage_options)
    try:
        with fs.open(join(path, "run.json"), "r") as fh:
            if json.load(fh).get("fingerprint") != key:
                return None
        with fs.open(join(path, "predictions.parquet"), "rb") as fh:
            return pq.read_table(fh)
    except FileNotFoundError:
        return None


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def majority_baseline(labels: pa.ChunkedArray) -> dict:
    """The accuracy of always answering an evaluation set's most frequent label."""
    counts = labels.value_counts()
    best = int(np.argmax(counts.field("counts").to_numpy()))
    return {"label": counts.field("values")[best].as_py(),
            "accuracy": round(counts.field("counts")[best].as_py() / len(labels), 4)}


def _summarize(config, names, tables, rejects, other_splits, evals, eval_tables, eval_rejects, eval_labels,
               label_maps, leaks, correct) -> dict:
    base = names[0]
    summary = {}
    for e in evals:
        t = eval_tables[e.name]
        columns = [["label"]] + ([["heuristic", "label"]] if "heuristic" in t.column_names else []) + \
            [[c] for c in config.by]
        w = _weights(t)
        per = {}
        for n in names:
            c = correct[(n, e.name)]
            acc = c.mean(axis=1)
            entry = {"mean": round(float(acc.mean()), 4), "std": round(float(acc.std(ddof=1)), 4) if len(acc) > 1
                     else None, "seeds": [round(float(a), 4) for a in acc],
                     "breakdown": {" × ".join(cols): breakdown(c, t, cols) for cols in columns}}
            if w is not None:
                entry["weighted_accuracy"] = round(float((c.mean(axis=0) * w).sum() / w.sum()), 4)
            if leaks[e.name][n]:
                entry["overlap_rows"] = leaks[e.name][n]
            if n != base:
                diff = c.mean(axis=0) - correct[(base, e.name)].mean(axis=0)
                lo, hi = paired_bootstrap(diff, config.bootstrap)
                entry["gain"] = {"delta": round(float(diff.mean()), 4), "ci95": [round(lo, 4), round(hi, 4)],
                                 "significant": bool(lo > 0 or hi < 0)}
            per[n] = entry
        summary[e.name] = per
    return {
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.__dict__.items()},
        "baseline": base,
        "train": {n: {"rows": tables[n].num_rows, "rejected": rejects[n].num_rows,
                      "other_splits_left_out": other_splits[n],
                      "weighted": "weight" in tables[n].column_names} for n in names},
        "eval": {e.name: {"rows": eval_tables[e.name].num_rows, "rejected": eval_rejects[e.name].num_rows,
                          "labels": eval_labels[e.name], "label_map": label_maps[e.name],
                          "majority": majority_baseline(eval_tables[e.name]["label"]),
                          "leaked_rows": leaks[e.name]} for e in evals},
        "accuracy": summary,
    }


def _write_report(out: str, report: dict, predictions: pa.Table, storage_options, train: dict | None = None,
                  evals: dict | None = None) -> None:
    with AtomicDir(join(out, "report"), storage_options) as d:
        d.write_parquet("predictions.parquet", predictions)
        d.write_text("report.json", json.dumps(report, indent=1))
        d.write_text("report.html", _html(report, train or {}, evals or {}, storage_options))
        d.commit()


def accuracy_cell(entry: dict) -> str:
    """``mean ± std`` of one (corpus, evaluation set), and its gain over the baseline with the 95% interval."""
    cell = f"{entry['mean']:.1%}" + (f" ± {entry['std']:.1%}" if entry["std"] is not None else "")
    if "gain" in entry:
        g = entry["gain"]
        cell += f"   {g['delta']:+.1%} [{g['ci95'][0]:+.1%}, {g['ci95'][1]:+.1%}]"
    if entry.get("overlap_rows"):
        cell += f"   (! {entry['overlap_rows']:,} evaluation rows also in training)"
    return cell


def _points(delta) -> str:
    """An accuracy difference in percentage points: 0.0123 → "+1.2 pts"; a rounded zero unsigned."""
    return f"{100 * delta:+.1f} pts" if round(100 * delta, 1) else "0.0 pts"


def _interval(ci) -> str:
    return f"{_points(ci[0])[:-4]} to {_points(ci[1])}"


def _html(report: dict, train: dict, evals: dict, storage_options=None) -> str:
    acc, names, base = report["accuracy"], list(report["train"]), report["baseline"]
    seeds = report["config"]["seeds"]
    train_paths = {n: [train_split(p)[0] for p in paths] for n, paths in train.items()}
    corpus = corpus_name([p for paths in train_paths.values() for p in paths], storage_options)
    read = [f"{n}: {p}" for n, paths in train.items() for p in paths] + \
           [f"{n} (evaluation): {p}" for n, paths in evals.items() for p in paths]
    title = "Compare: the same model trained on each corpus, scored on evaluation sets"
    page = Report(title, corpus, read)
    page.section("Accuracy", figure(_bars(report), (
        f"Bars: accuracy on each evaluation set{' (mean over seeds)' if seeds > 1 else ''}. Dashed line: always "
        "answering the set's majority class."
        + (f" Whiskers on a refined corpus: the paired bootstrap 95% interval of its gain over {base}, placed on "
           f"{base}'s bar height; a whisker that clears {base}'s accuracy is a significant gain."
           if len(names) > 1 else ""))), table(*_accuracy_rows(report)))
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
        for n, v in report["train"].items()]))
    page.section("Evaluation sets", table([
        {"set": n, "rows": v["rows"], "input rejects": v["rejected"], "majority class": v["majority"]["label"],
         "its accuracy": v["majority"]["accuracy"],
         "training labels mapped": ", ".join(f"{a} → {b}" for a, b in v["label_map"].items() if a != b) or "none",
         "rows also in training": ", ".join(f"{k} {c:,}" for k, c in v["leaked_rows"].items() if c) or "none"}
        for n, v in report["eval"].items()], formats={"its accuracy": fmt.percent}),
        note("A prediction of a mapped training label counts as the label it maps to (the probabilities of the "
             "training labels mapping to one label are summed)."))
    config = dict(report["config"])
    if config.get("backend") == "ngram":
        for key in ("model", "epochs", "lr", "batch_size", "max_length", "precision"):
            config.pop(key, None)
    page.section("Configuration", config_table(config), note(
        "The n-gram backend: the transformer's settings (model, epochs, learning rate, batch size, length, "
        "precision) do not apply.") if report["config"].get("backend") == "ngram" else "")
    return page.html()


def _accuracy_rows(report: dict) -> tuple[list, list, dict]:
    """One row per (evaluation set, corpus) after the set's majority class: accuracy, ± std over seeds, the gain
    over the baseline and its 95% interval, the weighted accuracy and overlapping rows where there are any."""
    acc, base = report["accuracy"], report["baseline"]
    rows = []
    for ev, per in acc.items():
        majority = report["eval"][ev]["majority"]
        rows.append({"evaluation set": ev, "training corpus": f"(majority class: {majority['label']})",
                     "accuracy": majority["accuracy"]})
        for n, e in per.items():
            gain = e.get("gain")
            rows.append({"evaluation set": ev, "training corpus": n + (" (baseline)" if n == base else ""),
                         "accuracy": e["mean"], "± std over seeds": e["std"],
                         f"gain over {base}": gain and gain["delta"], "95% interval": gain and gain["ci95"],
                         "significant": gain and ("yes" if gain["significant"] else "no"),
                         "weighted accuracy": e.get("weighted_accuracy"),
                         "evaluation rows also in training": e.get("overlap_rows")})
    columns = ["evaluation set", "training corpus", "accuracy", "± std over seeds", f"gain over {base}",
               "95% interval", "significant", "weighted accuracy", "evaluation rows also in training"]
    columns = columns[:2] + [c for c in columns[2:] if any(r.get(c) is not None for r in rows)]
    rows = [{c: "" if r.get(c) is None else r[c] for c in columns} for r in rows]   # blank where it does not apply
    formats = {"accuracy": fmt.percent, "± std over seeds": fmt.percent, f"gain over {base}": _points,
               "95% interval": _interval, "weighted accuracy": fmt.percent,
               "evaluation rows also in training": fmt.count}
    return rows, columns, {c: _or_blank(f) for c, f in formats.items() if c in columns}


def _or_blank(format_):
    return lambda v: "" if v == "" else format_(v)


def _bars(report: dict) -> str:
    """Grouped bars: one group per evaluation set, one bar per training corpus; a refined corpus's whisker is the
    95% interval of its gain placed on the baseline's accuracy; the majority class as each group's reference."""
    acc, names, base = report["accuracy"], list(report["train"]), report["baseline"]
    evals = list(acc)
    values = [[acc[ev][n]["mean"] for ev in evals] for n in names]     # values[series][group]
    low = [[acc[ev][base]["mean"] + acc[ev][n]["gain"]["ci95"][0] if "gain" in acc[ev][n] else None for ev in evals]
           for n in names]
    high = [[acc[ev][base]["mean"] + acc[ev][n]["gain"]["ci95"][1] if "gain" in acc[ev][n] else None for ev in evals]
            for n in names]
    reference = [report["eval"][ev]["majority"]["accuracy"] for ev in evals]
    if len(names) == 1:     # no refined corpus: no gain, no whisker
        low = high = None
    return figures.bars(evals, names, values, low, high, reference, reference_label="majority class",
                        y_label="accuracy", percent=True)


@dataclass
class CompareStageConfig:
    """The pipeline's ``compare`` step: ``baseline`` corpora (earlier steps' names or paths; the first
    is the baseline) against this step's input, scored on ``evals`` (``NAME=PATH[:PRESET]``)."""

    evals: tuple = setting((), help="Evaluation sets, NAME=PATH[:PRESET] (required).")
    baseline: tuple = setting(("input",), help="Corpora this step's input is compared with: names of preceding "
                                               "steps, or paths; the first is the baseline.")
    split: str | None = setting(None, NOT_EMPTY.or_none(), "The split every training corpus trains on (none: its "
                                                           "train split, or its only one).")
    label_maps: dict = setting(default_factory=dict, help="{EVAL_NAME: {TRAINING_LABEL: EVAL_LABEL}}, besides the "
                                                          "built-in HANS map.")
    model: CompareConfig = field(default_factory=CompareConfig)

    def __post_init__(self):
        validate(self)
        if not self.evals:
            raise ValueError("compare needs at least one evaluation set (evals: [NAME=PATH[:PRESET], …])")
        sets = [parse_eval_set(e, self.label_maps) for e in self.evals]
        unknown = sorted(set(self.label_maps) - {e.name for e in sets})
        if unknown:
            raise ValueError(f"label_maps names no evaluation set: {', '.join(unknown)}")


def step_name(path: str) -> str:
    """An output's step folder (``…/02-zfilter/kept`` → ``02-zfilter``), else its file or folder name."""
    parts = [p for p in path.rstrip("/").split("/") if p]
    if len(parts) > 1 and parts[-1] in ("kept", "pool", "corpus"):
        return parts[-2]
    return parts[-1] if parts else path


def training_corpora(baseline: tuple, own: list) -> tuple[dict, str]:
    """({name: paths} of the baseline corpora and then the step's own input, the name of the step's input): each
    named by its step (``step_name``), or by its whole path where two share a step name; a baseline that is the
    step's input itself is trained once."""
    entries = {(p,): [p] for p in baseline}
    entries.setdefault(tuple(own), list(own))
    names = [step_name(paths[0]) for paths in entries.values()]
    names = [name if names.count(name) == 1 else paths[0] for name, paths in zip(names, entries.values())]
    train = dict(zip(names, entries.values()))
    return train, names[list(entries).index(tuple(own))]


class CompareStage(Stage):
    """Does it help? The baseline corpora and this step's input trained alike and scored on the
    evaluation sets (report only; the rows pass on)."""

    name, Config = "compare", CompareStageConfig
    output = Output.INPUT
    references = ("baseline",)
    verb = False   # ``refinery compare`` trains on several named corpora: a verb of its own (cli/tools.py)

    def run(self, source: StageInput, out: str) -> StageResult:
        c = self.config
        train, mine = training_corpora(c.baseline, source.paths)
        evals = [parse_eval_set(e, c.label_maps) for e in c.evals]
        r = run(train, evals, out, source.mapping, source.opts, c.model, c.split)
        rows = r["train"][mine]["rows"]
        gains = ", ".join(f"{ev} {per[mine]['gain']['delta']:+.1%}" for ev, per in r["accuracy"].items()
                          if "gain" in per[mine])
        return StageResult(rows + r["train"][mine]["rejected"], {"passed on": rows,
                                                                 "input rejects": r["train"][mine]["rejected"]},
                           r, f"{mine} against {r['baseline']}: {gains or 'no baseline'}")
