"""The confidence stage's config (its verb's options and pipeline keys): where p_M(label | text) comes from (a
column, a saved classifier, or a classifier cross-fitted on the input) and τ, or label issues instead of τ."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import (
    NAME_OR_FOLDER,
    NOT_EMPTY,
    SEED,
    Allowed,
    at_least,
    number_in,
    one_of,
    setting,
    validate,
)
from refinery.messages import Message, Refusal, Setting, Together
from refinery.models.base import CLASSIFIERS

SOLVERS = ("sgd", "lbfgs")
KEEP_SHARE = 0.8   # of each label's rows, kept by auto: its τ are under chance (1/C) on SNLI dev (docs/confidence.md)
AUTO = "auto"   # τ per label: the quantile of its rows' p_M that keeps ``keep_share`` of them
_TAU = number_in(0, 1, open_high=True)
TAU = Allowed(lambda v: v == AUTO or _TAU.test(v), f"{AUTO} or {_TAU.text}")


def _tau(text: str):
    """``--tau``'s text: auto, or the number it spells (other text is kept, and refused by ``TAU``'s words)."""
    try:
        return float(text)
    except ValueError:
        return text.strip().lower()


@dataclass
class ConfidenceConfig:
    tau: float | str = setting(AUTO, TAU, Message("τ: the p_M(label | text) a kept row exceeds; auto: τ per label, "
                                                  "the one that keeps ", Setting("keep_share"),
                                                  " of its rows (0.95: Wu et al.'s)."),
                               parse=_tau, metavar="auto|τ")
    keep_share: float = setting(KEEP_SHARE, number_in(0, 1, open_low=True), "With tau auto: the share of each label's "
                                                                     "rows kept (its most confident ones).")
    model: str | None = setting(None, NOT_EMPTY.or_none(),
                                Message("ngram or transformer (cross-fitted on the input), or a saved classifier's "
                                        "folder (none and no ", Setting("proba_column"), ": ngram)."),
                                path=NAME_OR_FOLDER)
    proba_column: str | None = setting(None, NOT_EMPTY.or_none(), "Or a column holding p_M(label | text).")
    folds: int = setting(5, at_least(2), "K of the cross-fitting.")
    seed: int = setting(0, SEED, "Seed of the folds (and of SGD's order).")
    solver: str = setting("sgd", one_of(*SOLVERS), "How the ngram model is fit: averaged SGD in a few passes "
                                                     "(streams millions of rows), or L-BFGS to convergence.")
    epochs: int = setting(3, at_least(1), "Passes of SGD over the rows (solver sgd).")
    label_issues: bool = setting(False, help="Instead of τ: drop the rows whose given label is likely wrong, by "
                                             "confident learning (cleanlab) over p_M of every label, each with "
                                             "its suggested label.")

    @property
    def streams(self) -> bool:
        """Whether p_M comes from the n-gram model fit by SGD, which reads the input a batch at a time."""
        return self.model == "ngram" and self.solver == "sgd"

    @property
    def fits_per_fold(self) -> bool:
        """Whether p_M comes from a model fit per fold to convergence (checkpointed fold by fold)."""
        return self.model == "transformer" or (self.model == "ngram" and self.solver == "lbfgs")

    def __post_init__(self):
        validate(self)
        if self.model is None and self.proba_column is None:
            self.model = "ngram"   # the n-gram model cross-fitted on the input: what needs nothing else
        if self.model is not None and self.proba_column is not None:
            raise Refusal("give one of ", Setting("model"), " (ngram, transformer or a saved classifier's folder) and ",
                          Setting("proba_column"), " (a column holding p_M(label | text)), not both",
                          code="conflicting-settings")
        if self.label_issues and self.proba_column is not None:
            raise Refusal(Setting("label_issues", True), " needs p_M(l | x) of every label, and ",
                          Setting("proba_column", self.proba_column), " holds p_M(label | text) of the given label "
                          "only: leave out ", Setting("proba_column"), " (the n-gram model is cross-fitted on the "
                          "input) or give ", Setting("model"), " (ngram, transformer or a saved classifier's folder)",
                          code="conflicting-settings")
        if self.label_issues and not self.auto:
            raise Refusal(Setting("label_issues", True), " decides instead of τ: give ", Setting("tau", self.tau),
                          " or ", Setting("label_issues", True), ", not both", code="conflicting-settings")
        if self.label_issues and self.keep_share != KEEP_SHARE:
            raise Refusal(Setting("keep_share"), " is the share of each label that ", Setting("tau", AUTO),
                          " keeps, and ", Setting("label_issues", True), " decides instead of τ: give ",
                          Setting("label_issues", True), " or ", Setting("keep_share", self.keep_share), ", not both",
                          code="conflicting-settings")
        if not self.auto and self.keep_share != KEEP_SHARE:
            raise Refusal(Setting("keep_share"), " is the share of each label that ", Setting("tau", AUTO),
                          " keeps: with ", Setting("tau", self.tau), " it would do nothing; give ",
                          Together((Setting("tau", AUTO), Setting("keep_share", self.keep_share))), ", or ",
                          Setting("tau", self.tau), " alone", code="conflicting-settings")

    @property
    def auto(self) -> bool:
        """Whether τ is chosen per label (``keep_share`` of its rows kept), not given."""
        return self.tau == AUTO

    def in_effect(self) -> dict:
        """τ (with the share it keeps when auto), or label issues instead, and the settings that shape p_M: a
        column's name, a saved classifier's folder, or the cross-fitting's."""
        tau = {"label_issues": True} if self.label_issues else \
            {"tau": self.tau, "keep_share": self.keep_share} if self.auto else {"tau": self.tau}
        if self.proba_column is not None:
            return {**tau, "proba_column": self.proba_column}
        if self.model not in CLASSIFIERS:
            return {**tau, "model": self.model}
        fitting = {**tau, "model": self.model, "folds": self.folds, "seed": self.seed}
        if self.model == "ngram":
            fitting["solver"] = self.solver
        return {**fitting, "epochs": self.epochs} if self.streams else fitting
