"""Checkers for exercise 10 (the KV cache).

1. ``predictions`` — predict four numbers about caches before computing them (a function returning a dict).
2. ``kv_cache_bytes`` — the cache's size in bytes, from the shapes (a formula: building or measuring a
   model is refused).
3. ``attend_with_cache`` — one attention step with a preallocated cache: RoPE at the cache's offset, the
   write, the causal mask over cached and new keys, grouped-query heads.
4. ``KVCache`` — find and fix the bug in a given cache class whose ``length`` moves in every layer.
5. ``attend_with_window`` — extend the step to a sliding-window (ring-buffer) cache of W slots.
"""

from __future__ import annotations


import torch

from .. import attention as attention_ref
from .. import counting
from .. import kv_cache as cache_ref
from ..positional import apply_rope, rope_cos_sin
from ._predictions import predictions_task
from ._core import Case, Forbid, GradingError, Mistake, NumberOutput, Task, TensorOutput, describe

__all__ = ["check_kv_predictions", "check_kv_cache_bytes", "check_attend_with_cache", "check_kv_cache_class",
           "check_attend_with_window"]

_F64, _F32 = torch.float64, torch.float32
_GIB = 2**30


# --- Task 1: predictions ----------------------------------------------------------------------------------


def _gib(n_layers, n_kv_heads, head_dim, seq_len, bytes_per_element=2):
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element / _GIB


# Wrong predictions that reveal a specific misunderstanding, key by key.
_WRONG_PREDICTIONS = {
    "llama2_70b_gib": [
        (_gib(80, 64, 128, 4096), "that counts all 64 query heads. The cache stores keys and values, and Llama "
                                  "2 70B has only 8 key/value heads (grouped-query attention)."),
        (_gib(80, 8, 128, 4096) / 2, "the cache holds keys AND values: a factor 2."),
        (_gib(80, 8, 128, 4096, 4), "16-bit numbers take 2 bytes each, not 4."),
        (_gib(80, 8, 128, 4096) * _GIB / 1e9, "that is in GB (10⁹ bytes); the question asks for GiB (2³⁰ bytes)."),
        (_gib(1, 8, 128, 4096), "every one of the 80 layers keeps its own keys and values."),
    ],
    "llama2_7b_gib": [
        (_gib(32, 32, 128, 4096) / 2, "the cache holds keys AND values: a factor 2."),
        (_gib(32, 32, 128, 4096, 4), "16-bit numbers take 2 bytes each, not 4."),
        (_gib(32, 8, 128, 4096), "Llama 2 7B uses multi-head attention: 32 key/value heads, one per query "
                                 "head (grouped-query attention came with the 70B model)."),
        (_gib(32, 32, 128, 4096) * _GIB / 1e9, "that is in GB (10⁹ bytes); the question asks for GiB (2³⁰ bytes)."),
    ],
    "mistral_window_gib": [
        (_gib(32, 8, 128, 32768), "with a sliding window of 4,096 a query never reads keys further back, so a "
                                  "rolling buffer keeps only the last 4,096 positions, not all 32,768."),
        (_gib(32, 32, 128, 4096), "Mistral 7B has 8 key/value heads shared by its 32 query heads: count "
                                  "the key/value heads."),
        (_gib(32, 32, 128, 32768), "two things: a rolling buffer keeps only the window (4,096 positions), and "
                                   "Mistral 7B has 8 key/value heads, not 32."),
        (_gib(32, 8, 128, 4096) / 2, "the cache holds keys AND values: a factor 2."),
    ],
    "positions_without_cache": [
        (75.0, "the last token is generated, not fed back: 5 steps feed 10, 11, 12, 13 and 14 positions."),
        (14.0, "that is the count WITH a cache (the prompt once, then one position per step). Without a "
               "cache every step feeds the whole sequence again."),
        (46.0, "that counts only the recomputed positions. The question asks for every position fed through "
               "the model, the first time included."),
        (50.0, "the sequence grows by one token per step: 10, then 11, 12, …"),
        (65.0, "the last token is generated, not fed back: the steps feed 10 … 14 positions, not 11 … 15."),
    ],
}


