"""``StageOutput``: the one object through which a stage publishes everything it writes.

The runner makes one per stage run and hands it to ``Stage.run(source, out)``. It carries the stage's folder with
its storage options (a local path or any fsspec URL: reports, corpora and checkpoints all reach the same store with
the same credentials), the inputs the stage read (named in each corpus's manifest and each report's header) and
the stage's settings (kept in each corpus's manifest). Through it a stage opens its part writers — a corpus
(``corpus``/``write_corpus``: kept, rejected, corpus, pool, scores …), a folder of files (``files``), its report
(``publish_report``, the page from ``report_page``) and its checkpoints — every one published atomically by io/.
A stage never opens a path itself (tests/test_architecture.py checks that nothing outside io/ and this module
writes to a filesystem).
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from refinery.io.location import join
from refinery.io.records import AUDIT_PRIOR, FIELD_NAMES, SINGLE_TEXT

if TYPE_CHECKING:   # the writers load when a stage writes: a verb's options build without them
    from refinery.core.audit_record import AuditRecord
    from refinery.core.report_record import ReportRecord
    from refinery.core.stats import Prior
    from refinery.io.checkpoints import Checkpoints
    from refinery.io.corpus_writer import CorpusWriter
    from refinery.io.publishing import AtomicDir, RunOutput
    from refinery.io.records import CorpusManifest
    from refinery.report.page import Report

REPORT = "report"   # the part holding report.json and report.html


@dataclass
class StageOutput:
    """Where and how one stage run writes: ``folder`` on the store ``storage_options`` reach."""

    folder: str
    storage_options: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)     # the corpora or files the stage read
    settings: dict = field(default_factory=dict)   # {stage name: its config as a dict}, kept in each manifest
    location: str = ""   # where the parts are written until the run's commit (``publishing``); ``folder`` outside one
    field_names: tuple | None = None   # the input's names of text_a and text_b (its preset's): kept in each manifest,
    single_text: bool = False          # so that the next stage or audit of a corpus names its features the same
    prior: Prior | None = None   # the audit's prior rule: carried from the input, or decided by the stage as it counts
    input_prints: dict | None = None   # the fingerprints of ``inputs`` where the step has them (``SPLIT=PATH`` keys
    #                                    where named): kept in each manifest, and in the key of its checkpoints
    fingerprint: str = ""   # the step's (its stage, version, config and inputs): what checkpoints are kept for
    _read_prints: dict = field(default_factory=dict, init=False, repr=False)   # ``_manifest_prints``' own, once

    def __post_init__(self):
        self.folder = self.folder.rstrip("/")
        self.location = (self.location or self.folder).rstrip("/")
        self.storage_options = dict(self.storage_options or {})
        self.inputs = [str(p) for p in self.inputs]

    def url(self, *parts: str) -> str:
        """Where a part is published (for messages and for the next stage to read; never to open)."""
        parts = [p for p in parts if p]
        return join(self.folder, *parts) if parts else self.folder

    def written(self, part: str = "") -> str:
        """Where the part is written and read back during the run (before its commit, where no reader looks)."""
        return join(self.location, part) if part else self.location

    def part(self, name: str, inputs: list | None = None, settings: dict | None = None) -> "StageOutput":
        """The output of a stage run inside this one's folder (a composition's filterings), committed with it."""
        return StageOutput(self.url(name), self.storage_options, self.inputs if inputs is None else inputs,
                           self.settings if settings is None else settings, self.written(name), self.field_names,
                           self.single_text, self.prior, self.input_prints if inputs is None else None,
                           self.fingerprint)

    @contextlib.contextmanager
    def publishing(self) -> Iterator[RunOutput]:
        """The stage folder's run, one commit (``RunOutput``): the parts written meanwhile go where no reader looks,
        and become the folder's in one step with ``_SUCCESS`` (its ``summary``); on failure the folders the run
        created are removed and a finished earlier run is left as it was."""
        from refinery.io.publishing import RunOutput

        with RunOutput(self.folder, self.storage_options) as run:
            self.location = run.location
            try:
                yield run
            finally:
                self.location = self.folder

    def corpus(self, part: str = "", *, settings: dict | None = None, **options) -> CorpusWriter:
        """A streaming writer of the corpus ``part`` (the folder itself for ``""``: shards, rejects, manifest;
        published on ``commit``)."""
        from refinery.io.corpus_writer import CorpusWriter

        options["extra"] = _Recorded(self, options.get("extra") or {})
        return CorpusWriter(self.url(part), location=self.written(part),
                            config=self.settings if settings is None else settings,
                            storage_options=self.storage_options, inputs=self.inputs,
                            input_prints=self._manifest_prints(), **options)

    def _manifest_prints(self) -> dict | None:
        """``input_prints`` as a manifest keeps them: by path (``--mode skip`` compares them with the paths' own), in
        the order of ``inputs``, with those of the corpora the stage read besides its input (a composition's
        original, z-filtering's seed: added to ``inputs`` by the stage) fingerprinted here."""
        from refinery.io.corpus import input_fingerprints
        from refinery.io.splits import parse_split_spec

        if self.input_prints is None:
            return None
        known = {parse_split_spec(key)[1]: value for key, value in self.input_prints.items()}
        paths = [parse_split_spec(p)[1] for p in self.inputs]
        unread = [p for p in paths if p not in known and p not in self._read_prints]   # each fingerprinted once a run
        self._read_prints.update(input_fingerprints(unread, self.storage_options) if unread else {})
        prints = {**known, **self._read_prints}
        return {**{p: prints[p] for p in paths if p in prints}, **prints}

    def write_corpus(self, part: str, rows: pa.Table, rejects: pa.Table | None = None, *,
                     settings: dict | None = None, audit: AuditRecord | None = None, **options) -> CorpusManifest:
        """Publish an in-memory table (and the input rejects it answers for) as the corpus ``part``, with its
        ``audit`` where the stage has one (``AuditRecord.attach_to``); its manifest."""
        with self.corpus(part, settings=settings, **options) as writer:
            writer.write(rows, rejects)
            if audit is not None:
                audit.attach_to(writer)
            return writer.commit()

    def files(self, part: str = REPORT) -> AtomicDir:
        """A folder of files (``write_text``, ``write_bytes``, ``write_parquet``, ``file`` for a library's own
        writer), published atomically by its ``commit``."""
        from refinery.io.publishing import AtomicDir

        return AtomicDir(self.written(part), self.storage_options)

    def save_folder(self, location: str, save) -> str:
        """Publish at ``location`` (a folder or URL on this output's store) what a library's own writer ``save`` (a
        fitted model's ``save(folder)``) puts in the local folder it is handed; ``location``."""
        import os

        from refinery.io.publishing import AtomicDir
        from refinery.io.scratch import temporary_folder

        with temporary_folder("publish-") as local, AtomicDir(location, self.storage_options) as d:
            save(local)
            for root, _, names in os.walk(local):
                for name in sorted(names):
                    with open(os.path.join(root, name), "rb") as fh:
                        d.write_bytes(os.path.relpath(os.path.join(root, name), local), fh.read())
            d.commit()
        return location

    def report_page(self, title: str, *, corpora: list | None = None, read: list | None = None) -> Report:
        """The stage's report page, headed by the corpus it read: ``corpora`` where the page is about other corpora
        than the stage's inputs (a comparison's training corpora), its header listing ``read`` (default: those)."""
        from refinery.report.page import Report, corpus_name

        paths = self.inputs if corpora is None else [str(p) for p in corpora]
        return Report(title, corpus_name(paths, self.storage_options), paths if read is None else list(read))

    def publish_report(self, report: ReportRecord, page: Report | str, files: dict | None = None,
                       part: str = REPORT) -> str:
        """Publish ``report.json`` (``report``'s JSON), ``report.html`` and ``files`` (``publish_files``'s) as the folder ``part`` (``""``:
        the stage folder itself); the HTML's URL."""
        self.publish_files(part, {"report.json": json.dumps(report.to_json(), indent=1, default=str), **(files or {}),
                                  "report.html": page if isinstance(page, str) else page.html()})
        return self.url(part, "report.html")

    def publish_files(self, part: str, files: dict) -> None:
        """Publish ``files`` ({name: text, bytes, an Arrow table, or a ``pa.RecordBatchReader`` streamed into one
        zstd Parquet file, for a table too large to hold, or a function that writes the file into the binary file
        object it is handed, for a library's own writer}) as the folder ``part``, whole or not at all."""
        from refinery.io.scratch import in_memory_names

        with self.files(part) as d:
            for name, content in files.items():
                if isinstance(content, pa.Table):
                    d.write_parquet(name, content)
                elif isinstance(content, pa.RecordBatchReader):
                    _stream_parquet(d, name, content)
                elif isinstance(content, str):
                    d.write_text(name, in_memory_names(content))
                elif callable(content):
                    with d.open(name) as fh:
                        content(fh)
                else:
                    d.write_bytes(name, content)
            d.commit()

    def checkpoints(self, task: str, settings: dict | None = None, *, kept: bool = False, local: bool = False,
                    resume: bool = True, own_keys: bool = False) -> Checkpoints:
        """The finished pieces of a long ``task`` kept under the folder (``_checkpoints/<task>``, or ``<task>`` itself
        where they are ``kept`` in the finished output; on the local disk where they are ``local``), reused while
        their key is unchanged (``io.checkpoints``). The one recipe of a key: the ``settings`` the pieces depend on
        (a stage's config but the options that only choose among finished pieces) and the step's input
        fingerprints; without ``settings``, the step's fingerprint (any change of config or input starts over).
        ``own_keys``: no key for the task, each piece is reused under a key of its own (a comparison's runs)."""
        from refinery.io.checkpoints import Checkpoints
        from refinery.io.corpus import input_fingerprints

        if own_keys:
            key = None
        elif settings is None and self.fingerprint:
            key = {"step": self.fingerprint}
        else:
            inputs = self.input_prints if self.input_prints is not None else \
                input_fingerprints(self.inputs, self.storage_options)
            key = {"settings": settings or {}, "inputs": inputs}
        return Checkpoints(self.folder, task, key, self.storage_options, kept=kept, local=local, resume=resume)


def _stream_parquet(folder: AtomicDir, name: str, batches: pa.RecordBatchReader) -> None:
    """``batches`` into the zstd Parquet file ``name`` of ``folder``, a row group per batch."""
    import pyarrow.parquet as pq

    with folder.open(name) as sink, pq.ParquetWriter(sink, batches.schema, compression="zstd") as writer:
        for batch in batches:
            writer.write_batch(batch)


def recorded(paths: list, storage_options: dict) -> tuple[tuple, Prior | None]:
    """What every one of the corpora ``paths`` (each a path or its ``io.corpus.Resolved``) records of its lineage (a
    stage's output keeps its input's): (the field names and single-text flag, or none; the audit's prior rule, or
    None), each where all record the same and every path is a corpus (a raw input or a Hugging Face folder records
    neither)."""
    from refinery.core.stats import Prior
    from refinery.io.corpus import resolve

    corpora = [resolve(path, storage_options).corpus for path in paths]
    names, priors = set(), set()
    for corpus in corpora:
        given, single = corpus.manifest.field_names if corpus else (None, False)
        names.add((given, single) if given is not None else None)
        priors.add(Prior.recorded(corpus.manifest.audit_prior if corpus else None))
    return (next(iter(names)) if len(names) == 1 and None not in names else (None, False),
            next(iter(priors)) if len(priors) == 1 else None)


class _Recorded(Mapping):
    """What each corpus manifest a stage writes records of its input, read when the corpus commits (a stage decides
    its input's prior rule as it counts it, after its writers opened): the preset's field names, the audit's prior
    rule, and the stage's own ``extra`` entries."""

    def __init__(self, out: StageOutput, extra: dict):
        self.out, self.extra = out, extra

    def _items(self) -> dict:
        out, items = self.out, {}
        if out.field_names:
            items.update({FIELD_NAMES: list(out.field_names), SINGLE_TEXT: out.single_text})
        if out.prior is not None:
            items[AUDIT_PRIOR] = out.prior.record()
        return {**items, **self.extra}

    def __getitem__(self, key):
        return self._items()[key]

    def __iter__(self):
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())
