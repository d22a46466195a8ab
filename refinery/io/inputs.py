"""The files an input names (a file, a folder of shards, a glob, a Hugging Face ``save_to_disk`` folder;
any fsspec URL) and the format each is read in."""
from __future__ import annotations

import json
import logging
import posixpath
import re

from refinery.io.schema import Mapping
from refinery.io.location import MissingInput, check_bucket, get_fs, on_store
from refinery.io.ownership import EARLIER_MARKER, OWNER_MARKER, RUN_MARKER
from refinery.messages import Refusal

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
           ".txt": "tsv", ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow",
           ".ipc": "arrow"}
HF_METADATA = ("dataset_dict.json", "dataset_info.json", "state.json")  # Hugging Face save_to_disk: never data
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")  # read through fsspec's compression="infer" (.zst: zstandard)
# what releases ship beside their data, whatever the extension: documentation, licences, checksums
NOT_DATA = re.compile(r"(readme|licen[cs]e|copying|notice|authors|contributors|citation|changelog|changes|"
                      r"checksums?|(md5|sha1|sha256|sha512|b2)sums?)([-_. ].*)?|.*\.(md|markdown|rst|html?|pdf|"
                      r"sha1|sha256|sha512|md5|sig|asc)|thumbs\.db|desktop\.ini", re.IGNORECASE)
NOTICES_SHOWN = 8   # the skipped files a notice names
log = logging.getLogger("refinery.inputs")
_noticed: set[str] = set()   # the folders whose skipped files were already named


def data_extension(path: str) -> str:
    """The format extension of ``path`` once a compression suffix is removed (``x.jsonl.zst`` → ``.jsonl``)."""
    name = path.lower()
    for suffix in COMPRESSIONS:
        name = name.removesuffix(suffix)
    return posixpath.splitext(name)[1]


def detect_format(path: str, mapping: Mapping | None) -> str:
    """The format the extension names, else the mapping's (a preset's release without a known extension)."""
    ext = data_extension(path)
    if ext in FORMATS:
        return FORMATS[ext]
    if mapping and mapping.format:
        return mapping.format
    raise Refusal(f"{path}: cannot tell the format from the extension {ext!r}; "
                  f"use one of {', '.join(FORMATS)} (optionally {', '.join(COMPRESSIONS)})", code="bad-input")


def is_data_name(name: str) -> bool:
    """Whether a file found in a folder or by a glob may be data by its name: not hidden (``.DS_Store``), not
    another tool's bookkeeping (``_SUCCESS``), not what releases ship beside the data (``readme.txt``,
    ``LICENSE``, ``SHA256SUMS``, ``*.md``, ``*.pdf``, ``*.html``)."""
    return not name.startswith((".", "_")) and not NOT_DATA.fullmatch(name)


def expand_paths(inputs, storage_options=None) -> list[str]:
    """Files named by each input: a file, a folder of shards, or a glob (any fsspec URL).

    In a folder each file is read by its extension; a Hugging Face ``save_to_disk`` dataset gives its
    Arrow files in the order its ``state.json`` lists them, and its JSON metadata is never data. Files
    that are not data (``is_data_name``) are skipped, in a folder or a glob's matches, and named once in a
    notice; a file named on its own is always read."""
    out: list[str] = []
    for url in inputs:
        fs, path = get_fs(url, storage_options)
        skipped: list[str] = []
        with on_store(url, "listing the input"):
            matches = _matches(fs, path, skipped)
            if not matches:
                check_bucket(url, fs, path)
        _notice(url, skipped)
        if not matches:
            raise MissingInput(f"no input files at {url}" + (f" (only {_listed(skipped)}, which are not data)"
                                                             if skipped else ""))
        out.extend(_as_url(fs, url, m) for m in matches)
    return out


