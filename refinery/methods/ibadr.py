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

What it did to the shortcuts (``ShortcutAudit``): the original rows are audited once (the audit's features and
prior rule); the original's top features are measured in each iteration's accepted pseudo samples under the
original's p0, and the pool is judged against the original (``core.verdict``). IBADR promises to make no shortcut
stronger and to weaken the original's: the verdict warns when a feature crossed the threshold or a label's max z*
rose, and notes when nothing was weakened. The pool is counted as the original plus the accepted samples (one
tokenization of each).
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

from refinery.core import stats as zstats
from refinery.core.features import FeatureConfig
from refinery.core.validation import NOT_EMPTY, SEED, at_least, number_in, one_of, setting, validate
from refinery.io.schema import is_pair
from refinery.io.location import get_fs, is_local, join
from refinery.io.publishing import AtomicDir
from refinery.core.verdict import Verdict, judge
from refinery.core.weighted_counts import WeightedCounts
from refinery.methods.confidence import CROSS_FIT, label_confidence
from refinery.methods.razor import weakened_nothing
from refinery.models.generate import DEFAULT_GENERATOR, Sampling
from refinery.models.precision import PRECISIONS
from refinery.pipeline.filter import verdict_headline
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Resources, Stage, StageInput, StageResult
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
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


class ShortcutAudit:
    """The audit of the original rows and of the pool they grow into, on the audit's ``features`` and prior rule.

    The original is counted once (``WeightedCounts``, two weightings: the original and the pool); ``top`` are its
    k most biased features per label (z* under its p0, n ≥ 10). ``in_rows``: those features' z* in other rows (the
    pseudo samples) under the same p0. ``judge_pool``: the verdict on the pool (the original and the accepted
    samples) against the original. Under an empirical prior each side's p0 is its own label shares: the samples'
    labels are drawn uniformly, so the pool's shares move, and under the original's shares every common word of
    a label that gained rows would read as a bias.
    """

    def __init__(self, table: pa.Table, features: FeatureConfig, k: int = 10):
        self.features = features
        self.counts = WeightedCounts(None, features, 2).add(table, None, None)
        self.prior = zstats.choose_prior("auto", self.counts.label_totals(0))
        self.before = self.counts.stats(0, self._p0(0))
        self.top = self.before.top_k(k)

    def _p0(self, weighting: int) -> np.ndarray:
        totals = self.counts.label_totals(weighting)
        return zstats.prior_vector(list(totals), totals, self.prior.name)

    def in_rows(self, rows: pa.Table) -> dict:
        """For each of the original's top features (``{label: [{"feature", "z_original", "z_generated"}]}``) its z*
        in ``rows`` under the original's p0 (every feature counted, min count 1; None where absent)."""
        z = {}
        if rows.num_rows:
            counts = WeightedCounts(self.before.labels, self.features).add(rows, None)
            stats = counts.stats(0, self.before.p0, min_count=1).to_table(1)
            z = dict(zip(zip(stats["feature"].to_pylist(), stats["label"].to_pylist()), stats["z"].to_pylist()))
        return {label: [{"feature": e["feature"], "z_original": e["z"], "z_generated": z.get((e["feature"], label))}
                        for e in entries] for label, entries in self.top.items()}

    def judge_pool(self, accepted: pa.Table, config: "IbadrConfig") -> Verdict:
        """The verdict on the pool, the original with the ``accepted`` pseudo samples (call once)."""
        if accepted.num_rows:
            self.counts.add(accepted, np.zeros(accepted.num_rows), None)
        v = judge(self.before, self.counts.stats(1, self._p0(1)), stage="ibadr", under_threshold=False,
                  prior=str(self.prior), remedy_worsened=(
                      f"the accepted pseudo samples carry these features: lower --tau (now {config.tau}; the task "
                      "model, fit on the corpus, is surest of samples that carry its shortcuts) or generate from the "
                      "least biased group only (--lowest-indicator); generated/ holds each sample and its "
                      "confidence."))
        if self.prior.name == "empirical":
            v.notes.append("p0 of each side is its own label shares (the pseudo samples' labels are drawn uniformly)")
        if v.ok and weakened_nothing(v):
            v.notes.append(f"no shortcut weakened by the {accepted.num_rows:,} accepted pseudo samples; to add more, "
                           f"raise --per-iteration (now {config.per_iteration:,}) or --iterations (now "
                           f"{config.iterations}).")
        return v


def top_z(summary: dict, accepted: int) -> dict:
    """The mean z* of the original's top features (``ShortcutAudit.in_rows``) in the original and in the
    ``accepted`` samples, where a feature absent from them counts as 0 (None: no sample accepted), and how many
    features there are and are absent."""
    entries = [e for v in summary.values() for e in v]
    return {"original": _mean([e["z_original"] for e in entries]), "features": len(entries),
            "absent": sum(e["z_generated"] is None for e in entries), "accepted_rows": accepted,
            "accepted": _mean([e["z_generated"] or 0.0 for e in entries]) if accepted else None}


