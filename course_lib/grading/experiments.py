"""Checkers for exercise 12, tasks 6 and 7 (experiments that hold; tasks 1–5 are in :mod:`.training`).

6. ``paired_interval`` — is the difference between two configurations trained with the same seeds real?
   Student's t interval for the mean per-seed difference, and whether it excludes 0.
7. ``ablated_loss`` — a mechanism tested by intervention: the loss with chosen attention heads switched
   off (their features zeroed before W_o), the model left exactly as it was.
"""

from __future__ import annotations

import copy
import math
import statistics

import torch
import torch.nn.functional as F

from ..config import ModelConfig
from ..experiments import stats
from ..heads import ablate_heads
from ..model import DecoderLM
from ._core import BoolOutput, Case, Forbid, GradingError, Mistake, NumberOutput, Task, TupleOutput, describe
from ._watch import paused

__all__ = ["check_paired_interval", "check_ablated_loss"]

_F64, _F32 = torch.float64, torch.float32


# --- Task 6: is the difference real? ----------------------------------------------------------------------

def _mean(xs) -> float:
    return sum(xs) / len(xs)


def _std(xs, ddof: int = 1) -> float:
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def _row_interval(xs, confidence) -> tuple[float, float]:
    """One row's own t interval for its mean (what a comparison by overlap looks at)."""
    n = len(xs)
    half = stats.t_quantile(0.5 + confidence / 2, n - 1) * _std(xs) / math.sqrt(n)
    return _mean(xs) - half, _mean(xs) + half


def _paired(a, b, confidence=0.95, *, pairing="paired", quantile="t", df="n-1", ddof=1, se="sqrt-n",
            sign="a-b", found="excludes"):
    """The interval with knobs: what a solution with a given mistake computes."""
    n = len(a)
    if pairing == "paired":
        d = [x - y for x, y in zip(a, b)]
        center, spread = _mean(d), _std(d, ddof)
        error = {"sqrt-n": spread / math.sqrt(n), "n": spread / n, "none": spread,
                 "variance": spread ** 2 / math.sqrt(n)}[se]
        dof = {"n-1": n - 1, "n": n}[df]
    else:  # the two rows as independent samples: difference of the means, pooled (= Welch's, equal n) error
        va, vb = _std(a) ** 2, _std(b) ** 2
        center, error = _mean(a) - _mean(b), math.sqrt(va / n + vb / n)
        welch = (va / n + vb / n) ** 2 / ((va / n) ** 2 / (n - 1) + (vb / n) ** 2 / (n - 1))
        dof = {"pooled": 2 * n - 2, "n-1": n - 1, "welch-floor": max(1, math.floor(welch)),
               "welch-round": max(1, round(welch))}[pairing]
    q = {"t": lambda: stats.t_quantile(0.5 + confidence / 2, dof),
         "one-sided": lambda: stats.t_quantile(confidence, dof),
         "t-975": lambda: stats.t_quantile(0.975, dof),
         "z-196": lambda: 1.96,
         "z": lambda: statistics.NormalDist().inv_cdf(0.5 + confidence / 2)}[quantile]()
    low, high = center - q * error, center + q * error
    if sign == "b-a":
        low, high = -high, -low
    excludes = low > 0 or high < 0
    if found == "excludes":
        verdict = excludes
    elif found == "inverted":
        verdict = not excludes
    elif found == "positive":
        verdict = low > 0
    else:  # "overlap": the rows' own intervals do not overlap
        (a_low, a_high), (b_low, b_high) = _row_interval(a, confidence), _row_interval(b, confidence)
        verdict = a_low > b_high or b_low > a_high
    return float(low), float(high), bool(verdict)


def _paired_reference(a, b, confidence=0.95):
    out = stats.paired_difference(a, b, confidence)
    return out["low"], out["high"], out["found"]


