"""Model backends behind small protocols (fit / predict_proba / save / load)."""
from .base import Classifier, cross_fit_proba, load_classifier
from .ngram import NGramClassifier

__all__ = ["Classifier", "NGramClassifier", "cross_fit_proba", "load_classifier"]
