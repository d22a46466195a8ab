"""The audit (METHODS §1): ``stage`` (the stage and its report), ``config``, ``counters``, ``counting`` (local,
z*, the saved state) and ``on_ray``."""
