"""AUDAC adaptive round-robin up-sampling (arXiv 2401.13907, Algorithm 1; METHODS §3), in DuckDB SQL, with the
safeguards an imbalanced corpus needs.

The paper's algorithm: S = the top-k tokens by z*(s) = max_l z*(s,l) among tokens with n(s) in a count band.
For each s, round robin, draw d_l = ceil(D_l[s]·step) rows of each short label l from B[s] (the rows containing
s); deficits are recomputed after every draw, since the added rows carry other tokens too. Stop when every D[s]
is ~0 or after N iterations.

What refinery adds, and why (docs/upsample.md):

- p0 follows the audit's prior rule (``auto``: the label shares when the labels are imbalanced, else 1/C;
  ``uniform`` is the paper's). A token's target is p(l|s) = p0_l:
  D_l[s] = p0_l · max_l′(c_l′(s)/p0_l′) − c_l(s),
  the paper's max_l′ c_l′(s) − c_l(s) under the uniform prior. Under 1/C an imbalanced corpus's common words
  rank as biases toward its majority label merely for being common, and "correcting" them copies the
  minority labels wholesale.
- Only tokens whose z* passes the Bonferroni threshold are corrected; negations and quantifiers are never
  stopwords (``features.KEPT_WORDS``).
- A row is copied at most ``max_copies`` times, each turn's copies go to distinct rows, those with the fewest
  copies first. A token whose short label runs out of rows is corrected as far as they go, and the report
  says how many copies a row would have needed.
- Every copy is checked against the audit of the output (the audit's features, unigrams and bigrams per
  field, under the input's p0), a ``ShortcutGuard``: a copy that would take a feature over the significance
  threshold, raise a significant one by more than ``RISE``, or raise a label's max z* is refused, and its row
  is not drawn again.
- Under the empirical prior, copies of rows without a selected token (checked the same way) bring the label
  shares back to the input's, so that the output's p0 is the input's.
- After the last turn the output's audit is judged against the input's (``refinery.core.verdict``, under the
  output's own prior rule and under the input's p0); turns are undone, last first, until both verdicts hold.
"""
from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.core import stats as zstats
from refinery.core.features import KEPT_WORDS, NULL_FEATURE, STOPWORD_LIST, FeatureConfig, extract
from refinery.core.validation import SEED, at_least, number_in, one_of, setting, validate
from refinery.core.verdict import JITTER, Verdict, judge
from refinery.io import queries
from refinery.io.corpus import CorpusWriter
from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping
from refinery.io.location import join
from refinery.io.publishing import AtomicDir
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult
from refinery.progress import progress
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report import verdict as verdict_page
from refinery.report.page import Report, config_table, corpus_name, fields, figure, note, table

ALPHA = 0.01          # family-wise level of the tokens' and the guard's Bonferroni thresholds (the audit's default)
AUDIT_MIN_COUNT = 10  # the guard's and the verdict's min_count (the audit's default)
RISE = JITTER         # how far copies may raise a feature already over the threshold: what the verdict calls jitter


@dataclass
class UpsampleConfig:
    k: int = setting(10, at_least(1), "Tokens to correct (|S|).")
    step: float = setting(0.2, number_in(0, 1, open_low=True), "Share of a token's deficit D[s] drawn per turn.")
    iterations: int = setting(10, at_least(1), "Round-robin passes at most (N).")
    band_min: float = setting(0.002, number_in(0), "Least n(s): a fraction of the rows (≤ 1) or a count (> 1) "
                                                   "(paper: 1,000 on SNLI train).")
    band_max: float = setting(0.02, number_in(0, open_low=True), "Most n(s): a fraction of the rows (≤ 1) or a "
                                                                 "count (> 1) (paper: 10,000 on SNLI train).")
    min_count: int = setting(20, at_least(1), "Least n(s) whatever the band.")
    tolerance: float = setting(0.01, number_in(0, 1, open_high=True), "Stop when D[s] ≤ tolerance·n(s) for every s.")
    prior: str = setting("auto", one_of(*zstats.PRIORS), zstats.PRIOR_HELP + " A token's target p(l|s) is p0 "
                         "(the paper: uniform).")
    max_copies: int = setting(3, at_least(1), "Copies of one source row at most; each turn's copies go to distinct "
                                              "rows, the fewest-copied first.")
    remove_stopwords: bool = setting(True, help="Remove English stopwords (the paper does; negations and "
                                                "quantifiers stay).")
    seed: int = setting(0, SEED, "Seed of the draws.")

    def __post_init__(self):
        validate(self)
        if (self.band_min > 1) == (self.band_max > 1) and self.band_min >= self.band_max:
            raise ValueError(f"band_min must be less than band_max, got {self.band_min:g} and {self.band_max:g}")

    def band(self, rows: int) -> tuple[int, int]:
        """[lo, hi] of n(s) over a corpus of ``rows`` rows (lo at least min_count)."""
        lo = max(self.min_count, math.ceil(_band_count(self.band_min, rows)))
        return lo, max(lo, math.floor(_band_count(self.band_max, rows)))


def _band_count(value: float, rows: int) -> float:
    return value if value > 1 else value * rows


def token_stats(con) -> pa.Table:
    """Per token and label of the current corpus: c, n, p̂ and z* under label_set's p0."""
    return queries.run(con, "audac_token_stats")


def _as_zstats(table: pa.Table, labels: list, p0: np.ndarray, min_count: int) -> zstats.ZStats:
    counts = table.select(["token", "label", "c"]).rename_columns(["feature", "label", "count"])
    features, matrix, n = zstats.long_to_matrix(counts, labels)
    return zstats.from_matrix(features, labels, matrix, p0, min_count, ALPHA, n=n)


