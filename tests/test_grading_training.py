"""The chapter 12 checkers beyond the catalogue (tests/mistakes/ex12.py): other correct formulations pass,
and the checkers refuse what they must (clipping, schedulers, sampling and evaluation delegated, inputs
changed, wrong types)."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.grading import (GradingError, check_evaluate_loss, check_learning_rate, check_sampling_probs,
                                check_train_step, check_training_predictions)
from course_lib.grading import training as grading_training
from grading_helpers import expect_failure, no_values_leak


# --- Task 1 ----------------------------------------------------------------------------------------------

def step_zeroing_first(model, optimizer, x, y, max_norm):
    """Gradients cleared before the forward pass; the norm with torch.linalg on the stacked norms."""
    optimizer.zero_grad(set_to_none=True)
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        p.grad.mul_(factor)
    optimizer.step()
    return loss  # a 0-d tensor is accepted as the loss


def step_by_log_softmax(model, optimizer, x, y, max_norm):
    """The loss by hand, the norm accumulated in a Python loop."""
    logp = torch.log_softmax(model(x), dim=-1)  # (B, T, V)
    loss = -logp.gather(-1, y.unsqueeze(-1)).mean()
    loss.backward()
    sq = 0.0
    for p in model.parameters():
        if p.grad is not None:
            sq += float((p.grad * p.grad).sum())
    norm = math.sqrt(sq)
    if norm > max_norm:
        for p in model.parameters():
            if p.grad is not None:
                p.grad = p.grad * (max_norm / norm)
    optimizer.step()
    optimizer.zero_grad()
    return float(loss)


def test_other_correct_steps_pass():
    check_train_step(step_zeroing_first)
    check_train_step(step_by_log_softmax)


@pytest.mark.parametrize("road", ["foreach", "get_total_norm", "alias"])
def test_clipping_delegated_by_any_road_is_refused(road):
    def step(model, optimizer, x, y, max_norm):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if road == "foreach":
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            torch._foreach_mul_(grads, min(1.0, max_norm / (norm.item() + 1e-6)))
        elif road == "get_total_norm":
            norm = torch.nn.utils.get_total_norm(grads)
            for g in grads:
                g.mul_(min(1.0, max_norm / (norm.item() + 1e-6)))
        else:
            from torch.nn.utils import clip_grad_norm_ as keep_small
            keep_small(model.parameters(), max_norm, foreach=False)
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    message = expect_failure(check_train_step, step, "which does the work this task asks you to do",
                             no_leak=no_values_leak)
    assert "clip_grad_norm" in message or "get_total_norm" in message or "_foreach_norm" in message


def test_a_step_that_returns_nothing_is_named():
    def step(model, optimizer, x, y, max_norm):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    expect_failure(check_train_step, step, "should return the batch's loss as a number", no_leak=no_values_leak)


def test_the_clipping_cases_cover_both_regimes():
    """Clipping acts in some cases and not in others, so both 'never clips' and 'always rescales' show."""
    cases = grading_training._train_step_cases(torch.Generator().manual_seed(grading_training.TRAIN_STEP.seed))
    acts = []
    for case in cases:
        model, _, batches, max_norm = case.args
        x, y = batches[0]
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters() if p.grad is not None))
        acts.append(bool(norm > max_norm))
    assert any(acts) and not all(acts)


# --- Task 2 ----------------------------------------------------------------------------------------------

def schedule_by_sine(step, max_lr, min_lr, warmup_steps, total_steps):
    """½(1 + cos πp) written as cos²(πp/2); the branches in another order."""
    if step >= total_steps:
        return min_lr
    if step >= warmup_steps:
        p = (step - warmup_steps) / (total_steps - warmup_steps)
        return min_lr + (max_lr - min_lr) * math.cos(math.pi * p / 2) ** 2
    return (step + 1) * max_lr / warmup_steps


def test_other_correct_schedules_pass():
    check_learning_rate(schedule_by_sine)
    check_learning_rate(lambda *a: float(schedule_by_sine(*a)))


def test_lr_scheduler_and_the_course_schedule_are_refused():
    def course(step, max_lr, min_lr, warmup_steps, total_steps):
        from course_lib.training import lr_at
        return lr_at(step, lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps)

    expect_failure(check_learning_rate, course, "course_lib.training.lr_at", no_leak=no_values_leak)

    def lambda_lr(step, max_lr, min_lr, warmup_steps, total_steps):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=max_lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: schedule_by_sine(s, 1.0, min_lr / max_lr,
                                                                                  warmup_steps, total_steps))
        for _ in range(step):
            sched.step()
        return sched.get_last_lr()[0]

    expect_failure(check_learning_rate, lambda_lr, "torch.optim.lr_scheduler", no_leak=no_values_leak)


# --- Task 3 ----------------------------------------------------------------------------------------------

def probs_by_masked_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """Filtering on the logits with -inf and one softmax per filter: the same distribution."""
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = z.topk(top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None:
        ranked, order = z.sort(dim=-1, descending=True)
        probs = ranked.softmax(-1)
        drop_ranked = probs.cumsum(-1) - probs >= top_p
        drop = drop_ranked.scatter(-1, order, drop_ranked)
        z = z.masked_fill(drop, float("-inf"))
    return z.softmax(-1)


def test_other_correct_sampling_distributions_pass():
    check_sampling_probs(probs_by_masked_logits)


def test_a_sampling_function_that_divides_the_logits_in_place_is_refused():
    def in_place(logits, temperature=1.0, top_k=None, top_p=None):
        logits /= temperature
        return probs_by_masked_logits(logits, 1.0, top_k, top_p)

    expect_failure(check_sampling_probs, in_place, "changed its input `logits` in place", no_leak=no_values_leak)


def test_float64_for_float32_logits_is_refused():
    def upcast(logits, temperature=1.0, top_k=None, top_p=None):
        return probs_by_masked_logits(logits.double(), temperature, top_k, top_p)

    expect_failure(check_sampling_probs, upcast, "returned a float64 tensor", no_leak=no_values_leak)


def test_the_course_sampling_and_next_token_probs_are_refused():
    def course(logits, temperature=1.0, top_k=None, top_p=None):
        from course_lib.sampling import top_k_mask
        probs = torch.softmax(logits / temperature, -1)
        return probs * top_k_mask(probs, top_k or probs.shape[-1])

    expect_failure(check_sampling_probs, course, "course_lib.sampling.top_k_mask", no_leak=no_values_leak)

    def via_model(logits, temperature=1.0, top_k=None, top_p=None):
        from course_lib.model import next_token_probs
        return next_token_probs(logits.reshape(-1, 1, logits.shape[-1]), temperature).reshape(logits.shape)

    expect_failure(check_sampling_probs, via_model, "next_token_probs", no_leak=no_values_leak)


# --- Task 4 ----------------------------------------------------------------------------------------------

def evaluate_by_weighted_means(model, data, context, batch_size):
    """Batch means weighted by their number of windows (each window holds `context` tokens): right."""
    n = (len(data) - 1) // context
    x_all = data[: n * context].reshape(n, context)
    y_all = data[1: n * context + 1].reshape(n, context)
    weighted = 0.0
    for i in range(0, n, batch_size):
        x, y = x_all[i: i + batch_size], y_all[i: i + batch_size]
        weighted += F.cross_entropy(model(x).transpose(1, 2), y).item() * len(x)
    return weighted / n


def test_other_correct_evaluations_pass():
    check_evaluate_loss(evaluate_by_weighted_means)


def test_the_course_evaluation_is_refused():
    def course(model, data, context, batch_size):
        from course_lib.training import evaluate
        return evaluate(model, data, context, batch_size)

    expect_failure(check_evaluate_loss, course, "course_lib.training.evaluate", no_leak=no_values_leak)


def test_a_tensor_loss_is_refused_with_a_message():
    def tensor_loss(model, data, context, batch_size):
        return torch.tensor(evaluate_by_weighted_means(model, data, context, batch_size))

    expect_failure(check_evaluate_loss, tensor_loss, "it should return the mean loss in nats per token",
                   no_leak=no_values_leak)


# --- Task 5 ----------------------------------------------------------------------------------------------

def test_predictions_within_rounding_pass_and_other_wrong_values_are_plain():
    check_training_predictions(lambda: {"initial_loss": 4.174, "bits_per_char": 2.02, "perplexity": 4.055,
                                        "adam_clip_ratio": 1, "top_p_tokens": 3})
    message = expect_failure(check_training_predictions,
                             lambda: {"initial_loss": 4.174, "bits_per_char": 2.02, "perplexity": 4.055,
                                      "adam_clip_ratio": 0.5, "top_p_tokens": 3},
                             "`adam_clip_ratio` is not what happens", no_leak=no_values_leak)
    assert "Likely mistake" not in message
