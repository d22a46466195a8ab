"""The calls: one function per registered stage, made from its class (``stage_function``), and the two that
are not one stage: ``read`` (data into a corpus) and ``run`` (a pipeline). Each adapts the
caller's data (``inputs``), builds the stage's config from the keywords (``keywords``), runs through the same
runner as the CLI, words errors for the caller (``errors``) and returns a result (``results``)."""
from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import warnings

from refinery.api.errors import python_terms
from refinery.api.folders import CallFolder
from refinery.api.inputs import Source, as_source, check_preset
from refinery.api.keywords import INPUT_KEYS, config_dict, config_keywords, input_keywords
from refinery.api.results import PipelineResult, Result, stage_result
from refinery.io.corpus_writer import convert
from refinery.io.location import MissingInput, join
from refinery.io.modes import check_mode
from refinery.messages import Refusal, text
from refinery.pipeline.config import (PipelineSpec, StageSpec, anchor_path, from_dict, parse_pipeline,
                                      to_dict)
from refinery.pipeline.runner import ingest, run_pipeline, run_stage, stage_input
from refinery.pipeline.stage import stage_class



class SplitsNotice(UserWarning):
    """A stage read some of the data's named splits and passed the others through untouched."""


def chosen_splits(stage, names: list[str], split) -> tuple[list[str], list[str]]:
    """(the named splits ``stage`` (configured) reads, those it passes through untouched). A stage that needs
    splits (leakage; dedup with ``prefer_split``: ``Stage.reads_every_split``) reads them all; any other reads
    ``train``, or the data's only split, or those ``split=`` names (a name or a list of names, pooled)."""
    if split is None:
        if len(names) < 2 or stage.reads_every_split():
            return list(names), []
        if "train" not in names:
            raise Refusal(f"the data has splits {', '.join(names)} and none named 'train': name the one {stage.name} "
                          f"reads, e.g. split={names[0]!r} (a list of splits pools them)", code="missing-split")
        chosen = ["train"]
    else:
        chosen = [split] if isinstance(split, str) else list(split)
        if not names:
            raise Refusal(f"split={split!r}: the data has no named splits (give a DatasetDict, {{split: data}} "
                          "or a split column)", code="missing-split")
        unknown = [s for s in chosen if s not in names]
        if unknown or not chosen:
            raise Refusal(f"no split {unknown[0] if unknown else ''!r}; the data's splits: {', '.join(names)}",
                          code="missing-split")
    return chosen, [s for s in names if s not in chosen]


def call_stage(name: str, data, kwargs: dict, *, out=None, engine="local", mode="overwrite", split=None,
               memory_budget=None) -> Result:
    """Stage ``name`` over ``data`` with the keywords ``kwargs`` (its config's and the input's), as its verb
    runs it: one stage into ``out``. A stage whose config names its input (``Stage.input_field``: compare's
    ``train``) reads the last of those corpora where ``data`` is None."""
    cls = stage_class(name)
    input_keys, rest = input_keywords(kwargs)
    check_mode(mode)
    field = cls.input_field
    if field is not None and field not in rest and isinstance(data, dict):   # compare({name: data, …}, …)
        raise TypeError(f"{name}() takes its corpora by name as {field}={{name: data, …}}, not as data")
    if data is None and (field is None or not rest.get(field)):
        raise TypeError(f"{name}() needs data" + (f", or {field}={{name: data, …}}" if field else ""))
    folder = CallFolder(out, name)
    with folder.removed_on_failure():
        rest = evaluation_sets_as_specs(cls.Config, rest, folder.scratch)
        source = None
        if field in rest:
            if data is None and split is not None:
                raise TypeError(f"{name}(): split= chooses among the splits of data; give one split of a corpus in "
                                f"{field} as {{name: data['SPLIT']}}")
            named, last, chosen = _named_corpora(field, rest[field], input_keys, folder.scratch)
            if data is not None and "input" not in named:   # the data is trained last, named as a pipeline's input
                named["input"] = "input"
            rest = {**rest, field: named}
            source, split = (last, chosen) if data is None else (None, split)
        with python_terms(None):   # a config's refusal in keywords: keep_share=0.5, not --keep-share
            config = from_dict(cls.Config, config_dict(cls.Config, rest, name), name)
        source = source or as_source(data, folder.scratch)
        check_preset(input_keys, source)
        with python_terms(source):
            read, untouched = chosen_splits(cls(config), source.split_names(source.input_spec(input_keys)), split)
            spec_in = source.input_spec(input_keys, read)
            spec = PipelineSpec(spec_in, [StageSpec(name, config)], folder.out, engine, memory_budget=memory_budget)
            step = run_stage(spec, mode, echo=lambda line: None)
    if untouched and not (field in rest and data is None):   # the field's corpora: noticed in _named_corpora
        where = "result.data holds them as given" if source.kind != "path" else "they stay in your files only"
        warnings.warn(f"{name} read split {', '.join(map(repr, read))} and passed {', '.join(map(repr, untouched))} "
                      f"through untouched ({where}); split= names the splits to read", SplitsNotice, stacklevel=3)
    return stage_result(name, step.result, source, spec_in, folder, output=cls(config).output,
                        splits=(read, untouched))


