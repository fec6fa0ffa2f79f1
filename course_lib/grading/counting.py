"""Checkers for exercise 08 (counting parameters, FLOPs and memory).

1. ``count_params`` — find and fix the bug in a given count (it forgets grouped-query attention and
   tied embeddings, yet reproduces Llama 2 7B).
2. ``moe_params`` — extend the count to a mixture-of-experts FFN: (total, active) parameters.
3. ``window_core_flops`` — extend the FLOP count to the attention core of a causal model with a
   sliding window, counting only the scores the mask keeps.
4. ``predictions`` — predict four numbers (a count, a cache, a training budget, a training cost).

Every task computes from the config's fields: building a model (on any device, the meta device
included), reading its tensors, or running a FLOP counter scores nothing (``Forbid(models=True)``),
and so does calling ``course_lib.counting``.
"""

from __future__ import annotations


import torch

from .. import counting as ref
from ..config import PRESETS, ModelConfig
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, NumberOutput, Task, TupleOutput

__all__ = ["check_count_params", "check_moe_params", "check_window_core_flops", "check_counting_predictions"]

_FORBID = Forbid(modules=(ref,), models=True)


def _label(c: ModelConfig, name: str | None = None) -> str:
    """Describe a config by its kind, never by its count."""
    if c.n_kv_heads == c.n_heads:
        attention = "multi-head attention"
    elif c.n_kv_heads == 1:
        attention = "multi-query attention (one key/value head)"
    else:
        attention = "grouped-query attention (n_heads a multiple of n_kv_heads)"
    parts = [attention]
    if c.head_dim * c.n_heads != c.d_model:
        parts.append("head_dim set so that n_heads · head_dim differs from d_model")
    parts.append("tied embeddings" if c.tie_embeddings else "untied embeddings")
    what = f"the {name!r} preset" if name else f"a {c.n_layers}-layer config"
    return f"{what} ({', '.join(parts)})"


def _random_llama_configs(gen: torch.Generator, n: int) -> list[ModelConfig]:
    """Small Llama-style configs: MHA, GQA and MQA, tied or not, every third with n_heads · head_dim ≠ D."""
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    configs = []
    for i in range(n):
        n_kv = pick([1, 2, 3, 4])
        n_heads = n_kv * pick([1, 2, 4])
        head_dim = pick([8, 16, 24])
        odd_width = i % 3 == 2
        d_model = n_heads * head_dim + (pick([8, 16]) if odd_width else 0)
        configs.append(ModelConfig(
            vocab_size=pick([97, 256, 1000, 50_257]), d_model=d_model, n_layers=pick([1, 2, 3, 5]),
            n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, d_ff=pick([40, 88, 172, 300]),
            tie_embeddings=bool(i % 2), max_seq_len=64,
        ))
    return configs


# --- Task 1: the exact parameter count (find and fix) ----------------------------------------------------

def _count(c: ModelConfig, *, q_width=None, kv_width=None, head=None, block_norms=2, final_norm=True,
           ffn_matrices=3, norm_size=1, layers=None) -> int:
    """A Llama-style count with knobs: what a solution with a given mistake computes."""
    q = c.n_heads * c.head_dim if q_width is None else q_width  # H · D_h
    kv = c.n_kv_heads * c.head_dim if kv_width is None else kv_width  # H_kv · D_h
    block = 2 * c.d_model * q + 2 * c.d_model * kv + ffn_matrices * c.d_model * c.d_ff
    block += block_norms * norm_size * c.d_model
    head = (not c.tie_embeddings) if head is None else head
    n = c.n_layers if layers is None else layers
    return (n * block + c.vocab_size * c.d_model * (2 if head else 1)
            + (norm_size * c.d_model if final_norm else 0))


def _given_count(c: ModelConfig) -> int:
    """The exercise's buggy version: 4·D² of attention, and always an LM head."""
    return _count(c, q_width=c.d_model, kv_width=c.d_model, head=True)


def _count_cases(gen: torch.Generator) -> list[Case]:
    # first a config on which every catalogued mistake gives its own number: tied, grouped-query,
    # n_heads · head_dim ≠ d_model
    first = ModelConfig(vocab_size=1000, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                        d_ff=128, tie_embeddings=True, max_seq_len=64)
    cases = [Case(_label(first), (first,))]
    cases += [Case(_label(PRESETS[n], n), (PRESETS[n],))
             for n in ("llama-2-7b", "llama-3-8b", "tiny", "llama-2-70b", "mistral-7b")]
    cases.append(Case(_label(PRESETS["llama-2-7b"].replace(tie_embeddings=True), "llama-2-7b") + ", tied",
                      (PRESETS["llama-2-7b"].replace(tie_embeddings=True),)))
    cases += [Case(_label(c), (c,)) for c in _random_llama_configs(gen, 9)]
    return cases


