"""refinery: audit and debias labeled text corpora (z-filtering, AUDAC, leakage-neutral weights, RAZOR, IBADR).

``import refinery as rf`` gives the Python API (``refinery.api``): ``rf.audit(data, k=20)``, ``rf.zfilter``,
``rf.compose``, ``rf.confidence``, ``rf.upsample``, ``rf.leakage``, ``rf.weights``, ``rf.generate``, ``rf.razor``,
``rf.ibadr``, ``rf.compare``, ``rf.read`` and ``rf.run`` (a pipeline), and ``rf.NAME`` for any stage registered
later (``my-filter``: ``rf.my_filter``). They are imported on first use, so ``import refinery`` (and the CLI's
start) stays light.
"""
from importlib import import_module

__version__ = "0.1.0"   # the package's version (pyproject.toml reads it here)


def __getattr__(name: str):
    api = import_module("refinery.api")
    if name in api.public_names():
        return getattr(api, name)
    raise AttributeError(f"module 'refinery' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *import_module("refinery.api").public_names()])
