"""Information theory for language models: entropy, cross-entropy, KL divergence, perplexity,
mutual information, and the training loss computed stably from logits.

Conventions
-----------
* A distribution lies along ``dim`` (default the last dimension, of size K); every other dimension is
  a batch of independent distributions, and the result has the batch shape.
* ``base`` sets the unit: ``base=2`` gives bits, ``base=math.e`` gives nats. Functions of
  distributions default to bits, as information theory usually does; the loss from logits defaults to
  nats, as ``torch.nn.functional.cross_entropy`` does.
* ``0 · log 0 = 0`` (the limit of x log x as x → 0), so outcomes of probability 0 contribute nothing.
* Inputs may be torch tensors, NumPy arrays or nested lists; results are torch tensors. Integer inputs
  are converted to the default float dtype.

Invalid input raises ``ValueError`` naming the argument: negative entries, entries that do not sum to
1 within a tolerance suited to the dtype, or shapes that disagree.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = [
    "entropy",
    "cross_entropy",
    "kl_divergence",
    "perplexity",
    "mutual_information",
    "surprisal",
    "log_softmax",
    "softmax",
    "cross_entropy_from_logits",
]

BITS = 2.0
NATS = math.e


def _sum_tolerance(dtype: torch.dtype) -> float:
    """How far from 1 a sum of probabilities may be and still count as 1, for this dtype."""
    return {torch.float64: 1e-9, torch.float32: 1e-5}.get(dtype, 1e-2)  # half and bfloat16: 1e-2


def _as_float_tensor(x: Any, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name} must be a tensor, an array or a list of numbers ({err})") from None
    if x.dtype == torch.bool or x.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    return x


def _check_base(base: float) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number such as 2 or math.e, got {type(base).__name__}")
    if not (base > 0 and base != 1 and math.isfinite(base)):
        raise ValueError(f"base ({base}) must be positive, finite and different from 1")
    return float(base)


def _check_dim(x: torch.Tensor, dim: int, name: str) -> int:
    if x.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension holding the outcomes, got a scalar")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim ({dim}) is out of range for {name} with {x.dim()} dimension(s)")
    if x.shape[dim] == 0:
        raise ValueError(f"{name} has no outcomes along dim {dim} (size 0)")
    return dim


def _as_distribution(p: Any, name: str, dim: int = -1, n_dims: int = 1) -> torch.Tensor:
    """Validate a (batch of) probability distribution(s) along ``dim`` (or the last ``n_dims`` dims)."""
    p = _as_float_tensor(p, name)
    dims = tuple(range(-n_dims, 0)) if n_dims > 1 else (_check_dim(p, dim, name),)
    if n_dims > 1 and p.dim() < n_dims:
        raise ValueError(f"{name} must have at least {n_dims} dimensions, got shape {tuple(p.shape)}")
    if torch.isnan(p).any():
        raise ValueError(f"{name} contains NaN")
    if (p < 0).any():
        raise ValueError(f"{name} must be non-negative: its smallest entry is {p.min().item():.4g}")
    sums = p.sum(dim=dims, dtype=torch.float64)
    worst = (sums - 1).abs().max().item()
    if worst > _sum_tolerance(p.dtype):
        raise ValueError(
            f"{name} must sum to 1 along dim {dims[0] if n_dims == 1 else dims} "
            f"(largest deviation {worst:.3g}); did you pass logits or unnormalised counts?"
        )
    return p


def _same_shape(p: torch.Tensor, q: torch.Tensor, p_name: str = "p", q_name: str = "q") -> None:
    if p.shape != q.shape:
        raise ValueError(f"{p_name} and {q_name} must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}")


def _promote(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = torch.promote_types(p.dtype, q.dtype)
    return p.to(dtype), q.to(dtype)


def entropy(p: Any, *, base: float = BITS, dim: int = -1) -> torch.Tensor:
    """Shannon entropy H(P) = −Σₓ P(x) log_b P(x)  (Shannon, 1948).

    The average surprisal of an outcome drawn from P: 1 bit for a fair coin, 0 for a certain outcome,
    log_b K for the uniform distribution over K outcomes (the maximum).
    """
    base = _check_base(base)
    p = _as_distribution(p, "p", dim)
    # xlogy(0, 0) = 0 gives the 0·log 0 = 0 convention; 0.0 − x rather than −x so a certain outcome gives 0.0, not −0.0
    return (0.0 - torch.special.xlogy(p, p).sum(dim)) / math.log(base)


def cross_entropy(p: Any, q: Any, *, base: float = BITS, dim: int = -1) -> torch.Tensor:
    """Cross-entropy H(P, Q) = −Σₓ P(x) log_b Q(x).

    The average code length when outcomes come from P but are coded for Q. It is infinite when Q gives
    probability 0 to an outcome that P can produce. H(P, P) = H(P), and H(P, Q) = H(P) + KL(P‖Q).
    """
    base = _check_base(base)
    p, q = _as_distribution(p, "p", dim), _as_distribution(q, "q", dim)
    _same_shape(p, q)
    p, q = _promote(p, q)
    return (0.0 - torch.special.xlogy(p, q).sum(dim)) / math.log(base)


def kl_divergence(p: Any, q: Any, *, base: float = BITS, dim: int = -1) -> torch.Tensor:
    """Kullback–Leibler divergence KL(P‖Q) = Σₓ P(x) log_b (P(x) / Q(x))  (Kullback & Leibler, 1951).

    The extra code length paid for coding P with Q's code. Non-negative, zero only when P = Q, and not
    symmetric: KL(P‖Q) ≠ KL(Q‖P) in general. The first argument is the distribution the data comes from.
    """
    base = _check_base(base)
    p, q = _as_distribution(p, "p", dim), _as_distribution(q, "q", dim)
    _same_shape(p, q)
    p, q = _promote(p, q)
    terms = torch.special.xlogy(p, p) - torch.special.xlogy(p, q)  # 0 where P(x) = 0
    return terms.sum(dim).clamp_min(0.0) / math.log(base)  # clamp: rounding can leave −1e-17


def perplexity(p: Any, q: Any | None = None, *, dim: int = -1) -> torch.Tensor:
    """Perplexity b^H(P, Q) — the same number in every base b.

    With one argument, the perplexity of P itself, b^H(P): the number of equally likely outcomes that
    would be as uncertain as P (K for the uniform distribution over K outcomes). With two, b^H(P, Q),
    the perplexity of model Q on data from P. For the perplexity of a language model on a text, use
    ``cross_entropy_from_logits(...).exp()`` (mean loss in nats, then e^loss).
    """
    h = entropy(p, base=NATS, dim=dim) if q is None else cross_entropy(p, q, base=NATS, dim=dim)
    return h.exp()


def mutual_information(joint: Any, *, base: float = BITS) -> torch.Tensor:
    """Mutual information I(X; Y) = Σ P(x, y) log_b (P(x, y) / (P(x) P(y))) = H(X) + H(Y) − H(X, Y).

    ``joint`` holds P(x, y) in its last two dimensions (rows x, columns y). I(X; Y) = 0 exactly when X
    and Y are independent, and I(X; Y) = H(Y) when X determines Y.
    """
    base = _check_base(base)
    joint = _as_distribution(joint, "joint", n_dims=2)
    p_x = joint.sum(-1, keepdim=True)  # (..., X, 1)
    p_y = joint.sum(-2, keepdim=True)  # (..., 1, Y)
    terms = torch.special.xlogy(joint, joint) - torch.special.xlogy(joint, p_x * p_y)
    return terms.sum((-2, -1)).clamp_min(0.0) / math.log(base)


def surprisal(prob: Any, *, base: float = BITS) -> torch.Tensor:
    """Surprisal (self-information) −log_b p of an outcome that had probability ``prob``.

    This is the loss a language model pays for a token it gave probability ``prob``: it grows without
    bound as prob → 0, which is why confident mistakes cost most.
    """
    base = _check_base(base)
    prob = _as_float_tensor(prob, "prob")
    if torch.isnan(prob).any() or (prob < 0).any() or (prob > 1).any():
        raise ValueError("prob must lie in [0, 1]")
    return (0.0 - torch.log(prob)) / math.log(base)  # 0.0 − x, not −x: p = 1 gives 0.0, not −0.0


def log_softmax(logits: Any, dim: int = -1) -> torch.Tensor:
    """log softmax(z)ᵢ = zᵢ − log Σⱼ exp(zⱼ), computed stably.

    Subtracting m = maxⱼ zⱼ first changes nothing mathematically (it cancels) but
    keeps every exponent ≤ 0, so exp never overflows:
    log Σⱼ exp(zⱼ) = m + log Σⱼ exp(zⱼ − m).
    """
    z = _as_float_tensor(logits, "logits")
    _check_dim(z, dim, "logits")
    shifted = z - z.amax(dim, keepdim=True)  # every entry ≤ 0, the largest exactly 0
    # the sum is ≥ 1: its log is safe
    return shifted - shifted.exp().sum(dim, keepdim=True).log()


def softmax(logits: Any, dim: int = -1) -> torch.Tensor:
    """softmax(z)ᵢ = exp(zᵢ) / Σⱼ exp(zⱼ), computed stably as exp(log_softmax(z))."""
    return log_softmax(logits, dim).exp()


def cross_entropy_from_logits(
    logits: Any, targets: Any, *, base: float = NATS, reduction: str = "mean"
) -> torch.Tensor:
    """The language-modelling loss: −log_b softmax(logits)[target], averaged over
    positions.

    ``logits`` has shape (..., V) — one row of unnormalised scores per position — and
    ``targets`` the batch shape (...) with the index of the correct next token. With a
    one-hot target P, H(P, Q) keeps one term, −log Q(target), so this equals
    :func:`cross_entropy` of the one-hot distribution and ``softmax(logits)``.
    ``reduction`` is ``"mean"`` (the training loss: the mean over all positions),
    ``"sum"`` or ``"none"``. Matches ``torch.nn.functional.cross_entropy`` (in nats) on
    ``logits.reshape(-1, V)``. There is no ``ignore_index``: to leave padding out, pass
    the real positions only (``logits[is_real]``, ``targets[is_real]``), which gives the
    mean over real tokens that ``F.cross_entropy(..., ignore_index=-100)`` returns.
    """
    base = _check_base(base)
    z = _as_float_tensor(logits, "logits")
    if z.dim() < 1:
        raise ValueError("logits must have shape (..., V) with V ≥ 1, got a scalar")
    targets = torch.as_tensor(targets, device=z.device)
    if targets.dtype.is_floating_point or targets.dtype == torch.bool or targets.is_complex():
        raise TypeError(f"targets must hold integer token indices, got dtype {targets.dtype}")
    if targets.shape != z.shape[:-1]:
        raise ValueError(
            f"targets must have the shape of logits without its last dimension: logits {tuple(z.shape)} "
            f"needs targets {tuple(z.shape[:-1])}, got {tuple(targets.shape)}"
        )
    vocab = z.shape[-1]
    if targets.numel() and (targets.min() < 0 or targets.max() >= vocab):
        raise ValueError(f"targets must lie in [0, {vocab - 1}] (V = {vocab})")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    log_q = log_softmax(z, dim=-1)  # (..., V)
    log_q_target = log_q.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)  # (...)
    nll = -log_q_target / math.log(base)  # (...)
    if reduction == "none":
        return nll
    return nll.mean() if reduction == "mean" else nll.sum()
