"""Model backends behind small protocols (fit / predict_proba / save / load).

The names below are imported on first use, so importing a submodule (``precision``, ``registry``)
does not pull scikit-learn or torch into every command.
"""
import importlib

_LAZY = {"Classifier": ".base", "cross_fit_proba": ".base", "load_classifier": ".base",
         "NGramClassifier": ".ngram"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
