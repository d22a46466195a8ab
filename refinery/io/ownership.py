"""What refinery wrote, and nothing else: the marker (``.refinery.json``) in every folder it publishes, the
claim on an output folder before the first write, and the clean-up of a failed run's folder.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import time
import uuid

from refinery import __version__
from refinery.io.location import (CLEANUP_SECONDS, ForeignOutput, check_bucket, folder_entries, get_fs, is_local,
                                  join, on_store, with_deadline)
from refinery.io.records import MARKER_FORMAT, HfStamp, Marker, RunRecord, manifest_path, marker_of, parsed, record_bytes
from refinery.messages import CommandLineOnly, Message, Refusal, Setting


OWNER_MARKER = ".refinery.json"   # in every folder refinery publishes: the files it wrote there, and the run
EARLIER_MARKER = "_refinery.json"  # the marker of refinery 0.1 (readers of a data folder took it for data)
RUN_MARKER = "_SUCCESS"           # a multi-part run's folder: written last, when every part is finished
RESUMABLE = ("_checkpoints", "runs", "checkpoints")   # finished work a rerun continues from (io.checkpoints): kept
# by every commit; runs/ (compare's runs) and checkpoints/ (IBADR's iterations) stay in the finished output too
STAGE_CORPUS = "corpus"   # the part of a stage's folder that holds the corpus it made (upsample, weights, …)


class OutputOverlapsInput(Refusal):
    """``--out`` is, holds or lies inside an input: refused unless the run replaces a corpus in place."""

    code = "output-overlaps-input"


RUN_ID_IN_NAME = re.compile(r"-\d{8}T\d{6}-[0-9a-f]{8}(?=\.|$)")   # a run's id in an object-store file's name


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def _marker(fs, path: str) -> Marker | None:
    """Refinery's marker in folder ``path`` (this version's, else refinery 0.1's), checked (``Marker``: its files
    inside the folder, each once, none through a link out of it), or None where the folder has none."""
    for name in (OWNER_MARKER, EARLIER_MARKER):
        record = join(path, name)
        data = record_bytes(fs, path, name, record, f"reading {name}")
        marker = None if data is None else marker_of(record, name, data, name == EARLIER_MARKER)
        if marker is not None:
            if is_local(fs):
                marker.check_links(record, path)
            return marker
    return None


def marked(fs, path: str) -> bool:
    """Whether folder ``path`` holds a file of the name of refinery's marker: a folder refinery published, whose
    ``_SUCCESS`` is refinery's record (other tools, Spark and Hadoop, write a ``_SUCCESS`` of their own)."""
    return any(fs.isfile(join(path, name)) for name in (OWNER_MARKER, EARLIER_MARKER))


def claim_output(out: str, storage_options: dict | None = None, setting: str = "out") -> str:
    """Whether refinery may write ``out``: ``"new"`` (absent or an empty folder) or ``"ours"`` (a folder whose
    ``.refinery.json`` is refinery's marker, ``Marker``). Anything else raises ``ForeignOutput`` naming a
    file found there (and ``setting``, the name of the setting that gave ``out``): refinery never deletes or replaces
    what it did not write. On a local disk the markers of the folders inside a folder of refinery's (its parts:
    kept/, report/) are checked too (``Marker``): an overwrite reads them to tell refinery's files from the user's,
    and a crafted one is refused now, before the run, not at its commit."""
    fs, path = get_fs(out, storage_options)
    fs.invalidate_cache(path)
    with on_store(out, "looking at the output folder"):
        is_file, entries = _file_or_entries(fs, path)
        if not is_file and not entries:   # a folder with files in it is in a bucket that exists
            check_bucket(out, fs, path)
    ours = bool({OWNER_MARKER, EARLIER_MARKER} & set(entries)) and _marker(fs, path) is not None
    if is_file:
        raise ForeignOutput(Message(Setting(setting, out), " is a file, not a folder; give a folder for refinery's "
                                    "outputs"))
    if not entries:
        return "new"
    if ours:
        if is_local(fs):
            _check_markers_below(fs, path)
        return "ours"
    shown = ", ".join(sorted(entries)[:4]) + (" …" if len(entries) > 4 else "")
    raise ForeignOutput(Message(Setting(setting, out), f" already holds files refinery did not write ({shown}); "
                                "refinery never deletes or replaces them: give a new or empty folder (e.g. "
                                f"{join(out.rstrip('/'), 'refinery-out')})"))


