"""refinery: audit and debias labeled text corpora (z-filtering, AUDAC, leakage-neutral weights, RAZOR, IBADR).

Modules import lazily from here: ``from refinery import corpus, audit, zfilter`` loads only what is used.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("refinery")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