def _runs(gen, n, *, base=1.55, seed_spread=0.02, delta=0.0, noise=0.003) -> tuple[list, list]:
    """Final validation losses of two rows trained with the same n seeds: each seed moves both rows by the
    same amount (seed_spread), a's row sits ``delta`` above b's, and each run adds its own ``noise``."""
    seed = torch.randn(n, generator=gen, dtype=_F64) * seed_spread
    a = base + delta + seed + torch.randn(n, generator=gen, dtype=_F64) * noise
    b = base + seed + torch.randn(n, generator=gen, dtype=_F64) * noise
    return [round(float(x), 5) for x in a], [round(float(x), 5) for x in b]


def _paired_cases(gen) -> list[Case]:
    cases = []
    for n, confidence, knobs, found, what in [
        (4, 0.95, dict(delta=0.0, noise=0.004), False, "no difference found"),
        (5, 0.95, dict(delta=0.012), True, "a's losses higher by less than the spread between seeds"),
        (5, 0.95, dict(delta=-0.012), True, "a's losses lower by less than the spread between seeds"),
        (3, 0.95, dict(delta=0.05, seed_spread=0.03, noise=0.004), True, "three seeds, a clear difference"),
        (2, 0.95, dict(delta=0.03, seed_spread=0.01, noise=0.004), True,
         "two seeds (the fewest that give an interval)"),
        (8, 0.9, dict(delta=-0.004, noise=0.004), None, "confidence 0.9"),
        (10, 0.99, dict(delta=0.006, noise=0.005, seed_spread=0.03), None, "confidence 0.99"),
        (6, 0.95, dict(delta=0.002, noise=0.004, seed_spread=0.001), None, "seeds that barely matter"),
        (3, 0.8, dict(delta=-0.02, noise=0.01), None, "confidence 0.8"),
    ]:
        for _ in range(100):  # draw until the case is what its label says
            a, b = _runs(gen, n, **knobs)
            if found is None or stats.paired_difference(a, b, confidence)["found"] == found:
                break
        cases.append(Case(f"{what}: a and b lists of {n} floats, confidence={confidence}", (a, b),
                          {"confidence": confidence}))
    a, _ = _runs(gen, 4)
    cases.append(Case("the same configuration twice (every difference 0): a and b lists of 4 floats, "
                      "confidence=0.95", (a, list(a)), {"confidence": 0.95}))
    return cases


def _paired_mistake(**knobs):
    return lambda a, b, confidence=0.95: _paired(a, b, confidence, **knobs)


_UNPAIRED = ("the rows are compared as independent samples (the difference of their means, with a pooled or "
             "Welch standard error). a[i] and b[i] share seed i, so pair them: the interval is that of the "
             "per-seed differences a_i − b_i, from which what a seed does to both runs cancels.")
_NORMAL = ("is the normal distribution's quantile, right only for many samples; with n seeds the mean of "
           "the differences follows Student's t with n − 1 degrees of freedom: use t_quantile.")
_FOUND_OVERLAP = ("\u201cfound\u201d is decided by whether the two rows' own intervals overlap. Paired runs are "
                  "judged by the interval of their differences: a difference is found when THAT interval "
                  "excludes 0, even when the rows' intervals overlap (the seed moves both rows alike).")

