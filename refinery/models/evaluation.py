"""Evaluation sets as the task models are scored on them (compare's, probe's, decontaminate's): their specs
(``NAME=PATH[:PRESET]``, label maps ``NAME=FROM:TO,…``), how the training labels map onto theirs, and a model's
probabilities projected onto them."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace

import numpy as np

from refinery.io.schema import PRESETS, Mapping
from refinery.messages import Refusal, Setting, Shapes

# predictions of a 3-class NLI model onto the label sets of presets that have fewer labels
PRESET_LABEL_MAPS = {"hans": {"neutral": "non-entailment", "contradiction": "non-entailment"}}
LABEL_MAPS = Setting("label_maps", option="--label-map")   # compare's: on the command line, one set's map an option


def label_map_for(name: str) -> Setting:
    """The remedy of an evaluation set no training label maps to: a label map for it, as each front door gives
    one (``--label-map NAME=FROM:TO,…``, ``label_maps={'NAME': {'FROM': 'TO'}}``)."""
    return replace(LABEL_MAPS, value=Shapes(f"{name}=FROM:TO,…", f"{{{name!r}: {{'FROM': 'TO'}}}}",
                                            f"{{{name}: {{FROM: TO}}}}"))


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

    def no_good_rows(self, rejects) -> str:
        """The refusal of an evaluation corpus none of whose rows could be read: its rejects' commonest reason and
        the fix."""
        from refinery.io.corpus import reject_reasons

        said = f"evaluation set {self.name}: no good rows in {', '.join(self.paths)}"
        if not rejects.num_rows:
            return f"{said}: it holds no rows"
        reason, _ = reject_reasons(rejects).most_common(1)[0]
        return (f"{said}: all {rejects.num_rows:,} rejected, most for {reason!r}; give the preset of its release "
                f"({self.name}={self.paths[0]}:PRESET), or write its rows in that preset's columns and labels")

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
        raise Refusal(f"two evaluation corpora are named {repeated[0]!r}: give each a name of its own, NAME=PATH",
                      code="invalid-setting")


def with_presets(evals: list[EvalSet], spec_in) -> tuple:
    """``evals`` as the specs a pipeline file holds (``NAME=PATH[:PRESET]``, local paths absolute) for a pipeline whose
    input is ``spec_in``: a pipeline reads only its input through its preset or map, so each set that is not a
    refinery corpus carries its own, or the input's; one that has neither is refused."""
    import os

    from refinery.io.corpus import is_corpus

    so, specs = spec_in.storage_options, []
    for e in evals:
        path = e.paths[0] if "://" in e.paths[0] else os.path.abspath(e.paths[0])
        corpus = is_corpus(path, so)
        preset = e.preset or (None if corpus else spec_in.preset)
        if preset is None and not corpus:
            raise Refusal(f"evaluation set {e.name} ({path}) needs its own preset in a pipeline: "
                          f"{e.name}=PATH:PRESET, or a corpus", code="missing-setting")
        specs.append(f"{e.name}={path}" + (f":{preset}" if preset else ""))
    return tuple(specs)


def parse_eval_set(spec: str, label_maps: dict | None = None) -> EvalSet:
    """``NAME=PATH[:PRESET]`` (a path may itself hold ``:``, as in ``s3://``) into an ``EvalSet``."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise Refusal(f"evaluation set {spec!r} is not NAME=PATH[:PRESET]", code="invalid-setting")
    head, colon, preset = path.rpartition(":")
    if colon and preset.lower() in PRESETS:
        path = head
    elif colon and head and re.fullmatch(r"[A-Za-z][\w-]*", preset):   # a preset's place, not a URL's (s3://…)
        close = difflib.get_close_matches(preset.lower(), list(PRESETS), 1, 0.6)
        raise Refusal(f"evaluation set {spec!r}: no preset {preset!r}"
                      + (f" (did you mean {close[0]!r}?)" if close else "") + f"; presets: {', '.join(PRESETS)}",
                      code="invalid-setting")
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
                raise Refusal(_given(spec), f": {pair!r} is not FROM:TO", code="invalid-setting")
            out[src] = dst
        if not sep or not out:
            raise Refusal(_given(spec), " is not NAME=FROM:TO,...", code="invalid-setting")
        maps[name] = out
    return maps


def _given(spec: str) -> Setting:
    """A label map as the command line gave it."""
    return replace(LABEL_MAPS, value=repr(spec), placeholder=True)


def resolve_label_map(train_labels: list, eval_labels: list, explicit: dict, where: str) -> dict:
    """{training label: evaluation label}: ``explicit`` first, then names equal up to case. Every
    evaluation label must be reached, or the scores would be meaningless: a clear error."""
    by_fold = {str(e).casefold(): e for e in eval_labels}
    out = {}
    for t in train_labels:
        target = explicit.get(t, by_fold.get(str(t).casefold()))
        if target is not None:
            if target not in eval_labels:
                raise Refusal(f"{where}: label map sends {t!r} to {target!r}, which is not one of its labels "
                              f"({', '.join(map(str, eval_labels))})", code="invalid-setting")
            out[t] = target
    unreached = [e for e in eval_labels if e not in out.values()]
    if unreached:
        raise Refusal(f"{where}: no training label maps to {', '.join(map(repr, unreached))}; training labels are "
                      f"{', '.join(map(repr, train_labels))} (give ", label_map_for(where), ")", code="missing-setting")
    return out


def project(proba: np.ndarray, classes: list, label_map: dict, eval_labels: list) -> np.ndarray:
    """Probabilities over the evaluation labels: the sum over the training labels mapped to each."""
    out = np.zeros((len(proba), len(eval_labels)))
    index = {e: j for j, e in enumerate(eval_labels)}
    for c, col in zip(classes, proba.T):
        if c in label_map:
            out[:, index[label_map[c]]] += col
    return out
