"""Positions: sinusoidal encodings, learned absolute embeddings, RoPE and ALiBi.

Self-attention without positions is permutation-equivariant, so order must be injected.
Four ways, each a few lines here:

* ``sinusoidal_encoding`` — a fixed vector per position, added to the token embeddings
  (Vaswani et al., 2017); ``sinusoidal_shift_matrix`` is the linear map that moves the
  encoding by k positions.
* ``LearnedPositionalEmbedding`` — a trained (max_seq_len, D) table, added likewise
  (GPT-2, BERT).
* RoPE — rotate queries and keys by angles proportional to their positions (Su et al.,
  2024): ``rope_cos_sin`` builds the tables and ``apply_rope`` rotates (the fast path);
  ``rope_rotation_matrix`` and ``apply_rope_reference`` are the explicit math.
* ALiBi — add −m_h · |i − j| to head h's attention scores (Press et al., 2022):
  ``alibi_slopes`` and ``alibi_bias``.

Conventions
-----------
* Shape letters: B batch, H heads, T positions (of queries), S keys, D model width,
  D_h head width. ``positions`` is an int T (meaning 0, 1, …, T − 1) or a tensor, (T,)
  or (B, T).
* RoPE turns D_h / 2 pairs of coordinates; pair i turns at θ_i = theta^(−2i / D_h).
  Which coordinates form a pair is the **pairing**:
  ``"half"``        pair i = (x[i], x[i + D_h/2]): Hugging Face Llama/Mistral;
  ``"interleaved"`` pair i = (x[2i], x[2i + 1]):   Meta's reference Llama, RoFormer.
  They are the same rotation up to a fixed permutation of coordinates
  (``rope_permutation``).
* The cos/sin tables are half width, one angle per pair: (T, D_h/2) for positions (T,)
  and (B, 1, T, D_h/2) for positions (B, T); both broadcast over x of shape
  (B, H, T, D_h).
* The ALiBi bias has shape (H, T, S); it is added to the scores q·k/√D_h before softmax.

Invalid input raises ``ValueError``/``TypeError`` naming the argument and the rule.
"""

from __future__ import annotations

import math
from typing import Union

import torch
from torch import nn

from ._autograd import apply_function

__all__ = [
    "PAIRINGS",
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
    "LearnedPositionalEmbedding",
    "rope_frequencies",
    "rope_cos_sin",
    "apply_rope",
    "rope_rotation_matrix",
    "apply_rope_reference",
    "rope_permutation",
    "alibi_slopes",
    "alibi_bias",
]

PAIRINGS = ("half", "interleaved")
Positions = Union[int, torch.Tensor]


# --- validation helpers ---------------------------------------------------------------

def _check_even_dim(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 2 or value % 2:
        raise ValueError(f"{name} ({value}) must be a positive even number: "
                         "coordinates come in pairs")
    return value


def _check_base(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number such as 10000.0, "
                        f"got {type(value).__name__}")
    if not (value > 1 and math.isfinite(value)):
        raise ValueError(f"{name} ({value}) must be finite and greater than 1")
    return float(value)


def _check_pairing(pairing: str) -> str:
    if pairing not in PAIRINGS:
        raise ValueError("pairing must be 'half' (Hugging Face) or 'interleaved' "
                         f"(Meta), got {pairing!r}")
    return pairing


def _check_std(init_std: float) -> float:
    ok = isinstance(init_std, (int, float)) and not isinstance(init_std, bool)
    if not (ok and init_std > 0 and math.isfinite(init_std)):
        raise ValueError(f"init_std ({init_std}) must be a positive finite number")
    return float(init_std)


def _as_positions(positions: Positions, device=None, name: str = "positions"):
    """An int T becomes arange(T); a tensor of positions is kept (moved to device)."""
    if isinstance(positions, bool):
        raise TypeError(f"{name} must be an int or a tensor of positions, got bool")
    if isinstance(positions, int):
        if positions < 1:
            raise ValueError(f"{name} ({positions}) must be at least 1 as a length")
        return torch.arange(positions, device=device)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be an int or a tensor of positions, "
                        f"got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {positions.dtype}")
    if positions.dim() == 0:
        raise ValueError(f"{name} must have shape (T,) or (B, T), got a scalar")
    return positions if device is None else positions.to(device)


