"""The ``compare`` stage: the first training corpus is the baseline, the others its refined versions (z-filtered,
up-sampled, re-weighted, rewritten, augmented), each trained alike and scored on every evaluation set.

Its config is the one source of ``refinery compare``'s options, a pipeline's ``compare:`` keys and
``rf.compare``'s keywords. Every (corpus, seed) run is checkpointed under ``OUT/runs/``, so an interrupted
comparison resumes; ``OUT/report/`` holds ``report.json``, ``report.html`` and ``predictions.parquet``. The work
lives in the sibling modules (``training``, ``statistics``, ``slices``, ``page``), imported when the stage runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from refinery.core.validation import NOT_EMPTY, at_least, number_in, one_of, setting, validate
from refinery.io.schema import PRESETS, Mapping
from refinery.models.precision import PRECISIONS
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult

if TYPE_CHECKING:
    from refinery.pipeline.output import StageOutput

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


@dataclass
class CompareConfig:
    """The task model (``backend`` ngram | transformer, the transformer's encoder and training),
    what it reads (``inputs`` pair | hypothesis: the bias probe), seeds, bootstrap draws, and the
    extra columns to break accuracy down by: the keys under ``model:`` of a pipeline's ``compare`` step."""

    backend: str = setting("ngram", one_of("ngram", "transformer"),
                           "An n-gram classifier, or a fine-tuned transformer encoder (--model).")
    inputs: str = setting("pair", one_of("pair", "hypothesis"),
                          "What the model reads: the pair, or the hypothesis alone (the hypothesis-only bias probe).")
    model: str = setting("sentence-transformers/all-MiniLM-L6-v2", NOT_EMPTY,
                         "Encoder of the transformer backend (name or folder).")
    epochs: int = setting(2, at_least(1), "Transformer fine-tuning epochs.")
    lr: float = setting(5e-5, number_in(0, open_low=True), "Transformer learning rate.")
    batch_size: int = setting(32, at_least(1), "Transformer batch size.", option="--batch")
    max_length: int = setting(128, at_least(1), "Transformer input length, in tokens.")
    precision: str = setting("auto", one_of(*PRECISIONS), "Transformer fine-tuning precision. auto: bf16 autocast "
                             "where the device computes bf16 natively, float32 elsewhere.", option="--train-precision")
    seeds: int = setting(1, at_least(1), "Runs per corpus (n-gram: bootstrap replicates of the corpus; transformer: "
                                         "initialisations).")
    bootstrap: int = setting(1000, at_least(100), "Draws of the paired bootstrap.")
    by: tuple = setting((), help="Also break accuracy down by this column (repeat for more).", multiple=True)
    slices: int = setting(10, at_least(0), "Top biased features of the baseline corpus whose slices (rows of the "
                                           "feature's label and the others) are scored (0: none).")
    allow_overlap: bool = setting(False, help="Score evaluation rows also found in a training corpus (marked in the "
                                              "report) instead of failing.")

    def __post_init__(self):
        validate(self)

    def classifier(self, seed: int):
        from refinery.models.base import make_classifier

        if self.backend == "ngram":
            return make_classifier("ngram", self.inputs)
        return make_classifier("transformer", self.inputs, model=self.model, epochs=self.epochs, lr=self.lr,
                               batch_size=self.batch_size, max_length=self.max_length, seed=seed,
                               precision=self.precision)

    def model_key(self) -> dict:
        """What a finished run depends on (not the seed count, bootstrap draws or breakdowns)."""
        keep = ("backend", "inputs") + (() if self.backend == "ngram" else
                                         ("model", "epochs", "lr", "batch_size", "max_length", "precision"))
        return {k: getattr(self, k) for k in keep}


def parse_named(specs, option: str) -> dict:
    """``NAME=PATH`` specs into {name: [path]}; a name given twice is an error (the second would hide the first)."""
    named: dict = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{option} {spec!r} is not NAME=PATH")
        if name in named:
            raise ValueError(f"{option} names {name!r} twice ({named[name][0]} and {path}); give each a name of its own")
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


def _specs(values) -> tuple:
    """A repeated option's values, in order."""
    return tuple(values)


@dataclass
class CompareStageConfig:
    """The comparison: the training corpora (a pipeline's step: the ``baseline`` corpora, then its input; the verb:
    its ``--train`` corpora), the evaluation sets they are scored on, and the task model (``model``)."""

    evals: tuple = setting((), help="An evaluation set with its own preset (default: the training corpora's "
                                    "--preset/--map); repeat for more (required).",
                           option="--eval", multiple=True, parse=_specs, metavar="NAME=PATH[:PRESET]")
    baseline: tuple = setting(("input",), help="Corpora this step's input is compared with: names of preceding "
                                               "steps, or paths; the first is the baseline.", hidden=True)
    names: tuple = setting((), help="The training corpora's names in the report, in training order (none: each its "
                                    "step folder, or its path).", hidden=True)
    split: str | None = setting(None, NOT_EMPTY.or_none(), "The split every training corpus trains on (none: its "
                                                           "train split, or its only one).")
    label_maps: dict = setting(default_factory=dict, help="Map training labels onto evaluation set NAME's labels "
                                                          "(presets' maps built in: hans).",
                               option="--label-map", multiple=True, parse=parse_label_maps, metavar="NAME=FROM:TO,…")
    model: CompareConfig = field(default_factory=CompareConfig)

    def __post_init__(self):
        validate(self)
        if not self.evals:
            raise ValueError("compare needs at least one evaluation set (evals: [NAME=PATH[:PRESET], …])")
        sets = self.eval_sets()
        unknown = sorted(set(self.label_maps) - {e.name for e in sets})
        if unknown:
            raise ValueError(f"label_maps names no evaluation set: {', '.join(unknown)}")

    def eval_sets(self) -> list[EvalSet]:
        return [parse_eval_set(e, self.label_maps) for e in self.evals]


def step_name(path: str) -> str:
    """An output's step folder (``…/02-zfilter/kept`` → ``02-zfilter``), else its file or folder name."""
    parts = [p for p in path.rstrip("/").split("/") if p]
    if len(parts) > 1 and parts[-1] in ("kept", "pool", "corpus"):
        return parts[-2]
    return parts[-1] if parts else path


def training_corpora(baseline: tuple, own: list, names: tuple = ()) -> tuple[dict, str]:
    """({name: paths} of the baseline corpora and then the step's own input, the name of the step's input): each
    named by ``names`` in order, else by its step (``step_name``), or by its whole path where two share a step name
    (then a corpus named twice is trained once); a baseline that is the step's input itself (a ``PATH@SPLIT`` too)
    is trained once, the last such."""
    entries = [[p] for p in (baseline if names else dict.fromkeys(baseline))]
    mine = next((i for i in reversed(range(len(entries))) if [train_split(entries[i][0])[0]] == list(own)), None)
    if mine is None:
        entries.append(list(own))
        mine = len(entries) - 1
    if names and len(names) != len(entries):
        raise ValueError(f"compare: {len(names)} names for {len(entries)} training corpora")
    found = [step_name(paths[0]) for paths in entries]
    found = [name if found.count(name) == 1 else paths[0] for name, paths in zip(found, entries)]
    chosen = list(names or found)
    return dict(zip(chosen, entries)), chosen[mine]


class CompareStage(Stage):
    """Does it help? The same model trained on each corpus, scored on in-domain and challenge sets (report only;
    the rows pass on)."""

    name, Config = "compare", CompareStageConfig
    output = Output.INPUT
    references = ("baseline",)
    verb = False   # ``refinery compare`` names its corpora (--train NAME=PATH), the input of other verbs (cli/tools.py)

    def run(self, source: StageInput, out: "StageOutput") -> StageResult:
        from refinery.methods.compare.page import console_lines, report_page
        from refinery.methods.compare.training import compare
        from refinery.report import format as fmt

        c = self.config
        train, mine = training_corpora(c.baseline, source.paths, c.names)
        evals = c.eval_sets()
        report, predictions = compare(train, evals, source, c.model, out, c.split)
        page = report_page(report, train, {e.name: list(e.paths) for e in evals}, out)
        out.publish_report(report, page, {"predictions.parquet": predictions})
        rows, rejected = report["train"][mine]["rows"], report["train"][mine]["rejected"]
        gains = ", ".join(f"{ev} {fmt.points(per[mine]['gain']['delta'])}" for ev, per in report["accuracy"].items()
                          if "gain" in per[mine])
        gains += "".join(f"; WARNING: {w}" for w in report["warnings"])
        return StageResult(rows + rejected, {"passed on": rows, "input rejects": rejected}, report,
                           f"{mine} against {report['baseline']}: {gains or 'no baseline'}",
                           lines=tuple(console_lines(report)))
