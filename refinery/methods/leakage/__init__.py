"""Leakage features of the sentence graph (Zhang et al. 2019; METHODS §4), the ``leakage`` stage, one concern a module:

- ``stage``: the stage (how well the graph alone predicts the label); ``config``: its config, the features' names,
  the graph's and the forest's settings (which the ``weights`` stage's config holds too);
- ``sentence_graph``: the graph of a pair corpus, its features and their predictability (what ``weights`` reads
  too); ``report``: the report page; ``sql/``: the graph's DuckDB queries (``leakage_*.sql``), loaded by
  ``io.db.load_sql`` with this package.
"""