def deficits(counts: dict, p0: dict) -> dict:
    """D_l = p0_l · max_l′(c_l′/p0_l′) − c_l per label l (rounded up; 0 for the token's own labels)."""
    top = max(counts.get(l, 0) / p for l, p in p0.items())
    return {l: max(0, math.ceil(p * top - counts.get(l, 0) - 1e-6)) for l, p in p0.items()}


def copies_needed(counts: dict, p0: dict) -> dict:
    """Per short label: the copies each of its rows would need for p̂(l|s) to reach p0_l (inf: it has none)."""
    return {l: (math.ceil(d / counts[l]) if counts.get(l, 0) else math.inf)
            for l, d in deficits(counts, p0).items() if d > 0}


def _ranked_tokens(stats: pa.Table, min_count: int) -> list[dict]:
    """Tokens with n(s) ≥ min_count by z*(s) = max_l z*(s,l), highest first (ties by token)."""
    d = stats.to_pydict()
    per_token: dict = {}
    for tok, lab, c, n, z in zip(d["token"], d["label"], d["c"], d["n"], d["z"]):
        e = per_token.setdefault(tok, {"token": tok, "n": int(n), "z": -np.inf, "label": None, "counts": {}})
        if z > e["z"]:
            e["z"], e["label"] = z, lab
        e["counts"][lab] = c
    ranked = sorted((e for e in per_token.values() if e["n"] >= min_count), key=lambda e: (-e["z"], e["token"]))
    return [{**e, "z": round(float(e["z"]), 4)} for e in ranked]


def token_threshold(stats: pa.Table, labels: list, min_count: int) -> float:
    """The Bonferroni threshold of the tokens' z*: Φ⁻¹(1 − α/m), m = tokens with n ≥ min_count × labels."""
    tested = pc.sum(pc.greater_equal(stats["n"], min_count)).as_py() or 0  # one row per token and label
    return zstats.bonferroni_threshold(ALPHA, int(tested))


def select_tokens(stats: pa.Table, labels: list, config: UpsampleConfig, rows: int, threshold: float
                  ) -> tuple[list, list]:
    """(S, uncorrectable): the top-k correctable tokens by z* within the count band whose z* passes the
    threshold; uncorrectable: those some label never co-occurs with, passed over."""
    lo, hi = config.band(rows)
    chosen, uncorrectable = [], []
    for e in _ranked_tokens(stats, lo):
        if len(chosen) == config.k or e["z"] <= threshold:
            break
        if e["n"] <= hi:
            entry = {k: e[k] for k in ("token", "n", "z", "label", "counts")}
            (chosen if all(e["counts"].get(l, 0) > 0 for l in labels) else uncorrectable).append(entry)
    return chosen, uncorrectable


def left_out(every_token: pa.Table, chosen: list, config: UpsampleConfig, rows: int, threshold: float,
             p0: dict) -> tuple[list, str | None]:
    """(tokens, band hint): the tokens S leaves out, stopwords included: the significant ones among the top k by
    z*, and every negation or quantifier in at least min_count rows, each with the reason and the copies per row
    its correction would need; and the ``--band`` that would take in those outside the band whose correction fits
    ``max_copies`` (None if none)."""
    lo, hi = config.band(rows)
    taken = {c["token"] for c in chosen}
    ranked = _ranked_tokens(every_token, config.min_count)
    significant = [e for e in ranked if e["z"] > threshold]
    shown = significant[: config.k] + [e for e in ranked if e["token"] in KEPT_WORDS and e not in
                                       significant[: config.k]]
    out, outside = [], []
    for e in shown:
        if e["token"] in taken:
            continue
        need = copies_needed(e["counts"], p0)
        most = max(need.values(), default=0)
        if e["z"] <= threshold:
            reason = f"z* under the threshold {threshold:.2f}: not a shortcut here, nothing to correct"
        elif config.remove_stopwords and e["token"] in STOPWORD_LIST:
            reason = "a stopword (kept with --no-remove-stopwords)"
        elif math.isinf(most):
            reason = _never(e["token"], [l for l, c in need.items() if math.isinf(c)])
        elif not lo <= e["n"] <= hi:
            reason = f"n outside the band {lo:,}–{hi:,}"
            if most <= config.max_copies:
                outside.append(e["n"])
            else:
                reason += f"; {_would_copy(e['token'], e['counts'], need, config.max_copies)}"
        else:
            reason = f"not among the top {config.k} in the band (a larger --k takes it in)"
        out.append({"token": e["token"], "n": e["n"], "z": e["z"], "label": e["label"], "counts": e["counts"],
                    "copies_needed": None if math.isinf(most) or e["z"] <= threshold else most, "reason": reason})
    if not outside:
        return out, None
    lower = _widened(config.band_min, min(outside), rows, lower=True)
    return out, f"{lower},{_widened(config.band_max, max(outside), rows, lower=False)}"


IBADR = "consider generation (refinery ibadr) for counter-examples"


def _never(token: str, labels: list) -> str:
    return f"no {' or '.join(labels)} row contains `{token}`: copies cannot correct it; {IBADR}"


def _would_copy(token: str, counts: dict, need: dict, cap: int) -> str:
    """'3 entailment rows contain `no`; correcting it would copy each 40 times (--max-copies 3)'."""
    short = [l for l, c in need.items() if c > cap]
    parts = [f"{counts.get(l, 0):,} {l} {'row contains' if counts.get(l, 0) == 1 else 'rows contain'} `{token}`"
             for l in short]
    most = max(need[l] for l in short)
    return (f"{' and '.join(parts)}; correcting it would copy each {most:,} times (--max-copies {cap}); {IBADR}")


def _widened(bound: float, n: int, rows: int, lower: bool) -> str:
    """``bound`` moved out to reach n(s) = n, in its own unit: a count (> 1), or a fraction of the rows (4 decimals)."""
    reach = n if bound > 1 else (math.floor if lower else math.ceil)(n / rows * 1e4) / 1e4
    return f"{(min if lower else max)(bound, reach):g}"


