"""IBADR (Wang et al. 2023; METHODS §6): iterative bias-aware dataset refinement.

The pool S starts as the corpus. Each iteration:
  1. bias degree p(y | x; θs) of every pool row from the shallow model; rows sorted and cut into
     N_bi equal groups with indicators b1 (least biased) … bN;
  2. the generator θg is fine-tuned on "b, y → x" (loss −log p(x | b, y); 3 epochs the first
     iteration, 1 after), x the pair written as ``[P] premise [H] hypothesis``;
  3. pseudo samples are drawn with y uniform and b_r, r uniform in 1..⌊N_bi/2⌋, and parsed back
     (malformed generations rejected with a reason);
  4. the task model's confidence p_M(y | x) must exceed ε; accepted rows join the pool;
  5. USM: θs is fine-tuned on a random sample of the pool.
Each finished iteration is a checkpoint (pool, shallow model, generator, report); a killed run
resumes from the last one and, with the same seed, ends with the same pool. Ablations (paper
Table 5): ``usm=False``, ``lowest_indicator=True`` (b_r → b1), ``indicator=False``, ``iterate=False``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.core.validation import NOT_EMPTY, SEED, at_least, number_in, one_of, setting, validate
from refinery.io.schema import is_pair
from refinery.io.storage import AtomicDir, get_fs, is_local, join
from refinery.methods.confidence import CROSS_FIT, label_confidence
from refinery.models.generate import DEFAULT_GENERATOR, Sampling
from refinery.models.precision import PRECISIONS
from refinery.pipeline.stage import Output, Resources, Stage, StageInput, StageResult
from refinery.report import format as fmt
from refinery.report.page import Report, config_table, corpus_name, fields, note, table

POOL_SCHEMA = pa.schema([("id", pa.string()), ("text_a", pa.string()), ("text_b", pa.string()),
                         ("label", pa.string()), ("source", pa.string()), ("iteration", pa.int32()),
                         ("indicator", pa.string()), ("confidence", pa.float64()), ("sampling", pa.string())])
GENERATED_SCHEMA = pa.schema([("id", pa.string()), ("prompt", pa.string()), ("label", pa.string()),
                              ("indicator", pa.string()), ("generated", pa.string()), ("text_a", pa.string()),
                              ("text_b", pa.string()), ("confidence", pa.float64()), ("status", pa.string()),
                              ("reason", pa.string())])
_PAIR = re.compile(r"^\s*\[P\]\s*(?P<a>.*?)\s*\[H\]\s*(?P<b>.*?)\s*$", re.S)
_SINGLE = re.compile(r"^\s*\[T\]\s*(?P<a>.*?)\s*$", re.S)


@dataclass(frozen=True)
class IbadrConfig:
    groups: int = setting(5, at_least(2), "N_bi, the number of bias indicators (b_r draws r in 1..⌊N_bi/2⌋).")
    iterations: int = setting(5, at_least(1), "N_iter.")
    per_iteration: int = setting(200_000, at_least(1), "Pseudo samples generated per iteration.")
    shallow_rows: int = setting(2000, at_least(1), "θs's initial training sample.")
    usm_rows: int = setting(2000, at_least(1), "USM: pool rows the shallow model is updated on.")
    shallow: str = setting("ngram", one_of(*CROSS_FIT), "The shallow model θs.")
    task_model: str = setting("ngram", one_of(*CROSS_FIT), "The confidence filter's model M, fit on the corpus.")
    tau: float = setting(0.5, number_in(0, 1, open_high=True), "ε: the task model's confidence a pseudo sample "
                                                               "must exceed.")
    generator: str = setting(DEFAULT_GENERATOR, NOT_EMPTY, "Generator θg: a model name or folder.")
    first_epochs: int = setting(3, at_least(1), "Generator epochs in the first iteration.")
    later_epochs: int = setting(1, at_least(1), "Generator epochs in later iterations.")
    lr: float = setting(5e-5, number_in(0, open_low=True), "Generator learning rate.")
    train_batch_size: int = setting(8, at_least(1), "Generator fine-tuning batch size.")
    max_length: int = setting(128, at_least(1), "Longest training sequence, in tokens.")
    train_precision: str = setting("auto", one_of(*PRECISIONS), "Generator fine-tuning precision.")
    sampling: Sampling = setting(Sampling(temperature=1.0, top_p=0.9, max_new_tokens=64), help="θg's sampling.",
                                 skip=("n", "seed"))   # one sample per prompt, drawn with ``seed``
    usm: bool = setting(True, help="Update the shallow model each iteration (ablation: off).")
    resume: bool = setting(True, help="Continue from the last finished iteration checkpointed in the output folder "
                                      "(off: start over).")
    lowest_indicator: bool = setting(False, help="Ablation: generate with b1 only (b_r → b1).")
    indicator: bool = setting(True, help="Bias indicators (ablation: off).")
    iterate: bool = setting(True, help="Iterate (ablation: one iteration generating all samples at once).",
                            option="--iterate/--no-iteration")
    seed: int = setting(0, SEED, "Seed of samples, draws and training.")
    sample_rows: int | None = setting(None, at_least(1).or_none(), "Start from a seeded random sample of the corpus.")
    backend: str = setting("transformers", one_of("transformers", "vllm"), "Generation backend of the fine-tuned "
                                                                           "generator.")
    batch_size: int = setting(16, at_least(1), "Prompts per generator call.")

    def __post_init__(self):
        validate(self)

    def to_dict(self) -> dict:
        return asdict(self)

    def checkpoint_key(self) -> dict:
        """What a checkpoint must share with the run that resumes it (not where or how fast it generates)."""
        return {k: v for k, v in json.loads(json.dumps(self.to_dict())).items() if k not in ("backend", "batch_size", "resume")}

    @classmethod
    def from_dict(cls, d: dict) -> "IbadrConfig":
        return cls(**{**d, "sampling": Sampling(**d["sampling"])})


PROFILES = {
    "paper": IbadrConfig(),
    # CPU: SmolLM2-135M, the n-gram shallow and task models, a few hundred samples per iteration
    "small": IbadrConfig(iterations=2, per_iteration=300, shallow_rows=2000, usm_rows=2000, first_epochs=1,
                         lr=1e-4, train_batch_size=16, max_length=96, tau=0.4,
                         sampling=Sampling(temperature=1.0, top_p=0.9, max_new_tokens=56)),
}


# ---------------------------------------------------------------- the pieces of an iteration

def indicator_groups(bias: np.ndarray, ids: list, groups: int) -> np.ndarray:
    """Group 1 … N_bi per row: sorted by bias degree (ties by id), cut into equal groups (b1 least biased)."""
    order = np.lexsort((np.asarray(ids, dtype=object).astype(str), bias))
    group = np.empty(len(bias), dtype=np.int64)
    group[order] = np.arange(len(bias)) * groups // max(len(bias), 1) + 1
    return group


def conditioning(label: str, group: int | None) -> str:
    """The generator's input "b, y": ``<b2> <entailment>`` (no indicator: ``<entailment>``)."""
    return (f"<b{group}> " if group is not None else "") + f"<{label}>\n"


