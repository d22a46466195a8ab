"""Deduplication (``dedup``): exact, normalized and near-duplicate clusters of rows within and across splits, with
their labels, one concern a module:

- ``stage``: the ``dedup`` stage (a ``FilterStage``; light to import); ``config``: its config;
- ``minhash``: normalization, word shingles, MinHash-LSH and the true Jaccard (shared with ``decontaminate``);
- ``clusters``: the duplicate graph's clusters, their labels and each row's fate; ``report``: its report.
"""
