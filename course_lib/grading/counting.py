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

A wrong count is named from what it gets wrong (``_discrepancy``): the student's function is probed on many
small configs and its error written as an integer combination of the terms a count is made of, or traced
to a config field it ignores; a FLOP count is read per kept score and per query (the keys it gives each).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from fractions import Fraction

import torch

from .. import counting as ref
from ..config import PRESETS, ModelConfig
from ._predictions import predictions_task
from ._core import Case, Forbid, NumberOutput, Task, TupleOutput
from ._discrepancy import (by_factors, count_words, factor_story, fit_terms, reasoned_predictions, recall, remembering,
                           safe, term_story)

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


# --- reasoning about a wrong count -----------------------------------------------------------------------
#
# A count is a polynomial in the config's fields. A wrong count differs from the right one by a
# polynomial too, and which terms it is made of says what was miscounted: a missing n_layers · D · F is a
# missing FFN matrix in every block, an extra max_seq_len · D a table of positions the model does not
# have. The checkers below probe the student's function on many small configurations and write its
# error as an integer combination of such terms (fit_terms), then say what those terms are.

def _probe_configs(seed: int, n: int = 36) -> list[ModelConfig]:
    """Small configs whose fields vary independently (d_model a multiple of n_heads but, as a rule, not
    n_heads · head_dim; every other one tied), so that no two terms below coincide on all of them."""
    gen = torch.Generator().manual_seed(seed)

    def pick(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    configs = []
    for i in range(n):
        n_kv = pick(1, 4)
        n_heads = n_kv * pick(1, 3)
        configs.append(ModelConfig(
            vocab_size=pick(10, 400), d_model=n_heads * pick(1, 9), n_layers=pick(1, 6), n_heads=n_heads,
            n_kv_heads=n_kv, head_dim=2 * pick(1, 8), d_ff=pick(4, 90), tie_embeddings=bool(i % 2),
            max_seq_len=pick(8, 80)))
    return configs


def _count_terms(c: ModelConfig) -> dict[str, Fraction]:
    """The terms a count of a Llama-style model can be made of, right or wrong."""
    D, F, V, N, S = c.d_model, c.d_ff, c.vocab_size, c.n_layers, c.max_seq_len
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    block = {"D·q": D * q, "D·kv": D * kv, "D·D": D * D, "D·Dh": D * c.head_dim,
             "D·Dkv/H": Fraction(D * D * c.n_kv_heads, c.n_heads), "D·F": D * F, "D": D, "F": F, "q": q,
             "kv": kv}
    terms = {f"N·{k}": N * Fraction(v) for k, v in block.items()}
    terms.update({f"1·{k}": Fraction(block[k]) for k in ("D·q", "D·kv", "D·F")})
    terms.update({"D": Fraction(D), "VD tied": Fraction(V * D * c.tie_embeddings),
                  "VD untied": Fraction(V * D * (not c.tie_embeddings)), "S·D": Fraction(S * D), "V": Fraction(V)})
    return terms


_COUNT_TERMS = list(_count_terms(PRESETS["tiny"]))

# What each term is, for the terms no rule below words more precisely: (noun, plural, what is right).
_TERM_WORDS = {
    "N·D·q": ("D × n_heads·head_dim matrix per block", "D × n_heads·head_dim matrices per block",
              "w_q and w_o are two"),
    "N·D·kv": ("D × n_kv_heads·head_dim matrix per block", "D × n_kv_heads·head_dim matrices per block",
               "w_k and w_v are two"),
    "N·D·F": ("D × d_ff matrix per block", "D × d_ff matrices per block",
              "SwiGLU has three: w_gate, w_up and w_down"),
    "N·D·D": ("D × D matrix per block", "D × D matrices per block",
              "attention's projections map D to n_heads · head_dim or n_kv_heads · head_dim features"),
    "N·D": ("vector of d_model per block", "vectors of d_model per block",
            "a block's only vectors are the gains of its two RMSNorms"),
    "D": ("vector of d_model outside the blocks", "vectors of d_model outside the blocks",
          "there is one, the final norm's gain"),
    "S·D": ("(max_seq_len, D) table", "(max_seq_len, D) tables",
            "a Llama-style model encodes positions with RoPE, which has no parameters"),
    "V": ("vector of vocab_size", "vectors of vocab_size", "the LM head has no bias"),
}

_WIDTHS = {"D·q": "n_heads · head_dim", "D·kv": "n_kv_heads · head_dim", "D·D": "d_model",
           "D·Dh": "head_dim (one head)", "D·Dkv/H": "d_model · n_kv_heads / n_heads"}
_PROJECTIONS = {"D·q": "w_q and w_o", "D·kv": "w_k and w_v"}


def _params_story(coefficients: dict[str, Fraction]) -> list[str]:
    """What a count's error, written in the terms of :func:`_count_terms`, says was miscounted."""
    c: dict[str, Fraction] = defaultdict(Fraction, coefficients)
    said: list[str] = []

    def take(*names: str) -> None:
        for n in names:
            c.pop(n, None)

    # the blocks counted once instead of n_layers times
    blocks = ("D·q", "D·kv", "D·F")
    if any(c[f"N·{t}"] for t in blocks) and all(c[f"N·{t}"] == -c[f"1·{t}"] for t in blocks):
        said.append("your count has one block where the model has n_layers of them: every block's "
                    "tensors are there n_layers times")
        take(*(f"N·{t}" for t in blocks), *(f"1·{t}" for t in blocks))
        if c["N·D"] < 0 and c["D"] == -c["N·D"]:
            take("N·D", "D")
    # a projection counted with the wrong width: a negative right-shape term, a positive wrong-shape one
    for right in ("D·q", "D·kv"):
        missing = -c[f"N·{right}"]
        if missing <= 0:
            continue
        for wrong in ("D·D", "D·Dh", "D·Dkv/H", "D·q", "D·kv"):
            if wrong == right or c[f"N·{wrong}"] <= 0:
                continue
            share = min(missing, c[f"N·{wrong}"])
            which = _PROJECTIONS[right] if share == 2 else f"one of {_PROJECTIONS[right]}"
            hint = {"D·D": ", which need not equal d_model when head_dim is given",
                    "D·Dh": ": grouped-query attention gives keys and values n_kv_heads heads, each of head_dim",
                    "D·Dkv/H": ": that assumes head_dim = d_model / n_heads; use head_dim",
                    "D·kv": ": the queries have n_heads heads (n_kv_heads counts the key/value heads)",
                    "D·q": ": with grouped-query attention the keys and values have only n_kv_heads heads"}[wrong]
            verb = "is" if share == 1 else "are"
            said.append(f"{which} {verb} counted as D × {_WIDTHS[wrong]}; {'it maps' if share == 1 else 'they map'} "
                        f"D to {_WIDTHS[right]} features{hint}")
            c[f"N·{right}"] += share
            c[f"N·{wrong}"] -= share
            missing -= share
            if c[f"N·{right}"] == 0:
                take(f"N·{right}")
            if c[f"N·{wrong}"] == 0:
                take(f"N·{wrong}")
            if missing <= 0:
                break
    # biases: vectors the size of a linear layer's output
    if any(c[n] > 0 for n in ("N·F", "N·q", "N·kv")):
        said.append("your count has vectors the size of the linear layers' outputs (n_heads·head_dim, "
                    "n_kv_heads·head_dim, d_ff) in every block: biases? The linear layers of a Llama-style "
                    "block have none")
        take("N·F", "N·q", "N·kv")
        if c["N·D"] > 0:
            take("N·D")
    # norms
    if c["N·D"] == 1 and c["D"] == -1:
        said.append("the final norm is counted in every block: it comes once, after the last block")
        take("N·D", "D")
    elif c["N·D"] == 2 and c["D"] == 1:
        said.append("each norm is counted with two vectors of d_model (a gain and a bias): RMSNorm has a gain "
                    "only")
        take("N·D", "D")
    elif c["D"] == -1:
        said.append("the final norm is missing: a pre-norm model normalises once more, with a gain of D, "
                    "before the LM head")
        take("D")
    # the (V, D) tables
    tied, untied = c["VD tied"], c["VD untied"]
    if tied == 1 and untied == -1:
        said.append("ties are the wrong way round: an UNtied model has two (V, D) tables (embedding and LM "
                    "head), a tied one a single table")
    elif tied == 1 and untied == 0:
        said.append("a tied model gets its own LM head in your count: with tie_embeddings the head IS the "
                    "embedding table and adds nothing")
    elif tied == 0 and untied == -1:
        said.append("an untied model has its own (V, D) LM head besides the embedding")
    elif tied == -1 and untied == -1:
        said.append("the (V, D) embedding table is missing")
    elif tied or untied:
        said.append(f"the (V, D) tables: {count_words(tied, 'table')} for a tied model and "
                    f"{count_words(untied, 'table')} for an untied one")
    take("VD tied", "VD untied")
    for name, k in list(c.items()):
        if k == 0:
            continue
        if name.startswith("1·"):
            said.append(f"your count has a {name[2:]} term that does not grow with n_layers: every block has "
                        f"its own tensors")
            continue
        singular, plural, right = _TERM_WORDS.get(name, (f"term {name}", f"terms {name}", "count every tensor"))
        said.append(f"your count has {count_words(k, singular, plural)} ({right})")
    return said


def _fit_count(student_count: Callable[[ModelConfig], object], reference: Callable[[ModelConfig], int],
               configs: Sequence[ModelConfig]) -> dict[str, Fraction] | None:
    samples = []
    for config in configs:
        got = probe_value(student_count, config)
        if got is None:
            return None
        samples.append((Fraction(got) - reference(config), _count_terms(config)))
    return fit_terms(samples, _COUNT_TERMS)


def probe_value(f: Callable, *args, **kwargs):
    """f(*args, **kwargs) as an exact number, or None (it raised, or returned something else)."""
    try:
        value = f(*args, **kwargs)
    except Exception:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)) or not math.isfinite(value):
        return None
    return Fraction(value).limit_denominator(1000) if isinstance(value, float) else Fraction(value)


