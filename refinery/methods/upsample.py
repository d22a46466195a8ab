"""AUDAC adaptive round-robin up-sampling (arXiv 2401.13907, Algorithm 1; METHODS §3), in DuckDB SQL.

S = the top-k tokens by z*(s) = max_l z*(s,l) among tokens with n(s) in a count band. For each
s, round robin, draw d_l = ceil(D_l[s]·step) rows of label l from B[s] (rows containing s),
with replacement and a seeded hash; deficits are recomputed after every draw, since the
added rows carry other tokens too. Stop when every D[s] is ~0 or after N iterations.
A token that some label never co-occurs with cannot be made uniform by duplication: it is
reported as uncorrectable and the next token is taken. The report also names the top-k tokens by
z* over every token (stopwords and the band aside) that S leaves out, with the option that would
take each in (``--no-remove-stopwords``, or a ``--band`` that reaches its n).
"""
from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.features import STOPWORD_LIST
from refinery.core.validation import SEED, at_least, number_in, setting, validate
from refinery.io import queries
from refinery.io.corpus import CorpusWriter
from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping
from refinery.io.storage import AtomicDir, join
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult
from refinery.progress import progress
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report.page import Report, config_table, corpus_name, fields, figure, note, table


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
    remove_stopwords: bool = setting(True, help="Remove English stopwords (the paper does).")
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


def token_stats(con, num_labels: int) -> pa.Table:
    return queries.run(con, "audac_token_stats", {"num_labels": num_labels})


def _as_zstats(table: pa.Table, labels: list, min_count: int) -> zstats.ZStats:
    counts = table.select(["token", "label", "c"]).rename_columns(["feature", "label", "count"])
    totals = {l: 1 for l in labels}  # uniform prior: totals only name the labels
    return zstats.compute(counts, totals, min_count=min_count)


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


def select_tokens(stats: pa.Table, labels: list, config: UpsampleConfig, rows: int) -> tuple[list, list]:
    """(S, uncorrectable): the top-k correctable tokens by z* within the count band."""
    lo, hi = config.band(rows)
    chosen, uncorrectable = [], []
    for e in _ranked_tokens(stats, lo):
        if len(chosen) == config.k:
            break
        if e["n"] <= hi:
            entry = {k: e[k] for k in ("token", "n", "z", "counts")}
            (chosen if all(e["counts"].get(l, 0) > 0 for l in labels) else uncorrectable).append(entry)
    return chosen, uncorrectable


def left_out(every_token: pa.Table, chosen: list, config: UpsampleConfig, rows: int) -> tuple[list, str | None]:
    """(tokens, band hint): the top-k of ``every_token`` (stopwords included) by z* that S leaves out, each
    with the reason (a stopword, outside the band, uncorrectable), and the ``--band`` that would reach those
    outside it (None if none is)."""
    lo, hi = config.band(rows)
    taken = {c["token"] for c in chosen}
    out, outside = [], []
    for e in _ranked_tokens(every_token, config.min_count)[: config.k]:
        if e["token"] in taken:
            continue
        if config.remove_stopwords and e["token"] in STOPWORD_LIST:
            reason = "a stopword (kept with --no-remove-stopwords)"
        elif not lo <= e["n"] <= hi:
            reason = f"n outside the band {lo:,}–{hi:,}"
            outside.append(e["n"])
        else:
            reason = "uncorrectable: a label never co-occurs with it"
        out.append({"token": e["token"], "n": e["n"], "z": e["z"], "label": e["label"], "reason": reason})
    if not outside:
        return out, None
    lower = _widened(config.band_min, min(outside), rows, lower=True)
    return out, f"{lower},{_widened(config.band_max, max(outside), rows, lower=False)}"


def _widened(bound: float, n: int, rows: int, lower: bool) -> str:
    """``bound`` moved out to reach n(s) = n, in its own unit: a count (> 1), or a fraction of the rows (4 decimals)."""
    reach = n if bound > 1 else (math.floor if lower else math.ceil)(n / rows * 1e4) / 1e4
    return f"{(min if lower else max)(bound, reach):g}"