def serialize(text_a: str, text_b: str | None) -> str:
    """x in the fixed format the generator learns."""
    return f"[P] {text_a} [H] {text_b}" if text_b is not None else f"[T] {text_a}"


def parse(generated: str, pair: bool) -> tuple[str | None, str | None, str | None]:
    """(text_a, text_b, reason): the reason is set when the generation is malformed."""
    m = (_PAIR if pair else _SINGLE).match(generated or "")
    if m is None:
        return None, None, "no [P] … [H] … structure" if pair else "no [T] marker"
    a, b = m.group("a"), (m.group("b") if pair else None)
    if not a or (pair and not b):
        return None, None, "empty premise or hypothesis" if pair else "empty text"
    if pair and ("[P]" in b or "[H]" in b):
        return None, None, "repeated markers"
    return a, b, None


def distinct_n(texts: list[str], n: int) -> float:
    """Distinct-n: distinct n-grams over all n-grams of the texts."""
    grams = [tuple(toks[i:i + n]) for t in texts for toks in [t.lower().split()] for i in range(len(toks) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def _rng(config: IbadrConfig, iteration: int, purpose: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{config.seed}:{iteration}:{purpose}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def _sample(table: pa.Table, rows: int, rng: np.random.Generator) -> pa.Table:
    if table.num_rows <= rows:
        return table
    return table.take(pa.array(np.sort(rng.choice(table.num_rows, rows, replace=False))))


def _classifier(kind: str, config: IbadrConfig):
    from refinery.models.base import make_classifier

    params = {"seed": config.seed, "epochs": 3, "precision": config.train_precision} if kind == "transformer" else {}
    return make_classifier(kind, "pair", **params)


def _with_training_params(model, config: IbadrConfig):
    """A reloaded shallow model with the training parameters of a fresh one (so USM after a resume
    trains exactly as it would have without the interruption)."""
    fresh = _classifier(config.shallow, config)
    for name in ("epochs", "seed", "lr", "batch_size", "precision"):
        if hasattr(fresh, name):
            setattr(model, name, getattr(fresh, name))
    return model


def fine_tune_shallow(model, sample: pa.Table):
    """USM: the shallow model fine-tuned on a pool sample (the encoder continues from its weights;
    the n-gram model is convex, so fine-tuning to convergence is refitting on the sample)."""
    if getattr(model, "kind", "") == "transformer":
        return model.fit(sample, warm_start=True)
    return model.fit(sample)


# ---------------------------------------------------------------- one iteration

def run_iteration(pool: pa.Table, iteration: int, count: int, shallow, task_model, generator_from: str,
                  config: IbadrConfig, workdir: str, backend: str, backend_kwargs: dict, engine: str,
                  batch_size: int) -> tuple[pa.Table, pa.Table, dict]:
    """Steps 1–4 of one iteration; the fine-tuned generator is saved in ``workdir/generator``."""
    from refinery.models.generate import TransformersGenerator
    from refinery.models.stages import generate_table

    pair = is_pair(pool)
    ids = pool["id"].to_pylist()
    bias = label_confidence(pool, shallow)  # the bias degree p(y | x; θs)
    original = np.asarray(pool["source"].to_pylist()) == "original"
    groups = indicator_groups(bias, ids, config.groups)
    labels = pool["label"].to_pylist()
    heads = [conditioning(y, int(g) if config.indicator else None) for y, g in zip(labels, groups)]
    targets = [serialize(a, b) for a, b in zip(pool["text_a"].to_pylist(), pool["text_b"].to_pylist())]
    generator = TransformersGenerator(generator_from, chat=False, batch_size=batch_size)
    epochs = config.first_epochs if iteration == 1 else config.later_epochs
    generator.fit(heads, targets, epochs=epochs, lr=config.lr, batch_size=config.train_batch_size,
                  max_length=config.max_length, precision=config.train_precision, seed=config.seed + iteration)
    path = os.path.join(workdir, "generator")
    generator.save(path)
    train_precision = generator.precision_.to_dict()
    del generator

    rng = _rng(config, iteration, "generate")
    label_set = sorted(set(labels))
    ys = rng.choice(label_set, count).tolist()
    top = 1 if config.lowest_indicator else max(config.groups // 2, 1)
    rs = rng.integers(1, top + 1, count).tolist()
    prompts = [conditioning(y, r if config.indicator else None) for y, r in zip(ys, rs)]
    sampling = replace(config.sampling, n=1, seed=config.sampling.seed + 1000 * iteration)
    out = generate_table(pa.table({"prompt": pa.array(prompts, pa.string())}), backend,
                         {**backend_kwargs, "model": path, "chat": False}, sampling, engine, batch_size,
                         resources=IbadrStage.resources)
    texts, errors = out["generated"].to_pylist(), out["generation_error"].to_pylist()
    rows = []
    for k, (prompt, y, r, outs, err) in enumerate(zip(prompts, ys, rs, texts, errors)):
        raw = (outs or [""])[0]
        a, b, reason = parse(raw, pair) if err is None else (None, None, f"generation error: {err}")
        rows.append({"id": f"ibadr-{iteration}-{k}", "prompt": prompt, "label": y,
                     "indicator": f"b{r}" if config.indicator else None, "generated": raw, "text_a": a,
                     "text_b": b, "confidence": None, "status": "malformed" if reason else "parsed",
                     "reason": reason})
    parsed = [r for r in rows if r["status"] == "parsed"]
    if parsed:
        candidates = pa.Table.from_pylist([{c: r[c] for c in ("id", "text_a", "text_b", "label")} for r in parsed])
        conf = label_confidence(candidates, task_model)  # p_M(y | x)
        for r, c in zip(parsed, conf):
            r["confidence"] = float(c)
            r["status"] = "accepted" if c > config.tau else "low-confidence"
            if c <= config.tau:
                r["reason"] = f"p_M(label | x) = {c:.3f} <= tau {config.tau}"
    generated = pa.Table.from_pylist(rows, schema=GENERATED_SCHEMA)
    sampling_json = json.dumps(asdict(sampling), sort_keys=True)
    accepted = pa.Table.from_pylist(
        [{"id": r["id"], "text_a": r["text_a"], "text_b": r["text_b"], "label": r["label"], "source": "generated",
          "iteration": iteration, "indicator": r["indicator"], "confidence": r["confidence"],
          "sampling": sampling_json} for r in rows if r["status"] == "accepted"], schema=POOL_SCHEMA)
    well_formed = [r["text_b"] if pair else r["text_a"] for r in rows if r["status"] != "malformed"]
    stats = {"iteration": iteration, "pool_before": pool.num_rows, "generated": len(rows),
             "malformed": sum(r["status"] == "malformed" for r in rows),
             "low_confidence": sum(r["status"] == "low-confidence" for r in rows), "accepted": accepted.num_rows,
             "acceptance_rate": accepted.num_rows / max(len(rows), 1),
             "distinct_1": distinct_n(well_formed, 1), "distinct_2": distinct_n(well_formed, 2),
             "indicators": dict(sorted(Counter(f"b{r}" for r in rs).items())) if config.indicator else {},
             "train_precision": train_precision,
             # the shallow model's bias degrees of the original rows: equal across iterations iff θs did not change
             "shallow_fingerprint": hashlib.sha1(np.round(bias[original], 6).tobytes()).hexdigest()[:16]}
    return accepted, generated, stats


# ---------------------------------------------------------------- the run, checkpoints and report

def initial_pool(table: pa.Table) -> pa.Table:
    n = table.num_rows
    return pa.table({"id": table["id"], "text_a": table["text_a"],
                     "text_b": table["text_b"] if "text_b" in table.column_names else pa.nulls(n, pa.string()),
                     "label": table["label"], "source": pa.array(["original"] * n, pa.string()),
                     "iteration": pa.array([0] * n, pa.int32()), "indicator": pa.nulls(n, pa.string()),
                     "confidence": pa.nulls(n, pa.float64()), "sampling": pa.nulls(n, pa.string())},
                    schema=POOL_SCHEMA)


def _checkpoint(out: str, iteration: int) -> str:
    return os.path.join(out, "checkpoints", f"iter-{iteration:03d}")


def last_checkpoint(out: str, config: IbadrConfig) -> int:
    """The last finished iteration saved under ``out`` with this config (0 if none). Temporary folders are
    skipped: a dead run's are removed by ``AtomicDir`` when their iteration is written again."""
    folder = os.path.join(out, "checkpoints")
    if not os.path.isdir(folder):
        return 0
    done = 0
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if ".tmp-" in name:
            continue
        with open(os.path.join(path, "state.json")) as fh:
            state = json.load(fh)
        if state["config"] != config.checkpoint_key():
            raise ValueError(f"{path} was written with another configuration; use a new --out or --mode overwrite")
        done = max(done, state["iteration"])
    return done


def z_in(top: dict, rows: pa.Table) -> dict:
    """For each of the original's top features (``{label: [{"feature", "z", …}]}``) its z* in ``rows``
    (every feature counted, min count 1; None where absent)."""
    from refinery.methods.audit import AuditConfig, audit_table

    z = {}
    if rows.num_rows:
        stats = audit_table(rows, AuditConfig(min_count=1)).stats.to_table()
        z = dict(zip(zip(stats["feature"].to_pylist(), stats["label"].to_pylist()), stats["z"].to_pylist()))
    return {label: [{"feature": e["feature"], "z_original": e["z"], "z_generated": z.get((e["feature"], label))}
                    for e in entries] for label, entries in top.items()}


def checkpoint_root(out: str, storage_options: dict | None = None) -> str:
    """Where the checkpoints of a run into ``out`` live: ``out`` itself on a local disk; for an object
    store, a local folder named by the URL (models are saved as folders), so a rerun on this machine resumes."""
    fs, path = get_fs(out, storage_options)
    if is_local(fs):
        return path
    digest = hashlib.sha256(out.encode()).hexdigest()[:16]
    return os.path.join(os.path.expanduser("~/.cache/refinery/ibadr"), digest)


def sample_input(table: pa.Table, config: IbadrConfig) -> pa.Table:
    """The rows IBADR starts from: all, or ``sample_rows`` of them drawn with ``seed`` (input order kept)."""
    if not config.sample_rows or config.sample_rows >= table.num_rows:
        return table
    pick = np.sort(np.random.default_rng(config.seed).choice(table.num_rows, config.sample_rows, replace=False))
    return table.take(pa.array(pick))


def run(table: pa.Table, out: str, config: IbadrConfig = IbadrConfig(), engine: str = "local", mode: str = "resume",
        input_rejects: pa.Table | None = None, storage_options: dict | None = None, inputs=()) -> dict:
    """IBADR over ``table`` (or its ``sample_rows``) into ``out``: ``pool`` (a corpus), ``generated`` (every
    pseudo sample with its status and reason), ``report``; checkpoints under ``checkpoint_root(out)/checkpoints``
    (``mode=resume`` continues from the last one); ``inputs``: the paths the table was read from, for the report."""
    from refinery.progress import progress

    from refinery.methods.audit import audit_table
    from refinery.models.base import load_classifier

    rows_given = table.num_rows
    table = sample_input(table, config)
    work = checkpoint_root(out, storage_options)
    if mode == "overwrite":
        shutil.rmtree(os.path.join(work, "checkpoints"), ignore_errors=True)
    iterations = config.iterations if config.iterate else 1
    per_iteration = config.per_iteration if config.iterate else config.per_iteration * config.iterations
    original = initial_pool(table)
    done = last_checkpoint(work, config)
    if done:
        path = _checkpoint(work, done)
        pool = pq.read_table(os.path.join(path, "pool.parquet"))
        shallow = _with_training_params(load_classifier(os.path.join(path, "shallow")), config)
        with open(os.path.join(path, "state.json")) as fh:
            history = json.load(fh)["history"]
    else:
        pool, history = original, []
        shallow = _classifier(config.shallow, config).fit(
            _sample(original, config.shallow_rows, _rng(config, 0, "shallow")))
    task_model = _classifier(config.task_model, config).fit(table)
    original_top = audit_table(table).top_k(10)
    for iteration in progress(range(done + 1, iterations + 1), desc="ibadr iterations"):
        generator_from = os.path.join(_checkpoint(work, iteration - 1), "generator") if iteration > 1 \
            else config.generator
        with AtomicDir(_checkpoint(work, iteration)) as ckpt:
            accepted, generated, stats = run_iteration(pool, iteration, per_iteration, shallow, task_model,
                                                       generator_from, config, ckpt.tmp, config.backend, {},
                                                       engine, config.batch_size)
            pool = pa.concat_tables([pool, accepted])
            if config.usm:
                shallow = fine_tune_shallow(shallow, _sample(pool, config.usm_rows, _rng(config, iteration, "usm")))
            stats["pool_after"] = pool.num_rows
            stats["original_top_features"] = z_in(original_top, accepted)
            history.append(stats)
            pq.write_table(pool, ckpt.file("pool.parquet"))
            pq.write_table(generated, ckpt.file("generated.parquet"))
            shallow.save(ckpt.file("shallow"))
            ckpt.write_text("state.json", json.dumps({"iteration": iteration, "config": config.checkpoint_key(),
                                                      "history": history}, default=str))
            ckpt.commit()
        if iteration > 1:  # only the last generator is needed to go on
            shutil.rmtree(os.path.join(_checkpoint(work, iteration - 1), "generator"), ignore_errors=True)
    report = write_outputs(out, work, table, pool, history, config, iterations, original_top, input_rejects,
                           storage_options, inputs)
    report["not_sampled"] = rows_given - table.num_rows
    return report


def write_outputs(out: str, work: str, table: pa.Table, pool: pa.Table, history: list, config: IbadrConfig,
                  iterations: int, original_top: dict, input_rejects: pa.Table | None = None,
                  storage_options: dict | None = None, inputs=()) -> dict:
    from refinery.io.corpus import write_table

    generated = pa.concat_tables([pq.read_table(os.path.join(_checkpoint(work, i), "generated.parquet"))
                                  for i in range(1, iterations + 1)], promote_options="permissive") \
        if iterations else pa.Table.from_pylist([], schema=GENERATED_SCHEMA)
    pool_manifest = write_table(pool, join(out, "pool"), rejects=input_rejects, mode="overwrite",
                                config={"ibadr": config.to_dict()}, storage_options=storage_options)
    accepted = pool.filter(pc.equal(pool["source"], "generated"))
    summary = z_in(original_top, accepted)
    report = {"original_rows": table.num_rows, "pool_rows": pool.num_rows, "accepted": accepted.num_rows,
              "generated": generated.num_rows,
              "by_status": dict(sorted(Counter(generated["status"].to_pylist()).items())),
              "iterations": history, "original_top_features_in_accepted": summary,
              "mean_top_z": {"original": _mean([e["z_original"] for v in summary.values() for e in v]),
                             "accepted": _mean([e["z_generated"] or 0.0 for v in summary.values() for e in v])},
              "train_precision": history[-1]["train_precision"] if history else None,
              "input_rejected": pool_manifest["rejected"],
              "backend": config.backend, "config": config.to_dict()}
    with AtomicDir(join(out, "generated"), storage_options) as d:
        sink = pa.BufferOutputStream()
        pq.write_table(generated, sink)
        d.write_bytes("generated.parquet", sink.getvalue().to_pybytes())
        d.commit()
    with AtomicDir(join(out, "report"), storage_options) as d:
        d.write_text("report.json", json.dumps(report, indent=1, default=str))
        d.write_text("report.html", _html(report, list(inputs), storage_options))
        d.commit()
    return report


def _html(report: dict, inputs: list, storage_options: dict | None = None) -> str:
    precision = report["train_precision"]
    facts = {"original rows": report["original_rows"], "pseudo samples generated": report["generated"],
             "accepted into the pool": report["accepted"], "pool rows": report["pool_rows"],
             "input rejects": report["input_rejected"], "generator backend": report["backend"]}
    if precision:
        facts["generator fine-tuned in"] = (f"{precision['dtype']} on {precision['device']} "
                                            f"({precision['requested']}: {precision['reason']})")
    generated = max(report["generated"], 1)
    statuses = [{"status": s, "pseudo samples": n, "share": n / generated} for s, n in report["by_status"].items()]
    history = report["iterations"]
    columns = {f"iteration {h['iteration']}": h for h in history}   # one column per iteration, a row per measure
    measures = [("pool before", lambda h: h["pool_before"]), ("generated", lambda h: h["generated"]),
                ("malformed", lambda h: h["malformed"]), ("low confidence", lambda h: h["low_confidence"]),
                ("accepted", lambda h: h["accepted"]), ("acceptance rate", lambda h: fmt.percent(h["acceptance_rate"])),
                ("distinct-1", lambda h: h["distinct_1"]), ("distinct-2", lambda h: h["distinct_2"])]
    measures += [(f"prompts with indicator {b}", lambda h, b=b: h["indicators"].get(b, 0))
                 for b in sorted({b for h in history for b in h["indicators"]})]
    measures.append(("pool after", lambda h: h.get("pool_after")))
    iterations = [{"": name, **{c: get(h) for c, h in columns.items()}} for name, get in measures]
    as_text = lambda v: v if isinstance(v, str) else fmt.value(v)  # noqa: E731
    top = [{"label": label, "feature": e["feature"], "z* in the original": e["z_original"],
            "z* in the accepted": e["z_generated"] if e["z_generated"] is not None else "absent"}
           for label, entries in report["original_top_features_in_accepted"].items() for e in entries]
    mean = report["mean_top_z"]
    return (Report("IBADR: iterative bias-aware dataset refinement (Wang et al. 2023)",
                   corpus_name(inputs, storage_options), inputs)
            .section("Pool", fields(facts))
            .section("Pseudo samples by status", table(statuses, formats={"share": fmt.percent}),
                     note("generated/ holds every pseudo sample with its status and the reason it was set aside."))
            .section("Iterations", table(iterations, ["", *columns], {c: as_text for c in columns}),
                     note("distinct-n: the share of distinct n-grams among the well-formed pseudo samples."))
            .section("The original's top biased features in the accepted pseudo samples", table(
                top, formats={"z* in the original": fmt.z, "z* in the accepted": lambda v: v if isinstance(v, str)
                              else fmt.z(v)}),
                note(f"Mean z* of these features: {fmt.z(mean['original'])} in the original, "
                     f"{fmt.z(mean['accepted'])} in the accepted pseudo samples (absent counts as 0)."))
            .section("Configuration", config_table(report["config"]))
            .html())


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def accounting(report: dict) -> tuple[int, dict]:
    """(rows in, where they went) of a run's report: every input row is in the pool, not sampled, or rejected."""
    return report["original_rows"] + report["not_sampled"] + report["input_rejected"], {
        "in the pool": report["original_rows"], "not sampled": report["not_sampled"],
        "input rejects": report["input_rejected"]}


class IbadrStage(Stage):
    """IBADR: iterative bias-aware generation of low-bias pseudo samples (Wang et al. 2023).

    Writes ``pool/`` (the corpus and the accepted pseudo samples: what a pipeline's next stage reads),
    ``generated/`` (every pseudo sample, its status and reason), ``report/`` and ``checkpoints/``.
    """

    name, Config = "ibadr", IbadrConfig
    needs = ("id", "text_a", "label")
    adds = ("source", "iteration", "indicator", "confidence")
    resources = Resources(cpus=1, memory_gb=4)
    output = Output.POOL
    profiles = PROFILES

    def run(self, source: StageInput, out: str) -> StageResult:
        table, rejects = source.load()
        r = run(table, out, self.config, source.engine, "resume" if self.config.resume else "overwrite",
                input_rejects=rejects, storage_options=source.opts.storage_options, inputs=source.paths)
        z = {k: "n/a" if v is None else f"{v:.2f}" for k, v in r["mean_top_z"].items()}
        used = r["iterations"][-1]["train_precision"] if r["iterations"] else None
        lines = (*(f"iteration {h['iteration']}: generated {h['generated']:,}, malformed {h['malformed']:,}, "
                   f"low confidence {h['low_confidence']:,}, accepted {h['accepted']:,} -> pool {h['pool_after']:,}"
                   for h in r["iterations"]),
                 f"mean z* of the original's top features: {z['original']} (original) vs "
                 f"{z['accepted']} (accepted pseudo samples)",
                 *([f"generator fine-tuned in {used['dtype']} ({used['requested']}: {used['reason']})"] if used else []))
        return StageResult(*accounting(r), r, f"{r['generated']:,} pseudo samples, {r['accepted']:,} accepted "
                                              f"-> pool {r['pool_rows']:,}", lines)
