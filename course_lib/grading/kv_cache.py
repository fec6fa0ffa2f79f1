"""Checkers for exercise 10 (the KV cache).

1. ``predictions`` — predict four numbers about caches before computing them (a function returning a dict).
2. ``kv_cache_bytes`` — the size in bytes of the cache of a model whose layers are local (a sliding window)
   or global, each allocating the slots its queries need (a formula: building or measuring a model is
   refused).
3. ``attend_with_cache`` — one attention step with a preallocated cache: RoPE at the cache's offset, the
   write, the causal mask over cached and new keys, grouped-query heads.
4. ``KVCache`` — find and fix the bug in a given cache class whose ``length`` moves in every layer.
5. ``attend_with_window`` — extend the step to a sliding-window (ring-buffer) cache of W slots.

A wrong answer is named from what it gets wrong (``_discrepancy``): the buffers slot by slot; the attention
weights a probe with one-hot values exposes (keys attended to or missed, the scale, the kv head each query
head reads, the positions the queries are rotated at); for the cache class, what each returned slot holds;
for the cache's size, the slots the count gives each kind of layer and the bytes of one slot.
"""

from __future__ import annotations


import math

import torch

from .. import attention as attention_ref
from .. import counting
from .. import kv_cache as cache_ref
from ..positional import apply_rope, rope_cos_sin
from ._predictions import predictions_task
from ._core import Case, Forbid, GradingError, NumberOutput, Task, TensorOutput, describe
from ._discrepancy import by_factors, factor_story, probe, reasoned_predictions, recall, remember, remembering, safe

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


def _gib_factors(n_layers, heads_ratio, positions_ratio=None):
    factors = [(0.5, "the cache holds keys AND values: a factor 2"),
               (2.0, "16-bit numbers take 2 bytes each, not 4"),
               (8.0, "that counts bits: a 16-bit number is 2 bytes"),
               (_GIB / 1e9, "that is in GB (10⁹ bytes); the question asks for GiB (2³⁰ bytes)"),
               (1024.0, "that is in MiB; the question asks for GiB (2³⁰ bytes)"),
               (1 / n_layers, f"every one of the {n_layers} layers keeps its own keys and values"),
               (1 / 128, "each key and value has head_dim = 128 numbers")]
    if heads_ratio:
        factors.insert(0, heads_ratio)
    if positions_ratio:
        factors.insert(0, positions_ratio)
    return factors


def _positions_story(value, given, true) -> str | None:
    """Positions fed without a cache: which steps the value adds up."""
    if value == 10 + sum(range(10, 15)):
        return ("the prompt's pass IS the first step: without a cache the first step runs the 10-token prompt "
                "and each later step one position more; nothing runs before them.")
    if value in (14, 15):
        return ("that is about the count WITH a cache (the prompt once, then one position per step). Without a "
                "cache every step feeds the whole sequence again.")
    if value == 50:
        return "the sequence grows by one token per step: 10, then 11, 12, …"
    if value == 46:
        return ("that counts only the recomputed positions. The question asks for every position fed through "
                "the model, the first time included.")
    for first in range(5, 16):
        for steps in (4, 5, 6):
            if value == sum(range(first, first + steps)) and (first, steps) != (10, 5):
                if first == 10 and steps == 6:
                    return "the last token is generated, not fed back: 5 steps feed 10, 11, 12, 13 and 14 positions."
                if first == 11 and steps == 5:
                    return ("the last token is generated, not fed back: the steps feed 10 … 14 positions, not "
                            "11 … 15.")
                return ("the first of the 5 steps feeds the whole 10-token prompt, and each later step one "
                        "position more.")
    return None


KV_PREDICTIONS = reasoned_predictions(predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=1001,
    rtol=1e-2,
    atol=1e-6,
    forbid=Forbid(modules=(counting, cache_ref), models=True),
    advice="Work it out on paper from the shapes first, then run the cell below.",
), _true_predictions, {
    "llama2_70b_gib": by_factors("llama2_70b_gib", _gib_factors(
        80, (8.0, "that counts all 64 query heads. The cache stores keys and values, and Llama 2 70B has only 8 "
                  "key/value heads (grouped-query attention)")), rtol=5e-3),
    "llama2_7b_gib": by_factors("llama2_7b_gib", _gib_factors(
        32, (0.25, "Llama 2 7B uses multi-head attention: 32 key/value heads, one per query head (grouped-query "
                   "attention came with the 70B model)")), rtol=5e-3),
    "mistral_window_gib": by_factors("mistral_window_gib", _gib_factors(
        32, (4.0, "Mistral 7B has 8 key/value heads shared by its 32 query heads: count the key/value heads"),
        (8.0, "with a sliding window of 4,096 a query never reads keys further back, so a rolling buffer keeps "
              "only the last 4,096 positions, not all 32,768")), rtol=5e-3),
    "positions_without_cache": _positions_story,
})