def _file_or_entries(fs, path: str) -> tuple[bool, list[str]]:
    """Whether ``path`` is a file, and the names in it where it is a folder; on an object store in one request
    where it is a folder (its listing), two where it is absent or a file (and the listing of its parent)."""
    if is_local(fs):
        is_file = fs.isfile(path)
        return is_file, [] if is_file or not fs.exists(path) else folder_entries(fs, path)
    try:
        found = fs.ls(path, detail=True)   # a folder's names; a file: itself
    except FileNotFoundError:
        return False, []
    if len(found) == 1 and found[0]["name"].rstrip("/") == path.rstrip("/") and found[0]["type"] == "file":
        return True, []
    return False, [posixpath.basename(entry["name"].rstrip("/")) for entry in found]


def _check_markers_below(fs, path: str) -> None:
    """Refuse (``BadRecord``) a marker of refinery's in a folder under the local folder ``path`` (links not
    followed) that does not fit its schema."""
    for root, _, names in os.walk(path):
        if root != path and {OWNER_MARKER, EARLIER_MARKER} & set(names):
            _marker(fs, root)


def claim_folder(out: str, storage_options: dict | None = None, files=(OWNER_MARKER,)) -> str:
    """``claim_output``, then a new folder is made with refinery's marker (listing ``files``) in it; a folder
    of refinery 0.1 gets this version's marker in place of its ``_refinery.json``."""
    claim = claim_output(out, storage_options)
    fs, path = get_fs(out, storage_options)
    earlier = None if claim == "new" else _marker(fs, path)
    if earlier is None or earlier.name == EARLIER_MARKER:
        listed = sorted({*files, *(earlier.files if earlier else ())} - {EARLIER_MARKER})
        with on_store(out, f"writing {OWNER_MARKER}"):
            fs.makedirs(path, exist_ok=True)
            with fs.open(join(path, OWNER_MARKER), "wb") as fh:
                fh.write(marker_body(listed, run=new_run_id()).encode())
            if earlier is not None:
                fs.rm(join(path, EARLIER_MARKER))
    return claim


def owned_files(fs, path: str) -> set[str]:
    """The files (paths relative to ``path``) that refinery's marker in ``path`` says it wrote."""
    found = _marker(fs, path)
    return {found.name, *found.files} if found else set()


def marker_body(files, **extra) -> str:
    """The text of refinery's marker listing ``files``, with ``extra`` keys (the run id, a fingerprint)."""
    return json.dumps({"format": MARKER_FORMAT, "written_by": f"refinery {__version__}", "files": sorted(files),
                       **extra}, indent=1)


def published_run(out: str, storage_options: dict | None = None) -> str | None:
    """The run id of what a run published in ``out``; None where refinery published nothing there (or emptied it,
    ``unpublish``, leaving a user's file)."""
    found = read_marker(out, storage_options)
    return None if found is None or found.emptied else found.run


def run_record(folder: str, storage_options: dict | None = None) -> RunRecord | None:
    """The ``_SUCCESS`` of a run's folder (its commit's record, read afresh: it may have moved since a listing was
    cached), checked (``RunRecord``: cut short, of the wrong types, or naming a part outside the folder, twice or
    through a link out of it, it is refused), or None where there is none, or where the folder is not refinery's
    (``marked``: another tool's ``_SUCCESS``)."""
    fs, path = get_fs(folder, storage_options)
    record = join(folder.rstrip("/"), RUN_MARKER)
    with on_store(folder, f"reading {RUN_MARKER}"):
        fs.invalidate_cache(join(path, RUN_MARKER))
    data = record_bytes(fs, path, RUN_MARKER, record, f"reading {RUN_MARKER}")
    with on_store(folder, f"reading {RUN_MARKER}"):
        if data is None or not marked(fs, path):
            return None
    found = RunRecord.checked(record, parsed(record, data))
    if is_local(fs):
        found.check_links(record, path)
    return found


def holds_corpus(folder: str, storage_options: dict | None = None) -> bool:
    """Whether ``folder`` holds a corpus manifest of its own (``records.manifest_path``: on a store, the one read
    that opening the corpus makes next, answered again within a run)."""
    fs, path = get_fs(folder, storage_options)
    return manifest_path(fs, path) is not None


