"""The chapter 13 checkers beyond the catalogue (tests/mistakes/ex13.py): other correct formulations pass,
the checkers refuse what they must (the course's Muon, Newton–Schulz, attention, norms and schedule,
torch's RMSNorm and attention, inputs changed, wrong types), and their cases separate the mistakes they
name."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.grading import (check_lr_wsd, check_muon_step, check_newton_schulz, check_qk_norm_attention,
                                check_softcap, check_speedrun_predictions)
from course_lib.grading import speedrun as grading_speedrun
from course_lib.training import muon
from grading_helpers import expect_failure, no_values_leak

A, B, C = muon.NS_COEFFICIENTS


# --- Task 1 ----------------------------------------------------------------------------------------------

def ns_right_multiplied(G, steps=5):
    """Never transposed: X @ (b B + c B²) with B = Xᵀ X, the same polynomial, in float64."""
    X = G.double()
    X = X / (X.pow(2).sum().sqrt() + 1e-7)
    for _ in range(steps):
        Bm = X.T @ X
        X = A * X + X @ (B * Bm + C * Bm @ Bm)
    return X.to(G.dtype)


def ns_expanded(G, steps=5):
    """The three terms multiplied out, A² X as A (A X); transposing by shape."""
    X = G.to(torch.float32)
    wide = X.shape[0] <= X.shape[1]
    X = X if wide else X.T
    X = X / (torch.linalg.matrix_norm(X) + 1e-7)
    for _ in range(steps):
        AX = (X @ X.T) @ X
        X = A * X + B * AX + C * (X @ X.T) @ AX
    return (X if wide else X.T).type_as(G)


def test_other_correct_iterations_pass():
    check_newton_schulz(ns_right_multiplied)
    check_newton_schulz(ns_expanded)


@pytest.mark.parametrize("road", ["alias", "partial", "muon_update"])
def test_the_course_newton_schulz_is_refused_by_any_road(road):
    def delegate(G, steps=5):
        if road == "alias":
            from course_lib.training import newton_schulz as orthogonalise
            return orthogonalise(G, steps)
        if road == "partial":
            return functools.partial(muon.newton_schulz, steps=steps)(G)
        return muon.muon_update(G, steps, scale="adamw_rms") / (0.2 * math.sqrt(max(G.shape)))

    message = expect_failure(check_newton_schulz, delegate, "which does the work this task asks you to do",
                             no_leak=no_values_leak)
    assert "course_lib.training.muon" in message


def test_an_iteration_that_normalises_g_in_place_is_refused():
    def in_place(G, steps=5):
        G /= torch.linalg.matrix_norm(G.float()).to(G.dtype) + 1e-7
        return ns_expanded(G, steps)

    expect_failure(check_newton_schulz, in_place, "changed its input `G` in place", no_leak=no_values_leak)


def test_the_iteration_cases_cover_shapes_dtypes_and_edges():
    cases = grading_speedrun._ns_cases(torch.Generator().manual_seed(grading_speedrun.NEWTON_SCHULZ.seed))
    shapes = [G.shape for G, _ in (c.args for c in cases)]
    assert any(r > c for r, c in shapes) and any(r < c for r, c in shapes) and any(r == c for r, c in shapes)
    dtypes = {c.args[0].dtype for c in cases}
    assert {torch.float32, torch.float64, torch.bfloat16} <= dtypes
    assert any(not c.args[0].any() for c in cases), "a zero matrix"
    assert {0, 3, 5, 7} <= {c.args[1] for c in cases}
    first = cases[0].args[0]
    assert first.shape[0] != first.shape[1], "the first case tells the Gram matrix's side by its shape"


# --- Task 2 ----------------------------------------------------------------------------------------------

def muon_step_by_lerp(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
    """torch.lerp as the course's optimiser writes it, on copies, with in-place updates of the copies."""
    m = momentum.clone().lerp_(grad, 1 - beta)
    d = grad.lerp(m, beta) if nesterov else m
    w = weight.clone().mul_(1 - lr * weight_decay)
    w.add_(muon.newton_schulz(d), alpha=-lr * 0.2 * max(weight.shape) ** 0.5)
    return w, m


def muon_step_with_own_orthogonalisation(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0,
                                         nesterov=True):
    """A right Task 1 instead of the given orthogonalize."""
    m = beta * momentum + (1 - beta) * grad
    d = beta * m + (1 - beta) * grad if nesterov else m
    update = ns_expanded(d) * 0.2 * math.sqrt(max(weight.shape))
    return weight * (1 - lr * weight_decay) - lr * update, m


def test_other_correct_muon_steps_pass():
    check_muon_step(muon_step_by_lerp)
    check_muon_step(muon_step_with_own_orthogonalisation)


