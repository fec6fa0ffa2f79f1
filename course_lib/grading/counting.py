"""Checkers for exercise 08 (counting): a Llama-style config's exact parameter count, and the sequence
length at which the attention core costs as many FLOPs as the FFN."""

from __future__ import annotations

import numbers

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from .. import counting as ref
from ..config import PRESETS, ModelConfig
from ._core import Case, Forbidden, GradingError, Mistake, check_function

__all__ = ["check_count_params", "check_crossover_length"]

_REFERENCES = [
    Forbidden(ref.count_params, "course_lib.counting.count_params"),
    Forbidden(ref.approx_params, "course_lib.counting.approx_params"),
    Forbidden(ref.weight_bytes, "course_lib.counting.weight_bytes"),
    Forbidden(ref.training_bytes, "course_lib.counting.training_bytes"),
    Forbidden(ref.block_flops, "course_lib.counting.block_flops"),
    Forbidden(ref.crossover_length, "course_lib.counting.crossover_length"),
    # building a model and adding up its tensors counts nothing by hand
    Forbidden(nn.Module.parameters, "torch.nn.Module.parameters"),
    Forbidden(nn.Module.named_parameters, "torch.nn.Module.named_parameters"),
    Forbidden(nn.Module.state_dict, "torch.nn.Module.state_dict"),
    Forbidden(FlopCounterMode.__init__, "torch.utils.flop_counter.FlopCounterMode"),
]


def _numeric(student, task: str, what: str):
    """Wrap the student's function so that a plain Python number comes back as a float64 tensor, the
    form check_function compares; anything else is reported in words."""

    def wrapped(config):
        out = student(config)
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            out = out.item()
        if isinstance(out, bool) or not isinstance(out, numbers.Real):
            raise GradingError(f"{task} returned a {type(out).__name__}; it should return {what}.")
        return torch.tensor(float(out), dtype=torch.float64)

    return wrapped


def _label(c: ModelConfig, name: str | None = None) -> str:
    """Describe a config by its kind, never by its count."""
    if c.n_kv_heads == c.n_heads:
        attention = "multi-head attention"
    elif c.n_kv_heads == 1:
        attention = "multi-query attention (one key/value head)"
    else:
        attention = "grouped-query attention (n_heads a multiple of n_kv_heads)"
    parts = [attention, f"{c.ffn} FFN"]
    if c.head_dim * c.n_heads != c.d_model:
        parts.append("head_dim set so that n_heads · head_dim differs from d_model")
    parts.append("tied embeddings" if c.tie_embeddings else "untied embeddings")
    what = f"the {name!r} preset" if name else f"a {c.n_layers}-layer config"
    return f"{what} ({', '.join(parts)})"


def _random_llama_configs(gen: torch.Generator, n: int, ffns=("swiglu",)) -> list[ModelConfig]:
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    configs = []
    for i in range(n):
        n_kv = pick([1, 2, 3, 4])
        n_heads = n_kv * pick([1, 2, 4])
        head_dim = pick([8, 16, 24])
        odd_width = i % 3 == 2  # every third config: n_heads · head_dim ≠ d_model
        d_model = n_heads * head_dim + (pick([8, 16]) if odd_width else 0)
        ffn = ffns[i % len(ffns)]
        configs.append(ModelConfig(
            vocab_size=pick([97, 256, 1000, 50_257]), d_model=d_model, n_layers=pick([1, 2, 3, 5]),
            n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, d_ff=pick([40, 88, 172, 300]),
            tie_embeddings=bool(i % 2), ffn=ffn,
            norm="rms" if ffn == "swiglu" else "layer", positional="rope",
        ))
    return configs


# --- Task 1: the exact parameter count -----------------------------------------------------------------