def run(inputs, out: str, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
        config: UpsampleConfig = UpsampleConfig(), threads: int | None = None) -> dict:
    """Up-sample ``inputs`` (paths, or named splits {split: paths}, each row keeping its ``split``) into ``out``
    (corpus + trace.parquet + report.json/html)."""
    splits = inputs if isinstance(inputs, dict) else {"": list(inputs)}
    with tempfile.TemporaryDirectory(prefix="refinery-audac-") as work:
        corpora = queries.split_corpora(splits, mapping, opts, work)
        con = queries.connect(threads=threads)
        queries.load_rows(con, queries.files_of(corpora), opts.storage_options, with_split=any(splits))
        return _upsample(con, out, config, [p for ps in splits.values() for p in ps],
                         queries.corpora_rejects(corpora), opts.storage_options)


def _upsample(con, out: str, config: UpsampleConfig, inputs: list, rejects: pa.Table,
              storage_options: dict | None = None) -> dict:
    con.register("__stopwords", pa.table({"word": sorted(STOPWORD_LIST)}))
    con.execute("CREATE OR REPLACE TABLE stopwords AS SELECT * FROM __stopwords")
    con.execute("CREATE OR REPLACE TABLE label_set AS SELECT DISTINCT label FROM rows ORDER BY label")
    con.execute("CREATE OR REPLACE TABLE extra (row_id BIGINT, extra BIGINT)")
    labels = [r[0] for r in con.execute("SELECT label FROM label_set").fetchall()]
    n_rows = con.execute("SELECT count(*) FROM rows").fetchone()[0]
    queries.run_script(con, "audac_token_rows")  # every token, for left_out
    every_token = token_stats(con, len(labels))
    before = every_token
    if config.remove_stopwords:
        con.execute("DELETE FROM token_rows WHERE token IN (SELECT word FROM stopwords)")
        before = every_token.filter(pc.invert(pc.is_in(every_token["token"], value_set=pa.array(STOPWORD_LIST))))
    chosen, uncorrectable = select_tokens(before, labels, config, n_rows)
    con.register("__selected", pa.table({"token": pa.array([c["token"] for c in chosen], pa.string())}))
    con.execute("CREATE OR REPLACE TABLE selected AS SELECT * FROM __selected")
    # B[s] for the selected tokens only, with each row's label: the draws touch these rows, not the whole corpus
    con.execute("CREATE OR REPLACE TABLE selected_rows AS SELECT t.row_id, t.token, r.label "
                "FROM token_rows t JOIN selected USING (token) JOIN rows r USING (row_id) ORDER BY token, row_id")

    trace, added = [], []
    draw_id = 0
    with progress(total=config.iterations, desc="audac", unit=" iter") as bar:
        for it in range(1, config.iterations + 1):
            deficits = queries.run(con, "audac_deficits").to_pylist()
            if all(sum(r["deficit"] for r in deficits if r["token"] == c["token"]) <= config.tolerance * c["n"]
                   for c in chosen):
                break
            for c in chosen:
                tok = c["token"]
                drawn = queries.run(con, "audac_draw", {"token": tok, "step": config.step, "seed": config.seed,
                                                        "round": it}).to_pylist()
                before_d = {r["label"]: r["deficit"] for r in queries.run(con, "audac_deficits").to_pylist()
                            if r["token"] == tok}
                per_label = {l: 0 for l in labels}
                for r in drawn:
                    per_label[r["label"]] += 1
                    added.append((draw_id, it, tok, r["row_id"]))
                    draw_id += 1
                if drawn:
                    con.register("__drawn", pa.table({"row_id": [r["row_id"] for r in drawn]}))
                    con.execute("""
                        CREATE OR REPLACE TABLE extra AS
                        SELECT row_id, sum(extra)::BIGINT AS extra
                        FROM (SELECT row_id, extra FROM extra UNION ALL SELECT row_id, 1 FROM __drawn)
                        GROUP BY row_id""")
                trace.append({"iteration": it, "token": tok, "deficit_before": int(sum(before_d.values())),
                              **{f"drawn:{l}": per_label[l] for l in labels}, "drawn": len(drawn)})
            bar.update(1)

    after = token_stats(con, len(labels))
    report = _report(before, after, chosen, uncorrectable, labels, n_rows, len(added), trace, config, inputs)
    report["band"] = list(config.band(n_rows))
    report["left_out"], report["band_hint"] = left_out(every_token, chosen, config, n_rows)
    report["rejected"] = rejects.num_rows
    _write(con, out, added, trace, report, config, labels, before, after, rejects, storage_options)
    return report


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
        "uncorrectable": uncorrectable,
        "selected": chosen,
        "iterations_run": max((t["iteration"] for t in trace), default=0),
        "config": asdict(config), "inputs": inputs,
    }


