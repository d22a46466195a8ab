"""The kill matrix: each stage's overwrite of its own output, cut at its storage calls (the store, or the process,
gone from that call on: ``refinery.testing.storage_faults.StorageFaults``), must leave a reader the finished run before it or the
new one, whole (every corpus's rows and every report, times aside), never a mix; the files the user keeps in the
folder where they were; and a rerun whose output and report equal an uninterrupted run's.

``STAGES`` names each built-in stage's command line (and a pipeline's) on small SNLI slices: the old run reads one
slice, the new one another, so that every stage's two outputs differ. ``cut_points`` picks where to cut: a sample
for the suite (the first write, the swap or commit, and one between), every call for ``benchmarks/kill_matrix.py``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


from refinery.testing.run_state import (cut_points, differences, each_output_old_or_new, restore_local, run,
                                        save_local, state)
from refinery.testing.storage_faults import StorageFaults

USER_FILES = {"notes.txt": "mine", "drafts/a.txt": "deep"}                    # what a user keeps in the folder


@dataclass(frozen=True)
class Inputs:
    """The slices the runs read: ``old`` and ``new`` (SNLI dev rows, JSONL, preset snli) and ``evaluation`` (SNLI
    test rows), and a folder for pipeline files."""

    old: str
    new: str
    evaluation: str
    root: str
    generator: str = ""   # a small generator's folder (the generating stages')


def make_tiny_generator(path: str) -> str:
    """A 1-layer causal LM with the packaged generator's tokenizer, randomly initialized, saved at ``path``: the
    generating stages' model in tests and in the kill matrix (seconds to load and run)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from refinery.models.generate import DEFAULT_GENERATOR, hf_folder
    from refinery.models.registry import resolve

    tokenizer = AutoTokenizer.from_pretrained(hf_folder(resolve(DEFAULT_GENERATOR)))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=256, tie_word_embeddings=True,
                                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def slices(root: str, dev: str, test: str, generator: str = "") -> Inputs:
    """The matrix's inputs under ``root``: rows 0–299 and 150–449 of SNLI dev (``dev``: the old run's input, the new
    one's) and 150 rows of SNLI test (``test``)."""
    with open(dev) as fh:
        rows = fh.readlines()
    with open(test) as fh:
        evaluation = fh.readlines()[:150]
    for name, lines in (("old", rows[:300]), ("new", rows[150:450]), ("eval", evaluation)):
        with open(os.path.join(root, f"{name}.jsonl"), "w") as fh:
            fh.write("".join(lines))
    return Inputs(*(os.path.join(root, f"{n}.jsonl") for n in ("old", "new", "eval")), root, generator)


def _pipeline(inputs: Inputs, source: str) -> list:
    path = os.path.join(inputs.root, f"pipeline-{os.path.basename(source)}.yaml")
    with open(path, "w") as fh:
        json.dump({"input": {"paths": [source], "preset": "snli"},
                   "stages": [{"audit": {}}, {"zfilter": {}}, {"weights": {"folds": 2}}]}, fh)
    return ["run", path]


