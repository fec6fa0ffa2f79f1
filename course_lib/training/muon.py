"""Muon: momentum orthogonalised by a Newton–Schulz iteration, for the blocks' weight matrices
(Jordan et al., 2024), with AdamW for everything else.

For a weight matrix W with gradient G, one Muon step is::

    m ← β m + (1 − β) G                               (momentum, β = 0.95)
    d = β m + (1 − β) G     (Nesterov)   or   d = m
    O = NS₅(d) ≈ U Vᵀ       where d = U Σ Vᵀ          (orthogonalised: every singular value ≈ 1)
    W ← W (1 − lr·λ) − lr · s · O                     (s: the scale, below; λ: decoupled decay)

``NS₅`` is :func:`newton_schulz`, five steps of a quintic iteration that pushes every singular
value of d towards 1 while keeping its singular vectors: the update moves W the same amount along
every direction the momentum points to, instead of mostly along the few directions that dominate
the gradient. Bernstein & Newhouse (2024) read U Vᵀ as the steepest-descent direction under the
spectral norm (the polar factor of the gradient).

Conventions
-----------
* **Which matrices.** Muon is for 2-D weights only; :class:`Muon` refuses any other parameter.
  :func:`muon_param_groups` gives it the weights of the linear layers inside ``model.blocks``
  (attention's ``w_qkv`` and ``w_o``, the FFN's ``w_gate``/``w_up``/``w_down``). AdamW takes the
  token embedding, learned positions, norm gains, biases and the output head, tied or not (the
  head's rows are one per token, as an embedding's are; modded-nanogpt and Liu et al. (2025) give
  both to AdamW).
* **Rows and columns.** The weights are stored as torch stores ``nn.Linear.weight``: (out, in), the
  transpose of the book's W in y = x W. Orthogonalisation does not care (NS(dᵀ) = NS(d)ᵀ), but the
  ``"spectral"`` scale does: there rows = fan-out and columns = fan-in of the stored weight.
* **The scale s**, chosen by ``scale``:

  - ``"adamw_rms"`` (default): s = 0.2 · √max(rows, cols) (Liu et al., 2025, "Muon is scalable
    for LLM training"). An exact U Vᵀ of shape (m, n) has min(m, n) unit singular values, so its
    RMS is 1/√max(m, n), and s makes the update's RMS 0.2, in the range of AdamW's typical update
    RMS: the learning rate and weight decay tuned for AdamW carry over, and one schedule can set
    both optimisers' ``lr``.
  - ``"spectral"``: s = √max(1, rows/cols) = √max(1, fan_out/fan_in), modded-nanogpt's rule
    (Jordan et al., 2024); the update's RMS is then 1/√fan_in and the learning rate is on a
    scale of its own (0.02 in Jordan's reference usage, beside 3·10⁻⁴ for its AdamW).

  With :func:`newton_schulz`'s singular values in [0.68, 1.20] instead of exactly 1, the RMS is
  s/√max(m, n) times the quadratic mean of those values: 0.2 × (0.68 … 1.20) for ``"adamw_rms"``.
* **Fused q, k, v.** ``w_qkv`` stacks W_q, W_k and W_v by rows. With ``row_splits`` (set by
  :func:`muon_param_groups` from the attention's ``qkv_sizes`` unless ``split_qkv=False``) each of
  the three is orthogonalised and scaled on its own, as the speedrun does with its separate (and
  later batched) q, k, v matrices; without it the stacked matrix is orthogonalised as one.
* **Precision.** The iteration runs in float32 by default (``dtype``), on the parameter's device;
  the reference implementation runs it in bfloat16 on a GPU. The update is cast to the
  parameter's dtype before it is applied; the momentum has the parameter's dtype.
* **State.** One tensor per matrix, ``momentum_buffer``; it round-trips through
  ``state_dict()``/``load_state_dict()`` and :func:`torch.load` with ``weights_only=True``.
  :class:`CombinedOptimizer` carries Muon's and AdamW's together, so a resumed run continues
  bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

__all__ = ["NS_COEFFICIENTS", "newton_schulz", "newton_schulz_band", "muon_update", "Muon",
           "CombinedOptimizer", "muon_param_groups", "make_muon_optimizer"]

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # (a, b, c) of Jordan et al. (2024)
_SCALES = ("adamw_rms", "spectral")


def newton_schulz(G: torch.Tensor, steps: int = 5,
                  coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
                  eps: float = 1e-7, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Orthogonalise a matrix G (m, n): about U Vᵀ, where G = U Σ Vᵀ (Jordan et al., 2024).

        X₀ = G / (‖G‖_F + ε)                         (every singular value now ≤ 1)
        A = X Xᵀ;   X ← a X + (b A + c A²) X          (``steps`` times)

    Each step maps every singular value σ of X to p(σ) = aσ + bσ³ + cσ⁵ and keeps the singular
    vectors, so the result is U p(p(…p(Σ/‖G‖_F)…)) Vᵀ. When m > n the iteration runs on Gᵀ, so
    that A is the small n × n Gram matrix, and the result is transposed back (the same matrix:
    (aI + bXXᵀ + c(XXᵀ)²)X = X(aI + bXᵀX + c(XᵀX)²)).

    The coefficients (a, b, c) = (3.4445, −4.7750, 2.0315) trade exact convergence for speed.
    The slope at 0 is a = 3.44, so a small singular value grows 3.44× per step; but p(1) = 0.70,
    not 1: the values do not converge to 1, they land in the band [p(x₂), p(x₁)] = [0.68, 1.20]
    between p's local minimum and maximum on the positive axis (:func:`newton_schulz_band`), and
    stay in it. Five steps bring every singular value with σ/‖G‖_F ≥ 1.5·10⁻³ into the band (six:
    ≥ 4.4·10⁻⁴; seven: ≥ 1.3·10⁻⁴; each step divides the threshold by about a); smaller ones
    grow 3.44× per step and stay below it. When every σ passes the threshold, the result is
    U diag(s') Vᵀ with s' in [0.68, 1.20], within a relative Frobenius distance of 0.32 of the
    polar factor U Vᵀ (Bernstein & Newhouse, 2024, read U Vᵀ as the steepest-descent direction
    under the spectral norm). Jordan et al. (2024: Keller Jordan's "Muon" post and the
    modded-nanogpt speedrun) found that this inexactness does not hurt the optimiser, while the
    classic cubic iteration (1.5, −0.5, 0), which converges to exactly 1, grows a small singular
    value only 1.5× per step and needs many more steps.
    Measured in float32 (tests/test_muon.py: Gaussian 64×64, 128×32, 32×128 and a 64×48 matrix
    of condition number 10³ after 5, 6 and 7 steps): the singular values follow p's iterates to
    2·10⁻⁶, the singular vectors are G's to 10⁻⁵, and every value past its threshold lies in
    [0.682, 1.202].

    G must be 2-D; the iteration runs in ``dtype`` (float32 by default) on G's device and the
    result is returned in G's dtype. A zero G gives a zero result (ε keeps the division finite).
    """
    if not isinstance(G, torch.Tensor):
        raise TypeError(f"G must be a torch.Tensor, got {type(G).__name__}")
    if G.dim() != 2:
        raise ValueError(f"G must be a 2-D matrix, got shape {tuple(G.shape)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps ({steps!r}) must be a non-negative int")
    if len(coefficients) != 3:
        raise ValueError(f"coefficients ({coefficients!r}) must be three numbers (a, b, c)")
    return _iterate(G.to(dtype), steps, coefficients, eps).to(G.dtype)