class ShortcutGuard:
    """The audit of the output kept current as copies are added, so that no copy strengthens a shortcut.

    The audit's features (``FeatureConfig``: unigrams and bigrams per field, ``null``) are counted once over the
    input; the features of the rows that may be copied (``candidates``) are kept per row. A copy of row r
    (label l) is admitted when, with it, every feature x of r keeps z*(x, l′) under its ceiling for every label
    l′ (features in ≥ AUDIT_MIN_COUNT rows, the input's p0): the significance threshold t for a feature under t
    (a copy never makes a shortcut), z*_in + RISE for one over it (never strengthens one), and at most the
    label's max z* in the input. Only the candidates' features can change, so only they are held.
    """

    def __init__(self, table: pa.Table, candidates: np.ndarray, labels: list, features: FeatureConfig, prior: str):
        from refinery.methods.audit import AuditConfig, count_table

        self.labels, self.prior_rule = labels, prior
        counter = count_table(table, AuditConfig(features=features, prior=prior, min_count=AUDIT_MIN_COUNT))
        names, matrix, n = counter.matrix(labels, 0)
        self.totals = np.array([counter.label_totals.get(l, 0) for l in labels], dtype=np.int64)
        self.prior = zstats.choose_prior(prior, dict(zip(labels, self.totals.tolist())))
        self.p0 = zstats.prior_vector(labels, dict(zip(labels, self.totals.tolist())), prior)
        eligible = n >= AUDIT_MIN_COUNT
        self.before = zstats.from_matrix(names.filter(pa.array(eligible)), labels, matrix[eligible], self.p0,
                                         AUDIT_MIN_COUNT, ALPHA, n=n[eligible])
        long = extract(table.take(pa.array(candidates, pa.int64())), features)
        column = long["feature"].combine_chunks() if isinstance(long["feature"], pa.ChunkedArray) else long["feature"]
        feature_ids = pc.fill_null(pc.index_in(column.dictionary, value_set=names), -1).to_numpy()
        fids = feature_ids[column.indices.to_numpy()].astype(np.int64)
        rows = long["row"].to_numpy()
        known = fids >= 0   # every feature of a candidate was counted; kept safe all the same
        rows, fids = rows[known], fids[known]
        order = np.argsort(rows, kind="stable")
        rows, fids = rows[order], fids[order]
        self.touched, local = np.unique(fids, return_inverse=True)   # the features copies can change
        self.fids = local.astype(np.int64)
        self.offsets = np.searchsorted(rows, np.arange(len(candidates) + 1))
        self.slot = {int(r): i for i, r in enumerate(candidates)}
        kept = np.union1d(np.flatnonzero(eligible), self.touched)   # every feature the verdict can see
        self.names, self.base = names.take(pa.array(kept)), matrix[kept].astype(np.int64)
        self.in_kept = np.searchsorted(kept, self.touched)
        self.counts = self.base[self.in_kept].copy()
        self.ceiling = self._ceilings(names.take(pa.array(self.touched)), self.counts)
        self.copies = np.zeros(len(labels), dtype=np.int64)
        self.label_of = pc.index_in(table["label"], value_set=pa.array(labels)).to_numpy(zero_copy_only=False)

    def _ceilings(self, names: pa.Array, counts: np.ndarray) -> np.ndarray:
        n = counts.sum(axis=1)
        z = zstats.z_score(counts / np.maximum(n, 1)[:, None], n[:, None], self.p0[None, :])
        t = self.before.threshold
        _, _, z_in = self.before.eligible()
        ranked = pc.not_equal(self.before.features.take(pa.array(np.flatnonzero(self.before.n >= AUDIT_MIN_COUNT))),
                              NULL_FEATURE).to_numpy(zero_copy_only=False)
        limit = z_in[ranked].max(axis=0) if ranked.any() else np.full(len(self.labels), t)
        over = (n >= AUDIT_MIN_COUNT)[:, None] & (z > t)
        ceiling = np.where(over, np.minimum(z + RISE, np.maximum(limit, z)), np.minimum(t, limit))
        ceiling = np.where((n >= AUDIT_MIN_COUNT)[:, None], np.maximum(ceiling, z), ceiling)  # never below now
        ceiling[pc.equal(names, NULL_FEATURE).to_numpy(zero_copy_only=False)] = np.inf  # the label prior
        return ceiling

    def admit(self, row_ids: list, strict: bool = False) -> tuple[list, dict]:
        """(the rows whose copies were admitted, {refused row: the feature its copy would have raised}).
        ``strict``: a copy may not raise a significant feature at all (the copies that keep the label shares)."""
        admitted, refused = [], {}
        for r in row_ids:
            i, label = self.slot[r], self.label_of[r]
            f = self.fids[self.offsets[i]:self.offsets[i + 1]]
            c = self.counts[f].astype(np.float64)
            ceiling = self.ceiling[f]
            if strict:
                n_now = c.sum(axis=1)
                z_now = zstats.z_score(c[:, label] / np.maximum(n_now, 1), n_now, self.p0[label])
                significant = (n_now >= AUDIT_MIN_COUNT) & (z_now > self.before.threshold)
                ceiling = ceiling.copy()
                ceiling[significant, label] = np.minimum(ceiling[significant, label], z_now[significant])
            c[:, label] += 1
            n = c.sum(axis=1)
            z = zstats.z_score(c / n[:, None], n[:, None], self.p0[None, :])
            over = (z > ceiling) & (n >= AUDIT_MIN_COUNT)[:, None]
            if over.any():
                worst = int(np.argmax(np.where(over, z - ceiling, -np.inf).max(axis=1)))
                refused[r] = self.names[int(self.in_kept[f[worst]])].as_py()
                continue
            self.counts[f, label] += 1
            self.copies[label] += 1
            admitted.append(r)
        return admitted, refused

    def remove(self, row_ids: list) -> None:
        """Take back the copies of ``row_ids`` (one each)."""
        for r in row_ids:
            label = self.label_of[r]
            i = self.slot[r]
            self.counts[self.fids[self.offsets[i]:self.offsets[i + 1]], label] -= 1
            self.copies[label] -= 1

    def after(self, p0: np.ndarray | None = None) -> zstats.ZStats:
        """The audit of the output: under ``p0``, else the prior rule applied to the output's label shares."""
        matrix = self.base.copy()
        matrix[self.in_kept] = self.counts
        if p0 is None:
            totals = dict(zip(self.labels, (self.totals + self.copies).tolist()))
            p0 = zstats.prior_vector(self.labels, totals, self.prior_rule)
        return zstats.from_matrix(self.names, self.labels, matrix, p0, AUDIT_MIN_COUNT, ALPHA)

    def verdicts(self, remedy: str = "") -> tuple[Verdict, Verdict]:
        """The verdict on the output's audit under its own prior rule, and under the input's p0."""
        prior = str(self.prior)
        return (judge(self.before, self.after(), stage="upsample", under_threshold=False, prior=prior,
                      remedy_worsened=remedy),
                judge(self.before, self.after(self.p0), stage="upsample", under_threshold=False, prior=prior,
                      remedy_worsened=remedy))


