"""Whether an output refinery writes is finished, and what its run recorded: the one place that asks.

Every output is published whole, with one record written last, and is finished exactly when that record is there:

- a stage's folder (``STAGE``): ``_SUCCESS``, written by its run's one commit (``publishing.RunOutput``), with the
  stage's fingerprint and summary (on an object store, also the pointer to the committed run: ``committed``);
- a corpus (``CORPUS``): its manifest, ``.refinery/manifest.json`` (``manifest.json`` in corpora written before
  ``.refinery/``), written last by its ``CorpusWriter``, read in the run that committed it (``committed_url``);
- a Hugging Face ``save_to_disk`` folder (``HF``): the run's stamp in refinery's marker, written after the dataset.

``--mode`` decides what to do with a finished output (``modes.keeps_finished``) from what ``finished`` returns.
"""
from __future__ import annotations

import posixpath

from refinery.io.committed import committed_url
from refinery.io.location import get_fs, on_store
from refinery.io.ownership import read_marker, run_record
from refinery.io.records import CorpusManifest, HfStamp, RunRecord, manifest_path, read_record

STAGE, CORPUS, HF = "stage", "corpus", "hf"
FinishedRecord = RunRecord | CorpusManifest | HfStamp


def corpus_manifest(url: str, storage_options: dict | None = None) -> CorpusManifest | None:
    """The manifest of the corpus at ``url`` (a committed run's folder: ``committed_url``), checked as one record
    (``records.CorpusManifest``: a field of the wrong type, a file outside the folder or named twice is refused in
    one line), or None where ``url`` holds none."""
    fs, path = get_fs(url, storage_options)
    with on_store(url, "looking for a finished corpus"):
        found = manifest_path(fs, path)
    if found is None:
        return None
    name = found[len(path.rstrip("/")) + 1:]
    record = posixpath.join(url.rstrip("/"), name)
    return CorpusManifest.checked(record, read_record(fs, path, name, record, "reading the corpus manifest"))


def finished(url: str, storage_options: dict | None = None, *kinds: str) -> FinishedRecord | None:
    """What the finished output at ``url`` records of its run, for the first of ``kinds`` (``STAGE``: its
    ``RunRecord``; ``CORPUS``: its ``CorpusManifest``; ``HF``: its ``HfStamp``; default: a corpus) it is finished as;
    None where it is finished as none of them. Each record is checked before it is returned (``records``)."""
    for kind in kinds or (CORPUS,):
        record = _READERS[kind](url, storage_options)
        if record is not None:
            return record
    return None


def _corpus(url: str, storage_options: dict | None) -> CorpusManifest | None:
    return corpus_manifest(committed_url(url, storage_options), storage_options)


def _hf(url: str, storage_options: dict | None) -> HfStamp | None:
    found = read_marker(url, storage_options)
    return None if found is None else found.hf


_READERS = {STAGE: run_record, CORPUS: _corpus, HF: _hf}
