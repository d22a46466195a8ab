"""AUDAC's planning core (arXiv 2401.13907, Algorithm 1; METHODS §3; the method and its safeguards: the docstring of
``refinery.methods.upsample.stage`` and docs/upsample.md), in DuckDB SQL (``sql/audac_*.sql``, beside this module)
over the table ``rows``: the rows that hold the tokens S to correct (the input's audit's word features:
``tokens``), the round robin of draws checked by the ``ShortcutGuard``, the copies that keep the label shares, the
turns undone until the verdicts hold; and the up-sampled corpus's rows."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.audit_record import AuditRecord
from refinery.core.features import FeatureConfig, extract, fields_of
from refinery.core.verdict import Verdict
from refinery.io import queries
from refinery.io.read_options import DEFAULT_BATCH_ROWS
from refinery.messages import Command, Message, Setting
from refinery.methods.upsample.guard import ShortcutGuard, count_input
from refinery.methods.upsample.tokens import TokenBand, select_tokens, split_token, words
from refinery.progress import progress


def _query(con, name: str, params: dict | None = None) -> pa.Table:
    """The result of AUDAC's named query ``sql/NAME.sql`` (beside this module) over ``con``."""
    return queries.run(con, name, params, package=__package__)





@dataclass(kw_only=True)
class Plan:
    """What AUDAC decided for a corpus: the tokens it corrects and the copies it adds, with what the report shows."""

    labels: list
    totals: dict                 # rows per label in the input
    prior: zstats.Prior          # the rule that gave p0
    p0: dict                     # {label: p0_l}, each token's target p(l|s)
    threshold: float             # the input's audit's threshold, which the tokens' z* must pass (the verdict's)
    band: TokenBand              # the n(s) the tokens were taken from, and whether the configured band was widened
    fields: list                 # (column, suffix) of each text field: a token is ``word@suffix``, as the audit's
    every_token: zstats.ZStats   # the input's audit's words, stopwords included (``words``)
    before: zstats.ZStats        # the input's audit's words, as corrected (stopwords left out unless kept)
    after: zstats.ZStats         # the output's audit's words, as corrected (under the output's own prior rule)
    chosen: list                 # S: the tokens corrected
    uncorrectable: list          # tokens some label never co-occurs with, passed over
    trace: list                  # each turn: iteration, token, deficit, copies per label, refused, undone
    added: list                  # (draw id, iteration, token, row_id) of each copy, in draw order
    refused: dict[int, str]      # {row refused: the feature its copy would have raised}
    undone: int                  # turns undone until the verdicts held
    supply: list                 # per token and short label: rows left to copy, refused (audac_supply)
    copies: dict                 # copies added per label
    verdict: Verdict             # the output's audit against the input's, under the output's own prior rule
    verdict_input_p0: Verdict    # and under the input's p0
    audit: AuditRecord | None    # the output's audit (the verdict's after side), kept with the corpus

    @property
    def rows(self) -> int:
        return sum(self.totals.values())