# A config on which each field can change alone (for saying which fields a wrong count ignores).
_BASE = ModelConfig(vocab_size=100, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, head_dim=10, d_ff=40,
                    max_seq_len=32)
_FIELD_CHANGES = [
    ("d_ff", {"d_ff": 52}, "the FFN's matrices are D × d_ff: take the width from config.d_ff (the config's "
                           "d_ff is already the rounded width)"),
    ("n_kv_heads", {"n_kv_heads": 3}, "w_k and w_v map D to n_kv_heads · head_dim features"),
    ("head_dim", {"head_dim": 14}, "the attention projections map D to n_heads · head_dim and n_kv_heads · "
                                  "head_dim features: use config.head_dim"),
    ("n_heads", {"n_heads": 12}, "w_q and w_o map D to n_heads · head_dim features"),
    ("n_layers", {"n_layers": 5}, "every block has its own tensors: multiply the block's count by n_layers"),
    ("vocab_size", {"vocab_size": 130}, "the embedding (and an untied head) are (vocab_size, D) tables"),
    ("d_model", {"d_model": 56}, "almost every tensor has d_model on one side"),
    ("tie_embeddings", {"tie_embeddings": True}, "a tied model has one (V, D) table fewer"),
]


def _ignored_fields(student_count: Callable, reference: Callable, extra=()) -> str | None:
    """The first config field the student's count ignores though the right count changes with it (or
    max_seq_len, which changes no size, when the count follows it)."""
    base = probe_value(student_count, _BASE, *extra)
    if base is None:
        return None
    for field, change, why in _FIELD_CHANGES:
        varied = _BASE.replace(**change)
        got = probe_value(student_count, varied, *extra)
        if got is not None and got == base and reference(varied, *extra) != reference(_BASE, *extra):
            return f"your count does not change with config.{field}: {why}."
    longer = probe_value(student_count, _BASE.replace(max_seq_len=64), *extra)
    if longer is not None and longer != base:
        return ("your count changes with config.max_seq_len, but no tensor of a Llama-style model has a size that "
                "depends on it: positions come from RoPE, which has no parameters.")
    return None


