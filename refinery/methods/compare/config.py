"""The comparison's settings around its task model (``CompareConfig``, the keys under a ``compare`` step's
``model:``) and the specs that name its training corpora: ``NAME=PATH`` (``PATH@SPLIT``). Its evaluation sets'
specs are ``models.evaluation``'s."""
from __future__ import annotations

import re
from dataclasses import dataclass

from refinery.core.validation import at_least, setting
from refinery.messages import Refusal, Setting
from refinery.models.task_model import TaskModel

@dataclass
class CompareConfig(TaskModel):
    """The comparison's task model (``TaskModel``), its seeds and bootstrap draws, and the extra columns to break
    accuracy down by: the keys under ``model:`` of a pipeline's ``compare`` step."""

    seeds: int = setting(1, at_least(1), "Runs per corpus (n-gram: bootstrap replicates of the corpus; transformer: "
                                         "initialisations).")
    bootstrap: int = setting(1000, at_least(100), "Draws of the paired bootstrap.")
    by: tuple = setting((), help="Also break accuracy down by this column (repeat for more).", multiple=True)
    slices: int = setting(10, at_least(0), "Top biased features of the baseline corpus whose slices (rows of the "
                                           "feature's label and the others) are scored (0: none).")
    allow_overlap: bool = setting(False, help="Score evaluation rows also found in a training corpus (marked in the "
                                              "report) instead of failing.")
    ngram: int = setting(13, at_least(1), "N: an evaluation row sharing a run of N words with a training corpus's "
                                          "row is reported contaminated by it (decontaminate's rule, GPT-3's 13); a "
                                          "row of fewer words is matched whole.")


def parse_training(specs) -> dict:
    """``--train NAME=PATH[@SPLIT]`` specs into {name: path}, in order; a name given twice is an error (the second
    would hide the first)."""
    named: dict = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise Refusal(Setting("train"), f" {spec!r} is not NAME=PATH", code="invalid-setting")
        if name in named:
            raise Refusal(Setting("train"), f" names {name!r} twice ({named[name]} and {path}); give each a name of "
                          "its own", code="invalid-setting")
        named[name] = path
    return named


_SPLIT_SELECTOR = re.compile(r"@([\w.-]+)$")


def path_and_split(path: str) -> tuple[str, str | None]:
    """``PATH@SPLIT`` → (PATH, SPLIT); a plain path → (path, None)."""
    match = _SPLIT_SELECTOR.search(path)
    return (path[: match.start()], match.group(1)) if match and "/" not in match.group(1) else (path, None)
