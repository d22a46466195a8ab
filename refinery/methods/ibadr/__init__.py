"""IBADR (Wang et al. 2023; METHODS §6): iterative bias-aware dataset refinement.

The pool S starts as the corpus; each iteration fine-tunes the generator on "bias indicator, label → row", draws
pseudo samples from the low-bias indicators, keeps those the task model is sure of, and updates the shallow model
(USM). Ablations (paper Table 5): ``usm=False``, ``lowest_indicator=True`` (b_r → b1), ``indicator=False``,
``iterate=False``.

``stage``: the ``ibadr`` stage (light to import: the verb's options are its config's fields); ``config``: its
settings and profiles; ``iteration``: one iteration and its pieces; ``pool``: the loop, its checkpoints and the
published parts; ``audit``: the original's shortcuts measured in the samples and the verdict on the pool;
``report``: the page and the console lines.
"""