# --- sinusoidal encoding --------------------------------------------------------------

def sinusoidal_encoding(
    positions: Positions, d_model: int, base: float = 10000.0, *,
    dtype: torch.dtype | None = None, device: torch.device | str | None = None,
) -> torch.Tensor:
    """PE[p, 2i] = sin(p ω_i), PE[p, 2i+1] = cos(p ω_i), ω_i = base^(−2i/D)
    (Vaswani et al., 2017, §3.5).

    Sines on even and cosines on odd coordinates, as in the paper. (Some code puts all
    sines first, then all cosines: the same vectors with coordinates permuted.)
    Positions (..., T) give (..., T, D). Computed in float64, returned in ``dtype``
    (default: torch's default dtype).
    """
    d_model = _check_even_dim(d_model, "d_model")
    base = _check_base(base, "base")
    pos = _as_positions(positions, device).to(torch.float64)  # (..., T)
    two_i = torch.arange(0, d_model, 2, device=pos.device).double()  # (D/2,): 0, 2, …
    omega = base ** (-two_i / d_model)  # (D/2,): from 1 down to nearly 1/base
    angles = pos[..., None] * omega  # (..., T, D/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (..., T, D/2, 2)
    return pe.flatten(-2).to(dtype or torch.get_default_dtype())  # (..., T, D)


def sinusoidal_shift_matrix(
    k: float, d_model: int, base: float = 10000.0, *,
    dtype: torch.dtype = torch.float64, device=None,
) -> torch.Tensor:
    """M_k, (D, D), with PE[p + k] = PE[p] · M_k for every position p (row vectors).

    Block diagonal: pair i, (sin pω_i, cos pω_i), turns by the angle kω_i, because
    sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b − sin a sin b.
    M_k depends on the offset k only: a shift is a linear function of the encoding.
    """
    d_model = _check_even_dim(d_model, "d_model")
    base = _check_base(base, "base")
    omega = base ** (-torch.arange(0, d_model, 2).double() / d_model)  # (D/2,)
    c, s = torch.cos(k * omega), torch.sin(k * omega)  # (D/2,) each
    rows = (torch.stack((c, -s), -1), torch.stack((s, c), -1))  # (D/2, 2) each
    blocks = torch.stack(rows, -2)  # (D/2, 2, 2): [[c, −s], [s, c]]
    return torch.block_diag(*blocks).to(dtype=dtype, device=device)  # (D, D)


# --- learned absolute positions -------------------------------------------------------

class LearnedPositionalEmbedding(nn.Module):
    """x_p = P[p]: a trained (max_seq_len, D) table added to the tokens (GPT-2, BERT).

    There is a row for positions 0 … max_seq_len − 1 and nothing beyond: a hard limit on
    the length. A position past it raises ``ValueError`` (``nn.Embedding`` raises an
    opaque IndexError, or a device-side assert on CUDA). Rows of positions never seen in
    training receive no gradient and keep their initial values.
    """

    def __init__(self, max_seq_len: int, d_model: int, *, init_std: float = 0.02):
        super().__init__()
        for value, name in ((max_seq_len, "max_seq_len"), (d_model, "d_model")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name} ({value}) must be at least 1")
        std = _check_std(init_std)
        self.max_seq_len, self.d_model = max_seq_len, d_model
        self.weight = nn.Parameter(torch.randn(max_seq_len, d_model) * std)  # (Tmax, D)

    def forward(self, positions: Positions) -> torch.Tensor:
        pos = _as_positions(positions, self.weight.device)  # (T,) or (B, T)
        if pos.dtype.is_floating_point:
            raise TypeError("positions must be integers to index a learned table, "
                            f"got dtype {pos.dtype}")
        lowest, highest = int(pos.min()), int(pos.max())
        if lowest < 0 or highest >= self.max_seq_len:
            bad = highest if highest >= self.max_seq_len else lowest
            raise ValueError(
                f"positions must lie in [0, {self.max_seq_len - 1}]: a learned table "
                f"has no row for position {bad} (max_seq_len = {self.max_seq_len})")
        return self.weight[pos]  # (T, D) or (B, T, D)

    def extra_repr(self) -> str:
        return f"max_seq_len={self.max_seq_len}, d_model={self.d_model}"


