"""Leakage features of the sentence graph (Zhang et al. 2019; METHODS §4), the ``leakage`` stage, one concern a module:

- ``stage``: the stage (how well the graph alone predicts the label); ``config``: its config;
- ``report``: the report (``LeakageReport``) and its page.

The graph, its features and their predictability are ``models.sentence_graph`` (what ``weights`` reads too; its
DuckDB queries in ``models/sql/leakage_*.sql``), their settings ``models.leakage_settings``.
"""
