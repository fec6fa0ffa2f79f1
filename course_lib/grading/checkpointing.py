"""Checkers for exercise 11 (memory in training).

1. ``saved_bytes`` — measure the bytes a function saves for backward with saved-tensor hooks.
2. ``gpt_block_saved_bytes`` — extend the chapter's count to a GPT-style block (LayerNorm with biases,
   GELU FFN, no RoPE, explicit attention), by formula: building or measuring a block is refused.
3. ``checkpointed`` — find and fix the bug in a hand-written checkpoint whose recomputation draws a
   different dropout mask.
4. ``predictions`` — predict four numbers before computing them (a function returning a dict).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from .. import checkpointing as ref
from . import _watch
from ._predictions import predictions_task
from ._core import Case, Forbid, GradingError, Mistake, NumberOutput, Task, TensorOutput, describe

__all__ = ["check_saved_bytes", "check_gpt_block_saved_bytes", "check_checkpointed", "check_memory_predictions"]

_F64, _F32 = torch.float64, torch.float32


# --- Task 1: measuring ---------------------------------------------------------------------------

def _storage(t):
    return t.untyped_storage().data_ptr()


def _measure(fn, args, exclude=(), *, dedupe=True, whole_storage=True, by_identity=False,
             skip_excluded=True, floats_only=False):
    """What a solution with the given mistakes counts (with no switch set: the right count)."""
    exclude = list(exclude)
    excluded = {_storage(p) for p in exclude}
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)  # noqa: F841 — keeps the graph alive while we count
    seen, total = set(), 0
    for t in packed:
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
    return total


def _saved_bytes_reference(fn, args, exclude=()):
    return ref.saved_bytes(fn, *args, exclude=exclude)


def _saved_bytes_cases(gen: torch.Generator) -> list[Case]:
    def randn(*shape, dtype=_F64, grad=True):
        return torch.randn(shape, generator=gen, dtype=_F64).to(dtype).requires_grad_(grad)

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
    x = randn(6)
    cases.append(Case("fn = lambda x: x[1:] * x[:-1] on a float64 tensor of shape (6,) (two views of x that "
                      "start at different addresses)", (lambda a: a[1:] * a[:-1], (x,), ())))
    x = randn(3, 7, dtype=_F32)
    cases.append(Case("fn = lambda x: torch.sigmoid(x) * x on a float32 tensor of shape (3, 7)",
                      (lambda a: torch.sigmoid(a) * a, (x,), ())))
    x, w = randn(6, 8), nn.Parameter(torch.randn(3, generator=gen, dtype=_F64))
    cases.append(Case("fn = lambda x, w: x[:, :3] * w, with x a float64 tensor of shape (6, 8) and the "
                      "parameter w (shape (3,)) excluded: the slice is a view of x",
                      (lambda a, b: a[:, :3] * b, (x, w), (w,))))
    lin = nn.Linear(5, 4).double()
    x = randn(2, 3, 5)
    cases.append(Case("fn = an nn.Linear(5, 4) on a float64 input of shape (2, 3, 5), its parameters excluded",
                      (lin, (x,), tuple(lin.parameters()))))
    table = nn.Parameter(torch.randn(10, 4, generator=gen, dtype=_F64))
    ids = torch.randint(0, 10, (3, 5), generator=gen)
    cases.append(Case("fn = F.embedding(ids, table) with int64 ids of shape (3, 5) and the (10, 4) table "
                      "excluded", (F.embedding, (ids, table), (table,))))
    x = randn(4, 4, dtype=_F32)
    mask = torch.rand(4, 4, generator=gen) > 0.5
    cases.append(Case("fn = lambda x, m: x.masked_fill(m, 0.0) with a float32 tensor of shape (4, 4) and a "
                      "bool mask of the same shape", (lambda a, m: a.masked_fill(m, 0.0), (x, mask), ())))
    w = nn.Parameter(torch.randn(6, 5, generator=gen, dtype=_F64))
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
    w = nn.Parameter(torch.randn(6, generator=gen, dtype=_F64))
    cases.append(Case("fn = lambda x, w: (x * w) * x.exp() with x of shape (4, 6) and the parameter w "
                      "excluded", (lambda a, b: (a * b) * a.exp(), (x, w), (w,))))
    return cases


def _measuring(**mistake):
    return lambda fn, args, exclude=(): _measure(fn, args, exclude, **mistake)


SAVED_BYTES = Task(
    name="saved_bytes", reference=_saved_bytes_reference, cases=_saved_bytes_cases, seed=1101,
    output=NumberOutput("a number of bytes", integer=True), rtol=0.0, atol=0.0,
    mistakes=[
        Mistake("excluded tensors were recognised by identity (`t is p`). Operations often save a *view* "
                "of a parameter (nn.Linear saves the transposed weight), a different tensor object on "
                "the same storage: compare storages, e.g. t.untyped_storage().data_ptr().",
                _measuring(by_identity=True)),
        Mistake("parameters were counted. Everything in `exclude` (usually the parameters) is in memory "
                "anyway; skip a saved tensor whose storage is one of theirs.", _measuring(skip_excluded=False)),
        Mistake("only floating-point tensors were counted. Integer indices (kept by an embedding lookup) "
                "and bool masks (kept by masked_fill) are saved too and take memory.",
                _measuring(floats_only=True)),
        Mistake("the bytes of each saved view were counted every time it was saved. Count each storage "
                "once, and count all of it (t.untyped_storage().nbytes()).",
                _measuring(dedupe=False, whole_storage=False)),
        Mistake("a storage saved several times (the same tensor saved by two operations, or two views "
                "of one buffer) was counted each time. It occupies memory once: count each storage once.",
                _measuring(dedupe=False)),
        Mistake("the bytes of the saved *view* were counted (numel × element size). A saved view keeps "
                "its whole storage alive: count t.untyped_storage().nbytes().", _measuring(whole_storage=False)),
    ],
    forbid=Forbid(modules=(ref,)),  # saved-tensor hooks are the instrument here: allowed
    hint="Print every tensor your pack hook receives (shape, dtype, storage address, storage bytes) for "
         "this case, and decide for each whether it is new memory.",
)

check_saved_bytes = SAVED_BYTES.checker(
    """Check ``saved_bytes(fn, args, exclude=()) -> int``: the bytes of the distinct storages that
    ``fn(*args)`` saves for backward, storages of ``exclude`` not counted.""")


# --- Task 2: a GPT-style block, by formula ------------------------------------------------------------

def _gpt_formula(batch, seq_len, d_model, n_heads, d_ff, *, centred=2, rstd=True, norm_out=True,
                 gelu_tensors=2, n_weights=2, masks=True, w_o_input=True, rope=False, bytes_per=4,
                 params=False, kv_heads=None):
    """Bytes a float32 GPT-style block saves on the explicit attention path (T, H ≥ 2), with switches
    that reproduce the common mistakes. Per LayerNorm: x − μ (computed twice, for σ² and for the
    division), 1/σ, the normalised x̂ (for γ), its output (for the next linear layers)."""
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    D_h = D // H
    per_norm = (centred + (1 if norm_out else 0)) * D + 1 * D + (1 if rstd else 0)  # x − μ, x̂, output, 1/σ
    e = B * T * 2 * per_norm
    h_kv = H if kv_heads is None else kv_heads
    e += B * T * (H * D_h + 2 * h_kv * D_h)  # q, k, v (multi-head: H heads each)
    e += n_weights * B * H * T * T  # softmax output and masked weights
    e += B * T * H * D_h if w_o_input else 0  # the heads concatenated, w_o's input
    e += gelu_tensors * B * T * F_  # GELU's input and output (w_down's input)
    e += T * D_h if rope else 0
    if params:
        e += 4 * D * D + 4 * D + 2 * D * F_ + D + F_ + 4 * D
    total = bytes_per * e
    if masks:
        total += 2 * T * T  # two bool (T, T) causal masks, one byte per element
    return total


def _gpt_reference(batch, seq_len, d_model, n_heads, d_ff):
    return _gpt_formula(batch, seq_len, d_model, n_heads, d_ff)


def _gpt_cases(gen: torch.Generator) -> list[Case]:
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    shapes = [(1, 8, 64, 4, 256), (2, 16, 64, 4, 172), (3, 5, 96, 8, 384), (1, 2, 32, 2, 88)]
    for _ in range(5):
        H = pick([2, 4, 6, 8])
        shapes.append((pick([1, 2, 3]), pick([2, 3, 9, 17, 32]), H * pick([8, 16, 24]), H,
                       pick([40, 100, 172, 344])))
    return [Case(f"batch={B}, seq_len={T}, d_model={D}, n_heads={H}, d_ff={F_}", (B, T, D, H, F_))
            for B, T, D, H, F_ in shapes]


def _gpt(**mistake):
    return lambda *a: _gpt_formula(*a, **mistake)


GPT_BLOCK_SAVED_BYTES = Task(
    name="gpt_block_saved_bytes", reference=_gpt_reference, cases=_gpt_cases, seed=1102,
    output=NumberOutput("a number of bytes", integer=True), rtol=0.0, atol=0.0,
    mistakes=[
        Mistake("each LayerNorm keeps x − μ twice: course_lib's layer_norm computes it once for the variance "
                "and again for the division, two separate tensors, each saved by its own operation.",
                _gpt(centred=1)),
        Mistake("each LayerNorm also keeps 1/σ, one float per position (saved by rsqrt and by the product).",
                _gpt(rstd=False)),
        Mistake("each LayerNorm's output is kept too: the linear layers that read it save their input.",
                _gpt(norm_out=False)),
        Mistake("the GELU FFN keeps two (B, T, F) tensors: GELU's input (for its derivative) and its output "
                "(w_down's input). It has no gate: SwiGLU's four tensors do not apply.", _gpt(gelu_tensors=4)),
        Mistake("the GELU FFN keeps two (B, T, F) tensors: GELU's input (for its derivative) and its output "
                "(w_down's input).", _gpt(gelu_tensors=1)),
        Mistake("the explicit path keeps two (B, H, T, T) tensors, not one: the softmax output (kept by "
                "softmax) and the masked weights (kept by the product with V).", _gpt(n_weights=1)),
        Mistake("the two bool causal masks are missing (one byte per element, T × T each): masked_fill "
                "keeps the mask it was given, and each masked_fill gets a fresh ~mask.", _gpt(masks=False)),
        Mistake("the input of w_o — the heads concatenated, a copy made by reshape — is saved by w_o.",
                _gpt(w_o_input=False)),
        Mistake("this block has no RoPE (positional='none'): there are no cos and sin tables to keep.",
                _gpt(rope=True)),
        Mistake("the parameters (weights and biases) were counted. They are in memory whether or not "
                "anything is saved; adding a bias saves nothing either.", _gpt(params=True)),
        Mistake("you counted elements, not bytes: float32 takes 4 bytes per element (bool masks 1).",
                _gpt(bytes_per=1)),
    ],
    forbid=Forbid(modules=(ref,), models=True),
    hint="Go through the block operation by operation, as the chapter does for the pre-norm block, and "
         "check each part with your saved_bytes on one LayerNorm, the attention, and the FFN alone.",
)

check_gpt_block_saved_bytes = GPT_BLOCK_SAVED_BYTES.checker(
    """Check ``gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff) -> int``: the bytes a float32
    GPT-style block (LayerNorm with bias, multi-head attention on the explicit path, GELU FFN, biases, no
    RoPE) saves for backward, parameters excluded.""")


# --- Task 3: a checkpoint that recomputes with the same random numbers (find and fix) -----------------------

def _fns(gen):
    w1 = torch.randn(6, 6, generator=gen, dtype=_F64) / 2
    w2 = torch.randn(6, 6, generator=gen, dtype=_F64) / 2
    return [
        ("dropout(tanh(x @ w), p=0.5)", lambda x: F.dropout(torch.tanh(x @ w1.to(x.dtype)), p=0.5), (4, 6), _F64),
        ("x * dropout(sigmoid(x), p=0.3)", lambda x: x * F.dropout(torch.sigmoid(x), p=0.3), (3, 8), _F32),
        ("tanh(x) ** 2 (no randomness)", lambda x: torch.tanh(x) ** 2, (5,), _F64),
        ("dropout(relu(dropout(x, p=0.2) @ w1), p=0.4) @ w2 (two dropouts)",
         lambda x: F.dropout(torch.relu(F.dropout(x, p=0.2) @ w1.to(x.dtype)), p=0.4) @ w2.to(x.dtype),
         (2, 3, 6), _F64),
        ("tanh(x + 0.5 · randn_like(x)) (noise)", lambda x: torch.tanh(x + 0.5 * torch.randn_like(x)), (4, 5),
         _F64),
        ("rand_like(x) * exp(x)", lambda x: torch.rand_like(x) * x.exp(), (2, 7), _F32),
    ]


def _checkpoint_cases(gen) -> list[Case]:
    cases = []
    for i, (what, fn, shape, dtype) in enumerate(_fns(gen)):
        x = torch.randn(shape, generator=gen, dtype=_F64).to(dtype)
        grad_y = torch.randn(shape, generator=gen, dtype=_F64).to(dtype)
        cases.append(Case(f"fn(x) = {what}, x {describe(x)}, seed {i}", (fn, x, grad_y, 100 + i)))
    return cases


def _start_stream(seed):
    """Seed the generator, then draw a few numbers: the call happens in the middle of a random stream,
    as in training (so restarting from the initial seed is not the same as restoring the state)."""
    torch.manual_seed(seed)
    torch.rand(3 + seed % 5)


def _plain(fn, x, grad_y, seed):
    """What backward through fn itself gives: y = fn(x) and grad_y backpropagated, same stream."""
    x = x.detach().requires_grad_()
    _start_stream(seed)
    y = fn(x)
    (grad,) = torch.autograd.grad(y, x, grad_y)
    return torch.cat([y.detach().reshape(-1), grad.reshape(-1)])


def _fresh_mask(fn, x, grad_y, seed):
    """The given bug: the recomputation continues the random stream, so it draws new masks."""
    _start_stream(seed)
    with torch.no_grad():
        y = fn(x)
    x2 = x.detach().requires_grad_()
    (grad,) = torch.autograd.grad(fn(x2), x2, grad_y)
    return torch.cat([y.reshape(-1), grad.reshape(-1)])


def _reseeded(seed_used):
    """Reseeding in forward and in backward (a constant, or the initial seed): consistent, but not the
    caller's stream."""
    def compute(fn, x, grad_y, seed):
        x = x.detach().requires_grad_()
        torch.manual_seed(seed if seed_used is None else seed_used)
        y = fn(x)
        (grad,) = torch.autograd.grad(y, x, grad_y)
        return torch.cat([y.detach().reshape(-1), grad.reshape(-1)])
    return compute