def _iterate(X: torch.Tensor, steps: int, coefficients: tuple[float, float, float],
             eps: float) -> torch.Tensor:
    """:func:`newton_schulz`'s iteration on one matrix (m, n) or a stack of them (k, m, n), each
    normalised by its own Frobenius norm: stacking matrices of one shape runs them in one batched
    product per step instead of one small product per matrix (:class:`Muon` does, per shape)."""
    a, b, c = coefficients
    transposed = X.shape[-2] > X.shape[-1]
    if transposed:
        X = X.mT  # (…, n, m): rows ≤ columns, so A below is the smaller Gram matrix
    X = X / (torch.linalg.matrix_norm(X, keepdim=True) + eps)  # ‖X‖_F ≤ 1, so every σ ≤ 1
    for _ in range(steps):
        A = X @ X.mT  # (…, r, r), r = min(m, n)
        B = b * A + c * (A @ A)  # (…, r, r)
        X = a * X + B @ X  # σ ← aσ + bσ³ + cσ⁵
    if transposed:
        X = X.mT  # (…, m, n)
    return X


def newton_schulz_band(coefficients: tuple[float, float, float] = NS_COEFFICIENTS
                       ) -> tuple[float, float]:
    """(lo, hi): where :func:`newton_schulz` leaves the singular values it has converged.

    p(σ) = aσ + bσ³ + cσ⁵ has two positive critical points x₁ < x₂ (roots of
    p'(σ) = a + 3bσ² + 5cσ⁴); the band is [p(x₂), p(x₁)], the values of its local minimum and
    maximum. For the default coefficients: [0.682, 1.202]. The band is checked to map into
    itself under p, so a value inside stays inside; a ValueError otherwise."""
    a, b, c = (float(v) for v in coefficients)
    disc = 9 * b * b - 20 * a * c  # p'(σ) = 0 is a quadratic in u = σ²: 5c u² + 3b u + a = 0
    if c == 0 or disc <= 0:
        raise ValueError(f"coefficients {coefficients!r}: p has no local minimum and maximum "
                         f"on the positive axis, so there is no band")
    roots = sorted((-3 * b + sign * math.sqrt(disc)) / (10 * c) for sign in (-1, 1))
    if roots[0] <= 0:
        raise ValueError(f"coefficients {coefficients!r}: p' has a root at σ² ≤ 0")
    x1, x2 = math.sqrt(roots[0]), math.sqrt(roots[1])

    def p(x):
        return a * x + b * x ** 3 + c * x ** 5

    lo, hi = p(x2), p(x1)
    if not (0 < lo < hi and lo <= min(p(lo), p(hi)) and max(p(lo), p(hi)) <= hi):
        raise ValueError(f"coefficients {coefficients!r}: [{lo:.3g}, {hi:.3g}] is not mapped "
                         f"into itself by p")
    return lo, hi


