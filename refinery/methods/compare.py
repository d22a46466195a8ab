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
import html
import json
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import FeatureConfig
from refinery.core.validation import NOT_EMPTY, at_least, number_in, one_of, setting, validate
from refinery.io.corpus import input_fingerprints, load
from refinery.io.readers import ReadOptions
from refinery.io.schema import PRESETS, Mapping, is_pair
from refinery.io.location import get_fs, join
from refinery.io.publishing import AtomicDir
from refinery.models.base import make_classifier
from refinery.models.precision import PRECISIONS
from refinery.pipeline.output import StageOutput
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
    slices: int = setting(10, at_least(0), "Top biased features of the baseline corpus whose slices (rows of the "
                                           "feature's label and the others) are scored (0: none).")
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


# What the models read: both texts, the hypothesis (text_b) alone, or the one text of single-text corpora
READS = {"pair": "the pair (text_a and text_b)", "text_b": "the hypothesis (text_b) alone",
         "text_a": "one text (text_a) alone"}


def model_reads(tables: dict, inputs: str) -> str:
    """What every model reads (a ``READS`` key): the training corpora must agree, being all pairs or all single
    texts; ``inputs`` hypothesis reads text_b of pairs (the n-gram and transformer models read a single text's
    text_a either way)."""
    pairs = {n: is_pair(t) for n, t in tables.items()}
    if len(set(pairs.values())) > 1:
        one = [n for n, p in pairs.items() if not p]
        two = [n for n, p in pairs.items() if p]
        raise ValueError(f"training corpora {', '.join(two)} hold pairs and {', '.join(one)} single texts: their "
                         "models would read different things; compare corpora of one kind")
    if not any(pairs.values()):
        return "text_a"
    return "text_b" if inputs == "hypothesis" else "pair"


def model_view(table: pa.Table, reads: str, where: str) -> pa.Table:
    """The evaluation rows as the models read them: a model trained on single texts scores a pair on its text_a
    alone (text_b dropped); a model of pairs cannot score single texts (a clear error)."""
    if reads == "text_a" and "text_b" in table.column_names:
        return table.drop_columns(["text_b"])
    if reads == "pair" and not is_pair(table):
        raise ValueError(f"evaluation set {where} holds single texts, and the models read pairs (trained on "
                         "text_a and text_b): evaluate them on pairs (its pair preset), or train on single texts")
    return table


def text_keys(table: pa.Table, reads: str = "pair") -> pa.Array:
    """Normalized text of what the model reads (``model_reads``: ``text_a \t text_b``, the hypothesis, or the
    one text), the identity of the leak check and of the inputs that carry several gold labels: case-folded, with
    only letters and digits kept, so that a tokenized release (``dog 's .``) and its raw text (``dog's.``) are
    the same row."""
    def norm(col):
        return pc.replace_substring_regex(pc.utf8_lower(col), r"[^\w]+|_", "")
    a = table["text_a"]
    b = table["text_b"] if "text_b" in table.column_names else pa.nulls(table.num_rows, pa.string())
    if reads == "text_a":
        return norm(a)
    if reads == "text_b":
        return norm(pc.coalesce(b, a))
    return pc.binary_join_element_wise(norm(a), pc.fill_null(norm(b), ""), "\t")


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


