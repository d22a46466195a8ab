"""The machine a benchmark's figures were measured on, as every figure must name it."""
from __future__ import annotations

import os
import platform


def cpu_name() -> str:
    """CPU model, family/model numbers and the wide-vector instruction sets (AVX2, AVX512, BF16, AMX)."""
    try:
        with open("/proc/cpuinfo") as fh:
            info = dict(line.split(":", 1) for line in fh.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return platform.processor() or "unknown CPU"
    info = {k.strip(): v.strip() for k, v in info.items()}
    flags = set(info.get("flags", "").split())
    wide = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return (f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family')}, model {info.get('model')}; "
            f"{', '.join(wide) or 'no AVX2'})")


def machine_line() -> str:
    return f"CPU: {cpu_name()}, {os.cpu_count()} cores"