def run(inputs, out: str, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
        config: UpsampleConfig = UpsampleConfig(), threads: int | None = None,
        features: FeatureConfig | None = None) -> dict:
    """Up-sample ``inputs`` (paths, or named splits {split: paths}, each row keeping its ``split``) into ``out``
    (corpus + trace.parquet + report.json/html). ``features``: the audit's features the guard and the verdict
    use (default: unigrams, bigrams and null, named by ``mapping``'s fields)."""
    splits = inputs if isinstance(inputs, dict) else {"": list(inputs)}
    if features is None:
        features = FeatureConfig().named(mapping.field_names if mapping else None)
    with tempfile.TemporaryDirectory(prefix="refinery-audac-") as work:
        corpora = queries.split_corpora(splits, mapping, opts, work)
        con = queries.connect(threads=threads)
        queries.load_rows(con, queries.files_of(corpora), opts.storage_options, with_split=any(splits))
        return _upsample(con, out, config, features, [p for ps in splits.values() for p in ps],
                         queries.corpora_rejects(corpora), opts.storage_options)


def _upsample(con, out: str, config: UpsampleConfig, features: FeatureConfig, inputs: list, rejects: pa.Table,
              storage_options: dict | None = None) -> dict:
    labels = [r[0] for r in con.execute("SELECT DISTINCT label FROM rows ORDER BY label").fetchall()]
    totals = dict(con.execute("SELECT label, count(*) FROM rows GROUP BY label").fetchall())
    prior = zstats.choose_prior(config.prior, totals)
    p0 = zstats.prior_vector(labels, totals, config.prior)
    con.register("__labels", pa.table({"label": labels, "p0": p0}))
    con.execute("CREATE OR REPLACE TABLE label_set AS SELECT * FROM __labels ORDER BY label")
    con.execute("CREATE OR REPLACE TABLE extra (row_id BIGINT, extra BIGINT)")
    con.execute("CREATE OR REPLACE TABLE blocked (row_id BIGINT)")
    n_rows = sum(totals.values())
    target = dict(zip(labels, (round(float(x), 6) for x in p0)))
    queries.run_script(con, "audac_token_rows")  # every token, for left_out
    every_token = token_stats(con)
    before = every_token
    if config.remove_stopwords:
        con.register("__stopwords", pa.table({"word": sorted(STOPWORD_LIST)}))
        con.execute("DELETE FROM token_rows WHERE token IN (SELECT word FROM __stopwords)")
        before = every_token.filter(pc.invert(pc.is_in(every_token["token"], value_set=pa.array(STOPWORD_LIST))))
    threshold = token_threshold(before, labels, config.min_count)
    chosen, uncorrectable = select_tokens(before, labels, config, n_rows, threshold)
    con.register("__selected", pa.table({"token": pa.array([c["token"] for c in chosen], pa.string())}))
    con.execute("CREATE OR REPLACE TABLE selected AS SELECT * FROM __selected")
    # B[s] for the selected tokens only, with each row's label: the draws touch these rows, not the whole corpus
    con.execute("CREATE OR REPLACE TABLE selected_rows AS SELECT t.row_id, t.token, r.label "
                "FROM token_rows t JOIN selected USING (token) JOIN rows r USING (row_id) ORDER BY token, row_id")
    candidates = np.array([r[0] for r in con.execute("SELECT DISTINCT row_id FROM selected_rows ORDER BY row_id")
                           .fetchall()], dtype=np.int64)
    table = con.sql("SELECT text_a, " + ("text_b, " if _has(con, "text_b") else "") +
                    "label FROM rows ORDER BY row_id").to_arrow_table()
    pool = _padding_pool(con, config) if prior.name == "empirical" else {}
    guard = ShortcutGuard(table, np.union1d(candidates, [r for rows in pool.values() for r in rows]).astype(np.int64),
                          labels, features, config.prior)

    trace, turns, refused = _rounds(con, config, chosen, labels, guard)
    undone = _undo_until_nothing_worse(guard, turns, trace, lambda: _pad(guard, pool, turns, trace, labels))
    added = [(draw_id, it, tok, r) for draw_id, (it, tok, r) in enumerate(
        (trace[j]["iteration"], trace[j]["token"], r) for j, rows in turns for r in rows)]
    _set_extra(con, [a[3] for a in added])
    after = token_stats(con)
    supply = queries.run(con, "audac_supply", {"max_copies": config.max_copies}).to_pylist()
    report = _report(before, after, chosen, uncorrectable, labels, n_rows, len(added), trace, config, inputs)
    report.update({
        "prior": str(prior), "p0": target, "token_threshold": round(threshold, 4),
        "band": list(config.band(n_rows)), "rejected": rejects.num_rows,
        "labels_before": {l: int(totals.get(l, 0)) for l in labels},
        "labels_after": {l: int(totals.get(l, 0) + c) for l, c in zip(labels, guard.copies.tolist())},
        "most_copies_of_a_row": _most_copies(added),
        "refused": {"rows": len(refused), "features": _tally(refused.values())},
        "undone_turns": undone,
        "not_corrected": _not_corrected(chosen, report["p_hat_after"], supply, config, target, refused, after,
                                        labels),
    })
    report["left_out"], report["band_hint"] = left_out(every_token, chosen, config, n_rows, threshold, target)
    verdict, verdict_input_p0 = guard.verdicts(_REMEDY.format(cap=config.max_copies))
    report["verdict"], report["verdict_input_p0"] = verdict.to_dict(), verdict_input_p0.to_dict()
    _write(con, out, added, trace, report, config, labels, before, after, rejects, storage_options, verdict)
    return report


