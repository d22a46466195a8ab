"""What a comparison reads and trains: the training corpora and evaluation sets, the leak check, and every
(corpus, seed) run, kept under ``OUT/runs/`` (``io.checkpoints``, kept in the finished output).

Each evaluation set keeps its own columns and label set: predictions are mapped onto it by a label map (HANS:
neutral and contradiction → non-entailment), the probabilities of the training labels that map to one evaluation
label are summed, and the most likely evaluation label is the prediction.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from refinery.io.corpus import input_mapping, is_corpus, stage_parts
from refinery.io.schema import is_pair
from refinery.messages import Refusal, Setting
from refinery.methods.compare.config import CompareConfig, path_and_split
from refinery.methods.compare.contamination import contaminated
from refinery.models.evaluation import project, refuse_repeated_names, resolve_label_map
from refinery.models.task_model import (READS, model_reads, model_texts, model_view, overlap_rows, text_keys,
                                       training_rows)
from refinery.io.checkpoints import Checkpoints
from refinery.pipeline.stage_input import SideInput, StageInput

SPLIT_HINT = "NAME=PATH@SPLIT on the command line, compare's train_split: key in a pipeline"

@dataclass
class Corpora:
    """A comparison's data, read and checked: the training corpora ({name: rows}, the first the baseline), what
    the models read of them, and per evaluation set its rows as the models read them, its labels, the map of the
    training labels onto them, how many of its rows each training corpus also holds and which of its rows each
    contaminates (an n-gram of ``config.ngram`` words shared)."""

    config: CompareConfig
    names: list
    tables: dict            # {corpus: the rows it trains on}
    rejects: dict           # {corpus: its input rejects}
    other_splits: dict      # {corpus: rows of other splits left out}
    reads: str              # a READS key
    evals: list             # EvalSet, in order
    eval_tables: dict       # {set: its rows as the models read them}
    eval_rejects: dict
    eval_pairs: dict        # {set: whether it holds pairs}
    eval_labels: dict       # {set: its labels, sorted}
    label_maps: dict        # {set: {training label: its label}}
    leaks: dict             # {set: {corpus: its rows also in the corpus}}
    eval_keys: dict         # {set: the text_keys of its rows}
    contamination: dict     # {set: {corpus: contamination.Contamination}}: its rows sharing an n-gram with it
    train_labels: list      # every training corpus's labels, sorted

    def labels_unscored(self, name: str) -> list:
        """The training labels evaluation set ``name`` lacks and its label map sends nowhere: no prediction is one of
        them (``project`` leaves their probability out; each row is given the likeliest of the set's labels)."""
        return [t for t in self.train_labels if t not in self.label_maps[name]]

    def labels_merged(self, name: str) -> dict:
        """{a label of set ``name``: the training labels predicted as it}, where that is another label or several."""
        merged: dict = {}
        for t, e in self.label_maps[name].items():
            merged.setdefault(e, []).append(t)
        return {e: ts for e, ts in merged.items() if ts != [e]}


def weights(table: pa.Table) -> np.ndarray | None:
    """The rows' ``weight`` column (sample weights), if they have one."""
    if "weight" not in table.column_names:
        return None
    return table["weight"].to_numpy(zero_copy_only=False).astype(np.float64)


def read_corpora(train: dict, evals: list, source: StageInput, config: CompareConfig,
                 split: str | None) -> Corpora:
    """The training corpora ({name: paths}, a path may end in ``@SPLIT``, else it trains on ``split``: see
    ``training_rows``) and the evaluation sets, read through ``source``'s mapping and options (an evaluation set
    through its own preset where it has one) and checked: labels mapped, breakdown columns present, and no
    evaluation row in a training corpus unless ``config.allow_overlap``; then each set's rows each corpus
    contaminates (``contamination``)."""
    if not train or not evals:
        raise Refusal("compare needs at least one training corpus and one evaluation set", code="missing-setting")
    refuse_repeated_names(evals)
    tables, rejects, other_splits = {}, {}, {}
    for name, paths in train.items():
        selected = [path_and_split(p) for p in paths]
        splits = {s for _, s in selected}
        if len(splits) > 1:
            raise Refusal(f"training corpus {name}: its paths name different splits ({', '.join(map(str, splits))})",
                          code="conflicting-settings")
        table, rejects[name] = source.read_side(SideInput(tuple(p for p, _ in selected), source.mapping))
        tables[name], other_splits[name] = training_rows(f"training corpus {name}", table, splits.pop() or split,
                                                         SPLIT_HINT)
        if not tables[name].num_rows:
            raise Refusal(f"training corpus {name}: no good rows in {', '.join(paths)}", code="all-rejected")
    train_labels = sorted(set().union(*(set(t["label"].to_pylist()) for t in tables.values())))
    reads = model_reads(tables, config.inputs)
    eval_tables, eval_rejects, label_maps, eval_labels, eval_pairs = {}, {}, {}, {}, {}
    for e in evals:
        mapping = e.mapping(source.mapping)
        raw = [p for p in e.paths if mapping is None and not is_corpus(p, source.opts.storage_options)
               and not stage_parts(p, source.opts.storage_options)   # a stage's folder: load names its parts
               and not _as_is(p, source)]
        if raw:
            raise Refusal(f"evaluation set {e.name}: {raw[0]} is a raw file not in refinery's columns, read with "
                          f"no preset: give its preset, {e.name}={raw[0]}:PRESET (e.g. :snli, :hans)",
                          code="missing-columns")
        table, eval_rejects[e.name] = source.read_side(SideInput(tuple(e.paths), mapping))
        if not table.num_rows:
            raise Refusal(e.no_good_rows(eval_rejects[e.name]), code="all-rejected")
        eval_pairs[e.name] = is_pair(table)
        eval_tables[e.name] = model_view(table, reads, e.name)
        eval_labels[e.name] = sorted(set(eval_tables[e.name]["label"].to_pylist()))
        label_maps[e.name] = resolve_label_map(train_labels, eval_labels[e.name], e.full_label_map(), e.name)
    for col in config.by:
        for e in evals:
            if col not in eval_tables[e.name].column_names:
                raise Refusal(f"evaluation set {e.name} has no column {col!r} to break down by "
                              f"(columns: {', '.join(eval_tables[e.name].column_names)})", code="missing-columns")
    train_keys = {n: text_keys(t, reads) for n, t in tables.items()}
    eval_keys = {e.name: text_keys(eval_tables[e.name], reads) for e in evals}
    leaks = {e.name: {n: overlap_rows(eval_keys[e.name], keys) for n, keys in train_keys.items()} for e in evals}
    overlap = [(ev, n, c) for ev, per in leaks.items() for n, c in per.items() if c]
    if overlap and not config.allow_overlap:
        ev, n, c = overlap[0]
        raise Refusal(f"{c:,} of the {eval_tables[ev].num_rows:,} rows of evaluation set {ev} are also in training "
                      f"corpus {n} (same texts where the models read {READS[reads]}): its scores would be inflated. "
                      f"Train on another split ({SPLIT_HINT}), remove those rows, or allow the overlap to report them "
                      "marked (", Setting("allow_overlap", True),
                      "; allow_overlap: true under compare's model: in a pipeline)", code="evaluation-overlap")
    found = contaminated({n: model_texts(t, reads) for n, t in tables.items()}, {n: t["id"] for n, t in tables.items()},
                         {e.name: model_texts(eval_tables[e.name], reads) for e in evals},
                         {e.name: eval_tables[e.name]["id"] for e in evals}, config.ngram)
    return Corpora(config, list(train), tables, rejects, other_splits, reads, list(evals), eval_tables, eval_rejects,
                   eval_pairs, eval_labels, label_maps, leaks, eval_keys, found, train_labels)


def _as_is(path: str, source: StageInput) -> bool:
    """Whether the raw file ``path`` reads without a preset: it is in refinery's columns (``input_mapping``)."""
    try:
        return input_mapping(path, None, source.opts) is not None
    except ValueError:
        return False


def run_fingerprint(config: CompareConfig, train_print: tuple, seed: int, eval_prints: list) -> str:
    """A run's identity: the model, the seed, and the training corpus and evaluation sets as
    ``input_fingerprints`` sees them (a finished corpus by its manifest, a raw file by size and checksum)."""
    data = {"model": config.model_key(), "seed": seed, "replicate": config.backend == "ngram" and config.seeds > 1,
            "train": train_print, "eval": eval_prints}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def trained_runs(jobs: list, data: Corpora, engine: str, runs: Checkpoints) -> list:
    """``predictions_of`` each job ({name, seed, key}), in order: one after the other in this process, or under
    ``--engine ray`` each as a Ray task, side by side (the corpora put in the object store once; where the output
    is on this machine's disk and the cluster has other nodes, in this process, which alone reaches it). ``runs``:
    the output's ``runs/``, where each finished run is kept."""
    from refinery.pipeline.engine import map_calls, single_node
    from refinery.progress import progress

    if engine == "ray" and (not runs.local or single_node()):
        return map_calls(predictions_of, jobs, {"data": data, "runs": runs}, engine="ray", desc="compare")
    return [predictions_of(data, **job, runs=runs) for job in progress(jobs, desc="compare", unit=" run")]


def predictions_of(data: Corpora, name: str, seed: int, key: str, runs: Checkpoints) -> pa.Table:
    """The predictions of corpus ``name``'s model of ``seed`` on every evaluation set: a finished run of
    fingerprint ``key`` reused, else trained, scored and kept in ``runs`` (a finished run survives an interrupted
    comparison, and a later comparison of the same output reuses it)."""
    run = f"{_safe(name)}-seed{seed}"
    fingerprint = {"fingerprint": key, "corpus": name, "seed": seed}
    table = runs.get(run, "predictions.parquet", key=fingerprint)
    if table is not None:
        return table
    model = _fit(data.config, data.tables[name], seed)
    parts = []
    for e in data.evals:
        t = data.eval_tables[e.name]
        best, prob = _predict(model, t, data.label_maps[e.name], data.eval_labels[e.name])
        n = t.num_rows
        parts.append(pa.table({
            "corpus": pa.array([name] * n, pa.string()), "seed": pa.array([seed] * n, pa.int32()),
            "eval": pa.array([e.name] * n, pa.string()), "id": t["id"], "gold": t["label"],
            "prediction": pa.array([data.eval_labels[e.name][i] for i in best], pa.string()),
            "probability": pa.array(prob)}))
    table = pa.concat_tables(parts)
    with runs.folder(run, fingerprint) as d:
        d.write_parquet("predictions.parquet", table)
    return table


def _fit(config: CompareConfig, table: pa.Table, seed: int):
    """The task model fitted on ``table`` (weights as sample weights); the n-gram model, being
    deterministic, on a bootstrap replicate of it when several seeds are asked for."""
    if config.backend == "ngram" and config.seeds > 1:
        table = table.take(pa.array(np.random.default_rng(seed).integers(0, table.num_rows, table.num_rows)))
    model = config.classifier(seed)
    w = weights(table)
    return model.fit(table, sample_weight=w) if w is not None else model.fit(table)


def _predict(model, table: pa.Table, label_map: dict, eval_labels: list) -> tuple[np.ndarray, np.ndarray]:
    p = project(model.predict_proba(table), list(model.classes_), label_map, eval_labels)
    best = p.argmax(axis=1)
    return best, p[np.arange(len(best)), best]


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