def _weights(table: pa.Table) -> np.ndarray | None:
    if "weight" not in table.column_names:
        return None
    return table["weight"].to_numpy(zero_copy_only=False).astype(np.float64)


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
    reads = model_reads(tables, config.inputs)
    eval_tables, eval_rejects, label_maps, eval_labels, eval_pairs = {}, {}, {}, {}, {}
    for e in evals:
        table, eval_rejects[e.name] = load(list(e.paths), e.mapping(mapping), opts)
        if not table.num_rows:
            raise ValueError(f"evaluation set {e.name}: no good rows in {', '.join(e.paths)}")
        eval_pairs[e.name] = is_pair(table)
        eval_tables[e.name] = model_view(table, reads, e.name)
        eval_labels[e.name] = sorted(set(eval_tables[e.name]["label"].to_pylist()))
        label_maps[e.name] = resolve_label_map(train_labels, eval_labels[e.name], e.full_label_map(), e.name)
    for col in config.by:
        for e in evals:
            if col not in eval_tables[e.name].column_names:
                raise ValueError(f"evaluation set {e.name} has no column {col!r} to break down by "
                                 f"(columns: {', '.join(eval_tables[e.name].column_names)})")
    train_keys = {n: text_keys(t, reads) for n, t in tables.items()}
    eval_keys = {e.name: text_keys(eval_tables[e.name], reads) for e in evals}
    leaks = {e.name: {n: int(pc.sum(pc.is_in(eval_keys[e.name], value_set=keys)).as_py() or 0)
                      for n, keys in train_keys.items()} for e in evals}
    overlap = [(ev, n, c) for ev, per in leaks.items() for n, c in per.items() if c]
    if overlap and not config.allow_overlap:
        ev, n, c = overlap[0]
        raise ValueError(f"{c:,} of the {eval_tables[ev].num_rows:,} rows of evaluation set {ev} are also in training "
                         f"corpus {n} (same texts where the models read {READS[reads]}): its scores would be inflated. Train on another split "
                         f"({SPLIT_HINT}), remove those rows, or allow the overlap to report them marked "
                         "(--allow-overlap; allow_overlap: true under compare's model: in a pipeline)")
    train_prints = {n: (input_fingerprints([train_split(p)[0] for p in paths], so),
                        [train_split(p)[1] or split for p in paths]) for n, paths in train.items()}
    eval_prints = [(e.name, e.preset, sorted(e.full_label_map().items()), input_fingerprints(list(e.paths), so))
                   for e in evals] + [("reads", reads)]

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

    correct = {k: np.vstack(v) for k, v in correct.items()}
    report = _summarize(config, names, tables, rejects, other_splits, evals, eval_tables, eval_rejects, eval_labels,
                        label_maps, leaks, correct)
    report["reads"] = reads
    for e in evals:
        report["eval"][e.name]["pairs_read_as_one_text"] = reads == "text_a" and eval_pairs[e.name]
        report["eval"][e.name]["inputs_with_several_labels"] = several_labels(eval_keys[e.name],
                                                                              eval_tables[e.name]["label"])
    features = FeatureConfig().named(mapping.field_names if mapping else None, single_text=reads == "text_a")
    report["bias_slices"] = bias_slices(config, names, tables[names[0]], features, reads, evals, eval_tables,
                                        label_maps, correct)
    report["warnings"] = label_collapses(report)
    report["notes"] = reading_notes(report)
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
                entry["gain"] = gain(c.mean(axis=0) - correct[(base, e.name)].mean(axis=0), config.bootstrap)
            per[n] = entry
        own = bootstrapintervals(np.vstack([correct[(n, e.name)].mean(axis=0) for n in names]), config.bootstrap)
        for n, (lo, hi) in zip(names, own):
            per[n]["ci95"] = [round(lo, 4), round(hi, 4)]
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


# ---------------------------------------------------------------- what the summary finds

COLLAPSE = 0.10     # a label's accuracy falling by more than this against the baseline is a collapse


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