def _count(c: ModelConfig, *, kv_full=False, head=None, block_norms=2, final_norm=True, ffn_matrices=3,
           q_width=None, norm_size=1, layers=None) -> int:
    """A Llama-style count with one knob turned: what a solution with that mistake computes."""
    q_width = c.n_heads * c.head_dim if q_width is None else q_width  # H · D_h
    kv_width = q_width if kv_full else c.n_kv_heads * c.head_dim  # H_kv · D_h
    attention = 2 * c.d_model * q_width + 2 * c.d_model * kv_width  # w_q, w_o; w_k, w_v
    block = attention + ffn_matrices * c.d_model * c.d_ff + block_norms * norm_size * c.d_model
    head = (not c.tie_embeddings) if head is None else head
    return ((c.n_layers if layers is None else layers) * block + c.vocab_size * c.d_model
            + (c.vocab_size * c.d_model if head else 0) + (norm_size * c.d_model if final_norm else 0))


def _knobbed(fn, **knobs):
    """A mistake model: ``fn`` with some knobs set (a knob may be a function of the config)."""
    return lambda c: torch.tensor(float(fn(c, **{k: v(c) if callable(v) else v for k, v in knobs.items()})),
                                  dtype=torch.float64)


def _count_reference(config: ModelConfig) -> torch.Tensor:
    return torch.tensor(float(ref.count_params(config).total), dtype=torch.float64)


def check_count_params(count_params) -> None:
    """Check ``count_params(config) -> int``: the exact parameter count of a Llama-style model
    (pre-norm RMSNorm, GQA with RoPE, SwiGLU, no biases; embeddings tied or not)."""
    if not callable(count_params):
        raise GradingError(f"count_params should be a function, but it is a {type(count_params).__name__}.")
    gen = torch.Generator().manual_seed(808)
    cases = [Case(_label(PRESETS[name], name), (PRESETS[name],))
             for name in ("tiny", "llama-2-7b", "llama-3-8b", "llama-2-70b", "mistral-7b")]
    cases += [Case(_label(c), (c,)) for c in _random_llama_configs(gen, 9)]
    mistakes = [
        Mistake("the key and value projections. With grouped-query attention they map D to n_kv_heads · "
                "head_dim, not to the full query width: 4·D² per block is the multi-head count.",
                _knobbed(_count, kv_full=True)),
        Mistake("the query and output projections map D to n_heads · head_dim, which need not equal D when "
                "head_dim is given.", _knobbed(_count, q_width=lambda c: c.d_model)),
        Mistake("SwiGLU has three matrices (w_gate, w_up and w_down), each D·F; you counted two.",
                _knobbed(_count, ffn_matrices=2)),
        Mistake("the LM head. With tie_embeddings the head shares the embedding's (V, D) table: count it "
                "once, not twice.", _knobbed(_count, head=True)),
        Mistake("the LM head. An untied model has its own (V, D) output table besides the embedding.",
                _knobbed(_count, head=False)),
        Mistake("the final norm: a pre-norm model normalises once more, with a gain of D, before the LM "
                "head.", _knobbed(_count, final_norm=False)),
        Mistake("the norms. Each block has two RMSNorms (before attention and before the FFN), each with a "
                "gain of D, and the model a final one.", _knobbed(_count, block_norms=0, final_norm=False)),
        Mistake("the block norms: each block has two RMSNorms of D parameters, not one.",
                _knobbed(_count, block_norms=1)),
        Mistake("RMSNorm has a gain only (D parameters); it has no shift, unlike LayerNorm.",
                _knobbed(_count, norm_size=2)),
        Mistake("you counted one block. The model repeats the block n_layers times.", _knobbed(_count, layers=1)),
    ]
    check_function(_numeric(count_params, "count_params", "an int, the number of parameters"),
                   _count_reference, cases, task="count_params", mistakes=mistakes, forbidden=_REFERENCES,
                   rtol=0.0, atol=0.5)


# --- Task 2: the crossover length ----------------------------------------------------------------------

