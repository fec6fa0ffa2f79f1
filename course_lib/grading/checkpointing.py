"""Checkers for exercise 11 (memory in training).

1. ``saved_bytes`` — measure the bytes a function saves for backward with saved-tensor hooks.
2. ``gpt_block_saved_bytes`` — derive what a GPT-style block (LayerNorm with biases, GELU FFN, no RoPE,
   explicit attention) must keep for backward, from what each operation's derivative reads, by formula:
   building or measuring a block is refused.
3. ``checkpointed`` — find and fix the bug in a hand-written checkpoint whose recomputation draws a
   different dropout mask.
4. ``predictions`` — predict four numbers before computing them (a function returning a dict).

A wrong answer is named from what it gets wrong (``_discrepancy``): the way of counting (unit, storage,
which tensors, what is excluded) that gives the student's numbers on every case; the tensors, by shape, a
block count has too many or too few; where the random generator is left after the checkpoint's forward
and backward (the caller draws between the two passes and after them), and whether the gradient goes
wrong only for functions that draw random numbers.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from fractions import Fraction

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from .. import checkpointing as ref
from . import _watch
from ._predictions import predictions_task
from ._core import Case, Forbid, GradingError, NumberOutput, Task, TensorOutput, describe
from ._discrepancy import (by_factors, count_words, fit_terms, probe, reasoned_predictions, recall, remember,
                           remembering, safe, same_tensor)

__all__ = ["check_saved_bytes", "check_gpt_block_saved_bytes", "check_checkpointed", "check_memory_predictions"]

_F64, _F32 = torch.float64, torch.float32


# --- Task 1: measuring ---------------------------------------------------------------------------

def _storage(t):
    return t.untyped_storage().data_ptr()


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


def _saved_log(fn, args):
    """Every tensor fn(*args) saves for backward, in order, with the graph kept alive while we look."""
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return packed, out


# The ways of counting a saved tensor, dimension by dimension: the first choice of each is the right one,
# the others are what a count can do instead (and what the message says about it).
_UNITS = {
    "storage": None,
    "view": "the bytes of the saved *view* were counted (numel × element size). A saved view keeps its whole "
            "storage alive: count t.untyped_storage().nbytes()",
    "elements": "that is a number of elements, not bytes: count t.untyped_storage().nbytes(), which knows each "
                "dtype's size",
    "view-float32": "each saved tensor was counted as numel × 4 bytes: the size of an element depends on the "
                    "dtype (8 for float64 and int64, 1 for bool), and a view keeps its whole storage: count "
                    "t.untyped_storage().nbytes()",
    "quarter": "the bytes were divided by 4, as if every tensor were a float32 to count in elements: the task "
               "asks for bytes, t.untyped_storage().nbytes() as it is",
}
_DEDUPE = {
    "storage": None,
    "none": "a storage saved several times (the same tensor saved by two operations, or two views of one "
            "buffer) was counted each time. It occupies memory once: count each storage once",
    "address": "storages were told apart by t.data_ptr(), the address of the view's first element: two views of "
               "one buffer at different offsets then count as two. Use t.untyped_storage().data_ptr()",
}
_WHICH = {
    "all": None,
    "floats": "only floating-point tensors were counted. Integer indices (kept by an embedding lookup) and bool "
              "masks (kept by masked_fill) are saved too and take memory",
    "grad": "only tensors that require grad were counted. What backward reads is saved whether or not it needs a "
            "gradient itself: integer indices, bool masks",
    "non-leaf": "leaf tensors (the inputs) were left out. An input that an operation saves is kept alive for "
                "backward like anything else; only the storages in `exclude` are skipped",
}
_EXCLUDE = {
    "storage": None,
    "identity": "excluded tensors were recognised by identity (`t is p`). Operations often save a *view* of a "
                "parameter (nn.Linear saves the transposed weight), a different tensor object on the same storage: "
                "compare storages, e.g. t.untyped_storage().data_ptr()",
    "none": "parameters were counted. Everything in `exclude` (usually the parameters) is in memory anyway; skip "
            "a saved tensor whose storage is one of theirs",
    "with-inputs": "the inputs' storages were skipped as well as those in `exclude`. An input that an operation "
                   "saves is kept for backward: only the storages of `exclude` are skipped",
}
_OUTPUT = {False: None, True: "the output of fn was added. It is not saved for backward by fn (unless an operation "
                                 "saves it, as exp does); the task counts what the pack hook receives"}


def _count_saved(packed, out, args, exclude, unit, dedupe, which, excluding, output) -> int:
    def ptr(t):
        return t.untyped_storage().data_ptr()

    skip_storage = {ptr(p) for p in exclude}
    if excluding == "with-inputs":
        skip_storage |= {ptr(a) for a in args if isinstance(a, torch.Tensor)}
    seen, total = set(), 0
    for t in packed:
        if excluding in ("storage", "with-inputs") and ptr(t) in skip_storage:
            continue
        if excluding == "identity" and any(t is p for p in exclude):
            continue
        if which == "floats" and not t.is_floating_point():
            continue
        if which == "grad" and not t.requires_grad:
            continue
        if which == "non-leaf" and t.is_leaf:
            continue
        key = {"storage": ptr(t), "address": t.data_ptr(), "none": len(seen)}[dedupe]
        if key in seen:
            continue
        seen.add(key)
        total += {"storage": lambda: t.untyped_storage().nbytes(), "view": lambda: t.numel() * t.element_size(),
                  "elements": lambda: t.untyped_storage().nbytes() // t.element_size(),
                  "view-float32": lambda: 4 * t.numel(),
                  "quarter": lambda: t.untyped_storage().nbytes() // 4}[unit]()
    if output and isinstance(out, torch.Tensor):
        total += out.untyped_storage().nbytes()
    return total


@safe
def _saved_bytes_explain(got, want, case: Case) -> str | None:
    """Which way of counting gives the student's number: tried dimension by dimension (unit, what counts as
    one storage, which tensors, what is excluded, the output), kept only if it also gives the student's
    numbers on the task's other cases; the explanation with the fewest departures wins."""
    fn, args, exclude = case.args
    packed, out = _saved_log(fn, args)
    fits = [choice for choice in itertools.product(_UNITS, _DEDUPE, _WHICH, _EXCLUDE, _OUTPUT)
            if _count_saved(packed, out, args, tuple(exclude), *choice) == got]
    if fits:
        student = recall()
        for other in _saved_bytes_cases(torch.Generator().manual_seed(SAVED_BYTES.seed)):
            o_fn, o_args, o_exclude = other.args
            answer = probe(o_fn, o_args, o_exclude)
            if not isinstance(answer, int) or student is None:
                continue
            o_packed, o_out = _saved_log(o_fn, o_args)
            narrowed = [c for c in fits if _count_saved(o_packed, o_out, o_args, tuple(o_exclude), *c) == answer]
            fits = narrowed or fits  # an answer no rule explains (a crash, a fluke) narrows nothing
        tables = (_UNITS, _DEDUPE, _WHICH, _EXCLUDE, _OUTPUT)
        stories = sorted(([t[c] for t, c in zip(tables, choice) if t[c]] for choice in fits), key=len)
        if stories and stories[0]:
            return "; and ".join(stories[0]) + "."
    if got == 0:
        return ("your count is 0: the pack hook saw nothing. Register the hooks around the call itself, "
                "`with torch.autograd.graph.saved_tensors_hooks(pack, unpack): out = fn(*args)`, and add up what "
                "pack receives (memory counters such as torch.cuda.memory_allocated() say nothing on the CPU).")
    return None


