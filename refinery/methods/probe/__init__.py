"""Probes (``refinery probe``): ``stage``: the ``probe`` stage (a classifier trained on one corpus, scored on
others); ``config``: its config (the classifier, the corpora it scores, where it is saved)."""
