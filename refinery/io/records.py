"""A folder's records, typed and checked as one schema: a corpus's manifest (``CorpusManifest``, with the files it
lists and the tables attached to it), refinery's marker (``Marker``: the files refinery wrote in a folder) and a run's
``_SUCCESS`` (``RunRecord``: its parts, and on an object store the run's folder).

Every field has its type; every path is relative and inside the record's folder, and no path or key is named twice
(``contained.inside``); on a local disk no path leads out of the folder through a symbolic link
(``contained.links_inside``). A record that breaks any of these, or that is not JSON (cut short), is refused as
``BadRecord``: one line naming the record and its field, exit 2, before anything it names is read or removed. Refinery
writes every record itself, so a record that does not fit was made or changed by someone else; trusting it would let a
shared folder steer what refinery reads, counts or deletes. ``Corpus.open`` checks the sizes the manifest records
(``--verify`` the checksums) before a row is read.
"""
from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field

from refinery.io.contained import BadRecord, inside, link_out, links_inside
from refinery.io.location import is_local, join, on_store

CORPUS_FORMAT = "refinery.corpus/1"   # a corpus manifest's "format"
MARKER_FORMAT = "refinery-output/1"   # refinery's marker's "format": what no other tool writes
EARLIER_WRITER = "refinery "          # refinery 0.1's marker said only who wrote it ("written_by")
_SHA256 = re.compile(r"[0-9a-f]{64}")

META_DIR = ".refinery"   # a corpus's own files: hidden, so that tools reading the folder see only its shards
MANIFEST = f"{META_DIR}/manifest.json"
LEGACY_MANIFEST = "manifest.json"   # where corpora written before .refinery/ keep it (still read)
FIELD_NAMES, SINGLE_TEXT = "field_names", "single_text"   # a manifest's record of its input's preset's names
AUDIT_PRIOR = "audit_prior"   # a manifest's record of the audit's prior rule (decided on its lineage's first)


def _count(value) -> bool:
    return type(value) is int and value >= 0


def _text(value) -> bool:
    return isinstance(value, str)


def _flag(value) -> bool:
    return isinstance(value, bool)


def _object(value) -> bool:
    return isinstance(value, dict)


def _counts(value) -> bool:
    return isinstance(value, dict) and all(_count(v) for v in value.values())


def _texts(value) -> bool:
    return isinstance(value, dict) and all(_text(v) for v in value.values())


def _names(value) -> bool:
    return isinstance(value, list) and all(_text(v) for v in value) and len(set(value)) == len(value)


def _sha256(value) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


# what each field of a record holds: (test, what it must be)
COUNT, TEXT, FLAG, OBJECT = (_count, "a count (a whole number ≥ 0)"), (_text, "a text"), (_flag, "true or false"), \
    (_object, "a JSON object")
COUNTS, TEXTS, SHA256 = (_counts, "an object of counts"), (_texts, "an object of texts"), (_sha256, "a sha256 in hex")
NAMES = (_names, "a list of distinct texts")
_MANIFEST_FIELDS = {"format": TEXT, "rows": COUNT, "rejected": COUNT, "labels": COUNTS, "reject_reasons": COUNTS,
                    "inputs": TEXTS, "command": TEXT, "config": OBJECT, "attached": OBJECT, "columns": NAMES}
_FILE_FIELDS = {"rows": COUNT, "bytes": COUNT, "sha256": SHA256}
_MARKER_FIELDS = {"format": TEXT, "written_by": TEXT, "run": TEXT, "emptied": FLAG, "hf": OBJECT}
_RUN_FIELDS = {"run": TEXT, "finished": TEXT}


def _described(value) -> str:
    """``value`` as a refusal shows it: a scalar as it is (a long text cut), a list or object by its kind."""
    if isinstance(value, (list, dict)):
        return f"a JSON {'list' if isinstance(value, list) else 'object'}"
    return repr(value[:40] + "…" if isinstance(value, str) and len(value) > 40 else value)


def _typed(record: str, body: dict, fields: dict, required=(), where: str = "", fix: str = "") -> None:
    """Each of ``fields`` that ``body`` holds is of its type, and each of ``required`` is there; else ``BadRecord``
    naming ``record``, the field (``where``: the entry it is in) and ``fix``."""
    for key in required:
        if key not in body:
            raise BadRecord(f"{record}: {where}{key!r} is missing; refinery did not write it as it is: {fix}")
    for key, (test, what) in fields.items():
        if key in body and not test(body[key]):
            raise BadRecord(f"{record}: {where}{key!r} is {_described(body[key])}, not {what}; refinery did not "
                            f"write it as it is: {fix}")