_REMEDY = ("lower --max-copies (now {cap}), or --k; or correct with generation (refinery ibadr) or filtering "
           "(refinery zfilter) instead")


def _has(con, column: str) -> bool:
    return column in [c[0] for c in con.execute("DESCRIBE rows").fetchall()]


def _rounds(con, config: UpsampleConfig, chosen: list, labels: list, guard: ShortcutGuard):
    """The round robin: (trace, [(trace index, rows copied)], {refused row: feature})."""
    trace, turns, refused = [], [], {}
    active = {c["token"] for c in chosen}
    n_of = {c["token"]: c["n"] for c in chosen}
    with progress(total=config.iterations, desc="audac", unit=" iter") as bar:
        for it in range(1, config.iterations + 1):
            short = {}
            for r in queries.run(con, "audac_deficits").to_pylist():
                short[r["token"]] = short.get(r["token"], 0) + r["deficit"]
            active = {t for t in active if short.get(t, 0) > config.tolerance * n_of[t]}
            if not active:
                break
            for c in chosen:
                tok = c["token"]
                if tok not in active:
                    continue
                drawn = queries.run(con, "audac_draw", {"token": tok, "step": config.step, "seed": config.seed,
                                                        "round": it, "max_copies": config.max_copies}).to_pylist()
                if not drawn:   # its short labels' rows have run out (the copy cap, or refused)
                    active.discard(tok)
                    continue
                deficit = sum(r["deficit"] for r in queries.run(con, "audac_deficits").to_pylist()
                              if r["token"] == tok)
                rows, no = guard.admit([r["row_id"] for r in drawn])
                refused.update(no)
                if no:
                    con.register("__refused", pa.table({"row_id": pa.array(list(no), pa.int64())}))
                    con.execute("INSERT INTO blocked SELECT row_id FROM __refused")
                if rows:
                    con.register("__drawn", pa.table({"row_id": pa.array(rows, pa.int64())}))
                    con.execute("""
                        CREATE OR REPLACE TABLE extra AS
                        SELECT row_id, sum(extra)::BIGINT AS extra
                        FROM (SELECT row_id, extra FROM extra UNION ALL SELECT row_id, 1 FROM __drawn)
                        GROUP BY row_id""")
                label_of = {r["row_id"]: r["label"] for r in drawn}
                per_label = {l: 0 for l in labels}
                for r in rows:
                    per_label[label_of[r]] += 1
                trace.append({"iteration": it, "token": tok, "deficit_before": int(deficit),
                              **{f"drawn:{l}": per_label[l] for l in labels}, "drawn": len(rows),
                              "refused": len(no), "undone": False})
                turns.append((len(trace) - 1, rows))
            bar.update(1)
    return trace, turns, refused


PAD_POOL = 2000   # rows per label that may be copied to keep the label shares (empirical prior)


def _padding_pool(con, config: UpsampleConfig) -> dict:
    """{label: rows}: up to PAD_POOL rows of each label without a selected token, in a seeded order."""
    pool: dict = {}
    for row_id, label in con.execute(
            "SELECT row_id, label FROM rows WHERE row_id NOT IN (SELECT row_id FROM selected_rows) "
            "QUALIFY row_number() OVER (PARTITION BY label ORDER BY hash($seed, row_id), row_id) <= $pool "
            "ORDER BY label, hash($seed, row_id), row_id", {"seed": config.seed, "pool": PAD_POOL}).fetchall():
        pool.setdefault(label, []).append(row_id)
    return pool


def _pad(guard: ShortcutGuard, pool: dict, turns: list, trace: list, labels: list) -> None:
    """Under the empirical prior, copies of rows without a selected token (``pool``) that raise no significant
    feature bring the label shares back to the input's: otherwise the copies would move the output's p0, and with
    it every feature's z*. One turn (token None) at the end, replaced whenever the turns before it change."""
    if turns and trace[turns[-1][0]]["token"] is None:
        j, rows = turns.pop()
        guard.remove(rows)
        trace.pop(j)
    if not pool:
        return
    counts = guard.totals + guard.copies
    top = max(c / p for c, p in zip(counts, guard.p0))
    need = {l: max(0, round(p * top - c)) for l, c, p in zip(labels, counts, guard.p0)}
    rows = []
    for label, wanted in need.items():
        for r in pool.get(label, []):
            if wanted <= 0:
                break
            admitted, _ = guard.admit([r], strict=True)
            rows += admitted
            wanted -= len(admitted)
    if rows:
        label_of = dict(zip(labels, range(len(labels))))
        per_label = {l: sum(1 for r in rows if guard.label_of[r] == label_of[l]) for l in labels}
        trace.append({"iteration": max((t["iteration"] for t in trace), default=0), "token": None,
                      "deficit_before": int(sum(need.values())), **{f"drawn:{l}": per_label[l] for l in labels},
                      "drawn": len(rows), "refused": 0, "undone": False})
        turns.append((len(trace) - 1, rows))


