"""One IBADR iteration (Wang et al. 2023; METHODS §6) and its pieces:
  1. bias degree p(y | x; θs) of every pool row from the shallow model; rows sorted and cut into
     N_bi equal groups with indicators b1 (least biased) … bN;
  2. the generator θg is fine-tuned on "b, y → x" (loss −log p(x | b, y); 3 epochs the first
     iteration, 1 after), x the pair written as ``[P] premise [H] hypothesis``;
  3. pseudo samples are drawn with y uniform and b_r, r uniform in 1..⌊N_bi/2⌋, and parsed back
     (malformed generations rejected with a reason);
  4. the task model's confidence p_M(y | x) must exceed ε; accepted rows join the pool;
  5. USM: θs is fine-tuned on a random sample of the pool (``fine_tune_shallow``, by the loop).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, replace

import numpy as np
import pyarrow as pa

from refinery.io.publishing import AtomicDir
from refinery.io.schema import is_pair
from refinery.methods.ibadr.config import RESOURCES, IbadrConfig
from refinery.models.base import own_label_proba

POOL_SCHEMA = pa.schema([("id", pa.string()), ("text_a", pa.string()), ("text_b", pa.string()),
                         ("label", pa.string()), ("source", pa.string()), ("iteration", pa.int32()),
                         ("indicator", pa.string()), ("confidence", pa.float64()), ("sampling", pa.string())])
GENERATED_SCHEMA = pa.schema([("id", pa.string()), ("prompt", pa.string()), ("label", pa.string()),
                              ("indicator", pa.string()), ("generated", pa.string()), ("text_a", pa.string()),
                              ("text_b", pa.string()), ("confidence", pa.float64()), ("status", pa.string()),
                              ("reason", pa.string())])
_PAIR = re.compile(r"^\s*\[P\]\s*(?P<a>.*?)\s*\[H\]\s*(?P<b>.*?)\s*$", re.S)
_SINGLE = re.compile(r"^\s*\[T\]\s*(?P<a>.*?)\s*$", re.S)


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


def run_iteration(pool: pa.Table, iteration: int, config: IbadrConfig, *, count: int, shallow, task_model,
                  generator_from: str, checkpoint: AtomicDir, engine: str) -> tuple[pa.Table, pa.Table, dict]:
    """Steps 1–4 of one iteration: ``count`` pseudo samples from the generator fine-tuned from ``generator_from``
    (saved as ``generator`` in the iteration's ``checkpoint``); (accepted rows, every sample, the figures)."""
    from refinery.models.generate import TransformersGenerator
    from refinery.models.actors import generate_table

    pair = is_pair(pool)
    ids = pool["id"].to_pylist()
    bias = own_label_proba(shallow, pool)  # the bias degree p(y | x; θs)
    original = np.asarray(pool["source"].to_pylist()) == "original"
    groups = indicator_groups(bias, ids, config.groups)
    labels = pool["label"].to_pylist()
    heads = [conditioning(y, int(g) if config.indicator else None) for y, g in zip(labels, groups)]
    targets = [serialize(a, b) for a, b in zip(pool["text_a"].to_pylist(), pool["text_b"].to_pylist())]
    generator = TransformersGenerator(generator_from, chat=False, batch_size=config.batch_size)
    epochs = config.first_epochs if iteration == 1 else config.later_epochs
    generator.fit(heads, targets, epochs=epochs, lr=config.lr, batch_size=config.train_batch_size,
                  max_length=config.max_length, precision=config.train_precision, seed=config.seed + iteration)
    path = checkpoint.file("generator")
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
    out = generate_table(pa.table({"prompt": pa.array(prompts, pa.string())}), config.backend,
                         {"model": path, "chat": False}, sampling, engine=engine, batch_size=config.batch_size,
                         resources=RESOURCES)
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
        conf = own_label_proba(task_model, candidates)  # p_M(y | x)
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


def initial_pool(table: pa.Table) -> pa.Table:
    n = table.num_rows
    return pa.table({"id": table["id"], "text_a": table["text_a"],
                     "text_b": table["text_b"] if "text_b" in table.column_names else pa.nulls(n, pa.string()),
                     "label": table["label"], "source": pa.array(["original"] * n, pa.string()),
                     "iteration": pa.array([0] * n, pa.int32()), "indicator": pa.nulls(n, pa.string()),
                     "confidence": pa.nulls(n, pa.float64()), "sampling": pa.nulls(n, pa.string())},
                    schema=POOL_SCHEMA)