def _write(con, out, added, trace, report, config, labels, before, after, rejects, storage_options) -> None:
    con.register("__added", pa.table({"draw_id": [a[0] for a in added], "iteration": [a[1] for a in added],
                                      "token": [a[2] for a in added], "row_id": [a[3] for a in added]}))
    has_source = "source" in [c[0] for c in con.execute("DESCRIBE rows").fetchall()]
    original_source = "coalesce(source, 'original')" if has_source else "'original'"
    star = "* EXCLUDE (row_id, source)" if has_source else "* EXCLUDE (row_id)"
    with CorpusWriter(out, config={"audac": asdict(config)}, storage_options=storage_options,
                      inputs=report["inputs"]) as writer:
        if writer.skipped:
            writer.commit()
            return
        originals = con.sql(f"SELECT {star}, {original_source} AS source, NULL::VARCHAR AS origin_id "
                            "FROM rows ORDER BY row_id")
        upsampled = con.sql(f"SELECT {star.replace('*', 'r.*', 1)} REPLACE (r.id || '#up' || a.draw_id AS id), "
                            "'upsampled' AS source, r.id AS origin_id, a.iteration AS upsample_iteration, "
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
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(trace) if trace else pa.table({"iteration": pa.array([], pa.int64())}),
                       sink)
        d.write_bytes("trace.parquet", sink.getvalue().to_pybytes())
        d.write_text("report.html", _html(report, trace, config, labels, before, after, storage_options))
        d.commit()


SHOWN = 20   # uncorrectable tokens listed in the HTML report (report.json has them all)


