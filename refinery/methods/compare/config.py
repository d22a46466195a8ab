"""The task model (``TaskModel``: the options of ``refinery probe`` and ``refinery compare``), the comparison's
settings around it (``CompareConfig``, the keys under a ``compare`` step's ``model:``) and the specs that name its
corpora: ``NAME=PATH`` training corpora (``PATH@SPLIT``), ``NAME=PATH[:PRESET]`` evaluation sets and
``NAME=FROM:TO,…`` label maps."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from refinery.core.validation import NAME_OR_FOLDER, NOT_EMPTY, at_least, number_in, one_of, setting, validate
from refinery.io.schema import PRESETS, Mapping
from refinery.models.precision import PRECISIONS

# predictions of a 3-class NLI model onto the label sets of presets that have fewer labels
PRESET_LABEL_MAPS = {"hans": {"neutral": "non-entailment", "contradiction": "non-entailment"}}


@dataclass
class EvalSet:
    """An evaluation set: its inputs, how to read them (default: the training corpora's mapping), and a
    label map from the training labels onto its own (default: the preset's, then case-insensitive names)."""

    name: str
    paths: tuple
    preset: str | None = None
    label_map: dict = field(default_factory=dict)

    def mapping(self, default: Mapping | None) -> Mapping | None:
        return PRESETS[self.preset] if self.preset else default

    def full_label_map(self) -> dict:
        return {**PRESET_LABEL_MAPS.get(self.preset or "", {}), **self.label_map}

    def scored_on_part(self, rows: int, rejects) -> str | None:
        """The warning for an evaluation corpus scored on part of its rows (None where none was rejected): how many
        were rejected, the commonest reason, the fix (read with the training corpora's preset, another release's
        labels or columns are rejected: HANS's non-entailment read as SNLI leaves only its entailment rows)."""
        if not rejects.num_rows:
            return None
        from refinery.io.corpus import reject_reasons

        reason, _ = reject_reasons(rejects).most_common(1)[0]
        fix = "" if self.preset else (f"; if it is another release, give its preset: "
                                      f"{self.name}={self.paths[0]}:PRESET")
        return (f"evaluation corpus {self.name} is scored on {rows:,} of its {rows + rejects.num_rows:,} rows: "
                f"{rejects.num_rows:,} rejected, most for {reason!r}{fix}")


def refuse_repeated_names(evals: list[EvalSet]) -> None:
    """Two evaluation corpora of one name would share one line of the report: refused."""
    names = [e.name for e in evals]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"two evaluation corpora are named {repeated[0]!r}: give each a name of its own, NAME=PATH")


@dataclass
class TaskModel:
    """The task model: an n-gram classifier or a fine-tuned transformer encoder (``backend``, the encoder and its
    training), and what it reads (``inputs`` pair | hypothesis: the hypothesis-only bias probe). Its fields are the
    options of ``refinery probe`` and ``refinery compare``, and their pipeline keys."""

    backend: str = setting("ngram", one_of("ngram", "transformer"),
                           "An n-gram classifier, or a fine-tuned transformer encoder (--model).")
    inputs: str = setting("pair", one_of("pair", "hypothesis"),
                          "What the model reads: the pair, or the hypothesis alone (the hypothesis-only bias probe).")
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         "Encoder of the transformer backend (name or folder).", path=NAME_OR_FOLDER)
    epochs: int = setting(2, at_least(1), "Transformer fine-tuning epochs.")
    lr: float = setting(5e-5, number_in(0, open_low=True), "Transformer learning rate.")
    batch_size: int = setting(32, at_least(1), "Transformer batch size.", option="--batch")
    max_length: int = setting(128, at_least(1), "Transformer input length, in tokens.")
    precision: str = setting("auto", one_of(*PRECISIONS), "Transformer fine-tuning precision. auto: bf16 autocast "
                             "where the device computes bf16 natively, float32 elsewhere.", option="--train-precision")

    def __post_init__(self):
        validate(self)

    def classifier(self, seed: int = 0):
        from refinery.models.base import make_classifier

        if self.backend == "ngram":
            return make_classifier("ngram", self.inputs)
        return make_classifier("transformer", self.inputs, model=self.model, epochs=self.epochs, lr=self.lr,
                               batch_size=self.batch_size, max_length=self.max_length, seed=seed,
                               precision=self.precision)

    def model_key(self) -> dict:
        """What a fitted model depends on (not a comparison's seed count, bootstrap draws or breakdowns)."""
        keep = ("backend", "inputs") + (() if self.backend == "ngram" else
                                         ("model", "epochs", "lr", "batch_size", "max_length", "precision"))
        return {k: getattr(self, k) for k in keep}


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


def parse_named(specs, option: str) -> dict:
    """``NAME=PATH`` specs into {name: [path]}; a name given twice is an error (the second would hide the first)."""
    named: dict = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{option} {spec!r} is not NAME=PATH")
        if name in named:
            raise ValueError(f"{option} names {name!r} twice ({named[name][0]} and {path}); "
                             "give each a name of its own")
        named[name] = [path]
    return named


_SPLIT_SELECTOR = re.compile(r"@([\w.-]+)$")


def train_split(path: str) -> tuple[str, str | None]:
    """``PATH@SPLIT`` → (PATH, SPLIT); a plain path → (path, None)."""
    match = _SPLIT_SELECTOR.search(path)
    return (path[: match.start()], match.group(1)) if match and "/" not in match.group(1) else (path, None)


def parse_eval_set(spec: str, label_maps: dict | None = None) -> EvalSet:
    """``NAME=PATH[:PRESET]`` (a path may itself hold ``:``, as in ``s3://``) into an ``EvalSet``."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"evaluation set {spec!r} is not NAME=PATH[:PRESET]")
    head, colon, preset = path.rpartition(":")
    if colon and preset.lower() in PRESETS:
        path = head
    elif colon and head and re.fullmatch(r"[A-Za-z][\w-]*", preset):   # a preset's place, not a URL's (s3://…)
        close = difflib.get_close_matches(preset.lower(), list(PRESETS), 1, 0.6)
        raise ValueError(f"evaluation set {spec!r}: no preset {preset!r}"
                         + (f" (did you mean {close[0]!r}?)" if close else "") + f"; presets: {', '.join(PRESETS)}")
    else:
        preset = None
    return EvalSet(name, (path,), preset.lower() if preset else None, dict((label_maps or {}).get(name, {})))


def parse_label_maps(specs) -> dict:
    """``--label-map NAME=FROM:TO,…`` specs into {evaluation set: {training label: evaluation label}}."""
    maps = {}
    for spec in specs:
        name, sep, pairs = spec.partition("=")
        out = {}
        for pair in filter(None, pairs.split(",")):
            src, colon, dst = pair.partition(":")
            if not colon:
                raise ValueError(f"--label-map {spec!r}: {pair!r} is not FROM:TO")
            out[src] = dst
        if not sep or not out:
            raise ValueError(f"--label-map {spec!r} is not NAME=FROM:TO,...")
        maps[name] = out
    return maps
