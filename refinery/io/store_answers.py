"""What an object store answered within one run, asked once (issue 66: a verb on a one-shard corpus made 260
requests to write 14 files).

A run looks up the same things many times: each module that opens an input resolves its committed run
(``committed.committed_url``: the ``_SUCCESS`` of the folder and of the folders above it), its manifest and its
marker. Each lookup is a request to the store (20–50 ms on a real one), and a missing record is two (HEAD, then a
LIST to tell a folder). Within a run (``within_a_run``: a command, a stage's or a pipeline's run), the store's
answers to lookups — a HEAD, a LIST page, a small GET (``KEPT_BYTES`` at most), a "no such key" — are kept and given
again to the same request, so that a lookup costs one request per run, whoever asks.

What a kept answer may not hide:

- **the run's own writes**: a write, copy or removal of a key drops every kept answer it can change (the key's own,
  and each listing whose prefix holds it), before it is sent;
- **the folders other processes write** (``writing``: a store's run folder ``OUT/_runs/<run>``, where Ray's workers
  write the parts; a task's checkpoints): what the store says of them, or lists above them, is never kept; the
  output folder's own records (its ``_SUCCESS``, its marker), which the run's driver alone writes, are kept until
  it changes them;
- **another run's commit**: outside ``within_a_run`` nothing is kept (a notebook's next call, a later command), and
  a run reads the inputs as they were when it first looked at them, which is what its fingerprint says it read.

The S3 implementation (``s3_deadlines.S3WithDeadlines``) asks ``kept``/``keep``/``changed`` around each call;
other stores ask the store each time.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

KEPT_BYTES = 1 << 20        # a read's body is kept up to this size (records, Parquet footers), not shards' data
KEPT_TOTAL = 64 << 20       # bytes kept at most in one run (bodies, and ``ENTRY_BYTES`` a listed entry); then asked
ENTRY_BYTES = 256           # what one entry of a listing is counted as
LOOKUPS = frozenset({"head_object", "head_bucket", "list_objects_v2", "list_objects", "get_object"})
CHANGES = frozenset({"put_object", "copy_object", "delete_object", "delete_objects", "complete_multipart_upload",
                     "upload_part_copy"})


@dataclass(frozen=True)
class Request:
    """A lookup as it is kept: the store's endpoint, the method, the bucket/key it asks about (None for a bucket's
    own existence, which no write changes) and its arguments (``asked``, compared by their text)."""

    endpoint: str
    method: str
    where: str | None
    text: str
    asked: dict = field(compare=False, hash=False)


@dataclass
class Answers:
    """One run's kept answers (``Request`` → the answer: a dict, or ``FileNotFoundError``), indexed by the bucket/key
    each asks about (``at``: a change finds those it changes, a lookup the listings of its folders, without a scan
    of all); the folders other processes write, whose answers are never kept; ``size``, what is kept, within
    ``KEPT_TOTAL``; ``generation`` counts the changes, so that an answer asked before a change and answered after
    it is not kept."""

    kept: dict = field(default_factory=dict)
    at: dict = field(default_factory=dict)   # where → {Request}
    listed: dict = field(default_factory=dict)   # a listing's Request → {key: its entry}
    writing: set = field(default_factory=set)
    size: int = 0
    generation: int = 0
    depth: int = 0

    def add(self, key: "Request", answer) -> None:
        self.remove(key)
        self.kept[key] = answer
        self.size += _size(answer)
        self.at.setdefault(key.where, set()).add(key)
        if key.method == "list_objects_v2" and isinstance(answer, dict):
            self.listed[key] = {entry.get("Key"): entry for entry in answer.get("Contents", ())}

    def remove(self, key: "Request") -> None:
        if key in self.kept:
            self.size -= _size(self.kept.pop(key))
            self.at[key.where].discard(key)
            self.listed.pop(key, None)

    def under(self, path: str):
        """The kept requests about a bucket/key that ``path`` starts with (its own, its folders' listings)."""
        return [key for end in range(len(path) + 1) for key in self.at.get(path[:end], ())]


def _size(answer) -> int:
    """What an answer is counted as against ``KEPT_TOTAL``: its body's bytes, ``ENTRY_BYTES`` a listed entry."""
    if not isinstance(answer, dict):
        return ENTRY_BYTES
    entries = len(answer.get("Contents", ())) + len(answer.get("CommonPrefixes", ()))
    return len(answer.get("Body", b"")) + ENTRY_BYTES * (1 + entries)


_LOCK = threading.Lock()
_ACTIVE: Answers | None = None


@contextlib.contextmanager
def within_a_run():
    """Keep the store's answers to lookups until the outermost ``within_a_run`` ends (a pipeline's steps share it)."""
    global _ACTIVE
    with _LOCK:
        if _ACTIVE is None:
            _ACTIVE = Answers()
        _ACTIVE.depth += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE.depth -= 1
            if _ACTIVE.depth == 0:
                _ACTIVE = None


def writing(path: str) -> None:
    """Other processes write the folder ``path`` (``bucket/key``) during the run — Ray's workers the run's parts, a
    task's checkpoints —: what the store says of it is asked afresh each time, and what was kept is dropped."""
    with _LOCK:
        if _ACTIVE is not None:
            folder = path.strip("/")
            _ACTIVE.writing.add(folder)
            _drop(_ACTIVE, lambda key: _busy(key, folder) or _unshown(key, _ACTIVE.kept[key], folder))


def done_writing(path: str) -> None:
    """The folder ``path`` is written (its run's block ended, its parts are published): what the store says of it is
    kept again."""
    with _LOCK:
        if _ACTIVE is not None:
            _ACTIVE.writing.discard(path.strip("/"))


def request(endpoint: str, method: str, args: tuple, kwargs: dict) -> Request | None:
    """The ``Request`` a lookup is kept under; None where it is not a lookup, or not one to keep now."""
    if method not in LOOKUPS or _ACTIVE is None:
        return None
    text = repr(args) + repr(sorted(kwargs.items(), key=lambda item: item[0]))
    if method == "head_bucket":   # a bucket stays what it is whatever the run writes in it
        return Request(endpoint, method, None, text, kwargs)
    found = Request(endpoint, method, _where(kwargs), text, kwargs)
    return None if any(_busy(found, folder) for folder in _ACTIVE.writing) else found


def kept(key: Request | None):
    """The answer kept for ``key`` (the caller copies it), the ``FileNotFoundError`` it was or that a kept listing
    shows (``_listed_absent``), or None where none is kept."""
    if key is None:
        return None
    with _LOCK:
        answer = _ACTIVE.kept.get(key) if _ACTIVE is not None else None
        if answer is None and _ACTIVE is not None and key.method == "head_object":
            answer = _listed_entry(_ACTIVE, key)
        absent = answer is None and _ACTIVE is not None and _listed_absent(_ACTIVE, key)
    if absent:
        answer = FileNotFoundError(key.where)
    if isinstance(answer, FileNotFoundError):
        raise FileNotFoundError(*answer.args)
    return answer


def _listings_of(active: Answers, key: Request, complete: bool):
    """The kept listings of the folders above ``key``'s object (its bucket's, each folder's on its way) on its
    store, each whole where ``complete`` (not a page of several, nor cut at its size: what it lacks is absent):
    (the listing's request, its answer, the object's key, the key below the listing's prefix)."""
    bucket, _, name = key.where.partition("/")
    folders = [f"{bucket}/{name[:end + 1]}" for end in range(len(name)) if name[end] == "/"]
    for listed in [listed for where in (f"{bucket}/", *folders) for listed in active.at.get(where, ())]:
        listing, asked = active.kept[listed], listed.asked
        prefix = asked.get("Prefix", "")
        if listed.endpoint != key.endpoint or listed.method != "list_objects_v2" or not isinstance(listing, dict) \
                or asked.get("Bucket") != bucket or not name.startswith(prefix):
            continue
        if complete and (listing.get("IsTruncated") or asked.get("ContinuationToken") or asked.get("StartAfter")
                         or asked.get("Delimiter") not in (None, "/") or (asked.get("MaxKeys") is not None and len(
                             listing.get("Contents", ())) + len(listing.get("CommonPrefixes", ())) >= int(
                             asked["MaxKeys"]))):
            continue
        yield listed, listing, name, name[len(prefix):]


def _listed_absent(active: Answers, key: Request) -> bool:
    """Whether a lookup of one whole object (a HEAD, or a GET without a range or version) asks for a key that a
    kept, complete listing of its folder does not hold: the store said so already (a run's ``_SUCCESS`` before it is
    written, a record absent from an input)."""
    if key.method not in ("head_object", "get_object") or {"Range", "VersionId"} & set(key.asked):
        return False
    for listed, listing, name, rest in _listings_of(active, key, complete=True):
        if listed.asked.get("Delimiter") and "/" in rest:   # below a folder in it: absent where it shows none such
            folder = listed.asked.get("Prefix", "") + rest.split("/", 1)[0] + "/"
            if all(entry.get("Prefix") != folder for entry in listing.get("CommonPrefixes", ())):
                return True
        elif name not in active.listed[listed]:
            return True
    return False


def _listed_entry(active: Answers, key: Request) -> dict | None:
    """A HEAD of an object that a kept listing shows, answered as the store answers it (its size, entity tag, time
    and class are the listing's): a corpus's listing, made to check its shards' sizes, answers the lookup that
    opening each shard makes."""
    if set(key.asked) - {"Bucket", "Key"}:
        return None
    for listed, _, name, _ in _listings_of(active, key, complete=False):
        entry = active.listed[listed].get(name)
        if entry is not None and "ETag" in entry and "Size" in entry:
            return {"ContentLength": entry["Size"], "ETag": entry["ETag"],
                    "LastModified": entry.get("LastModified", ""), "StorageClass": entry.get("StorageClass")}
    return None


def read_whole(endpoint: str, bucket: str, key: str) -> bool:
    """Whether the run read or wrote the whole object ``bucket/key`` and keeps it: it is there."""
    read = request(endpoint, "get_object", (), {"Bucket": bucket, "Key": key})
    with _LOCK:
        return read is not None and _ACTIVE is not None and isinstance(_ACTIVE.kept.get(read), dict)


def generation() -> int:
    """The count of changes so far (``keep`` keeps an answer only where none came since it was asked)."""
    return _ACTIVE.generation if _ACTIVE is not None else 0


def keep(key: Request | None, answer, asked_at: int) -> None:
    """Keep ``answer`` (a dict without a stream, or a ``FileNotFoundError``) for ``key``, where the run still keeps
    answers, no change came since ``asked_at``, and its body fits in ``KEPT_TOTAL``."""
    if key is None:
        return
    with _LOCK:
        active = _ACTIVE
        if active is None or active.generation != asked_at or active.size + _size(answer) > KEPT_TOTAL or any(
                _unshown(key, answer, folder) for folder in active.writing):
            return
        active.add(key, answer)


def changed(method: str, kwargs: dict) -> None:
    """A request that changes the store: drop every kept answer it can change (a key's own, a listing holding it),
    but a listing of one folder (``Delimiter``) that a new key under a folder it shows already cannot change."""
    if method not in CHANGES:
        return
    bucket = kwargs.get("Bucket", "")
    keys = [item.get("Key", "") for item in (kwargs.get("Delete") or {}).get("Objects", [])] or [kwargs.get("Key", "")]
    changed_paths = [f"{bucket}/{key}" for key in keys]
    adds = method != "delete_object" and method != "delete_objects"
    with _LOCK:
        if _ACTIVE is not None:
            _ACTIVE.generation += 1
            for path in changed_paths:
                for key in _ACTIVE.under(path):
                    if not (adds and _shows_folder_of(_ACTIVE.kept[key], key, path)):
                        _ACTIVE.remove(key)


def _shows_folder_of(listing, key: Request, path: str) -> bool:
    """Whether ``listing`` (a kept answer to ``key``) lists one folder and, once a new key ``path`` (bucket/key) is
    written below a folder in it, shows that folder: it showed it already, or it is added to the listing as the
    store would list it now."""
    prefix = f"{key.asked.get('Bucket', '')}/{key.asked.get('Prefix', '')}"
    rest = path[len(prefix):]
    if key.method != "list_objects_v2" or key.asked.get("Delimiter") != "/" or not isinstance(listing, dict) \
            or "/" not in rest or listing.get("IsTruncated") or key.asked.get("MaxKeys") is not None:
        return False
    folder = key.asked.get("Prefix", "") + rest.split("/", 1)[0] + "/"
    shown = listing.setdefault("CommonPrefixes", [])
    if all(entry.get("Prefix") != folder for entry in shown):
        shown.append({"Prefix": folder})
        shown.sort(key=lambda entry: entry.get("Prefix", ""))
        listing["KeyCount"] = listing.get("KeyCount", 0) + 1
    return True


def written(endpoint: str, kwargs: dict) -> None:
    """A write of a whole small object succeeded: a read of it within the run is answered with what was written
    (the records a run writes and reads back: its marker, its ``_SUCCESS``)."""
    body = kwargs.get("Body")
    if not isinstance(body, (bytes, bytearray, memoryview)) or len(body) > KEPT_BYTES:
        return
    read = request(endpoint, "get_object", (), {"Bucket": kwargs.get("Bucket"), "Key": kwargs.get("Key")})
    keep(read, {"Body": bytes(body), "ContentLength": len(body)}, generation())


def _where(kwargs: dict) -> str:
    """The bucket/key (or bucket/prefix) a request asks about."""
    return f"{kwargs.get('Bucket', '')}/{kwargs.get('Key', kwargs.get('Prefix', ''))}"


def _busy(key: "Request", folder: str) -> bool:
    """Whether ``key`` asks about the folder ``folder`` that other processes write: a key in it, a listing in it, or
    a listing of all keys below a folder above it (one of a single folder above it changes only where the folder
    holding ``folder`` is new in it: ``_unshown``)."""
    where = key.where
    return where == folder or where.startswith(folder + "/") or (
        key.method.startswith("list_") and folder.startswith(where) and key.asked.get("Delimiter") != "/")


def _unshown(key: "Request", answer, folder: str) -> bool:
    """Whether ``answer``, a kept listing of one folder above ``folder``, does not show the folder in it that holds
    ``folder``: other processes' first file there would change it."""
    if not key.method.startswith("list_") or key.asked.get("Delimiter") != "/" or not folder.startswith(key.where):
        return False
    shown = key.asked.get("Prefix", "") + folder[len(key.where):].split("/", 1)[0] + "/"
    return not isinstance(answer, dict) or all(entry.get("Prefix") != shown
                                               for entry in answer.get("CommonPrefixes", []))


def _drop(active: Answers, affected) -> None:
    for key in [key for key in active.kept if key.where is not None and affected(key)]:
        active.remove(key)