def _grad_is_grad_y(fn, x, grad_y, seed):
    _start_stream(seed)
    with torch.no_grad():
        y = fn(x)
    return torch.cat([y.reshape(-1), grad_y.reshape(-1)])


def _run_checkpointed(student, fn, x, grad_y, seed):
    """Call the student's checkpoint under a saved-tensor log; backpropagate grad_y; return y and x's gradient."""
    x = x.detach().requires_grad_()
    saved = []

    def pack(t):
        saved.append(t)
        return t

    _start_stream(seed)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = student(fn, x)
    if not isinstance(y, torch.Tensor):
        raise GradingError(f"`checkpointed` returned a {type(y).__name__}; it should return fn(x), a tensor.")
    if y.shape != x.shape:
        raise GradingError(f"`checkpointed` returned shape {tuple(y.shape)} for x {describe(x)}; every fn here "
                           f"keeps x's shape: return what fn(x) returns.")
    if _watch._current and _watch._current[-1].offence is not None:
        return torch.zeros(0)  # a forbidden call: let the grader report it, not its consequences
    if not y.requires_grad:
        raise GradingError("`checkpointed` returned a tensor with no graph (requires_grad is False): backward "
                           "cannot reach x. Return the output of your autograd.Function's apply(...).")
    kept = {t.untyped_storage().data_ptr(): t for t in saved
            if t.is_floating_point() and t.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()}
    if kept:
        raise GradingError("`checkpointed` keeps tensors computed inside fn for backward "
                           f"({len(kept)} of them), so it saves no memory: that is plain autograd, not "
                           "checkpointing. Run fn under torch.no_grad() in forward, keep only x, and run fn "
                           "again in backward.")
    y.backward(grad_y)
    if x.grad is None:
        raise GradingError("after backward, x has no gradient: the backward of your Function must return "
                           "the gradient for x (and None for fn).")
    return torch.cat([y.detach().reshape(-1), x.grad.reshape(-1)])


