"""RAZOR's rewrite loop (METHODS §5): the top-k rows by γ get m rewrites from G_α (pairs: the hypothesis/claim is
rewritten, the premise/evidence kept), each verified by a separate G_β call and accepted only when the answer is
exactly the row's label; of the accepted, the one with the lowest γ replaces the row (``source=rewritten``,
``origin_id``). Rounds repeat until the objective stops increasing (a round that lowers it is undone) or the round
limit.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.messages import Refusal
from refinery.methods.razor.config import (RESOURCES, REWRITE_PAIR, REWRITE_SINGLE, VERIFY_PAIR, VERIFY_SINGLE,
                                           RazorConfig)
from refinery.methods.razor.scores import Scores, candidate_gamma, gamma_summary, score, scored_field
from refinery.models.generate import Sampling
from refinery.models.label_descriptions import label_description


def _fill(template: str, row: dict, labels: list) -> str:
    return template.format(text_a=row["text_a"], text_b=row.get("text_b"), label=row["label"],
                           label_description=label_description(row["label"]),
                           labels=", ".join(labels))


def clean_candidate(text: str) -> str | None:
    """The first non-empty line without quotes or a leading 'Hypothesis:'-style tag; None if nothing is left."""
    for line in (text or "").splitlines():
        line = re.sub(r"^\s*(new |rewritten )?(hypothesis|claim|text|sentence)\s*:\s*", "", line, flags=re.I)
        line = line.strip().strip('"“”\'').strip()
        if line:
            return line
    return None


def verified_label(answer: str, labels: list) -> str | None:
    """The label the verifier answered: its first word, exactly one of ``labels`` (case-insensitive)."""
    words = re.findall(r"[\w-]+", answer or "")
    if not words:
        return None
    by_name = {l.casefold(): l for l in labels}
    return by_name.get(words[0].casefold())


def _generate(prompts: list[str], sampling: Sampling, config: RazorConfig, engine: str, pieces=None
              ) -> tuple[list[list[str]], list]:
    """G_α's (or G_β's) texts for each prompt and each prompt's generation error (None where it worked); with
    ``pieces`` (``pipeline.unit_pieces.UnitPieces``) each finished shard of prompts is kept, for a rerun after a kill."""
    from refinery.models.actors import generate_table

    if not prompts:
        return [], []
    out = generate_table(pa.table({"prompt": pa.array(prompts, pa.string())}), config.backend.name,
                         config.backend.kwargs(), sampling, engine=engine, batch_size=config.batch_size,
                         resources=RESOURCES, pieces=pieces)
    return out["generated"].to_pylist(), out["generation_error"].to_pylist()


def verify(prompts: list[str], labels: list, config: RazorConfig, engine: str = "local", pieces=None) -> list:
    """G_β's label for each verification prompt (None when its answer is not exactly a label).

    ``answer``: the generated reply's first word must be a label; ``choice``: the label with the
    highest likelihood (transformers backend; for small models that rarely answer with a label).
    """
    if config.verify_mode == "choice":
        from refinery.models.actors import shared_generator

        generator = shared_generator(config.backend.name, config.backend.kwargs())
        if not hasattr(generator, "choose"):
            raise Refusal(f"verify mode 'choice' needs the transformers backend, not {config.backend.name!r}",
                          code="model")
        return generator.choose(prompts, labels) if prompts else []
    outs, _ = _generate(prompts, config.verify, config, engine, pieces)
    return [verified_label(o[0] if o else "", labels) for o in outs]


def rewrite_round(table: pa.Table, scores: Scores, config: RazorConfig, round_no: int = 1, *, engine: str = "local",
                  verifier=None, checkpoints=None) -> tuple[pa.Table, dict]:
    """One round: rewrite the top-k rows by γ, verify, replace with the lowest-γ accepted candidate. With
    ``checkpoints`` each finished shard of the round's prompts is a piece (``round-<n>-rewrite-<k>``,
    ``round-<n>-verify-<k>``): a rerun after a kill prompts only the others."""
    from refinery.pipeline.unit_pieces import UnitPieces

    def pieces(phase: str):
        return None if checkpoints is None else UnitPieces(checkpoints, f"{round_piece(round_no)}-{phase}",
                                                           config.shard_rows)

    target = scored_field(table)
    pair = target == "text_b"
    labels = sorted(set(table["label"].to_pylist()))
    top = np.argsort(-scores.gamma, kind="stable")[:config.top_k]
    rows = table.take(pa.array(top)).to_pylist()
    rewrite = replace(config.rewrite, n=config.candidates, seed=config.rewrite.seed + round_no)
    texts, errors = _generate([_fill(REWRITE_PAIR if pair else REWRITE_SINGLE, r, labels) for r in rows], rewrite,
                              config, engine, pieces("rewrite"))
    candidates = [(i, c) for i, outs in enumerate(texts) for c in dict.fromkeys(map(clean_candidate, outs))
                  if c is not None and c != rows[i][target]]
    cand_rows = [{**rows[i], target: c} for i, c in candidates]
    if verifier is not None:
        from refinery.models.base import predict

        canonical = [c for c in ("id", "text_a", "text_b", "label") if c in table.column_names]
        answers = predict(verifier, pa.Table.from_pylist([{c: r[c] for c in canonical} for r in cand_rows],
                                                         schema=table.select(canonical).schema)) if cand_rows else []
    else:
        prompts = [_fill(VERIFY_PAIR if pair else VERIFY_SINGLE, r, labels) for r in cand_rows]
        answers = verify(prompts, labels, config, engine, pieces("verify"))
    accepted = [(i, c) for (i, c), a, r in zip(candidates, answers, cand_rows) if a == r["label"]]
    gamma = candidate_gamma([c for _, c in accepted], [rows[i]["label"] for i, _ in accepted], scores, config)
    best: dict[int, tuple[float, str]] = {}
    for (i, c), g in zip(accepted, gamma):
        if i not in best or g < best[i][0]:
            best[i] = (float(g), c)
    examples, changes = [], []
    for i, (g, text) in sorted(best.items()):
        examples.append({"id": rows[i]["id"], "label": rows[i]["label"], "before": rows[i][target], "after": text,
                         "gamma_before": float(scores.gamma[top[i]]), "gamma_after": g})
        changes.append((int(top[i]), rows[i].get("origin_id") or rows[i]["id"], text))
    changes.sort()
    positions = [at for at, _, _ in changes]
    origins = [origin for _, origin, _ in changes]
    replaced = {"id": [f"{origin}#razor-{round_no}" for origin in origins], "source": ["rewritten"] * len(changes),
                "origin_id": origins, target: [text for _, _, text in changes]}
    for name, values in replaced.items():
        table = _set_at(table, name, positions, values)
    stats = {"round": round_no, "rows": len(rows), "candidates": len(candidates), "accepted": len(accepted),
             "replaced": len(best), "generation_errors": sum(e is not None for e in errors), "examples": examples}
    return table, stats


def _set_at(table: pa.Table, name: str, positions: list[int], values: list) -> pa.Table:
    """``table`` with column ``name`` (added as nulls if missing) set to ``values`` at the sorted ``positions``."""
    column = table[name].combine_chunks() if name in table.column_names else pa.nulls(table.num_rows, pa.string())
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[positions] = True
    column = pc.replace_with_mask(column, pa.array(mask), pa.array(values, column.type))
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, column)
    return table.append_column(name, column)


def round_piece(round_no: int) -> str:
    """The checkpoint piece of a finished round (its table and figures)."""
    return f"round-{round_no:03d}"


def resumed(checkpoints) -> tuple[int, int]:
    """What a killed run left finished: (its rounds, the shards of prompts of the round it was cut in)."""
    names = checkpoints.done()
    rounds = {name for name in names if re.fullmatch(r"round-\d{3}", name)}
    return len(rounds), sum(name.rsplit("-", 2)[0] not in rounds for name in names if name not in rounds)


def refine(table: pa.Table, config: RazorConfig, *, engine: str = "local", verifier=None, scores: Scores | None = None,
           checkpoints=None) -> tuple[pa.Table, Scores, list[dict]]:
    """Rounds of ``rewrite_round`` while the objective increases; a round that lowers it is undone.

    Returns the refined table, its scores and the rounds; ``scores`` are the input's, if already computed.
    With ``checkpoints`` (``io.checkpoints.Checkpoints``) each finished round's table and figures are kept,
    and a rerun after a kill reads them instead of rewriting again (each round samples from its own seed).
    """
    from refinery.progress import progress

    scores = scores if scores is not None else score(table, config)
    history = []
    for round_no in progress(range(1, config.rounds + 1), desc="razor rounds"):
        saved = checkpoints.get(round_piece(round_no)) if checkpoints is not None else None
        if saved is not None:
            stats = json.loads(saved.schema.metadata[b"razor_round"])
            candidate = saved.replace_schema_metadata(None)
            new_scores = score(candidate, config)
        else:
            candidate, stats = rewrite_round(table, scores, config, round_no, engine=engine, verifier=verifier,
                                             checkpoints=checkpoints)
            new_scores = score(candidate, config)
            stats.update(objective_before=scores.objective, objective_after=new_scores.objective,
                         gamma=gamma_summary(new_scores.gamma))
            stats["kept"] = stats["replaced"] > 0 and new_scores.objective > scores.objective
            if checkpoints is not None:
                checkpoints.put(round_piece(round_no), candidate.replace_schema_metadata(
                    {"razor_round": json.dumps(stats, default=float)}))
                for name in checkpoints.done():   # the round's shards of prompts: the round's piece holds them now
                    if name.startswith(f"{round_piece(round_no)}-"):
                        checkpoints.remove(name)
        history.append(stats)
        if not stats["kept"]:
            break
        table, scores = candidate, new_scores
    return table, scores, history
