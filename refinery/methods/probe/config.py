"""The probe's config: the classifier (``compare.config.TaskModel``), the corpora it scores and where the fitted
classifier is saved (``refinery probe``'s options and the pipeline keys)."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.validation import FOLDER, NOT_EMPTY, setting
from refinery.messages import Message, Setting
from refinery.models.evaluation import EvalSet, parse_eval_set, refuse_repeated_names
from refinery.models.task_model import TaskModel


def _eval_spec(spec: str) -> EvalSet:
    """``[NAME=]PATH[:PRESET]``: named by its file or folder without one."""
    from refinery.io.splits import split_name

    head = spec.split("=", 1)[0]
    if "=" in spec and head and not {"/", ":"} & set(head):
        return parse_eval_set(spec)
    unnamed = parse_eval_set(f"_={spec}")
    return EvalSet(split_name(unnamed.paths[0]), unnamed.paths, unnamed.preset)


@dataclass
class ProbeConfig(TaskModel):
    """The classifier (``TaskModel``: the backend, what it reads, the transformer's training), the corpora it
    scores, and where the fitted classifier is saved (a folder or URL; none: not saved)."""

    evaluate: tuple = setting((), help=Message("A corpus to score, [NAME=]PATH[:PRESET] (name: its file or folder's; "
                                               "preset: the training data's ", Setting("preset"), "/",
                                               Setting("map"), "); repeat for more."),
                              option="--eval", multiple=True, metavar="[NAME=]PATH[:PRESET]")
    save_model: str | None = setting(None, NOT_EMPTY.or_none(),
                                     Message("Save the fitted classifier here (a folder or URL), for ",
                                             Setting("model"), " of confidence or razor's ",
                                             Setting("verifier_model"), "."), path=FOLDER)

    def __post_init__(self):
        super().__post_init__()
        refuse_repeated_names(self.eval_sets())

    def eval_sets(self) -> list[EvalSet]:
        return [_eval_spec(spec) for spec in self.evaluate]
