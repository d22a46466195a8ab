"""Model actors over Arrow batches: in-process, or as Ray Data actor pools (one model per actor).

An actor is a callable class, so Ray Data builds the model once per actor and streams batches
through it (``map_batches`` with an ``ActorPoolStrategy``; GPUs per actor for vLLM). A batch that
fails is retried row by row, and a row that still fails gets its error in ``generation_error``
instead of killing the job.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict

import pyarrow as pa

from refinery.models.generate import Sampling, make_generator
from refinery.pipeline.engine import actor_map


@functools.lru_cache(maxsize=1)
def _loaded_generator(backend: str, kwargs_json: str, _version: float):
    return make_generator(backend, **json.loads(kwargs_json))


def shared_generator(backend: str, backend_kwargs: dict):
    """The generator of the last call with the same backend and arguments (and, for a local model
    folder, the same modification time), so the rewrite/verify calls of a loop load a model once."""
    model = str(backend_kwargs.get("model", ""))
    version = os.path.getmtime(model) if model and os.path.exists(model) else 0.0
    return _loaded_generator(backend, json.dumps(backend_kwargs, sort_keys=True), version)


class GeneratorActor:
    """A loaded generator as a batch function (an actor on Ray): adds ``generated`` (a list of n texts) and
    ``generation_error`` to batches with a prompt column."""

    def __init__(self, backend: str, backend_kwargs: dict | None = None, sampling: dict | None = None,
                 prompt_column: str = "prompt"):
        self.generator = shared_generator(backend, backend_kwargs or {})
        self.sampling = Sampling(**(sampling or {}))
        self.prompt_column = prompt_column
        self.advance = None   # locally: called with the prompts of a batch done so far (``actor_map``)

    def __call__(self, batch: pa.Table) -> pa.Table:
        prompts = batch[self.prompt_column].to_pylist()
        try:
            texts = self.generator.generate(prompts, self.sampling, advance=self.advance)
            errors = [None] * len(prompts)
        except Exception:
            texts, errors = [], []
            for prompt in prompts:
                try:
                    texts += self.generator.generate([prompt], self.sampling)
                    errors.append(None)
                except Exception as e:  # one bad prompt must not kill the job
                    texts.append([])
                    errors.append(f"{type(e).__name__}: {e}"[:500])
        return (batch.append_column("generated", pa.array(texts, pa.list_(pa.string())))
                .append_column("generation_error", pa.array(errors, pa.string())))


class ClassifierActor:
    """Adds ``proba`` (per class, in ``classes`` order) and ``prediction`` from a saved classifier."""

    def __init__(self, model_path: str):
        from refinery.models.base import load_classifier

        self.model = load_classifier(model_path)

    def __call__(self, batch: pa.Table) -> pa.Table:
        proba = self.model.predict_proba(batch)
        classes = self.model.classes_
        return (batch.append_column("proba", pa.array(proba.tolist(), pa.list_(pa.float64())))
                .append_column("prediction", pa.array([classes[i] for i in proba.argmax(axis=1)], pa.string())))


def generate_table(table: pa.Table, backend: str, backend_kwargs: dict | None = None, sampling: Sampling = Sampling(),
                   *, engine: str = "local", batch_size: int = 32, actors: int = 1, resources=None,
                   prompt_column: str = "prompt", bar=None, pieces=None) -> pa.Table:
    """``table``'s prompts through a generator: in-process, or an actor pool of ``actors`` with ``resources``
    (a ``Resources``) each; ``bar``: the caller's bar to advance per batch; ``pieces``: where finished units of
    prompts are kept, so that a killed run's rerun prompts only the others (``actor_map``'s)."""
    kwargs = {"backend": backend, "backend_kwargs": backend_kwargs or {}, "sampling": asdict(sampling),
              "prompt_column": prompt_column}
    return actor_map(table, GeneratorActor, kwargs, engine, batch_size, actors, resources, desc="generate", bar=bar,
                     pieces=pieces)


def classify_table(table: pa.Table, model_path: str, engine: str = "local", batch_size: int = 256,
                   actors: int = 1, resources=None) -> pa.Table:
    """``proba`` and ``prediction`` of a saved classifier over ``table``: in-process, or an actor pool."""
    return actor_map(table, ClassifierActor, {"model_path": model_path}, engine, batch_size, actors, resources,
                     desc="classify")