# torch's own checkpointing, by function: forbidding the whole module would also catch generic code that
# its classes carry (an Enum's __new__, torch's dynamo-disabling wrapper), which every solution runs.
_tc = torch.utils.checkpoint
_TORCH_CHECKPOINT = (
    (getattr(_tc.checkpoint, "__wrapped__", _tc.checkpoint), "torch.utils.checkpoint.checkpoint"),
    (_tc.checkpoint_sequential, "torch.utils.checkpoint.checkpoint_sequential"),
    (_tc.CheckpointFunction, "torch.utils.checkpoint (its reentrant CheckpointFunction)"),
    (_tc._checkpoint_without_reentrant_generator, "torch.utils.checkpoint (its non-reentrant variant)"),
)

CHECKPOINTED = Task(
    name="checkpointed", reference=_plain, cases=_checkpoint_cases, seed=1103, run=_run_checkpointed,
    output=TensorOutput("the dtype of x (the output and the gradient)"), rtol=1e-5, atol=1e-6,
    mistakes=[
        Mistake("the recomputation in backward draws new random numbers (a fresh dropout mask), so the "
                "gradient belongs to a different function than the output. Save the generator's state "
                "in forward, BEFORE running fn (torch.get_rng_state()), and restore it before running fn "
                "again in backward — inside torch.random.fork_rng(), so the caller's random stream is not "
                "disturbed.", _fresh_mask),
        Mistake("the generator is reseeded (with a fixed number): every call then draws the same masks, "
                "whatever the caller's random state, and the output is not what fn(x) gives at this point "
                "of the stream. Save and restore the generator's state instead (torch.get_rng_state, "
                "torch.set_rng_state).", _reseeded(0)),
        Mistake("the generator is reseeded with its initial seed: that restarts the random stream from its "
                "beginning instead of where fn was called, so the output is not what fn(x) gives at this "
                "point of the stream. Save the generator's state (torch.get_rng_state()) and restore it "
                "(torch.set_rng_state).", _reseeded(None)),
        Mistake("backward returns grad_y itself as x's gradient: backpropagate it through the recomputed "
                "fn, e.g. torch.autograd.grad(y, x, grad_y).", _grad_is_grad_y),
    ],
    forbid=Forbid(modules=(ref,), functions=_TORCH_CHECKPOINT),
    hint="Compare your gradient with plain autograd on the same seed, for a fn with dropout and for one "
         "without: which random numbers does each call of fn draw?",
)

