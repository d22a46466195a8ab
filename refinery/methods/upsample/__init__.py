"""AUDAC up-sampling (arXiv 2401.13907; METHODS §3; docs/upsample.md), the ``upsample`` stage, one concern a module:

- ``stage``: the stage, the method and its safeguards (its docstring), its terminal lines; ``config``: its config;
- ``algorithm``: the planning core (tokens, deficits, the round robin of draws, the turns undone) and the up-sampled
  corpus; ``guard``: the shortcut guard each copy passes and the verdicts; ``report``: report.json and the page;
- ``sql/``: the algorithm's DuckDB queries (``audac_*.sql``), loaded by ``io.db.load_sql`` with this package.
"""
