"""z-filtering (Wu et al. 2022, Algorithm 1; METHODS §2) and its compositions (§4.2), one concern a module:

- ``stage``: the ``zfilter`` and ``compose`` stages (``FilterStage``s; light to import); ``config``: their configs;
- ``algorithm``: Algorithm 1 as a stateful operator (``ZFilter``) with the settle pass; ``biased_set``: B_Z;
- ``stream``: Algorithm 1 over a stage's whole input, once, in order; ``decisions``: what it rejected, by row id;
- ``report``: zfilter's report and terminal lines; ``composition`` and ``compose_report``: the compositions.
"""