check_kv_predictions = KV_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the KV cache of Llama 2 70B and of Llama 2 7B at 4,096 tokens and of
    Mistral 7B's rolling buffer (GiB, 16-bit, one sequence), and the positions fed through a model without
    a cache to generate 5 tokens after a 10-token prompt.""")


# --- Task 2: the cache of a model with local and global layers ------------------------------------------------

def _hybrid_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    """Σ over layers of the slots each needs (max_len for a global layer, min(W, max_len) for a local one),
    times 2 · n_kv_heads · head_dim · batch · bytes_per_element."""
    slots = sum(max_len if w is None else min(w, max_len) for w in windows)
    return 2 * slots * n_kv_heads * head_dim * batch * bytes_per_element


def _describe_windows(windows) -> str:
    if all(w is None for w in windows):
        return f"{len(windows)} global layers"
    if all(w is not None for w in windows) and len(set(windows)) == 1:
        return f"{len(windows)} local layers (W={windows[0]})"
    if len(windows) > 6:
        n_local = sum(w is not None for w in windows)
        widest = max(w for w in windows if w is not None)
        return f"{len(windows)} layers, {n_local} local (W={widest}) and the rest global"
    return "layers with windows " + ", ".join("global" if w is None else f"W={w}" for w in windows)


def _hybrid_cases(gen) -> list[Case]:
    cases = []
    for windows, h, h_kv, d_h, length, b, e, what in [
        ([3, None, 5], 4, 2, 8, 10, 2, 4, "a tiny model: a local layer, a global one, a local one, float32"),
        ([4096, None] * 13, 8, 4, 256, 8192, 1, 2, "Gemma 2 2B's shape (local and global layers alternate), 16-bit"),
        ([4096] * 32, 32, 8, 128, 32768, 1, 2, "Mistral 7B's shape, every layer local, 32,768 tokens, 16-bit"),
        ([4096] * 32, 32, 8, 128, 2048, 4, 2, "Mistral 7B's shape on sequences shorter than its window, a batch of 4"),
        ([None] * 4, 6, 6, 16, 20, 3, 4, "four global layers, multi-head, a batch of 3, float32"),
        ([1, 2, None, 7], 6, 1, 24, 6, 2, 1, "multi-query attention, windows of 1, 2 and 7 and a global layer, 8-bit"),
        ([6, None, 6, None, 6], 8, 2, 32, 6, 1, 2, "windows exactly as long as the sequences"),
    ]:
        args = (windows, h, h_kv, d_h, length, b, e)
        cases.append(Case(f"{what}: {_describe_windows(windows)}, n_heads={h}, n_kv_heads={h_kv}, "
                          f"head_dim={d_h}, max_len={length}, batch={b}, bytes_per_element={e}", args))
    return cases


def _hybrid_story(student) -> str | None:
    """Read the student's count layer by layer: the slots it gives one layer of each kind (a window shorter
    than the sequences, one longer, a global layer), whether layers add up, and the bytes per slot."""
    H, H_kv, D_h, B, e = 12, 3, 5, 7, 4  # sizes whose factors (4, 1/3, 1/5, 1/7, 1/4) tell slips apart
    unit = 2 * H_kv * D_h * B * e  # bytes of one slot: a key and a value per kv head, per sequence

    def f(windows, length, **change):
        args = dict(n_heads=H, n_kv_heads=H_kv, head_dim=D_h, max_len=length, batch=B, bytes_per_element=e)
        args.update(change)
        try:
            value = student(list(windows), args["n_heads"], args["n_kv_heads"], args["head_dim"],
                            args["max_len"], args["batch"], args["bytes_per_element"])
        except Exception:
            return None
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    global_ = f([None], 20)
    if global_ is None:
        return None
    ratio = global_ / (20 * unit)
    factors = [(H / H_kv, "the cache stores keys and values: count the n_kv_heads key/value heads, not the "
                          "n_heads query heads"),
               (0.5, "the cache holds keys AND values: a factor 2"),
               (1 / B, "every sequence of the batch has its own cache"),
               (1 / e, "that is a number of elements: multiply by bytes_per_element to get bytes"),
               (8.0, "that counts bits, not bytes"),
               (1 / D_h, "each key and value has head_dim numbers"),
               (1 / H_kv, "each of the n_kv_heads key/value heads has its own keys and values")]
    if abs(ratio - 1) > 1e-9:
        story = factor_story(ratio, factors, max_factors=2, rtol=1e-9)
        if story:
            return "the bytes of one slot are off: " + "; and ".join(story) + "."
        if global_ == 0:
            return ("a global layer counts nothing: it keeps the keys and values of every position, max_len "
                    "slots.")
        return None
    short, long_, tiny = f([4], 20), f([30], 20), f([1], 20)
    if None in (short, long_, tiny):
        return None
    slots = {w: value / unit for w, value in ((4, short), (30, long_), (1, tiny))}
    if slots[4] == 20:
        return ("every layer is counted with max_len slots, the windows ignored: a local layer's queries never "
                "read a key more than W − 1 positions back, so W slots serve it (a ring buffer).")
    if slots[4] == 5 and slots[1] == 2:
        return ("a local layer with a window of W is counted with W + 1 slots: its query sees the positions "
                "p − W + 1 … p, W of them, itself included.")
    if slots[4] == 3 and slots[1] == 0:
        return ("a local layer with a window of W is counted with W − 1 slots: its query sees the positions "
                "p − W + 1 … p, W of them, ITSELF included, and its key must be kept too.")
    if slots[4] == 4 and slots[30] == 30:
        return ("a window longer than the sequences is counted in full: a layer never holds more than max_len "
                "positions, so a local layer needs min(W, max_len) slots.")
    if slots[4] != 4 or slots[30] != 20:
        return ("a local layer's slots are off: with a window of W its queries read the last W positions, so it "
                "needs min(W, max_len) slots.")
    pair, mixed, three = f([4, 7], 20), f([None, 4], 20), f([7, 4, None], 20)
    if None in (pair, mixed, three):
        return None
    if pair != short + f([7], 20) or mixed != global_ + short or three != f([7], 20) + short + global_:
        each = {name: value / unit for name, value in (("pair", pair), ("mixed", mixed), ("three", three))}
        if each["pair"] == 8 and each["three"] == 21:
            return "every layer is counted with the first layer's window: each layer has its own window."
        if each["pair"] == 14:
            return "every layer is counted with the largest window: each layer has its own window."
        return ("the layers do not add up: the cache is the sum, layer by layer, of each layer's own slots (a "
                "global layer max_len, a local one min(W, max_len)).")
    return None


@safe
def _hybrid_explain(got, want, case: Case) -> str | None:
    return _hybrid_story(recall())


KV_CACHE_BYTES = Task(
    name="kv_cache_bytes", reference=_hybrid_bytes, cases=_hybrid_cases, seed=1002, rtol=0.0, atol=0.0,
    run=remembering, explain=_hybrid_explain,
    output=NumberOutput("a number of bytes", integer=True),
    forbid=Forbid(modules=(counting, cache_ref), models=True),
    hint="Count slots layer by layer: how many positions must each layer keep so that every later query finds "
         "the keys it reads? Then multiply by what one slot holds.",
)

check_kv_cache_bytes = KV_CACHE_BYTES.checker(
    """Check ``kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element)``:
    the bytes of a preallocated cache in which a global layer (window None) keeps max_len positions and a
    local layer (window W) min(W, max_len), each a key and a value per kv head (an int).""")


# --- shared: attention of new queries over cached keys -----------------------------------------------------

def _attend(q_rot, keys, values, allowed):
    """Grouped-query attention of q (B, H, T, D_h) over keys, values (B, H_kv, S, D_h); allowed (T, S)."""
    H, H_kv, D_h = q_rot.shape[1], keys.shape[1], q_rot.shape[-1]
    n_rep = H // H_kv
    keys, values = keys.repeat_interleave(n_rep, 1), values.repeat_interleave(n_rep, 1)  # head h: h // n_rep
    scores = (q_rot @ keys.transpose(-2, -1)) * D_h ** -0.5  # (B, H, T, S)
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


# --- reasoning about a wrong step: what the buffers hold, and whom each query attended to -----------------
#
# An attention step's output mixes several choices: which slots get written with what, which keys a query
# sees, how its scores are scaled, which kv head it reads, at which position it is rotated. The checkers
# take them apart. The buffers are compared slot by slot with what belongs there. Then a probe whose values
# are one-hot in their slot (the value of slot j is e_j) turns the output into the attention weights
# themselves: which keys each query attended to, and log-weights that must be the scores q·k / √D_h up to a
# constant per query.

def _slot_changes(before, after) -> list[int]:
    """The slots (dim 2) of a buffer whose contents changed."""
    diff = (before.double() - after.double()).abs().amax(dim=(0, 1, 3))
    return [int(i) for i in torch.nonzero(diff > 0).flatten()]


def _near(a, b) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), rtol=1e-4, atol=1e-5))


def _rotated(x, cos, sin, positions):
    """x (B, H, T, D_h) rotated at the given positions (one per row), in float64."""
    index = torch.tensor(positions)
    return apply_rope(x.double(), cos.double()[index], sin.double()[index])


def _written_story(k, v, ck0, cv0, ck1, cv1, slots, positions, cos, sin, where) -> str | None:
    """What the student's buffers hold after the step, against the keys rotated at ``positions`` and the
    values, at ``slots`` (``where`` words them)."""
    changed_k, changed_v = _slot_changes(ck0, ck1), _slot_changes(cv0, cv1)
    if not changed_k and not changed_v:
        return ("the buffers were not changed in place: assign into a slice of cache_k and cache_v "
                "(cache_k[:, :, a:b] = …); cache_k = torch.cat(...) or cache_k.clone() only rebinds a local "
                "name, and the caller keeps the cache for the next step.")
    for which, changed in (("keys", changed_k), ("values", changed_v)):
        if changed == slots:
            continue
        if not changed:
            return f"the new {which} are not written into the buffer: store them at {where}, in place."
        if len(changed) == len(slots):
            shift = changed[0] - slots[0]
            if all(c - s == shift for c, s in zip(changed, slots)):
                if changed[0] == 0:
                    return (f"the new {which} are written at the start of the buffer (slot 0), over the cached "
                            f"ones. Write them at {where}.")
                side = "after" if shift > 0 else "before"
                return (f"the new {which} are written {abs(shift)} slot{'s' if abs(shift) > 1 else ''} {side} "
                        f"where they belong (the write index is off by {abs(shift)}): write them at {where}.")
        if set(slots) < set(changed):
            return (f"your function changes slots of the {which} buffer besides the new ones: only {where} are "
                    f"written; the other slots stay as they are.")
        return f"the new {which} are not written where they belong: write them at {where}."
    index = torch.tensor(slots)
    got_k, got_v = ck1[:, :, index], cv1[:, :, index]
    right_k = _rotated(k, cos, sin, positions)
    if not _near(got_k, right_k):
        if _near(got_k, v) and _near(got_v, right_k):
            return "keys and values are swapped: the key buffer gets the rotated keys, the value buffer the values."
        if _near(got_k, k):
            return ("the cache holds the keys before RoPE. Store the rotated keys: later steps read them back "
                    "without their positions.")
        if _near(got_k, _rotated(right_k, cos, sin, positions)):
            return "the new keys are rotated twice before they are stored: rotate them once, by their positions."
        if slots != positions and max(slots) < cos.shape[0] and _near(got_k, _rotated(k, cos, sin, slots)):
            return ("the new token is rotated by its SLOT (position % W), not by its position. RoPE needs the real "
                    "position p: once the ring wraps, slots no longer say how far apart two tokens are, but the "
                    "rotations still must.")
        for shift in range(-max(positions), cos.shape[0] - min(positions)):
            moved = [p + shift for p in positions]
            if shift and min(moved) >= 0 and max(moved) < cos.shape[0] and _near(got_k, _rotated(k, cos, sin, moved)):
                if moved[0] == 0:
                    return ("the new tokens are rotated as if they were at positions 0 … T − 1. They are at "
                            "positions length … length + T − 1: use the rows cos[length:length + T] and "
                            "sin[length:length + T].")
                side = "after" if shift > 0 else "before"
                return (f"the new keys are rotated at positions {abs(shift)} {side} their own: RoPE uses each "
                        f"token's position.")
        return "the keys stored in the buffer are not the new keys rotated by their positions."
    if not _near(got_v, v):
        if _near(got_v, _rotated(v, cos, sin, positions)):
            return "the values were rotated too: RoPE applies to queries and keys only."
        if _near(got_v, right_k) or _near(got_v, k):
            return "the value buffer gets the keys: store v in cache_v."
        return "the values stored in the buffer are not the new values."
    return None


def _weights_from(out, n_keys) -> torch.Tensor | None:
    """The attention weights an output over one-hot values holds, (B, H, T, n_keys), or None."""
    if not isinstance(out, torch.Tensor) or out.dim() != 4:
        return None
    out = out.detach().double()
    if out.shape[-1] > n_keys and out[..., n_keys:].nan_to_num().abs().max() > 1e-9:
        return None  # not a mix of the one-hot values: the values were changed on the way
    return out[..., :n_keys]


def _slope(logw, scores, rows) -> float | None:
    """The common slope of log-weights against scores over the (b, h, t, keep) rows given, each centred
    (a constant per query drops out); None when they are not proportional."""
    xs, ys = [], []
    for b, h, t, keep in rows:
        if keep.sum() >= 2:
            s, lw = scores[b, h, t][keep], logw[b, h, t][keep]
            xs.append(s - s.mean())
            ys.append(lw - lw.mean())
    if not xs:
        return None
    x, y = torch.cat(xs), torch.cat(ys)
    if float((x * x).sum()) == 0:
        return None
    slope = float((x * y).sum() / (x * x).sum())
    return slope if torch.allclose(slope * x, y, atol=1e-6, rtol=1e-5) else None


def _attention_story(weights, scores, allowed, labels, *, D_h, kv_scores, rope_scores, alternatives=(),
                     offset_story=None, who="the queries") -> str | None:
    """What the queries' weights get wrong. ``weights`` (B, H, T, K) from the probe, ``scores`` the right
    scaled scores, ``allowed`` (T, K) the keys each query may see, ``labels(t, j)`` names key j for query t.
    ``kv_scores`` (H_kv, B, H, T, K): every query head's scores against each kv head; ``rope_scores(shift)``
    the scores with the queries rotated ``shift`` positions off and what that means (None past the tables);
    ``alternatives``: (scores, what it means) pairs for other ways of computing the scores;
    ``offset_story(seen)`` may word a support (T, K) that is a mask of another shape."""
    B, H, T, K = weights.shape
    if torch.isnan(weights).any():
        return ("some queries have every score masked (their weights are NaN): is the mask inverted? masked_fill "
                "fills where the mask is True, so give it ~allowed (allowed = True where a query may attend); a "
                "query may always attend to itself.")
    per_query = weights.sum(-1)
    if not torch.allclose(per_query, torch.ones_like(per_query), atol=1e-6):
        per_key = weights.sum(-2)[..., allowed.any(0)]
        if T > 1 and torch.allclose(per_key, torch.ones_like(per_key), atol=1e-6):
            return ("softmax runs over the wrong dimension: each query's weights over the keys (the last "
                    "dimension) must sum to 1; yours sum to 1 over the queries.")
        return ("a query's weights do not sum to 1 over its keys: softmax over the last dimension, the keys, of "
                "the masked scores.")
    logw = torch.log(weights.clamp_min(1e-300))
    support = weights > 1e-12
    extra = support & ~allowed
    if extra.any():  # masked keys weighted as if their score were 0: the mask multiplied in, not −inf
        norm = torch.nanmean((logw - scores).masked_fill(~(allowed & support), float("nan")), dim=-1, keepdim=True)
        implied = (logw - norm).expand_as(weights)[extra]
        if torch.allclose(implied, torch.zeros_like(implied), atol=1e-6):
            return ("the masked scores are set to 0 (the mask multiplies the scores) instead of −inf: exp(0) still "
                    "gives those keys weight. Use scores.masked_fill(~allowed, float('-inf')).")
    seen_by = support.any(dim=(0, 1))  # (T, K): the keys each query attended to, in any head
    if not torch.equal(seen_by, allowed):
        story = offset_story(seen_by) if offset_story else None
        if story:
            return story
        seen = sorted({labels(t, j) for t in range(T) for j in range(K) if seen_by[t, j] and not allowed[t, j]})
        missed = sorted({labels(t, j) for t in range(T) for j in range(K) if allowed[t, j] and not seen_by[t, j]})
        parts = []
        they = "they" if who.endswith("s") else "it"
        verb = (lambda plural, singular: plural if they == "they" else singular)
        if seen:
            parts.append(f"{verb('attend', 'attends')} to keys {they} must not see: {'; '.join(seen)}")
        if missed:
            parts.append(f"{verb('miss', 'misses')} keys {they} must see: {'; '.join(missed)}")
        return who + " " + ", and ".join(parts) + "."
    rows = [(b, h, t, allowed[t]) for b in range(B) for h in range(H) for t in range(T)]
    slope = _slope(logw, scores, rows)
    if slope is not None:
        if abs(slope - 1) < 1e-4:
            return None
        if abs(slope - math.sqrt(D_h)) < 1e-3 * math.sqrt(D_h):
            return "the scores are not scaled: divide by √D_h."
        if abs(slope * math.sqrt(D_h) - 1) < 1e-3:
            return "the scores are divided by D_h; the scale is 1/√D_h."
        return "the scores' scale is off: the softmax takes q · k / √D_h."
    H_kv = kv_scores.shape[0]
    reads = []
    for h in range(H):
        fits = [g for g in range(H_kv)
                if _slope(logw, kv_scores[g], [(b, h, t, allowed[t]) for b in range(B) for t in range(T)]) is not None]
        reads.append(fits[0] if len(fits) == 1 else None)
    n_rep = H // H_kv
    if None not in reads and reads != [h // n_rep for h in range(H)]:
        if reads == [h % H_kv for h in range(H)]:
            return ("the kv heads are tiled (.repeat): query head h then reads kv head h % H_kv. Each kv head serves "
                    "n_rep = H // H_kv CONSECUTIVE query heads: use repeat_interleave on the head dimension.")
        return ("the query heads read the wrong kv heads: query head h reads kv head h // n_rep (n_rep = H // H_kv), "
                "each kv head serving n_rep consecutive query heads.")
    for scores_, meaning in alternatives:
        if _slope(logw, scores_, rows) is not None:
            return meaning
    for shift in range(-40, 40):
        moved = rope_scores(shift) if shift else None
        if moved is not None and _slope(logw, moved[0], rows) is not None:
            return moved[1]
    return None


# Task 3's probe: 4 query heads on 2 kv heads, D_h = 16, 5 positions cached, 3 new, a buffer of 12 slots (the
# values of slot j and of new token i are e_j and e_(5 + i)).
_PROBE_STEP = dict(H=4, H_kv=2, D_h=16, S_max=12, length=5, T=3)


def _step_probe_story() -> str | None:
    H, H_kv, D_h, S_max, length, T = (_PROBE_STEP[k] for k in ("H", "H_kv", "D_h", "S_max", "length", "T"))
    gen = torch.Generator().manual_seed(1033)
    q = torch.randn(1, H, T, D_h, generator=gen, dtype=_F64)
    k = torch.randn(1, H_kv, T, D_h, generator=gen, dtype=_F64)
    cache_k = torch.randn(1, H_kv, S_max, D_h, generator=gen, dtype=_F64)  # stored keys (rotated), leftovers
    eye = torch.eye(D_h, dtype=_F64)
    cache_v = eye[:S_max].expand(1, H_kv, S_max, D_h).clone()  # slot j holds e_j
    cache_v[:, :, length:length + T] = 0  # the slots the step writes (so that a write shows)
    v = eye[length:length + T].expand(1, H_kv, T, D_h).clone()  # new token i is e_(length + i)
    cos, sin = rope_cos_sin(torch.arange(S_max), D_h, 100.0, dtype=_F64)
    ck, cv = cache_k.clone(), cache_v.clone()
    out = probe(q.clone(), k.clone(), v.clone(), ck, cv, length, cos, sin)
    end = length + T
    written = _written_story(k, v, cache_k, cache_v, ck, cv, list(range(length, end)), list(range(length, end)),
                             cos, sin, "slots length … length + T − 1")
    weights = _weights_from(out, S_max)
    if weights is None or weights.shape != (1, H, T, S_max):
        return written
    keys = cache_k.clone()
    keys[:, :, length:end] = _rotated(k, cos, sin, list(range(length, end)))
    n_rep = H // H_kv

    def scores_for(q_rot, keys_):
        return q_rot @ keys_.repeat_interleave(n_rep, 1).transpose(-2, -1) / math.sqrt(D_h)  # (1, H, T, S_max)

    q_rot = _rotated(q, cos, sin, list(range(length, end)))
    scores = scores_for(q_rot, keys)
    kv_scores = torch.stack([q_rot @ keys[:, g:g + 1].transpose(-2, -1) / math.sqrt(D_h) for g in range(H_kv)])
    allowed = torch.arange(length, end)[:, None] >= torch.arange(S_max)[None, :]  # (T, S_max)

    def labels(t, j):
        if j < length:
            return "cached positions"
        if j == length + t:
            return "itself"
        if j < length + t:
            return "the new tokens before it"
        if j < end:
            return "the new tokens after it"
        return "slots past length + T, leftovers not filled yet"

    def offset_story(seen):
        if seen[:, end:].any():
            return None
        if seen[:, :end].all():
            return ("there is no causal mask among the new tokens: with T > 1 new tokens, query i must not see the "
                    "new tokens after it (it may attend to the keys at positions ≤ length + i).")
        for offset in range(-T, end + 1):
            if torch.equal(seen, (torch.arange(T)[:, None] + offset >= torch.arange(S_max)[None, :]) &
                           (torch.arange(S_max)[None, :] < end)):
                if offset == 0:
                    return ("the causal mask aligns the queries with the FIRST keys (tril of a (T, S) matrix, or "
                            "is_causal=True): the queries sit at positions length … length + T − 1, so query i may "
                            "attend to every key at position ≤ length + i.")
                if offset == length - 1:
                    return ("no query attends to itself: query i may attend to the keys at positions ≤ length + i, "
                            "itself included (≥, not >).")
                if offset > length:
                    return (f"each query also sees {offset - length} position{'s' if offset - length > 1 else ''} "
                            f"after its own: query i may attend to the keys at positions ≤ length + i.")
                return "query i must attend to the keys at positions ≤ length + i, no fewer."
        if not seen[:, length:end].any() and seen[:, :length].all():
            return ("the new keys and values are not in the cache when you attend: write them into the buffers "
                    "first, then attend over all length + T positions (a new token must see itself).")
        if seen[:, length:end].all() and not seen[:, :length].any():
            return ("the cached keys are masked out: the new queries must attend to every cached position as well "
                    "as to the new tokens up to their own.")
        return None

    def rope_scores(shift):
        positions = [length + t + shift for t in range(T)]
        if min(positions) < 0 or max(positions) >= S_max:
            return None
        moved = scores_for(_rotated(q, cos, sin, positions), keys)
        if positions[0] == 0:
            return moved, ("the new queries are rotated as if they were at positions 0 … T − 1. They are at "
                           "positions length … length + T − 1: use the rows cos[length:length + T] and "
                           "sin[length:length + T].")
        side = "after" if shift > 0 else "before"
        return moved, f"the queries are rotated at positions {abs(shift)} {side} their own."

    reread = keys.clone()
    reread[:, :, :length] = _rotated(keys[:, :, :length], cos, sin, list(range(length)))
    alternatives = [(scores_for(q_rot, reread), "the cached keys were rotated again when read: they are stored "
                                                "AFTER RoPE (each at its own position), so rotate only the new keys, "
                                                "once, and store them rotated.")]
    attention = _attention_story(weights, scores, allowed, labels, D_h=D_h, kv_scores=kv_scores,
                                 rope_scores=rope_scores, alternatives=alternatives, offset_story=offset_story)
    found = [m for m in (written, attention) if m]
    return " And ".join(found) if found else None


@safe
def _step_explain(got, want, case: Case) -> str | None:
    q, k, v, ck0, cv0, length, cos, sin = case.args
    T = q.shape[2]
    n_out, n_buf = q.numel(), ck0.numel()
    probed = _step_probe_story()
    if probed:
        return probed
    if got.numel() != want.numel():
        return None
    ck1 = got[n_out:n_out + n_buf].reshape(ck0.shape)
    cv1 = got[n_out + n_buf:].reshape(cv0.shape)
    slots = list(range(length, length + T))
    return _written_story(k, v, ck0, cv0, ck1, cv1, slots, slots, cos, sin, "slots length … length + T − 1")


# Task 5's probes: a ring of W = 6 slots, 4 query heads on 2 kv heads, D_h = 16, before and after it wraps.
# The ring's slot j holds e_j; the new token's value is e_W, so the output shows the weight on each old slot
# (the new token's slot included, if the old value there is read) and, at dimension W, on the new token.

def _window_probe_story(position: int) -> str | None:
    H, H_kv, D_h, W = 4, 2, 16, 6
    gen = torch.Generator().manual_seed(1055 + position)
    q = torch.randn(1, H, 1, D_h, generator=gen, dtype=_F64)
    k = torch.randn(1, H_kv, 1, D_h, generator=gen, dtype=_F64)
    ring_k = torch.randn(1, H_kv, W, D_h, generator=gen, dtype=_F64)  # stored keys (rotated), or leftovers
    eye = torch.eye(D_h, dtype=_F64)
    ring_v = eye[:W].expand(1, H_kv, W, D_h).clone()
    v = eye[W:W + 1].expand(1, H_kv, 1, D_h).clone()
    cos, sin = rope_cos_sin(torch.arange(position + 3), D_h, 100.0, dtype=_F64)
    ck, cv = ring_k.clone(), ring_v.clone()
    out = probe(q.clone(), k.clone(), v.clone(), ck, cv, position, cos, sin)
    slot, filled = position % W, min(position + 1, W)
    written = _written_story(k, v, ring_k, ring_v, ck, cv, [slot], [position], cos, sin, "slot position % W")
    weights = _weights_from(out, W + 1)
    if weights is None or weights.shape != (1, H, 1, W + 1):
        return written
    k_rot = _rotated(k, cos, sin, [position])
    keys = torch.cat([ring_k, k_rot], dim=2)  # (1, H_kv, W + 1, D_h): the old slots, then the new key
    n_rep = H // H_kv
    q_rot = _rotated(q, cos, sin, [position])

    def scores_for(q_rot_):
        return q_rot_ @ keys.repeat_interleave(n_rep, 1).transpose(-2, -1) / math.sqrt(D_h)

    scores = scores_for(q_rot)
    kv_scores = torch.stack([q_rot @ keys[:, g:g + 1].transpose(-2, -1) / math.sqrt(D_h) for g in range(H_kv)])
    allowed = torch.zeros(1, W + 1, dtype=torch.bool)
    allowed[0, :filled] = True
    allowed[0, slot] = False  # the old value of the new token's slot is overwritten
    allowed[0, W] = True  # the new token itself

    def labels(t, j):
        if j == W:
            return "itself, the key just written"
        if j == slot:
            return ("the position W steps back, which has just left the window (its slot now holds the new token)"
                    if position >= W else "a slot not filled yet")
        if j >= filled:
            return "slots not filled yet (until position W − 1 only slots 0 … position hold keys)"
        return "slots that still hold positions of the window"

    def offset_story(seen):
        if not seen[0, W] and torch.equal(seen[0, :W], allowed[0, :W]):
            return ("the new token does not attend to itself: write its key and value into the ring first, then "
                    "attend over the filled slots — the newest of the W positions in its window is the token itself.")
        return None

    def rope_scores(shift):
        at = position + shift
        if at < 0 or at >= cos.shape[0]:
            return None
        if at == slot:
            what = ("the query is rotated by its SLOT (position % W), not by its position: RoPE needs the real "
                    "position p, for the query as for the key.")
        else:
            what = f"the query is rotated at a position {abs(shift)} {'after' if shift > 0 else 'before'} its own."
        return scores_for(_rotated(q, cos, sin, [at])), what

    logw = torch.log(weights.clamp_min(1e-300))
    support = weights > 1e-12
    if not torch.isnan(weights).any() and torch.equal(support[0, :, 0].any(0), allowed[0]):
        # the right keys: is the new token's weight what its score gives, or twice that (counted twice)?
        old = allowed[0].clone()
        old[W] = False
        if old.sum() >= 2:
            norm = (logw - scores)[..., old].mean(-1)  # (1, H, 1)
            ratio = torch.exp(logw[..., W] - scores[..., W] - norm)
            offsets = (logw - scores)[..., old]
            consistent = torch.allclose(offsets, norm.unsqueeze(-1).expand_as(offsets), atol=1e-6)
            if consistent and torch.allclose(ratio, torch.full_like(ratio, 2.0), rtol=1e-4):
                return (written + " And " if written else "") + (
                        "the new token's key is counted twice: it is in the ring (you wrote it there) and appended "
                        "again. Attend over the filled slots of the ring only, after writing the new key.")
    found = [written] if written else []
    attention = _attention_story(weights, scores, allowed, labels, D_h=D_h, kv_scores=kv_scores,
                                 rope_scores=rope_scores, offset_story=offset_story, who="the new token")
    if attention:
        found.append(attention)
    return " And ".join(found) if found else None


@safe
def _window_explain(got, want, case: Case) -> str | None:
    q, k, v, ck0, cv0, position, cos, sin = case.args
    W = ck0.shape[2]
    n_out, n_buf = q.numel(), ck0.numel()
    if got.numel() != want.numel():
        return None
    ck1 = got[n_out:n_out + n_buf].reshape(ck0.shape)
    cv1 = got[n_out + n_buf:].reshape(cv0.shape)
    probed = _window_probe_story(9) or _window_probe_story(3)
    if probed:
        return probed
    return _written_story(k, v, ck0, cv0, ck1, cv1, [position % W], [position], cos, sin, "slot position % W")


@safe
def _cache_explain(got, want, case: Case) -> str | None:
    """Replay what the model fed the cache and say what the first wrong slot returned holds instead (after
    checking, on a cache of the student's class, that update() leaves `length` alone)."""
    n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunks = case.args
    moved = _length_moves(n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunks[0])
    if moved:
        return moved
    fed = {}  # (layer, position) -> (key, value), each (B, H_kv, D_h)
    at, length = 0, 0
    for p, chunk in enumerate(chunks):
        T = chunk[0][0].shape[2]
        for layer, (k, v) in enumerate(chunk):
            for i in range(T):
                fed[layer, length + i] = (k[:, :, i].double(), v[:, :, i].double())
        for layer, (k, v) in enumerate(chunk):
            S = length + T
            size = batch * n_kv_heads * S * head_dim
            keys = got[at:at + size].reshape(batch, n_kv_heads, S, head_dim).double()
            values = got[at + size:at + 2 * size].reshape(batch, n_kv_heads, S, head_dim).double()
            at += 2 * size
            for part, returned, which in (("keys", keys, 0), ("values", values, 1)):
                for j in range(S):
                    holds = returned[:, :, j]
                    if torch.equal(holds, fed[layer, j][which]):
                        continue
                    return _slot_story(part, holds, fed, layer, j, which, length, T, n_layers)
        length += T
    return None


def _length_moves(n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunk) -> str | None:
    """Whether update() changes `length` on a fresh cache of the student's class (one forward pass)."""
    cache = probe(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=dtype)
    if cache is None or n_layers < 2:
        return None
    try:
        before = cache.length
        for layer, (k, v) in enumerate(chunk):
            cache.update(layer, k.clone(), v.clone())
            if cache.length != before:
                return ("`length` moves inside update() (in layer " + str(layer) + "): the later layers of the same "
                        "forward pass then write their keys after the new tokens, not at them. All layers store the "
                        "SAME positions: update() must not change length — advance(T), called once after the last "
                        "layer, does.")
    except Exception:
        return None
    return None


def _slot_story(part, holds, fed, layer, j, which, length, T, n_layers) -> str:
    where = f"in layer {layer}, after {length} position(s) cached and {T} new, the {part} returned for position {j}"
    other = 1 - which
    if torch.equal(holds, fed[layer, j][other]):
        return (f"{where} are the {'values' if which == 0 else 'keys'} of that position: keys and values are mixed "
                f"up (update stores or returns k where v belongs, or the other way round).")
    for ell in range(n_layers):
        if ell != layer and (ell, j) in fed and torch.equal(holds, fed[ell, j][which]):
            return (f"{where} are layer {ell}'s: the layers share one buffer ([torch.zeros(shape)] * n_layers "
                    f"repeats ONE tensor, so a later layer overwrites an earlier one's keys). Build one tensor per "
                    f"layer (a list comprehension).")
    for (ell, jj), pair in fed.items():
        if ell == layer and jj != j and torch.equal(holds, pair[which]):
            if j < length:
                return (f"{where} hold position {jj}'s: the new keys and values are written over the cached ones. "
                        f"Write them at slots length … length + T − 1 (length counts what is stored).")
            return (f"{where} hold position {jj}'s: the write index is off by {abs(jj - j)}; the new tokens go to "
                    f"slots length … length + T − 1.")
    if not holds.any():
        if j < length:
            return (f"{where} hold zeros: what earlier forward passes stored is gone. update() must write the new "
                    f"keys and values into the layer's buffers (slots length … length + T − 1), not only return "
                    f"them.")
        return (f"{where} hold zeros: not every new token was written. Store all T of them, at slots "
                f"length … length + T − 1.")
    return f"{where} are not what the model fed the cache for that position."


# --- Task 3: one attention step with a cache ---------------------------------------------------------------

def _step(q, k, v, cache_k, cache_v, length, cos, sin):
    """One cache step on copies of the buffers; returns what the checker compares: the output and both
    buffers afterwards, flattened into one vector."""
    cache_k, cache_v = cache_k.clone(), cache_v.clone()
    T = q.shape[2]
    cos_t, sin_t = cos[length:length + T], sin[length:length + T]  # (T, D_h/2): the new tokens' angles
    q_rot = apply_rope(q, cos_t, sin_t)  # (B, H, T, D_h)
    cache_k[:, :, length:length + T] = apply_rope(k, cos_t, sin_t)  # (B, H_kv, T, D_h), stored rotated
    cache_v[:, :, length:length + T] = v
    end = length + T
    allowed = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]  # (T, S)
    out = _attend(q_rot, cache_k[:, :, :end], cache_v[:, :, :end], allowed)  # (B, H, T, D_h)
    return torch.cat([out.reshape(-1), cache_k.reshape(-1), cache_v.reshape(-1)])