def _no_key_twice(record: str):
    def pairs(items):
        body = {}
        for key, value in items:
            if key in body:
                raise BadRecord(f"{record}: the key {key!r} is given twice; refinery did not write it as it is: "
                                f"remove or rewrite {record}")
            body[key] = value
        return body
    return pairs


def record_bytes(fs, folder: str, name: str, url: str, operation: str) -> bytes | None:
    """The bytes of the record ``name`` in ``folder`` (``url``: how it is named), or None where there is no such
    file; ``BadRecord`` where it is a symbolic link out of the folder (the record would be another folder's)."""
    if is_local(fs):
        target = link_out(folder, name)
        if target is not None:
            raise BadRecord(f"{url}: a symbolic link out of its folder (to {target}); refinery reads only the records "
                            f"inside a folder: copy the folder without links (cp -rL) or remove the link")
        if os.path.lexists(join(folder, name)) and not os.path.isfile(join(folder, name)):
            return None   # a folder, a pipe or a device of that name: no record (a pipe would never end a read)
    with on_store(url, operation):
        try:
            if not is_local(fs):   # one request, whether it is there or not
                return fs.cat_file(join(folder, name))
            with fs.open(join(folder, name), "rb") as fh:
                return fh.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None


def manifest_path(fs, path: str) -> str | None:
    """Where the corpus at ``path`` keeps its manifest (``.refinery/manifest.json``, or ``manifest.json`` in a
    corpus written before ``.refinery/``), or None where it has none: not a finished corpus."""
    for name in (MANIFEST, LEGACY_MANIFEST):
        candidate = join(path, name)
        # on a store, the read that the manifest's reader makes next (one request, whether it is there or not)
        if fs.isfile(candidate) if is_local(fs) else record_bytes(fs, path, name, candidate, "reading") is not None:
            return candidate
    return None


def parsed(url: str, data: bytes):
    """The JSON of the record at ``url``; ``BadRecord`` where it is not JSON (cut short) or names a key twice."""
    try:
        return json.loads(data, object_pairs_hook=_no_key_twice(url))
    except BadRecord:
        raise
    except (ValueError, RecursionError) as e:
        raise BadRecord(f"{url}: not JSON ({'cut short or damaged' if data.strip() else 'empty'}: "
                        f"{' '.join(str(e).split())[:80]}); refinery writes its records whole: remove or rewrite "
                        f"{url}") from None


def read_record(fs, folder: str, name: str, url: str, operation: str):
    """The JSON of the record ``name`` in ``folder`` (``record_bytes``, ``parsed``), or None where there is none."""
    data = record_bytes(fs, folder, name, url, operation)
    return None if data is None else parsed(url, data)


@dataclass(frozen=True)
class FileRecord:
    """What a manifest records of one file it lists: its path in the corpus, rows, bytes and sha256 (a corpus
    written before sizes were recorded: no bytes)."""

    path: str
    rows: int | None = None
    bytes: int | None = None
    sha256: str | None = None


def _file_records(record: str, key: str, entries, fix: str) -> list[FileRecord]:
    """``entries`` (a list of file records, or {name: file record}) typed, each path inside, none twice."""
    named = list(entries.items()) if isinstance(entries, dict) else list(enumerate(entries, 1))
    found = []
    for name, entry in named:
        where = f"{key!r} entry {name!r}: " if isinstance(name, str) else f"{key!r} entry {name}: "
        if not isinstance(entry, dict):
            raise BadRecord(f"{record}: {where[:-2]} is {_described(entry)}, not a record of a file; refinery did "
                            f"not write it as it is: {fix}")
        _typed(record, entry, _FILE_FIELDS, ("path",), where, fix)
        found.append(FileRecord(entry["path"], entry.get("rows"), entry.get("bytes"), entry.get("sha256")))
    inside(record, key, [f.path for f in found])
    return found


