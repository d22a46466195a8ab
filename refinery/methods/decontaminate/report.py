"""decontaminate's report: per evaluation set, its rows, the training rows it contaminates (by n-gram, whole text or
near-duplicate) and the evaluation rows behind them, with example pairs side by side (``summarize``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from refinery.methods.decontaminate.config import DecontaminateConfig
from refinery.methods.decontaminate.overlap import HOW

EXAMPLES = 10   # pairs shown per evaluation set


@dataclass
class EvalContamination:
    name: str
    paths: list
    rows: int                 # the evaluation set's good rows
    rejected: int             # its rows refused on reading
    contaminated: int         # training rows it contaminates
    share: float              # of the training rows
    eval_rows_behind: int     # its distinct rows that contaminate any of them (not only the first each matches)
    by_how: dict              # contaminated rows by match (n-gram, whole text, near-duplicate)
    examples: list


def summarize(name: str, paths, eval_table, eval_rejected: int, match, train_texts: dict,
              train_rows: int) -> EvalContamination:
    """One evaluation set's contamination of the training rows (``match``: an ``overlap.Match``); ``train_texts``:
    row number → its id and texts, for the first ``EXAMPLES`` rows of ``match``."""
    counts = np.bincount(match.how, minlength=len(HOW))
    examples = []
    for p in range(min(EXAMPLES, len(match.rows))):
        i, j = int(match.rows[p]), int(match.eval_rows[p])
        pair = {"id": train_texts[i]["id"], "how": HOW[match.how[p]], "eval id": eval_table["id"][j].as_py()}
        for column in ("text_a", "text_b"):
            if train_texts[i].get(column) is None:
                continue
            pair[column] = train_texts[i][column]
            if column in eval_table.column_names:
                pair[f"eval {column}"] = eval_table[column][j].as_py()
        examples.append(pair)
    return EvalContamination(name, list(paths), eval_table.num_rows, eval_rejected, len(match.rows),
                             len(match.rows) / max(train_rows, 1), len(np.unique(match.behind)),
                             dict(sorted((h, int(n)) for h, n in zip(HOW, counts) if n)), examples)


def details(sets: list, config: DecontaminateConfig) -> tuple[dict, list]:
    """(report.json entries, page sections) of decontaminate's report."""
    from refinery.report import format as fmt
    from refinery.report.page import note, table

    rule = (f"A training row is removed when it shares a run of {config.ngram} words with a row of the evaluation set "
            f"(case, punctuation and whitespace folded; the row's texts joined; a row of fewer words matched whole)"
            + (f", or when each of its texts reaches Jaccard ≥ {config.near:g} of word {config.shingle_size}-shingles "
               "with one's (MinHash-LSH, verified)" if config.near is not None else "")
            + ". A row contaminated by several sets is counted under each, and named with the first.")
    rows = [{"evaluation set": s.name, "its rows": s.rows, "training rows contaminated": s.contaminated,
             "share of training rows": s.share, "its rows behind them": s.eval_rows_behind,
             **{h: s.by_how.get(h, 0) for h in ("n-gram", "whole text", "near-duplicate")}} for s in sets]
    sections = [("Contamination per evaluation set", table(rows, formats={"share of training rows": fmt.percent})
                 + note(rule))]
    sections += [(f"Rows behind {s.name}'s contamination", table(s.examples)) for s in sets if s.examples]
    return {"contamination": [asdict(s) for s in sets], "rule": rule}, sections
