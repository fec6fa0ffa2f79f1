"""What backward must keep: the tensors autograd saves during the forward pass, measured
and predicted, and activation checkpointing, which keeps far fewer and recomputes the
rest.

Conventions
-----------
* "Saved" means saved *for backward*: every tensor an operation stores so that its
  derivative can be computed later (``y = exp(x)`` keeps y, ``y = x · w`` keeps x and w,
  ``y = x + b`` keeps nothing). PyTorch hands each of them to the pack hook of
  ``torch.autograd.graph.saved_tensors_hooks``; that is how :class:`SavedTensorLog` sees
  them, on any device (CPU, CUDA, even ``meta``).
* Bytes are counted per **storage**, each storage once: the same tensor saved by two
  operations, or two views of one buffer, occupy memory once, and a saved view keeps its
  *whole* storage alive.
* Parameters (and anything else passed as ``exclude``) are not counted: they are in
  memory whether or not anything is saved.
* The formulas (:func:`block_saved_breakdown`) describe ``course_lib``'s pre-norm block
  — RMSNorm, grouped-query attention with RoPE, SwiGLU, no biases, no dropout (the
  default ``ModelConfig.dropout = 0``; with p > 0 each dropout also keeps a mask) — in
  **float32** (4 bytes per element; bool masks 1 byte). Shape letters: B batch, T
  sequence length, D model width, H query heads, H_kv key/value heads, D_h head width,
  F = d_ff.
* Activation checkpointing is ``torch.utils.checkpoint.checkpoint(...,
  use_reentrant=False)`` (Chen et al., 2016): the forward pass of a checkpointed
  function keeps only its inputs, and the backward pass runs that forward again to
  rebuild what it needs (with the random generator's state restored, so dropout draws
  the same masks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "ATTENTION_PATHS",
    "SavedTensor",
    "SavedTensorLog",
    "saved_bytes",
    "block_saved_breakdown",
    "block_saved_bytes",
    "activation_crossover_length",
    "checkpoint_blocks",
]

ATTENTION_PATHS = ("reference", "sdpa")
_FLOAT32 = 4  # bytes per saved element under this module's assumption (float32)
_BOOL = 1


# --- measuring ----------------------------------------------------------------------

@dataclass(frozen=True)
class SavedTensor:
    """One storage kept for backward: the shape and dtype of the first tensor saved from
    it, the bytes of the whole storage, the autograd node that produced it (``grad_fn``
    name; ``"leaf"`` for inputs and constants) and how many times operations saved it
    (or a
    view of it)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    made_by: str
    times_saved: int


class SavedTensorLog:
    """Record every tensor saved for backward while the ``with`` block runs.

        with SavedTensorLog(exclude=model.parameters()) as log:
            loss = model(ids).logsumexp(-1).mean()
        log.nbytes   # bytes of the distinct storages saved, parameters excluded
        log.tensors  # one SavedTensor per storage, in the order first saved

    Storages are told apart by identity, not by address, so the count also works on the
    ``meta`` device, where no memory exists (every address is 0). While the block runs
    the log holds a reference to each storage it has seen, so that no address or
    identity is recycled during the measurement; on exit it keeps only the metadata.

    The hooks see tensors saved *outside* any checkpointed region. A region checkpointed
    with ``use_reentrant=False`` saves its inputs through them and the rest through its
    own hooks — so the log shows exactly what a checkpointed model keeps.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        if isinstance(exclude, torch.Tensor):
            exclude = [exclude]  # one tensor, not an iterable of its rows
        try:
            excluded = list(exclude)
        except TypeError:
            raise TypeError(f"exclude must be an iterable of tensors (e.g. "
                            f"model.parameters()), got {type(exclude).__name__}"
                            ) from None
        for t in excluded:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"exclude must hold tensors only, got a "
                                f"{type(t).__name__}")
        self._excluded = {_storage_key(t) for t in excluded}
        # keep the excluded storages alive, so that their identities stay unique
        self._excluded_refs = [t.untyped_storage() for t in excluded]
        # storage key -> [storage, shape, dtype, made_by, count]
        self._entries: dict[int, list] = {}
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None
        self.tensors: list[SavedTensor] = []
        self.nbytes = 0

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        if key not in self._excluded:
            entry = self._entries.get(key)
            if entry is None:
                node = tensor.grad_fn
                made_by = type(node).__name__ if node is not None else "leaf"
                self._entries[key] = [tensor.untyped_storage(), tuple(tensor.shape),
                                      tensor.dtype, made_by, 1]
            else:
                entry[4] += 1
        return tensor  # saved as it is: measuring must not change what backward gets

    def __enter__(self) -> SavedTensorLog:
        if self._hooks is not None:
            raise RuntimeError("this SavedTensorLog is already recording")
        self._entries.clear()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        self._hooks = None
        self.tensors = [SavedTensor(shape, dtype, storage.nbytes(), made_by, count)
                        for storage, shape, dtype, made_by, count
                        in self._entries.values()]
        self.nbytes = sum(t.nbytes for t in self.tensors)
        self._entries.clear()  # drop the storages: the graph decides how long they live


def _storage_key(tensor: torch.Tensor) -> int:
    # The identity of the storage itself (its C++ object), shared by every view of it.
    # Addresses (data_ptr) would do on CPU and CUDA, but on the meta device every
    # address is 0.
    return tensor.untyped_storage()._cdata


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def saved_bytes(fn: Callable, *args, exclude: Iterable[torch.Tensor] = (),
                **kwargs) -> int:
    """Bytes that ``fn(*args, **kwargs)`` saves for backward: the distinct storages
    handed to autograd's saved-tensor hooks, minus those of ``exclude`` (usually the
    parameters)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with SavedTensorLog(exclude=exclude) as log:
        out = fn(*args, **kwargs)  # noqa: F841 — keeps the graph (and what it saved)
    return log.nbytes