def _html(report: dict, trace: list, config: UpsampleConfig, labels: list, before: pa.Table, after: pa.Table,
          storage_options: dict | None = None) -> str:
    corpus = corpus_name(report["inputs"], storage_options)
    lo, hi = report["band"]
    selected = {c["token"]: c for c in report["selected"]}
    pb, pa_ = report["p_hat_before"], report["p_hat_after"]
    change = lambda pair: f"{fmt.number(pair[0])} → {fmt.number(pair[1])}"  # noqa: E731
    p_rows = [{"token": t, "rows with it": selected[t]["n"], "z* before": selected[t]["z"],
               **{l: (pb[t][l], pa_[t][l]) for l in labels},
               "largest p̂": (max(pb[t].values()), report["max_p_after"][t])} for t in report["tokens"]]
    uncorrectable = [{"token": u["token"], "rows with it": u["n"], "z*": u["z"],
                      **{f"rows labelled {l}": u["counts"].get(l, 0) for l in labels}} for u in report["uncorrectable"]]
    left = [{"token": e["token"], "label": e["label"], "z*": e["z"], "rows with it": e["n"],
             "why left out": e["reason"]} for e in report["left_out"]]
    iterations = sorted({t["iteration"] for t in trace})
    drawn = {}
    for t in trace:
        drawn.setdefault(t["token"], {"token": t["token"]})[str(t["iteration"])] = t["drawn"]
    for row in drawn.values():
        row["total"] = sum(row[str(i)] for i in iterations if str(i) in row)
    plot = lambda stats, what: figures.zplot(_as_zstats(stats, labels, config.min_count), 6,  # noqa: E731
                                             f"{corpus}: tokens {what}" if corpus else f"tokens {what}")
    page = (Report("AUDAC up-sampling: rows of biased tokens duplicated until their labels even out "
                   "(arXiv 2401.13907)", corpus, report["inputs"])
            .section("Rows", fields({
                "rows before": report["rows_before"], "up-sampled copies added": report["rows_added"],
                "growth": report["growth"], "rows after": report["rows_after"], "input rejects": report["rejected"],
                f"tokens corrected (k = {config.k:,})": len(report["tokens"]),
                f"iterations run (at most {config.iterations:,})": report["iterations_run"],
                "count band": f"tokens in {lo:,} to {hi:,} rows"}, {"growth": fmt.percent}))
            .section("p̂(label | token) of the corrected tokens, before → after", table(
                p_rows, formats={"z* before": fmt.z, **{l: change for l in labels}, "largest p̂": change}),
                note(f"The share of each label among the rows with the token, before up-sampling → after. AUDAC "
                     f"draws copies of those rows until every label's share nears 1/{len(labels)} = "
                     f"{fmt.number(1 / len(labels))}, or for {config.iterations:,} iterations at most."))
            .section("Token z-statistics before", figure(plot(before, "before")))
            .section("Token z-statistics after", figure(plot(after, "after"), (
                "The same statistics after up-sampling: the corrected tokens (the table above) fall towards the "
                "prior; tokens left out or uncorrectable stay where they were.")))
            .section("Uncorrectable tokens", table(uncorrectable[:SHOWN], formats={"z*": fmt.z}),
                     note("A label never occurs with these tokens: duplicating rows cannot even their labels out, "
                          "so the next token was taken."
                          + (f" The first {SHOWN} of {len(uncorrectable):,}; report.json lists them all."
                             if len(uncorrectable) > SHOWN else "")))
            .section(f"Top {config.k} tokens by z* left out", table(left, formats={"z*": fmt.z}),
                     note(f"Tokens are taken from the band of {lo:,} to {hi:,} rows"
                          + (f"; --band-min {report['band_hint'].split(',')[0]} --band-max "
                             f"{report['band_hint'].split(',')[1]} would take in those outside it."
                             if report["band_hint"] else ".")))
            .section("Copies drawn per token and iteration", table(
                list(drawn.values()), ["token", *map(str, iterations), "total"]),
                note("trace.parquet holds each draw's deficit and the copies of each label."))
            .section("Configuration", config_table(report["config"])))
    return page.html()


class UpsampleStage(Stage):
    """AUDAC adaptive round-robin up-sampling (DuckDB SQL over Parquet).

    The output folder is the corpus (the input and its up-sampled copies), with ``trace.parquet`` and ``report/``.
    """

    name, Config = "upsample", UpsampleConfig
    needs = ("id", "text_a", "label")
    output = Output.FOLDER
    one_task = True

    def run(self, source: StageInput, out: str) -> StageResult:
        r = run(source.splits, out, source.mapping, source.opts, self.config)
        headline = (f"{r['rows_before']:,} -> {r['rows_after']:,} rows (+{r['rows_added']:,} up-sampled copies), "
                    f"{r['iterations_run']} iteration(s)")
        return StageResult(r["rows_before"] + r["rejected"], {"out": r["rows_before"], "input rejects": r["rejected"]},
                           r, headline, (headline, *_lines(r, self.config.k)))


def _lines(r: dict, k: int) -> list[str]:
    """What the terminal shows of an up-sampling: each token's largest p̂ before and after, what was left out."""
    lines = [f"  {tok:<16} max p̂ {max(r['p_hat_before'][tok].values()):.3f} -> {r['max_p_after'][tok]:.3f}"
             for tok in r["tokens"]]
    if r["uncorrectable"]:
        lines.append("  uncorrectable: " + ", ".join(u["token"] for u in r["uncorrectable"]))
    if r["left_out"]:
        lo, hi = r["band"]
        lines.append(f"  left out of the top {k} tokens by z* (band: n from {lo:,} to {hi:,}):")
        lines += [f"    {e['token']:<14} z* {e['z']:6.1f} {e['label']}, n {e['n']:,}: {e['reason']}"
                  for e in r["left_out"]]
        if r["band_hint"]:
            lower, upper = r["band_hint"].split(",")
            lines.append(f"  --band-min {lower} --band-max {upper} would take in those outside the band")
    return lines

