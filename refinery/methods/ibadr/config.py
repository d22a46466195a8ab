"""IBADR's settings (``IbadrConfig``), its profiles and what one of its workers asks for."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from refinery.core.validation import NAME_OR_FOLDER, NOT_EMPTY, SEED, at_least, number_in, one_of, setting, validate
from refinery.models.base import CLASSIFIERS
from refinery.models.generate import DEFAULT_GENERATOR, Sampling
from refinery.models.precision import PRECISIONS
from refinery.pipeline.stage import Resources

RESOURCES = Resources(cpus=1, memory_gb=4)   # one worker of the stage: the generator's actor, the loop itself


@dataclass(frozen=True)
class IbadrConfig:
    groups: int = setting(5, at_least(2), "N_bi, the number of bias indicators (b_r draws r in 1..⌊N_bi/2⌋).")
    iterations: int = setting(5, at_least(1), "N_iter.")
    per_iteration: int = setting(200_000, at_least(1), "Pseudo samples generated per iteration.")
    shallow_rows: int = setting(2000, at_least(1), "θs's initial training sample.")
    usm_rows: int = setting(2000, at_least(1), "USM: pool rows the shallow model is updated on.")
    shallow: str = setting("ngram", one_of(*CLASSIFIERS), "The shallow model θs.")
    task_model: str = setting("ngram", one_of(*CLASSIFIERS), "The confidence filter's model M, fit on the corpus.")
    tau: float = setting(0.5, number_in(0, 1, open_high=True), "ε: the task model's confidence a pseudo sample "
                                                               "must exceed.")
    generator: str = setting(DEFAULT_GENERATOR, NOT_EMPTY, "Generator θg: a model name or folder.",
                             path=NAME_OR_FOLDER)
    first_epochs: int = setting(3, at_least(1), "Generator epochs in the first iteration.")
    later_epochs: int = setting(1, at_least(1), "Generator epochs in later iterations.")
    lr: float = setting(5e-5, number_in(0, open_low=True), "Generator learning rate.")
    train_batch_size: int = setting(8, at_least(1), "Generator fine-tuning batch size.")
    max_length: int = setting(128, at_least(1), "Longest training sequence, in tokens.")
    train_precision: str = setting("auto", one_of(*PRECISIONS), "Generator fine-tuning precision.")
    sampling: Sampling = setting(Sampling(temperature=1.0, top_p=0.9, max_new_tokens=64), help="θg's sampling.",
                                 skip=("n", "seed"))   # one sample per prompt, drawn with ``seed``
    usm: bool = setting(True, help="Update the shallow model each iteration (ablation: off).")
    resume: bool = setting(True, help="Continue from the last finished iteration checkpointed in the output folder "
                                      "(off: start over).")
    lowest_indicator: bool = setting(False, help="Ablation: generate with b1 only (b_r → b1).")
    indicator: bool = setting(True, help="Bias indicators (ablation: off).")
    iterate: bool = setting(True, help="Iterate (ablation: one iteration generating all samples at once).",
                            option="--iterate/--no-iteration")
    seed: int = setting(0, SEED, "Seed of samples, draws and training.")
    sample_rows: int | None = setting(None, at_least(1).or_none(), "Start from a seeded random sample of the corpus.")
    backend: str = setting("transformers", one_of("transformers", "vllm"), "Generation backend of the fine-tuned "
                                                                           "generator.")
    batch_size: int = setting(16, at_least(1), "Prompts per generator call.")

    def __post_init__(self):
        validate(self)

    def to_dict(self) -> dict:
        return asdict(self)

    def checkpoint_key(self) -> dict:
        """What a checkpoint must share with the run that resumes it (not where or how fast it generates)."""
        return {k: v for k, v in json.loads(json.dumps(self.to_dict())).items()
                if k not in ("backend", "batch_size", "resume")}

    @classmethod
    def from_dict(cls, d: dict) -> "IbadrConfig":
        return cls(**{**d, "sampling": Sampling(**d["sampling"])})


PROFILES = {
    "paper": IbadrConfig(),
    # CPU: SmolLM2-135M, the n-gram shallow and task models, a few hundred samples per iteration
    "small": IbadrConfig(iterations=2, per_iteration=300, shallow_rows=2000, usm_rows=2000, first_epochs=1,
                         lr=1e-4, train_batch_size=16, max_length=96, tau=0.4,
                         sampling=Sampling(temperature=1.0, top_p=0.9, max_new_tokens=56)),
}
