"""The methods, one package each, every one holding registered stages (``refinery.pipeline.stage``): ``audit``
(Gardner et al. 2021), ``zfilter`` and its compositions (Wu et al. 2022), ``confidence``, ``aflite``, ``datamap``,
``upsample`` (AUDAC), ``leakage`` and ``weights`` (Zhang et al. 2019), ``razor``, ``ibadr``, ``generate``,
``compare``; ``probe`` trains the task model and bias probes they are judged by.

A method's package has the same shape: ``stage`` (the stage the registry names; light to import), ``config`` (its
config dataclasses: the verb's options and pipeline keys), the algorithm's modules, ``report`` where the stage has a
page of its own, and ``sql/`` where the algorithm is DuckDB SQL (loaded by ``io.db.load_sql`` with the package).
"""