def top_z_text(m: dict) -> str:
    """``top_z``'s figures as the console and the report page say them."""
    if not m["features"]:
        return "The original has no feature in enough rows to rank its top features"
    head = f"Mean z* of the original's top features: {fmt.z(m['original'])} in the original"
    if not m["accepted_rows"]:
        return f"{head}; no pseudo sample accepted"
    absent = f" ({m['absent']} of these {m['features']} absent from them, counted as 0)" if m["absent"] else ""
    return f"{head}, {fmt.z(m['accepted'])} in the {m['accepted_rows']:,} accepted pseudo samples{absent}"


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
        input_rejects: pa.Table | None = None, storage_options: dict | None = None, inputs=(),
        features: FeatureConfig | None = None) -> dict:
    """IBADR over ``table`` (or its ``sample_rows``) into ``out``: ``pool`` (a corpus), ``generated`` (every
    pseudo sample with its status and reason), ``report``; checkpoints under ``checkpoint_root(out)/checkpoints``
    (``mode=resume`` continues from the last one); ``inputs``: the paths the table was read from, for the report;
    ``features``: the audit's features of the top features and the verdict (default: the audit's defaults)."""
    from refinery.progress import progress

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
    audit = ShortcutAudit(table, features or FeatureConfig())
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
            stats["original_top_features"] = audit.in_rows(accepted)
            history.append(stats)
            pq.write_table(pool, ckpt.file("pool.parquet"))
            pq.write_table(generated, ckpt.file("generated.parquet"))
            shallow.save(ckpt.file("shallow"))
            ckpt.write_text("state.json", json.dumps({"iteration": iteration, "config": config.checkpoint_key(),
                                                      "history": history}, default=str))
            ckpt.commit()
        if iteration > 1:  # only the last generator is needed to go on
            shutil.rmtree(os.path.join(_checkpoint(work, iteration - 1), "generator"), ignore_errors=True)
    report = write_outputs(out, work, table, pool, history, config, iterations, audit, input_rejects,
                           storage_options, inputs)
    report["not_sampled"] = rows_given - table.num_rows
    return report


def write_outputs(out: str, work: str, table: pa.Table, pool: pa.Table, history: list, config: IbadrConfig,
                  iterations: int, audit: ShortcutAudit, input_rejects: pa.Table | None = None,
                  storage_options: dict | None = None, inputs=()) -> dict:
    from refinery.io.corpus import write_table

    generated = pa.concat_tables([pq.read_table(os.path.join(_checkpoint(work, i), "generated.parquet"))
                                  for i in range(1, iterations + 1)], promote_options="permissive") \
        if iterations else pa.Table.from_pylist([], schema=GENERATED_SCHEMA)
    pool_manifest = write_table(pool, join(out, "pool"), rejects=input_rejects, mode="overwrite",
                                config={"ibadr": config.to_dict()}, storage_options=storage_options)
    accepted = pool.filter(pc.equal(pool["source"], "generated"))
    summary = audit.in_rows(accepted)
    verdict = audit.judge_pool(accepted, config)
    report = {"original_rows": table.num_rows, "pool_rows": pool.num_rows, "accepted": accepted.num_rows,
              "generated": generated.num_rows,
              "by_status": dict(sorted(Counter(generated["status"].to_pylist()).items())),
              "iterations": history, "original_top_features_in_accepted": summary,
              "mean_top_z": top_z(summary, accepted.num_rows), "verdict": verdict.to_dict(),
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
        d.write_text("report.html", _html(report, verdict, list(inputs), storage_options))
        d.commit()
    return report


def _html(report: dict, verdict: Verdict, inputs: list, storage_options: dict | None = None) -> str:
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
            "significant": "yes" if e["z_original"] > verdict.threshold else "no",
            "z* in the accepted": e["z_generated"] if e["z_generated"] is not None else "absent"}
           for label, entries in report["original_top_features_in_accepted"].items() for e in entries]
    return (Report("IBADR: iterative bias-aware dataset refinement (Wang et al. 2023)",
                   corpus_name(inputs, storage_options), inputs)
            .section(verdict_html.HEADING, verdict_html.section(verdict))
            .section("Pool", fields(facts))
            .section("Pseudo samples by status", table(statuses, formats={"share": fmt.percent}),
                     note("generated/ holds every pseudo sample with its status and the reason it was set aside."))
            .section("Iterations", table(iterations, ["", *columns], {c: as_text for c in columns}),
                     note("distinct-n: the share of distinct n-grams among the well-formed pseudo samples."))
            .section("The original's top features in the accepted pseudo samples", table(
                top, formats={"z* in the original": fmt.z, "z* in the accepted": lambda v: v if isinstance(v, str)
                              else fmt.z(v)}),
                note(f"{top_z_text(report['mean_top_z'])}. The ten largest z* per label of the original; "
                     f"significant: over its threshold {fmt.z(verdict.threshold)}. z* in the accepted samples is computed with the "
                     "original's p0; absent: no accepted sample has the feature."))
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
    version = 2   # 2: the verdict on the pool and the original's top features measured under its p0 in report/

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        table, rejects = source.load()
        r = run(table, out.folder, self.config, source.engine, "resume" if self.config.resume else "overwrite",
                input_rejects=rejects, storage_options=source.opts.storage_options, inputs=source.paths,
                features=FeatureConfig().named(source.field_names, source.single_text))
        v = r["verdict"]
        return StageResult(*accounting(r), r, f"{r['generated']:,} pseudo samples, {r['accepted']:,} accepted "
                                              f"-> pool {r['pool_rows']:,}; {verdict_headline(v)}", _lines(r),
                           () if v["ok"] else tuple(v["warnings"]))


def _lines(r: dict) -> tuple:
    """What the terminal shows of a run's report: each iteration, the original's top features in the accepted
    samples (the report page's sentence), the precision the generator was tuned in, and the verdict."""
    used = r["iterations"][-1]["train_precision"] if r["iterations"] else None
    v = r["verdict"]
    return (*(f"iteration {h['iteration']}: generated {h['generated']:,}, malformed {h['malformed']:,}, "
              f"low confidence {h['low_confidence']:,}, accepted {h['accepted']:,} -> pool {h['pool_after']:,}"
              for h in r["iterations"]),
            top_z_text(r["mean_top_z"]),
            *([f"generator fine-tuned in {used['dtype']} ({used['requested']}: {used['reason']})"] if used else []),
            v["line"], *(f"  {w}" for w in v["warnings"]), *(f"  note: {n}" for n in v["notes"]))