PAIRED_INTERVAL = Task(
    name="paired_interval", seed=1206, cases=_paired_cases, reference=_paired_reference,
    output=TupleOutput([NumberOutput("the interval's lower end"), NumberOutput("the interval's upper end"),
                        BoolOutput("whether a difference was found")], ["low", "high", "found"]),
    rtol=1e-6, atol=1e-9,
    mistakes=[
        *(Mistake(_UNPAIRED, _paired_mistake(pairing=p)) for p in ("pooled", "n-1", "welch-floor", "welch-round")),
        Mistake("1.96 " + _NORMAL, _paired_mistake(quantile="z-196")),
        Mistake("the quantile is " + _NORMAL, _paired_mistake(quantile="z")),
        Mistake("the t quantile has n degrees of freedom; the differences' mean has used one of the n, so "
                "Student's t has n − 1.", _paired_mistake(df="n")),
        Mistake("the quantile is one-sided (t at the confidence level itself). A two-sided interval leaves "
                "(1 − confidence) / 2 in each tail: the quantile at 0.5 + confidence / 2.",
                _paired_mistake(quantile="one-sided")),
        Mistake("the confidence argument is ignored: the quantile must follow it (0.5 + confidence / 2), not "
                "stay at the one for 95 %.", _paired_mistake(quantile="t-975")),
        Mistake("the standard deviation divides by n (the population formula, numpy's default ddof=0); the "
                "sample standard deviation of n differences divides by n − 1.", _paired_mistake(ddof=0)),
        Mistake("the standard error is divided by n; the standard error of a mean of n values is s / √n.",
                _paired_mistake(se="n")),
        Mistake("the half-width uses s itself, the spread of single seeds; the interval is for the MEAN "
                "difference, whose standard error is s / √n.", _paired_mistake(se="none")),
        Mistake("the half-width uses the variance s²; use the standard deviation s, its square root.",
                _paired_mistake(se="variance")),
        Mistake("this is the interval of b − a; the task asks for a − b (positive when a's losses are higher), "
                "so the interval's ends change sign and swap.", _paired_mistake(sign="b-a")),
        # A comparison by overlap errs only where a difference is found (no overlap implies a paired difference),
        # where "inverted" errs too: the cases start with one that has no difference, on which only
        # "inverted" errs, and "one direction" (which is right for a's losses higher) is tried first.
        Mistake("\u201cfound\u201d only counts one direction: a difference is found when the interval lies "
                "entirely above 0 OR entirely below it.", _paired_mistake(found="positive")),
        Mistake(_FOUND_OVERLAP, _paired_mistake(found="overlap")),
        Mistake("\u201cfound\u201d is inverted: it is True when the interval EXCLUDES 0 (a difference was "
                "found), False when 0 lies inside it.", _paired_mistake(found="inverted")),
    ],
    forbid=Forbid(functions=((stats.paired_difference, "course_lib.experiments.stats.paired_difference"),
                             (stats.summarize, "course_lib.experiments.stats.summarize")),
                  packages=("scipy", "statistics")),
    hint="Work one small case by hand: the differences d_i = a_i − b_i, their mean and sample standard "
         "deviation s, the half-width t_quantile(0.5 + confidence / 2, n − 1) · s / √n.",
)

check_paired_interval = PAIRED_INTERVAL.checker(
    """Check ``paired_interval(a, b, confidence=0.95) -> (low, high, found)``: Student's t interval for the
    mean of the per-seed differences a_i − b_i (n − 1 degrees of freedom, two-sided), and whether it
    excludes 0.""")


# --- Task 7: switch a head off ------------------------------------------------------------------------------

