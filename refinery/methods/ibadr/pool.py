"""The IBADR loop over a corpus: the pool grows iteration by iteration, each finished iteration kept as a whole
folder piece (pool, shallow model, generator, state) of the output's ``checkpoints/`` (``io.checkpoints``, on the
local disk, kept with the output), so a killed run resumes from the last one and, with the same seed, ends with the
same pool; then the pool, generated/ and the report are published.
"""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import FeatureConfig
from refinery.io.checkpoints import Checkpoints, table_digest
from refinery.methods.ibadr.audit import ShortcutAudit, top_z
from refinery.methods.ibadr.config import IbadrConfig
from refinery.methods.ibadr.iteration import (GENERATED_SCHEMA, _classifier, _rng, _sample, _with_training_params,
                                              fine_tune_shallow, initial_pool, run_iteration)
from refinery.methods.ibadr.report import TITLE, report_page
from refinery.pipeline.output import StageOutput


def _step(iteration: int) -> str:
    """The name of an iteration's checkpoint folder."""
    return f"iter-{iteration:03d}"


def iterations_of(out: StageOutput, config: IbadrConfig, table: pa.Table) -> Checkpoints:
    """The finished iterations kept in ``out``'s ``checkpoints/`` (local: models are folders), reused while the
    config's ``checkpoint_key`` holds and the rows are ``table``'s (the input, sampled); ``config.resume`` off, or
    another key, starts over."""
    return out.checkpoints("checkpoints", {**config.checkpoint_key(), "rows": table_digest(table)}, kept=True,
                           local=True, resume=config.resume)


def last_iteration(steps: Checkpoints) -> int:
    """The last finished iteration kept in ``steps`` (0 if none)."""
    return max((steps.read_json(name, "state.json")["iteration"] for name in steps.done()), default=0)


def sample_input(table: pa.Table, config: IbadrConfig) -> pa.Table:
    """The rows IBADR starts from: all, or ``sample_rows`` of them drawn with ``seed`` (input order kept)."""
    if not config.sample_rows or config.sample_rows >= table.num_rows:
        return table
    pick = np.sort(np.random.default_rng(config.seed).choice(table.num_rows, config.sample_rows, replace=False))
    return table.take(pa.array(pick))


def grow_pool(table: pa.Table, rejects: pa.Table | None, config: IbadrConfig, out: StageOutput, *, engine: str,
              features: FeatureConfig) -> dict:
    """IBADR over ``table`` (or its ``sample_rows``) into ``out``: ``pool`` (a corpus holding the input's
    ``rejects``), ``generated`` (every pseudo sample with its status and reason) and the report; each finished
    iteration kept in ``out``'s ``checkpoints/`` (``iterations_of``: continue from the last one, or start over).
    ``features``: the audit's features of the top features and the verdict. The run's report."""
    from refinery.models.base import load_classifier
    from refinery.progress import progress

    rows_given = table.num_rows
    table = sample_input(table, config)
    steps = iterations_of(out, config, table)
    iterations = config.iterations if config.iterate else 1
    per_iteration = config.per_iteration if config.iterate else config.per_iteration * config.iterations
    original = initial_pool(table)
    done = last_iteration(steps)
    if done:
        pool = steps.get(_step(done), "pool.parquet")
        shallow = _with_training_params(load_classifier(steps.path_of(_step(done), "shallow")), config)
        history = steps.read_json(_step(done), "state.json")["history"]
    else:
        pool, history = original, []
        shallow = _classifier(config.shallow, config).fit(
            _sample(original, config.shallow_rows, _rng(config, 0, "shallow")))
    task_model = _classifier(config.task_model, config).fit(table)
    audit = ShortcutAudit(table, features, carried=out.prior)
    out.prior = audit.prior   # the input's audit's rule, recorded with pool/
    for iteration in progress(range(done + 1, iterations + 1), desc="ibadr iterations"):
        generator_from = steps.path_of(_step(iteration - 1), "generator") if iteration > 1 else config.generator
        with steps.folder(_step(iteration)) as checkpoint:
            accepted, generated, stats = run_iteration(pool, iteration, config, count=per_iteration, shallow=shallow,
                                                       task_model=task_model, generator_from=generator_from,
                                                       checkpoint=checkpoint, engine=engine)
            pool = pa.concat_tables([pool, accepted])
            if config.usm:
                shallow = fine_tune_shallow(shallow, _sample(pool, config.usm_rows, _rng(config, iteration, "usm")))
            stats["pool_after"] = pool.num_rows
            stats["original_top_features"] = audit.in_rows(accepted)
            history.append(stats)
            checkpoint.write_parquet("pool.parquet", pool)
            checkpoint.write_parquet("generated.parquet", generated)
            shallow.save(checkpoint.file("shallow"))
            checkpoint.write_text("state.json", json.dumps({"iteration": iteration, "history": history}, default=str))
        if iteration > 1:  # only the last generator is needed to go on
            steps.remove(_step(iteration - 1), "generator")
    report = publish(out, steps, table, pool, history, config=config, iterations=iterations, audit=audit,
                     rejects=rejects)
    report["not_sampled"] = rows_given - table.num_rows
    return report


def publish(out: StageOutput, steps: Checkpoints, table: pa.Table, pool: pa.Table, history: list, *,
            config: IbadrConfig, iterations: int, audit: ShortcutAudit, rejects: pa.Table | None = None) -> dict:
    """Publish ``pool/`` (with the input's ``rejects``), ``generated/`` (every iteration's pseudo samples, read
    from ``steps``) and the report of the ``table``'s rows grown into ``pool``; the report."""
    generated = pa.concat_tables([steps.get(_step(i), "generated.parquet")
                                  for i in range(1, iterations + 1)], promote_options="permissive") \
        if iterations else pa.Table.from_pylist([], schema=GENERATED_SCHEMA)
    accepted = pool.filter(pc.equal(pool["source"], "generated"))
    summary = audit.in_rows(accepted)
    verdict, record = audit.judge_pool(accepted, config)
    pool_manifest = out.write_corpus("pool", pool, rejects, settings={"ibadr": config.to_dict()}, audit=record)
    report = {"original_rows": table.num_rows, "pool_rows": pool.num_rows, "accepted": accepted.num_rows,
              "generated": generated.num_rows,
              "by_status": dict(sorted(Counter(generated["status"].to_pylist()).items())),
              "iterations": history, "original_top_features_in_accepted": summary,
              "mean_top_z": top_z(summary, accepted.num_rows), "verdict": verdict.to_dict(),
              "train_precision": history[-1]["train_precision"] if history else None,
              "input_rejected": pool_manifest["rejected"],
              "backend": config.backend, "config": config.to_dict()}
    with out.files("generated") as d:
        d.write_parquet("generated.parquet", generated)
        d.commit()
    out.publish_report(report, report_page(report, verdict, out.report_page(TITLE)))
    return report
