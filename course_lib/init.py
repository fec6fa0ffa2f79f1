"""Weight initialisation: GPT-2's scheme, with the residual output projections scaled by
1/√(2N).

Conventions
-----------
* N (``n_layers``) counts *blocks*. Each block has two residual branches (attention and
  FFN), so 2N branches add into the residual stream. GPT-2's paper says "scale the
  weights of residual layers by 1/√N where N is the number of residual layers" — that N
  is our 2N. nanoGPT and Hugging Face's ``GPT2PreTrainedModel._init_weights`` write it
  as ``0.02 / sqrt(2 * n_layer)``.
* Parameters are found by *role*, from the name of the ``nn.Linear`` that holds them:
  the residual output projections are the last linear layer of each branch, ``w_o``
  (attention) and ``w_down`` (FFN) in course_lib. Models that name them otherwise pass
  their names (Hugging Face Llama: ``("o_proj", "down_proj")``; GPT-2: ``c_proj``).
* Norm gains are not touched: they start at 1 (and shifts at 0) as their modules set
  them.
* A fixed σ (GPT-2's 0.02) multiplies the mean square of a layer's output by
  fan-in · σ², a gain that depends on the width. In a pre-norm stack that is harmless for
  signal propagation — every norm restores the RMS of what the next sublayer reads — but
  not for the speed of optimisation, which depends on σ relative to 1/√D: chapter 11
  derives the first, chapter 12 measures the second.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch
from torch import nn

__all__ = ["RESIDUAL_PROJECTIONS", "residual_std", "gpt2_init_"]

RESIDUAL_PROJECTIONS = ("w_o", "w_down")


def _check_std(std) -> float:
    if isinstance(std, bool) or not isinstance(std, (int, float)):
        raise TypeError(f"std must be a number, got {type(std).__name__}")
    if not (std > 0 and math.isfinite(std)):
        raise ValueError(f"std ({std}) must be positive and finite")
    return float(std)


def _check_n_layers(n_layers) -> int:
    if isinstance(n_layers, bool) or not isinstance(n_layers, int):
        raise TypeError("n_layers must be an int (the number of blocks), "
                        f"got {type(n_layers).__name__}")
    if n_layers < 1:
        raise ValueError(f"n_layers ({n_layers}) must be at least 1")
    return n_layers


def residual_std(std: float, n_layers: int) -> float:
    """σ_res = σ / √(2N): the standard deviation of a residual output projection in a
    model of N blocks (2N residual branches)  (Radford et al., 2019).

    With unit-variance inputs to the projections, each branch then adds about 1/(2N) of
    the variance a σ-initialised branch would add, so the 2N branches together add O(1)
    variance to the stream instead of O(N).
    """
    return _check_std(std) / math.sqrt(2 * _check_n_layers(n_layers))


def gpt2_init_(
    model: nn.Module,
    n_layers: int,
    std: float = 0.02,
    residual_projections: Collection[str] = RESIDUAL_PROJECTIONS,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """GPT-2 initialisation, in place (Radford et al., 2019):

        nn.Linear weight     ~ N(0, σ²); N(0, σ² / (2N)) for residual output projections
        nn.Linear bias       = 0
        nn.Embedding weight  ~ N(0, σ²)   (a padding row stays 0)

    σ = ``std`` (0.02 in GPT-2) and N = ``n_layers`` (blocks). A linear layer is a
    residual output projection when the last part of its module name is in
    ``residual_projections`` (``w_o``, ``w_down``); pass ``()`` for the unscaled scheme.
    Everything else — norm gains and shifts — is left as it is. Returns ``model``.

    Raises ``ValueError`` when a name in ``residual_projections`` matches no
    ``nn.Linear``: a silently unscaled model is the bug this guards against.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    n_layers = _check_n_layers(n_layers)
    std = _check_std(std)
    names_ok = isinstance(residual_projections, Collection) and all(
        isinstance(name, str) for name in residual_projections)
    if isinstance(residual_projections, str) or not names_ok:
        raise TypeError("residual_projections must be a collection of module names "
                        "such as ('w_o', 'w_down'), not a single string")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError("generator must be a torch.Generator or None, "
                        f"got {type(generator).__name__}")
    scaled_std = residual_std(std, n_layers)

    def role(name: str) -> str:
        return name.rsplit(".", 1)[-1]  # "blocks.3.ffn.w_down" -> "w_down"

    linear_roles = {role(name) for name, m in model.named_modules()
                    if isinstance(m, nn.Linear)}
    missing = sorted(set(residual_projections) - linear_roles)
    if missing:  # checked before anything is changed
        raise ValueError(f"residual_projections names {missing}, but no nn.Linear in "
                         "the model has that name; pass the names this model uses for "
                         "its residual output projections")
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                sigma = scaled_std if role(name) in residual_projections else std
                nn.init.normal_(module.weight, mean=0.0, std=sigma, generator=generator)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=std, generator=generator)
                if module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
    return model
