"""The audit (METHODS §1): ``stage`` (its config, stage and report), ``counting`` and ``on_ray``."""
