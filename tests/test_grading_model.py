"""The chapter 9 checkers beyond the catalogue (tests/mistakes/ex09.py): other correct formulations
pass, delegation and autograd are refused, and the find-the-bug task names the given version."""

import pytest
import torch

from course_lib import sampling
from course_lib.grading import (GradingError, check_lm_forward, check_next_token_probs,
                                check_sample_generate, check_tied_embedding_grad)
from grading_helpers import no_values_leak


def forward_with_rsqrt(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    x = torch.nn.functional.embedding(ids, embedding)  # a lookup, not a norm: allowed
    for block in blocks:
        x = block(x)
    x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * norm_weight
    return torch.einsum("btd,vd->btv", x, embedding if tie_embeddings else head_weight)


def probs_by_flipping(logits, attention_mask, temperature=1.0):  # the last 1, found from the end
    T = logits.shape[1]
    last = T - 1 - attention_mask.long().flip(1).argmax(dim=1)
    z = logits[torch.arange(logits.shape[0]), last] / temperature
    z = z - z.amax(-1, keepdim=True)
    return z.exp() / z.exp().sum(-1, keepdim=True)


@torch.no_grad()
def sample_with_sorted_top_k(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = ids
    for _ in range(max_new_tokens):
        p = torch.softmax(model(out)[:, -1] / temperature, dim=-1)  # top-k after the softmax:
        if top_k is not None:  # multinomial renormalises, so the draws are the same
            order = p.argsort(dim=-1, descending=True)
            p = p.scatter(-1, order[:, top_k:], 0.0)
        out = torch.cat([out, torch.multinomial(p, 1, generator=generator)], dim=1)
    return out


def tied_grad_by_positions(ids, targets, embedding, w):  # one position at a time
    V, D = embedding.shape
    n = ids.numel()
    grad = torch.zeros_like(embedding)
    for t, y in zip(ids.reshape(-1).tolist(), targets.reshape(-1).tolist()):
        x = embedding[t]
        h = w @ x
        g = torch.softmax(embedding @ h, dim=0)
        g[y] -= 1
        grad += torch.outer(g, h) / n  # the head
        grad[t] += (w.T @ (embedding.T @ g)) / n  # the embedding
    return grad


def test_other_correct_formulations_pass():
    check_lm_forward(forward_with_rsqrt)
    check_next_token_probs(probs_by_flipping)
    check_sample_generate(sample_with_sorted_top_k)
    check_tied_embedding_grad(tied_grad_by_positions)


def test_the_given_buggy_read_is_named_as_such():
    def buggy(logits, attention_mask, temperature=1.0):
        lengths = attention_mask.sum(dim=1)
        return torch.softmax(logits[torch.arange(logits.shape[0]), lengths - 1] / temperature, dim=-1)

    with pytest.raises(GradingError, match="still what the given version does") as info:
        check_next_token_probs(buggy)
    no_values_leak(str(info.value))


def test_delegation_is_refused():
    def via_sample_next(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        out = ids
        for _ in range(max_new_tokens):
            out = torch.cat([out, sampling.sample_next(model(out)[:, -1], temperature, top_k, None,
                                                       generator)], dim=1)
        return out

    with pytest.raises(GradingError, match="course_lib.sampling.sample_next"):
        check_sample_generate(via_sample_next)

    def via_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        return model.model.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k,
                                    generator=generator)

    with pytest.raises(GradingError, match="DecoderLM.generate"):
        check_sample_generate(via_generate)

    def with_torch_rms_norm(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
        x = embedding[ids]
        for block in blocks:
            x = block(x)
        x = torch.nn.functional.rms_norm(x, (x.shape[-1],), norm_weight, eps)
        return x @ (embedding if tie_embeddings else head_weight).T

    with pytest.raises(GradingError, match="rms_norm"):
        check_lm_forward(with_torch_rms_norm)


def test_automatic_differentiation_is_refused_by_any_road():
    def by_func_grad(ids, targets, embedding, w):
        def loss(E):
            logits = (E[ids] @ w.T) @ E.T
            return torch.nn.functional.cross_entropy(logits.reshape(-1, E.shape[0]), targets.reshape(-1))

        return torch.func.grad(loss)(embedding)

    with pytest.raises(GradingError, match="torch.func"):
        check_tied_embedding_grad(by_func_grad)


def test_calling_the_given_blocks_and_model_is_not_delegation():
    # the blocks and the model run course_lib code (RMSNorm, attention) unwatched: only the
    # student's own lines count
    check_lm_forward(forward_with_rsqrt)
    check_sample_generate(sample_with_sorted_top_k)  # decorated with torch.no_grad


def test_a_generator_is_required_to_reproduce_the_draws_and_changing_it_is_allowed():
    def fresh_generator(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        return sample_with_sorted_top_k(model, ids, max_new_tokens, temperature, top_k,
                                        torch.Generator().manual_seed(0))

    with pytest.raises(GradingError) as info:
        check_sample_generate(fresh_generator)
    no_values_leak(str(info.value))
    assert "changed its input" not in str(info.value)


def test_wrong_kinds_are_reported():
    with pytest.raises(GradingError, match="int64"):
        check_sample_generate(lambda model, ids, n, temperature=1.0, top_k=None, generator=None:
                              sample_with_sorted_top_k(model, ids, n, temperature, top_k, generator).float())
    with pytest.raises(GradingError, match="not implemented yet"):
        def todo(*args, **kwargs):
            raise NotImplementedError()

        check_tied_embedding_grad(todo)
    with pytest.raises(GradingError, match="shape of the table"):
        check_tied_embedding_grad(lambda ids, targets, embedding, w:
                                  tied_grad_by_positions(ids, targets, embedding, w).T.contiguous())