def _matches(fs, path: str, skipped: list[str]) -> list[str]:
    """The data files at ``path``: a glob's matches, a folder's files, or the file itself; what is not data
    goes to ``skipped``."""
    if any(ch in path for ch in "*?["):
        found = fs.glob(path, detail=True)
        matches = []
        for m in sorted(found):
            if found[m].get("type") == "directory":
                if not posixpath.basename(m).startswith((".", "_")):   # .git, _temporary: never data
                    matches += _folder_files(fs, m, skipped)
            elif is_data_name(posixpath.basename(m)):
                matches.append(m)
            else:
                skipped.append(posixpath.basename(m))
        return matches
    if fs.isdir(path):
        return _folder_files(fs, path, skipped)
    return [path] if fs.exists(path) else []


def _notice(url: str, skipped: list[str]) -> None:
    """Name, once per input, the files of a folder or glob that are not read as data."""
    if skipped and url not in _noticed:
        _noticed.add(url)
        log.warning(f"notice: {url}: skipped {len(skipped)} file{'s' if len(skipped) > 1 else ''} that "
                    f"{'are' if len(skipped) > 1 else 'is'} not data: {_listed(skipped)}")


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:NOTICES_SHOWN])
    return shown + (f" and {len(names) - NOTICES_SHOWN:,} more" if len(names) > NOTICES_SHOWN else "")


def hf_splits(url: str, storage_options=None) -> dict[str, list[str]]:
    """{split: its Arrow files} of a Hugging Face ``DatasetDict.save_to_disk`` folder, in the order of its
    ``dataset_dict.json``; {} for any other input."""
    fs, path = get_fs(url, storage_options)
    meta = posixpath.join(path, "dataset_dict.json")
    if any(ch in path for ch in "*?[") or not fs.isfile(meta):
        return {}
    splits = _json_file(fs, meta).get("splits") or sorted(
        posixpath.basename(posixpath.dirname(p)) for p in fs.glob(posixpath.join(path, "*", "state.json")))
    return {split: [_as_url(fs, url, f) for f in _hf_data_files(fs, posixpath.join(path, split))]
            for split in splits}


BOOKKEEPING = {OWNER_MARKER, EARLIER_MARKER, RUN_MARKER}   # refinery's and Spark's markers: not worth a notice


def _folder_files(fs, root: str, skipped: list[str]) -> list[str]:
    """The data files under ``root`` in name order, a Hugging Face dataset's in its own order; the others'
    paths (relative to ``root``) are added to ``skipped``, but for what lies in hidden or ``_`` folders
    (``.git``, ``_temporary``, a corpus's ``.refinery``) and a Hugging Face dataset's metadata."""
    files = sorted(fs.find(root))
    datasets = {posixpath.dirname(f) for f in files if posixpath.basename(f) == "state.json"}
    out, listed = [], set()
    for f in files:
        folder, name = posixpath.split(f)
        relative = posixpath.relpath(f, root)
        if folder in datasets:
            if folder not in listed:
                listed.add(folder)
                out.extend(_hf_data_files(fs, folder))
        elif any(part.startswith((".", "_")) for part in relative.split("/")[:-1]) or name in HF_METADATA:
            continue
        elif data_extension(f) in FORMATS and is_data_name(name):
            out.append(f)
        elif name not in BOOKKEEPING:
            skipped.append(relative)
    return out


def _hf_data_files(fs, folder: str) -> list[str]:
    """The Arrow files of a Hugging Face ``Dataset.save_to_disk`` folder, as its ``state.json`` lists them."""
    state = _json_file(fs, posixpath.join(folder, "state.json"))
    return [posixpath.join(folder, f["filename"]) for f in state.get("_data_files", [])]


def _json_file(fs, path: str) -> dict:
    try:
        return json.loads(fs.cat_file(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise Refusal(f"{path}: not the JSON a Hugging Face save_to_disk folder holds ({e})",
                      code="bad-input") from None


def _as_url(fs, url: str, path: str) -> str:
    return fs.unstrip_protocol(path) if "://" in url else path

