"""The chapter 9 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.grading import (
    GradingError,
    check_greedy_generate,
    check_lm_forward,
    check_next_token_probs,
)
from course_lib.model import next_token_probs as reference_next_token_probs

from grading_helpers import expect_failure, no_values_leak

# --- correct solutions written independently of course_lib -----------------------------------------


def good_lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight
    return x @ (embedding if tie_embeddings else head_weight).T


def float32_lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    # the final norm computed in float32, as Llama does, then cast back: fine
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x32 = x.float()
    h = (x32 / torch.sqrt((x32 * x32).mean(-1, keepdim=True) + eps)).to(x.dtype) * norm_weight
    head = embedding if tie_embeddings else head_weight
    return torch.einsum("btd,vd->btv", h, head)


def good_next_token_probs(logits, lengths, temperature=1.0):
    z = logits[torch.arange(logits.shape[0]), lengths - 1] / temperature
    z = z - z.max(-1, keepdim=True).values
    return z.exp() / z.exp().sum(-1, keepdim=True)


def gather_next_token_probs(logits, lengths, temperature=1.0):
    index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, logits.shape[-1])
    return torch.softmax(logits.gather(1, index).squeeze(1) / temperature, dim=-1)


def good_greedy(model, ids, max_new_tokens):
    out = ids
    for _ in range(max_new_tokens):
        next_id = model(out)[:, -1, :].argmax(dim=-1)
        out = torch.cat([out, next_id[:, None]], dim=1)
    return out


def list_greedy(model, ids, max_new_tokens):
    rows = [list(r) for r in ids.tolist()]
    for _ in range(max_new_tokens):
        logits = model(torch.tensor(rows))
        for row, z in zip(rows, logits[:, -1]):
            row.append(int(z.argmax()))
    return torch.tensor(rows)


@pytest.mark.parametrize(
    "checker, solution",
    [(check_lm_forward, good_lm_forward), (check_lm_forward, float32_lm_forward),
     (check_next_token_probs, good_next_token_probs), (check_next_token_probs, gather_next_token_probs),
     (check_greedy_generate, good_greedy), (check_greedy_generate, list_greedy)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

# Messages may mention shapes and settings in words, never tensor values or long decimals.
expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=2))


def lm_with(*, norm="rms", gain=True, tie="follow", scale=False, norm_first=False, softmax=False):
    def lm(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
        def final_norm(h):
            if norm == "none":
                return h
            if norm == "layer":
                return F.layer_norm(h, h.shape[-1:], norm_weight if gain else None, eps=eps)
            out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
            return out * norm_weight if gain else out

        x = embedding[ids] * (math.sqrt(embedding.shape[1]) if scale else 1.0)
        if norm_first:
            x = final_norm(x)
        for block in blocks:
            x = block(x)
        if not norm_first:
            x = final_norm(x)
        use_embedding = {"follow": tie_embeddings, "never": False, "always": True}[tie]
        logits = x @ (embedding if use_embedding else head_weight).T
        return logits.softmax(-1) if softmax else logits

    return lm


LM_MISTAKES = {
    "the final norm is missing": lm_with(norm="none"),
    "ignores its gain": lm_with(gain=False),
    "subtracts the mean": lm_with(norm="layer"),
    "applied before the blocks": lm_with(norm_first=True),
    "untied although tie_embeddings is True": lm_with(tie="never"),
    "although tie_embeddings is False": lm_with(tie="always"),
    "multiplied by √D": lm_with(scale=True),
    "you returned probabilities": lm_with(softmax=True),
}


@pytest.mark.parametrize("fragment", LM_MISTAKES)
def test_lm_forward_mistakes_are_named(fragment):
    expect(check_lm_forward, LM_MISTAKES[fragment], fragment)


def probs_with(*, where="own", dim=-1, temp="divide", out="probs", stable=True):
    def probs(logits, lengths, temperature=1.0):
        rows = torch.arange(logits.shape[0])
        if where == "over-time":
            return torch.softmax(logits / temperature, dim=1)[rows, lengths - 1]
        z = {"own": lambda: logits[rows, lengths - 1], "last": lambda: logits[:, -1],
             "first": lambda: logits[:, 0], "all": lambda: logits[:, lengths - 1],
             "past": lambda: logits[rows, lengths.clamp(max=logits.shape[1] - 1)]}[where]()
        z = {"divide": z / temperature, "multiply": z * temperature, "ignore": z}[temp]
        if out == "logits":
            return z
        if out == "log":
            return torch.log_softmax(z, dim=-1)
        if not stable:
            return z.exp() / z.exp().sum(-1, keepdim=True)
        return torch.softmax(z, dim=dim)

    return probs


PROBS_MISTAKES = {
    "at the last position, T − 1": probs_with(where="last"),
    "off by one": probs_with(where="past"),
    "you read the first position": probs_with(where="first"),
    "picks every length for every sequence": probs_with(where="all"),
    "over the batch": probs_with(dim=0),
    "normalises over the positions": probs_with(where="over-time"),
    "the temperature multiplies": probs_with(temp="multiply"),
    "the temperature is ignored": probs_with(temp="ignore"),
    "you returned the logits": probs_with(out="logits"),
    "you returned log-probabilities": probs_with(out="log"),
    "exp overflows": probs_with(stable=False),
}


@pytest.mark.parametrize("fragment", PROBS_MISTAKES)
def test_next_token_probs_mistakes_are_named(fragment):
    expect(check_next_token_probs, PROBS_MISTAKES[fragment], fragment)


def greedy_with(*, feed="all", position=-1, extra=0, keep_prompt=True):
    def greedy(model, ids, max_new_tokens):
        out = ids
        for _ in range(max_new_tokens + extra):
            next_id = model(out if feed == "all" else ids)[:, position].argmax(-1, keepdim=True)
            out = torch.cat([out, next_id], dim=1)
        return out if keep_prompt else out[:, ids.shape[1]:]

    return greedy


GREEDY_MISTAKES = {
    "feeds only the prompt": greedy_with(feed="prompt"),
    "the first position's logits": greedy_with(position=0),
    "only the new tokens": greedy_with(keep_prompt=False),
    "one token too many": greedy_with(extra=1),
    "one token too few": lambda model, ids, n: good_greedy(model, ids, max(n - 1, 0))
    if n else ids[:, :-1],
}


@pytest.mark.parametrize("fragment", GREEDY_MISTAKES)
def test_greedy_mistakes_are_named(fragment):
    expect(check_greedy_generate, GREEDY_MISTAKES[fragment], fragment)


def test_unrecognised_wrong_answers_get_a_generic_hint():
    expect(check_lm_forward, lambda *a, **k: good_lm_forward(*a, **k) * 1.01, "wrong values")
    expect(check_next_token_probs, lambda *a, **k: good_next_token_probs(*a, **k) ** 1.01, "wrong values")


def test_errors_and_unfinished_work_are_reported_readably():
    def unfinished(*args, **kwargs):
        raise NotImplementedError()

    expect(check_lm_forward, unfinished, "not implemented yet")

    def crashes(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
        return embedding[ids] @ head_weight  # (V, D) used untransposed

    expect(check_lm_forward, crashes, "raised RuntimeError")


# --- delegation is refused ---------------------------------------------------------------------------

def delegating_lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    x = F.rms_norm(x, x.shape[-1:], norm_weight, eps)
    return x @ (embedding if tie_embeddings else head_weight).T


def module_lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = embedding[ids]
    for block in blocks:
        x = block(x)
    norm = torch.nn.RMSNorm(x.shape[-1], eps=eps, dtype=x.dtype)
    with torch.no_grad():
        norm.weight.copy_(norm_weight)
    return norm(x) @ (embedding if tie_embeddings else head_weight).T


def course_lib_lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    from course_lib.norms import rms_norm

    x = embedding[ids]
    for block in blocks:
        x = block(x)
    return rms_norm(x, norm_weight, eps) @ (embedding if tie_embeddings else head_weight).T


@pytest.mark.parametrize(
    "checker, student, name",
    [(check_lm_forward, delegating_lm_forward, "torch.nn.functional.rms_norm"),
     (check_lm_forward, module_lm_forward, "torch.nn.RMSNorm"),
     (check_lm_forward, course_lib_lm_forward, "course_lib.norms.rms_norm"),
     (check_next_token_probs,
      lambda logits, lengths, temperature=1.0: reference_next_token_probs(logits, temperature, lengths),
      "course_lib.model.next_token_probs"),
     (check_greedy_generate, lambda model, ids, n: model.model.generate(ids, n, use_cache=False),
      "course_lib.model.DecoderLM.generate")],
)
def test_delegation_is_refused(checker, student, name):
    expect(checker, student, "calls " + name, "scores no points")


def test_a_no_grad_decorated_solution_is_not_mistaken_for_delegation():
    # torch.no_grad wraps every decorated function in the same wrapper code: only generate itself counts
    check_greedy_generate(torch.no_grad()(good_greedy))


def test_grading_errors_are_assertion_errors():
    with pytest.raises(GradingError):
        check_next_token_probs(lambda logits, lengths, temperature=1.0: logits[:, -1])
