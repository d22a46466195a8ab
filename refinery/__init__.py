"""refinery: audit and debias labeled text corpora (z-filtering, AUDAC, leakage-neutral weights, RAZOR, IBADR).

``import refinery as rf`` gives the Python API (``refinery.api``): ``rf.audit(data, k=20)``, ``rf.zfilter``,
``rf.compose``, ``rf.confidence``, ``rf.upsample``, ``rf.leakage``, ``rf.weights``, ``rf.generate``, ``rf.razor``,
``rf.ibadr``, ``rf.compare``, ``rf.read`` and ``rf.run`` (a pipeline). They are imported on first use, so ``import refinery`` (and the
CLI's start) stays light.
"""
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("refinery")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    api = import_module("refinery.api")
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'refinery' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *import_module("refinery.api").__all__])