def _sentence(parts: list[str]) -> str:
    return "; ".join(parts) + "."


# --- Task 1: the exact parameter count (find and fix) ----------------------------------------------------

def _given_count(c: ModelConfig) -> int:
    """The exercise's buggy version: 4·D² of attention, and always an LM head."""
    q = kv = c.d_model
    block = 2 * c.d_model * q + 2 * c.d_model * kv + 3 * c.d_model * c.d_ff + 2 * c.d_model
    return c.n_layers * block + 2 * c.vocab_size * c.d_model + c.d_model


def _count_reference(config: ModelConfig) -> int:
    return ref.count_params(config).total


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


@safe
def _count_explain(got, want, case: Case) -> str | None:
    (config,) = case.args
    student = recall()
    if got == _given_count(config):
        return ("this is still what the given version returns: it reproduces Llama 2 7B, whose attention is "
                "multi-head and whose head is untied, and nothing else. Two assumptions in it fail for other "
                "models; the self-check's Llama 3 8B and tied cases point at them.")
    fit = _fit_count(student, _count_reference, _probe_configs(818))
    if fit:
        return _sentence(_params_story(fit))
    return _ignored_fields(student, _count_reference)


COUNT_PARAMS = Task(
    name="count_params", seed=808, cases=_count_cases, reference=_count_reference, run=remembering,
    output=NumberOutput("the number of parameters", integer=True), rtol=0.0, atol=0.5,
    explain=_count_explain,
    forbid=_FORBID,
    hint="List every tensor of the model with its shape (embedding, per block: two gains, w_q, w_k, w_v, "
         "w_o, w_gate, w_up, w_down; the final gain; the head unless tied) and multiply out.",
)

