"""Checkers for exercise 11 (memory in training): the bytes a function saves for backward, measured
with saved-tensor hooks, and the bytes one float32 pre-norm block saves, predicted by a formula."""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F
from torch import nn

from .. import checkpointing as ref
from ._core import Case, Forbidden, GradingError, Mistake, check_function

__all__ = ["check_saved_bytes", "check_block_saved_bytes"]

_REFERENCES = [
    Forbidden(ref.saved_bytes, "course_lib.checkpointing.saved_bytes"),
    Forbidden(ref.SavedTensorLog.__init__, "course_lib.checkpointing.SavedTensorLog"),
    Forbidden(ref.block_saved_bytes, "course_lib.checkpointing.block_saved_bytes"),
    Forbidden(ref.block_saved_breakdown, "course_lib.checkpointing.block_saved_breakdown"),
]


def _as_int_tensor(out, task: str, what: str) -> torch.Tensor:
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = out.item()
    if isinstance(out, bool) or not isinstance(out, numbers.Integral):
        raise GradingError(f"{task} returned a {type(out).__name__}; it should return {what} as an int.")
    return torch.tensor(int(out), dtype=torch.int64)


# --- task 1: measuring ---------------------------------------------------------------------------

def _packed(fn, args):
    """Every tensor fn(*args) hands to the pack hook, in order (kept alive until we are done)."""
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)  # noqa: F841 — keeps the graph alive while we count
    return packed


def _storage(t):
    return t.untyped_storage().data_ptr()


def _measure(fn, args, exclude=(), *, dedupe=True, whole_storage=True, by_identity=False,
             skip_excluded=True, floats_only=False):
    """What a solution with the given mistakes would count (with no switch set: the right count)."""
    exclude = list(exclude)
    excluded = {_storage(p) for p in exclude}
    seen, total = set(), 0
    for t in _packed(fn, args):
        if skip_excluded:
            if by_identity:
                if any(t is p for p in exclude):
                    continue
            elif _storage(t) in excluded:
                continue
        if floats_only and not t.is_floating_point():
            continue
        key = _storage(t)
        if dedupe and key in seen:
            continue
        seen.add(key)
        total += t.untyped_storage().nbytes() if whole_storage else t.numel() * t.element_size()
    return torch.tensor(total, dtype=torch.int64)


def _saved_bytes_cases(gen: torch.Generator) -> list[Case]:
    def randn(*shape, dtype=torch.float64, grad=True):
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(grad)

    cases = []
    x = randn(4, 6)
    cases.append(Case("fn = torch.exp on a float64 tensor of shape (4, 6) (exp keeps its output)",
                      (torch.exp, (x,), ())))
    x = randn(5, 6)
    cases.append(Case("fn = lambda x: x[:, :2] * x[:, :2] on a float64 tensor of shape (5, 6) (two views "
                      "of x, both saved)", (lambda a: a[:, :2] * a[:, :2], (x,), ())))
    x = randn(5, 3)
    cases.append(Case("fn = lambda x: x * x on a float64 tensor of shape (5, 3) (x is saved twice)",
                      (lambda a: a * a, (x,), ())))
    x = randn(3, 7, dtype=torch.float32)
    cases.append(Case("fn = lambda x: torch.sigmoid(x) * x on a float32 tensor of shape (3, 7)",
                      (lambda a: torch.sigmoid(a) * a, (x,), ())))
    x, w = randn(6, 8), nn.Parameter(torch.randn(3, generator=gen, dtype=torch.float64))
    cases.append(Case("fn = lambda x, w: x[:, :3] * w, with x a float64 tensor of shape (6, 8) and the "
                      "parameter w (shape (3,)) excluded: the slice is a view of x",
                      (lambda a, b: a[:, :3] * b, (x, w), (w,))))
    lin = nn.Linear(5, 4).double()
    x = randn(2, 3, 5)
    cases.append(Case("fn = an nn.Linear(5, 4) on a float64 input of shape (2, 3, 5), its parameters excluded",
                      (lin, (x,), tuple(lin.parameters()))))
    table = nn.Parameter(torch.randn(10, 4, generator=gen, dtype=torch.float64))
    ids = torch.randint(0, 10, (3, 5), generator=gen)
    cases.append(Case("fn = F.embedding(ids, table) with int64 ids of shape (3, 5) and the (10, 4) table "
                      "excluded", (F.embedding, (ids, table), (table,))))
    x = randn(4, 4, dtype=torch.float32)
    mask = torch.rand(4, 4, generator=gen) > 0.5
    cases.append(Case("fn = lambda x, m: x.masked_fill(m, 0.0) with a float32 tensor of shape (4, 4) and a "
                      "bool mask of the same shape", (lambda a, m: a.masked_fill(m, 0.0), (x, mask), ())))
    w = nn.Parameter(torch.randn(6, 5, generator=gen, dtype=torch.float64))
    x = randn(4, 5)
    cases.append(Case("fn = lambda x, w: torch.relu(x @ w.t()) with x of shape (4, 5) and the parameter w "
                      "of shape (6, 5) excluded", (lambda a, b: torch.relu(a @ b.t()), (x, w), (w,))))
    mlp = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 6)).double()
    x = randn(3, 6)
    cases.append(Case("fn = a two-layer GELU MLP (6 → 12 → 6) on a float64 input of shape (3, 6), "
                      "its parameters excluded", (mlp, (x,), tuple(mlp.parameters()))))
    x = randn(2, 8, dtype=torch.float16)
    cases.append(Case("fn = torch.exp on a float16 tensor of shape (2, 8)", (torch.exp, (x,), ())))
    x = randn(3, 3, grad=False)
    cases.append(Case("fn = torch.exp on a tensor that does not require grad (nothing to save)",
                      (torch.exp, (x,), ())))
    x = randn(4, 6)
    w = nn.Parameter(torch.randn(6, generator=gen, dtype=torch.float64))
    cases.append(Case("fn = lambda x, w: (x * w) * x.exp() with x of shape (4, 6) and the parameter w "
                      "excluded", (lambda a, b: (a * b) * a.exp(), (x, w), (w,))))
    return cases


