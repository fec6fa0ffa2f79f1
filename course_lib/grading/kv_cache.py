"""Checkers for exercise 10 (the KV cache): the cache's size in bytes, and one attention step with a
preallocated cache (RoPE at the cache's offset, the write, the causal mask over cached and new keys,
grouped-query heads)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import attention as attn_ref
from .. import counting
from ..block import TransformerBlock
from ..kv_cache import ConcatKVCache, KVCache
from ..positional import apply_rope, rope_cos_sin
from ._core import Case, Forbidden, GradingError, Mistake, check_function, describe

__all__ = ["check_kv_cache_bytes", "check_attend_with_cache"]

_RTOL, _ATOL = 1e-4, 1e-5


# --- Task 1: the cache's size ---------------------------------------------------------------------------

def _bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element, *, heads=None,
           kv=2, use_batch=True, use_layers=True, element=None):
    """2 · N · H_kv · D_h · S · B · bytes, with one factor changed to model a mistake."""
    h = n_kv_heads if heads is None else heads
    b = batch if use_batch else 1
    n = n_layers if use_layers else 1
    e = bytes_per_element if element is None else element
    return torch.tensor(float(kv * n * h * head_dim * seq_len * b * e), dtype=torch.float64)


def check_kv_cache_bytes(kv_cache_bytes) -> None:
    """Check ``kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element)``
    = 2 · n_layers · n_kv_heads · head_dim · seq_len · batch · bytes_per_element."""
    cases = []
    for args, what in [
        ((3, 8, 2, 16, 10, 1, 4), "a tiny GQA model in float32"),
        ((32, 32, 8, 128, 8192, 1, 2), "Llama 3 8B's shape at 8192 tokens in 16-bit"),
        ((32, 32, 32, 128, 4096, 1, 2), "Llama 2 7B's shape (multi-head) at 4096 tokens in 16-bit"),
        ((80, 64, 8, 128, 4096, 4, 2), "Llama 2 70B's shape, a batch of 4, 16-bit"),
        ((3, 6, 1, 24, 100, 3, 4), "multi-query attention, a batch of 3, float32"),
        ((5, 8, 4, 32, 1, 2, 1), "one cached position, a batch of 2, 8-bit"),
    ]:
        n, h, h_kv, d_h, s, b, e = args
        label = (f"{what} (n_layers={n}, n_heads={h}, n_kv_heads={h_kv}, head_dim={d_h}, seq_len={s}, "
                 f"batch={b}, bytes_per_element={e})")
        cases.append(Case(label, args))
    mistakes = [
        Mistake("you counted the query heads: the cache stores keys and values, and there are only n_kv_heads "
                "of those (grouped-query attention shares each among several query heads).",
                lambda n, h, hkv, d, s, b, e: _bytes(n, h, hkv, d, s, b, e, heads=h)),
        Mistake("the factor 2 is missing: the cache holds keys AND values.",
                lambda *a: _bytes(*a, kv=1)),
        Mistake("the batch is missing: every sequence of the batch has its own cache.",
                lambda *a: _bytes(*a, use_batch=False)),
        Mistake("the layers are missing: every layer caches its own keys and values.",
                lambda *a: _bytes(*a, use_layers=False)),
        Mistake("you multiplied by bits, not bytes, per element.",
                lambda n, h, hkv, d, s, b, e: _bytes(n, h, hkv, d, s, b, e, element=8 * e)),
    ]
    reference = lambda *a: _bytes(*a)  # noqa: E731
    check_function(kv_cache_bytes, reference, cases, task="kv_cache_bytes", mistakes=mistakes,
                   forbidden=[Forbidden(counting.kv_cache_bytes, "course_lib.counting.kv_cache_bytes"),
                              Forbidden(KVCache.nbytes, "course_lib.kv_cache.KVCache.nbytes")],
                   rtol=0.0, atol=0.5)


# --- Task 2: one attention step with a cache ---------------------------------------------------------------

_STEP_REFERENCES = [
    Forbidden(F.scaled_dot_product_attention, "torch.nn.functional.scaled_dot_product_attention"),
    Forbidden(nn.MultiheadAttention.forward, "torch.nn.MultiheadAttention"),
    Forbidden(attn_ref.attention_reference, "course_lib.attention.attention_reference"),
    Forbidden(attn_ref.attention, "course_lib.attention.attention"),
    Forbidden(attn_ref.causal_mask, "course_lib.attention.causal_mask"),
    Forbidden(attn_ref.causal_mask_from_positions, "course_lib.attention.causal_mask_from_positions"),
    Forbidden(attn_ref.repeat_kv, "course_lib.attention.repeat_kv"),
    Forbidden(attn_ref.GroupedQueryAttention.attend, "course_lib.attention.GroupedQueryAttention.attend"),
    Forbidden(TransformerBlock.attention, "course_lib.block.TransformerBlock.attention"),
    Forbidden(KVCache.update, "course_lib.kv_cache.KVCache.update"),
    Forbidden(ConcatKVCache.update, "course_lib.kv_cache.ConcatKVCache.update"),
]


def _step(q, k, v, cache_k, cache_v, length, cos, sin, *, rope_offset=None, write_at=None, write_shift=0,
          store_rotated=True, rotate_v=False, rerotate_cache=False, append=True, mask="causal", grouping="interleave",
          in_place=True, whole_buffer=False, scale=None):
    """One cache step on copies of the buffers, with at most one mistake switched on; returns what the
    checker compares: the output and both buffers afterwards, flattened into one vector."""
    cache_k, cache_v = cache_k.clone(), cache_v.clone()
    B, H, T, D_h = q.shape
    H_kv = k.shape[1]
    offset = length if rope_offset is None else rope_offset
    cos_t, sin_t = cos[offset:offset + T], sin[offset:offset + T]  # (T, D_h/2): the new tokens' angles
    q_rot = apply_rope(q, cos_t, sin_t)  # (B, H, T, D_h)
    k_rot = apply_rope(k, cos_t, sin_t)  # (B, H_kv, T, D_h)
    v_new = apply_rope(v, cos_t, sin_t) if rotate_v else v
    start = (length if write_at is None else write_at) + write_shift
    buf_k, buf_v = (cache_k, cache_v) if in_place else (cache_k.clone(), cache_v.clone())
    if append:
        buf_k[:, :, start:start + T] = k_rot if store_rotated else k  # (B, H_kv, T, D_h) at the offset
        buf_v[:, :, start:start + T] = v_new
    end = cache_k.shape[2] if whole_buffer else length + T
    keys, values = buf_k[:, :, :end], buf_v[:, :, :end]  # (B, H_kv, S, D_h)
    if not store_rotated and append:
        keys = keys.clone()
        keys[:, :, start:start + T] = k_rot  # attention itself used the rotated keys
    if not append:
        keys, values = buf_k[:, :, :length], buf_v[:, :, :length]  # only the old positions
    if rerotate_cache:
        keys = apply_rope(keys, cos[:keys.shape[2]], sin[:keys.shape[2]])  # rotated a second time
    S = keys.shape[2]
    n_rep = H // H_kv
    if grouping == "interleave":
        keys, values = keys.repeat_interleave(n_rep, 1), values.repeat_interleave(n_rep, 1)  # (B, H, S, D_h)
    else:
        keys, values = keys.repeat(1, n_rep, 1, 1), values.repeat(1, n_rep, 1, 1)  # head h reads h % H_kv
    scores = (q_rot @ keys.transpose(-2, -1)) * (D_h ** -0.5 if scale is None else scale)  # (B, H, T, S)
    q_pos = torch.arange(length, length + T)  # (T,): the new tokens' positions
    k_pos = torch.arange(S)  # (S,)
    if mask == "causal":
        allowed = q_pos[:, None] >= k_pos[None, :]  # (T, S)
    elif mask == "top-left":
        allowed = torch.ones(T, S, dtype=torch.bool).tril()  # queries aligned with the FIRST keys
    elif mask == "new-only-causal":
        allowed = torch.zeros(T, S, dtype=torch.bool)
        allowed[:, S - T:] = torch.ones(T, T, dtype=torch.bool).tril()  # the cached keys hidden
    else:
        allowed = torch.ones(T, S, dtype=torch.bool)  # no mask at all
    scores = scores.masked_fill(~allowed.to(scores.device), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ values  # (B, H, T, D_h)
    return torch.cat([out.reshape(-1), cache_k.reshape(-1), cache_v.reshape(-1)])


def _student_step(attend_with_cache):
    """Run the student's function on copies (it writes into the buffers); check the output's shape; return
    the same vector as :func:`_step`. A shape error on grouped-query inputs names the likely cause."""

    def run(q, k, v, cache_k, cache_v, length, cos, sin):
        buf_k, buf_v = cache_k.clone(), cache_v.clone()
        try:
            out = attend_with_cache(q.clone(), k.clone(), v.clone(), buf_k, buf_v, length, cos.clone(), sin.clone())
        except RuntimeError as err:
            if q.shape[1] != k.shape[1]:
                raise GradingError(
                    f"attend_with_cache raised RuntimeError for q {describe(q)} and k {describe(k)}: {err}. "
                    f"Likely mistake: the key/value heads are not repeated for grouped-query attention. Each of "
                    f"the H_kv kv heads serves n_rep = H // H_kv consecutive query heads: expand the keys and "
                    f"values to H heads (repeat_interleave on the head dimension) before the products."
                ) from None
            raise
        if not isinstance(out, torch.Tensor):
            raise GradingError(f"attend_with_cache returned a {type(out).__name__}; it should return the "
                               f"attention output, a tensor of shape (B, H, T, D_h).")
        if out.shape != q.shape:
            raise GradingError(f"attend_with_cache returned shape {tuple(out.shape)} for q {describe(q)}; the "
                               f"output has the queries' shape (B, H, T, D_h).")
        return torch.cat([out.reshape(-1), buf_k.reshape(-1), buf_v.reshape(-1)])

    return run


def _step_case(gen, B, H, H_kv, D_h, T, length, S_max, theta, dtype, what):
    t = lambda *shape: torch.randn(shape, generator=gen, dtype=torch.float64)  # noqa: E731
    q, k, v = t(B, H, T, D_h), t(B, H_kv, T, D_h), t(B, H_kv, T, D_h)
    cache_k, cache_v = t(B, H_kv, S_max, D_h), t(B, H_kv, S_max, D_h)  # stale values past `length`
    cos, sin = rope_cos_sin(torch.arange(S_max), D_h, theta, dtype=torch.float64)  # (S_max, D_h/2) each
    args = [x.to(dtype) for x in (q, k, v, cache_k, cache_v)] + [length, cos.to(dtype), sin.to(dtype)]
    label = (f"{what}: q {describe(args[0])}, k and v {describe(args[1])}, buffers {describe(args[3])}, "
             f"length={length}, RoPE tables ({S_max}, {D_h // 2})")
    return Case(label, tuple(args))


def check_attend_with_cache(attend_with_cache) -> None:
    """Check ``attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin)``: rotate q and k by the
    positions length … length + T − 1, write the rotated k and v into the buffers there, and return causal
    grouped-query attention of the T queries over the length + T cached positions."""
    if not callable(attend_with_cache):
        raise GradingError(f"attend_with_cache should be a function, but it is a "
                           f"{type(attend_with_cache).__name__}.")
    gen = torch.Generator().manual_seed(1010)
    f64, f32 = torch.float64, torch.float32
    cases = [_step_case(gen, *spec) for spec in [
        # B, H, H_kv, D_h, T, length, S_max, theta, dtype
        (1, 1, 1, 4, 1, 2, 6, 100.0, f64, "one head, one new token after 2 cached"),
        (1, 4, 2, 8, 1, 5, 8, 100.0, f64, "grouped-query (2 query heads per kv head), one new token"),
        (2, 4, 4, 8, 1, 3, 6, 10_000.0, f64, "multi-head, a batch of 2, one new token"),
        (2, 6, 1, 4, 1, 7, 10, 100.0, f64, "multi-query (one kv head), one new token"),
        (1, 8, 2, 16, 3, 4, 9, 100.0, f64, "3 new tokens after 4 cached (a chunk)"),
        (2, 4, 2, 8, 5, 0, 7, 100.0, f64, "an empty cache: the prompt itself (length 0)"),
        (1, 4, 2, 8, 1, 7, 8, 100.0, f64, "the new token fills the buffer's last slot"),
        (2, 6, 3, 8, 2, 6, 12, 100.0, f32, "float32, 2 new tokens after 6 cached"),
    ]]
    step = lambda **mistake: lambda *a: _step(*a, **mistake)  # noqa: E731
    mistakes = [
        Mistake("the new keys and values are not in the cache when you attend: write them into the buffers "
                "first, then attend over all length + T positions (a new token must see itself).",
                step(append=False)),
        Mistake("the new tokens are rotated as if they were at positions 0 … T − 1. They are at positions "
                "length … length + T − 1: use the rows cos[length:length + T] and sin[length:length + T].",
                step(rope_offset=0)),
        Mistake("the new keys and values are written at the start of the buffers (slot 0), over the cached "
                "ones. Write them at slots length … length + T − 1.", step(write_at=0)),
        Mistake("the write index is off by one: the first new token goes to slot length exactly.",
                step(write_shift=1)),
        Mistake("the causal mask hides cached keys: tril of a (T, S) matrix (or is_causal=True) aligns the "
                "queries with the FIRST keys. The queries sit at positions length … length + T − 1, so query i "
                "may attend to every key at position ≤ length + i.", step(mask="top-left")),
        Mistake("the cached keys are masked out: the new queries must attend to every cached position as "
                "well as to the new tokens up to their own.", step(mask="new-only-causal")),
        Mistake("there is no causal mask among the new tokens: with T > 1 new tokens, query i must not see "
                "the new tokens after it.", step(mask="none")),
        Mistake("the kv heads are tiled (.repeat): query head h then reads kv head h % H_kv. Each kv head "
                "serves n_rep = H // H_kv CONSECUTIVE query heads: use repeat_interleave on the head dimension.",
                step(grouping="tile")),
        Mistake("the cache holds the keys before RoPE. Store the rotated keys: later steps read them back "
                "without their positions.", step(store_rotated=False)),
        Mistake("the values were rotated too: RoPE applies to queries and keys only.", step(rotate_v=True)),
        Mistake("the cached keys were rotated a second time: they were stored after RoPE. Rotate only the new "
                "keys.", step(rerotate_cache=True)),
        Mistake("the buffers were not changed in place: writing cache_k = torch.cat(...) or cache_k = "
                "cache_k.clone() rebinds a local name. Assign into a slice, cache_k[:, :, start:end] = ...",
                step(in_place=False)),
        Mistake("you attended over the whole buffer, including slots not filled yet: use only positions "
                "0 … length + T − 1.", step(whole_buffer=True, mask="none")),
        Mistake("the scores are not scaled: divide by √D_h.", step(scale=1.0)),
    ]
    check_function(_student_step(attend_with_cache), _step, cases, task="attend_with_cache", mistakes=mistakes,
                   forbidden=_STEP_REFERENCES, rtol=_RTOL, atol=_ATOL)