SAVED_BYTES = Task(
    name="saved_bytes", reference=_saved_bytes_reference, cases=_saved_bytes_cases, seed=1101, run=remembering,
    output=NumberOutput("a number of bytes", integer=True), rtol=0.0, atol=0.0, explain=_saved_bytes_explain,
    forbid=Forbid(modules=(ref,)),  # saved-tensor hooks are the instrument here: allowed
    hint="Print every tensor your pack hook receives (shape, dtype, storage address, storage bytes) for "
         "this case, and decide for each whether it is new memory.",
)

check_saved_bytes = SAVED_BYTES.checker(
    """Check ``saved_bytes(fn, args, exclude=()) -> int``: the bytes of the distinct storages that
    ``fn(*args)`` saves for backward, storages of ``exclude`` not counted.""")


# --- Task 2: what a GPT-style block must keep, by formula --------------------------------------------------
#
# The block of the exercise keeps, operation by operation, what its derivative reads (the notebook writes
# it that way, with a LayerNorm Function that keeps x̂ and 1/σ), and tests/test_grading_checkpointing.py
# measures that block against this formula. In elements of 4 bytes (float32), with B, T, D, H, F:
#   the two LayerNorms         2 · (B·T·D + B·T)      x̂ and 1/σ each
#   the linear layers' inputs  3 · B·T·D + B·T·F      both norms' outputs, the heads concatenated (w_o),
#                                                     GELU's output (w_down)
#   the attention core         3 · B·T·D + B·H·T·T    q, k (QKᵀ), v and P (P V; softmax keeps P too)
#   GELU                       B·T·F                  its input
# plus the bool causal mask that masked_fill keeps, T·T bytes.