def check_saved_bytes(saved_bytes) -> None:
    """Check ``saved_bytes(fn, args, exclude=())``: the bytes of the distinct storages that
    ``fn(*args)`` saves for backward, storages of ``exclude`` not counted."""
    task = "saved_bytes"
    cases = _saved_bytes_cases(torch.Generator().manual_seed(1101))

    def student(fn, args, exclude):
        return _as_int_tensor(saved_bytes(fn, args, exclude), task, "a number of bytes")

    mistakes = [
        Mistake("excluded tensors were recognised by identity (`t is p`). Operations often save a *view* "
                "of a parameter (nn.Linear saves the transposed weight), a different tensor object on "
                "the same storage: compare storages, e.g. t.untyped_storage().data_ptr().",
                lambda fn, args, exclude: _measure(fn, args, exclude, by_identity=True)),
        Mistake("parameters were counted. Everything in `exclude` (usually the parameters) is in memory "
                "anyway; skip a saved tensor whose storage is one of theirs.",
                lambda fn, args, exclude: _measure(fn, args, exclude, skip_excluded=False)),
        Mistake("only floating-point tensors were counted. Integer indices (kept by an embedding lookup) "
                "and bool masks (kept by masked_fill) are saved too and take memory.",
                lambda fn, args, exclude: _measure(fn, args, exclude, floats_only=True)),
        Mistake("the bytes of each saved view were counted every time it was saved. Count each storage "
                "once, and count all of it (t.untyped_storage().nbytes()).",
                lambda fn, args, exclude: _measure(fn, args, exclude, dedupe=False, whole_storage=False)),
        Mistake("a storage saved several times (the same tensor saved by two operations, or two views "
                "of one buffer) was counted each time. It occupies memory once: count each storage once.",
                lambda fn, args, exclude: _measure(fn, args, exclude, dedupe=False)),
        Mistake("the bytes of the saved *view* were counted (numel × element size). A saved view keeps "
                "its whole storage alive: count t.untyped_storage().nbytes().",
                lambda fn, args, exclude: _measure(fn, args, exclude, whole_storage=False)),
    ]
    def reference(fn, args, exclude):
        return torch.tensor(ref.saved_bytes(fn, *args, exclude=exclude), dtype=torch.int64)

    check_function(student, reference, cases, task=task, mistakes=mistakes, forbidden=_REFERENCES,
                   rtol=0.0, atol=0.0)


# --- task 2: predicting --------------------------------------------------------------------------

def _formula(B, T, D, H, H_kv, F_, attention, *, kv_heads=None, n_weights=2, masks=True, lse=True,
             rms=True, rope=True, norm_tensors=3, swiglu_tensors=4, w_o_input=True, bytes_per=4,
             params=False):
    """The block formula (T, H ≥ 2) with switches that reproduce the common mistakes."""
    D_h = D // H
    kv_heads = {None: H_kv if attention == "sdpa" else H, "H": H, "H_kv": H_kv}[kv_heads]
    e = 2 * norm_tensors * B * T * D + (2 * B * T if rms else 0)
    e += T * D_h if rope else 0
    e += B * H * T * D_h + 2 * B * kv_heads * T * D_h  # q, k, v
    if attention == "sdpa":
        e += B * H * T * D_h + (B * H * T if lse else 0)
    else:
        e += n_weights * B * H * T * T
    e += B * T * H * D_h if w_o_input else 0
    e += swiglu_tensors * B * T * F_
    if params:
        e += D * H * D_h + 2 * D * H_kv * D_h + H * D_h * D + 3 * D * F_ + 2 * D
    total = bytes_per * e
    if attention == "reference" and masks:
        total += 2 * T * T  # two bool masks, 1 byte per element
    return torch.tensor(total, dtype=torch.int64)


