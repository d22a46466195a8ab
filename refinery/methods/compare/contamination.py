"""Which evaluation rows each training corpus contaminates: the rows sharing a run of N words (13 by default) with
one of its rows, on what the models read, normalized — decontaminate's rule and matcher
(``core.ngram_index.NgramIndex``).

An evaluation row e is contaminated by a training corpus T when

    G_N(e) ∩ ⋃_{x ∈ T} G_N(x) ≠ ∅

(G_N: the n-grams of a row's normalized texts joined; a text of fewer than N words is one n-gram, whole; Brown et
al. 2020, Appendix C). The evaluation sets' n-grams are indexed once, together; each training corpus is streamed
through the index once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from refinery.core.ngram_index import NgramIndex

EXAMPLES = 5   # (evaluation id, training id) pairs kept per evaluation set and corpus


@dataclass
class Contamination:
    """An evaluation set's rows contaminated by one training corpus (a mask over its rows) and a few of them,
    each with the id of a training row it shares an n-gram with."""

    rows: np.ndarray    # bool, one per evaluation row
    examples: list      # [{"id": evaluation id, "training_id": training id}]

    @property
    def count(self) -> int:
        return int(self.rows.sum())


def contaminated(train_fields: dict, train_ids: dict, eval_fields: dict, eval_ids: dict, n: int) -> dict:
    """{evaluation set: {training corpus: Contamination}} of the fields the models read ({name: [texts]}) and the
    rows' ids ({name: ids})."""
    names = list(eval_fields)
    sizes = [len(eval_fields[s][0]) for s in names]
    together = [pa.chunked_array([c.cast(pa.large_string()) for s in names for c in _chunks(eval_fields[s][f])],
                                 pa.large_string()) for f in range(len(eval_fields[names[0]]))]
    index = NgramIndex(together, n)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    out: dict = {s: {} for s in names}
    for corpus, fields in train_fields.items():
        partner = index.overlap(fields).eval_partner
        for s, a, b in zip(names, bounds[:-1], bounds[1:]):
            mine = partner[a:b]
            shown = np.flatnonzero(mine >= 0)[:EXAMPLES]
            out[s][corpus] = Contamination(mine >= 0, [
                {"id": eval_ids[s][int(i)].as_py(), "training_id": train_ids[corpus][int(mine[i])].as_py()}
                for i in shown])
    return out


def _chunks(texts) -> list:
    return texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