# --- predicting ---------------------------------------------------------------------

def _check_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} ({value}) must be at least 1")
    return value


def block_saved_breakdown(
    batch: int, seq_len: int, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, *,
    head_dim: int | None = None, attention: str = "sdpa", checkpointed: bool = False,
) -> dict[str, int]:
    """Bytes one pre-norm block saves for backward, by role, in float32, parameters
    excluded.

    With B = batch, T = seq_len, D = d_model, H = n_heads, H_kv = n_kv_heads, D_h =
    head_dim (default D / H), F = d_ff, in elements of 4 bytes::

        each norm       "sdpa": x/rms(x), 1/rms(x), output  2·B·T·D + B·T  (two norms)
                        "reference": x as well              3·B·T·D + B·T
        RoPE tables     cos, sin                            T·D_h
        attention in    "sdpa": q; k, v with H_kv heads     B·H·T·D_h + 2·B·H_kv·T·D_h
                        "reference": q; k, v with H heads   3·B·H·T·D_h
        attention core  "sdpa" (CPU): output, log-sum-exp   B·H·T·D_h + B·H·T
                        "reference": softmax weights,       2·B·H·T²
                          masked weights, two bool masks    + 2·T² bytes
        w_o's input     the heads concatenated              B·T·H·D_h
        SwiGLU          gate, SiLU(gate), up, product       4·B·T·F

    On ``"sdpa"`` RMSNorm differentiates by hand from x/rms and 1/rms; the explicit
    :func:`~course_lib.norms.rms_norm`, recorded by autograd, keeps x too. The fused
    kernel groups the query heads itself (``enable_gqa``), so it keeps K and V with H_kv
    heads; the explicit path saves the H-head copies ``repeat_kv`` makes. The residual
    additions save nothing. With ``checkpointed=True`` the block keeps only its
    inputs: x (B·T·D) and the RoPE tables (T·D_h), which every block of a model shares.

    The "sdpa" lines are what ``F.scaled_dot_product_attention``'s CPU kernel saves in
    float32; other kernels (CUDA's, or the meta device's) save slightly different
    tensors, so the "reference" path — every saved tensor decided by course_lib's own
    code — is the one that holds on every device. Two shortcuts of the code are followed
    exactly: a one-token sequence (T = 1) needs no mask, so the explicit path keeps only
    the softmax weights; and when T = 1 or H = 1 the concatenated heads are a view of
    the kernel's output rather than a copy.
    """
    B, T = _check_int(batch, "batch"), _check_int(seq_len, "seq_len")
    D, H = _check_int(d_model, "d_model"), _check_int(n_heads, "n_heads")
    H_kv, F = _check_int(n_kv_heads, "n_kv_heads"), _check_int(d_ff, "d_ff")
    if H % H_kv != 0:
        raise ValueError(f"n_heads ({H}) must be divisible by n_kv_heads ({H_kv})")
    if head_dim is None:
        if D % H != 0:
            raise ValueError(f"d_model ({D}) must be divisible by n_heads ({H}) unless "
                             f"head_dim is given")
        head_dim = D // H
    D_h = _check_int(head_dim, "head_dim")
    if attention not in ATTENTION_PATHS:
        raise ValueError(f"attention must be one of {ATTENTION_PATHS}, "
                         f"got {attention!r}")
    if not isinstance(checkpointed, bool):
        raise TypeError(f"checkpointed must be True or False, got {checkpointed!r}")
    f4 = _FLOAT32
    if checkpointed:
        return {"block input x": f4 * B * T * D, "RoPE cos, sin": f4 * T * D_h}
    if attention == "sdpa":  # hand-written backward
        norm_name, norm_tensors = "x/rms, output", 2
    else:
        norm_name, norm_tensors = "x, x/rms, output", 3
    parts = {
        f"attn_norm: {norm_name}": f4 * norm_tensors * B * T * D,
        "attn_norm: 1/rms": f4 * B * T,
        "RoPE cos, sin": f4 * T * D_h,
    }
    if attention == "sdpa":
        parts["q (H heads)"] = f4 * B * H * T * D_h
        parts["k, v (H_kv heads)"] = f4 * 2 * B * H_kv * T * D_h
        parts["sdpa: output, log-sum-exp"] = f4 * (B * H * T * D_h + B * H * T)
        copied = T > 1 and H > 1  # else the concatenated heads are a view of the output
        parts["w_o input (heads concatenated)"] = f4 * B * T * H * D_h if copied else 0
    else:
        parts["q (H heads)"] = f4 * B * H * T * D_h
        parts["k, v (repeated to H heads)"] = f4 * 2 * B * H * T * D_h
        if T > 1:
            parts["softmax weights, masked weights"] = f4 * 2 * B * H * T * T
            parts["causal masks (bool)"] = _BOOL * 2 * T * T
        else:  # one query sees its one key: no mask; the softmax output is used as is
            parts["softmax weights, masked weights"] = f4 * B * H
            parts["causal masks (bool)"] = 0
        parts["w_o input (heads concatenated)"] = f4 * B * T * H * D_h
    parts.update({
        f"ffn_norm: {norm_name.replace('x', 'h')}": f4 * norm_tensors * B * T * D,
        "ffn_norm: 1/rms": f4 * B * T,
        "SwiGLU: gate, SiLU(gate), up, product": f4 * 4 * B * T * F,
    })
    return parts