def _names_evaluation_sets(f: dataclasses.Field) -> bool:
    """Whether a config's field takes evaluation sets, ``NAME=PATH[:PRESET]`` (compare's ``evals``, decontaminate's
    ``against``, probe's ``evaluate``, whose name may be left out)."""
    return "PATH[:PRESET]" in (f.metadata.get("metavar") or "")


def _named_corpora(key: str, corpora, input_keys: dict, scratch: str) -> tuple[dict, Source, str | None]:
    """The named corpora a config's ``input_field`` takes (compare's ``train``: ``{name: data or a Result}``, read
    through the input's preset) as ``{name: path}`` (a result's corpus or folder, a path as it is, in-memory data
    written as Parquet under ``scratch``; of data with named splits, its ``train`` split, or its only one, the
    others named in a ``SplitsNotice``), the last one's ``Source`` and the split chosen of it (None: it has
    none)."""
    if not isinstance(corpora, dict):
        raise TypeError(f"{key}: give the corpora as {{name: data}}, e.g. {key}={{'original': df, 'filtered': "
                        f"result}} (the first is the baseline)")
    paths, source, chosen = {}, None, None
    for name, data in corpora.items():
        given = data.corpus or data.out if isinstance(data, Result) else data
        source = as_source(given, join(scratch, key, str(name)))
        check_preset(input_keys, source)
        chosen = None
        if source.splits and not source.paths:   # a DatasetDict, {split: data}: one split of it
            splits = list(source.splits)
            chosen = "train" if "train" in splits else splits[0] if len(splits) == 1 else None
            if chosen is None:
                raise Refusal(f"{key}: {name} has splits {', '.join(splits)} and none named 'train': give the one "
                              f"to train on, {key}={{{name!r}: data[{splits[0]!r}], …}}", code="missing-split")
            others = [s for s in splits if s != chosen]
            if others:
                warnings.warn(f"{key}: {name} is trained on its split {chosen!r}, not on {', '.join(map(repr, others))} "
                              f"({key}={{{name!r}: data['SPLIT']}} trains on another)", SplitsNotice, stacklevel=4)
            (paths[name],) = _one_path(name, source.splits[chosen])
            continue
        (paths[name],) = _one_path(name, source.all_paths)
    return paths, source, chosen