check_count_params = COUNT_PARAMS.checker(
    """Check ``count_params(config) -> int``: the exact parameter count of a Llama-style model
    (pre-norm RMSNorm, GQA, SwiGLU, no biases; embeddings tied or not).""")


# --- Task 2: a mixture-of-experts FFN (extend) ------------------------------------------------------------

def _moe_terms(c: ModelConfig, E: int, k: int) -> dict[str, Fraction]:
    DF, N, D = c.d_model * c.d_ff, c.n_layers, c.d_model
    terms = _count_terms(c)
    terms.update({"N·E·DF": Fraction(N * E * DF), "N·k·DF": Fraction(N * k * DF), "1·E·DF": Fraction(E * DF),
                  "1·k·DF": Fraction(k * DF), "N·D·E": Fraction(N * D * E), "N·D·k": Fraction(N * D * k),
                  "1·D·E": Fraction(D * E), "N·E": Fraction(N * E)})
    return terms


_MOE_TERMS = list(_moe_terms(PRESETS["tiny"], 2, 1))


def _moe_probes(seed: int) -> list[tuple[ModelConfig, int, int]]:
    gen = torch.Generator().manual_seed(seed)
    probes = []
    for config in _probe_configs(seed, 40):
        E = int(torch.randint(2, 10, (1,), generator=gen))
        probes.append((config, E, int(torch.randint(1, E + 1, (1,), generator=gen))))
    return probes


def _moe_cases(gen: torch.Generator) -> list[Case]:
    cases = [Case(_label(PRESETS["mistral-7b"], "mistral-7b") + " with 8 experts, 2 per token",
                  (PRESETS["mistral-7b"], 8, 2))]
    for c, (E, k) in zip(_random_llama_configs(gen, 7), [(4, 1), (8, 2), (16, 4), (3, 3), (6, 2), (2, 1), (5, 2)]):
        cases.append(Case(f"{_label(c)} with {E} experts, {k} per token", (c, E, k)))
    return cases


def _moe_story(total: dict[str, Fraction], active: dict[str, Fraction]) -> list[str]:
    t, a = defaultdict(Fraction, total), defaultdict(Fraction, active)
    said: list[str] = []

    def take(d, *names):
        for n in names:
            d.pop(n, None)

    # the router
    if t["N·D·E"] == -1 and t["1·D·E"] == 1 and a["N·D·E"] == -1 and a["1·D·E"] == 1:
        said.append("your count has one router for the whole model: every block's FFN has its own router "
                    "(a D → n_experts map per block)")
        take(t, "N·D·E", "1·D·E")
        take(a, "N·D·E", "1·D·E")
    if t["N·D·E"] == -1 and t["N·D·k"] == 1 and a["N·D·E"] == -1 and a["N·D·k"] == 1:
        said.append("the router maps D to n_experts scores (it scores every expert, then keeps the top_k), "
                    "not to top_k")
        take(t, "N·D·E", "N·D·k")
        take(a, "N·D·E", "N·D·k")
    if t["N·E"] > 0 or a["N·E"] > 0:
        said.append("the router is a linear map without bias: D · n_experts weights, nothing more")
        take(t, "N·E")
        take(a, "N·E")
    if t["N·D·E"] == -1 and a["N·D·E"] == -1:
        said.append("the router is missing: each block has a D → n_experts linear map, and every token uses "
                    "it, so it counts in both numbers")
    elif t["N·D·E"] == 0 and a["N·D·E"] == -1:
        said.append("the router counts in the active parameters too: every token runs it to choose its "
                    "experts")
    elif t["N·D·E"] == -1 and a["N·D·E"] == 0:
        said.append("the router is part of the model: count it in the total as well")
    take(t, "N·D·E")
    take(a, "N·D·E")
    # the experts
    if t["N·E·DF"] == -3 and t["1·E·DF"] == 3:
        said.append("your count has one set of experts for the whole model: every block replaces its own FFN "
                    "by n_experts experts, so there are n_layers · n_experts of them")
        take(t, "N·E·DF", "1·E·DF")
        if a["N·k·DF"] == -3 and a["1·k·DF"] == 3:
            take(a, "N·k·DF", "1·k·DF")
    if t["N·E·DF"] == -3 and t["N·k·DF"] == 3:
        said.append("the total holds all n_experts experts, not only the top_k a token uses")
        take(t, "N·E·DF", "N·k·DF")
    if t["N·E·DF"] and (t["N·E·DF"] == a["N·k·DF"] or not a["N·k·DF"]):
        have = count_words(t["N·E·DF"], "matrix", "matrices").replace("too few", "fewer").replace("too many", "more")
        said.append(f"each expert is a SwiGLU FFN with three D × d_ff matrices (w_gate, w_up, w_down); your "
                    f"experts have {have}")
        take(t, "N·E·DF")
        take(a, "N·k·DF")
    if t["N·D·F"] == 3 and a["N·D·F"] == 3:
        said.append("the dense FFN is still counted: the experts replace it, they do not sit beside it")
        take(t, "N·D·F")
        take(a, "N·D·F")
    # the active count's share of what every token uses
    a_only = {n: a[n] - t[n] for n in set(a) | set(t) if n in _COUNT_TERMS and a[n] != t[n]}
    if a_only and all(v < 0 for v in a_only.values()):
        if set(a_only) <= {"VD tied", "VD untied"}:
            said.append("the active count leaves out the (V, D) embedding table: a token's forward pass reads "
                        "it (and the head), so it is active; only the skipped experts are not")
        else:
            said.append("the active count leaves out parts every token uses (attention, the norms, the tables): "
                        "only the n_experts − top_k skipped experts are inactive")
        for n in a_only:
            a[n] = t[n]
    # errors outside the FFNs, common to both numbers (Task 1's)
    common = {n: t[n] for n in _COUNT_TERMS if t[n] and t[n] == a[n]}
    if common:
        said += [f"outside the FFNs, {p}" for p in _params_story(common)]
        for n in common:
            take(t, n)
            take(a, n)
    for d, label, name, unit in ((t, "the total", "N·E·DF", "n_experts"),
                                 (a, "the active count", "N·k·DF", "top_k")):
        experts = d[name] + d["N·D·F"]  # an expert's worth of D × d_ff matrices, however it was counted
        if experts and experts % 3 == 0:
            said.append(f"{label} has {count_words(experts / 3, 'expert')} per block: it holds {unit} experts of "
                        f"three D × d_ff matrices each")
            take(d, name, "N·D·F")
    left = [f"in the total, {p}" for p in _params_story({n: v for n, v in t.items() if v and n in _COUNT_TERMS})]
    left += [f"in the active count, {p}"
             for p in _params_story({n: v for n, v in a.items() if v and n in _COUNT_TERMS})]
    rest = [n for d in (t, a) for n, v in d.items() if v and n not in _COUNT_TERMS]
    if rest and not said:
        return []
    return said + left


