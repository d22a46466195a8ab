"""The IBADR loop over a corpus: the pool grows iteration by iteration, each finished iteration kept as a whole
folder piece (pool, shallow model, generator, state) of the output's ``checkpoints/`` (``io.checkpoints``, on the
local disk, kept with the output), so a killed run resumes from the last one and, with the same seed, ends with the
same pool; the stage publishes the pool, generated/ and the report.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import FeatureConfig
from refinery.io.checkpoints import Checkpoints, table_digest
from refinery.methods.ibadr.audit import ShortcutAudit, top_z
from refinery.methods.ibadr.config import IbadrConfig
from refinery.methods.ibadr.iteration import (GENERATED_SCHEMA, _classifier, _rng, _sample, _with_training_params,
                                              fine_tune_shallow, initial_pool, run_iteration)
from refinery.methods.ibadr.report import IbadrReport


def _step(iteration: int) -> str:
    """The name of an iteration's checkpoint folder."""
    return f"iter-{iteration:03d}"


def iterations_of(checkpoints, config: IbadrConfig, table: pa.Table) -> Checkpoints:
    """The finished iterations kept in the output's ``checkpoints/`` (local: models are folders; ``checkpoints``: the
    output's ``checkpoints(task, settings, …)``), reused while the config's ``checkpoint_key`` holds and the rows are
    ``table``'s (the input, sampled); ``config.resume`` off, or another key, starts over."""
    return checkpoints("checkpoints", {**config.checkpoint_key(), "rows": table_digest(table)}, kept=True,
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


@dataclass
class Grown:
    """What the loop made of the input: the rows it started from (``table``: the input, or its ``sample_rows``) and
    how many the input had (``rows_given``), the ``pool``, each iteration's figures (``history``), the audit of the
    original's shortcuts, and the finished iterations kept (``steps``) out of ``iterations``."""

    table: pa.Table
    rows_given: int
    pool: pa.Table
    history: list
    audit: ShortcutAudit
    steps: Checkpoints
    iterations: int

    @property
    def not_sampled(self) -> int:
        """The input's rows left out of the sample the loop started from (``sample_rows``)."""
        return self.rows_given - self.table.num_rows

    def accepted(self) -> pa.Table:
        """The pseudo samples the pool took in."""
        return self.pool.filter(pc.equal(self.pool["source"], "generated"))

    def generated(self) -> pa.Table:
        """Every iteration's pseudo samples, with their status and reason (read from the kept iterations)."""
        if not self.iterations:
            return pa.Table.from_pylist([], schema=GENERATED_SCHEMA)
        return pa.concat_tables([self.steps.get(_step(i), "generated.parquet") for i in range(1, self.iterations + 1)],
                                promote_options="permissive")


def grow_pool(table: pa.Table, config: IbadrConfig, checkpoints, *, engine: str, features: FeatureConfig,
              carried=None) -> Grown:
    """IBADR over ``table`` (or its ``sample_rows``): the pool grown iteration by iteration, each finished iteration
    kept in the output's ``checkpoints/`` (``iterations_of``: continue from the last one, or start over).
    ``features``: the audit's features of the top features and the verdict; ``carried``: the audit's prior rule the
    input records."""
    from refinery.models.base import load_classifier
    from refinery.progress import progress

    rows_given = table.num_rows
    table = sample_input(table, config)
    steps = iterations_of(checkpoints, config, table)
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
    audit = ShortcutAudit(table, features, carried=carried)
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
    return Grown(table, rows_given, pool, history, audit, steps, iterations)


def report_of(grown: Grown, verdict, generated: pa.Table, config: IbadrConfig, input_rejected: int) -> IbadrReport:
    """The run's report: the pool against the rows it started from, each iteration, the original's top features in
    the accepted samples and the ``verdict`` (``ShortcutAudit.judge_pool``'s)."""
    accepted = grown.accepted()
    summary = grown.audit.in_rows(accepted)
    history = grown.history
    return IbadrReport(original_rows=grown.table.num_rows, pool_rows=grown.pool.num_rows, accepted=accepted.num_rows,
                       generated=generated.num_rows,
                       by_status=dict(sorted(Counter(generated["status"].to_pylist()).items())),
                       iterations=history, original_top_features_in_accepted=summary,
                       mean_top_z=top_z(summary, accepted.num_rows), verdict=verdict.to_dict(),
                       train_precision=history[-1]["train_precision"] if history else None,
                       input_rejected=input_rejected, backend=config.backend, config=config.to_dict(),
                       not_sampled=grown.not_sampled)