def _model(gen: torch.Generator, dtype=_F32, **changes) -> DecoderLM:
    """A small DecoderLM in eval mode with weights drawn from ``gen``: matrices N(0, 1/fan_in), gains in
    [0.5, 1.5], small biases, so that switching one head off changes the loss by far more than rounding."""
    shape = dict(vocab_size=23, d_model=16, n_layers=2, n_heads=4, d_ff=32, max_seq_len=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
        model = DecoderLM(ModelConfig(**{**shape, **changes}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("embed.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)
    return model.to(dtype).eval()


def _loss(logits: torch.Tensor, ids: torch.Tensor, *, shift="next", reduction="mean", unit="nats") -> float:
    if shift == "next":  # logits at t score the token at t + 1
        logits, targets = logits[:, :-1], ids[:, 1:]
    elif shift == "none":
        targets = ids
    else:  # "previous": logits at t + 1 scored against the token at t
        logits, targets = logits[:, 1:], ids[:, :-1]
    value = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction).item()
    return value / math.log(2) if unit == "bits" else value


def _ablated(model, ids, heads, *, where="features", mode="zero", which="all", width="head_dim",
             index="head", **loss_knobs) -> float:
    """The ablated loss with knobs: what a solution with a given mistake computes (on a copy of the model,
    which it may edit)."""
    model = copy.deepcopy(model)
    heads = [tuple(p) for p in heads]
    if which == "first":
        heads = heads[:1]
    elif which == "late-binding":  # every hook reads the loop's last head
        heads = [(layer, heads[-1][1]) for layer, _ in heads]
    elif which == "none":
        heads = []
    with torch.no_grad():
        if where == "features" and width == "head_dim" and index == "head":
            with ablate_heads(model, heads, mode=mode):
                return _loss(model(ids), ids, **loss_knobs)
        hooks = []
        for layer, h in heads:
            attn = model.blocks[layer].attn
            D_h, H, H_kv = attn.head_dim, attn.n_heads, attn.n_kv_heads
            if where == "features":  # a wrong slice of W_o's input
                size = {"head_dim": D_h, "d_model": attn.d_model // H, "kv": H * D_h // H_kv}[width]
                k = {"head": h, "kv": h // attn.n_rep}[index]
                attn.w_o.weight[:, k * size:(k + 1) * size] = 0  # a slice past the end: fewer, or none
            elif where == "wo-rows":  # W_o's rows: output features h·D_h … of the residual stream
                attn.w_o.weight[h * D_h:(h + 1) * D_h] = 0  # the bias stays
            elif where == "wo-output":  # W_o's output features zeroed, bias included
                hooks.append(attn.w_o.register_forward_hook(lambda m, args, out, h=h, D_h=D_h: _zeroed(out, h, D_h)))
            elif where in ("query", "query-weight"):  # q_h = 0 (or its bias): uniform attention
                attn.w_qkv.weight[h * D_h:(h + 1) * D_h] = 0
                if where == "query" and attn.w_qkv.bias is not None:
                    attn.w_qkv.bias[h * D_h:(h + 1) * D_h] = 0
            elif where in ("value-group", "value-index"):  # the values of a key/value head
                g = h // attn.n_rep if where == "value-group" else h
                if g >= H_kv:
                    continue  # a slice past the value rows: nothing changes
                start = (H + H_kv + g) * D_h
                attn.w_qkv.weight[start:start + D_h] = 0
                if attn.w_qkv.bias is not None:
                    attn.w_qkv.bias[start:start + D_h] = 0
            elif where == "layer":  # the whole attention sublayer of that block
                attn.w_o.weight.zero_()
                if attn.w_o.bias is not None:
                    attn.w_o.bias.zero_()
        try:
            return _loss(model(ids), ids, **loss_knobs)
        finally:
            for hook in hooks:
                hook.remove()


def _zeroed(x: torch.Tensor, h: int, size: int) -> torch.Tensor:
    """A copy of x with its last dimension's features h·size … (h + 1)·size − 1 set to 0 (as far as they
    exist, as slicing does)."""
    x = x.clone()
    x[..., h * size:(h + 1) * size] = 0
    return x


def _ablated_reference(model, ids, heads):
    with torch.no_grad(), ablate_heads(model, heads, mode="zero"):
        logits = model(ids)  # (B, T, V)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()


_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def _hooks(model: torch.nn.Module) -> int:
    """How many hooks are registered on the model's modules and globally."""
    from torch.nn.modules import module as nn_module

    count = sum(len(getattr(m, d, {})) for m in model.modules() for d in _HOOK_DICTS)
    return count + sum(len(getattr(nn_module, d, {})) for d in
                       ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                        "_global_backward_hooks"))


def _run_ablated(student, model, ids, heads):
    """Call the student's function, then check that the model is as it was: no hook left, the same
    weights, the same mode and the same outputs."""
    with paused(), torch.no_grad():
        hooks, training = _hooks(model), model.training
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        before = model(ids)  # (B, T, V)
    got = student(model, ids, heads)
    with paused(), torch.no_grad():
        name = "`ablated_loss`"
        if _hooks(model) != hooks:
            raise GradingError(f"{name} left a hook registered on the model: afterwards every forward pass "
                               f"would still switch heads off. Keep the handle register_forward_pre_hook "
                               f"returns and call handle.remove() in a finally: block.")
        state = model.state_dict()
        if state.keys() != weights.keys() or any(not torch.equal(state[k], weights[k]) for k in weights):
            raise GradingError(f"{name} left the model's weights changed: switching a head off must not "
                               f"damage the model. Zero the head's features with a forward pre-hook on W_o "
                               f"(removed afterwards), or save the weights you change and copy them back.")
        if model.training != training:
            raise GradingError(f"{name} left the model in {'training' if model.training else 'eval'} mode; "
                               f"leave it in the mode it was given in.")
        after = model(ids)
        if not torch.allclose(after, before, rtol=1e-6, atol=1e-7):
            raise GradingError(f"{name} left the model computing different outputs: after your function "
                               f"returns, the model must be exactly as it was (no replaced forward methods, no "
                               f"hooks, no edited weights).")
    return got


def _ablated_cases(gen) -> list[Case]:
    cases = []
    for changes, dtype, B, T, heads, what in [
        (dict(), _F32, 3, 10, [(0, 2)], "multi-head attention (4 heads), one head of block 0"),
        (dict(), _F32, 2, 12, [(0, 1), (1, 3)], "multi-head attention (4 heads), a head in each block"),
        (dict(n_kv_heads=2), _F32, 3, 10, [(1, 3)], "grouped-query attention (4 query heads, 2 key/value "
                                                    "heads), one head"),
        (dict(n_kv_heads=2), _F32, 2, 12, [(0, 1), (1, 2)], "grouped-query attention (4 query heads, 2 "
                                                            "key/value heads), two heads"),
        (dict(n_kv_heads=1, n_layers=3), _F32, 2, 9, [(2, 2), (1, 1), (2, 0)],
         "multi-query attention (4 query heads, 1 key/value head), 3 blocks, two heads in block 2"),
        (dict(n_kv_heads=2, head_dim=6), _F32, 2, 10, [(0, 3), (1, 0)],
         "head_dim 6 with d_model 16 (4 heads: W_o reads 24 features), 2 key/value heads"),
        (dict(d_model=24, n_heads=3, norm="layer", ffn="gelu", positional="learned", bias=True), _F32, 2, 10,
         [(1, 2), (0, 0)], "a GPT-2-style model (LayerNorm, learned positions, GELU, biases), 3 heads"),
        (dict(n_layers=3, n_kv_heads=2), _F64, 1, 14, [(2, 1), (0, 3), (1, 0)],
         "float64, 3 blocks, one sequence"),
        (dict(), _F32, 2, 8, [], "no head to switch off (an empty list)"),
    ]:
        model = _model(gen, dtype, **changes)
        ids = torch.randint(0, model.config.vocab_size, (B, T), generator=gen)
        c = model.config
        label = (f"{what}: a {c.n_layers}-block {str(dtype).replace('torch.', '')} DecoderLM, ids "
                 f"{describe(ids)}, heads={heads}")
        cases.append(Case(label, (model, ids, heads)))
    return cases


def _ablated_mistake(**knobs):
    return lambda model, ids, heads: _ablated(model, ids, heads, **knobs)


_KV_AS_HEAD = ("head h was taken as key/value head h (its values zeroed, or W_o's input cut into n_kv_heads "
               "slices). W_o reads one slice of D_h features per QUERY head (n_heads slices, also with "
               "grouped-query attention), and head h is query head h: features h·D_h … (h + 1)·D_h − 1.")
_KV_GROUP = ("head h was mapped to its key/value head h // n_rep (its values zeroed, or that slice of W_o's "
             "input). With grouped-query attention several QUERY heads share a key/value head; switching off "
             "query head h means its own D_h features of W_o's input, h·D_h … (h + 1)·D_h − 1, and no others.")
_WO_ROWS = ("W_o's rows (or its output features) were zeroed: those are dimensions of the residual stream. "
            "Head h is a slice of W_o's INPUT, the columns h·D_h … (h + 1)·D_h − 1 of w_o.weight (shape "
            "(D, H·D_h)), or the same features of the input a forward pre-hook on w_o receives.")
_QUERY = ("the head's queries were zeroed: its scores are then all 0, the softmax spreads its attention "
          "evenly over the earlier tokens and the head still writes their average value. Switching a head "
          "off zeroes its OUTPUT, the D_h features it contributes to W_o's input.")

ABLATED_LOSS = Task(
    name="ablated_loss", seed=1207, cases=_ablated_cases, reference=_ablated_reference, run=_run_ablated,
    output=NumberOutput("the mean loss in nats per predicted token"), rtol=1e-5, atol=1e-6, seconds=15.0,
    mistakes=[
        Mistake(_KV_AS_HEAD, _ablated_mistake(width="kv")),
        Mistake(_KV_AS_HEAD, _ablated_mistake(where="value-index")),
        Mistake(_KV_GROUP, _ablated_mistake(index="kv")),
        Mistake(_KV_GROUP, _ablated_mistake(where="value-group")),
        Mistake("a head's width is taken as d_model / n_heads; the model's head width is attn.head_dim, which "
                "need not be d_model / n_heads (W_o reads n_heads · head_dim features).",
                _ablated_mistake(width="d_model")),
        Mistake("the loss is that of the intact model: no head was switched off. A forward pre-hook that "
                "changes a copy of its input must return it ((new_input,), a tuple); one that returns None "
                "leaves the input as it was.", _ablated_mistake(which="none")),
        Mistake("only the first head of the list is switched off; every (layer, head) pair in heads is, "
                "together.", _ablated_mistake(which="first")),
        Mistake("every hook switches off the same head, the last of the list: a function defined in a loop "
                "reads the loop variable when it RUNS, after the loop has ended (Python closures bind late). "
                "Pass the head in as a default argument (lambda module, args, h=h: ...) or build each hook in "
                "a function of its own.", _ablated_mistake(which="late-binding")),
        Mistake(_WO_ROWS, _ablated_mistake(where="wo-rows")),
        Mistake(_WO_ROWS, _ablated_mistake(where="wo-output")),
        Mistake(_QUERY, _ablated_mistake(where="query")),
        Mistake(_QUERY, _ablated_mistake(where="query-weight")),
        Mistake("the head's features are replaced by their mean (mean ablation); this task asks for zero "
                "ablation: the features set to 0.", _ablated_mistake(mode="mean")),
        Mistake("the whole attention sublayer of the block is switched off; only the listed heads are, each "
                "by its own D_h features.", _ablated_mistake(where="layer")),
        Mistake("the logits are scored against the tokens at their own positions; logits[:, t] predict the "
                "NEXT token: score logits[:, :-1] against ids[:, 1:].", _ablated_mistake(shift="none")),
        Mistake("the logits are scored against the previous tokens; logits[:, t] predict the NEXT token: "
                "score logits[:, :-1] against ids[:, 1:].", _ablated_mistake(shift="previous")),
        Mistake("the token losses are summed; return their mean over the B·(T − 1) predicted tokens.",
                _ablated_mistake(reduction="sum")),
        Mistake("the result is in bits; return nats (the loss as F.cross_entropy computes it).",
                _ablated_mistake(unit="bits")),
    ],
    # the generator under @contextmanager: the decorator's wrapper is shared by every context manager
    forbid=Forbid(functions=((getattr(ablate_heads, "__wrapped__", ablate_heads), "course_lib.heads.ablate_heads"),)),
    hint="Check on a model you can reason about: switching every head of every block off must give the loss "
         "of the same model with every w_o.weight set to zero, and the list's order must not matter.",
)

check_ablated_loss = ABLATED_LOSS.checker(
    """Check ``ablated_loss(model, ids, heads) -> float``: the mean next-token cross-entropy (nats) of the
    model on ids with the D_h input features of W_o that belong to each listed (layer, head) set to zero;
    the model unchanged afterwards (no hook left, the same weights and outputs).""")
