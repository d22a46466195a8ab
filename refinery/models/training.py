"""The fine-tuning loop shared by the encoder classifier and the generator."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from .precision import Precision


def fit_loop(params, rows: int, loss_of: Callable, *, precision: Precision, epochs: int, batch_size: int,
             lr: float, weight_decay: float = 0.01, seed: int = 0, desc: str = "fine-tune") -> None:
    """AdamW with the learning rate decayed linearly to 0, gradient norm clipped at 1.

    Each epoch visits ``rows`` in a seeded random order, ``batch_size`` at a time; ``loss_of(indices)``
    returns the batch's loss tensor. Only ``loss_of`` runs under ``precision``'s autocast: backward and
    the optimizer step stay in the parameters' float32 (float16 adds dynamic loss scaling).
    """
    import torch

    params = [p for p in params if p.requires_grad]
    steps = epochs * math.ceil(rows / batch_size)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / max(steps, 1)))
    scaler = torch.amp.GradScaler(precision.device, enabled=precision.dtype == "float16")
    rng = np.random.default_rng(seed)
    with tqdm(total=steps, desc=f"{desc} ({precision.dtype})", unit=" step", disable=None) as bar:
        for _ in range(epochs):
            order = rng.permutation(rows)
            for start in range(0, rows, batch_size):
                with precision.autocast():
                    loss = loss_of(order[start:start + batch_size])
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                scaler.step(opt)
                scaler.update()
                sched.step()
                opt.zero_grad()
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