def evaluation_sets_as_specs(config_cls: type, keywords: dict, scratch: str) -> dict:
    """``keywords`` with each evaluation-set keyword given as ``{name: data, or (data, preset)}`` (data: a path, or
    in-memory data written as Parquet under ``scratch``, as ``compare``'s are) turned into its ``NAME=PATH[:PRESET]``
    specs; one given as data without names is refused, saying what to give."""
    out = dict(keywords)
    for f in (f for f in dataclasses.fields(config_cls) if _names_evaluation_sets(f) and f.name in keywords):
        value = keywords[f.name]
        if isinstance(value, str):
            value = [value]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            continue
        if not isinstance(value, dict):
            raise TypeError(f"{f.name}: give the evaluation sets as {{name: data}} (a path, DataFrame, Arrow table or "
                            f"HF Dataset; or (data, preset)), or as 'NAME=PATH[:PRESET]' strings")
        specs = []
        for set_name, given in value.items():
            data, preset = given if isinstance(given, tuple) else (given, None)
            (path,) = _one_path(set_name, as_source(data, join(scratch, f.name, str(set_name))).all_paths)
            specs.append(f"{set_name}={path}" + (f":{preset.lower()}" if preset else ""))
        out[f.name] = specs
    return out


@functools.lru_cache(maxsize=None)
def stage_function(name: str, cls: type):
    """``rf.NAME``: the function of stage ``name`` (registered as class ``cls``), with its config's keywords in
    its signature and their help in its docstring."""
    keywords = config_keywords(cls.Config)

    def call(*data, out=None, engine="local", mode="overwrite", split=None, memory_budget=None, **kwargs):
        if len(data) > 1:   # compare(train, eval) as it was called before its corpora were keywords
            raise TypeError(f"{call.__name__}() takes its data and nothing else by position; give the rest by keyword"
                            + (f": {call.__name__}({cls.input_field}={{name: data, …}}, …)" if cls.input_field else ""))
        return call_stage(name, data[0] if data else None, kwargs, out=out, engine=engine, mode=mode, split=split,
                          memory_budget=memory_budget)

    params = [inspect.Parameter("data", inspect.Parameter.POSITIONAL_ONLY,
                                **({"default": None} if cls.input_field else {})),
              inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None),
              inspect.Parameter("engine", inspect.Parameter.KEYWORD_ONLY, default="local"),
              inspect.Parameter("mode", inspect.Parameter.KEYWORD_ONLY, default="overwrite"),
              inspect.Parameter("split", inspect.Parameter.KEYWORD_ONLY, default=None),
              inspect.Parameter("memory_budget", inspect.Parameter.KEYWORD_ONLY, default=None)]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=leaf.default)
               for k, leaf in {**keywords, **INPUT_KEYS}.items()]
    call.__signature__ = inspect.Signature(params)
    call.__name__ = call.__qualname__ = name.replace("-", "_")
    doc = inspect.getdoc(cls) or name
    lines = [f"    {k}: {text(leaf.field.metadata.get('help', ''), 'python')}".rstrip()
             + (" In Python: {name: data, or (data, preset)}, data a path, DataFrame, Arrow table or HF Dataset; or "
                "'NAME=PATH[:PRESET]' strings." if _names_evaluation_sets(leaf.field) else
                " In Python: {name: data or a Result}, data a path, DataFrame, Arrow table or HF Dataset."
                if k == cls.input_field else "")
             for k, leaf in keywords.items()]
    call.__doc__ = (f"{doc}\n\n``data``: a path, DataFrame, Arrow table, HF Dataset/DatasetDict, Ray Dataset or "
                    "{split: data}" + (f" (none: the last of ``{cls.input_field}``)" if cls.input_field else "")
                    + "; ``out``: the stage's folder (default: a temporary folder, removed with the result "
                    "or at exit); ``engine``: local | ray; ``mode``: overwrite | skip | error; ``split``: the named "
                    "split(s) to read (default: train, or every split for a stage that needs them); the others pass "
                    "through untouched; ``memory_budget``: what each process of the run may hold ('8G', '512M', or 0.5 "
                    "of memory; default: half of it).\n\nThe stage's keywords (its pipeline keys):\n"
                    + "\n".join(lines) + "\n\nThe input's keywords: " + ", ".join(INPUT_KEYS) + ".")
    return call


# ---------------------------------------------------------------- functions that are not one stage

