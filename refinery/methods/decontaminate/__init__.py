"""Decontamination (``decontaminate``): remove the training rows that share an n-gram of N words, or are
near-duplicates, of a row of an evaluation set, one concern a module:

- ``stage``: the ``decontaminate`` stage (a ``FilterStage``; light to import); ``config``: its config;
- ``overlap``: the n-gram and near-duplicate matches (over ``core.minhash`` and ``core.ngram_index``, the one
  implementation of shingles and MinHash); ``report``: its report.
"""
