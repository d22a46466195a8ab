"""Training precision follows the hardware: bf16 autocast only where the device computes it natively."""
import pytest

from refinery.models.precision import PRECISIONS, resolve_precision


def _cpu_flags() -> set:
    with open("/proc/cpuinfo") as fh:
        return next((set(line.split(":", 1)[1].split()) for line in fh if line.startswith("flags")), set())


def test_auto_uses_bf16_only_on_a_cpu_that_has_it():
    native = bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())  # the kernel's view, independent of torch's probe
    chosen = resolve_precision("auto", "cpu")
    assert chosen.requested == "auto" and chosen.device == "cpu"
    assert chosen.dtype == ("bfloat16" if native else "float32"), chosen
    assert chosen.mixed == native
    assert ("AVX512-BF16" in chosen.reason or "AMX" in chosen.reason)
    if not native:
        assert chosen.reason.startswith("CPU has no AVX512-BF16 or AMX")


def test_an_explicit_precision_wins_and_unknown_ones_are_refused():
    for name in PRECISIONS[1:]:
        chosen = resolve_precision(name, "cpu")
        assert (chosen.dtype, chosen.reason) == (name, "requested explicitly")
    assert resolve_precision("float32", "cpu").autocast().__class__.__name__ == "nullcontext"
    with pytest.raises(ValueError, match="precision must be one of") as refused:
        resolve_precision("fp8", "cpu")
    assert refused.value.code == "invalid-setting"


def test_float16_fine_tuning_scales_the_loss_and_still_learns():
    """float16 (an explicit choice) goes through the gradient scaler; the loss still falls."""
    import numpy as np
    import torch

    from refinery.models.training import fit_loop

    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = (x[:, 0] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

    def loss_of(idx):
        idx = torch.as_tensor(np.asarray(idx))
        return torch.nn.functional.cross_entropy(model(x[idx]).float(), y[idx])

    with torch.no_grad():
        before = float(loss_of(np.arange(256)))
    fit_loop(model.parameters(), 256, loss_of, precision=resolve_precision("float16", "cpu"), epochs=20,
             batch_size=32, lr=1e-2)
    with torch.no_grad():
        after = float(loss_of(np.arange(256)))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32
    assert after < 0.5 * before, (before, after)