def _crossover(c: ModelConfig, *, matmul=4, softmax=5, heads=None, ffn_factor=None, causal=False,
               with_projections=False, head_dim=None) -> float:
    """The crossover with one knob turned: what a solution with that mistake computes.

    Per sequence: core = (matmul·D_h + softmax)·H·T², FFN = ffn_factor·D·F·T."""
    d_h = c.head_dim if head_dim is None else head_dim
    h = c.n_heads if heads is None else heads
    m = (6 if c.ffn == "swiglu" else 4) if ffn_factor is None else ffn_factor
    linear = m * c.d_model * c.d_ff  # FFN FLOPs per token
    if with_projections:  # attention = projections + core: solve proj·T + core·T² = ffn·T
        linear -= 2 * c.d_model * (2 * c.n_heads + 2 * c.n_kv_heads) * c.head_dim
    t = linear / ((matmul * d_h + softmax) * h)
    return 2 * t - 1 if causal else t


def _crossover_reference(config: ModelConfig) -> torch.Tensor:
    return torch.tensor(ref.crossover_length(config), dtype=torch.float64)


def check_crossover_length(crossover_length) -> None:
    """Check ``crossover_length(config) -> float``: the T at which QKᵀ + softmax + AV cost as many
    forward FLOPs as the FFN, with dense scores, 2 FLOPs per multiply-add and 5 per softmax score."""
    if not callable(crossover_length):
        raise GradingError(
            f"crossover_length should be a function, but it is a {type(crossover_length).__name__}.")
    gen = torch.Generator().manual_seed(818)
    cases = [Case(_label(PRESETS[name], name), (PRESETS[name],))
             for name in ("llama-3-8b", "llama-2-7b", "gpt-3-175b", "llama-2-70b", "tiny")]
    cases += [Case(_label(c), (c,)) for c in _random_llama_configs(gen, 9, ffns=("swiglu", "gelu", "relu"))]
    mistakes = [
        Mistake("the softmax. By the chapter's convention it costs 5 FLOPs per score and belongs to the "
                "attention core.", _knobbed(_crossover, softmax=0)),
        Mistake("the number of FFN matrices: SwiGLU multiplies by three (w_gate, w_up, w_down), a GELU or "
                "ReLU FFN by two. Read config.ffn.",
                _knobbed(_crossover, ffn_factor=lambda c: 4 if c.ffn == "swiglu" else 6)),
        Mistake("the attention core computes scores for all n_heads query heads; n_kv_heads only shrinks "
                "the key and value projections.", _knobbed(_crossover, heads=lambda c: c.n_kv_heads)),
        Mistake("a multiply-add is 2 FLOPs on both sides: each FFN matrix costs 2·D·F FLOPs per token, not "
                "D·F.", _knobbed(_crossover, ffn_factor=lambda c: 3 if c.ffn == "swiglu" else 2)),
        Mistake("the core's matrix products: QKᵀ and the weighted sum of V each cost 2·D_h FLOPs per "
                "score and head (a multiply-add is 2 FLOPs), 4·D_h in all; you counted half of that.",
                _knobbed(_crossover, matmul=2)),
        Mistake("count every score a dense kernel computes (T·T per head), as the convention says; you "
                "halved them for the causal mask.", _knobbed(_crossover, causal=True)),
        Mistake("compare the attention core (QKᵀ, softmax, AV) with the FFN. The Q, K, V and O "
                "projections grow linearly with T and are not part of the core.",
                _knobbed(_crossover, with_projections=True)),
        Mistake("use head_dim for D_h: it need not equal d_model / n_heads.",
                _knobbed(_crossover, head_dim=lambda c: c.d_model // c.n_heads)),
    ]
    check_function(_numeric(crossover_length, "crossover_length", "a number, the sequence length"),
                   _crossover_reference, cases, task="crossover_length", mistakes=mistakes,
                   forbidden=_REFERENCES, rtol=1e-6, atol=1e-6)