def plan(con, config, features: FeatureConfig, carried: zstats.Prior | None = None) -> Plan:
    """AUDAC over the table ``rows`` of ``con`` (row_id, label, text_a[, text_b]) under ``config`` (the stage's
    ``UpsampleConfig``); ``features``: the audit's features the guard and the verdicts count; ``carried``: the
    prior rule the input records. Leaves the table ``extra`` (row_id, copies) of the copies to add."""
    labels = [r[0] for r in con.execute("SELECT DISTINCT label FROM rows ORDER BY label").fetchall()]
    totals = dict(con.execute("SELECT label, count(*) FROM rows GROUP BY label").fetchall())
    prior = zstats.choose_prior(config.prior, totals, carried)
    p0 = zstats.prior_vector(labels, totals, prior.name)
    con.register("__labels", pa.table({"label": labels, "p0": p0}))
    con.execute("CREATE OR REPLACE TABLE label_set AS SELECT * FROM __labels ORDER BY label")
    con.execute("CREATE OR REPLACE TABLE extra (row_id BIGINT, extra BIGINT)")
    con.execute("CREATE OR REPLACE TABLE blocked (row_id BIGINT)")
    n_rows = sum(totals.values())
    target = dict(zip(labels, (round(float(x), 6) for x in p0)))
    # the input's audit, its texts streamed a batch at a time: its words are the tokens, with their z* and the
    # threshold they are significant by
    audit, _ = count_input(_texts(con), labels, features, prior)
    threshold = audit.before.threshold
    fields = fields_of(_pairs(con), features)
    every_token = words(audit.before, fields)
    before = words(audit.before, fields, config.remove_stopwords)
    chosen, uncorrectable, band = select_tokens(before, labels, config, n_rows, threshold, target)
    tokens = [c["token"] for c in chosen]
    con.register("__selected", pa.table({"token": pa.array(tokens, pa.string())}))
    con.execute("CREATE OR REPLACE TABLE selected AS SELECT * FROM __selected")
    # B[s] for the selected tokens only, with each row's label: the draws touch these rows, not the whole corpus
    _index_rows(con, tokens, fields, features)
    pool = _padding_pool(con, config) if prior.name == "empirical" else {}
    candidates = np.union1d([r[0] for r in con.execute("SELECT DISTINCT row_id FROM selected_rows").fetchall()],
                            [r for rows in pool.values() for r in rows]).astype(np.int64)
    guard = ShortcutGuard(audit, candidates, _candidate_rows(con, candidates), features)
    del audit   # every feature's counts: the guard keeps those the verdicts can see

    guard.enforce = config.guard
    trace, turns, refused = _rounds(con, config, chosen, labels, guard)
    undone = _undo_until_nothing_worse(guard, turns, trace, lambda: _pad(guard, pool, turns, trace, labels)) \
        if config.guard else 0
    added = [(draw_id, it, tok, r) for draw_id, (it, tok, r) in enumerate(
        (trace[j]["iteration"], trace[j]["token"], r) for j, rows in turns for r in rows)]
    _set_extra(con, [a[3] for a in added])
    verdict, verdict_input_p0 = guard.verdicts(_remedy(config.max_copies))
    if not config.guard:
        verdict.notes.append(str(Message(   # a verdict's notes are text: its page escapes them
            Setting("guard", False), ": every drawn copy was added, as the paper does; the guard (on by default) "
            "refuses the copies that would make or strengthen a shortcut")))
    output = guard.after()
    return Plan(labels=labels, totals=totals, prior=prior, p0=target, threshold=threshold, band=band, fields=fields,
                every_token=every_token, before=before, after=words(output, fields, config.remove_stopwords),
                chosen=chosen, uncorrectable=uncorrectable, trace=trace, added=added, refused=refused, undone=undone,
                supply=_query(con, "audac_supply", {"max_copies": config.max_copies}).to_pylist(),
                copies=dict(zip(labels, guard.copies.tolist())), verdict=verdict, verdict_input_p0=verdict_input_p0,
                audit=AuditRecord.of_output(output, prior,
                                            dict(zip(labels, (guard.totals + guard.copies).tolist())), features))


def _remedy(cap: int) -> Message:
    return Message("lower ", Setting("max_copies"), f" (now {cap}), or ", Setting("k"), "; or correct with generation (",
                   Command("ibadr"), ") or filtering (", Command("zfilter"), ") instead")


def _texts(con):
    """The table ``rows``' texts and label in row_id order, as record batches of the reader's batch size: the
    table's insertion order (``queries.load_rows`` writes it in row_id order; the connection preserves it), so
    that no sort of every row and its texts is made, in memory or spilled."""
    return _batches(con.sql(f"SELECT {_text_columns(con)} FROM rows"), DEFAULT_BATCH_ROWS)


def _pairs(con) -> bool:
    """Whether the table ``rows`` holds pairs (``schema.is_pair``): some row has a text_b."""
    return _has(con, "text_b") and con.execute("SELECT count(text_b) > 0 FROM rows").fetchall()[0][0]


_APOSTROPHE = "['’\ua78c]"   # an apostrophe of n't, or the letter (ꞌ) that holds one through the tokenizer


def _may_hold(word: str) -> str:
    """A regular expression (RE2: its \\W is every character but an ASCII letter, digit or _) matching every text
    whose tokens (``TokenizerOptions.tokenize``) hold ``word``, and few others: a token is bordered by the text's
    ends, whitespace or punctuation, except a word before n't (``don't`` → ``do``, ``n't``) and n't after it."""
    left = "" if word[:2].lower() == "n'" else r"(^|\W)"
    return left + re.escape(word).replace("'", _APOSTROPHE) + rf"($|\W|[nN]{_APOSTROPHE}[tT])"


