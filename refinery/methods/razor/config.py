"""RAZOR's settings (``RazorConfig``), the prompts of G_α and G_β, and what one of its workers asks for."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from refinery.core.features import TokenizerOptions
from refinery.core.validation import FOLDER, NOT_EMPTY, at_least, one_of, setting, validate
from refinery.messages import Refusal
from refinery.models.generate import Backend, Sampling
from refinery.pipeline.stage import Resources

REWRITE_PAIR = ("Rewrite the hypothesis with different words and a different sentence structure, keeping its "
                "relation to the premise: it must stay {label_description} ({label}).\n"
                "Premise: {text_a}\nHypothesis: {text_b}\nReply with the new hypothesis only.")
REWRITE_SINGLE = ("Rewrite the text with different words and a different sentence structure; its label "
                  "'{label}' must stay the same.\nText: {text_a}\nReply with the rewritten text only.")
VERIFY_PAIR = ("Premise: {text_a}\nHypothesis: {text_b}\nWhich label describes the hypothesis given the premise? "
               "Answer with exactly one of: {labels}.")
VERIFY_SINGLE = "Text: {text_a}\nWhich label fits this text? Answer with exactly one of: {labels}."

RESOURCES = Resources(cpus=1, memory_gb=2)   # one worker of the stage: a generator's actor, the loop itself


@dataclass
class RazorConfig:
    dim: int = setting(64, at_least(1), "λ, the positional-encoding size.")
    top_k: int = setting(50, at_least(1), "Rows rewritten per round.")
    candidates: int = setting(4, at_least(1), "m rewrites per row.")
    rounds: int = setting(5, at_least(0), "Rewriting rounds at most.")
    verify_mode: str = setting("answer", one_of("answer", "choice"), "G_β: its answer must be exactly the label, "
                                                                     "or (transformers) the most likely label.",
                               option="--verify")
    tokenizer: TokenizerOptions = field(default_factory=TokenizerOptions)
    rewrite: Sampling = setting(Sampling(temperature=0.7, top_p=0.9, max_new_tokens=48), help="G_α's sampling.",
                                skip=("n",))   # G_α draws ``candidates`` rewrites
    verify: Sampling = setting(Sampling(temperature=0.0, top_p=1.0, max_new_tokens=8), help="G_β's sampling.",
                               prefix="verify", skip=("n",))
    backend: Backend = setting(Backend(), help="G_α (and G_β unless verifier_model).")
    verifier_model: str | None = setting(None, NOT_EMPTY.or_none(), "A saved classifier's folder as G_β.",
                                          path=FOLDER)
    score_only: bool = setting(False, help="Only γ per row and the objective.")
    batch_size: int = setting(16, at_least(1), "Prompts per generator call.")
    shard_rows: int = setting(1024, at_least(1), "Prompts per shard of a round (rounded to whole batches), each kept "
                                                 "until the output is published: a killed run generates only "
                                                 "unfinished ones.")

    def __post_init__(self):
        validate(self)
        if self.verify_mode == "choice" and self.verifier_model is None and self.backend.name != "transformers":
            raise Refusal(f"verify_mode choice needs the transformers backend, got {self.backend.name!r}",
                          code="conflicting-settings")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tokenizer"] = self.tokenizer.__dict__
        return d
