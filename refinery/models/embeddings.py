"""Sentence embeddings from a frozen encoder, computed once per text and cached by content.

The encoder (default all-MiniLM-L6-v2, packaged offline) reads each text alone; its embedding is the mean of the
last layer's token states over the real tokens, scaled to unit length, as sentence-transformers pools this model
(Reimers & Gurevych 2019):  e(x) = h̄ / ‖h̄‖,  h̄ = Σ_t m_t h_t / Σ_t m_t  (m: the attention mask).

``embed_texts`` looks every distinct text up in the local cache (``io.embedding_cache``) by the sha256 of (the
encoder's identity, its input length, the pooling, the text) and embeds only the others, batched through
``pipeline.engine.actor_map``: in-process on the local engine, an actor pool under ``--engine ray`` (each actor asking
for a GPU where the cluster has one), longest texts together so that batches pad little, ``CHUNK`` texts at a time,
each chunk added to the cache as it is done (a killed run embeds only what it had not).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.io.embedding_cache import EmbeddingCache
from refinery.models.registry import PACKAGED, resolve
from refinery.pipeline.engine import actor_map, ray_init
from refinery.pipeline.stage import Resources
from refinery.progress import progress

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
POOLING = "mean, L2-normalized"
BATCH = 64        # texts per forward pass on a CPU (longer batches pad more and are no faster there)
GPU_BATCH = 512   # on a GPU: at 64 an H200 waits on the launches (0.22 ms a text against 0.024 at 512)
CHUNK = 32_768    # texts embedded, then added to the cache, at a time: a killed run keeps what it embedded
WEIGHT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class EncoderSpec:
    """Which frozen encoder, and how long an input it reads: everything an embedding depends on."""

    model: str = DEFAULT_ENCODER
    max_length: int = 128

    def identity(self) -> str:
        """The encoder's identity in the cache's keys: a packaged model by its package's version, a local folder by
        its path and its weight files' sizes and times (edited weights are another encoder), else the hub name."""
        path = Path(self.model).expanduser()
        if path.exists():
            files = [path / f for f in WEIGHT_FILES if (path / f).exists()] if path.is_dir() else [path]
            return f"folder {path.resolve()} " + " ".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                                                         for f in files)
        spec = PACKAGED.get(self.model)
        if spec is not None:
            try:
                return f"{self.model} ({spec.package}=={importlib.metadata.version(spec.package)})"
            except importlib.metadata.PackageNotFoundError:
                return self.model
        return self.model

    def namespace(self) -> str:
        """The cache folder of this setting's vectors."""
        return hashlib.sha256(f"{self.identity()}\n{self.max_length}\n{POOLING}".encode()).hexdigest()[:24]

    def keys(self, texts: list[str]) -> np.ndarray:
        """Each text's cache key (``S32``): sha256 of (identity, max_length, pooling, text)."""
        head = f"{self.identity()}\n{self.max_length}\n{POOLING}\n".encode()
        return np.array([hashlib.sha256(head + t.encode()).digest() for t in texts], dtype="S32")


class SentenceEncoder:
    """The frozen encoder on this process's device: ``encode(texts)`` gives unit-length mean-pooled embeddings."""

    def __init__(self, model: str = DEFAULT_ENCODER, max_length: int = 128):
        from refinery.quiet import quiet_other_bars

        quiet_other_bars()
        import torch
        from transformers import AutoModel, AutoTokenizer

        ref = resolve(model)
        self.device = encoder_device()
        self.tokenizer = AutoTokenizer.from_pretrained(ref.path, **ref.kwargs())
        self.model = AutoModel.from_pretrained(ref.path, **ref.kwargs()).to(self.device).eval()
        self.max_length = max_length

    def encode(self, texts: list[str]):
        """The texts' embeddings (rows × dim, float32 NumPy): the mean of the token states over the mask, L2-scaled."""
        import torch

        batch = self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=True, return_tensors="pt")
        with torch.inference_mode():
            states = self.model(**{k: v.to(self.device) for k, v in batch.items()}).last_hidden_state
            mask = batch["attention_mask"].to(self.device).unsqueeze(-1).to(states.dtype)
            mean = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean.float(), p=2, dim=1).cpu().numpy()


class EmbeddingActor:
    """A loaded encoder as a batch function (an actor on Ray): adds ``embedding`` to batches with a ``text`` column."""

    def __init__(self, model: str, max_length: int):
        self.encoder = SentenceEncoder(model, max_length)

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.encoder.encode(batch["text"].to_pylist())
        return batch.append_column("embedding", pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()),
                                                                                  vectors.shape[1]))


