"""The ``confidence`` stage, a confidence filter (Wu et al. 2022 §2.2.2; IBADR step 4): keep a row only if
p_M(label | text) > τ.

p_M comes from a column, a saved classifier, or a classifier cross-fitted on the input itself
(``model: ngram`` or ``transformer``): each row is scored by a model fit on the other K−1 folds,
so no row is judged by a model that saw it. The n-gram model is a logistic regression on hashed
TF-IDF n-grams, fit by averaged SGD in a few passes over the rows (``solver: sgd``, the K fold models
side by side, on Ray tasks under the Ray engine) or by L-BFGS to convergence (``solver: lbfgs``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from refinery.methods.confidence.config import ConfidenceConfig
from refinery.methods.confidence.scoring import Reasons, source_confidence
from refinery.pipeline.config import to_dict
from refinery.pipeline.executor import row_numbers
from refinery.pipeline.filter import FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import StageInput, set_column


class ConfidenceStage(FilterStage):
    """Keep the rows whose task-model confidence in their label exceeds tau.

    Writes kept/ (with the input's rejects) and rejected/, each row with its confidence, and report/.
    """

    name, Config = "confidence", ConfidenceConfig
    needs = ("id", "text_a", "label")
    adds = ("confidence",)
    prepare_as_task = True   # it reads the whole input: on Ray a task of its own, not the driver

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """p_M(label | text) of every row, in the order the batches come (cross-fitting sees the whole input).

        A cross-fitting that fits a model per fold keeps each finished fold's scores under ``out``, so a
        killed run continues from them. On Ray it runs as a task of its own (``prepare_as_task``), the fold
        models on the cluster: the driver receives the scores only.
        """
        from refinery.io.corpus import input_fingerprints

        self.checkpoints, self.resumed = None, ""
        if self.config.fits_per_fold:
            key = {"config": to_dict(self.config), "inputs": input_fingerprints(source.splits,
                                                                                 source.opts.storage_options)}
            self.checkpoints = out.checkpoints(self.name, key)
            done = len(self.checkpoints.done())
            if done:
                self.resumed = f"resumed: {done} of {self.config.folds} folds' scores from the interrupted run before"
        self._confidence = source_confidence(source, self.config, self.checkpoints)

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        return split(set_column(batch, "confidence", pa.array(self._scores(batch))), keep)

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        conf = self._scores(batch)
        return conf > self.config.tau, Reasons(conf, self.config.tau)

    def settings_in_effect(self) -> dict:
        return self.config.in_effect()

    def few_kept_hint(self) -> str:
        """Where p_M lies against τ: the rows' median and highest confidence."""
        if not len(self._confidence):
            return ""
        median = float(np.median(self._confidence))
        half = np.floor(median * 100) / 100
        return (f": p_M(label | text) has median {median:.3f} and reaches "
                f"{self._confidence.max():.3f}, against tau {self.config.tau:g}"
                + (f"; --tau {half:.2f} keeps about half the rows" if half > 0 else ""))

    def reason_kind(self, reason: str) -> str:
        return f"p_M(label | text) <= tau {self.config.tau}"

    def remedy(self) -> str:
        return (f"a model is most confident where a shortcut gives the label away, so the rows it keeps carry the "
                f"shortcut more often: lower --tau (now {self.config.tau:g}), or z-filter the kept rows "
                "(refinery zfilter OUT/kept).")

    def _scores(self, batch: pa.Table) -> np.ndarray:
        """p_M(label | text) of the batch's rows (scored in ``prepare``, in the input's order)."""
        return self._confidence[row_numbers(batch)]
