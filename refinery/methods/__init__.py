"""The methods, one module each, every one a registered stage (``refinery.pipeline.stage``):
``audit`` (Gardner et al. 2021), ``zfilter`` and its compositions (Wu et al. 2022), ``confidence``,
``upsample`` (AUDAC), ``leakage`` and ``weights`` (Zhang et al. 2019), ``razor``, ``ibadr``,
``generation``; ``probe`` trains the task model and bias probes they are judged by."""