@pytest.mark.parametrize("road", ["muon_update", "optimizer"])
def test_the_course_muon_is_refused(road):
    def delegate(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
        m = beta * momentum + (1 - beta) * grad
        d = beta * m + (1 - beta) * grad if nesterov else m
        if road == "muon_update":
            return weight * (1 - lr * weight_decay) - lr * muon.muon_update(d), m
        p = torch.nn.Parameter(weight.clone())
        optimizer = muon.Muon([p], lr=lr, momentum=beta, nesterov=nesterov, weight_decay=weight_decay)
        optimizer.state[p]["momentum_buffer"] = momentum.clone()
        p.grad = grad.clone()
        optimizer.step()
        return p.detach().clone(), optimizer.state[p]["momentum_buffer"].clone()

    expect_failure(check_muon_step, delegate, "which does the work this task asks you to do",
                   no_leak=no_values_leak)


def test_a_muon_step_that_returns_the_weight_alone_is_named():
    def weight_only(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
        return muon_step_by_lerp(weight, grad, momentum, lr, beta, weight_decay, nesterov)[0]

    expect_failure(check_muon_step, weight_only, "(new_weight, new_momentum)", no_leak=no_values_leak)

    def float64_momentum(weight, grad, momentum, lr, beta=0.95, weight_decay=0.0, nesterov=True):
        w, m = muon_step_by_lerp(weight, grad, momentum, lr, beta, weight_decay, nesterov)
        return w, m.double()

    expect_failure(check_muon_step, float64_momentum, "new_momentum is a float64 tensor",
                   no_leak=no_values_leak)


def test_the_first_muon_case_reveals_each_bug_of_the_given_version():
    """On the first case each of the three bugs alone changes the result, and every combination of them
    gives a different one: the message can say which remain."""
    (first, *_) = grading_speedrun._muon_cases(torch.Generator().manual_seed(grading_speedrun.MUON_STEP.seed))
    want = grading_speedrun._muon_reference(*first.args)
    seen = [want]
    for mistake in grading_speedrun._given_mistakes():
        got = mistake.compute(*first.args)
        assert all(not torch.allclose(got, other, rtol=1e-3, atol=1e-4) for other in seen), mistake.message
        seen.append(got)


# --- Task 3 ----------------------------------------------------------------------------------------------

def qk_attention_by_loops(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    """One head at a time, rsqrt, a precomputed lower-triangular mask: the same attention."""
    B, T, D = x.shape
    d_h = w_qkv.shape[0] // (n_heads + 2 * n_kv_heads)
    w_q, w_k, w_v = w_qkv.split([n_heads * d_h, n_kv_heads * d_h, n_kv_heads * d_h])
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    heads = []
    for h in range(n_heads):
        g = h // (n_heads // n_kv_heads)
        q = x @ w_q[h * d_h:(h + 1) * d_h].T  # (B, T, d_h)
        k = x @ w_k[g * d_h:(g + 1) * d_h].T
        v = x @ w_v[g * d_h:(g + 1) * d_h].T
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps)
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps)
        scores = (q @ k.transpose(-2, -1)) / d_h ** 0.5
        heads.append(torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v)
    return torch.cat(heads, dim=-1) @ w_o.T


def qk_attention_by_groups(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
    """Query heads grouped against their key/value head by broadcasting, no copy of K and V."""
    B, T, _ = x.shape
    H, H_kv = n_heads, n_kv_heads
    d_h = w_qkv.shape[0] // (H + 2 * H_kv)
    qkv = (x @ w_qkv.T).unflatten(-1, (H + 2 * H_kv, d_h)).transpose(1, 2)  # (B, H + 2 H_kv, T, d_h)
    q, k, v = qkv.split([H, H_kv, H_kv], dim=1)
    norm = lambda t: t / (t.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # noqa: E731
    q = norm(q).unflatten(1, (H_kv, H // H_kv))  # (B, H_kv, n_rep, T, d_h)
    k, v = norm(k).unsqueeze(2), v.unsqueeze(2)  # (B, H_kv, 1, T, d_h)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    scores = torch.where(torch.ones(T, T, dtype=torch.bool).tril(), scores, float("-inf"))
    out = (scores.softmax(-1) @ v).flatten(1, 2)  # (B, H, T, d_h)
    return out.transpose(1, 2).flatten(2) @ w_o.T


def test_other_correct_qk_norm_attentions_pass():
    check_qk_norm_attention(qk_attention_by_loops)
    check_qk_norm_attention(qk_attention_by_groups)


@pytest.mark.parametrize("road", ["RMSNorm", "normalize", "repeat_kv", "sdpa"])
def test_torch_and_course_norms_and_attention_are_refused(road):
    def delegate(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
        B, T, _ = x.shape
        H, H_kv = n_heads, n_kv_heads
        d_h = w_qkv.shape[0] // (H + 2 * H_kv)
        q, k, v = (x @ w_qkv.T).unflatten(-1, (H + 2 * H_kv, d_h)).transpose(1, 2).split([H, H_kv, H_kv], 1)
        if road == "RMSNorm":
            norm = torch.nn.RMSNorm(d_h, eps=eps, elementwise_affine=False)
            q, k = norm(q), norm(k)
        elif road == "normalize":
            q, k = F.normalize(q, dim=-1) * d_h ** 0.5, F.normalize(k, dim=-1) * d_h ** 0.5
        else:
            q = q / (q.pow(2).mean(-1, keepdim=True) + eps).sqrt()
            k = k / (k.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        if road == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            from course_lib.attention import repeat_kv
            if road == "repeat_kv":
                k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)
            else:
                k, v = k.repeat_interleave(H // H_kv, 1), v.repeat_interleave(H // H_kv, 1)
            scores = (q @ k.transpose(-2, -1) / math.sqrt(d_h)).masked_fill(
                ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
            out = scores.softmax(-1) @ v
        return out.transpose(1, 2).flatten(2) @ w_o.T

    expect_failure(check_qk_norm_attention, delegate, "which does the work this task asks you to do",
                   no_leak=no_values_leak)


def test_float64_attention_for_float32_inputs_is_refused():
    def upcast(x, w_qkv, w_o, n_heads, n_kv_heads, eps):
        return qk_attention_by_loops(x.double(), w_qkv.double(), w_o.double(), n_heads, n_kv_heads, eps)

    expect_failure(check_qk_norm_attention, upcast, "returned a float64 tensor", no_leak=no_values_leak)


# --- Task 4 ----------------------------------------------------------------------------------------------

def test_other_correct_softcaps_pass():
    check_softcap(lambda logits, cap: (logits / cap).tanh() * cap)
    check_softcap(lambda logits, cap: cap * (2 * torch.sigmoid(2 * logits / cap) - 1))  # tanh u = 2σ(2u) − 1


def test_a_softcap_returning_a_number_or_a_list_is_named():
    expect_failure(check_softcap, lambda logits, cap: (cap * torch.tanh(logits / cap)).tolist(),
                   "it should return a tensor", no_leak=no_values_leak)


# --- Task 5 ----------------------------------------------------------------------------------------------

def wsd_from_the_end(step, lr, min_lr, warmup_steps, total_steps, cooldown):
    """The cool-down written from the end (the steps left), the branches in another order."""
    if step >= total_steps:
        return min_lr
    if step >= warmup_steps:
        length = total_steps - max(warmup_steps, total_steps - max(1, int(cooldown * total_steps + 0.5)))
        left = total_steps - step
        return min_lr + (lr - min_lr) * min(1.0, left / length)
    return lr * (step + 1) / warmup_steps


def test_other_correct_schedules_pass():
    check_lr_wsd(wsd_from_the_end)


def test_the_schedule_cases_never_sit_on_a_rounding_tie():
    """round() rounds halves to even: no case has cooldown · total_steps at a half, where round-half-up
    would be just as right."""
    for case in grading_speedrun._wsd_cases(torch.Generator()):
        *_, total, cooldown = case.args
        assert abs((cooldown * total) % 1 - 0.5) > 1e-6, case.label


def test_lr_scheduler_and_the_course_schedule_are_refused():
    def lambda_lr(step, lr, min_lr, warmup_steps, total_steps, cooldown):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: wsd_from_the_end(s, 1.0, min_lr / lr, warmup_steps, total_steps, cooldown))
        for _ in range(step):
            sched.step()
        return sched.get_last_lr()[0]

    expect_failure(check_lr_wsd, lambda_lr, "torch.optim.lr_scheduler", no_leak=no_values_leak)


def test_a_tensor_learning_rate_is_named():
    expect_failure(check_lr_wsd, lambda *args: torch.tensor(wsd_from_the_end(*args)),
                   "it should return the learning rate (a Python number)", no_leak=no_values_leak)


# --- Task 6 ----------------------------------------------------------------------------------------------

def test_predictions_within_rounding_pass_and_other_wrong_values_are_plain():
    check_speedrun_predictions(lambda: {"ns_at_one": 0.701, "muon_rms": 0.2, "qk_max_score": 8,
                                        "capped_logit": 28.92, "wsd_lr": 0.011})
    message = expect_failure(check_speedrun_predictions,
                             lambda: {"ns_at_one": 0.701, "muon_rms": 0.25, "qk_max_score": 8,
                                      "capped_logit": 28.92, "wsd_lr": 0.011},
                             "`muon_rms` is not what happens", no_leak=no_values_leak)
    assert "Likely mistake" not in message
