"""RAZOR (Yang, Prenkaj, Kasneci 2024; METHODS §5): surface-feature shortcut scores and the LLM rewrite loop.

Scores (vectorized over Arrow token lists, any number of labels):
    S(t, d) = n(t, d) / |d| · log(|D| / df(t))                       (TF-IDF token importance)
    τ(j)_k  = sin(j / 10000^(2k/λ)) for even k, cos(j / 10000^(2k/λ)) for odd k
    ĝ(d)    = Σ_j S(t_j, d) · τ(j) / (|d| − 1)                        (surface embedding)
    γ(d)    = 1 − mean_{d′ : y(d′) ≠ y(d)} cos(ĝ(d), ĝ(d′))           (shortcut score)
With unit vectors u(d) and per-label sums U_y = Σ_{d ∈ D_y} u(d), the mean cosine against the
other labels is u(d)·(Σ_y′ U_y′ − U_y(d)) / (|D| − |D_y(d)|): O(n·λ) instead of O(n²·λ). The loop's
objective Σ_{y<y′} Σ_{d∈D_y} Σ_{d′∈D_y′} cos(ĝ(d), ĝ(d′)) = Σ_{y<y′} U_y·U_y′.

The loop: the top-k rows by γ get m rewrites from G_α (pairs: the hypothesis/claim is rewritten,
the premise/evidence kept), each verified by a separate G_β call and accepted only when the
answer is exactly the row's label; of the accepted, the one with the lowest γ replaces the row
(``source=rewritten``, ``origin_id``). Rounds repeat until the objective stops increasing (a round
that lowers it is undone) or the round limit.

The verdict (``core.verdict``): the rewritten corpus is audited with the input's features and prior rule and
compared with the input. RAZOR promises to make no shortcut stronger (no feature crossing the threshold, no
label's max z* rising) and to weaken the shortcuts of the rows it rewrites; where no label's max z* fell and no
significant feature stopped being one, the verdict says so in a note. The audit counts the input once and only
the rewritten rows again (``WeightedCounts``: the input with weights 1 and, for the output, 0 on the replaced
rows; the rewrites with weights 0 and 1), so it costs a tokenization of the input.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse

from refinery.core.features import FeatureConfig, TokenizerOptions
from refinery.core.verdict import JITTER, Verdict
from refinery.core.weighted_counts import WeightedCounts, judge_weightings
from refinery.core.validation import NOT_EMPTY, at_least, one_of, setting, validate
from refinery.io.schema import is_pair
from refinery.io.checkpoints import CHECKPOINTS, Checkpoints, table_digest
from refinery.io.location import join
from refinery.io.publishing import AtomicDir
from refinery.io.redaction import redact
from refinery.methods.generation import LABEL_DESCRIPTIONS
from refinery.models.generate import Backend, Sampling
from refinery.pipeline.filter import verdict_headline
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Resources, Stage, StageInput, StageResult
from refinery.progress import announce
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.report.page import Report, config_table, corpus_name, fields, note, table

REWRITE_PAIR = ("Rewrite the hypothesis with different words and a different sentence structure, keeping its "
                "relation to the premise: it must stay {label_description} ({label}).\n"
                "Premise: {text_a}\nHypothesis: {text_b}\nReply with the new hypothesis only.")
REWRITE_SINGLE = ("Rewrite the text with different words and a different sentence structure; its label "
                  "'{label}' must stay the same.\nText: {text_a}\nReply with the rewritten text only.")
VERIFY_PAIR = ("Premise: {text_a}\nHypothesis: {text_b}\nWhich label describes the hypothesis given the premise? "
               "Answer with exactly one of: {labels}.")
VERIFY_SINGLE = "Text: {text_a}\nWhich label fits this text? Answer with exactly one of: {labels}."


@dataclass
class RazorConfig:
    dim: int = setting(64, at_least(1), "λ, the positional-encoding size.")
    top_k: int = setting(50, at_least(1), "Rows rewritten per round.")
    candidates: int = setting(4, at_least(1), "m rewrites per row.")
    rounds: int = setting(5, at_least(0), "Rewriting rounds at most.")
    verify_mode: str = setting("answer", one_of("answer", "choice"), "G_β: its answer must be exactly the label, "
                                                                     "or (transformers) the most likely label.",
                               option="--verify")
    tokenizer: TokenizerOptions = field(default_factory=TokenizerOptions)
    rewrite: Sampling = setting(Sampling(temperature=0.7, top_p=0.9, max_new_tokens=48), help="G_α's sampling.",
                                skip=("n",))   # G_α draws ``candidates`` rewrites
    verify: Sampling = setting(Sampling(temperature=0.0, top_p=1.0, max_new_tokens=8), help="G_β's sampling.",
                               prefix="verify", skip=("n",))
    backend: Backend = setting(Backend(), help="G_α (and G_β unless verifier_model).")
    verifier_model: str | None = setting(None, NOT_EMPTY.or_none(), "A saved classifier's folder as G_β.")
    score_only: bool = setting(False, help="Only γ per row and the objective.")
    batch_size: int = setting(16, at_least(1), "Prompts per generator call.")

    def __post_init__(self):
        validate(self)
        if self.verify_mode == "choice" and self.verifier_model is None and self.backend.name != "transformers":
            raise ValueError(f"verify_mode choice needs the transformers backend, got {self.backend.name!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tokenizer"] = self.tokenizer.__dict__
        return d


# ---------------------------------------------------------------- scores

def positional_encoding(length: int, dim: int) -> np.ndarray:
    """τ(j) for j = 0 … length−1 as a (length × λ) matrix (METHODS §5)."""
    j = np.arange(length, dtype=np.float64)[:, None]
    k = np.arange(dim)[None, :]
    angle = j / np.power(10000.0, 2 * k / dim)
    return np.where(k % 2 == 0, np.sin(angle), np.cos(angle))


@dataclass
class Vocabulary:
    """Document frequencies of a corpus: idf(t) = log(|D| / df(t)); an unseen token counts df = 1."""

    tokens: pa.Array
    df: np.ndarray
    docs: int

    @classmethod
    def fit(cls, tokens: pa.ListArray, block_rows: int = 1 << 18) -> "Vocabulary":
        """df of every token, counting the distinct tokens of ``block_rows`` rows at a time."""
        enc = pc.dictionary_encode(pc.list_flatten(tokens))
        codes = enc.indices.to_numpy(zero_copy_only=False)
        V = len(enc.dictionary)
        df = np.zeros(V, np.int64)
        offsets = tokens.offsets.to_numpy() - tokens.offsets[0].as_py()
        for start in range(0, len(tokens), block_rows):
            block = tokens.slice(start, block_rows)
            lo, hi = offsets[start], offsets[min(start + block_rows, len(tokens))]
            parents = pc.list_parent_indices(block).to_numpy().astype(np.int64)
            df += np.bincount(np.unique(parents * V + codes[lo:hi]) % V, minlength=V)
        return cls(enc.dictionary, df, len(tokens))

    def idf(self, flat: pa.Array) -> np.ndarray:
        at = pc.index_in(flat, value_set=self.tokens).to_numpy(zero_copy_only=False)
        df = np.ones(len(flat))
        known = ~np.isnan(at.astype(float))
        df[known] = self.df[at[known].astype(np.int64)]
        return np.log(max(self.docs, 1) / df)


def surface_embeddings(tokens: pa.ListArray, vocab: Vocabulary, dim: int) -> np.ndarray:
    """ĝ(d) for every row (n × λ): a sparse (row × position) matrix of S(t_j, d) times τ."""
    n = len(tokens)
    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens).to_numpy().astype(np.int64)
    lengths = pc.list_value_length(tokens).to_numpy(zero_copy_only=False).astype(np.int64)
    if len(flat) == 0:
        return np.zeros((n, dim))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    position = np.arange(len(flat)) - starts[parents]
    enc = pc.dictionary_encode(flat)
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    _, inverse, tf = np.unique(parents * len(enc.dictionary) + codes, return_inverse=True, return_counts=True)
    importance = tf[inverse] / lengths[parents] * vocab.idf(flat)
    weights = sparse.csr_matrix((importance, (parents, position)), shape=(n, int(lengths.max())))
    g = weights @ positional_encoding(int(lengths.max()), dim)
    return g / np.maximum(lengths - 1, 1)[:, None]


def unit_rows(g: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(g, axis=1, keepdims=True)
    return np.divide(g, norm, out=np.zeros_like(g), where=norm > 0)


@dataclass
class LabelSums:
    """Per-label sums of unit surface embeddings: all γ and the objective follow from them."""

    labels: list
    sums: np.ndarray      # C × λ
    sizes: np.ndarray     # C

    def add(self, unit: np.ndarray, labels: np.ndarray) -> None:
        """Add the unit embeddings of rows with ``labels`` (each one of ``self.labels``)."""
        codes = np.searchsorted(self.labels, labels)
        for c in np.unique(codes):
            self.sums[c] += unit[codes == c].sum(axis=0)
        self.sizes += np.bincount(codes, minlength=len(self.labels))

    def gamma(self, unit: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """γ = 1 − u·(Σ U − U_y) / (|D| − |D_y|)."""
        codes = np.searchsorted(self.labels, labels)
        other = self.sums.sum(axis=0)[None, :] - self.sums[codes]
        n_other = np.maximum(self.sizes.sum() - self.sizes[codes], 1)
        return 1.0 - (unit * other).sum(axis=1) / n_other

    def objective(self) -> float:
        """Σ_{y<y′} U_y·U_y′ = Σ over cross-label pairs of cos(ĝ(d), ĝ(d′))."""
        gram = self.sums @ self.sums.T
        return float(np.triu(gram, k=1).sum())


def scored_field(table: pa.Table) -> str:
    """The text RAZOR scores and rewrites: the hypothesis/claim of a pair, else the single text."""
    return "text_b" if is_pair(table) else "text_a"


@dataclass
class Scores:
    gamma: np.ndarray
    objective: float
    vocab: Vocabulary
    sums: LabelSums


SCORE_BLOCK_ROWS = 1 << 18   # rows embedded at a time: an n × λ float64 matrix is 5 GB at 10M rows


def score(table: pa.Table, config: RazorConfig = RazorConfig()) -> Scores:
    """γ for every row and the objective, over the scored field (``scored_field``).

    The rows are embedded ``SCORE_BLOCK_ROWS`` at a time, twice: once for the per-label sums, once for each
    row's γ against them, so memory holds the tokens and one block's embeddings, never all of them.
    """
    from refinery.progress import progress

    field_tokens = config.tokenizer.tokenize(table[scored_field(table)])
    if isinstance(field_tokens, pa.ChunkedArray):
        field_tokens = field_tokens.combine_chunks()
    vocab = Vocabulary.fit(field_tokens, SCORE_BLOCK_ROWS)
    blocks = range(0, table.num_rows, SCORE_BLOCK_ROWS)

    def unit(start: int) -> np.ndarray:
        return unit_rows(surface_embeddings(field_tokens.slice(start, SCORE_BLOCK_ROWS), vocab, config.dim))

    def labels(start: int) -> np.ndarray:
        return np.asarray(table["label"].slice(start, SCORE_BLOCK_ROWS).to_pylist(), dtype=object)

    names = sorted(set(pc.unique(table["label"]).to_pylist()))
    sums = LabelSums(names, np.zeros((len(names), config.dim)), np.zeros(len(names), np.int64))
    for start in progress(blocks, desc="razor: label sums", unit=" block"):
        sums.add(unit(start), labels(start))
    gamma = np.concatenate([np.zeros(0)] + [sums.gamma(unit(start), labels(start))
                                            for start in progress(blocks, desc="razor: γ", unit=" block")])
    return Scores(gamma, sums.objective(), vocab, sums)


def candidate_gamma(texts: list[str], labels: list[str], scores: Scores, config: RazorConfig) -> np.ndarray:
    """γ a candidate text would have in the current corpus (its idf from the corpus's df)."""
    tokens = config.tokenizer.tokenize(pa.array(texts, pa.string()))
    unit = unit_rows(surface_embeddings(tokens, scores.vocab, config.dim))
    return scores.sums.gamma(unit, np.asarray(labels, dtype=object))


# ---------------------------------------------------------------- rewrite and verify

def _fill(template: str, row: dict, labels: list) -> str:
    return template.format(text_a=row["text_a"], text_b=row.get("text_b"), label=row["label"],
                           label_description=LABEL_DESCRIPTIONS.get(row["label"], f"labelled '{row['label']}'"),
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


def _generate(prompts: list[str], sampling: Sampling, backend: str, backend_kwargs: dict, engine: str,
              batch_size: int) -> tuple[list[list[str]], list]:
    from refinery.models.stages import generate_table

    if not prompts:
        return [], []
    out = generate_table(pa.table({"prompt": pa.array(prompts, pa.string())}), backend, backend_kwargs, sampling,
                         engine, batch_size, resources=RazorStage.resources)
    return out["generated"].to_pylist(), out["generation_error"].to_pylist()


def verify(prompts: list[str], labels: list, config: RazorConfig, backend: str, backend_kwargs: dict,
           engine: str = "local", batch_size: int = 16) -> list:
    """G_β's label for each verification prompt (None when its answer is not exactly a label).

    ``answer``: the generated reply's first word must be a label; ``choice``: the label with the
    highest likelihood (transformers backend; for small models that rarely answer with a label).
    """
    if config.verify_mode == "choice":
        from refinery.models.stages import shared_generator

        generator = shared_generator(backend, backend_kwargs)
        if not hasattr(generator, "choose"):
            raise ValueError(f"verify mode 'choice' needs the transformers backend, not {backend!r}")
        return generator.choose(prompts, labels) if prompts else []
    outs, _ = _generate(prompts, config.verify, backend, backend_kwargs, engine, batch_size)
    return [verified_label(o[0] if o else "", labels) for o in outs]


def rewrite_round(table: pa.Table, scores: Scores, config: RazorConfig, backend: str, backend_kwargs: dict,
                  engine: str = "local", batch_size: int = 16, round_no: int = 1,
                  verifier=None) -> tuple[pa.Table, dict]:
    """One round: rewrite the top-k rows by γ, verify, replace with the lowest-γ accepted candidate."""
    target = scored_field(table)
    pair = target == "text_b"
    labels = sorted(set(table["label"].to_pylist()))
    top = np.argsort(-scores.gamma, kind="stable")[:config.top_k]
    rows = table.take(pa.array(top)).to_pylist()
    rewrite = replace(config.rewrite, n=config.candidates, seed=config.rewrite.seed + round_no)
    texts, errors = _generate([_fill(REWRITE_PAIR if pair else REWRITE_SINGLE, r, labels) for r in rows], rewrite,
                              backend, backend_kwargs, engine, batch_size)
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
        answers = verify(prompts, labels, config, backend, backend_kwargs, engine, batch_size)
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


# ---------------------------------------------------------------- the loop and its outputs

def gamma_summary(gamma: np.ndarray) -> dict:
    q = np.quantile(gamma, [0, 0.25, 0.5, 0.75, 0.9, 0.99, 1]) if len(gamma) else [float("nan")] * 7
    return dict(zip(["min", "p25", "median", "p75", "p90", "p99", "max"], map(float, q)))


def refine(table: pa.Table, config: RazorConfig, backend: str, backend_kwargs: dict, engine: str = "local",
           batch_size: int = 16, verifier=None, scores: Scores | None = None, checkpoints=None
           ) -> tuple[pa.Table, Scores, list[dict]]:
    """Rounds of ``rewrite_round`` while the objective increases; a round that lowers it is undone.

    Returns the refined table, its scores and the rounds; ``scores`` are the input's, if already computed.
    With ``checkpoints`` (``io.checkpoints.Checkpoints``) each finished round's table and figures are kept,
    and a rerun after a kill reads them instead of rewriting again (each round samples from its own seed).
    """
    from refinery.progress import progress

    scores = scores if scores is not None else score(table, config)
    history = []
    for round_no in progress(range(1, config.rounds + 1), desc="razor rounds"):
        saved = checkpoints.get(f"round-{round_no:03d}") if checkpoints is not None else None
        if saved is not None:
            stats = json.loads(saved.schema.metadata[b"razor_round"])
            candidate = saved.replace_schema_metadata(None)
            new_scores = score(candidate, config)
        else:
            candidate, stats = rewrite_round(table, scores, config, backend, backend_kwargs, engine, batch_size,
                                             round_no, verifier)
            new_scores = score(candidate, config)
            stats.update(objective_before=scores.objective, objective_after=new_scores.objective,
                         gamma=gamma_summary(new_scores.gamma))
            stats["kept"] = stats["replaced"] > 0 and new_scores.objective > scores.objective
            if checkpoints is not None:
                checkpoints.put(f"round-{round_no:03d}", candidate.replace_schema_metadata(
                    {"razor_round": json.dumps(stats, default=float)}))
        history.append(stats)
        if not stats["kept"]:
            break
        table, scores = candidate, new_scores
    return table, scores, history


def change(before: float, after: float) -> tuple[str, str]:
    """``before`` and ``after`` as ``fmt.number`` writes them, with the significant digits (3 to 15) that tell them
    apart: an objective of 31,782,330 → 31,782,265 (``:.6g`` printed 3.17823e+07 → 3.17823e+07)."""
    for digits in range(3, 16):
        a, b = fmt.number(before, digits), fmt.number(after, digits)
        if a != b:
            break
    return a, b


def weakened_nothing(v: Verdict) -> bool:
    """Whether a verdict shows no shortcut weakened where the input had some: no significant feature of the input
    stopped being one and no label's max z* fell by more than jitter."""
    fell = any(m.before is not None and m.after is not None and m.after < m.before - JITTER for m in v.max_z.values())
    return v.significant_before > 0 and not v.fixed_total and not fell


def verdict(table: pa.Table, refined: pa.Table, features: FeatureConfig, config: RazorConfig) -> Verdict:
    """The audit of ``refined`` (``table`` with the scored field of some rows rewritten, row for row) against the
    audit of ``table``: the same features, the input's prior rule (the labels do not change). The input is counted
    once; only the rewritten rows are counted again."""
    target = scored_field(table)
    rewritten = pc.fill_null(pc.not_equal(table[target], refined[target]), False).to_numpy(zero_copy_only=False)
    counts = WeightedCounts(None, features, 2).add(table, None, (~rewritten).astype(np.float64))
    if rewritten.any():
        counts.add(refined.filter(pa.array(rewritten)), np.zeros(int(rewritten.sum())), None)
    v = judge_weightings(counts, stage="razor", under_threshold=False, remedy_worsened=(
        f"the rewrites carry these features more often than the rows they replaced: rewrite fewer rows (--top-k, "
        f"now {config.top_k}; --rounds, now {config.rounds}) or use another generator (--model); the report's "
        "examples show what the rewrites add."))
    if v.ok and weakened_nothing(v):
        v.notes.append(f"no shortcut weakened by the {int(rewritten.sum()):,} rewritten rows; to rewrite more, raise "
                       f"--top-k (now {config.top_k}) or --rounds (now {config.rounds}).")
    return v


def run(table: pa.Table, out: str, config: RazorConfig = RazorConfig(), engine: str = "local",
        input_rejects: pa.Table | None = None, storage_options: dict | None = None, inputs=(),
        features: FeatureConfig | None = None) -> dict:
    """``out/scores`` (γ per row) and with rewriting ``out/corpus`` (same size) and ``out/report``; each
    corpus also holds the input's rejects, so each accounts for every input row. ``inputs``: the paths the table
    was read from, named in the report's header; ``features``: the audit's features the verdict compares (default:
    the audit's defaults)."""
    from refinery.io.corpus import write_table

    before = score(table, config)
    scored = table.select(["id", "label"]).append_column("gamma", pa.array(before.gamma))
    report = {"rows": table.num_rows, "field": scored_field(table), "objective": before.objective,
              "gamma": gamma_summary(before.gamma), "config": config.to_dict()}
    report["input_rejected"] = write_table(scored, join(out, "scores"), rejects=input_rejects,
                                           config={"razor": report}, storage_options=storage_options)["rejected"]
    judged = None
    if not config.score_only:
        from refinery.models import load_classifier

        verifier = load_classifier(config.verifier_model) if config.verifier_model else None
        backend = config.backend.name
        checkpoints = Checkpoints(out, "razor", {"config": redact(config.to_dict()), "rows": table_digest(table)},
                                  storage_options)
        report["resumed_rounds"] = len(checkpoints.done())
        if report["resumed_rounds"]:
            announce(f"razor: resuming after {report['resumed_rounds']} finished round(s) of an interrupted run "
                     f"(checkpoints in {join(out, CHECKPOINTS)})")
        refined, after, history = refine(table, config, backend, config.backend.kwargs(), engine, config.batch_size,
                                         verifier, before, checkpoints)
        write_table(refined, join(out, "corpus"), rejects=input_rejects, config={"razor": report},
                    storage_options=storage_options)
        judged = verdict(table, refined, features or FeatureConfig(), config)
        report.update(rounds=history, objective_after=after.objective, gamma_after=gamma_summary(after.gamma),
                      replaced_rows=sum(s == "rewritten" for s in refined["source"].to_pylist())
                      if "source" in refined.column_names else 0,
                      backend=backend, verdict=judged.to_dict())
    with AtomicDir(join(out, "report"), storage_options) as d:
        d.write_text("report.json", json.dumps(report, indent=1, default=str))
        d.write_text("report.html", _html(report, list(inputs), storage_options, judged))
        d.commit()
    if not config.score_only:
        checkpoints.clear()
    return report


def _html(report: dict, inputs: list, storage_options: dict | None = None, judged: Verdict | None = None) -> str:
    rewritten = "rounds" in report
    field_name = {"text_b": "text_b (the hypothesis or claim of each pair)", "text_a": "text_a (the text)"}
    facts = {"rows scored": report["rows"], "text scored": field_name.get(report["field"], report["field"]),
             "objective": fmt.number(report["objective"]), "input rejects": report["input_rejected"]}
    if rewritten:
        facts["objective"], facts["objective after rewriting"] = change(report["objective"], report["objective_after"])
        facts |= {"rows rewritten": report["replaced_rows"], "generator backend": report["backend"]}
    names = {"min": "min", "p25": "25%", "median": "median", "p75": "75%", "p90": "90%", "p99": "99%", "max": "max"}
    gamma = [{"": what, **{names.get(k, k): v for k, v in g.items()}}
             for what, g in (("input", report["gamma"]), ("rewritten", report.get("gamma_after"))) if g]
    page = Report("RAZOR: shortcut scores γ and LLM rewriting (Yang, Prenkaj & Kasneci 2024)",
                  corpus_name(inputs, storage_options), inputs)
    if judged is not None:
        page.section(verdict_html.HEADING, verdict_html.section(judged))
    page = (page.section("Scores", fields(facts),
                         note("The objective sums the cosine similarity of the surface embeddings of every two rows "
                              "of different labels; rewriting raises it (the labels' rows look alike)."))
            .section("Shortcut score γ over the rows", table(gamma, ["", *names.values()]),
                     note("Percentiles of γ = 1 − a row's mean cosine to the rows of the other labels: a high γ "
                          "sets the row apart by its surface features alone. scores/ holds each row's γ.")))
    if rewritten:
        columns = {f"round {r['round']}": r for r in report["rounds"]}   # one column per round, a row per measure
        measures = [("rows tried", "rows"), ("candidates", "candidates"), ("verified", "accepted"),
                    ("replaced", "replaced"), ("generation errors", "generation_errors")]
        rounds = [{"": name, **{c: r[key] for c, r in columns.items()}} for name, key in measures]
        objectives = {c: change(r["objective_before"], r["objective_after"]) for c, r in columns.items()}
        rounds += [{"": "objective before", **{c: o[0] for c, o in objectives.items()}},
                   {"": "objective after", **{c: o[1] for c, o in objectives.items()}},
                   {"": "median γ after", **{c: r["gamma"]["median"] for c, r in columns.items()}},
                   {"": "outcome", **{c: "kept" if r["kept"] else "undone" for c, r in columns.items()}}]
        examples = [{"round": r["round"], "label": e["label"], "before": e["before"], "after": e["after"],
                     "γ": (e["gamma_before"], e["gamma_after"])} for r in report["rounds"] for e in r["examples"][:5]]
        as_text = lambda v: v if isinstance(v, str) else fmt.value(v)  # noqa: E731
        page.section("Rounds", table(rounds, ["", *columns], {c: as_text for c in columns}),
                     note("A round whose objective does not increase is undone and ends the loop."))
        page.section("Before / after examples (five per round)", table(
            examples, formats={"γ": lambda g: f"{fmt.number(g[0])} → {fmt.number(g[1])}"}))
    return page.section("Configuration", config_table(report["config"])).html()


def _lines(r: dict) -> tuple:
    """What the terminal shows of a run's report: the scores, each round with its objective before → after (with
    the digits that show the change), and the verdict (one line when it holds, else the warning and remedy)."""
    def objective(x: dict) -> str:
        return " → ".join(change(x["objective_before"], x["objective_after"]))
    lines = [f"{r['rows']:,} rows scored on {r['field']}: objective {fmt.number(r['objective'])}, "
             f"median γ {r['gamma']['median']:.4g}",
             *(f"  round {x['round']}: {x['candidates']} candidates, {x['accepted']} accepted, {x['replaced']} "
               f"replaced, objective {objective(x)}" + ("" if x["kept"] else " (undone)") for x in r.get("rounds", []))]
    if r.get("resumed_rounds"):
        lines.append(f"resumed: {r['resumed_rounds']} finished round(s) from the interrupted run before")
    if "verdict" in r:
        v = r["verdict"]
        lines += [v["line"], *(f"  {w}" for w in v["warnings"]), *(f"  note: {n}" for n in v["notes"])]
    return tuple(lines)


class RazorStage(Stage):
    """RAZOR: shortcut scores γ and the LLM rewrite/verify loop (Yang et al. 2024).

    Writes ``scores/`` (γ per row) and, unless --score-only, ``corpus/`` (rewritten, the same size as the
    input: what a pipeline's next stage reads) and ``report/`` (with the verdict on the rewritten corpus).
    """

    name, Config = "razor", RazorConfig
    needs = ("id", "text_a", "label")
    adds = ("source",)
    resources = Resources(cpus=1, memory_gb=2)
    version = 2   # 2: the verdict on the rewritten corpus in report/

    @property
    def output(self) -> Output:
        return Output.INPUT if self.config.score_only else Output.CORPUS

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        table, rejects = source.load()
        r = run(table, out.folder, self.config, source.engine, input_rejects=rejects,
                storage_options=source.opts.storage_options, inputs=source.paths,
                features=FeatureConfig().named(source.field_names, source.single_text))
        headline = f"{r['rows']:,} rows scored on {r['field']}: objective {fmt.number(r['objective'])}"
        if not self.config.score_only:
            headline = (f"{r['rows']:,} rows scored on {r['field']}, {r['replaced_rows']:,} rows rewritten, "
                        f"objective {' → '.join(change(r['objective'], r['objective_after']))}; "
                        f"{verdict_headline(r['verdict'])}")
        warnings = () if self.config.score_only or r["verdict"]["ok"] else tuple(r["verdict"]["warnings"])
        return StageResult(r["rows"] + r["input_rejected"], {"scored": r["rows"], "input rejects": r["input_rejected"]},
                           r, headline, _lines(r), warnings)