def _check_scale(scale) -> str:
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {_SCALES}, got {scale!r}")
    return scale


def _scale_factor(rows: int, cols: int, scale: str) -> float:
    if scale == "adamw_rms":
        return 0.2 * math.sqrt(max(rows, cols))  # RMS of the update: 0.2 (Liu et al., 2025)
    return math.sqrt(max(1.0, rows / cols))  # √(fan_out / fan_in) when > 1 (modded-nanogpt)


def muon_update(d: torch.Tensor, steps: int = 5, scale: str = "adamw_rms",
                row_splits: Sequence[int] | None = None,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The update s · NS(d) for a direction d (out, in), in d's dtype and shape.

    ``scale`` picks s (see the module): ``"adamw_rms"``, s = 0.2·√max(rows, cols), an RMS of
    0.2 × the quadratic mean of the singular values (in [0.68, 1.20]); ``"spectral"``,
    s = √max(1, rows/cols). With ``row_splits`` (sizes summing to the rows) each block of rows
    is orthogonalised and scaled as a matrix of its own."""
    _check_scale(scale)
    if d.dim() != 2:
        raise ValueError(f"Muon updates 2-D matrices, got shape {tuple(d.shape)}")
    blocks = (d,) if row_splits is None else d.split(list(row_splits), dim=0)
    out = [newton_schulz(block, steps, dtype=dtype) * _scale_factor(*block.shape, scale)
           for block in blocks]  # each (rows_i, in)
    return out[0] if row_splits is None else torch.cat(out, dim=0)  # (out, in)


def _check_number(name: str, value, low: float, below: float | None = None) -> float:
    """value must be a finite number ≥ low (and < below when given); else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < low or (below is not None and value >= below):
        where = f"in [{low}, {below})" if below is not None else f"a finite number ≥ {low}"
        raise ValueError(f"{name} ({value}) must be {where}")
    return float(value)


class Muon(torch.optim.Optimizer):
    """Muon (Jordan et al., 2024) for 2-D weight matrices (see the module for the formula).

    Per parameter group: ``lr`` (a schedule sets ``group["lr"]`` as for AdamW), ``momentum`` β
    in [0, 1), ``nesterov``, ``weight_decay`` λ (decoupled: W ← W(1 − lr·λ) before the update),
    ``ns_steps`` (Newton–Schulz steps), ``scale`` (``"adamw_rms"`` or ``"spectral"``) and
    ``row_splits`` (None, or row-block sizes orthogonalised separately, e.g. a fused W_q, W_k,
    W_v). Every parameter must be 2-D (out, in), as ``nn.Linear.weight`` is; anything else
    raises a ValueError naming its shape. A bad hyperparameter raises a ValueError naming it.
    """

    def __init__(self, params: Iterable, lr: float, momentum: float = 0.95,
                 nesterov: bool = True, weight_decay: float = 0.0, ns_steps: int = 5,
                 scale: str = "adamw_rms", row_splits: Sequence[int] | None = None):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                        ns_steps=ns_steps, scale=scale, row_splits=row_splits)
        self._check_group(defaults)
        super().__init__(params, defaults)

    @staticmethod
    def _check_group(group: dict) -> None:
        _check_number("lr", group["lr"], 0.0)
        _check_number("momentum", group["momentum"], 0.0, 1.0)
        _check_number("weight_decay", group["weight_decay"], 0.0)
        if not isinstance(group["nesterov"], bool):
            raise TypeError(f"nesterov must be True or False, got {group['nesterov']!r}")
        steps = group["ns_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"ns_steps ({steps!r}) must be a positive int")
        _check_scale(group["scale"])
        splits = group["row_splits"]
        if splits is not None:
            if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in splits):
                raise ValueError(f"row_splits ({splits!r}) must be positive ints")
            group["row_splits"] = tuple(splits)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        try:
            self._check_params(self.param_groups[-1])
        except (TypeError, ValueError):
            self.param_groups.pop()  # leave the optimiser as it was
            raise

    def _check_params(self, group: dict) -> None:
        self._check_group(group)
        for p in group["params"]:
            if p.dim() != 2:
                raise ValueError(f"Muon takes 2-D weight matrices only, got a parameter of shape "
                                 f"{tuple(p.shape)}: give embeddings, gains and biases to "
                                 f"AdamW (muon_param_groups does)")
            splits = group["row_splits"]
            if splits is not None and sum(splits) != p.shape[0]:
                raise ValueError(f"row_splits {splits} sum to {sum(splits)}, but the parameter "
                                 f"of shape {tuple(p.shape)} has {p.shape[0]} rows")

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        """One Muon step for every parameter with a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Every matrix to orthogonalise (a whole d, or one block of its rows), gathered by shape so
        # that each shape runs as one stack: the same numbers as muon_update on each (to float
        # rounding), in a few batched products instead of many small ones.
        params, blocks, by_shape = [], [], {}
        for group in self.param_groups:
            beta = group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad  # (out, in)
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                m = state["momentum_buffer"]
                m.lerp_(g, 1 - beta)  # m ← β m + (1 − β) g
                d = g.lerp(m, beta) if group["nesterov"] else m  # Nesterov: β m + (1 − β) g
                parts = (d,) if group["row_splits"] is None else d.split(list(group["row_splits"]))
                params.append((p, group, len(parts)))
                for part in parts:  # (rows_i, in)
                    key = (tuple(part.shape), group["ns_steps"], group["scale"], part.device)
                    by_shape.setdefault(key, []).append(len(blocks))
                    blocks.append(part)
        updates: list[torch.Tensor | None] = [None] * len(blocks)
        for (shape, steps, scale, _), indices in by_shape.items():
            stack = torch.stack([blocks[i] for i in indices]).to(torch.float32)  # (k, rows, in)
            out = _iterate(stack, steps, NS_COEFFICIENTS, 1e-7) * _scale_factor(*shape, scale)
            for i, update in zip(indices, out):
                updates[i] = update  # (rows, in)
        start = 0
        for p, group, n_parts in params:
            update = torch.cat(updates[start:start + n_parts]) if n_parts > 1 else updates[start]
            start += n_parts
            lr, wd = group["lr"], group["weight_decay"]
            if wd:
                p.mul_(1 - lr * wd)  # decoupled weight decay
            p.add_(update.to(p.dtype), alpha=-lr)  # (out, in)
        return loss


class CombinedOptimizer:
    """Several optimisers over disjoint parameters, used as one: Muon and AdamW here.

    ``param_groups`` lists every optimiser's groups (the same dicts, so ``group["lr"] = …``
    reaches them); ``step``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` act on each.
    The state dict is ``{name: optimiser.state_dict()}``: tensors and plain values, loadable with
    ``torch.load(..., weights_only=True)``."""

    def __init__(self, **optimizers: torch.optim.Optimizer):
        if not optimizers:
            raise ValueError("CombinedOptimizer needs at least one optimiser")
        seen: set[int] = set()
        for name, opt in optimizers.items():
            if not isinstance(opt, torch.optim.Optimizer):
                raise TypeError(f"{name} must be a torch.optim.Optimizer, got "
                                f"{type(opt).__name__}")
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) in seen:
                        raise ValueError(f"a parameter of shape {tuple(p.shape)} is in two "
                                         f"optimisers ({name} and an earlier one)")
                    seen.add(id(p))
        self.optimizers = dict(optimizers)

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.optimizers.values() for g in opt.param_groups]

    @property
    def state(self) -> dict:
        return {p: s for opt in self.optimizers.values() for p, s in opt.state.items()}

    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        """One step of every optimiser; the closure, if any, is evaluated once."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.optimizers.values():
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {name: opt.state_dict() for name, opt in self.optimizers.items()}

    def load_state_dict(self, state_dict: dict) -> None:
        if not isinstance(state_dict, dict) or set(state_dict) != set(self.optimizers):
            found = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict)
            raise ValueError(f"state_dict must have the keys {sorted(self.optimizers)}, "
                             f"got {found}")
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state_dict[name])

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={type(opt).__name__}" for name, opt in self.optimizers.items())
        return f"CombinedOptimizer({inner})"


def muon_param_groups(model: nn.Module, weight_decay: float, split_qkv: bool = True
                      ) -> tuple[list[dict], list[dict]]:
    """(Muon's groups, AdamW's groups) for a :class:`~course_lib.model.DecoderLM`.

    Muon: the weight of every ``nn.Linear`` inside ``model.blocks``, decayed by
    ``weight_decay``; with ``split_qkv`` each attention's ``w_qkv`` gets ``row_splits`` =
    its ``qkv_sizes`` (H·D_h, H_kv·D_h, H_kv·D_h), so W_q, W_k and W_v are orthogonalised
    separately. AdamW: every other parameter, as :func:`~course_lib.training.param_groups` splits
    them — matrices (token table, learned positions, an untied head) decayed, vectors (gains,
    biases) not. A tied table appears once, with AdamW."""
    from ..attention import GroupedQueryAttention

    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Module):
        raise ValueError(f"muon_param_groups needs a model with its blocks in `model.blocks` "
                         f"(a DecoderLM), got {type(model).__name__}")
    splits = {}
    if split_qkv:
        for module in blocks.modules():
            if isinstance(module, GroupedQueryAttention):
                splits[id(module.w_qkv.weight)] = tuple(module.qkv_sizes)
    by_splits: dict[tuple | None, list] = {}
    seen: set[int] = set()
    for module in blocks.modules():
        if isinstance(module, nn.Linear) and module.weight.requires_grad:
            w = module.weight
            if id(w) not in seen:
                seen.add(id(w))
                by_splits.setdefault(splits.get(id(w)), []).append(w)
    muon_groups = [{"params": params, "weight_decay": weight_decay, "row_splits": key}
                   for key, params in by_splits.items()]
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    adamw_groups = [{"params": decay, "weight_decay": weight_decay},
                    {"params": no_decay, "weight_decay": 0.0}]
    return muon_groups, adamw_groups


def make_muon_optimizer(model: nn.Module, lr_muon: float, lr_adamw: float,
                        weight_decay: float = 0.0, *, momentum: float = 0.95,
                        nesterov: bool = True, ns_steps: int = 5, scale: str = "adamw_rms",
                        betas: tuple[float, float] = (0.9, 0.99), split_qkv: bool = True
                        ) -> CombinedOptimizer:
    """Muon for the blocks' matrices and AdamW for the rest (:func:`muon_param_groups`), as one
    :class:`CombinedOptimizer` with ``optimizers`` ``{"muon": …, "adamw": …}``.

    With the default ``scale="adamw_rms"`` the two learning rates can be equal (Liu et al.,
    2025); with ``"spectral"``, ``lr_muon`` is on a scale of its own (see the module). AdamW
    uses its fused implementation where available, as
    :func:`~course_lib.training.make_optimizer` does. Note that
    :func:`~course_lib.training.train_step` sets one ``lr`` on every group."""
    _check_number("lr_muon", lr_muon, 0.0)
    _check_number("lr_adamw", lr_adamw, 0.0)
    muon_groups, adamw_groups = muon_param_groups(model, weight_decay, split_qkv)
    muon = Muon(muon_groups, lr=lr_muon, momentum=momentum, nesterov=nesterov,
                weight_decay=weight_decay, ns_steps=ns_steps, scale=scale)
    try:
        adamw = torch.optim.AdamW(adamw_groups, lr=lr_adamw, betas=betas, fused=True)
    except (RuntimeError, TypeError, ValueError):  # a device or dtype without the fused kernel
        adamw = torch.optim.AdamW(adamw_groups, lr=lr_adamw, betas=betas, foreach=True)
    return CombinedOptimizer(muon=muon, adamw=adamw)
