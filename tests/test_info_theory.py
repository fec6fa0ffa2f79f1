"""course_lib.info_theory against torch's own implementations, hand-computed values and identities."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib import info_theory as it


def random_dist(*shape, gen, dtype=torch.float64):
    return torch.randn(shape, generator=gen, dtype=dtype).mul(2).softmax(-1)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# --- hand-computed values -----------------------------------------------------------------------

def test_coins_by_hand():
    assert it.entropy([0.5, 0.5]).item() == pytest.approx(1.0)
    loaded = -(0.9 * math.log2(0.9) + 0.1 * math.log2(0.1))
    assert it.entropy([0.9, 0.1]).item() == pytest.approx(loaded)
    assert it.entropy([0.9, 0.1], base=math.e).item() == pytest.approx(loaded * math.log(2))
    assert it.entropy([1.0, 0.0]).item() == 0.0


def test_uniform_maximises_entropy_and_perplexity_counts_choices():
    for k in (2, 3, 10, 50_000):
        uniform = torch.full((k,), 1.0 / k, dtype=torch.float64)
        assert it.entropy(uniform).item() == pytest.approx(math.log2(k))
        assert it.perplexity(uniform).item() == pytest.approx(k)


def test_one_hot_cross_entropy_is_surprisal():
    target = [0.0, 1.0, 0.0]
    assert it.cross_entropy(target, [0.05, 0.90, 0.05]).item() == pytest.approx(-math.log2(0.9))
    assert it.cross_entropy(target, [0.3, 0.4, 0.3]).item() == pytest.approx(-math.log2(0.4))
    assert it.surprisal(0.01).item() == pytest.approx(math.log2(100))
    assert it.perplexity(target, [0.3, 0.4, 0.3]).item() == pytest.approx(2.5)


def test_numpy_and_lists_are_accepted():
    p = np.array([0.7, 0.2, 0.1])
    assert torch.is_tensor(it.entropy(p))
    assert it.kl_divergence(p, [0.5, 0.3, 0.2]).item() == pytest.approx(
        sum(a * math.log2(a / b) for a, b in zip([0.7, 0.2, 0.1], [0.5, 0.3, 0.2]))
    )


# --- against torch --------------------------------------------------------------------------------

def test_entropy_matches_torch_distributions(gen):
    p = random_dist(5, 7, gen=gen)
    p[0, :3] = 0  # zero probabilities are allowed
    p = p / p.sum(-1, keepdim=True)
    expected = torch.distributions.Categorical(probs=p).entropy()
    torch.testing.assert_close(it.entropy(p, base=math.e), expected)
    torch.testing.assert_close(it.entropy(p, base=2), expected / math.log(2))


def test_kl_matches_torch_distributions(gen):
    p, q = random_dist(4, 9, gen=gen), random_dist(4, 9, gen=gen)
    expected = torch.distributions.kl_divergence(
        torch.distributions.Categorical(probs=p), torch.distributions.Categorical(probs=q)
    )
    torch.testing.assert_close(it.kl_divergence(p, q, base=math.e), expected)
    # F.kl_div takes log Q as input and P as target: KL(P‖Q)
    torch.testing.assert_close(it.kl_divergence(p, q, base=math.e).sum(), F.kl_div(q.log(), p, reduction="sum"))


@pytest.mark.parametrize("shape", [(8, 13), (2, 5, 31)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loss_from_logits_matches_F_cross_entropy(shape, dtype, gen):
    logits = (3 * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
    targets = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    v = shape[-1]
    expected = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1))
    torch.testing.assert_close(it.cross_entropy_from_logits(logits, targets), expected)
    torch.testing.assert_close(
        it.cross_entropy_from_logits(logits, targets, reduction="none"),
        F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), reduction="none").reshape(shape[:-1]),
    )
    torch.testing.assert_close(
        it.cross_entropy_from_logits(logits, targets, base=2, reduction="sum"),
        F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), reduction="sum") / math.log(2),
    )


def test_log_softmax_is_stable_and_matches_torch(gen):
    logits = 1000.0 + 500.0 * torch.randn(4, 10, generator=gen)  # naive exp overflows in float32
    assert torch.isinf(logits.exp()).any()
    ours = it.log_softmax(logits)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours, torch.log_softmax(logits, -1))
    torch.testing.assert_close(it.softmax(logits, dim=0), torch.softmax(logits, 0))
    targets = torch.randint(0, 10, (4,), generator=gen)
    torch.testing.assert_close(it.cross_entropy_from_logits(logits, targets), F.cross_entropy(logits, targets))


def test_one_hot_cross_entropy_equals_loss_from_logits(gen):
    logits = torch.randn(6, 11, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, 11, (6,), generator=gen)
    one_hot = F.one_hot(targets, 11).double()
    torch.testing.assert_close(
        it.cross_entropy(one_hot, it.softmax(logits), base=math.e),
        it.cross_entropy_from_logits(logits, targets, reduction="none"),
    )


# --- identities ------------------------------------------------------------------------------------

def test_cross_entropy_is_entropy_plus_kl(gen):
    p, q = random_dist(10, 6, gen=gen), random_dist(10, 6, gen=gen)
    for base in (2, math.e):
        torch.testing.assert_close(
            it.cross_entropy(p, q, base=base), it.entropy(p, base=base) + it.kl_divergence(p, q, base=base)
        )


def test_kl_is_non_negative_zero_on_equality_and_asymmetric(gen):
    p, q = random_dist(200, 5, gen=gen), random_dist(200, 5, gen=gen)
    assert (it.kl_divergence(p, q) >= 0).all()
    assert torch.equal(it.kl_divergence(p, p), torch.zeros(200, dtype=torch.float64))
    assert not torch.allclose(it.kl_divergence(p, q), it.kl_divergence(q, p))
    # Q missing an outcome that P can produce: infinite divergence and cross-entropy
    assert math.isinf(it.kl_divergence([0.5, 0.5], [1.0, 0.0]).item())
    assert math.isinf(it.cross_entropy([0.5, 0.5], [1.0, 0.0]).item())


def test_perplexity_is_the_same_in_every_base(gen):
    p, q = random_dist(3, 8, gen=gen), random_dist(3, 8, gen=gen)
    torch.testing.assert_close(it.perplexity(p, q), 2 ** it.cross_entropy(p, q, base=2))
    torch.testing.assert_close(it.perplexity(p, q), 10 ** it.cross_entropy(p, q, base=10))


def test_mutual_information(gen):
    px, py = random_dist(4, gen=gen), random_dist(5, gen=gen)
    independent = px[:, None] * py[None, :]
    assert it.mutual_information(independent).item() == pytest.approx(0.0, abs=1e-12)
    # X determines Y (Y = X): I(X; Y) = H(Y)
    copy = torch.diag(px)
    assert it.mutual_information(copy).item() == pytest.approx(it.entropy(px).item())
    joint = random_dist(20, gen=gen).reshape(4, 5)
    h = lambda d: it.entropy(d.reshape(-1)).item()  # noqa: E731
    assert it.mutual_information(joint).item() == pytest.approx(h(joint.sum(1)) + h(joint.sum(0)) - h(joint))
    batch = torch.stack([independent, joint])
    torch.testing.assert_close(it.mutual_information(batch), torch.stack([it.mutual_information(m) for m in batch]))


def test_works_on_the_device():
    from course_lib.device import get_device

    device = get_device()
    p = torch.tensor([0.25, 0.75], device=device)
    logits = torch.randn(3, 4, device=device)
    targets = torch.tensor([0, 1, 3], device=device)
    assert it.entropy(p).device == device
    assert it.cross_entropy_from_logits(logits, targets).device == device


# --- clear errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: it.entropy([0.5, 0.6]), ValueError, "p must sum to 1"),
        (lambda: it.entropy([1.5, -0.5]), ValueError, "p must be non-negative"),
        (lambda: it.entropy([0.5, float("nan")]), ValueError, "p contains NaN"),
        (lambda: it.cross_entropy([0.5, 0.5], [0.2, 0.3, 0.5]), ValueError, "p and q must have the same shape"),
        (lambda: it.kl_divergence([0.5, 0.5], [2.0, -1.0]), ValueError, "q must be non-negative"),
        (lambda: it.entropy([0.5, 0.5], base=1), ValueError, "base (1) must be positive"),
        (lambda: it.entropy([0.5, 0.5], base="2"), TypeError, "base must be a number"),
        (lambda: it.entropy(torch.tensor(1.0)), ValueError, "at least one dimension"),
        (lambda: it.entropy([0.5, 0.5], dim=3), ValueError, "dim (3) is out of range"),
        (lambda: it.mutual_information([0.5, 0.5]), ValueError, "joint must have at least 2 dimensions"),
        (lambda: it.cross_entropy_from_logits(torch.zeros(2, 3), torch.tensor([0.0, 1.0])), TypeError, "targets must hold integer"),
        (lambda: it.cross_entropy_from_logits(torch.zeros(2, 3), torch.tensor([0, 1, 2])), ValueError, "targets must have the shape"),
        (lambda: it.cross_entropy_from_logits(torch.zeros(2, 3), torch.tensor([0, 3])), ValueError, "targets must lie in [0, 2]"),
        (lambda: it.cross_entropy_from_logits(torch.zeros(2, 3), torch.tensor([0, 1]), reduction="avg"), ValueError, "reduction must be"),
        (lambda: it.surprisal(1.5), ValueError, "prob must lie in [0, 1]"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_sum_tolerance_follows_dtype():
    almost = torch.tensor([0.5, 0.5 + 1e-7])
    it.entropy(almost)  # float32: within tolerance
    with pytest.raises(ValueError):
        it.entropy(almost.double())  # float64: 1e-7 off is not a distribution