def _undo_until_nothing_worse(guard: ShortcutGuard, turns: list, trace: list, pad) -> int:
    """Pad the label shares (``pad``), then undo turns, last first, until the verdicts hold (the output's audit
    under its own prior rule and under the input's p0); the number undone. The guard keeps each copy within
    bounds under the input's p0; padding keeps the output's p0 near it, and this makes sure."""
    undone = 0
    pad()
    while not all(v.ok for v in guard.verdicts()):
        token_turns = [t for t in turns if trace[t[0]]["token"] is not None]
        if not token_turns:
            break
        pad_turn = turns.pop() if trace[turns[-1][0]]["token"] is None else None
        if pad_turn:
            guard.remove(pad_turn[1])
            trace.pop(pad_turn[0])
        j, rows = turns.pop()
        guard.remove(rows)
        trace[j] = {**trace[j], "undone": True}
        undone += 1
        pad()
    return undone


def _set_extra(con, rows: list) -> None:
    con.register("__copies", pa.table({"row_id": pa.array(rows, pa.int64())}))
    con.execute("CREATE OR REPLACE TABLE extra AS SELECT row_id, count(*)::BIGINT AS extra FROM __copies "
                "GROUP BY row_id")


def _most_copies(added: list) -> int:
    counts: dict = {}
    for a in added:
        counts[a[3]] = counts.get(a[3], 0) + 1
    return max(counts.values(), default=0)