check_checkpointed = CHECKPOINTED.checker(
    """Check ``checkpointed(fn, x) -> y``: y = fn(x) keeping only x for backward, whose recomputation of
    fn draws the same random numbers as the forward pass (the gradient equals plain autograd's on the
    same seed).""")


# --- Task 4: predictions ----------------------------------------------------------------------------------


_WRONG_PREDICTIONS = {
    "checkpointed_gib": [
        (0.5, "the model trains in float32: 4 bytes per number, not 2."),
        (1 / 32, "every one of the 32 checkpointed blocks keeps its own input."),
        (32 * 4 * 2048 * 4096 / 1e9, "that is in GB (10⁹ bytes); the question asks for GiB (2³⁰ bytes)."),
        (2.0, "each block's input was counted with its output: the output of one block IS the next block's "
              "input, one tensor, kept once."),
    ],
    "best_segment": [
        (8.0, "√N is the answer when a block's activations cost as much as its input (m = a). Here "
              "m = 16a: minimise (N/k)·a + k·m over k."),
        (1.0, "k = 1 keeps every block's input (N·a) and recomputes one block at a time (m): add them up "
              "and compare with k = 2 and k = 4."),
        (4.0, "set the derivative of (N/k)·a + k·m to zero: k² = N·a/m."),
        (16.0, "set the derivative of (N/k)·a + k·m to zero: k² = N·a/m, not m/a."),
        (32.0, "set the derivative of (N/k)·a + k·m to zero: k² = N·a/m."),
    ],
    "flop_ratio_half": [
        (4 / 3, "that is the ratio when EVERY block is checkpointed; here only half of them run their "
                "forward pass again."),
        (1.5, "a step is forward + backward ≈ 3 forward-equivalents; the recomputation adds half a forward "
              "(half the blocks), not half a step."),
        (2.0, "checkpointing does not double a step: backward costs about twice the forward, and only the "
              "checkpointed blocks' forward runs again."),
        (7 / 4, "a step is forward (F) plus backward (2F), and the recomputation adds F/2: compare with 3F."),
    ],
    "init_loss": [
        (math.log(65), "ln V is the loss of a model whose logits are all equal. Random weights give random "
                       "logits of variance Dσ², which raise the expected loss by Dσ²/2."),
        (math.log2(65), "that is log₂ V in bits; the loss is in nats, and the random logits add Dσ²/2."),
        (math.log(65) + 512 * 0.02**2, "the logits' variance is Dσ², but the loss rises by HALF of it: "
                                       "E[e^z] = e^(s²/2) for z ~ N(0, s²)."),
        (65.0, "65 would be the perplexity of a uniform guess; the question asks for the loss in nats."),
    ],
}


def _true_predictions() -> dict[str, float]:
    N, k_options = 64, [k for k in range(1, 65) if 64 % k == 0]
    peak = {k: (N / k) * 1.0 + k * 16.0 for k in k_options}  # a = 1, m = 16
    return {
        "checkpointed_gib": 32 * 4 * 2048 * 4096 / 2**30,
        "best_segment": float(min(peak, key=peak.get)),
        "flop_ratio_half": (3 + 0.5) / 3,
        "init_loss": math.log(65) + 512 * 0.02**2 / 2,
    }


MEMORY_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=1104,
    rtol=3e-3,
    atol=1e-6,
    forbid=Forbid(modules=(ref,), models=True),
    advice="Work it out on paper from the chapter first, then run the cell below.",
)

check_memory_predictions = MEMORY_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the stored inputs of a checkpointed 32-block model (GiB), the best
    segment length for 64 blocks with m = 16a, the FLOP ratio with half the blocks checkpointed, and the
    loss at initialisation for V = 65, D = 512, σ = 0.02.""")
