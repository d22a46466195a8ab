"""Leakage-neutral reweighting (Zhang et al. 2019, Algorithm 1; METHODS §4), the ``weights`` stage, one concern a
module:

- ``stage``: the stage and the method (its docstring); ``config``: its config;
- ``leakage_neutral``: a corpus's weights, from the sentence graph's leakage features (``methods.leakage``), written
  back with the verdict; ``ips``: the arithmetic on P̂(y | l) (weights, prior, effective sample size, debiased
  accuracy); ``evaluation``: a predictions table's debiased accuracy (``refinery evaluate``); ``report``: the report
  (``WeightsReport``) and its page.
"""