def _block_cases(gen: torch.Generator) -> list[Case]:
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    shapes = [(1, 8, 64, 4, 2, 172), (2, 16, 64, 4, 4, 172), (3, 5, 96, 8, 1, 256), (1, 2, 32, 2, 1, 88)]
    for _ in range(6):
        H = pick([2, 4, 6, 8])
        H_kv = pick([h for h in (1, 2, 3, 4, 6, 8) if H % h == 0])
        D = H * pick([8, 16, 24])
        shapes.append((pick([1, 2, 3]), pick([2, 3, 9, 17, 32]), D, H, H_kv, pick([40, 100, 172, 344])))
    cases = []
    for B, T, D, H, H_kv, F_ in shapes:
        for attention in ("sdpa", "reference"):
            label = (f"batch={B}, seq_len={T}, d_model={D}, n_heads={H}, n_kv_heads={H_kv}, d_ff={F_}, "
                     f"attention={attention!r}")
            cases.append(Case(label, (B, T, D, H, H_kv, F_, attention)))
    return cases


def check_block_saved_bytes(block_saved_bytes) -> None:
    """Check ``block_saved_bytes(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention)``: the
    bytes one float32 pre-norm block (RMSNorm, GQA with RoPE, SwiGLU) saves for backward."""
    task = "block_saved_bytes"

    def student(B, T, D, H, H_kv, F_, attention):
        return _as_int_tensor(block_saved_bytes(B, T, D, H, H_kv, F_, attention), task, "a number of bytes")

    def reference(B, T, D, H, H_kv, F_, attention):
        return torch.tensor(ref.block_saved_bytes(B, T, D, H, H_kv, F_, attention=attention))

    def on(attention, **switches):
        def compute(B, T, D, H, H_kv, F_, att):
            if att != attention:
                raise ValueError("this mistake concerns the other attention path")
            return _formula(B, T, D, H, H_kv, F_, att, **switches)
        return compute

    def both(**switches):
        return lambda B, T, D, H, H_kv, F_, att: _formula(B, T, D, H, H_kv, F_, att, **switches)

    mistakes = [
        Mistake("the explicit path's K and V were counted with n_kv_heads heads. It saves the copies "
                "repeat_kv makes: n_heads heads each.", on("reference", kv_heads="H_kv")),
        Mistake("the fused path's K and V were counted with n_heads heads. The kernel groups the query "
                "heads itself (enable_gqa) and keeps K and V as they are: n_kv_heads heads each.",
                on("sdpa", kv_heads="H")),
        Mistake("the explicit path keeps two (B, H, T, T) tensors, not one: the softmax output (kept by "
                "softmax) and the masked weights (kept by the product with V).", on("reference", n_weights=1)),
        Mistake("the two bool causal masks are missing (one byte per element, T × T each): masked_fill "
                "keeps the mask it was given, and each masked_fill gets a fresh ~mask.",
                on("reference", masks=False)),
        Mistake("the kernel's log-sum-exp (one float per query and head) is missing.", on("sdpa", lse=False)),
        Mistake("each RMSNorm also keeps 1/rms(x), one float per position.", both(rms=False)),
        Mistake("the RoPE tables cos and sin (T × D_h/2 each) are saved too: the rotation multiplies q and "
                "k by them.", both(rope=False)),
        Mistake("each RMSNorm keeps three (B, T, D) tensors: its input x, x/rms(x) (kept by the product "
                "with the gain) and its output (kept by the projections that read it).",
                both(norm_tensors=2)),
        Mistake("the input of w_o — the heads concatenated, a copy made by reshape — is saved by w_o.",
                both(w_o_input=False)),
        Mistake("SwiGLU keeps four (B, T, F) tensors: the gate's pre-activation (for SiLU's derivative), "
                "SiLU(gate) and up (for the product's), and their product (for w_down's).",
                both(swiglu_tensors=3)),
        Mistake("the parameters were counted. They are in memory whether or not anything is saved; the "
                "count excludes them.", both(params=True)),
        Mistake("you counted elements, not bytes: float32 takes 4 bytes per element (bool masks 1).",
                both(bytes_per=1)),
    ]
    check_function(student, reference, _block_cases(torch.Generator().manual_seed(1102)), task=task,
                   mistakes=mistakes, forbidden=_REFERENCES, rtol=0.0, atol=0.0)