@dataclass
class Embedded:
    """Every text's vector (rows × dim) and how many distinct texts were read from the cache or embedded."""

    vectors: np.ndarray
    cached: int
    embedded: int

    def counts(self) -> dict:
        """The distinct texts, those read from the cache and those embedded (a report's figures)."""
        return {"texts": self.cached + self.embedded, "cached": self.cached, "embedded": self.embedded}

    def provenance(self) -> str:
        return f"{self.embedded:,} distinct texts embedded, {self.cached:,} read from the cache"


def embed_texts(texts: list[str], spec: EncoderSpec, engine: str = "local", *, desc: str = "embed",
                cache: EmbeddingCache | None = None) -> Embedded:
    """The embedding of every text of ``texts`` (in order): each distinct text read from ``cache`` (default: the
    local cache of ``spec``) or embedded on ``engine`` and added to it."""
    cache = cache or EmbeddingCache(spec.namespace())
    index: dict = {}
    where = np.fromiter((index.setdefault(t, len(index)) for t in texts), np.int64, len(texts))
    distinct = list(index)
    keys = spec.keys(distinct)
    found, vectors = cache.lookup(keys)
    missing = np.flatnonzero(~found)
    lengths = np.fromiter((len(distinct[i]) for i in missing), np.int64, len(missing))
    longest_first = missing[np.argsort(-lengths, kind="stable")]
    if len(missing):   # what the encoder needs is asked only when it runs (Ray started, torch imported)
        resources = encoder_resources(engine)
        batch = GPU_BATCH if (resources.gpus if engine == "ray" else encoder_device() == "cuda") else BATCH
    with progress(total=len(missing), desc=desc, unit=" text") as bar:
        for start in range(0, len(longest_first), CHUNK):
            part = longest_first[start:start + CHUNK]
            table = pa.table({"text": pa.array([distinct[i] for i in part], pa.string())})
            column = actor_map(table, EmbeddingActor, {"model": spec.model, "max_length": spec.max_length}, engine,
                               batch, 1, resources, bar=bar)["embedding"].combine_chunks()
            fresh = column.values.to_numpy(zero_copy_only=False).reshape(len(part), column.type.list_size)
            cache.store(keys[part], fresh)
            if vectors is None:
                vectors = np.zeros((len(distinct), fresh.shape[1]), np.float32)
            vectors[part] = fresh
    if vectors is None:   # no text at all
        vectors = np.zeros((0, 0), np.float32)
    return Embedded(vectors[where] if len(texts) else vectors[:0], int(found.sum()), len(missing))


def encoder_device() -> str:
    """The device an encoder in this process runs on: ``cuda`` where torch finds a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def encoder_resources(engine: str) -> Resources:
    """What an encoder's actor asks for: a GPU where the Ray cluster has one, else a CPU."""
    if engine == "ray" and ray_init().cluster_resources().get("GPU", 0) >= 1:
        return Resources(cpus=1, gpus=1, memory_gb=2)
    return Resources(cpus=1, memory_gb=2)


@dataclass
class EmbeddedRows:
    """Φ of every row (rows × dim, float32), each row's label code, the labels sorted, and the texts' provenance."""

    features: np.ndarray
    y: np.ndarray
    labels: list
    texts: Embedded


def embedded_rows(tables, inputs: str, spec: EncoderSpec, engine: str = "local", desc: str = "embed") -> EmbeddedRows:
    """The rows of ``tables`` (in order) as sentence embeddings: the hypothesis's e(b) (``inputs: hypothesis``; a
    single-text corpus's text), or for the pair [e(a), e(b), |e(a) − e(b)|, e(a) ⊙ e(b)], the features of a linear
    classifier over two sentence encodings (Conneau et al. 2017; Reimers & Gurevych 2019). Each distinct text is
    embedded once (a premise recurs with each of its hypotheses) or read from the cache."""
    from refinery.models.ngram import label_codes

    firsts, seconds, labels = [], [], []
    for table in tables:
        a = table["text_a"]
        firsts += a.to_pylist()
        seconds += (pc.coalesce(table["text_b"], a) if "text_b" in table.column_names else a).to_pylist()
        labels.append(table["label"].cast(pa.string()))
    y, names = label_codes(labels)
    rows = len(seconds)
    embedded = embed_texts(seconds + (firsts if inputs == "pair" else []), spec, engine, desc=desc)
    b = embedded.vectors[:rows]
    if inputs != "pair":
        return EmbeddedRows(np.ascontiguousarray(b), y, names, embedded)
    a = embedded.vectors[rows:]
    return EmbeddedRows(np.hstack([a, b, np.abs(a - b), a * b]) if rows else a, y, names, embedded)