# --- RoPE -----------------------------------------------------------------------------

def rope_frequencies(head_dim: int, theta: float = 10000.0, *, device=None):
    """θ_i = theta^(−2i/D_h), i = 0 … D_h/2 − 1, in float32 like Hugging Face, Meta."""
    head_dim = _check_even_dim(head_dim, "head_dim")
    theta = _check_base(theta, "theta")
    two_i = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float()
    return 1.0 / (theta ** (two_i / head_dim))  # (D_h/2,)


def rope_cos_sin(
    positions: Positions, head_dim: int, theta: float = 10000.0, *,
    dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos(p θ_i) and sin(p θ_i) for every position p and pair i (Su et al., 2024).

    Positions (T,) give tables (T, D_h/2); positions (B, T), one row per sequence, give
    (B, 1, T, D_h/2). Both broadcast against x of shape (B, H, T, D_h) in
    :func:`apply_rope`, for either pairing. Angles are computed in float32, as Hugging
    Face and Meta do (the tables match theirs bit for bit), then cast to ``dtype``.
    Never compute them in bf16 or fp16: those cannot even represent every position
    above 256 or 2048.
    """
    pos = _as_positions(positions, device)
    if pos.dim() > 2:
        raise ValueError(f"positions must be (T,) or (B, T), got {tuple(pos.shape)}")
    inv_freq = rope_frequencies(head_dim, theta, device=pos.device)  # (D_h/2,)
    angles = pos.float()[..., None] * inv_freq  # (T, D_h/2) or (B, T, D_h/2)
    if pos.dim() == 2:
        angles = angles[:, None]  # (B, 1, T, D_h/2): the same positions for every head
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str = "half"
) -> torch.Tensor:
    """Turn each pair (a, b) of x by its angle: (a, b) ↦ (a cos − b sin, a sin + b cos)
    (Su et al., 2024).

    ``x`` is (..., T, D_h), usually queries or keys (B, H, T, D_h); ``cos`` and ``sin``
    come from :func:`rope_cos_sin` and broadcast to (..., T, D_h/2). ``pairing`` picks
    pair i: ``"half"`` = (x[i], x[i + D_h/2]) as in Hugging Face, whose
    ``x·cos + rotate_half(x)·sin`` is this formula; ``"interleaved"`` = (x[2i], x[2i+1])
    as in Meta's reference code, which uses complex numbers. The arithmetic runs in the
    promoted dtype of x and the tables (float32 tables keep bf16 inputs accurate); the
    result has x's dtype. The backward pass is written by hand: a rotation's gradient
    is the output's gradient turned back by −θ (see ``_RopeFunction``).
    """
    _check_pairing(pairing)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating-point tensor, got {got}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., T, D_h), got {tuple(x.shape)}")
    half = _check_even_dim(x.shape[-1], "x.shape[-1] (D_h)") // 2
    if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor)
            and cos.shape == sin.shape):
        raise ValueError("cos and sin must be tensors of one shape, from rope_cos_sin")
    if cos.shape[-1] != half:
        raise ValueError(f"cos and sin must have D_h/2 = {half} columns, one angle per "
                         f"pair; got {cos.shape[-1]}")
    pairs_shape = (*x.shape[:-1], half)  # (..., T, D_h/2)
    # does cos broadcast to the pairs? (a plain loop: torch.broadcast_shapes is slow for a
    # check that runs twice per layer at every generation step)
    fits = cos.dim() <= len(pairs_shape) and all(
        c in (1, p) for c, p in zip(reversed(cos.shape), reversed(pairs_shape)))
    if not fits:
        raise ValueError(
            f"cos/sin of shape {tuple(cos.shape)} do not broadcast to x's pairs "
            f"{pairs_shape}: use (T, D_h/2), or (B, 1, T, D_h/2) for x (B, H, T, D_h)")
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad
                                    or sin.requires_grad):
        # _RopeFunction.apply(x, cos, sin, pairing) minus apply's Python wrapper
        return apply_function(_RopeFunction, x, cos, sin, pairing).type_as(x)  # (..., T, D_h)
    return _turn_pairs(x, cos, sin, pairing).type_as(x)  # (..., T, D_h)


def _pair_views(t: torch.Tensor, pairing: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The first and second coordinates of every pair of t, as two views (..., D_h/2)."""
    half = t.shape[-1] // 2
    if pairing == "half":
        return t[..., :half], t[..., half:]  # pair i = t[i], t[i + D_h/2]
    return t[..., 0::2], t[..., 1::2]  # pair i = t[2i], t[2i + 1]


def _turn_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str,
                memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
    """Every pair (a, b) of x turned by its angle: (a cos − b sin, a sin + b cos).

    Each turned coordinate is written straight to its place in one new tensor (no
    concatenation), in the promoted dtype of x and the tables, laid out as
    ``memory_format`` says (``torch.preserve_format``: as x, when x is dense). Under
    ``torch.func.vmap`` or ``torch.compile`` the same numbers come from the plain formula,
    laid out contiguously. Not recorded by autograd: :class:`_RopeFunction` differentiates
    it. Turning back by −θ is the same call with −sin.
    """
    a, b = _pair_views(x, pairing)  # (..., T, D_h/2) each
    if not torch.compiler.is_compiling():  # torch.compile cannot trace writes into views of out
        try:
            dtype = torch.promote_types(x.dtype, cos.dtype)
            out = torch.empty_like(x, dtype=dtype, memory_format=memory_format)
            new_a, new_b = _pair_views(out, pairing)  # (..., T, D_h/2) each: views of out,
            # which has x's shape (..., T, D_h)
            torch.mul(a, cos, out=new_a).sub_(b * sin)  # a cos − b sin
            torch.mul(b, cos, out=new_b).add_(a * sin)  # b cos + a sin
            return out
        except RuntimeError:  # under vmap (torch.func.vmap, jacobian(vectorize=True)), whose
            pass  # batched tensors cannot be written into a plain one: the same numbers below
    # out of place, for vmap and for the compiler (which fuses these into one kernel)
    new_a, new_b = a * cos - b * sin, a * sin + b * cos  # (..., T, D_h/2) each
    if pairing == "half":
        return torch.cat((new_a, new_b), dim=-1)  # (..., T, D_h)
    pairs = torch.stack((new_a, new_b), dim=-1)  # (..., T, D_h/2, 2)
    return pairs.reshape(x.shape)  # (..., T, D_h): x[2i], x[2i + 1]


class _RopeFunction(torch.autograd.Function):
    """RoPE with its backward pass written by hand.

    y = R_p x with R_p a rotation, so ∂L/∂x = R_pᵀ ∂L/∂y = R_−p ∂L/∂y: the gradient is
    the output's gradient turned back by the same angles. It needs only the tables,
    which every layer shares. Autograd's own graph of the forward pass (eight products
    on strided half-width views, a subtraction, an addition and a concatenation) keeps
    the same tables but replays every operation, which is slower (the README's
    benchmark section has the numbers). For tables that require grad (not the case in
    the models) x is kept too:
    ∂L/∂cos = Σ (g_a a + g_b b) and ∂L/∂sin = Σ (g_b a − g_a b), summed over the
    dimensions the tables were broadcast along.
    """

    generate_vmap_rule = True  # torch.func.vmap runs forward and backward batched

    @staticmethod
    def forward(x, cos, sin, pairing):
        return _turn_pairs(x, cos, sin, pairing)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, cos, sin, pairing = inputs
        ctx.pairing, ctx.x_dtype = pairing, x.dtype
        tables_need_grad = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        ctx.save_for_backward(cos, sin, x if tables_need_grad else None)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        cos, sin, x = ctx.saved_tensors
        grad_x = grad_cos = grad_sin = None
        if ctx.needs_input_grad[0]:
            # turned back by −θ, laid out as the incoming gradient (attention's backward
            # writes it (B, T, H, D_h) in memory), so that q's and k's gradients meet v's
            # in one layout where the projection's backward gathers them
            grad_x = _turn_pairs(grad, cos, -sin, ctx.pairing, torch.preserve_format)
            grad_x = grad_x.to(ctx.x_dtype)
        if x is not None:
            g_a, g_b = _pair_views(grad, ctx.pairing)  # (..., T, D_h/2) each
            a, b = _pair_views(x, ctx.pairing)  # (..., T, D_h/2) each
            if ctx.needs_input_grad[1]:
                grad_cos = (g_a * a + g_b * b).sum_to_size(cos.shape).to(cos.dtype)
            if ctx.needs_input_grad[2]:
                grad_sin = (g_b * a - g_a * b).sum_to_size(sin.shape).to(sin.dtype)
        return grad_x, grad_cos, grad_sin, None


def rope_rotation_matrix(
    position: float, head_dim: int, theta: float = 10000.0, pairing: str = "half", *,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """(D_h, D_h): the rotation RoPE applies at position p, in column form, as papers
    write it: the rotated vector is this matrix times x, a column.

    In the paper's (interleaved) order it is block diagonal with blocks
    [[cos pθ_i, −sin pθ_i], [sin pθ_i, cos pθ_i]]; with ``pairing="half"`` the same
    blocks act on coordinates (i, i + D_h/2). The book writes vectors as rows and the
    rotation as x ↦ x R_p, so this matrix is the book's R_pᵀ. Either way R_0 = I,
    R_pᵀ = R_p⁻¹ = R_−p, and ⟨q R_m, k R_n⟩ = q R_(m−n) kᵀ depends on m − n only.
    """
    _check_pairing(pairing)
    angles = float(position) * rope_frequencies(head_dim, theta).double()  # (D_h/2,)
    c, s = angles.cos(), angles.sin()  # (D_h/2,) each
    half = head_dim // 2
    if pairing == "half":
        a = torch.arange(half)  # first coordinate of each pair
        b = a + half  # its partner
    else:
        a = torch.arange(0, head_dim, 2)
        b = a + 1
    rot = torch.zeros(head_dim, head_dim, dtype=torch.float64)
    rot[a, a], rot[a, b] = c, -s  # a' = a cos − b sin
    rot[b, a], rot[b, b] = s, c  # b' = a sin + b cos
    return rot.to(dtype)


def apply_rope_reference(
    x: torch.Tensor, positions: Positions, theta: float = 10000.0, pairing: str = "half"
) -> torch.Tensor:
    """RoPE as explicit matrix products, each position's vector times its
    :func:`rope_rotation_matrix` (column form; x_p R_p with the book's rows): slow,
    checks :func:`apply_rope`.

    ``x`` is (..., T, D_h) and ``positions`` (T,); every position's vector is multiplied
    by its own :func:`rope_rotation_matrix`. Computed in float64, returned in x's dtype.
    """
    pos = _as_positions(positions)
    if pos.dim() != 1 or pos.shape[0] != x.shape[-2]:
        raise ValueError(f"positions must have shape (T,) with T = x.shape[-2] = "
                         f"{x.shape[-2]}, got {tuple(pos.shape)}")
    head_dim = x.shape[-1]
    rots = [rope_rotation_matrix(p, head_dim, theta, pairing) for p in pos.tolist()]
    rots = torch.stack(rots).to(x.device)  # (T, D_h, D_h)
    out = torch.einsum("tij,...tj->...ti", rots, x.double())  # (..., T, D_h): x_p R_p
    return out.to(x.dtype)


def rope_permutation(head_dim: int, *, device=None) -> torch.Tensor:
    """perm = (0, 2, …, D_h − 2, 1, 3, …, D_h − 1): x[..., perm] moves interleaved pairs
    to half-split places (coordinate 2i to i, 2i + 1 to i + D_h/2), so that

        apply_rope(x, cos, sin, "interleaved")[..., perm]
            == apply_rope(x[..., perm], cos, sin, "half").

    Converting Meta checkpoints to Hugging Face's layout permutes each head's rows of
    W_q and W_k this way.
    """
    head_dim = _check_even_dim(head_dim, "head_dim")
    perm = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
    return perm.to(device)


# --- ALiBi ----------------------------------------------------------------------------

def _geometric_slopes(n: int) -> list[float]:
    """2^(−8/n), 2^(−16/n), …, 2^(−8): the paper's slopes when n is a power of two."""
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def alibi_slopes(
    n_heads: int, *, dtype: torch.dtype = torch.float32, device=None
) -> torch.Tensor:
    """Head h's slope m_h in ALiBi (Press et al., 2022), for any number of heads: (H,).

    For H a power of two, the geometric sequence m_h = 2^(−8(h + 1)/H): 1/2, 1/4, …,
    1/256 for H = 8. Otherwise, as in the paper's reference code: the slopes of the
    largest power of two P < H, then H − P slopes taken from the 2P-head sequence at
    every other place (its 1st, 3rd, 5th, …). Those fall between the first P, so the
    list is not sorted.
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, int):
        raise TypeError(f"n_heads must be an int, got {type(n_heads).__name__}")
    if n_heads < 1:
        raise ValueError(f"n_heads ({n_heads}) must be at least 1")
    closest = 2 ** math.floor(math.log2(n_heads))  # largest power of two ≤ H
    slopes = _geometric_slopes(closest)
    if closest < n_heads:
        slopes += _geometric_slopes(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=dtype, device=device)


def alibi_bias(
    slopes: torch.Tensor, q_positions: Positions, k_positions: Positions | None = None
) -> torch.Tensor:
    """bias[h, i, j] = −m_h · |q_i − k_j|, (H, T, S), added to the scores before softmax

    On the causal part (k_j ≤ q_i) this is the paper's −m_h · (i − j). Its code adds
    m_h · j instead, which differs by m_h · i, the same for every key of a query row:
    softmax ignores a constant added to a row. Positions are ints or 1-D tensors,
    ``k_positions`` defaulting to ``q_positions``; with a cache, the queries' positions
    are the last ones of the keys'.
    """
    if not (isinstance(slopes, torch.Tensor) and slopes.dim() == 1
            and slopes.is_floating_point()):
        raise ValueError("slopes must be a 1-D float tensor (H,), from alibi_slopes")
    q_pos = _as_positions(q_positions, slopes.device, "q_positions")  # (T,)
    k_pos = q_pos if k_positions is None else _as_positions(
        k_positions, slopes.device, "k_positions")  # (S,)
    if q_pos.dim() != 1 or k_pos.dim() != 1:
        raise ValueError("q_positions and k_positions must be 1-D: (T,) and (S,)")
    distance = (q_pos[:, None] - k_pos[None, :]).abs().to(slopes.dtype)  # (T, S)
    return -slopes[:, None, None] * distance  # (H, 1, 1) * (T, S) -> (H, T, S)
