"""Evaluation, deterministic: the mean loss per token over a whole split (:func:`evaluate`) and its
curve over the positions of the window (:func:`loss_per_position`), both over the split's
non-overlapping windows. Losses are in nats per character; divided by ln 2 (:data:`LN2`) they are in
bits per character (:func:`bits_per_char`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..data import eval_windows
from .precision import autocast

__all__ = ["LN2", "evaluate", "bits_per_char", "loss_per_position"]

LN2 = math.log(2.0)


@torch.no_grad()
def evaluate(model: nn.Module, data: torch.Tensor, context: int, batch_size: int = 64,
             precision: str = "float32") -> float:
    """The mean loss per token, in nats, over the whole split ``data``: every non-overlapping window
    of ``context`` tokens (``data.eval_windows``), each target token counted once.

        loss = Σ_windows Σ_t −ln p(y_t | x_≤t) / (number of target tokens)

    Deterministic (no sampling of batches). A token's context is the earlier tokens of its window,
    0 … T − 1 of them (about (T − 1) / 2 on average), so this loss is somewhat higher than that of a
    sliding window that always gives T − 1 tokens of context. The model is put in eval mode and
    back. ``precision``: the forward passes run under that autocast (as in training); the loss is
    summed in float64 either way.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    with torch.inference_mode():
        for x, y in eval_windows(data, batch_size, context):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast(precision, device):
                logits = model(x)  # (b, T, V)
            total += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").double()
            count += y.numel()
    model.train(was_training)
    return total.item() / count


def bits_per_char(nats: float) -> float:
    """A loss in nats per character as bits per character: nats / ln 2."""
    return nats / LN2


@torch.no_grad()
def loss_per_position(model: nn.Module, data: torch.Tensor, context: int, batch_size: int = 64,
                      max_windows: int | None = None) -> torch.Tensor:
    """The mean loss (nats) at each position of the window: (T,), entry t the mean over the
    windows of −ln p(y_t | x_0 … x_t), for the same non-overlapping windows as :func:`evaluate`
    (the first ``max_windows`` of them when given). Position t has seen t earlier tokens, so the
    curve shows how the loss depends on the context a token gets — and, with ``context`` longer
    than the training windows, how a model copes with positions it never trained on. The mean of
    the curve equals :func:`evaluate` over the same windows.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total = torch.zeros(context, dtype=torch.float64, device=device)  # (T,)
    count = 0
    with torch.inference_mode():
        for x, y in eval_windows(data, batch_size, context):
            if max_windows is not None and count >= max_windows:
                break
            if max_windows is not None:
                x, y = x[:max_windows - count], y[:max_windows - count]
            x, y = x.to(device), y.to(device)
            logits = model(x)  # (b, T, V)
            nll = F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")  # (b, T)
            total += nll.double().sum(dim=0)
            count += x.shape[0]
    model.train(was_training)
    return (total / count).float()  # (T,)
