"""The generate stage's config (its verb's options and pipeline keys): the prompt template over a row's fields, the
target labels, the sampling and the backend."""
from __future__ import annotations

import string
from dataclasses import dataclass

from refinery.core.validation import NOT_EMPTY, Allowed, at_least, number_in, setting, validate
from refinery.messages import Message, Setting
from refinery.models.generate import Backend, Sampling

DEFAULT_TEMPLATE = ("Premise: {text_a}\nWrite one short sentence that is {label_description}. "
                    "Reply with the sentence only.")
TEMPLATE_FIELDS = ("id", "text_a", "text_b", "label", "label_description")


def _is_template(value) -> bool:
    """A format string whose ``{names}`` are all row fields."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except (ValueError, TypeError):
        return False
    return names <= set(TEMPLATE_FIELDS)


@dataclass
class GenerationConfig:
    template: str = setting(DEFAULT_TEMPLATE, Allowed(_is_template, "a prompt over " + " ".join(
        "{" + f + "}" for f in TEMPLATE_FIELDS)), "Prompt template over the row's fields.")
    target_labels: str = setting("own", NOT_EMPTY, "own, all, or comma-separated labels to generate for.")
    limit: int | None = setting(None, at_least(1).or_none(), "Prompt only the first rows of the input.")
    sampling: Sampling = setting(Sampling(), help="Sampling of every backend.")
    backend: Backend = setting(Backend(), help="Where texts are generated.")
    batch_size: int = setting(16, at_least(1), "Prompts per generator call.")
    shard_rows: int = setting(1024, at_least(1), "Prompts per shard (rounded to whole batches), each kept until the "
                                                 "output is published: a killed run generates only unfinished ones.")
    actors: int = setting(1, at_least(1), Message("Ray actors, each with its own generator (",
                                                  Setting("engine", "ray"), ")."))
    gpus_per_actor: float = setting(0.0, number_in(0), "GPUs each actor asks for.")

    def __post_init__(self):
        validate(self)
