"""course_lib.sampling and DecoderLM.generate's sampling: temperature, top-k, top-p (ties and edge cases),
the τ → 0 limit, errors naming the argument, cached == uncached sampling, prompts past the window."""

import pytest
import torch

from course_lib.config import ModelConfig
from course_lib.model import DecoderLM
from course_lib.sampling import sample_next, sampling_probs, top_k_mask, top_p_mask

CONFIG = ModelConfig(vocab_size=23, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=16)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = DecoderLM(CONFIG).eval()
    with torch.no_grad():  # sharper than GPT-2 init, so that sampled tokens differ from greedy ones
        m.lm_head.weight.mul_(40)
    return m


def logits_for(rows: int = 4, vocab: int = 11, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 2  # no ties


def test_temperature_one_is_softmax_and_rows_sum_to_one():
    z = logits_for()
    assert torch.allclose(sampling_probs(z), torch.softmax(z, -1))
    assert torch.allclose(sampling_probs(z, 0.5), torch.softmax(2 * z, -1))
    for kw in (dict(top_k=3), dict(top_p=0.6), dict(temperature=2.0, top_k=5, top_p=0.9)):
        assert torch.allclose(sampling_probs(z, **kw).sum(-1), torch.ones(4))


def test_temperature_zero_is_the_limit_greedy():
    z = logits_for()
    greedy = torch.nn.functional.one_hot(z.argmax(-1), 11).float()
    assert torch.equal(sampling_probs(z, 0.0), greedy)
    assert torch.allclose(sampling_probs(z, 1e-3), greedy, atol=1e-6)  # τ → 0 approaches it
    ties = torch.tensor([[1.0, 3.0, 3.0, 0.0]])
    assert sampling_probs(ties, 0.0).tolist() == [[0.0, 1.0, 0.0, 0.0]]  # the first maximum
    assert torch.equal(sample_next(z, 0.0), z.argmax(-1, keepdim=True))


def test_top_k_one_equals_greedy():
    z = logits_for(rows=64, vocab=50, seed=1)
    gen = torch.Generator().manual_seed(0)
    for temperature in (0.5, 1.0, 3.0):
        assert torch.equal(sample_next(z, temperature, top_k=1, generator=gen), z.argmax(-1, keepdim=True))
    ties = torch.tensor([[0.0, 2.0, 2.0]])
    assert sampling_probs(ties, 1.0, top_k=1).tolist() == [[0.0, 1.0, 0.0]]  # ties by id, like argmax


def test_top_k_keeps_exactly_the_k_most_probable():
    z = logits_for()
    probs = sampling_probs(z, top_k=3)
    assert ((probs > 0).sum(-1) == 3).all()
    top3 = z.topk(3, dim=-1).indices
    assert (probs.gather(-1, top3) > 0).all()
    expected = torch.softmax(z, -1) * top_k_mask(torch.softmax(z, -1), 3)
    assert torch.allclose(probs, expected / expected.sum(-1, keepdim=True))
    uniform = torch.zeros(1, 6)
    assert top_k_mask(uniform, 4).tolist() == [[True] * 4 + [False] * 2]  # ties: lower ids first
    assert torch.equal(sampling_probs(z, top_k=11), sampling_probs(z))  # k = V keeps all
    assert torch.equal(sampling_probs(z, top_k=100), sampling_probs(z))  # k > V keeps all


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.1, 0.5, 0.25, 0.15]])
    assert top_p_mask(probs, 0.5).tolist() == [[False, True, False, False]]  # 0.5 reaches 0.5
    assert top_p_mask(probs, 0.50001).tolist() == [[False, True, True, False]]
    assert top_p_mask(probs, 0.75).tolist() == [[False, True, True, False]]  # exactly p: enough
    assert top_p_mask(probs, 0.76).tolist() == [[False, True, True, True]]
    assert top_p_mask(probs, 1e-9).tolist() == [[False, True, False, False]]  # the top token always
    assert top_p_mask(probs, 1.0).all()
    uniform = torch.full((1, 4), 0.25)
    assert top_p_mask(uniform, 0.5).tolist() == [[True, True, False, False]]  # ties: lower ids first
    assert top_p_mask(uniform, 0.6).tolist() == [[True, True, True, False]]


def test_top_p_is_minimal_on_random_distributions():
    z = logits_for(rows=200, vocab=30, seed=2)
    probs = torch.softmax(z, -1)
    for p in (0.1, 0.5, 0.9, 0.99):
        mask = top_p_mask(probs, p)
        kept = (probs * mask).sum(-1)
        assert (kept >= p - 1e-6).all()  # reaches p
        n = mask.sum(-1)
        largest = probs.sort(-1, descending=True).values
        without_last = largest.cumsum(-1).gather(-1, (n - 2).clamp(min=0)[:, None])[:, 0]
        assert ((without_last < p) | (n == 1)).all()  # one token fewer would not
        # the kept tokens are the most probable ones
        assert ((probs * mask).masked_fill(~mask, 2).min(-1).values >= probs.masked_fill(mask, -1).max(-1).values).all()