@dataclass(frozen=True)
class CorpusManifest:
    """A corpus's manifest (``.refinery/manifest.json``), checked (``checked``): its rows, rejects and labels, the
    shards (``files``) and rejects' shards (``rejects``) in order, what it records of each file (``stats``) and the
    tables a stage attached (``attached``); ``body`` is the manifest as written (its other keys: inputs, config,
    command, the recorded field names)."""

    record: str
    body: dict
    stats: dict = field(default_factory=dict)      # {path: FileRecord}
    attached: dict = field(default_factory=dict)   # {key: FileRecord}

    @property
    def rows(self) -> int:
        return self.body["rows"]

    @property
    def rejected(self) -> int:
        return self.body["rejected"]

    @property
    def labels(self) -> dict:
        """Rows per label."""
        return self.body["labels"]

    @property
    def files(self) -> list[str]:
        return self.body["files"]

    @property
    def rejects(self) -> list[str]:
        return self.body["rejects"]

    @property
    def reject_reasons(self) -> dict:
        """Rejected rows per reason."""
        return self.body.get("reject_reasons") or {}

    @property
    def columns(self) -> list[str] | None:
        """Its shards' columns (None in a corpus written before they were recorded: its first shard's)."""
        return self.body.get("columns")

    @property
    def inputs(self) -> dict:
        """What it was made from: each input's fingerprint (``--mode skip`` compares them)."""
        return self.body.get("inputs") or {}

    @property
    def config(self) -> dict:
        return self.body.get("config") or {}

    @property
    def command(self) -> str:
        return self.body.get("command", "")

    @property
    def field_names(self) -> tuple[tuple[str, str] | None, bool]:
        """The names its input's preset gives the two texts (``msrp``'s sentence1/sentence2), where it records two
        plain names, and whether the input is a single text; (None, False) where it records none."""
        given = self.body.get(FIELD_NAMES)
        if isinstance(given, list) and len(given) == 2 and \
                all(isinstance(n, str) and re.fullmatch(r"[\w.-]{1,64}", n) for n in given):
            return tuple(given), bool(self.body.get(SINGLE_TEXT))
        return None, False

    @property
    def audit_prior(self):
        """Its lineage's prior rule as recorded (``core.stats.Prior.recorded`` reads it), or None."""
        return self.body.get(AUDIT_PRIOR)

    def recorded(self, path: str) -> FileRecord:
        """What the manifest records of the file ``path`` (a shard, a reject shard, an attached table): its
        ``FileRecord``, one of no rows, size or checksum where it records none (a corpus written before them)."""
        attached = {f.path: f for f in self.attached.values()}
        return self.stats.get(path) or attached.get(path) or FileRecord(path)

    def paths(self) -> list[str]:
        """Every file the manifest names (shards, rejects, attached tables), each once."""
        return [*self.files, *self.rejects, *(f.path for f in self.attached.values())]

    @classmethod
    def checked(cls, record: str, body) -> "CorpusManifest":
        """``body``, the manifest read at ``record``, where it fits the schema (a corpus written before ``rejects``,
        ``file_stats`` or sizes were recorded still does); else ``BadRecord`` naming the field."""
        fix = f"remove or rewrite {record}, or write the corpus again"
        if not isinstance(body, dict):
            raise BadRecord(f"{record}: not a corpus manifest (a JSON {type(body).__name__}); {fix}")
        _typed(record, body, _MANIFEST_FIELDS, ("format", "rows", "rejected", "labels", "files"), fix=fix)
        if body["format"] != CORPUS_FORMAT:
            raise BadRecord(f"{record}: 'format' is {_described(body['format'])}, not {CORPUS_FORMAT!r}: not a "
                            f"refinery corpus; {fix}")
        body = {**body, "files": inside(record, "files", body["files"]),
                "rejects": inside(record, "rejects", body.get("rejects", [])), "file_stats": body.get("file_stats", [])}
        if not isinstance(body["file_stats"], list):
            raise BadRecord(f"{record}: 'file_stats' is {_described(body['file_stats'])}, not a list of records of "
                            f"files; {fix}")
        stats = {f.path: f for f in _file_records(record, "file_stats", body["file_stats"], fix)}
        attached = dict(zip(body.get("attached", {}), _file_records(record, "attached", body.get("attached", {}),
                                                                     fix)))
        manifest = cls(record, body, stats, attached)
        inside(record, "files, rejects and attached", manifest.paths())   # no file is two of them
        for key, listed in (("rows", manifest.files), ("rejected", manifest.rejects)):
            rows = [stats[p].rows if p in stats else None for p in listed]
            if None not in rows and sum(rows) != body[key]:
                raise BadRecord(f"{record}: {key!r} is {body[key]:,}, but its files' rows in 'file_stats' sum to "
                                f"{sum(rows):,}; refinery did not write it as it is: {fix}")
        return manifest

    def check_links(self, folder: str) -> None:
        """On a local disk: no file the manifest names is reached through a symbolic link out of ``folder``."""
        links_inside(self.record, folder, {"files": self.files, "rejects": self.rejects, "file_stats": list(self.stats),
                                           "attached": [f.path for f in self.attached.values()]})