def _run_step(student, q, k, v, cache_k, cache_v, length, cos, sin):
    """Call the student's function (it writes into its copies of the buffers); return the same vector as
    :func:`_step`."""
    remember(student)
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


ATTEND_WITH_CACHE = Task(
    name="attend_with_cache", reference=_step, cases=_step_cases, seed=1003, run=_run_step,
    mutates=("cache_k", "cache_v"), rtol=1e-4, atol=1e-5, explain=_step_explain,
    output=TensorOutput("the dtype of q (the output and the buffers)"),
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
                elif held == T and length > T:
                    more = (" advance(n) sets length to n: it must ADD n (length += n), since length counts every "
                            "position stored so far.")
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
        elif S == length + 1 and T > 1:
            why = (" It returns one new position where the pass brought T = k.shape[2] of them (a prompt, or a "
                   "chunk): return slots 0 … length + T − 1.")
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
    remember(student)
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


KV_CACHE_CLASS = Task(
    name="KVCache", reference=_cache_reference, cases=_cache_cases, seed=1004, run=_run_cache,
    rtol=0.0, atol=0.0, output=TensorOutput("the dtype given to the cache"), explain=_cache_explain,
    forbid=Forbid(modules=(cache_ref,)),
    hint="Run the given test with a two-layer model and print `length` and the slots each layer writes.",
)

check_kv_cache_class = KV_CACHE_CLASS.checker(
    """Check the class ``KVCache(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=...)`` with
    ``update(layer, k, v) -> (keys, values)`` and ``advance(n)``: driven as a model drives it, it returns
    the keys and values of every position stored so far and keeps ``length`` right.""")


# --- Task 5: a sliding-window (ring-buffer) cache --------------------------------------------------------------

def _window_step(q, k, v, cache_k, cache_v, position, cos, sin):
    """One decoding step (T = 1) with a ring buffer of W slots, position p in slot p % W. Returns the output
    and both buffers afterwards, flattened."""
    cache_k, cache_v = cache_k.clone(), cache_v.clone()
    W = cache_k.shape[2]
    cos_t, sin_t = cos[position:position + 1], sin[position:position + 1]  # (1, D_h/2)
    q_rot = apply_rope(q, cos_t, sin_t)
    s = position % W
    cache_k[:, :, s:s + 1] = apply_rope(k, cos_t, sin_t)  # (B, H_kv, 1, D_h), over position p − W
    cache_v[:, :, s:s + 1] = v
    filled = min(position + 1, W)  # slots 0 … filled − 1 hold the window, every one at a position ≤ p
    allowed = torch.ones(1, filled, dtype=torch.bool)
    out = _attend(q_rot, cache_k[:, :, :filled], cache_v[:, :, :filled], allowed)  # (B, H, 1, D_h)
    return torch.cat([out.reshape(-1), cache_k.reshape(-1), cache_v.reshape(-1)])


def _run_window(student, q, k, v, cache_k, cache_v, position, cos, sin):
    remember(student)
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


ATTEND_WITH_WINDOW = Task(
    name="attend_with_window", reference=_window_step, cases=_window_cases, seed=1005, run=_run_window,
    mutates=("cache_k", "cache_v"), rtol=1e-4, atol=1e-5, explain=_window_explain,
    output=TensorOutput("the dtype of q (the output and the buffers)"),
    forbid=Forbid(operations=("attention",), modules=(attention_ref, cache_ref)),
)

check_attend_with_window = ATTEND_WITH_WINDOW.checker(
    """Check ``attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin)``: one new token at
    ``position`` with a ring buffer of W = cache_k.shape[2] slots — rotate q and k by the position, write
    the rotated k and v at slot position % W, attend over the min(position + 1, W) filled slots.""")
