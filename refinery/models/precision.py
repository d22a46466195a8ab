"""Training precision chosen by the hardware.

Mixed precision pays only where the device computes in 16 bits natively: on a CPU without
AVX512-BF16 or AMX a bf16 matrix product is emulated and was measured 22× slower than float32
(AMD EPYC, 2 cores). ``auto`` therefore picks bf16 autocast on CUDA devices that support bf16 and on
CPUs with AVX512-BF16 or AMX, and float32 everywhere else. An explicit precision always wins.
Under autocast only the forward pass runs in 16 bits; weights, gradients and optimizer state stay
float32 (``training.fit_loop``), and float16 adds dynamic loss scaling.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass
from functools import lru_cache

from refinery.messages import Refusal

PRECISIONS = ("auto", "float32", "bfloat16", "float16")

log = logging.getLogger("refinery.precision")


@dataclass(frozen=True)
class Precision:
    """The precision a training loop runs in, what was asked for, and why."""

    requested: str      # auto | float32 | bfloat16 | float16
    dtype: str          # float32 | bfloat16 | float16: the dtype of the autocast forward pass
    device: str         # cpu | cuda | …
    reason: str

    @property
    def mixed(self) -> bool:
        return self.dtype != "float32"

    def autocast(self):
        """The context the forward pass runs in (a no-op for float32)."""
        if not self.mixed:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(self.device, dtype=getattr(torch, self.dtype))

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=None)
def cpu_bf16_support() -> tuple[bool, str]:
    """(native, what was found): AVX512-BF16 or AMX, as torch's CPU feature probe reports them."""
    import torch

    probes = {"AMX": getattr(torch.cpu, "_is_amx_tile_supported", None),
              "AVX512-BF16": getattr(torch.cpu, "_is_avx512_bf16_supported", None)}
    found = [name for name, probe in probes.items() if probe is not None and probe()]
    if found:
        return True, " and ".join(found)
    if all(probe is None for probe in probes.values()):  # an older torch: read the kernel's CPU flags
        flags = _proc_cpu_flags()
        found = [name for name, flag in (("AMX", "amx_bf16"), ("AVX512-BF16", "avx512_bf16")) if flag in flags]
        if found:
            return True, " and ".join(found)
    return False, f"no AVX512-BF16 or AMX (torch CPU capability {torch.backends.cpu.get_cpu_capability()})"


def _proc_cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def native_dtype(device: str) -> tuple[str, str]:
    """The 16-bit dtype ``device`` runs natively ("float32" if none) and the reason."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        name = torch.cuda.get_device_name(torch.device(device))
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return "bfloat16", f"{name} computes bf16 natively"
        return "float32", f"{name} has no native bf16"
    if kind == "cpu":
        native, found = cpu_bf16_support()
        return ("bfloat16", f"CPU has {found}") if native else ("float32", f"CPU has {found}")
    return "float32", f"no mixed precision on {kind} devices"


def resolve_precision(requested: str, device: str) -> Precision:
    """``requested`` (one of PRECISIONS) on ``device``; the choice is logged."""
    if requested not in PRECISIONS:
        raise Refusal(f"precision must be one of {', '.join(PRECISIONS)}, not {requested!r}", code="invalid-setting")
    import torch

    kind = torch.device(device).type
    if requested == "auto":
        dtype, reason = native_dtype(device)
        precision = Precision("auto", dtype, kind, reason)
    else:
        precision = Precision(requested, requested, kind, "requested explicitly")
    log.info("training precision %s on %s (%s: %s)", precision.dtype, kind, requested, precision.reason)
    return precision