def read(data, /, *, out=None, **kwargs) -> Result:
    """``data`` read into a refinery corpus (canonical columns; bad rows in its rejects with their reasons)."""
    input_keys, _ = input_keywords(kwargs, "read")
    folder = CallFolder(out, "corpus")
    with folder.removed_on_failure():
        source = as_source(data, folder.scratch)
        check_preset(input_keys, source)
        spec_in = source.input_spec(input_keys)
        opts = spec_in.read_options()
        with python_terms(source):
            if spec_in.splits:
                manifest = ingest(spec_in, stage_input(spec_in, opts), folder.out)
            else:
                manifest = convert(list(stage_input(spec_in, opts).paths), folder.out, spec_in.mapping(), opts,
                                   config={"input": to_dict(spec_in)}).manifest
    rows, rejected = manifest.rows, manifest.rejected
    canonical = dataclasses.replace(source, schema=None, features={}, parts={})   # read's corpus: refinery's columns
    result = Result("read", folder.out, rows + rejected, {"rows": rows, "rejected": rejected},
                    headline=f"{rows:,} rows", corpus=folder.out, source=canonical, input=spec_in, report_file="")
    result._folder, result._stamp = folder, result.stamp()
    if source.kind == "path" and out is None:
        folder.keep_until_exit()
    return result


def _pipeline_dict(spec) -> tuple[dict, str]:
    """(the dict a pipeline file holds, the folder its relative paths start from) of a pipeline given as a
    file's path, YAML text or a dict."""
    import yaml
    is_file = isinstance(spec, (str, os.PathLike)) and os.path.exists(spec)
    try:
        if is_file:
            with open(spec) as fh:
                raw, base = yaml.safe_load(fh), os.path.dirname(os.path.abspath(spec))
        else:
            raw, base = (yaml.safe_load(spec) if isinstance(spec, str) else dict(spec)), "."
    except yaml.YAMLError as e:
        said = " ".join(str(e).replace(' in "<unicode string>",', " at").split())
        raise Refusal(f"{spec if is_file else 'the pipeline'}: not valid YAML: {said}", code="bad-input") from None
    if isinstance(raw, str) and re.search(r"\.(ya?ml|json)$", raw):
        raise MissingInput(f"no pipeline file {raw}")
    if not isinstance(raw, dict):
        raise Refusal(f"a pipeline is a file, YAML text or a dict with input and stages, not {raw!r:.80}",
                      code="invalid-setting")
    return raw, base


def run(spec, /, data=None, *, out=None, engine=None, memory_budget=None, **kwargs) -> PipelineResult:
    """Run a pipeline (the CLI's ``refinery run``): a YAML file's path, YAML text, or the dict a pipeline file
    holds. With ``data`` (and the input's keywords), the pipeline reads it instead of its file's ``input``;
    ``out`` replaces its ``out`` (none at all: a new temporary run folder); ``memory_budget`` its
    ``memory_budget``."""
    raw, base = _pipeline_dict(spec)
    target = os.path.abspath(out) if out is not None else (anchor_path(raw["out"], base) if raw.get("out") else None)
    if data is None and kwargs:
        raise TypeError(f"run(): the input's keywords ({', '.join(kwargs)}) go with data=")
    folder = CallFolder(target, "pipeline")
    raw = {**raw, "out": folder.out, **({"memory_budget": memory_budget} if memory_budget is not None else {})}
    source = None
    with folder.removed_on_failure():
        if data is not None:
            source = as_source(data, folder.scratch)
            input_keys, _ = input_keywords(kwargs, "run")
            check_preset(input_keys, source)
            raw["input"] = to_dict(source.input_spec(input_keys))
        parsed = parse_pipeline(raw, base)
        source = source or Source("path", parsed.input.paths or parsed.input.splits, paths=parsed.input.paths,
                                  splits=parsed.input.splits)
        with python_terms(source):
            done = run_pipeline(parsed, engine=engine, echo=lambda line: None)
    return PipelineResult(done, source, parsed, folder)


def _one_path(name: str, paths: list) -> list:
    """The one file, folder or corpus that a training corpus or evaluation set ``name`` is."""
    if len(paths) != 1:
        raise Refusal(f"{name} is {len(paths)} inputs; give each training corpus and evaluation set as one file, "
                      "folder or corpus", code="invalid-setting")
    return paths