def _moe_reference(config, n_experts, top_k):
    return ref.moe_params(config, n_experts, top_k)


@safe
def _moe_explain(got, want, case: Case) -> str | None:
    config, E, k = case.args
    (g_total, g_active), (w_total, w_active) = got, want
    if (g_total, g_active) == (w_active, w_total):
        return "the two numbers are swapped: return (total, active)."
    if g_active in (g_total * k // E, g_total * k / E) and g_total == w_total:
        return ("the active count scales the whole model by top_k / n_experts; only the experts are skipped — "
                "attention, norms, router and the tables are used by every token.")
    if g_total in (g_active * E // k, g_active * E / k) and g_active == w_active:
        return ("the total scales the active count by n_experts / top_k; only the experts multiply — "
                "attention, norms, router and the tables are there once, however many experts there are.")
    student = recall()
    samples_t, samples_a = [], []
    for c, e, kk in _moe_probes(828):
        try:
            out = student(c, e, kk)
            s_total, s_active = (Fraction(out[0]), Fraction(out[1]))
        except Exception:
            return None
        r_total, r_active = ref.moe_params(c, e, kk)
        terms = _moe_terms(c, e, kk)
        samples_t.append((s_total - r_total, terms))
        samples_a.append((s_active - r_active, terms))
    fit_t, fit_a = fit_terms(samples_t, _MOE_TERMS), fit_terms(samples_a, _MOE_TERMS)
    if fit_t is None or fit_a is None:
        return None
    story = _moe_story(fit_t, fit_a)
    return _sentence(story) if story else None


MOE_PARAMS = Task(
    name="moe_params", seed=828, cases=_moe_cases, reference=_moe_reference, run=remembering,
    output=TupleOutput([NumberOutput("the total count", integer=True),
                        NumberOutput("the active count", integer=True)], ["total", "active"]),
    rtol=0.0, atol=0.5, explain=_moe_explain,
    forbid=_FORBID,
    hint="Start from the dense count, take out the FFNs, and put back n_experts experts and a router per "
         "block (total) or top_k experts and a router per block (active).",
)

check_moe_params = MOE_PARAMS.checker(
    """Check ``moe_params(config, n_experts, top_k) -> (total, active)``: the parameters of the model with
    every SwiGLU FFN replaced by n_experts experts and a D → n_experts router, and those one token uses.""")


# --- Task 3: the attention core with a causal mask and a sliding window (extend) --------------------------

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


def _pairs_story(pairs: Callable[[int, int | None], Fraction | None]) -> str | None:
    """What the student's count of kept (query, key) pairs gets wrong, from the number of keys it gives
    each query: the count for T tokens minus the count for T − 1 is what the newest query sees. Before
    the window fills (T ≤ W) query T − 1 sees T keys; past it, W."""
    W, L = 4, 12
    lengths = range(1, L + 1)
    got = [pairs(T, W) for T in lengths]
    full = [pairs(T, None) for T in lengths]
    if any(p is None for p in got + full):
        return None
    seen = [got[0]] + [b - a for a, b in zip(got, got[1:])]  # keys given to the newest query
    seen_full = [full[0]] + [b - a for a, b in zip(full, full[1:])]
    right = [min(T, W) for T in lengths]
    filling = [(s, T) for T, s in zip(lengths, seen) if T <= W]  # (keys given, keys seen) before the window fills
    past = [s for T, s in zip(lengths, seen) if T > W]
    if all(p == T * T for T, p in zip(lengths, full)):
        return ("every query is scored against every key (T·T per head), as a dense kernel does; this task "
                "counts only the scores the causal mask keeps: query i sees i + 1 keys.")
    if all(p == T * min(T, W) for T, p in zip(lengths, got)):
        return ("every query is given W keys (T·W once the sequence is longer than the window); the first "
                "W − 1 queries see fewer: query i sees min(i + 1, W) keys, itself included.")
    if seen == list(lengths):
        return ("the window is ignored: with a window of W, query i sees min(i + 1, W) keys, so past the "
                "window the cost grows linearly.")
    both_ways = [sum(min(i + 1, W) + min(T - 1 - i, W - 1) for i in range(T)) for T in lengths]
    if got == both_ways:
        return ("your count lets the window reach forward too: with a causal mask query i sees only keys "
                "j ≤ i, the keys i − W + 1 … i.")
    messages = []
    if all(s == T - 1 for s, T in filling):
        messages.append("a query also attends to itself: query i sees min(i + 1, W) keys, not min(i, W)")
    elif any(s != T for s, T in filling) and past == [W] * len(past):
        messages.append("your count is right once the sequence is longer than the window but not before: the "
                        "windowed formula holds only when the window is shorter than the sequence; when W ≥ T no "
                        "query reaches the window's edge and the count is the plain causal one")
    elif any(s != T for s, T in filling):
        messages.append("your count gives the first W queries (before the window is full) a number of keys "
                        "other than i + 1")
    if past == [W + 1] * len(past):
        messages.append("once the window is full your count gives each query one key too many: query i sees "
                        "the keys i − W + 1 … i, W keys with itself, not W + 1")
    elif past == [W - 1] * len(past) and not messages:
        messages.append("once the window is full your count gives each query one key too few: query i sees the "
                        "keys i − W + 1 … i, W keys with itself")
    elif past and past != [W] * len(past) and not messages:
        messages.append("your count gives the queries past the window's edge a number of keys other than W")
    if messages:
        return "; ".join(messages) + "."
    if seen_full != list(lengths):
        return ("with window=None (no window) every query sees every key up to itself, i + 1 keys; your "
                "count of that case is wrong.")
    long_window = pairs(5, 9)
    if long_window is not None and long_window != 15:
        return ("the windowed count holds only when the window is shorter than the sequence; when W ≥ T no "
                "query reaches the window's edge and the count is the plain causal one.")
    return None


@safe
def _core_explain(got, want, case: Case) -> str | None:
    student = recall()
    base = ModelConfig(vocab_size=50, d_model=48, n_layers=2, n_heads=6, n_kv_heads=2, head_dim=10, d_ff=40,
                       max_seq_len=64)

    def f(T, W, **changes):
        return probe_value(student, base.replace(**changes), T, window=W)

    def right(T, W, **changes):
        return _core_reference(base.replace(**changes), T, W)

    now = f(9, 4)
    if now is None:
        return None
    layers = f(9, 4, n_layers=3)
    if layers is not None and layers != now:
        return ("your count grows with n_layers: the task asks for the attention core of one block (one "
                "layer), for one sequence.")
    grouped = f(9, 4, n_kv_heads=3)
    if grouped is not None and grouped != now:
        return ("your count changes with n_kv_heads: every one of the n_heads query heads computes its own "
                "scores and its own weighted sum of values; grouping only shares the keys and values (it "
                "shrinks the K and V projections, not the core).")
    wider = f(9, 4, d_model=60)
    other_head = f(9, 4, head_dim=14)
    if wider is not None and wider != now:
        return ("your count changes with d_model: the head width is config.head_dim, which need not be "
                "d_model / n_heads (D_h enters the core, D does not).")
    if other_head is not None and other_head == now:
        return "your count does not change with head_dim: QKᵀ and AV cost 2·D_h FLOPs per kept score each."
    heads = f(9, 4, n_heads=12)
    if heads is not None and heads == now:
        return ("your count does not change with n_heads: the scores are computed by all n_heads query "
                "heads; n_kv_heads only shrinks the key and value projections.")
    # FLOPs per kept score: a·D_h + b per head per score, read from two head widths
    narrow, broad = f(9, 4, head_dim=10), f(9, 4, head_dim=20)
    if narrow is not None and broad is not None:
        H, P, T = base.n_heads, 30, 9  # T = 9, W = 4: 10 + 5 · 4 kept scores
        slope = (broad - narrow) / 10
        intercept = narrow - 10 * slope
        if slope == 4 * H * P and intercept == 5 * H * T:
            return ("the softmax is counted once per query row; by the chapter's convention it costs 5 FLOPs "
                    "per kept score (exp, sum, divide and the max subtraction act on every score).")
        if slope == 4 * H * P and intercept == 0:
            return "the softmax: by the chapter's convention it costs 5 FLOPs per score and belongs to the core."
        if slope == 2 * H * P and intercept == 5 * H * P:
            return ("the core has two matrix products per score, QKᵀ and the weighted sum of V, 2·D_h FLOPs "
                    "each (a multiply-add is 2 FLOPs).")
        if slope == 2 * H * P and intercept == 0:
            return ("each kept score costs 2·D_h FLOPs for QKᵀ, 2·D_h for the weighted sum of V and 5 for the "
                    "softmax; your count has only one product.")
        per_dh, per_one = slope / (H * P), intercept / (H * P)
        if per_dh.denominator == 1 and per_dh > 0 and per_dh != 4 and per_one == 5:
            return (f"your count charges {per_dh}·D_h FLOPs per kept score for the matrix products; QKᵀ and "
                    f"the weighted sum of V cost 2·D_h each (a multiply-add is 2 FLOPs).")
        if per_dh == 4 and per_one.denominator == 1 and per_one != 5:
            return ("the softmax's share is off: by the chapter's convention it costs 5 FLOPs per kept score "
                    "(max subtraction, exp, sum and division).")

    ratio = Fraction(now) / right(9, 4)
    if ratio != 1 and all(probe_value(student, base, T, window=W) == ratio * right(T, W)
                          for T, W in [(5, 2), (12, None), (7, 9), (20, 3)]):
        if ratio == 2:
            return ("your count is twice the right one for every input: a multiply-add is already counted as 2 "
                    "FLOPs (2·D_h per score for QKᵀ, 2·D_h for AV), and the task asks for the forward pass "
                    "only.")
        return ("your count is a constant multiple of the right one: a factor in FLOPs per score or in the "
                "number of heads is off.")

    def pairs(T, W):
        value = probe_value(student, base, T, window=W)
        per = base.n_heads * (4 * base.head_dim + 5)
        if value is None or (value / per).denominator != 1:
            return None  # not a whole number of kept scores: the error is elsewhere
        return value / per

    return _pairs_story(pairs)


WINDOW_CORE_FLOPS = Task(
    name="window_core_flops", seed=838, cases=_core_cases, reference=_core_reference, run=remembering,
    output=NumberOutput("a number of FLOPs", integer=True), rtol=0.0, atol=0.5, explain=_core_explain,
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


def _params_13b(value, given, true) -> str | None:
    """A Llama 2 13B count that is off by whole tensors: which ones."""
    D, F, V, N = 5120, 13_824, 32_000, 40
    diff = (value - true["llama_2_13b_params_b"]) * 1e9
    terms = [(N * D * D, "D × D attention matrix per block"), (N * D * F, "D × F FFN matrix per block"),
             (V * D, "(V, D) table")]
    story = term_story(diff, terms, coefficients=(1, -1, 2, -2, 3, -3, 4, -4), max_terms=2, rtol=0.0, atol=3e6)
    if story:
        parts = [count_words(k, what, what.replace("matrix", "matrices").replace("table", "tables"))
                 for k, what in story]
        return (f"your count has {' and '.join(parts)}: a block has four D × D attention matrices (multi-head) "
                f"and three D × F FFN matrices (SwiGLU), and an untied model two (V, D) tables.")
    units = [(1e9, "the question asks for billions of parameters (divide the count by 10⁹)"),
             (2.0, "that is its size in bytes at 16 bits (×10⁹); the question asks for the number of parameters")]
    story = factor_story(value / true["llama_2_13b_params_b"], units)
    return "; and ".join(story) + "." if story else None


_KV_FACTORS = [
    (4.0, "Llama 3 8B has grouped-query attention: only its n_kv_heads = 8 heads of keys and values are cached, "
          "not 32"),
    (0.5, "the cache holds keys AND values: a factor 2"),
    (2.0, "16-bit numbers take 2 bytes each, not 4"),
    (8.0, "that counts bits: 16 bits are 2 bytes"),
    (0.25, "the batch holds 4 sequences, each with its own cache"),
    (1 / 32, "every one of the 32 layers keeps its own keys and values"),
    (1 / 128, "each head's key and value have head_dim = 128 numbers"),
    (_GIB / 1e9, "that is in GB (10⁹ bytes); the question asks for GiB (2³⁰ bytes)"),
    (1 / 1024, "that is in TiB or the wrong power of 1024; the question asks for GiB (2³⁰ bytes)"),
    (1024.0, "that is in MiB; the question asks for GiB (2³⁰ bytes)"),
]

# What a mixed-precision Adam step keeps per parameter, and what a student might count instead.
_STATE = {"16-bit weights": 2, "16-bit gradients": 2, "float32 master weights": 4, "Adam's first moment": 4,
          "Adam's second moment": 4}
_NOT_STATE = {"float32 gradients": 4, "float32 weights besides the master copy": 4}


def _train_params(value, given, true) -> str | None:
    """The largest trainable model in 80 GB: which bytes per parameter the value implies."""
    if value <= 0:
        return None
    story = factor_story(value / true["max_train_params_b"],
                         [(1e9, "the question asks for billions of parameters"),
                          (_GIB / 1e9, "80 GB is 80 · 10⁹ bytes, not 80 GiB")], max_factors=1)
    if story:
        return story[0] + "."
    implied = 80 / value
    if abs(implied - round(implied)) > 0.02:
        return None
    implied = round(implied)
    items = {**_STATE, **_NOT_STATE}
    best, best_cost = None, None
    for n in range(len(items) + 1):
        for chosen in itertools.combinations(items, n):
            if sum(items[c] for c in chosen) != implied:
                continue
            missing = [c for c in _STATE if c not in chosen]
            extra = [c for c in chosen if c in _NOT_STATE]
            # the 16-bit copies are the easiest to forget: leaving them out costs half as much
            cost = (sum(0.5 if c.startswith("16-bit") else 1 for c in missing) + len(extra),
                    -sum(c.startswith("16-bit") for c in missing))
            if best_cost is None or cost < best_cost:
                best, best_cost = (missing, extra), cost
    if not best:
        return None
    missing, extra = best
    parts = []
    if missing:
        parts.append(f"your answer leaves out {_listing(missing)}")
    if extra:
        parts.append(f"it counts {_listing(extra)}, which the recipe does not keep")
    return (f"it implies {implied} bytes per parameter: " + "; ".join(parts) +
            " (the chapter's recipe keeps 16-bit weights and gradients, float32 master weights and Adam's two "
            "moments).")


def _listing(items: list[str]) -> str:
    named = [i if i.startswith("Adam") else f"the {i}" for i in items]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


_FLOP_FACTORS = [
    (1 / 3, "that is the forward pass alone (2 FLOPs per parameter per token); the backward pass costs twice as "
            "much again"),
    (2 / 3, "forward and backward cost 2 + 4 FLOPs per parameter per token, not 4"),
    (0.5, "a forward pass costs 2 FLOPs per parameter per token (a multiply and an add), and the backward twice "
          "that: 6 in all, not 3"),
    (2.0, "6 FLOPs per parameter per token already counts the multiply-add as 2; do not double it"),
    (1e-9, "use the number of parameters, not the number in billions"),
    (1e-3, "the tokens are 2 · 10¹², not 2 · 10⁹"),
    (1e3, "the answer is in units of 10²¹"),
    (7e9 / 6_738_415_616, "use the exact count of Llama 2 7B's parameters, not the 7 B of its name"),
]

COUNTING_PREDICTIONS = reasoned_predictions(predictions_task(
    truth=lambda: _TRUTH,
    wrong=_WRONG_PREDICTIONS,
    seed=848,
    rtol=_TOLERANCE,
    atol=0.0,
    forbid=_FORBID,
    advice="Work it out on paper from the chapter's formulas, then run the check below it.",
), lambda: _TRUTH, {
    "llama_2_13b_params_b": _params_13b,
    "kv_cache_gib": by_factors("kv_cache_gib", _KV_FACTORS),
    "max_train_params_b": _train_params,
    "train_flops_e21": by_factors("train_flops_e21", _FLOP_FACTORS),
})

check_counting_predictions = COUNTING_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: Llama 2 13B's parameter count (billions), Llama 3 8B's KV cache for
    4 × 8,192 tokens in 16 bits (GiB), the largest model whose mixed-precision Adam state fits in 80 GB
    (billions), and the training FLOPs of Llama 2 7B on 2 T tokens (units of 10²¹).""")