def block_saved_bytes(
    batch: int, seq_len: int, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, *,
    head_dim: int | None = None, attention: str = "sdpa", checkpointed: bool = False,
) -> int:
    """The total of :func:`block_saved_breakdown`: bytes one float32 pre-norm block
    saves for backward, parameters excluded. Without checkpointing, per token (divide by
    B·T), for T, H ≥ 2::

        "sdpa":       4·(4·D + 2 + 3·H·D_h + 2·H_kv·D_h + H + 4·F) + 4·D_h/B  (RoPE)
        "reference":  4·(6·D + 2 + 4·H·D_h + 2·H·T + 4·F) + 2·T/B + 4·D_h/B
    """
    parts = block_saved_breakdown(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff,
                                  head_dim=head_dim, attention=attention,
                                  checkpointed=checkpointed)
    return sum(parts.values())


def activation_crossover_length(d_model: int, n_heads: int, d_ff: int, *,
                                head_dim: int | None = None) -> float:
    """The sequence length T* at which the explicit attention path's T² terms (the two
    B·H·T² float32 weight tensors) save as many bytes as everything else in the block,
    the RoPE tables and masks aside: 2·H·T* = 6·D + 2 + 4·H·D_h + 4·F. Below T* the
    per-token
    terms dominate."""
    D, H = _check_int(d_model, "d_model"), _check_int(n_heads, "n_heads")
    F = _check_int(d_ff, "d_ff")
    D_h = _check_int(head_dim, "head_dim") if head_dim is not None else D / H
    return (6 * D + 2 + 4 * H * D_h + 4 * F) / (2 * H)


# --- checkpointing a model ----------------------------------------------------------

def checkpoint_blocks(model: nn.Module, enabled: bool = True) -> nn.Module:
    """Turn activation checkpointing of every block of a
    :class:`~course_lib.model.DecoderLM` on (or off, ``enabled=False``); returns the
    model.

    When it is on and gradients are being recorded, the model runs each block through
    ``torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False)``: the forward
    pass keeps each block's input instead of its activations, and the backward pass
    recomputes them, one block at a time, with the random state of the forward pass.
    Outputs and gradients are unchanged; the parameters and their names too.
    """
    from .model import DecoderLM  # here: model.py needs nothing from this module

    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    model.activation_checkpointing = enabled
    return model