def bias_slices(config, names, base_table, features, reads, evals, eval_tables, label_maps, correct) -> dict:
    """Per evaluation set, AUDAC's test of a shortcut (Figures 2 and 4, Table 1): for each of the baseline's top
    biased features present in the set, the accuracy of every corpus's model on the rows that contain it whose
    gold label is the feature's label (the label the shortcut points to) and on the others, with 95% intervals,
    each refined corpus's gain, and the gap between the two slices (how far the model follows the shortcut)."""
    from refinery.core.features import extract, text_fields
    from refinery.methods.audit import AuditConfig, audit_table

    if not config.slices:
        return {}
    audit = audit_table(base_table, AuditConfig(features=features, k=config.slices))
    suffix = text_fields(base_table, features)[-1][1]
    top = bias_features(audit.stats, config.slices, reads, suffix)
    head = {"threshold": round(audit.stats.threshold, 4), "prior": str(audit.prior), "features": top}
    out = {}
    for e in evals:
        t = eval_tables[e.name]
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
            target = label_maps[e.name].get(f["label"])
            if not len(contain) or target is None:
                absent.append(f["feature"])
                continue
            majority = contain[gold[contain] == target]
            others = contain[gold[contain] != target]
            entry = {**f, "eval_label": target, "rows": len(contain),
                     "majority": _slice(per_row, names, majority, config.bootstrap),
                     "others": _slice(per_row, names, others, config.bootstrap)}
            entry["gap"] = {n: None if entry["majority"]["rows"] == 0 or entry["others"]["rows"] == 0 else
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


def label_collapses(report: dict) -> list[str]:
    """A warning for every (evaluation set, refined corpus, gold label) whose accuracy fell by more than
    ``COLLAPSE`` against the baseline's: the headline's mean over labels can hide one label's collapse."""
    base, out = report["baseline"], []
    for ev, per in report["accuracy"].items():
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


def reading_notes(report: dict) -> list[str]:
    """Notes on what the models read: pairs scored on one text, and evaluation sets in which one input carries
    several gold labels (a model answers an input one way: those rows cap every model's accuracy alike)."""
    out = []
    for ev, info in report["eval"].items():
        if info["pairs_read_as_one_text"]:
            out.append(f"{ev}: the models were trained on single texts, so its pairs are scored on their text_a "
                       "alone (text_b is not read)")
        shared = info["inputs_with_several_labels"]
        if not shared["rows"]:
            continue
        what = f"{ev}: {shared['rows']:,} of its {info['rows']:,} rows share what the models read, " \
               f"{READS[report['reads']]}, with a row of another gold label, so no model can score over " \
               f"{shared['best_possible_accuracy']:.1%}"
        if not shared["separates_models"]:
            what += "; every input carries several labels: this set cannot separate the models"
        out.append(what)
    return out


def _write_report(out: str, report: dict, predictions: pa.Table, storage_options, train: dict | None = None,
                  evals: dict | None = None) -> None:
    with AtomicDir(join(out, "report"), storage_options) as d:
        d.write_parquet("predictions.parquet", predictions)
        d.write_text("report.json", json.dumps(report, indent=1))
        d.write_text("report.html", _html(report, train or {}, evals or {}, storage_options))
        d.commit()


def accuracy_cell(entry: dict) -> str:
    """``mean ± std`` of one (corpus, evaluation set), and its gain over the baseline in points with the 95%
    interval."""
    cell = f"{entry['mean']:.1%}" + (f" ± {entry['std']:.1%}" if entry["std"] is not None else "")
    if "gain" in entry:
        g = entry["gain"]
        cell += f"   {fmt.points(g['delta'])} [{fmt.interval(g['ci95'])}]"
    if entry.get("overlap_rows"):
        cell += f"   (! {entry['overlap_rows']:,} evaluation rows also in training)"
    return cell




SLICES_SHOWN = 5     # features per evaluation set in the console summary (the report has them all)


def console_lines(report: dict) -> list[str]:
    """The console summary: what the models read, each set's accuracies and gains in points, its slices of the
    baseline's most biased features (majority label vs the others, and the gap), then the warnings and notes."""
    names = list(report["train"])
    config = report["config"]
    lines = [f"{config['backend']} reading {READS[report['reads']]}, {config['seeds']} seed(s); training rows: "
             + ", ".join(f"{n} {report['train'][n]['rows']:,}" for n in names)]
    width = max(len(n) for n in names) + 2
    for ev, per in report["accuracy"].items():
        info = report["eval"][ev]
        lines.append(f"{ev} ({info['rows']:,} rows; majority class {info['majority']['label']} "
                     f"{info['majority']['accuracy']:.1%})")
        lines += [f"  {n:<{width}} {accuracy_cell(per[n])}" for n in names]
        slices = report.get("bias_slices", {}).get(ev)
        if slices and slices["features"]:
            lines.append(f"  {report['baseline']}'s most biased features: accuracy on rows of the feature's label "
                         "vs the others (gap)")
            for f in slices["features"][:SLICES_SHOWN]:
                lines.append(f"    {f['feature']} → {f['eval_label']} ({f['rows']:,} rows): " + "; ".join(
                    f"{n} {_pct(f['majority']['accuracy'][n])} vs {_pct(f['others']['accuracy'][n])}"
                    + (f" (gap {100 * f['gap'][n]:.1f} points)" if f["gap"][n] is not None else "") for n in names))
            if len(slices["features"]) > SLICES_SHOWN:
                lines.append(f"    +{len(slices['features']) - SLICES_SHOWN} more in the report")
    lines += [f"WARNING: {w}" for w in report.get("warnings", [])]
    lines += [f"note: {n}" for n in report.get("notes", [])]
    return lines


def _pct(v) -> str:
    return "—" if v is None else f"{v:.1%}"


def _html(report: dict, train: dict, evals: dict, storage_options=None) -> str:
    acc, names, base = report["accuracy"], list(report["train"]), report["baseline"]
    seeds = report["config"]["seeds"]
    train_paths = {n: [train_split(p)[0] for p in paths] for n, paths in train.items()}
    corpus = corpus_name([p for paths in train_paths.values() for p in paths], storage_options)
    read = [f"{n}: {p}" for n, paths in train.items() for p in paths] + \
           [f"{n} (evaluation): {p}" for n, paths in evals.items() for p in paths]
    title = "Compare: the same model trained on each corpus, scored on evaluation sets"
    page = Report(title, corpus, read)
    findings = [f'<p class="bad">{html.escape("Warning: " + w)}</p>' for w in report.get("warnings", [])]
    findings += [note(n) for n in report.get("notes", [])]
    if findings:
        page.section("Warnings and notes", *findings)
    page.section("Accuracy", figure(_bars(report), (
        f"Bars: accuracy on each evaluation set{' (mean over seeds)' if seeds > 1 else ''}, from 0%; whiskers: "
        "its 95% interval (bootstrap over the evaluation rows). Dashed line: always answering the set's majority "
        "class." + (f" A refined corpus's gain over {base}, in points, and its paired bootstrap 95% interval are in "
                    "the table; a gain whose interval excludes 0 is significant." if len(names) > 1 else ""))),
        table(*_accuracy_rows(report)), note(f"The models read {READS[report['reads']]}."))
    for ev, slices in report.get("bias_slices", {}).items():
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
            g = e.get("gain")
            rows.append({"evaluation set": ev, "training corpus": n + (" (baseline)" if n == base else ""),
                         "accuracy": e["mean"], "± std over seeds": e["std"],
                         f"gain over {base}": g and g["delta"], "gain 95% interval": g and g["ci95"],
                         "significant": g and ("yes" if g["significant"] else "no"),
                         "weighted accuracy": e.get("weighted_accuracy"),
                         "evaluation rows also in training": e.get("overlap_rows")})
    columns = ["evaluation set", "training corpus", "accuracy", "± std over seeds", f"gain over {base}",
               "gain 95% interval", "significant", "weighted accuracy", "evaluation rows also in training"]
    columns = columns[:2] + [c for c in columns[2:] if any(r.get(c) is not None for r in rows)]
    rows = [{c: "" if r.get(c) is None else r[c] for c in columns} for r in rows]   # blank where it does not apply
    formats = {"accuracy": fmt.percent, "± std over seeds": fmt.percent, f"gain over {base}": fmt.points,
               "gain 95% interval": fmt.interval, "weighted accuracy": fmt.percent,
               "evaluation rows also in training": fmt.count}
    return rows, columns, {c: _or_blank(f) for c, f in formats.items() if c in columns}


def _or_blank(format_):
    return lambda v: "" if v == "" else format_(v)


def _bars(report: dict) -> str:
    """Grouped bars from 0%: one group per evaluation set, one bar per training corpus, whiskers its accuracy's
    95% interval; the majority class as each group's reference."""
    acc, names = report["accuracy"], list(report["train"])
    evals = list(acc)
    values = [[acc[ev][n]["mean"] for ev in evals] for n in names]     # values[series][group]
    low = [[acc[ev][n]["ci95"][0] for ev in evals] for n in names]
    high = [[acc[ev][n]["ci95"][1] for ev in evals] for n in names]
    reference = [report["eval"][ev]["majority"]["accuracy"] for ev in evals]
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

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        c = self.config
        train, mine = training_corpora(c.baseline, source.paths)
        evals = [parse_eval_set(e, c.label_maps) for e in c.evals]
        r = run(train, evals, out.folder, source.mapping, source.opts, c.model, c.split)
        rows = r["train"][mine]["rows"]
        gains = ", ".join(f"{ev} {fmt.points(per[mine]['gain']['delta'])}" for ev, per in r["accuracy"].items()
                          if "gain" in per[mine])
        gains += "".join(f"; WARNING: {w}" for w in r["warnings"])
        return StageResult(rows + r["train"][mine]["rejected"], {"passed on": rows,
                                                                 "input rejects": r["train"][mine]["rejected"]},
                           r, f"{mine} against {r['baseline']}: {gains or 'no baseline'}")