def _gpt_reference(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    floats = 2 * (B * T * D + B * T) + 3 * B * T * D + B * T * F_ + 3 * B * T * D + B * H * T * T + B * T * F_
    return 4 * floats + T * T


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


def _gpt_terms(B, T, D, H, F_) -> dict[str, int]:
    """What a block's count of kept bytes can be made of (elements; the fit finds the bytes per element)."""
    return {"BTD": B * T * D, "BT": B * T, "BHTT": B * H * T * T, "BTF": B * T * F_, "TT": T * T,
            "TDh": T * (D // H), "BHT": B * H * T, "DD": D * D, "DF": D * F_, "D": D, "F": F_}


_GPT_TERMS = list(_gpt_terms(1, 2, 4, 2, 8))

# (B, T, D) tensors the block keeps, for the messages: what a count with one more or one fewer may hold.
_BTD_MORE = ("additions keep nothing (neither the block's input x nor the residual sum), LayerNorm keeps x̂ and "
             "not x − μ, and a tensor several operations keep is in memory once")
_BTD_FEWER = ("each linear layer keeps its input — a LayerNorm's output (read by w_qkv or w_up) is a tensor of "
              "its own besides the x̂ the norm keeps, and w_o's input is the heads concatenated, a copy made by "
              "reshape — and QKᵀ keeps q and k, P V keeps v")


def _tensors(k: Fraction, shape: str) -> str:
    return count_words(k, f"{shape} tensor")


def _gpt_story(c: dict[str, Fraction]) -> list[str]:
    c = defaultdict(Fraction, c)
    said = []
    floats = {n: c[n] / 4 for n in ("BTD", "BT", "BHTT", "BTF")}
    if any(c[n] for n in ("DD", "DF", "D", "F")):
        said.append("the parameters (weights and biases) were counted: they are in memory whether or not "
                    "anything is saved, and adding a bias saves nothing either")
    if c["TDh"]:
        said.append("this block has no RoPE: there are no cos and sin tables to keep")
    n = floats["BTD"]
    if n == 1:
        said.append("your count has one (B, T, D) tensor too many: additions keep nothing (not the block's input "
                    "x, not the residual sum), and a tensor several operations keep is in memory once")
    elif n == 2:
        said.append("your count has two (B, T, D) tensors too many: each LayerNorm keeps x̂ and 1/σ, not x − μ "
                    "(or x) as well, and additions keep nothing")
    elif n == -1:
        said.append("your count has one (B, T, D) tensor too few: w_o keeps its input, the heads concatenated (a "
                    "copy made by reshape), and QKᵀ keeps both q and k, P V keeps v")
    elif n == -2:
        said.append("your count has two (B, T, D) tensors too few: w_qkv and w_up keep their inputs, the "
                    "LayerNorms' outputs, which are tensors of their own besides the x̂ each norm keeps")
    elif n > 0:
        said.append(f"your count has {_tensors(n, '(B, T, D)')} ({_BTD_MORE})")
    elif n < 0:
        said.append(f"your count has {_tensors(n, '(B, T, D)')} ({_BTD_FEWER})")
    n = floats["BT"]
    if n < 0:
        said.append(f"your count has {_tensors(n, '(B, T)')}: each LayerNorm also keeps 1/σ, one float per "
                    f"position")
    elif n > 0:
        said.append(f"your count has {_tensors(n, '(B, T)')}: each LayerNorm keeps 1/σ and x̂, nothing more (not "
                    f"μ, not σ besides 1/σ)")
    n = floats["BHTT"]
    if n > 0:
        said.append(f"your count has {_tensors(n, '(B, H, T, T)')}: the attention weights P are in memory once — "
                    f"softmax keeps its output and P V keeps the same tensor — and the scores before softmax are "
                    f"not kept (softmax's derivative reads its output)")
    elif n < 0:
        said.append(f"your count has {_tensors(n, '(B, H, T, T)')}: softmax keeps its output P (its derivative "
                    f"reads it), which P V also reads")
    n = floats["BTF"]
    if n < 0:
        said.append(f"your count has {_tensors(n, '(B, T, F)')}: GELU keeps its input (for its derivative) and "
                    f"w_down keeps GELU's output")
    elif n > 0:
        said.append(f"your count has {_tensors(n, '(B, T, F)')}: the FFN keeps GELU's input and output; it has no "
                    f"gate (SwiGLU's four do not apply)")
    k = c["TT"]
    if k == 3:
        said.append("the mask is bool: 1 byte per element, not 4")
    elif k < 0:
        said.append("the bool causal mask is missing: masked_fill keeps the mask it was given, T × T bytes")
    elif k > 0:
        said.append(f"your count has {count_words(k, 'T × T bool mask')}: one mask, built once, is kept by "
                    f"masked_fill")
    if c["BHT"]:
        said.append("there is nothing of shape (B, H, T) to keep: softmax keeps its output, not its row sums")
    return said


@safe
def _gpt_explain(got, want, case: Case) -> str | None:
    B, T, D, H, F_ = case.args
    floats = (want - T * T) // 4
    if got == floats + T * T or got == floats:
        return "you counted elements, not bytes: float32 takes 4 bytes per element (bool masks 1)."
    student = recall()
    samples = []
    for shape in _gpt_cases(torch.Generator().manual_seed(1112)) + _gpt_cases(torch.Generator().manual_seed(1113)):
        value = probe(*shape.args)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or student is None:
            return None
        samples.append((Fraction(value).limit_denominator(1000) - _gpt_reference(*shape.args), _gpt_terms(*shape.args)))
    fit = fit_terms(samples, _GPT_TERMS, denominators=(1, 2, 4))
    if fit:
        story = _gpt_story(fit)
        if story:
            return "; ".join(story) + "."
    return None


GPT_BLOCK_SAVED_BYTES = Task(
    name="gpt_block_saved_bytes", reference=_gpt_reference, cases=_gpt_cases, seed=1102, run=remembering,
    output=NumberOutput("a number of bytes", integer=True), rtol=0.0, atol=0.0, explain=_gpt_explain,
    forbid=Forbid(modules=(ref,), models=True),
    hint="Go through the block operation by operation, as the chapter does for the pre-norm block, and "
         "check each part with your saved_bytes on one LayerNorm, the attention, and the FFN alone.",
)

check_gpt_block_saved_bytes = GPT_BLOCK_SAVED_BYTES.checker(
    """Check ``gpt_block_saved_bytes(batch, seq_len, d_model, n_heads, d_ff) -> int``: the bytes a float32
    GPT-style block (LayerNorm with bias, causal multi-head attention, GELU FFN, biases, no RoPE) keeps for
    backward when every operation keeps what its derivative reads, parameters excluded.""")


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


# Between the forward pass and the backward pass the caller goes on drawing random numbers (the layers
# after the checkpoint have their own dropout), and after backward it draws again: the draws after
# backward must be those plain autograd gives, so a backward that leaves the generator somewhere else
# (the saved state restored and never put back, say) shows up in the output.
_LATER_DRAWS, _NEXT_DRAWS = 5, 4


def _cuda_state():
    """The CUDA generator's state where CUDA is the course's device (course_lib.device), else None."""
    from ..device import get_device

    if get_device().type != "cuda":
        return None
    try:
        return torch.cuda.get_rng_state()
    except Exception:  # a CUDA that cannot start here: nothing to compare
        return None


def _plain(fn, x, grad_y, seed):
    """What backward through fn itself gives: y = fn(x), the caller's later draws, grad_y backpropagated,
    then the caller's next draws — on the same stream."""
    x = x.detach().requires_grad_()
    _start_stream(seed)
    y = fn(x)
    torch.rand(_LATER_DRAWS)
    (grad,) = torch.autograd.grad(y, x, grad_y)
    after = torch.rand(_NEXT_DRAWS, dtype=torch.float64).to(y.dtype)
    return torch.cat([y.detach().reshape(-1), grad.reshape(-1), after])


def _states(fn, x, seed):
    """The generator's states in a plain run: before fn, after fn, after the caller's later draws."""
    _start_stream(seed)
    before = torch.get_rng_state()
    with torch.no_grad():
        fn(x)
    after_fn = torch.get_rng_state()
    torch.rand(_LATER_DRAWS)
    return before, after_fn, torch.get_rng_state()


_RUN: dict = {}  # what the last run of the student's checkpoint left: its generator states


def _run_checkpointed(student, fn, x, grad_y, seed):
    """Call the student's checkpoint under a saved-tensor log; let the caller draw; backpropagate grad_y;
    let the caller draw again. Returns y, x's gradient and the caller's next draws."""
    remember(student)
    x = x.detach().requires_grad_()
    saved = []

    def pack(t):
        saved.append(t)
        return t

    _start_stream(seed)
    cuda_before = _cuda_state()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = student(fn, x)
    _RUN["after_forward"] = torch.get_rng_state()
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
    torch.rand(_LATER_DRAWS)  # the layers after the checkpoint draw their own dropout masks
    _RUN["before_backward"] = torch.get_rng_state()
    try:
        y.backward(grad_y)
    except RuntimeError as err:
        text = " ".join(str(err).split())
        if "incorrect number of gradients" in text or "gradient different than None at position" in text:
            raise GradingError(f"`checkpointed`'s backward failed: {text[:160]}. Likely mistake: backward returns "
                               f"one gradient per input of forward, in order: (None for fn, grad_x).") from None
        if "does not require grad" in text:
            raise GradingError("`checkpointed`'s backward failed: the recomputed output has no graph. Likely "
                               "mistake: autograd runs backward with gradients off; recompute fn under "
                               "torch.enable_grad(), on a detached x that requires grad.") from None
        raise
    _RUN["after_backward"] = torch.get_rng_state()
    cuda_after = _cuda_state()
    if cuda_before is not None and cuda_after is not None and not torch.equal(cuda_before, cuda_after):
        raise GradingError("`checkpointed` leaves the CUDA generator in another state than it found it (these "
                           "inputs are on the CPU, so plain autograd does not touch it). Likely mistake: it "
                           "restores a saved CUDA random state for the recomputation but does not put the "
                           "caller's state back: do the recomputation inside torch.random.fork_rng().")
    if x.grad is None:
        raise GradingError("after backward, x has no gradient: the backward of your Function must return "
                           "the gradient for x (and None for fn).")
    after = torch.rand(_NEXT_DRAWS, dtype=torch.float64).to(y.dtype)
    return torch.cat([y.detach().reshape(-1), x.grad.reshape(-1), after])


def _first_draws(fn, x, seed=None, reseed=None):
    """fn(x) without gradients, from the caller's stream (``seed``) or right after torch.manual_seed(reseed)."""
    if reseed is not None:
        torch.manual_seed(reseed)
    else:
        _start_stream(seed)
    with torch.no_grad():
        return fn(x)


@safe
def _checkpoint_explain(got, want, case: Case) -> str | None:
    fn, x, grad_y, seed = case.args
    n = x.numel()
    y_ok = same_tensor(got[:n], want[:n], 1e-5, 1e-6)
    grad_ok = same_tensor(got[n:2 * n], want[n:2 * n], 1e-5, 1e-6)
    if y_ok and grad_ok:
        before, after_fn, right = _states(fn, x, seed)
        left = _RUN.get("after_backward")
        if left is None:
            return None
        if torch.equal(left, after_fn):
            return ("restores the saved RNG state for the recomputation but does not put the caller's state "
                    "back: after backward the generator is where the forward pass left it, so the random "
                    "numbers the caller drew since then (later layers' dropout) come again. Recompute inside "
                    "torch.random.fork_rng(), which puts the caller's state back when it ends.")
        if torch.equal(left, before):
            return ("after backward the generator is back at the state saved before the forward pass: it must be "
                    "where the caller left it. Restore the saved state only for the recomputation, inside "
                    "torch.random.fork_rng(), which puts the caller's state back when it ends.")
        if torch.equal(_RUN.get("after_forward"), before):
            return ("your forward pass does not advance the caller's random stream as fn(x) does: the caller's "
                    "next random numbers repeat those fn drew. Run fn in forward on the caller's stream; isolate "
                    "only backward's recomputation (torch.random.fork_rng()).")
        return ("after your forward and backward the random generator is not where plain autograd leaves it: "
                "the recomputation must draw from the saved state without moving the caller's stream.")
    if same_tensor(got[n:2 * n], grad_y.reshape(-1), 1e-5, 1e-6) and not grad_ok:
        return ("backward returns grad_y itself as x's gradient: backpropagate it through the recomputed fn, "
                "e.g. torch.autograd.grad(y, x, grad_y).")
    if not y_ok:
        y = got[:n].reshape(x.shape)
        student = recall()
        again = None
        try:
            _start_stream(seed + 1000)
            again = student(fn, x.detach().requires_grad_()).detach()
        except Exception:
            pass
        if again is not None and same_tensor(again, y, 1e-5, 1e-6) and \
                not same_tensor(_first_draws(fn, x, seed + 1000), _first_draws(fn, x, seed), 1e-5, 1e-6):
            return ("the generator is reseeded (with a fixed number): every call then draws the same masks, "
                    "whatever the caller's random state, and the output is not what fn(x) gives at this point "
                    "of the stream. Save and restore the generator's state instead (torch.get_rng_state, "
                    "torch.set_rng_state).")
        if same_tensor(_first_draws(fn, x, reseed=seed), y, 1e-5, 1e-6):
            return ("the generator is reseeded with its initial seed: that restarts the random stream from its "
                    "beginning instead of where fn was called, so the output is not what fn(x) gives at this "
                    "point of the stream. Save the generator's state (torch.get_rng_state()) and restore it "
                    "(torch.set_rng_state).")
        return ("the output is not fn(x) at this point of the caller's random stream: forward must run fn on the "
                "generator as it finds it (save its state first, change nothing).")
    # the output is right and the gradient is not: does it go wrong only where fn draws random numbers?
    student = recall()
    steady = lambda t: torch.tanh(t) ** 2  # noqa: E731 — no randomness
    try:
        x2 = x.detach().requires_grad_()
        y2 = student(steady, x2)
        y2.backward(grad_y)
        steady_ok = x2.grad is not None and same_tensor(x2.grad, 2 * torch.tanh(x) * (1 - torch.tanh(x) ** 2) *
                                                         grad_y, 1e-5, 1e-6)
    except Exception:
        steady_ok = False
    if steady_ok:
        return ("the recomputation in backward draws new random numbers (a fresh dropout mask), so the gradient "
                "belongs to a different function than the output: for a fn without randomness your gradient is "
                "right. Save the generator's state in forward, BEFORE running fn (torch.get_rng_state()), and "
                "restore it before running fn again in backward — inside torch.random.fork_rng(), so the caller's "
                "random stream is not disturbed.")
    return None


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
    explain=_checkpoint_explain,
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


_GIB_FACTORS = [
    (0.5, "the model trains in float32: 4 bytes per number, not 2"),
    (1 / 32, "every one of the 32 checkpointed blocks keeps its own input"),
    (2.0, "each block's input was counted with its output: the output of one block IS the next block's input, "
          "one tensor, kept once"),
    (2**30 / 1e9, "that is in GB (10⁹ bytes); the question asks for GiB (2³⁰ bytes)"),
    (1024.0, "that is in MiB; the question asks for GiB (2³⁰ bytes)"),
    (8.0, "that counts bits: float32 is 4 bytes"),
    (1 / 2048, "the input of a block holds all 2,048 positions"),
    (1 / 4096, "each position's input is a vector of D = 4096 numbers"),
]


def _segment_story(value, given, true) -> str | None:
    """A segment length: is it a whole number of blocks dividing 64, and which way does the peak fall?"""
    N, a, m = 64, 1.0, 16.0

    def peak(k):
        return (N / k) * a + k * m

    if value <= 0:
        return None
    if value != int(value) or N % int(value):
        return "segments hold whole blocks and tile the 64 blocks: k must divide 64."
    k = int(value)
    wrong = {8: "√N is the answer when a block's activations cost as much as its input (m = a). Here m = 16a: "
                "minimise (N/k)·a + k·m over k.",
             4: "set the derivative of (N/k)·a + k·m to zero: k² = N·a/m, so k is a square root.",
             16: "set the derivative of (N/k)·a + k·m to zero: k² = N·a/m, not m/a.",
             32: "set the derivative of (N/k)·a + k·m to zero: k² = N·a/m, not N·m/a."}
    if k in wrong:
        return wrong[k]
    if k % 2 == 0 and peak(k // 2) < peak(k):
        return ("the peak (N/k)·a + k·m is lower at half your k: with m = 16a, a longer segment costs more in "
                "recomputed activations than it saves in stored inputs. Evaluate the peak at the divisors around "
                "yours.")
    if 2 * k <= N and peak(2 * k) < peak(k):
        return ("the peak (N/k)·a + k·m is lower at twice your k: longer segments keep fewer inputs. Evaluate the "
                "peak at the divisors around yours.")
    return None


def _flop_story(value, given, true) -> str | None:
    """A FLOP ratio read as (step + recomputation) / step: which part is off."""
    for step, step_why in ((3, None), (2, "a step is a forward (F) and a backward (≈ 2F), 3F in all, not 2F"),
                           (4, "a step is a forward (F) and a backward (≈ 2F), 3F in all, not 4F")):
        for extra, extra_why in ((0.5, None),
                                 (1.0, "that is the ratio when EVERY block is checkpointed; here only half of them "
                                       "run their forward pass again"),
                                 (1.5, "the recomputation adds one forward of the checkpointed half (F/2), not "
                                       "half a step"),
                                 (0.25, "the recomputation is one forward of half the blocks, F/2, not F/4"),
                                 (2.0, "checkpointing does not double a step: only the checkpointed blocks' forward "
                                       "runs again"),
                                 (0.0, "the checkpointed blocks run their forward pass again during backward: that "
                                       "costs F/2 more")):
            if abs(value - (step + extra) / step) < 1e-3:
                why = [w for w in (step_why, extra_why) if w]
                return "; and ".join(why) + "." if why else None
    if abs(value - 7 / 4) < 1e-3:
        return "a step is forward (F) plus backward (2F), and the recomputation adds F/2: compare with 3F."
    return None


def _init_loss_story(value, given, true) -> str | None:
    """ln V + D σ² / 2, read part by part."""
    V, D, sigma = 65, 512, 0.02
    if abs(value - V) < 1e-3:
        return "65 would be the perplexity of a uniform guess; the question asks for the loss in nats."
    for base, base_why in ((math.log(V), None), (math.log2(V), "that is in bits (log₂); the loss is in nats")):
        for rise, rise_why in ((D * sigma**2 / 2, None),
                               (0.0, "ln V is the loss of a model whose logits are all equal. Random weights give "
                                     "random logits of variance Dσ², which raise the expected loss by Dσ²/2"),
                               (D * sigma**2, "the logits' variance is Dσ², but the loss rises by HALF of it: "
                                              "E[e^z] = e^(s²/2) for z ~ N(0, s²)"),
                               (sigma**2 / 2, "the logits' variance grows with the width: a logit sums D terms, "
                                              "so its variance is Dσ², and the loss rises by Dσ²/2"),
                               (D * sigma / 2, "σ is a standard deviation: the variance is σ², so the loss rises by "
                                               "Dσ²/2"),
                               (math.sqrt(D) * sigma / 2, "the rise is half the logits' VARIANCE, Dσ²/2, not their "
                                                          "standard deviation"),
                               (-D * sigma**2 / 2, "random logits RAISE the expected loss above ln V: for z ~ N(0, "
                                                   "s²), E[e^z] = e^(s²/2) > 1")):
            if abs(value - (base + rise)) < 2e-3:
                why = [w for w in (base_why, rise_why) if w]
                return "; and ".join(why) + "." if why else None
        if abs(value - (base + D * sigma**2 / 2) / math.log(2)) < 2e-3:
            return "that is in bits (divided by ln 2); the loss is in nats."
    return None


MEMORY_PREDICTIONS = reasoned_predictions(predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=1104,
    rtol=3e-3,
    atol=1e-6,
    forbid=Forbid(modules=(ref,), models=True),
    advice="Work it out on paper from the chapter first, then run the cell below.",
), _true_predictions, {"checkpointed_gib": by_factors("checkpointed_gib", _GIB_FACTORS),
                       "best_segment": _segment_story, "flop_ratio_half": _flop_story,
                       "init_loss": _init_loss_story})

check_memory_predictions = MEMORY_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the stored inputs of a checkpointed 32-block model (GiB), the best
    segment length for 64 blocks with m = 16a, the FLOP ratio with half the blocks checkpointed, and the
    loss at initialisation for V = 65, D = 512, σ = 0.02.""")