def _index_rows(con, tokens: list, fields: list, features: FeatureConfig) -> None:
    """The table ``selected_rows`` (row_id, token, label): B[s] of each token s of ``tokens`` (``w@field`` of the
    text ``fields``), the rows whose features hold it. DuckDB reads out just the rows whose field may hold the word
    (``_may_hold``), and the audit's own extraction of their features (``features.extract``) decides."""
    patterns: dict = {}
    for token in tokens:
        word, column = split_token(token, fields)
        patterns.setdefault(column, []).append(_may_hold(word))
    text = "lower({})" if features.tokenizer.lowercase else "{}"
    where = " OR ".join(f"regexp_matches({text.format(column)}, ${column})" for column in patterns) or "false"
    unigrams, wanted = replace(features, families=("unigram",)), pa.array(tokens, pa.string())
    hits = [pa.table({"row_id": pa.array([], pa.int64()), "token": pa.array([], pa.string()),
                      "label": pa.array([], pa.string())})]
    rel = con.sql(f"SELECT row_id, {_text_columns(con)} FROM rows WHERE {where}",
                  params={column: "|".join(p) for column, p in patterns.items()})
    for batch in _batches(rel, DEFAULT_BATCH_ROWS):
        table = pa.Table.from_batches([batch])
        if len(fields) == 2:   # a pair's field, whatever the batch (``text_fields``: pairs if some row has a text_b)
            table = table.set_column(table.schema.get_field_index("text_b"), "text_b",
                                     pc.fill_null(table["text_b"], ""))
        long = extract(table, unigrams)
        feature = long["feature"].combine_chunks() if isinstance(long["feature"], pa.ChunkedArray) \
            else long["feature"]
        hit = pc.take(pc.is_in(feature.dictionary, value_set=wanted), feature.indices)
        at = long["row"].filter(hit)
        hits.append(pa.table({"row_id": table["row_id"].take(at),
                              "token": feature.dictionary.take(feature.indices.filter(hit)),
                              "label": table["label"].take(at)}))
    con.register("__hits", pa.concat_tables(hits, promote_options="permissive"))
    con.execute("CREATE OR REPLACE TABLE selected_rows AS SELECT row_id, token, label FROM __hits "
                "ORDER BY token, row_id")


def _candidate_rows(con, candidates: np.ndarray) -> pa.Table:
    """The texts and label of the rows ``candidates`` (row ids, ascending), in that order."""
    con.register("__candidates", pa.table({"row_id": pa.array(candidates, pa.int64())}))
    return con.sql(f"SELECT {_text_columns(con)} FROM rows WHERE row_id IN (SELECT row_id FROM __candidates) "
                   "ORDER BY row_id").to_arrow_table()


def _text_columns(con) -> str:
    return "text_a, " + ("text_b, " if _has(con, "text_b") else "") + "label"


def _batches(rel, rows: int):
    """A DuckDB relation's result as Arrow record batches of ``rows`` rows (a reader, read once)."""
    return rel.to_arrow_reader(batch_size=rows) if hasattr(rel, "to_arrow_reader") else rel.fetch_record_batch(rows)


def _has(con, column: str) -> bool:
    return column in [c[0] for c in con.execute("DESCRIBE rows").fetchall()]


def _rounds(con, config, chosen: list, labels: list, guard: ShortcutGuard):
    """The round robin: (trace, [(trace index, rows copied)], {refused row: feature})."""
    trace, turns, refused = [], [], {}
    active = {c["token"] for c in chosen}
    n_of = {c["token"]: c["n"] for c in chosen}
    with progress(total=config.iterations, desc="audac", unit=" iter") as bar:
        for it in range(1, config.iterations + 1):
            short = {}
            for r in _query(con, "audac_deficits").to_pylist():
                short[r["token"]] = short.get(r["token"], 0) + r["deficit"]
            active = {t for t in active if short.get(t, 0) > config.tolerance * n_of[t]}
            if not active:
                break
            for c in chosen:
                tok = c["token"]
                if tok not in active:
                    continue
                drawn = _query(con, "audac_draw", {"token": tok, "step": config.step, "seed": config.seed,
                                                   "round": it, "max_copies": config.max_copies}).to_pylist()
                if not drawn:   # its short labels' rows have run out (the copy cap, or refused)
                    active.discard(tok)
                    continue
                deficit = sum(r["deficit"] for r in _query(con, "audac_deficits").to_pylist()
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


def _padding_pool(con, config) -> dict:
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


def upsampled_rows(con, added: list) -> Iterator[pa.Table]:
    """The up-sampled corpus's rows, 100,000 at a time: the input's rows (``source`` original), then the copies
    ``added`` in draw order (``source`` upsampled, id ``<origin>#up<draw>``, their origin, iteration and token)."""
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
    originals = con.sql(f"SELECT {star}, {original_source} AS source, {original_origin} AS origin_id"
                        f"{earlier_draws} FROM rows")   # row_id order: the table's (``_texts``)
    upsampled = con.sql(f"SELECT {star.replace('*', 'r.*', 1)} REPLACE (r.id || '#up' || a.draw_id AS id), "
                        f"'upsampled' AS source, {copy_origin} AS origin_id, a.iteration AS upsample_iteration, "
                        "a.token AS upsample_token FROM __added a JOIN rows r USING (row_id) ORDER BY a.draw_id")
    for rel in (originals, upsampled):
        for rb in _batches(rel, 100_000):
            yield pa.Table.from_batches([rb])
