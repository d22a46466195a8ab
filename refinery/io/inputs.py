"""The files an input names (a file, a folder of shards, a glob, a Hugging Face ``save_to_disk`` folder;
any fsspec URL) and the format each is read in."""
from __future__ import annotations

import json
import posixpath

from refinery.io.schema import Mapping
from refinery.io.storage import get_fs

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
           ".txt": "tsv", ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow",
           ".ipc": "arrow"}
HF_METADATA = ("dataset_dict.json", "dataset_info.json", "state.json")  # Hugging Face save_to_disk: never data
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")  # read through fsspec's compression="infer" (.zst: zstandard)


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
    raise ValueError(f"{path}: cannot tell the format from the extension {ext!r}; "
                     f"use one of {', '.join(FORMATS)} (optionally {', '.join(COMPRESSIONS)})")


def expand_paths(inputs, storage_options=None) -> list[str]:
    """Files named by each input: a file, a folder of shards, or a glob (any fsspec URL).

    In a folder each file is read by its extension; a Hugging Face ``save_to_disk`` dataset gives its
    Arrow files in the order its ``state.json`` lists them, and its JSON metadata is never data."""
    out: list[str] = []
    for url in inputs:
        fs, path = get_fs(url, storage_options)
        if any(ch in path for ch in "*?["):
            found = fs.glob(path, detail=True)
            matches = [f for m in sorted(found) for f in
                       (_folder_files(fs, m) if found[m].get("type") == "directory" else [m])]
        elif fs.isdir(path):
            matches = _folder_files(fs, path)
        else:
            matches = [path] if fs.exists(path) else []
        if not matches:
            raise FileNotFoundError(f"no input files at {url}")
        out.extend(_as_url(fs, url, m) for m in matches)
    return out


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


def _folder_files(fs, root: str) -> list[str]:
    """The data files under ``root`` in name order, a Hugging Face dataset's in its own order."""
    files = sorted(fs.find(root))
    datasets = {posixpath.dirname(f) for f in files if posixpath.basename(f) == "state.json"}
    out, listed = [], set()
    for f in files:
        folder, name = posixpath.split(f)
        if folder in datasets:
            if folder not in listed:
                listed.add(folder)
                out.extend(_hf_data_files(fs, folder))
        elif data_extension(f) in FORMATS and name not in HF_METADATA and not name.startswith((".", "_")):
            out.append(f)
    return out


def _hf_data_files(fs, folder: str) -> list[str]:
    """The Arrow files of a Hugging Face ``Dataset.save_to_disk`` folder, as its ``state.json`` lists them."""
    state = _json_file(fs, posixpath.join(folder, "state.json"))
    return [posixpath.join(folder, f["filename"]) for f in state.get("_data_files", [])]


def _json_file(fs, path: str) -> dict:
    try:
        return json.loads(fs.cat_file(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not the JSON a Hugging Face save_to_disk folder holds ({e})") from None


def _as_url(fs, url: str, path: str) -> str:
    return fs.unstrip_protocol(path) if "://" in url else path