def _true_predictions() -> dict[str, float]:
    from ..config import PRESETS

    mistral = PRESETS["mistral-7b"]
    return {
        "llama2_70b_gib": counting.kv_cache_bytes(PRESETS["llama-2-70b"], 4096) / _GIB,
        "llama2_7b_gib": counting.kv_cache_bytes(PRESETS["llama-2-7b"], 4096) / _GIB,
        "mistral_window_gib": counting.kv_cache_bytes(mistral, mistral.sliding_window) / _GIB,
        "positions_without_cache": float(sum(10 + s for s in range(5))),  # steps feed 10 … 14 positions
    }


KV_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=1001,
    rtol=1e-2,
    atol=1e-6,
    forbid=Forbid(modules=(counting, cache_ref), models=True),
    advice="Work it out on paper from the shapes first, then run the cell below.",
)

check_kv_predictions = KV_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the KV cache of Llama 2 70B and of Llama 2 7B at 4,096 tokens and of
    Mistral 7B's rolling buffer (GiB, 16-bit, one sequence), and the positions fed through a model without
    a cache to generate 5 tokens after a 10-token prompt.""")


# --- Task 2: the cache's size ---------------------------------------------------------------------------

def _bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element, *, heads=None,
           kv=2, use_batch=True, use_layers=True, element=None):
    """2 · N · H_kv · D_h · S · B · bytes, with one factor changed to model a mistake."""
    h = n_kv_heads if heads is None else heads
    b = batch if use_batch else 1
    n = n_layers if use_layers else 1
    e = bytes_per_element if element is None else element
    return kv * n * h * head_dim * seq_len * b * e


def _bytes_cases(gen) -> list[Case]:
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
        cases.append(Case(f"{what} (n_layers={n}, n_heads={h}, n_kv_heads={h_kv}, head_dim={d_h}, "
                          f"seq_len={s}, batch={b}, bytes_per_element={e})", args))
    return cases


KV_CACHE_BYTES = Task(
    name="kv_cache_bytes", reference=_bytes, cases=_bytes_cases, seed=1002, rtol=0.0, atol=0.0,
    output=NumberOutput("a number of bytes", integer=True),
    mistakes=[
        Mistake("you counted the query heads: the cache stores keys and values, and there are only n_kv_heads "
                "of those (grouped-query attention shares each among several query heads).",
                lambda n, h, hkv, d, s, b, e: _bytes(n, h, hkv, d, s, b, e, heads=h)),
        Mistake("the factor 2 is missing: the cache holds keys AND values.", lambda *a: _bytes(*a, kv=1)),
        Mistake("the batch is missing: every sequence of the batch has its own cache.",
                lambda *a: _bytes(*a, use_batch=False)),
        Mistake("the layers are missing: every layer caches its own keys and values.",
                lambda *a: _bytes(*a, use_layers=False)),
        Mistake("you multiplied by bits, not bytes, per element.",
                lambda n, h, hkv, d, s, b, e: _bytes(n, h, hkv, d, s, b, e, element=8 * e)),
        Mistake("that is a number of elements: multiply by bytes_per_element to get bytes.",
                lambda n, h, hkv, d, s, b, e: _bytes(n, h, hkv, d, s, b, e, element=1)),
        Mistake("you counted all H · H_kv pairs of heads; each key/value head is stored once.",
                lambda n, h, hkv, d, s, b, e: _bytes(n, h, hkv, d, s, b, e, heads=h * hkv)),
    ],
    forbid=Forbid(modules=(counting, cache_ref), models=True),
    hint="Multiply the sizes of what is stored: for every layer, keys and values, for each key/value head, "
         "head_dim numbers, per position and per sequence, times the bytes of one number.",
)

check_kv_cache_bytes = KV_CACHE_BYTES.checker(
    """Check ``kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element)``
    = 2 · n_layers · n_kv_heads · head_dim · seq_len · batch · bytes_per_element (an int).""")


# --- shared: attention of new queries over cached keys -----------------------------------------------------

def _attend(q_rot, keys, values, allowed, *, grouping="interleave", scale=None):
    """Grouped-query attention of q (B, H, T, D_h) over keys, values (B, H_kv, S, D_h); allowed (T, S)."""
    H, H_kv, D_h = q_rot.shape[1], keys.shape[1], q_rot.shape[-1]
    n_rep = H // H_kv
    if grouping == "interleave":
        keys, values = keys.repeat_interleave(n_rep, 1), values.repeat_interleave(n_rep, 1)  # head h: h // n_rep
    else:
        keys, values = keys.repeat(1, n_rep, 1, 1), values.repeat(1, n_rep, 1, 1)  # head h reads h % H_kv
    scores = (q_rot @ keys.transpose(-2, -1)) * (D_h ** -0.5 if scale is None else scale)  # (B, H, T, S)
    scores = scores.masked_fill(~allowed.to(scores.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ values  # (B, H, T, D_h)


def _gqa_error(name, q, k, err) -> GradingError:
    return GradingError(
        f"`{name}` raised RuntimeError for q {describe(q)} and k {describe(k)}: {' '.join(str(err).split())[:200]}. "
        f"Likely mistake: the key/value heads are not repeated for grouped-query attention. Each of the H_kv "
        f"kv heads serves n_rep = H // H_kv consecutive query heads: expand the keys and values to H heads "
        f"(repeat_interleave on the head dimension) before the products.")


def _check_out(name, out, q) -> None:
    if not isinstance(out, torch.Tensor):
        raise GradingError(f"`{name}` returned a {type(out).__name__}; it should return the attention output, a "
                           f"tensor of shape (B, H, T, D_h).")
    if out.shape != q.shape:
        raise GradingError(f"`{name}` returned shape {tuple(out.shape)} for q {describe(q)}; the output has the "
                           f"queries' shape (B, H, T, D_h).")


# --- Task 3: one attention step with a cache ---------------------------------------------------------------

def _step(q, k, v, cache_k, cache_v, length, cos, sin, *, rope_offset=None, write_at=None, write_shift=0,
          store_rotated=True, rotate_v=False, rerotate_cache=False, rotate_on_read=False, append=True,
          mask="causal", grouping="interleave", in_place=True, whole_buffer=False, scale=None):
    """One cache step on copies of the buffers, with at most one mistake switched on; returns what the
    checker compares: the output and both buffers afterwards, flattened into one vector."""
    cache_k, cache_v = cache_k.clone(), cache_v.clone()
    T = q.shape[2]
    offset = length if rope_offset is None else rope_offset
    cos_t, sin_t = cos[offset:offset + T], sin[offset:offset + T]  # (T, D_h/2): the new tokens' angles
    q_rot = apply_rope(q, cos_t, sin_t)  # (B, H, T, D_h)
    k_rot = apply_rope(k, cos_t, sin_t)  # (B, H_kv, T, D_h)
    v_new = apply_rope(v, cos_t, sin_t) if rotate_v else v
    start = (length if write_at is None else write_at) + write_shift
    buf_k, buf_v = (cache_k, cache_v) if in_place else (cache_k.clone(), cache_v.clone())
    old_k, old_v = buf_k[:, :, :length].clone(), buf_v[:, :, :length].clone()
    buf_k[:, :, start:start + T] = k_rot if store_rotated else k  # (B, H_kv, T, D_h) at the offset
    buf_v[:, :, start:start + T] = v_new
    end = cache_k.shape[2] if whole_buffer else length + T
    keys, values = buf_k[:, :, :end], buf_v[:, :, :end]  # (B, H_kv, S, D_h)
    if not store_rotated:
        keys = keys.clone()
        keys[:, :, start:start + T] = k_rot  # attention itself used the rotated keys
    if not append:  # attends before storing the new keys: only the old positions
        keys, values = old_k, old_v
    if rerotate_cache:
        keys = apply_rope(keys, cos[:keys.shape[2]], sin[:keys.shape[2]])  # rotated a second time
    if rotate_on_read:  # stores the new keys unrotated, then rotates every key it reads by its position
        buf_k[:, :, start:start + T] = k
        keys = apply_rope(buf_k[:, :, :end], cos[:end], sin[:end])
    S = keys.shape[2]
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
    out = _attend(q_rot, keys, values, allowed, grouping=grouping, scale=scale)  # (B, H, T, D_h)
    return torch.cat([out.reshape(-1), cache_k.reshape(-1), cache_v.reshape(-1)])


def _run_step(student, q, k, v, cache_k, cache_v, length, cos, sin):
    """Call the student's function (it writes into its copies of the buffers); return the same vector as
    :func:`_step`."""
    try:
        out = student(q, k, v, cache_k, cache_v, length, cos, sin)
    except RuntimeError as err:
        if q.shape[1] != k.shape[1] and ("size of tensor" in str(err) or "shape" in str(err)):
            raise _gqa_error("attend_with_cache", q, k, err) from None
        raise
    _check_out("attend_with_cache", out, q)
    return torch.cat([out.reshape(-1), cache_k.reshape(-1), cache_v.reshape(-1)])


def _step_case(gen, B, H, H_kv, D_h, T, length, S_max, theta, dtype, what):
    t = lambda *shape: torch.randn(shape, generator=gen, dtype=_F64)  # noqa: E731
    q, k, v = t(B, H, T, D_h), t(B, H_kv, T, D_h), t(B, H_kv, T, D_h)
    cache_k, cache_v = t(B, H_kv, S_max, D_h), t(B, H_kv, S_max, D_h)  # stale values past `length`
    cos, sin = rope_cos_sin(torch.arange(S_max), D_h, theta, dtype=_F64)  # (S_max, D_h/2) each
    args = [x.to(dtype) for x in (q, k, v, cache_k, cache_v)] + [length, cos.to(dtype), sin.to(dtype)]
    label = (f"{what}: q {describe(args[0])}, k and v {describe(args[1])}, buffers {describe(args[3])}, "
             f"length={length}, RoPE tables ({S_max}, {D_h // 2})")
    return Case(label, tuple(args))


def _step_cases(gen) -> list[Case]:
    return [_step_case(gen, *spec) for spec in [
        # B, H, H_kv, D_h, T, length, S_max, theta, dtype
        (1, 1, 1, 4, 1, 2, 6, 100.0, _F64, "one head, one new token after 2 cached"),
        (1, 4, 2, 8, 1, 5, 8, 100.0, _F64, "grouped-query (2 query heads per kv head), one new token"),
        (2, 4, 4, 8, 1, 3, 6, 10_000.0, _F64, "multi-head, a batch of 2, one new token"),
        (2, 6, 1, 4, 1, 7, 10, 100.0, _F64, "multi-query (one kv head), one new token"),
        (1, 8, 2, 16, 3, 4, 9, 100.0, _F64, "3 new tokens after 4 cached (a chunk)"),
        (2, 4, 2, 8, 5, 0, 7, 100.0, _F64, "an empty cache: the prompt itself (length 0)"),
        (1, 4, 2, 8, 1, 7, 8, 100.0, _F64, "the new token fills the buffer's last slot"),
        (2, 6, 3, 8, 2, 6, 12, 100.0, _F32, "float32, 2 new tokens after 6 cached"),
    ]]


def _stepper(**mistake):
    return lambda *a: _step(*a, **mistake)


ATTEND_WITH_CACHE = Task(
    name="attend_with_cache", reference=_step, cases=_step_cases, seed=1003, run=_run_step,
    mutates=("cache_k", "cache_v"), rtol=1e-4, atol=1e-5,
    output=TensorOutput("the dtype of q (the output and the buffers)"),
    mistakes=[
        Mistake("the new keys and values are not in the cache when you attend: write them into the buffers "
                "first, then attend over all length + T positions (a new token must see itself).",
                _stepper(append=False)),
        Mistake("the new tokens are rotated as if they were at positions 0 … T − 1. They are at positions "
                "length … length + T − 1: use the rows cos[length:length + T] and sin[length:length + T].",
                _stepper(rope_offset=0)),
        Mistake("the new keys and values are written at the start of the buffers (slot 0), over the cached "
                "ones. Write them at slots length … length + T − 1.", _stepper(write_at=0)),
        Mistake("the write index is off by one: the first new token goes to slot length exactly.",
                _stepper(write_shift=1)),
        Mistake("the causal mask hides cached keys: tril of a (T, S) matrix (or is_causal=True) aligns the "
                "queries with the FIRST keys. The queries sit at positions length … length + T − 1, so query i "
                "may attend to every key at position ≤ length + i.", _stepper(mask="top-left")),
        Mistake("the cached keys are masked out: the new queries must attend to every cached position as "
                "well as to the new tokens up to their own.", _stepper(mask="new-only-causal")),
        Mistake("there is no causal mask among the new tokens: with T > 1 new tokens, query i must not see "
                "the new tokens after it.", _stepper(mask="none")),
        Mistake("the kv heads are tiled (.repeat): query head h then reads kv head h % H_kv. Each kv head "
                "serves n_rep = H // H_kv CONSECUTIVE query heads: use repeat_interleave on the head dimension.",
                _stepper(grouping="tile")),
        Mistake("the cache holds the keys before RoPE. Store the rotated keys: later steps read them back "
                "without their positions.", _stepper(store_rotated=False)),
        Mistake("the values were rotated too: RoPE applies to queries and keys only.", _stepper(rotate_v=True)),
        Mistake("the cached keys were rotated a second time: they were stored after RoPE. Rotate only the new "
                "keys.", _stepper(rerotate_cache=True)),
        Mistake("the buffers were not changed in place: writing cache_k = torch.cat(...) or cache_k = "
                "cache_k.clone() rebinds a local name. Assign into a slice, cache_k[:, :, start:end] = ...",
                _stepper(in_place=False)),
        Mistake("you attended over the whole buffer, including slots not filled yet: use only positions "
                "0 … length + T − 1.", _stepper(whole_buffer=True, mask="none")),
        Mistake("you attended over the whole buffer, including slots not filled yet: use only positions "
                "0 … length + T − 1.", _stepper(whole_buffer=True)),
        Mistake("the scores are not scaled: divide by √D_h.", _stepper(scale=1.0)),
        Mistake("the cached keys were rotated again when read: they are stored AFTER RoPE (each at its own "
                "position), so rotate only the new keys, once, and store them rotated.",
                _stepper(rotate_on_read=True)),
    ],
    forbid=Forbid(operations=("attention",), modules=(attention_ref, cache_ref)),
)

check_attend_with_cache = ATTEND_WITH_CACHE.checker(
    """Check ``attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin)``: rotate q and k by the
    positions length … length + T − 1, write the rotated k and v into the buffers there, and return causal
    grouped-query attention of the T queries over the length + T cached positions.""")


# --- Task 4: find and fix the bug in a cache class -----------------------------------------------------------

def _chunks_case(gen, n_layers, batch, n_kv_heads, head_dim, max_len, sizes, dtype, what):
    chunks = []
    for T in sizes:
        chunks.append([tuple(torch.randn(batch, n_kv_heads, T, head_dim, generator=gen, dtype=_F64).to(dtype)
                             for _ in range(2)) for _ in range(n_layers)])
    label = (f"{what}: n_layers={n_layers}, batch={batch}, n_kv_heads={n_kv_heads}, head_dim={head_dim}, "
             f"max_len={max_len}, dtype={str(dtype).replace('torch.', '')}; forward passes of "
             f"{', '.join(map(str, sizes))} token(s), each calling update() in every layer, then advance(T)")
    return Case(label, (n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunks))


def _cache_cases(gen) -> list[Case]:
    return [_chunks_case(gen, *spec) for spec in [
        (2, 1, 2, 4, 8, (3, 1, 1, 1), _F32, "two layers: a prompt of 3, then 3 decoding steps"),
        (1, 1, 1, 4, 6, (2, 1, 1), _F32, "one layer"),
        (3, 2, 1, 8, 10, (1, 1, 1, 1), _F64, "three layers, a batch of 2, one token at a time"),
        (2, 2, 2, 4, 9, (4, 2, 3), _F32, "two layers, chunks of 4, 2 and 3 tokens filling the buffer"),
        (4, 1, 2, 2, 7, (5, 1, 1), _F64, "four layers, float64"),
    ]]


class _SharedBufferCache:
    """Mistake model: ``[torch.zeros(shape)] * n_layers`` — one buffer shared by every layer."""

    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=_F32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype)] * n_layers
        self.v = [torch.zeros(shape, dtype=dtype)] * n_layers
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n):
        self.length += n


class _WriteAtCache(_SharedBufferCache):
    """Mistake model: separate buffers, but the write lands at ``start(length)``; ``swap`` stores k as v."""

    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=_F32, *, start=lambda n: n,
                 swap=False):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length, self._start, self._swap = 0, start, swap

    def update(self, layer, k, v):
        if self._swap:
            k, v = v, k
        T, start = k.shape[2], self._start(self.length)
        self.k[layer][:, :, start:start + T] = k
        self.v[layer][:, :, start:start + T] = v
        end = self.length + T
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]


class _EarlyAdvanceCache(_WriteAtCache):
    """Mistake model: ``length`` advanced in layer 0's update (once per pass, but before the other layers
    write), ``advance`` a no-op."""

    def update(self, layer, k, v):
        T = k.shape[2]
        self.k[layer][:, :, self.length:self.length + T] = k
        self.v[layer][:, :, self.length:self.length + T] = v
        if layer == 0:
            self.length += T
        return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]

    def advance(self, n):
        pass


def _drive(cache, chunks, name=None) -> torch.Tensor:
    """Feed the chunks through ``cache`` as a model does; every returned key and value, flattened. With a
    ``name`` (the student's class), check each answer's kind and shape and the length after advance."""
    returned, length = [], 0
    for chunk in chunks:
        T = chunk[0][0].shape[2]
        for layer, (k, v) in enumerate(chunk):
            got = cache.update(layer, k, v)
            if name is not None:
                _check_update(name, got, k, layer, length, T)
            returned += [got[0].clone(), got[1].clone()]  # as the layer reads them, before later writes
        cache.advance(T)
        length += T
        if name is not None:
            held = getattr(cache, "length", None)
            if held != length:
                if held == length - T:
                    more = " advance(n) must add n to length: the model calls it once per forward pass."
                elif held == length - T + 1 and T > 1:
                    more = " advance(n) adds n positions, not 1: a forward pass can bring several tokens."
                elif isinstance(held, int) and held > length:
                    more = (" `length` moves inside update() as well as in advance(), or more than once per forward "
                            "pass: only advance(T) may change it, once, after the last layer.")
                else:
                    more = ""
                raise GradingError(f"`{name}`: after forward passes of {length} tokens in all, `length` is "
                                   f"{held!r}; it should be {length}.{more}")
    return torch.cat([r.reshape(-1) for r in returned])


def _check_update(name, got, k, layer, length, T) -> None:
    if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(isinstance(g, torch.Tensor) for g in got):
        raise GradingError(f"`{name}.update` returned a {type(got).__name__}; it should return two tensors: "
                           f"(keys, values) of every position stored so far.")
    B, H_kv, _, D_h = k.shape
    want = (B, H_kv, length + T, D_h)
    for part, tensor in zip(("keys", "values"), got):
        if tuple(tensor.shape) == want:
            continue
        S = tensor.shape[2] if tensor.dim() == 4 else None
        where = (f"in layer {layer}, with {length} position(s) cached and {T} new, update() returned {part} of "
                 f"shape {tuple(tensor.shape)}; it should return the {length + T} positions stored so far, "
                 f"shape {want}.")
        if S is not None and layer > 0 and S == length + T * (layer + 1):
            why = (" The number grows with the layer: `length` moves inside update(), so each layer writes after "
                   "the previous layer's tokens. All layers of one forward pass store the SAME positions: "
                   "update() must not change length — advance(T), called once after the last layer, does.")
        elif S is not None and layer == 0 and S == length + 2 * T:
            why = (" `length` moves inside update() and again in advance(): the positions are counted twice. "
                   "Only advance(T), called once after the last layer, may change length.")
        elif S == length:
            why = " It leaves out the new tokens: write them first, then return slots 0 … length + T − 1."
        elif S == T:
            why = " It returns only the new tokens; attention needs every cached position too."
        elif S is not None and S > length + T:
            why = (" It returns slots that hold nothing yet (the whole buffer?), or `length` has been advanced "
                   "more than once per forward pass.")
        else:
            why = ""
        raise GradingError(f"`{name}`: {where}{why}")


def _cache_reference(n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunks):
    cache = cache_ref.KVCache(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=dtype)
    return _drive(cache, chunks)


def _run_cache(student, n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunks):
    try:
        cache = student(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=dtype)
    except TypeError as err:
        raise GradingError(f"`KVCache(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=...)` could not be "
                           f"built: {' '.join(str(err).split())[:200]}. Keep the given constructor's "
                           f"arguments.") from None
    for method in ("update", "advance"):
        if not callable(getattr(cache, method, None)):
            raise GradingError(f"`KVCache` has no method `{method}`: a model calls update(layer, k, v) in every "
                               f"layer and advance(T) once per forward pass.")
    return _drive(cache, chunks, name="KVCache")


def _mistake_cache(cls, **kw):
    def compute(n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunks):
        return _drive(cls(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=dtype, **kw), chunks)
    return compute


KV_CACHE_CLASS = Task(
    name="KVCache", reference=_cache_reference, cases=_cache_cases, seed=1004, run=_run_cache,
    rtol=0.0, atol=0.0, output=TensorOutput("the dtype given to the cache"),
    mistakes=[
        Mistake("every layer shares ONE buffer: [torch.zeros(shape)] * n_layers repeats the same tensor, so "
                "layer 1 overwrites layer 0's keys. Build one tensor per layer (a list comprehension).",
                _mistake_cache(_SharedBufferCache)),
        Mistake("the new keys and values are written at the start of the buffers (slot 0), over the cached "
                "ones. Write them at slots length … length + T − 1.",
                _mistake_cache(_WriteAtCache, start=lambda n: 0)),
        Mistake("`length` moves inside update() (in the first layer): the later layers of the same forward pass "
                "then write their keys after the new tokens, not at them. All layers store the SAME positions: "
                "update() must not change length — advance(T), called once after the last layer, does.",
                _mistake_cache(_EarlyAdvanceCache)),
        Mistake("the write index is off by one: the first new token goes to slot length exactly.",
                _mistake_cache(_WriteAtCache, start=lambda n: n + 1)),
        Mistake("keys and values are swapped: update(layer, k, v) stores k in the key buffer.",
                _mistake_cache(_WriteAtCache, swap=True)),
    ],
    forbid=Forbid(modules=(cache_ref,)),
    hint="Run the given test with a two-layer model and print `length` and the slots each layer writes.",
)

check_kv_cache_class = KV_CACHE_CLASS.checker(
    """Check the class ``KVCache(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=...)`` with
    ``update(layer, k, v) -> (keys, values)`` and ``advance(n)``: driven as a model drives it, it returns
    the keys and values of every position stored so far and keeps ``length`` right.""")


# --- Task 5: a sliding-window (ring-buffer) cache --------------------------------------------------------------

def _window_step(q, k, v, cache_k, cache_v, position, cos, sin, *, rope_at=None, slot=None, write=True,
                 attend_first=False, every_slot=False, grouping="interleave", scale=None, in_place=True,
                 store_rotated=True):
    """One decoding step (T = 1) with a ring buffer of W slots, position p in slot p % W; with at most one
    mistake switched on. Returns the output and both buffers afterwards, flattened."""
    cache_k, cache_v = cache_k.clone(), cache_v.clone()
    W = cache_k.shape[2]
    angle_at = position if rope_at is None else rope_at(position, W)
    cos_t, sin_t = cos[angle_at:angle_at + 1], sin[angle_at:angle_at + 1]  # (1, D_h/2)
    q_rot, k_rot = apply_rope(q, cos_t, sin_t), apply_rope(k, cos_t, sin_t)
    s = position % W if slot is None else slot(position, W)
    buf_k, buf_v = (cache_k, cache_v) if in_place else (cache_k.clone(), cache_v.clone())
    old_k, old_v = buf_k.clone(), buf_v.clone()
    if write:
        buf_k[:, :, s:s + 1] = k_rot if store_rotated else k  # (B, H_kv, 1, D_h)
        buf_v[:, :, s:s + 1] = v
    keys, values = (old_k, old_v) if attend_first else (buf_k, buf_v)
    if not store_rotated:
        keys = keys.clone()
        keys[:, :, s:s + 1] = k_rot  # the step itself used the rotated key
    filled = W if every_slot else min(position + 1, W)  # slots 0 … filled − 1 hold the window
    if attend_first and not every_slot:
        filled = min(position, W)
    if filled == 0:
        raise ValueError("this mistake attends to nothing at position 0")
    keys, values = keys[:, :, :filled], values[:, :, :filled]
    allowed = torch.ones(1, filled, dtype=torch.bool)  # every slot in the window is at a position ≤ p
    out = _attend(q_rot, keys, values, allowed, grouping=grouping, scale=scale)  # (B, H, 1, D_h)
    return torch.cat([out.reshape(-1), cache_k.reshape(-1), cache_v.reshape(-1)])


def _run_window(student, q, k, v, cache_k, cache_v, position, cos, sin):
    W = cache_k.shape[2]
    try:
        out = student(q, k, v, cache_k, cache_v, position, cos, sin)
    except (IndexError, RuntimeError) as err:
        text = str(err)
        if position >= W and ("out of bounds" in text or "index" in text or "size" in text or "shape" in text):
            raise GradingError(
                f"`attend_with_window` raised {type(err).__name__} at position={position} with W={W} slots: "
                f"{' '.join(text.split())[:160]}. Likely mistake: the write goes to slot `position`, past the "
                f"end of the buffer. A ring buffer puts position p in slot p % W, over the position W steps "
                f"back, which has just left the window.") from None
        if q.shape[1] != k.shape[1] and ("size of tensor" in text or "shape" in text):
            raise _gqa_error("attend_with_window", q, k, err) from None
        raise
    _check_out("attend_with_window", out, q)
    return torch.cat([out.reshape(-1), cache_k.reshape(-1), cache_v.reshape(-1)])


def _window_case(gen, B, H, H_kv, D_h, W, position, dtype, what):
    t = lambda *shape: torch.randn(shape, generator=gen, dtype=_F64)  # noqa: E731
    q, k, v = t(B, H, 1, D_h), t(B, H_kv, 1, D_h), t(B, H_kv, 1, D_h)
    cache_k, cache_v = t(B, H_kv, W, D_h), t(B, H_kv, W, D_h)  # slots not yet filled hold leftovers
    n_table = position + 3
    cos, sin = rope_cos_sin(torch.arange(n_table), D_h, 100.0, dtype=_F64)  # (P, D_h/2) each
    args = [x.to(dtype) for x in (q, k, v, cache_k, cache_v)] + [position, cos.to(dtype), sin.to(dtype)]
    label = (f"{what}: q {describe(args[0])}, k and v {describe(args[1])}, a ring of W={W} slots "
             f"{describe(args[3])}, position={position}, RoPE tables ({n_table}, {D_h // 2})")
    return Case(label, tuple(args))


def _window_cases(gen) -> list[Case]:
    return [_window_case(gen, *spec) for spec in [
        # B, H, H_kv, D_h, W, position, dtype
        (1, 1, 1, 4, 4, 2, _F64, "one head, the ring not yet full"),
        (1, 2, 1, 4, 4, 3, _F64, "the token that fills the ring's last slot"),
        (1, 2, 2, 4, 4, 4, _F64, "the first token past the window: it replaces position 0"),
        (2, 4, 2, 8, 5, 13, _F64, "grouped-query, a batch of 2, long past the window"),
        (1, 4, 1, 4, 3, 0, _F64, "multi-query, the very first token"),
        (2, 6, 3, 8, 6, 20, _F32, "float32, grouped-query, the ring wrapped three times"),
        (1, 4, 2, 8, 8, 9, _F64, "a wider ring, just wrapped"),
    ]]


def _windowed(**mistake):
    return lambda *a: _window_step(*a, **mistake)


ATTEND_WITH_WINDOW = Task(
    name="attend_with_window", reference=_window_step, cases=_window_cases, seed=1005, run=_run_window,
    mutates=("cache_k", "cache_v"), rtol=1e-4, atol=1e-5,
    output=TensorOutput("the dtype of q (the output and the buffers)"),
    mistakes=[
        Mistake("the new token is rotated by its SLOT (position % W), not by its position. RoPE needs the real "
                "position p: once the ring wraps, slots no longer say how far apart two tokens are, but the "
                "rotations still must.", _windowed(rope_at=lambda p, W: p % W)),
        Mistake("you attended over every slot although the ring is not full yet: until position W − 1 only "
                "slots 0 … position hold keys; the rest are leftovers.", _windowed(every_slot=True)),
        Mistake("you attended before writing the new key and value: the new token must see itself (it is "
                "the newest of the W positions in its window), and the position W back has left the window.",
                _windowed(attend_first=True)),
        Mistake("the new key and value are not written into the ring: store them at slot position % W, in "
                "place, so that later steps find them.", _windowed(write=False)),
        Mistake("the ring is written at slot (position + 1) % W: position p goes to slot p % W.",
                _windowed(slot=lambda p, W: (p + 1) % W)),
        Mistake("the kv heads are tiled (.repeat): query head h then reads kv head h % H_kv. Each kv head "
                "serves n_rep = H // H_kv CONSECUTIVE query heads: use repeat_interleave on the head dimension.",
                _windowed(grouping="tile")),
        Mistake("the scores are not scaled: divide by √D_h.", _windowed(scale=1.0)),
        Mistake("the buffers were not changed in place: assign into a slice of cache_k and cache_v (the "
                "caller keeps the ring for the next step).", _windowed(in_place=False)),
        Mistake("the ring holds the key before RoPE. Store the rotated key: later steps read it back without "
                "its position.", _windowed(store_rotated=False)),
    ],
    forbid=Forbid(operations=("attention",), modules=(attention_ref, cache_ref)),
)

check_attend_with_window = ATTEND_WITH_WINDOW.checker(
    """Check ``attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin)``: one new token at
    ``position`` with a ring buffer of W = cache_k.shape[2] slots — rotate q and k by the position, write
    the rotated k and v at slot position % W, attend over the min(position + 1, W) filled slots.""")