def _tally(values) -> dict:
    """{value: how often}, most frequent first (at most 10)."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10])


def _not_corrected(chosen: list, p_after: dict, supply: list, config: UpsampleConfig, p0: dict, refused: dict,
                   after: pa.Table, labels: list) -> list:
    """The selected tokens whose labels did not reach p0 (D[s] > tolerance · n(s)), and why."""
    counts_after = {}
    for r in after.filter(pc.is_in(after["token"], value_set=pa.array([c["token"] for c in chosen], pa.string()))
                          ).to_pylist():
        counts_after.setdefault(r["token"], {})[r["label"]] = r["c"]
    by = {(s["token"], s["label"]): s for s in supply}
    out = []
    for c in chosen:
        tok = c["token"]
        now = counts_after.get(tok, {})
        left = deficits(now, p0)
        if sum(left.values()) <= config.tolerance * c["n"]:
            continue
        need = copies_needed(c["counts"], p0)
        reasons = []
        if any(v > config.max_copies for v in need.values()):
            reasons.append(_would_copy(tok, c["counts"], need, config.max_copies))
        blocked = {l: by.get((tok, l), {}).get("refused", 0) for l in need}
        if any(blocked.values()):
            reasons.append(", ".join(f"{b:,} {l} rows" for l, b in blocked.items() if b)
                           + " not copied: a copy would have strengthened a shortcut")
        if not reasons:
            reasons.append(f"stopped after {config.iterations} iterations (more with --iterations)")
        out.append({"token": tok, "label": c["label"], "p_hat_before": c["counts"][c["label"]] / c["n"],
                    "p_hat_after": p_after[tok][c["label"]], "p0": p0[c["label"]],
                    "deficit_after": {l: d for l, d in left.items() if d}, "copies_needed": need,
                    "reason": "; ".join(reasons)})
    return out


def _p_hat(stats: pa.Table, tokens: list, labels: list) -> dict:
    d = stats.filter(pc.is_in(stats["token"], value_set=pa.array(tokens, pa.string()))).to_pylist()
    out = {t: {l: 0.0 for l in labels} for t in tokens}
    for r in d:
        out[r["token"]][r["label"]] = round(r["p_hat"], 4)
    return out


def _report(before, after, chosen, uncorrectable, labels, n_rows, n_added, trace, config, inputs) -> dict:
    tokens = [c["token"] for c in chosen]
    pb, pa_ = _p_hat(before, tokens, labels), _p_hat(after, tokens, labels)
    return {
        "rows_before": n_rows, "rows_added": n_added, "rows_after": n_rows + n_added,
        "growth": round(n_added / max(n_rows, 1), 4),
        "tokens": tokens,
        "p_hat_before": pb, "p_hat_after": pa_,
        "max_p_after": {t: max(pa_[t].values()) for t in tokens},
        "z_after": {e["token"]: e["z"] for e in _ranked_tokens(
            after.filter(pc.is_in(after["token"], value_set=pa.array(tokens, pa.string()))), 0)},
        "uncorrectable": [{**u, "reason": _never(u["token"], [l for l in labels if not u["counts"].get(l)])}
                          for u in uncorrectable],
        "selected": chosen,
        "iterations_run": max((t["iteration"] for t in trace), default=0),
        "config": asdict(config), "inputs": inputs,
    }


def _write(con, out, added, trace, report, config, labels, before, after, rejects, storage_options,
           verdict: Verdict) -> None:
    con.register("__added", pa.table({"draw_id": pa.array([a[0] for a in added], pa.int64()),
                                      "iteration": pa.array([a[1] for a in added], pa.int64()),
                                      "token": pa.array([a[2] for a in added], pa.string()),
                                      "row_id": pa.array([a[3] for a in added], pa.int64())}))
    # an input that was up-sampled before keeps its rows' provenance; a copy's origin is the original row
    present = [c for c in ("source", "origin_id", "upsample_iteration", "upsample_token") if _has(con, c)]
    star = f"* EXCLUDE ({', '.join(['row_id', *present])})"
    original_source = "coalesce(source, 'original')" if "source" in present else "'original'"
    original_origin = "origin_id" if "origin_id" in present else "NULL::VARCHAR"
    copy_origin = "coalesce(r.origin_id, r.id)" if "origin_id" in present else "r.id"
    earlier_draws = "".join(f", {c}" for c in ("upsample_iteration", "upsample_token") if c in present)
    with CorpusWriter(join(out, Output.CORPUS.value), config={"audac": asdict(config)}, storage_options=storage_options,
                      inputs=report["inputs"]) as writer:
        if writer.skipped:
            writer.commit()
            return
        originals = con.sql(f"SELECT {star}, {original_source} AS source, {original_origin} AS origin_id"
                            f"{earlier_draws} FROM rows ORDER BY row_id")
        upsampled = con.sql(f"SELECT {star.replace('*', 'r.*', 1)} REPLACE (r.id || '#up' || a.draw_id AS id), "
                            f"'upsampled' AS source, {copy_origin} AS origin_id, a.iteration AS upsample_iteration, "
                            "a.token AS upsample_token FROM __added a JOIN rows r USING (row_id) ORDER BY a.draw_id")
        for rel in (originals, upsampled):
            reader = rel.to_arrow_reader(batch_size=100_000) if hasattr(rel, "to_arrow_reader") else \
                rel.fetch_record_batch(100_000)
            for rb in reader:
                writer.write(pa.Table.from_batches([rb]))
        writer.write(rejects=rejects)  # the input's rejects stay accounted for
        writer.commit()
    with AtomicDir(join(out, "report"), storage_options) as d:
        d.write_text("report.json", json.dumps(report, indent=1, default=str))
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist(trace) if trace else pa.table({"iteration": pa.array([], pa.int64())}),
                       sink)
        d.write_bytes("trace.parquet", sink.getvalue().to_pybytes())
        d.write_text("report.html", _html(report, trace, config, labels, before, after, verdict, storage_options))
        d.commit()


SHOWN = 20   # uncorrectable tokens listed in the HTML report (report.json has them all)


def _html(report: dict, trace: list, config: UpsampleConfig, labels: list, before: pa.Table, after: pa.Table,
          verdict: Verdict, storage_options: dict | None = None) -> str:
    corpus = corpus_name(report["inputs"], storage_options)
    lo, hi = report["band"]
    p0 = report["p0"]
    selected = {c["token"]: c for c in report["selected"]}
    pb, pa_ = report["p_hat_before"], report["p_hat_after"]
    change = lambda pair: f"{fmt.number(pair[0])} → {fmt.number(pair[1])}"  # noqa: E731
    p_rows = [{"token": t, "rows with it": selected[t]["n"], "z* before": selected[t]["z"],
               "z* after": report["z_after"][t],
               **{l: (pb[t][l], pa_[t][l]) for l in labels},
               "largest p̂": (max(pb[t].values()), report["max_p_after"][t])} for t in report["tokens"]]
    p_rows.append({"token": "target p0", **{l: fmt.number(p0[l]) for l in labels}})
    not_corrected = [{"token": e["token"], "label": e["label"], "p̂(label)": (e["p_hat_before"], e["p_hat_after"]),
                      "p0": e["p0"], "why": e["reason"]} for e in report["not_corrected"]]
    uncorrectable = [{"token": u["token"], "rows with it": u["n"], "z*": u["z"],
                      **{f"rows labelled {l}": u["counts"].get(l, 0) for l in labels}} for u in report["uncorrectable"]]
    left = [{"token": e["token"], "label": e["label"], "z*": e["z"], "rows with it": e["n"],
             "copies per row it needs": e["copies_needed"], "why left out": e["reason"]} for e in report["left_out"]]
    iterations = sorted({t["iteration"] for t in trace})
    drawn = {}
    for t in trace:
        if not t["undone"]:
            drawn.setdefault(t["token"], {"token": t["token"]})[str(t["iteration"])] = t["drawn"]
    for row in drawn.values():
        row["total"] = sum(row.get(str(i), 0) for i in iterations)
    p0_vector = np.array([p0[l] for l in labels])
    plot = lambda stats, what: figures.zplot(_as_zstats(stats, labels, p0_vector, config.min_count), 6,  # noqa: E731
                                             f"{corpus}: tokens {what}" if corpus else f"tokens {what}")
    refused = report["refused"]
    page = (Report("AUDAC up-sampling: rows of biased tokens copied until their labels even out "
                   "(arXiv 2401.13907)", corpus, report["inputs"])
            .section(verdict_page.HEADING, verdict_page.section(verdict),
                     note("The audit of the output (unigrams and bigrams per field, as `refinery audit`) against "
                          "the audit of the input. Up-sampling promises to make nothing worse: copies that would "
                          "take a feature over the threshold or strengthen a shortcut are refused."))
            .section("Rows", fields({
                "rows before": report["rows_before"], "up-sampled copies added": report["rows_added"],
                "growth": report["growth"], "rows after": report["rows_after"], "input rejects": report["rejected"],
                "prior p0": report["prior"],
                f"tokens corrected (k = {config.k:,})": len(report["tokens"]),
                f"iterations run (at most {config.iterations:,})": report["iterations_run"],
                f"most copies of one row (at most {config.max_copies:,})": report["most_copies_of_a_row"],
                "rows refused (a copy would strengthen a shortcut)": refused["rows"],
                "turns undone": report["undone_turns"],
                "count band": f"tokens in {lo:,} to {hi:,} rows"}, {"growth": fmt.percent}))
            .section("Label shares, before → after", table(
                [{"label": l, "rows before": report["labels_before"][l], "rows after": report["labels_after"][l],
                  "share before": report["labels_before"][l] / max(report["rows_before"], 1),
                  "share after": report["labels_after"][l] / max(report["rows_after"], 1), "target p0": p0[l]}
                 for l in labels], formats={"share before": fmt.percent, "share after": fmt.percent,
                                            "target p0": fmt.number}))
            .section("p̂(label | token) of the corrected tokens, before → after", table(
                p_rows, formats={"z* before": fmt.z, "z* after": fmt.z, **{l: _pair_or_text(change) for l in labels},
                                 "largest p̂": _pair_or_text(change)}),
                note(f"The share of each label among the rows with the token, before up-sampling → after. Copies "
                     f"of those rows are drawn until every label's share nears its prior p0 ({report['prior']}), "
                     f"for {config.iterations:,} iterations at most."))
            .section("Tokens not fully corrected",
                     table(not_corrected, formats={"p̂(label)": change, "p0": fmt.number}),
                     note(f"A row is copied at most {config.max_copies:,} times (--max-copies): a token whose short "
                          "labels have too few rows is corrected as far as they go."))
            .section("Token z-statistics before", figure(plot(before, "before")))
            .section("Token z-statistics after", figure(plot(after, "after"), (
                "The same statistics after up-sampling: the corrected tokens (the table above) fall towards the "
                "prior; tokens left out or uncorrectable stay where they were.")))
            .section("Uncorrectable tokens", table(uncorrectable[:SHOWN], formats={"z*": fmt.z}),
                     note("A label never occurs with these tokens: copying rows cannot even their labels out, so "
                          f"the next token was taken; {IBADR}."
                          + (f" The first {SHOWN} of {len(uncorrectable):,}; report.json lists them all."
                             if len(uncorrectable) > SHOWN else "")))
            .section("Tokens left out: the significant ones, and every negation and quantifier",
                     table(left, formats={"z*": fmt.z}),
                     note(f"Tokens whose z* passes the threshold {fmt.z(report['token_threshold'])} are taken from "
                          f"the band of {lo:,} to {hi:,} rows"
                          + (f"; --band-min {report['band_hint'].split(',')[0]} --band-max "
                             f"{report['band_hint'].split(',')[1]} would take in those outside it that copies can "
                             "correct." if report["band_hint"] else ".")))
            .section("Copies drawn per token and iteration", table(
                list(drawn.values()), ["token", *map(str, iterations), "total"]),
                note("trace.parquet holds each turn's deficit, the copies of each label, the rows refused and the "
                     "turns undone."))
            .section("Configuration", config_table(report["config"])))
    return page.html()


def _pair_or_text(change):
    return lambda v: v if isinstance(v, str) else change(v)


class UpsampleStage(Stage):
    """AUDAC adaptive round-robin up-sampling (DuckDB SQL over Parquet).

    The output's ``corpus/`` holds the input and its up-sampled copies; ``report/`` the trace and the verdict.
    """

    name, Config = "upsample", UpsampleConfig
    needs = ("id", "text_a", "label")
    output = Output.CORPUS
    version = 2   # 2: the corpus in corpus/ (report/ sat inside it: pandas read its files as data)
    one_task = True

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        features = FeatureConfig().named(source.field_names, source.single_text)
        r = run(source.splits, out.folder, source.mapping, source.opts, self.config, features=features)
        v = r["verdict"]
        lines = [v["line"], *(f"  {w}" for w in v["warnings"]), *(f"  note: {n}" for n in v["notes"])]
        headline = (f"{r['rows_before']:,} -> {r['rows_after']:,} rows (+{r['rows_added']:,} up-sampled copies), "
                    f"{r['iterations_run']} iteration(s)")
        ok = r["verdict"]["ok"] and r["verdict_input_p0"]["ok"]
        return StageResult(r["rows_before"] + r["rejected"], {"out": r["rows_before"], "input rejects": r["rejected"]},
                           r, headline, (headline, *_lines(r, self.config), *lines),
                           () if ok else tuple(r["verdict"]["warnings"] or r["verdict_input_p0"]["warnings"]))


def _lines(r: dict, config: UpsampleConfig) -> list[str]:
    """What the terminal shows of an up-sampling: the prior, each token's largest p̂ before and after, what was
    not corrected and why, what was left out."""
    lines = [f"  prior p0: {r['prior']}; at most {config.max_copies} copies of a row "
             f"(most made: {r['most_copies_of_a_row']})"]
    for c in r["selected"]:
        tok, label = c["token"], c["label"]
        lines.append(f"  {tok:<16} z* {c['z']:5.1f} -> {r['z_after'][tok]:5.1f}   p̂({label}) "
                     f"{r['p_hat_before'][tok][label]:.3f} -> {r['p_hat_after'][tok][label]:.3f} "
                     f"(p0 {r['p0'][label]:.3f})")
    for e in r["not_corrected"]:
        lines.append(f"  not fully corrected: {e['token']}: {e['reason']}")
    for u in r["uncorrectable"]:
        lines.append(f"  uncorrectable: {u['token']}: {u['reason']}")
    if r["refused"]["rows"]:
        feats = ", ".join(r["refused"]["features"])
        lines.append(f"  {r['refused']['rows']:,} rows not copied: a copy would have strengthened a shortcut ({feats})")
    if r["undone_turns"]:
        lines.append(f"  {r['undone_turns']} turn(s) undone: the output's label shares moved its prior")
    shown = [e for e in r["left_out"] if e["z"] > r["token_threshold"]]
    if shown:
        lo, hi = r["band"]
        lines.append(f"  left out of the top {config.k} tokens by z*, with the negations and quantifiers (band: n from "
                     f"{lo:,} to {hi:,}; significant: z* > {r['token_threshold']:.2f}):")
        lines += [f"    {e['token']:<14} z* {e['z']:6.1f} {e['label']}, n {e['n']:,}: {e['reason']}" for e in shown]
    calm = [e for e in r["left_out"] if e["z"] <= r["token_threshold"]]
    if calm:
        lines.append("  negations and quantifiers under the threshold, nothing to correct: "
                     + ", ".join(f"{e['token']} {e['z']:.1f}" for e in calm))
        if r["band_hint"]:
            lower, upper = r["band_hint"].split(",")
            lines.append(f"  --band-min {lower} --band-max {upper} would take in those outside the band")
    return lines