def read_marker(out: str, storage_options: dict | None = None) -> Marker | None:
    """Refinery's marker in ``out`` (``Marker``), None where there is none."""
    fs, path = get_fs(out, storage_options)
    return _marker(fs, path)


def stamp_marker(out: str, stamp: HfStamp, storage_options: dict | None = None) -> None:
    """Add a Hugging Face folder's ``stamp`` (the finished command's rows and fingerprint) to refinery's marker in
    ``out``."""
    fs, path = get_fs(out, storage_options)
    found = read_marker(out, storage_options)
    body = {"run": new_run_id(), **(found.body if found else {}), "hf": stamp.to_json()}
    files = body.pop("files", [OWNER_MARKER])
    body.pop("written_by", None)
    body.pop("format", None)
    with on_store(out, f"writing {OWNER_MARKER}"), fs.open(join(path, OWNER_MARKER), "wb") as fh:
        fh.write(marker_body(files, **body).encode())


def _location(url: str) -> tuple[str, str]:
    """(protocol, absolute normalized path) of a path or URL; a glob keeps its pattern below its folder."""
    protocol, sep, rest = url.partition("://")
    if not sep:
        protocol, rest = "file", url
    magic = re.search(r"[*?[]", rest)
    folder = rest[:magic.start()].rpartition("/")[0] if magic else rest
    pattern = rest[len(folder):].lstrip("/") if magic else ""
    if protocol == "file":
        folder = os.path.realpath(os.path.expanduser(folder or "."))
    else:
        folder = posixpath.normpath("/" + folder.strip("/"))
    return protocol, posixpath.join(folder, pattern) if pattern else folder


def _relation(a: str, b: str) -> str | None:
    """How location ``a`` lies to ``b`` (``_location`` paths of one store): "is", "holds" (b inside a), "inside"
    (a inside b), or None (apart)."""
    if a == b:
        return "is"
    if b.startswith(a.rstrip("/") + "/"):
        return "holds"
    return "inside" if a.startswith(b.rstrip("/") + "/") else None


def check_folders_apart(folder: Setting, out: str) -> None:
    """Refuse the folder a setting gives (a saved model's, say: ``folder``, its value the folder) where it is,
    holds or lies inside ``out``: writing one would replace or mix with the other."""
    (a_protocol, a), (b_protocol, b) = _location(folder.value), _location(out)
    if a_protocol == b_protocol and _relation(a, b):
        raise OutputOverlapsInput(folder, " and ", Setting("out", out), " overlap: give ",
                                  Setting(folder.name, option=folder.option), " a folder of its own, outside ",
                                  Setting("out"))


def check_out_apart(out: str, inputs, replaces: str | None = None, storage_options: dict | None = None,
                    one_stage: bool = True) -> None:
    """Refuse an ``out`` that is, holds or lies inside one of ``inputs``: writing there would replace or mix
    with the data the run reads. ``replaces`` (``--in-place``) is the part of ``out`` the run publishes its
    corpus as (``OUT/kept``, ``OUT/corpus``): an input that is that part of a folder refinery wrote is allowed,
    and the run replaces it, atomically, once it has read it. ``one_stage``: a stage's run, which may rerun in
    place (a pipeline's may not: its refusal names no ``--in-place``)."""
    o_protocol, o_path = _location(out)
    for given in inputs:
        i_protocol, i_path = _location(str(given))
        if i_protocol != o_protocol:
            continue
        if replaces is not None and i_path == _location(replaces)[1] and claim_output(out, storage_options) == "ours":
            continue
        in_place = Setting("in_place")   # the command line's alone: the API and a pipeline rerun in place nowhere
        if replaces is not None:
            hint = CommandLineOnly(("; ", in_place, " reruns a stage on its own output: ", Setting("out", out),
                                    f" for the input {replaces}"))
        else:   # a part of an earlier output (OUT/kept): the user may mean to run the stage on it again
            hint = CommandLineOnly(("; or ", in_place, " to rerun a stage on its own output, replacing it")
                                   if posixpath.dirname(i_path) == o_path and one_stage else ())
        relation = _relation(o_path, i_path)
        if relation == "is":
            raise OutputOverlapsInput(Setting("out", out), f" is the input {given}: refinery would replace the data "
                                      "it reads; give another folder", hint)
        if relation == "holds":
            raise OutputOverlapsInput(Setting("out", out), f" holds the input {given}: refinery would write among "
                                      "the data it reads; give a folder outside it", hint)
        if relation == "inside":
            raise OutputOverlapsInput(Setting("out", out), f" lies inside the input {given}: refinery would write "
                                      "into the data it reads; give a folder outside it")