SNLI = ("--preset", "snli")
STAGES: dict[str, Callable[[Inputs, str], list]] = {
    "audit": lambda i, s: ["audit", s, *SNLI],
    "convert": lambda i, s: ["convert", s, *SNLI],
    "zfilter": lambda i, s: ["zfilter", s, *SNLI],
    "compose": lambda i, s: ["compose", s, *SNLI, "--original", i.evaluation],
    "confidence": lambda i, s: ["confidence", s, *SNLI, "--folds", 2],
    "aflite": lambda i, s: ["aflite", s, *SNLI],
    "datamap": lambda i, s: ["datamap", s, *SNLI, "--epochs", 2],
    "dedup": lambda i, s: ["dedup", s, *SNLI],
    "decontaminate": lambda i, s: ["decontaminate", s, *SNLI, "--against", f"test={i.evaluation}", "--ngram", 8],
    "upsample": lambda i, s: ["upsample", s, *SNLI],
    "weights": lambda i, s: ["weights", s, *SNLI, "--folds", 2],
    "leakage": lambda i, s: ["leakage", "--input", f"train={s}", "--input", f"test={i.evaluation}", *SNLI,
                             "--trees", 10],
    "razor": lambda i, s: ["razor", s, *SNLI, "--score-only"],
    "probe": lambda i, s: ["probe", s, *SNLI, "--eval", f"test={i.evaluation}"],
    "compare": lambda i, s: ["compare", "--train", f"a={s}", *SNLI, "--eval", f"test={i.evaluation}",
                             "--allow-overlap", "--bootstrap", 100],
    "generate": lambda i, s: ["generate", s, *SNLI, "--model", i.generator, "--limit", 4, "--target-labels", "all",
                              "--max-new-tokens", 8, "--batch-size", 2, "--shard-rows", 4],
    "razor --rewrite": lambda i, s: ["razor", s, *SNLI, "--model", i.generator, "--top-k", 4, "--candidates", 2,
                                     "--rounds", 1, "--max-new-tokens", 8],
    "ibadr": lambda i, s: ["ibadr", s, *SNLI, "--generator", i.generator, "--iterations", 1, "--per-iteration", 4,
                           "--max-new-tokens", 16, "--first-epochs", 1, "--tau", 0],
    "pipeline": _pipeline,
}


@dataclass
class Matrix:
    """One stage's matrix: ``calls`` counted in the uncut overwrite, the cuts made and what each left."""

    stage: str
    calls: int = 0
    cuts: dict = field(default_factory=dict)   # call → "old" | "new"


def kill_matrix(stage: str, inputs: Inputs, out: str, every: bool | int = False, snapshot=None, restore=None
                ) -> Matrix:
    """The overwrite old → new of ``stage``'s output ``out``, cut at ``cut_points``: each cut ends with exit 2 and
    one line (or 0, where only a clean-up after the commit was cut), leaves the old state or the new one and the
    user's files in place (local folders), and its rerun leaves the new state."""
    args = STAGES[stage]
    local = "://" not in out
    watch = str(Path(out).parent) if local else out
    faults = StorageFaults()
    first = run(args(inputs, inputs.old), out)
    assert first.exit_code == 0, first.output
    if local:
        for name, text in USER_FILES.items():
            Path(out, name).parent.mkdir(parents=True, exist_ok=True)
            Path(out, name).write_text(text)
    old = state(out)
    saved = (snapshot or save_local)(out)
    done = run(args(inputs, inputs.new), out, faults, None, watch)
    assert done.exit_code == 0, done.output
    new, calls = state(out), list(faults.calls)
    assert new != old and len(calls) > 3, (stage, calls)
    matrix = Matrix(stage, len(calls))
    for at in cut_points(calls, every):
        (restore or restore_local)(saved, out)
        assert state(out) == old, f"{stage}: the old run restored before the cut at call {at}"
        cut = run(args(inputs, inputs.new), out, faults, at, watch)
        found = state(out)
        mixed = each_output_old_or_new(found, old, new)
        assert not mixed, f"{stage}: cut at call {at} ({calls[at - 1]}): {mixed} neither the old run nor the new"
        matrix.cuts[at] = "old" if found == old else "new" if found == new else "old and new steps"
        assert cut.exit_code != 0 or found == new, (stage, at, cut.output)
        assert cut.exit_code in (0, 2) and "Traceback" not in cut.output and (cut.exit_code == 0 or len(
            cut.output.strip().splitlines()[-1:]) == 1 and cut.output.strip().splitlines()[-1].startswith(
            "error: ")), f"{stage}: cut at call {at} ({calls[at - 1]}) ended with exit {cut.exit_code}: {cut.output}"
        if local:
            for name, text in USER_FILES.items():
                assert Path(out, name).read_text() == text, f"{stage}: cut at call {at}: the user's {name}"
        again = run(args(inputs, inputs.new), out)
        assert again.exit_code == 0, (stage, at, again.output)
        rerun = state(out)
        assert rerun == new, (f"{stage}: the rerun after a cut at call {at} ({calls[at - 1]}) differs in "
                              f"{differences(rerun, new)}")
    return matrix