@dataclass(frozen=True)
class Marker:
    """Refinery's marker in a folder it published (``.refinery.json``; ``_refinery.json`` of refinery 0.1): the
    files it wrote there (``files``: what an overwrite may remove), the run that wrote them, and ``body`` as
    written (a finished command's fingerprint, a Hugging Face folder's stamp)."""

    name: str
    files: list
    body: dict

    @classmethod
    def checked(cls, record: str, name: str, body, earlier: bool = False) -> "Marker | None":
        """The marker ``body`` read at ``record`` (``name``), where it is refinery's (its format; refinery 0.1's:
        its writer) and fits the schema; None where it is another tool's file of that name; else ``BadRecord``."""
        if not isinstance(body, dict):
            return None
        ours = str(body.get("written_by", "")).startswith(EARLIER_WRITER) if earlier else \
            body.get("format") == MARKER_FORMAT
        if not ours:
            return None
        fix = f"remove or rewrite {record}"
        _typed(record, body, _MARKER_FIELDS, ("files",) if earlier else ("files", "run"), fix=fix)
        return cls(name, inside(record, "files", body["files"]), body)

    @property
    def run(self) -> str | None:
        """The run that wrote the folder (None in refinery 0.1's marker)."""
        return self.body.get("run")

    @property
    def emptied(self) -> bool:
        """Whether refinery emptied the folder of what it published (``unpublish``), leaving a user's file."""
        return bool(self.body.get("emptied"))

    @property
    def hf(self) -> "HfStamp | None":
        """A Hugging Face folder's stamp (the run that wrote it), None in any other folder."""
        stamp = self.body.get("hf")
        return None if stamp is None else HfStamp(stamp.get("rows", 0), stamp.get("rejected", 0),
                                                  stamp.get("splits") or {}, stamp.get("inputs") or {},
                                                  stamp.get("config") or {})

    def check_links(self, record: str, folder: str) -> None:
        """On a local disk: no file it lists is reached through a symbolic link out of ``folder``."""
        links_inside(record, folder, {"files": self.files})


@dataclass(frozen=True)
class HfStamp:
    """What refinery's marker in a Hugging Face ``save_to_disk`` folder records of the run that wrote it: its rows,
    its rejects (``rejects.parquet``), rows per split (none for a ``Dataset``), and its inputs' fingerprints and
    config (what ``--mode skip`` compares)."""

    rows: int
    rejected: int
    splits: dict
    inputs: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"rows": self.rows, "rejected": self.rejected, "splits": self.splits, "inputs": self.inputs,
                "config": self.config}


@functools.lru_cache(maxsize=4)
def marker_of(record: str, name: str, data: bytes, earlier: bool) -> Marker | None:
    """``Marker.checked`` of the marker whose bytes are ``data``, kept for the next read of the same bytes: a run
    reads its output's marker several times (the claim, the commit), and one listing a million files takes a
    second to parse and check."""
    return Marker.checked(record, name, parsed(record, data), earlier)


@dataclass(frozen=True)
class RunRecord:
    """A run's ``_SUCCESS`` in a folder refinery published: its run, its parts (the folders it published there) and,
    on an object store, ``root``, the run's own folder (``_runs/<run>``) that readers resolve the parts in;
    ``body`` as written (the stage's summary)."""

    parts: list
    root: str | None
    body: dict

    @classmethod
    def checked(cls, record: str, body) -> "RunRecord":
        fix = f"remove or rewrite {record}, or run the stage again"
        if not isinstance(body, dict):
            raise BadRecord(f"{record}: not a run's record (a JSON {type(body).__name__}); {fix}")
        _typed(record, body, _RUN_FIELDS, fix=fix)
        parts = inside(record, "parts", body.get("parts", []))
        nested = [p for p in parts if "/" in p]
        if nested:
            raise BadRecord(f"{record}: 'parts' entry {parts.index(nested[0]) + 1} {nested[0]!r} is not a folder of "
                            f"the run's own: {fix}")
        root = inside(record, "root", [body["root"]])[0] if "root" in body else None
        return cls(parts, root, {**body, "parts": parts})

    def check_links(self, record: str, folder: str) -> None:
        """On a local disk: no part (nor the root) is reached through a symbolic link out of ``folder``."""
        links_inside(record, folder, {"parts": self.parts, "root": [self.root] if self.root else []})