def test_top_p_renormalises_and_composes_with_top_k():
    z = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]]))
    assert torch.allclose(sampling_probs(z, top_p=0.7), torch.tensor([[4 / 7, 3 / 7, 0, 0]]))
    assert torch.allclose(sampling_probs(z, top_k=3, top_p=0.7), torch.tensor([[4 / 7, 3 / 7, 0, 0]]))
    # top-p acts on the top-k distribution: (0.4, 0.3)/0.7 → 0.571 alone reaches 0.5
    assert torch.allclose(sampling_probs(z, top_k=2, top_p=0.5), torch.tensor([[1.0, 0, 0, 0]]))


def test_sampling_follows_the_distribution_and_the_generator():
    z = torch.log(torch.tensor([[0.6, 0.3, 0.1]])).expand(20_000, 3)
    draws = sample_next(z, 1.0, generator=torch.Generator().manual_seed(0))[:, 0]
    freq = torch.bincount(draws, minlength=3).float() / 20_000
    assert torch.allclose(freq, torch.tensor([0.6, 0.3, 0.1]), atol=0.015)
    again = sample_next(z, 1.0, generator=torch.Generator().manual_seed(0))[:, 0]
    assert torch.equal(draws, again)
    nucleus = sample_next(z, 1.0, top_p=0.8, generator=torch.Generator().manual_seed(1))[:, 0]
    assert set(nucleus.tolist()) == {0, 1}  # 0.6 + 0.3 reaches 0.8: token 2 never drawn


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(temperature=-0.5), ValueError, r"temperature \(-0.5\)"),
    (dict(temperature=float("nan")), ValueError, "temperature"),
    (dict(temperature="hot"), TypeError, "temperature must be a number"),
    (dict(top_k=0), ValueError, r"top_k \(0\) must be at least 1"),
    (dict(top_k=2.5), TypeError, "top_k must be an int"),
    (dict(top_p=0.0), ValueError, r"top_p \(0.0\) must lie in \(0, 1\]"),
    (dict(top_p=1.5), ValueError, r"top_p \(1.5\)"),
    (dict(top_p=True), TypeError, "top_p must be a number"),
])
def test_bad_values_raise_naming_the_argument(model, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        sampling_probs(logits_for(), **kwargs)
    with pytest.raises(exc, match=message):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, **kwargs)


@pytest.mark.parametrize("cache", ["preallocated", "concat"])
@pytest.mark.parametrize("kwargs", [dict(temperature=1.0), dict(temperature=0.8, top_k=5),
                                    dict(temperature=1.2, top_p=0.9)])
def test_cached_sampling_equals_uncached(model, cache, kwargs):
    prompt = torch.randint(0, 23, (3, 4), generator=torch.Generator().manual_seed(5))
    uncached = model.generate(prompt, 10, use_cache=False, generator=torch.Generator().manual_seed(9), **kwargs)
    cached = model.generate(prompt, 10, cache=cache, generator=torch.Generator().manual_seed(9), **kwargs)
    assert torch.equal(cached, uncached)
    assert not torch.equal(uncached, model.generate(prompt, 10))  # it really sampled, not greedy
    other = model.generate(prompt, 10, cache=cache, generator=torch.Generator().manual_seed(10), **kwargs)
    assert not torch.equal(other, cached)  # the generator decides


def test_generate_greedy_is_top_k_one(model):
    prompt = torch.randint(0, 23, (2, 3), generator=torch.Generator().manual_seed(6))
    sampled = model.generate(prompt, 8, temperature=1.5, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, model.generate(prompt, 8))


@pytest.mark.parametrize("cache", ["preallocated", "concat"])
def test_generation_past_the_window_crops_to_the_last_max_seq_len_tokens(model, cache):
    """max_seq_len = 16: a 10-token prompt grows to 40 tokens; every step reads at most the last 16."""
    prompt = torch.randint(0, 23, (2, 10), generator=torch.Generator().manual_seed(7))
    out = model.generate(prompt, 30, cache=cache)
    assert out.shape == (2, 40) and torch.equal(out[:, :10], prompt)
    assert torch.equal(out, model.generate(prompt, 30, use_cache=False))  # the cache refills exactly
    # the explicit definition: each token is the argmax after the last 16 tokens, at positions 0 … 15
    with torch.no_grad():
        for t in range(10, 40):
            window = out[:, max(0, t - 16):t]
            assert torch.equal(model(window)[:, -1].argmax(-1), out[:, t])
    sampled = dict(temperature=1.0, top_p=0.95)
    assert torch.equal(model.generate(prompt, 30, cache=cache, generator=torch.Generator().manual_seed(3), **sampled),
                       model.generate(prompt, 30, use_cache=False, generator=torch.Generator().manual_seed(3), **sampled))


def test_prompt_longer_than_the_window(model):
    prompt = torch.randint(0, 23, (1, 25), generator=torch.Generator().manual_seed(8))
    out = model.generate(prompt, 5)
    assert torch.equal(out[:, :25], prompt)
    assert torch.equal(out, model.generate(prompt, 5, use_cache=False))
    assert torch.equal(out[:, 25:], model.generate(prompt[:, -16:], 5)[:, 16:])  # only the last 16 count