COUNT_PARAMS = Task(
    name="count_params", seed=808, cases=_count_cases,
    reference=lambda config: ref.count_params(config).total,
    output=NumberOutput("the number of parameters", integer=True), rtol=0.0, atol=0.5,
    mistakes=[
        Mistake("this is still what the given version returns: it reproduces Llama 2 7B, whose attention is "
                "multi-head and whose head is untied, and nothing else. Two assumptions in it fail for other "
                "models; the self-check's Llama 3 8B and tied cases point at them.", _given_count),
        Mistake("the tied case is fixed, but attention is still 4·D²: with grouped-query attention w_k and "
                "w_v map D to n_kv_heads · head_dim features, not to D.",
                lambda c: _count(c, q_width=c.d_model, kv_width=c.d_model)),
        Mistake("grouped-query attention is fixed, but a tied model still gets its own LM head: with "
                "tie_embeddings the head IS the embedding table and adds nothing (check which way round "
                "your condition goes: an untied model has two tables).",
                lambda c: _count(c, head=True)),
        Mistake("the key/value width is taken as D · n_kv_heads / n_heads, which assumes head_dim = D / "
                "n_heads. Use head_dim: w_q and w_o map to n_heads · head_dim, w_k and w_v to n_kv_heads · "
                "head_dim.", lambda c: _count(c, q_width=c.d_model, kv_width=c.d_model * c.n_kv_heads // c.n_heads)),
        Mistake("w_q and w_o map D to n_heads · head_dim, which need not equal D when head_dim is given.",
                lambda c: _count(c, q_width=c.d_model)),
        Mistake("ties are handled the wrong way round: an UNtied model has two (V, D) tables (embedding and "
                "LM head), a tied one a single table.", lambda c: _count(c, head=c.tie_embeddings)),
        Mistake("an untied model has its own (V, D) LM head besides the embedding.",
                lambda c: _count(c, head=False)),
        Mistake("the final norm: a pre-norm model normalises once more, with a gain of D, before the LM head.",
                lambda c: _count(c, final_norm=False)),
        Mistake("SwiGLU has three matrices (w_gate, w_up and w_down), each D·F; you counted two.",
                lambda c: _count(c, ffn_matrices=2)),
        Mistake("the block norms: each block has two RMSNorms (before attention and before the FFN), each "
                "with a gain of D.", lambda c: _count(c, block_norms=1)),
        Mistake("you counted one block. The model repeats the block n_layers times.",
                lambda c: _count(c, layers=1)),
    ],
    forbid=_FORBID,
    hint="List every tensor of the model with its shape (embedding, per block: two gains, w_q, w_k, w_v, "
         "w_o, w_gate, w_up, w_down; the final gain; the head unless tied) and multiply out.",
)

check_count_params = COUNT_PARAMS.checker(
    """Check ``count_params(config) -> int``: the exact parameter count of a Llama-style model
    (pre-norm RMSNorm, GQA, SwiGLU, no biases; embeddings tied or not).""")


# --- Task 2: a mixture-of-experts FFN (extend) ------------------------------------------------------------

def _moe(c: ModelConfig, E: int, k: int, *, router="both", expert_matrices=3, active="right",
         dense_ffn_kept=False, swap=False, total_experts=None, **count_knobs) -> tuple[int, int]:
    """(total, active) with knobs: what a solution with a given mistake computes (``count_knobs``: a
    mistake of Task 1 in the part outside the FFNs)."""
    expert = expert_matrices * c.d_model * c.d_ff
    r = c.d_model * E
    outside = _count(c, **count_knobs) - c.n_layers * 3 * c.d_model * c.d_ff  # everything but the FFNs
    if dense_ffn_kept:
        outside += c.n_layers * 3 * c.d_model * c.d_ff
    n_total = E if total_experts is None else total_experts
    total = outside + c.n_layers * (n_total * expert + (r if router in ("both", "total") else 0))
    router_active = r if router in ("both", "active") else 0
    act = {
        "right": outside + c.n_layers * (k * expert + router_active),
        "experts-only": c.n_layers * (k * expert + router_active),
        "scaled": total * k // E,
    }[active]
    return (act, total) if swap else (total, act)


def _moe_cases(gen: torch.Generator) -> list[Case]:
    cases = [Case(_label(PRESETS["mistral-7b"], "mistral-7b") + " with 8 experts, 2 per token",
                  (PRESETS["mistral-7b"], 8, 2))]
    for c, (E, k) in zip(_random_llama_configs(gen, 7), [(4, 1), (8, 2), (16, 4), (3, 3), (6, 2), (2, 1), (5, 2)]):
        cases.append(Case(f"{_label(c)} with {E} experts, {k} per token", (c, E, k)))
    return cases


MOE_PARAMS = Task(
    name="moe_params", seed=828, cases=_moe_cases, reference=ref.moe_params,
    output=TupleOutput([NumberOutput("the total count", integer=True),
                        NumberOutput("the active count", integer=True)], ["total", "active"]),
    rtol=0.0, atol=0.5,
    mistakes=[
        Mistake("the router is missing: each block has a D → n_experts linear map (no bias), and every token "
                "uses it, so it counts in both numbers.", lambda c, E, k: _moe(c, E, k, router="none")),
        Mistake("the router counts in the active parameters too: every token runs it to choose its experts.",
                lambda c, E, k: _moe(c, E, k, router="total")),
        Mistake("the router is part of the model: count it in the total as well.",
                lambda c, E, k: _moe(c, E, k, router="active")),
        Mistake("the active count has only the experts a token runs; the token also goes through the "
                "embedding, attention, the norms and the LM head, which are all active.",
                lambda c, E, k: _moe(c, E, k, active="experts-only")),
        Mistake("the active count scales the whole model by top_k / n_experts; only the experts are "
                "skipped — attention, norms, router and the tables are used by every token.",
                lambda c, E, k: _moe(c, E, k, active="scaled")),
        Mistake("the dense FFN is still counted: the experts replace it, they do not sit beside it.",
                lambda c, E, k: _moe(c, E, k, dense_ffn_kept=True)),
        Mistake("each expert is a SwiGLU FFN with three matrices (w_gate, w_up, w_down), D·F each.",
                lambda c, E, k: _moe(c, E, k, expert_matrices=2)),
        Mistake("the total holds all n_experts experts, not only the top_k a token uses.",
                lambda c, E, k: _moe(c, E, k, total_experts=k)),
        Mistake("the two numbers are swapped: return (total, active).", lambda c, E, k: _moe(c, E, k, swap=True)),
        Mistake("attention is counted as 4·D² (Task 1's bug): with grouped-query attention w_k and w_v map D "
                "to n_kv_heads · head_dim features, and w_q, w_o to n_heads · head_dim.",
                lambda c, E, k: _moe(c, E, k, q_width=c.d_model, kv_width=c.d_model)),
        Mistake("a tied model has one (V, D) table: its LM head is the embedding (Task 1's other bug).",
                lambda c, E, k: _moe(c, E, k, head=True)),
    ],
    forbid=_FORBID,
    hint="Start from the dense count, take out the FFNs, and put back n_experts experts and a router per "
         "block (total) or top_k experts and a router per block (active).",
)

check_moe_params = MOE_PARAMS.checker(
    """Check ``moe_params(config, n_experts, top_k) -> (total, active)``: the parameters of the model with
    every SwiGLU FFN replaced by n_experts experts and a D → n_experts router, and those one token uses.""")


# --- Task 3: the attention core with a causal mask and a sliding window (extend) --------------------------

def _core(c: ModelConfig, T: int, window=None, *, pairs="right", heads=None, per_pair=None) -> int:
    """The core's FLOPs with knobs: what a solution with a given mistake computes."""
    W = window
    if pairs == "right":
        p = T * (T + 1) // 2 if W is None or W >= T else W * (W + 1) // 2 + (T - W) * W
    elif pairs == "dense":
        p = T * T
    elif pairs == "no-window":
        p = T * (T + 1) // 2
    elif pairs == "rectangle":  # every query sees W keys
        p = T * (T if W is None else W)
    elif pairs == "exclusive":  # a query sees the W keys before it, not itself
        p = T * (T - 1) // 2 if W is None or W >= T else W * (W - 1) // 2 + (T - W) * W
    elif pairs == "wider":  # i − j ≤ W: W + 1 keys
        p = T * (T + 1) // 2 if W is None or W + 1 >= T else (W + 1) * (W + 2) // 2 + (T - W - 1) * (W + 1)
    elif pairs == "formula-always":  # the windowed formula even when W ≥ T
        p = T * (T + 1) // 2 if W is None else W * (W + 1) // 2 + (T - W) * W
    elif pairs == "strict":  # only keys strictly before the query
        p = T * (T - 1) // 2 if W is None or W >= T else W * (W - 1) // 2 + (T - W) * (W - 1)
    h = c.n_heads if heads is None else heads
    f = 4 * c.head_dim + 5 if per_pair is None else per_pair
    return f * h * p


def _core_reference(config, seq_len, window=None):
    return ref.attention_core_flops(config, seq_len, window=window)


def _core_cases(gen: torch.Generator) -> list[Case]:
    mistral = PRESETS["mistral-7b"]
    cases = [
        Case(f"{_label(mistral, 'mistral-7b')}, 12 tokens, a window of 5", (mistral, 12), {"window": 5}),
        Case(f"{_label(mistral, 'mistral-7b')}, 8,192 tokens, its window of 4,096", (mistral, 8192),
             {"window": mistral.sliding_window}),
    ]
    configs = _random_llama_configs(gen, 8)
    for c, (T, W) in zip(configs, [(10, None), (9, 4), (6, 6), (5, 9), (7, 1), (1, 3), (16, 15), (30, 2)]):
        what = "no window" if W is None else f"a window of {W}"
        cases.append(Case(f"{_label(c)}, {T} tokens, {what}", (c, T), {"window": W}))
    return cases


WINDOW_CORE_FLOPS = Task(
    name="window_core_flops", seed=838, cases=_core_cases, reference=_core_reference,
    output=NumberOutput("a number of FLOPs", integer=True), rtol=0.0, atol=0.5,
    mistakes=[
        Mistake("every query is scored against every key (T·T per head), as a dense kernel does; this task "
                "counts only the scores the causal mask keeps: query i sees i + 1 keys.",
                lambda c, T, window=None: _core(c, T, window, pairs="dense")),
        Mistake("the window is ignored: with a window of W, query i sees min(i + 1, W) keys, so past the "
                "window the cost grows linearly.", lambda c, T, window=None: _core(c, T, window, pairs="no-window")),
        Mistake("every query is given W keys (T·W). The first W − 1 queries see fewer: query i sees "
                "min(i + 1, W) keys, itself included.",
                lambda c, T, window=None: _core(c, T, window, pairs="rectangle")),
        Mistake("a query also attends to itself: query i sees min(i + 1, W) keys, not min(i, W).",
                lambda c, T, window=None: _core(c, T, window, pairs="exclusive")),
        Mistake("query i sees the keys i − W + 1 … i: W keys, itself included, not W + 1.",
                lambda c, T, window=None: _core(c, T, window, pairs="wider")),
        Mistake("the windowed formula holds only when the window is shorter than the sequence; when W ≥ T "
                "no query reaches the window's edge and the count is the plain causal one.",
                lambda c, T, window=None: _core(c, T, window, pairs="formula-always")),
        Mistake("the scores are computed by all n_heads query heads; n_kv_heads only shrinks the key and "
                "value projections.", lambda c, T, window=None: _core(c, T, window, heads=c.n_kv_heads)),
        Mistake("the softmax: by the chapter's convention it costs 5 FLOPs per score and belongs to the core.",
                lambda c, T, window=None: _core(c, T, window, per_pair=4 * c.head_dim)),
        Mistake("the core has two matrix products per score, QKᵀ and the weighted sum of V, 2·D_h FLOPs "
                "each (a multiply-add is 2 FLOPs).",
                lambda c, T, window=None: _core(c, T, window, per_pair=2 * c.head_dim + 5)),
    ],
    forbid=_FORBID,
    hint="Draw the mask for a short sequence and a small window, count the kept entries row by row, and "
         "multiply by the FLOPs per kept score and the number of query heads.",
)

check_window_core_flops = WINDOW_CORE_FLOPS.checker(
    """Check ``window_core_flops(config, seq_len, window=None) -> int``: forward FLOPs of QKᵀ, softmax
    and AV for one sequence, counting only the scores a causal (optionally sliding-window) mask keeps.""")


# --- Task 4: predictions ----------------------------------------------------------------------------------


# Llama 2 13B's published shape (Touvron et al., 2023): not a preset, so the chapter never prints its count.
LLAMA_2_13B = ModelConfig(vocab_size=32_000, d_model=5120, n_layers=40, n_heads=40, d_ff=13_824,
                          max_seq_len=4096)
_GIB = 2**30


def _truth() -> dict[str, float]:
    """Computed at import (not under the watch): the four true values."""
    l3 = PRESETS["llama-3-8b"]
    return {
        "llama_2_13b_params_b": ref.count_params(LLAMA_2_13B).total / 1e9,
        "kv_cache_gib": ref.kv_cache_bytes(l3, seq_len=8192, batch=4) / _GIB,
        "max_train_params_b": 80e9 / (ref.training_bytes(l3) / ref.count_params(l3).total) / 1e9,
        "train_flops_e21": 6 * ref.count_params(PRESETS["llama-2-7b"]).total * 2e12 / 1e21,
    }


_TRUTH = _truth()
_TOLERANCE = {"llama_2_13b_params_b": 2e-4, "kv_cache_gib": 1e-2, "max_train_params_b": 1e-2,
              "train_flops_e21": 1e-2}

_l2 = PRESETS["llama-2-7b"]
_WRONG_PREDICTIONS = {
    "llama_2_13b_params_b": [
        (LLAMA_2_13B.n_layers * 12 * 5120**2 / 1e9 + 2 * 32_000 * 5120 / 1e9,
         "that is the rule of thumb 12·N·D² + 2·V·D, an approximation: count the tensors (the FFN is "
         "SwiGLU with F = 13,824, not 8·D²; and the norms)."),
        (_TRUTH["llama_2_13b_params_b"] - 32_000 * 5120 / 1e9,
         "Llama 2 does not tie its LM head to the embedding: count two (V, D) tables."),
        (13.0, "13 B is the model's name, a nominal size; the question asks for the exact count of its "
               "tensors."),
        (2 * _TRUTH["llama_2_13b_params_b"], "that is its size in bytes at 16 bits (×10⁹); the question asks "
                                             "for the number of parameters."),
    ],
    "kv_cache_gib": [
        (4 * _TRUTH["kv_cache_gib"], "Llama 3 8B has grouped-query attention: only n_kv_heads = 8 heads of "
                                     "keys and values are cached, not 32."),
        (_TRUTH["kv_cache_gib"] / 2, "the cache holds keys AND values: the factor 2."),
        (2 * _TRUTH["kv_cache_gib"], "16 bits are 2 bytes per number, not 4."),
        (_TRUTH["kv_cache_gib"] / 4, "the batch holds 4 sequences, each with its own cache."),
        (_TRUTH["kv_cache_gib"] * _GIB / 1e9, "that is in GB (10⁹ bytes); the question asks for GiB (2³⁰ bytes)."),
    ],
    "max_train_params_b": [
        (40.0, "2 bytes per parameter is what inference needs for 16-bit weights; training also keeps "
               "gradients, float32 master weights and Adam's two moments."),
        (20.0, "training keeps more than float32 weights: 16-bit weights and gradients, float32 master "
               "weights and two Adam moments."),
        (80 / 12, "the 16-bit weights and gradients (2 + 2 bytes) come on top of the 12 bytes of float32 "
                  "master weights and Adam moments."),
        (10.0, "Adam keeps two float32 moments per parameter besides the float32 master weights."),
    ],
    "train_flops_e21": [
        (_TRUTH["train_flops_e21"] / 3, "that is the forward pass alone (2 FLOPs per parameter per token); "
                                        "the backward pass costs twice as much again: 6 in all."),
        (_TRUTH["train_flops_e21"] * 2 / 3, "forward and backward cost 2 + 4 = 6 FLOPs per parameter per "
                                            "token, not 4."),
        (6 * 7e9 * 2e12 / 1e21, "use the exact count of Llama 2 7B's parameters (the chapter's), not the "
                                "7 B of its name."),
    ],
}


COUNTING_PREDICTIONS = predictions_task(
    truth=lambda: _TRUTH,
    wrong=_WRONG_PREDICTIONS,
    seed=848,
    rtol=_TOLERANCE,
    atol=0.0,
    forbid=_FORBID,
    advice="Work it out on paper from the chapter's formulas, then run the check below it.",
)

check_counting_predictions = COUNTING_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: Llama 2 13B's parameter count (billions), Llama 3 8B's KV cache for
    4 × 8,192 tokens in 16 bits (GiB), the largest model whose mixed-precision Adam state fits in 80 GB
    (billions), and the training FLOPs of Llama 2 7B on 2 T tokens (units of 10²¹).""")
