"""decontaminate's config (its verb's options and pipeline keys): the evaluation sets, read as compare reads its
(``NAME=PATH[:PRESET]``, ``compare.config.parse_eval_set``), the n-gram length N and the optional near-duplicate
match."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import SEED, at_least, number_in, setting, validate
from refinery.messages import Message, Refusal, Setting, Shapes
from refinery.models.evaluation import EvalSet, parse_eval_set, refuse_repeated_names


def _specs(values) -> tuple:
    """A repeated option's values, in order."""
    return tuple(values)


@dataclass
class DecontaminateConfig:
    against: tuple = setting((), help=Message("An evaluation set the training rows must not overlap, with its own "
                                              "preset (default: the input's ", Setting("preset"), "/",
                                              Setting("map"), "); repeat for more (required)."),
                             option="--against", multiple=True, parse=_specs, metavar="NAME=PATH[:PRESET]")
    ngram: int = setting(13, at_least(1), "N: a training row sharing a run of N words with an evaluation row is "
                                          "removed (GPT-3's and datatrove's 13); a row of fewer words is matched "
                                          "whole.")
    near: float | None = setting(None, number_in(0, 1, open_low=True).or_none(),
                                 "Also remove near-duplicates of evaluation rows: the Jaccard of word shingles "
                                 "each text must reach (dedup's MinHash; none: off).")
    shingle_size: int = setting(2, at_least(1), "Words per shingle of the near-duplicate match.")
    permutations: int = setting(128, at_least(8), "MinHash values per row of the near-duplicate match.")
    seed: int = setting(0, SEED, "Seed of the MinHash functions.")

    def __post_init__(self):
        validate(self)
        if not self.against:
            raise Refusal("at least one evaluation set is needed (", Setting.of(DecontaminateConfig, "against", Shapes("NAME=PATH[:PRESET]", "{'NAME': data}", "[NAME=PATH[:PRESET], …]")),
                          ")", code="missing-setting")
        refuse_repeated_names(self.eval_sets())

    def eval_sets(self) -> list[EvalSet]:
        return [parse_eval_set(spec) for spec in self.against]