def remove_present(fs, path: str, names) -> None:
    """Remove those of ``names`` (paths relative to folder ``path``) that are there, a folder whole (``_runs/``). One
    listing of the folder first: a name whose first part is not in it is not looked for (a marker may list a million
    files that are gone)."""
    listed = set(folder_entries(fs, path))
    present = sorted(join(path, f) for f in names if f.split("/")[0] in listed and fs.exists(join(path, f)))
    if present:
        fs.rm(present, recursive=True)


def unpublish(folder: str, storage_options: dict | None = None) -> None:
    """Remove what refinery published in ``folder``: the files its marker lists, then the marker. On a local disk
    the folders left empty go too. A file refinery did not write stays, and so does the folder, marked as
    refinery's still (a marker listing itself alone, no run): the next run may write there again."""
    fs, path = get_fs(folder, storage_options)
    found = _marker(fs, path)
    if found is None:
        return
    with on_store(folder, "removing an earlier run's output"):
        remove_present(fs, path, set(found.files) - {found.name})
        fs.rm(join(path, found.name))
        if is_local(fs) and os.path.isdir(path):   # folders left empty go, the folder itself too if it is
            for root, _, _ in sorted(os.walk(path), key=lambda walked: -len(walked[0])):
                if not os.listdir(root):
                    os.rmdir(root)
        if folder_entries(fs, path):   # a file of the user's: the folder stays, refinery's still
            fs.pipe_file(join(path, OWNER_MARKER), marker_body([OWNER_MARKER], run=new_run_id(), emptied=True).encode())


def unpublish_run(folder: str, storage_options: dict | None = None) -> None:
    """A folder refinery published unpublished (``unpublish``), and, where it is a run's of several parts, its
    ``_SUCCESS`` first (it is no finished run from then on) and each part."""
    fs, path = get_fs(folder, storage_options)
    with on_store(folder, f"removing {RUN_MARKER}"):
        if fs.exists(join(path, RUN_MARKER)):
            fs.rm(join(path, RUN_MARKER))
        parts = [name for name in folder_entries(fs, path)
                 if any(fs.exists(join(path, name, marker)) for marker in (OWNER_MARKER, EARLIER_MARKER))]
    for part in parts:
        unpublish_run(join(folder, part), storage_options)
    unpublish(folder, storage_options)


def made_folder(out: str, storage_options: dict | None = None) -> str | None:
    """The outermost folder that writing ``out`` would create (``out`` itself or an absent parent on a local
    disk), or None where ``out`` exists: what a failed run removes again."""
    fs, path = get_fs(out, storage_options)
    fs.invalidate_cache(path)
    with on_store(out, "looking at the output folder"):
        if not is_local(fs):   # the claim's own lookup (``store_answers``)
            is_file, entries = _file_or_entries(fs, path)
            return None if is_file or entries else path
        if fs.exists(path):
            return None
        top = path
        while os.path.dirname(top) != top and not os.path.exists(os.path.dirname(top)):
            top = os.path.dirname(top)
        return top


def remove_failed_output(out: str, made: str | None, storage_options: dict | None = None,
                         keep_finished: bool = False) -> None:
    """After a failed run into ``out``, remove what it left: the folder ``made`` that it created (or, where
    ``out`` was an empty folder already, what it put in it), unless the run kept finished work to continue
    from (``RESUMABLE``: checkpoints, compare's finished runs), or with ``keep_finished`` anything beside
    refinery's marker (a pipeline's finished steps). Best effort within ``CLEANUP_SECONDS``; never touches a
    folder refinery did not make or find empty."""
    fs, path = get_fs(out, storage_options)

    def remove():
        entries = folder_entries(fs, path)
        if set(RESUMABLE) & set(entries) or (keep_finished and set(entries) - {OWNER_MARKER}):
            return
        if made is not None:
            fs.rm(made, recursive=True)
        else:
            for name in entries:
                fs.rm(join(path, name), recursive=True)

    with_deadline(CLEANUP_SECONDS, remove)
