"""course_lib.training.muon: the Newton–Schulz iteration against the SVD (its singular values follow
the scalar polynomial, land in the band its coefficients promise, keep the singular vectors, and stay
near the polar factor U Vᵀ), Muon's update (shape, scale, dtype, one step by its formula), the
routing of a DecoderLM's parameters between Muon and AdamW, training, exact resumption from saved
state, and clear errors."""

import io
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.config import ModelConfig
from course_lib.training import build_model, train_step
from course_lib.training.muon import (NS_COEFFICIENTS, CombinedOptimizer, Muon, make_muon_optimizer,
                                      muon_param_groups, muon_update, newton_schulz,
                                      newton_schulz_band)

A, B, C = NS_COEFFICIENTS
LO, HI = newton_schulz_band()
MARGIN = 1e-3  # float32 rounding: the singular values follow the polynomial to ~1e-6 (asserted below)
# the smallest σ/‖G‖_F that k steps bring into the band (the docstring of newton_schulz)
THRESHOLD = {5: 1.5e-3, 6: 4.4e-4, 7: 1.3e-4}
TINY = ModelConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                   max_seq_len=32)


def p_k(x: torch.Tensor, k: int) -> torch.Tensor:
    """The scalar map σ ↦ aσ + bσ³ + cσ⁵, k times."""
    for _ in range(k):
        x = A * x + B * x ** 3 + C * x ** 5
    return x


def gaussian(m: int, n: int, seed: int) -> torch.Tensor:
    return torch.randn(m, n, generator=torch.Generator().manual_seed(seed))


def ill_conditioned(m: int, n: int, cond: float, seed: int) -> torch.Tensor:
    """U diag(s) Vᵀ with s log-spaced from 1 down to 1/cond: condition number ``cond``."""
    g = torch.Generator().manual_seed(seed)
    r = min(m, n)
    U, _ = torch.linalg.qr(torch.randn(m, r, generator=g, dtype=torch.float64))  # (m, r)
    V, _ = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64))  # (n, r)
    s = torch.logspace(0, -math.log10(cond), r, dtype=torch.float64)  # (r,)
    return ((U * s) @ V.T).float()  # (m, n)


MATRICES = {
    "square": (gaussian(64, 64, 0), 5),
    "tall": (gaussian(128, 32, 1), 5),
    "wide": (gaussian(32, 128, 2), 5),
    "cond 1e3, 5 steps": (ill_conditioned(64, 48, 1e3, 3), 5),
    "cond 1e3, 6 steps": (ill_conditioned(64, 48, 1e3, 3), 6),
    "cond 1e3, 7 steps": (ill_conditioned(64, 48, 1e3, 3), 7),
}


def in_svd_basis(G: torch.Tensor, steps: int):
    """(σ/‖G‖_F, Uᵀ NS(G) V) in float64, from G = U Σ Vᵀ."""
    U, S, Vh = torch.linalg.svd(G.double(), full_matrices=False)  # (m, r), (r,), (r, n)
    O = newton_schulz(G, steps=steps).double()  # (m, n)
    return S / torch.linalg.matrix_norm(G.double()), U.T @ O @ Vh.T  # (r,), (r, r)


# --- the iteration ---------------------------------------------------------------------------------

def test_band_of_the_coefficients():
    assert (LO, HI) == pytest.approx((0.6818, 1.2024), abs=1e-4)
    x = torch.linspace(LO, HI, 10_001, dtype=torch.float64)
    assert p_k(x, 1).min() >= LO - 1e-12 and p_k(x, 1).max() <= HI + 1e-12  # p maps it into itself
    x = torch.logspace(-8, 0, 100_001, dtype=torch.float64)  # every normalised σ ∈ (0, 1]
    assert p_k(x, 1).max() == pytest.approx(HI, abs=1e-6)  # the first step may reach HI, not beyond
    for k, x_k in THRESHOLD.items():  # the thresholds the docstring states
        assert p_k(x[x >= x_k], k).min() >= LO - 2e-3  # at or above x_k: in the band
        assert p_k(torch.tensor(x_k / 1.2, dtype=torch.float64), k) < LO  # well below: not yet
    with pytest.raises(ValueError, match="no band"):
        newton_schulz_band((1.5, -0.5, 0.0))  # the cubic iteration converges to 1: no band


@pytest.mark.parametrize("name", MATRICES)
def test_singular_values_follow_the_polynomial_and_keep_the_singular_vectors(name):
    G, steps = MATRICES[name]
    ratio, M = in_svd_basis(G, steps)
    s = M.diagonal()  # NS(G) = U diag(s') Vᵀ: the diagonal is s'
    assert torch.allclose(s, p_k(ratio, steps), atol=1e-4)
    assert (M - torch.diag(s)).abs().max() < 1e-4  # same singular vectors: no off-diagonal


@pytest.mark.parametrize("name", MATRICES)
def test_singular_values_land_in_the_band(name):
    G, steps = MATRICES[name]
    ratio, M = in_svd_basis(G, steps)
    s = M.diagonal()
    reached = ratio >= THRESHOLD[steps]
    assert s.max() <= HI + MARGIN  # never beyond the band
    assert s[reached].min() >= LO - MARGIN  # every σ above the threshold is in it
    assert (s[~reached] < LO).all()  # those below it are not (yet): the promise is exact
    if name in ("tall", "wide", "cond 1e3, 6 steps", "cond 1e3, 7 steps"):
        assert reached.all()
    if name in ("square", "cond 1e3, 5 steps"):
        # a square Gaussian matrix's smallest σ/‖G‖_F is ~n^(-3/2); 1/cond / ‖s‖ is 5·10⁻⁴: below x₅
        assert not reached.all()


@pytest.mark.parametrize("name", ["tall", "wide", "cond 1e3, 6 steps", "cond 1e3, 7 steps"])
def test_close_to_the_polar_factor(name):
    G, steps = MATRICES[name]
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    polar = U @ Vh  # (m, n): U Vᵀ
    O = newton_schulz(G, steps=steps).double()
    distance = torch.linalg.matrix_norm(O - polar) / torch.linalg.matrix_norm(polar)
    # ‖U (diag(s') − I) Vᵀ‖_F / ‖U Vᵀ‖_F = rms(s' − 1) ≤ max |s' − 1| over the band
    assert distance <= max(1 - LO, HI - 1) + MARGIN
    assert max(1 - LO, HI - 1) == pytest.approx(0.32, abs=0.005)  # the docstring's 0.32


def test_more_steps_of_the_cubic_iteration_converge_slower():
    G = ill_conditioned(64, 48, 1e3, 3)
    quintic = torch.linalg.svdvals(newton_schulz(G, steps=6))
    cubic = torch.linalg.svdvals(newton_schulz(G, steps=6, coefficients=(1.5, -0.5, 0.0)))
    assert quintic.min() >= LO - MARGIN
    assert cubic.min() < 0.1 * quintic.min()  # 1.5× per step instead of 3.44×


def test_transpose_zero_and_dtypes():
    G = gaussian(48, 24, 4)
    assert torch.allclose(newton_schulz(G.T), newton_schulz(G).T, atol=1e-5)  # NS(Gᵀ) = NS(G)ᵀ
    assert torch.equal(newton_schulz(torch.zeros(8, 4)), torch.zeros(8, 4))  # ε: no NaN
    assert newton_schulz(G).dtype == torch.float32
    half = G.bfloat16()
    out = newton_schulz(half)  # computed in float32, returned in bfloat16
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, newton_schulz(half.float()).bfloat16())
    exact = newton_schulz(G.double(), dtype=torch.float64)
    assert exact.dtype == torch.float64
    assert (newton_schulz(G).double() - exact).abs().max() < 1e-5
    with pytest.raises(ValueError, match=r"2-D matrix, got shape \(2, 3, 4\)"):
        newton_schulz(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="steps"):
        newton_schulz(G, steps=-1)


# --- the update ------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(64, 64), (128, 32), (32, 128)])
def test_update_shape_scale_and_dtype(shape):
    d = gaussian(*shape, 5)
    rows, cols = shape
    s = torch.linalg.svdvals(newton_schulz(d))  # s' (min(m, n) values, in the band)
    update = muon_update(d)  # "adamw_rms": 0.2·√max(rows, cols) · NS(d)
    assert update.shape == d.shape and update.dtype == d.dtype
    rms = update.pow(2).mean().sqrt().item()
    assert rms == pytest.approx(0.2 * s.pow(2).mean().sqrt().item(), rel=1e-4)  # 0.2 × quadratic mean of s'
    assert 0.2 * (LO - MARGIN) <= rms <= 0.2 * (HI + MARGIN)
    spectral = muon_update(d, scale="spectral")  # √max(1, fan_out/fan_in) · NS(d)
    assert torch.allclose(spectral, newton_schulz(d) * math.sqrt(max(1, rows / cols)))
    assert spectral.pow(2).mean().sqrt().item() == pytest.approx(
        s.pow(2).mean().sqrt().item() / math.sqrt(cols), rel=1e-4)  # RMS 1/√fan_in × …
    assert muon_update(d.bfloat16()).dtype == torch.bfloat16


def test_update_with_row_splits_orthogonalises_each_block():
    d = gaussian(64, 32, 6)  # a fused (q, k, v) of 32 + 16 + 16 rows
    update = muon_update(d, row_splits=(32, 16, 16))
    for block, rows in zip(update.split([32, 16, 16]), d.split([32, 16, 16])):
        assert torch.allclose(block, 0.2 * math.sqrt(32) * newton_schulz(rows))
        s = torch.linalg.svdvals(block / (0.2 * math.sqrt(32)))
        assert s.min() >= LO - MARGIN and s.max() <= HI + MARGIN


def test_one_step_follows_the_formula():
    W0, g = gaussian(24, 16, 7), gaussian(24, 16, 8)
    lr, beta, wd = 0.01, 0.95, 0.1
    for nesterov in (True, False):
        W = torch.nn.Parameter(W0.clone())
        opt = Muon([W], lr=lr, momentum=beta, nesterov=nesterov, weight_decay=wd)
        for _ in range(2):
            W.grad = g.clone()
            opt.step()
        m1 = (1 - beta) * g  # m starts at 0
        m2 = beta * m1 + (1 - beta) * g
        W1 = W0 * (1 - lr * wd) - lr * muon_update(beta * m1 + (1 - beta) * g if nesterov else m1)
        W2 = W1 * (1 - lr * wd) - lr * muon_update(beta * m2 + (1 - beta) * g if nesterov else m2)
        assert torch.allclose(W.detach(), W2, atol=1e-6)
        assert torch.allclose(opt.state[W]["momentum_buffer"], m2)


def test_refuses_what_is_not_a_matrix_and_bad_arguments():
    with pytest.raises(ValueError, match=r"2-D weight matrices only.*shape \(8,\)"):
        Muon([torch.nn.Parameter(torch.ones(8))], lr=0.01)
    with pytest.raises(ValueError, match=r"shape \(2, 3, 4\)"):
        Muon([torch.nn.Parameter(torch.ones(2, 3, 4))], lr=0.01)
    W = [torch.nn.Parameter(torch.ones(4, 4))]
    bad = [(dict(lr=-0.1), "lr"), (dict(momentum=1.0), "momentum"), (dict(momentum=-0.1), "momentum"),
           (dict(weight_decay=-1.0), "weight_decay"), (dict(ns_steps=0), "ns_steps"),
           (dict(scale="adam"), "scale"), (dict(row_splits=(2, 1)), "row_splits")]
    for kwargs, name in bad:
        with pytest.raises(ValueError, match=name):
            Muon(W, **{"lr": 0.01, **kwargs})
    with pytest.raises(ValueError, match="momentum"):  # a group's own value is checked too
        Muon([{"params": W, "momentum": 2.0}], lr=0.01)
    model = build_model(TINY)
    with pytest.raises(ValueError, match="lr_muon"):
        make_muon_optimizer(model, lr_muon=-1.0, lr_adamw=1e-3)
    with pytest.raises(ValueError, match="lr_adamw"):
        make_muon_optimizer(model, lr_muon=1e-3, lr_adamw=-1.0)
    with pytest.raises(ValueError, match="momentum"):
        make_muon_optimizer(model, 1e-3, 1e-3, momentum=1.5)
    with pytest.raises(ValueError, match="model.blocks"):
        muon_param_groups(torch.nn.Linear(4, 4), 0.1)


# --- a model ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", [dict(), dict(tie_embeddings=True),
                                     dict(norm="layer", ffn="gelu", positional="learned", bias=True)])
def test_routing_matrices_to_muon_the_rest_to_adamw(variant):
    model = build_model(TINY.replace(**variant))
    opt = make_muon_optimizer(model, 1e-3, 1e-3, weight_decay=0.1)
    names = {id(p): n for n, p in model.named_parameters()}  # a tied table: one name
    muon = [names[id(p)] for g in opt.optimizers["muon"].param_groups for p in g["params"]]
    adamw = [names[id(p)] for g in opt.optimizers["adamw"].param_groups for p in g["params"]]
    linear = ("attn.w_qkv.weight", "attn.w_o.weight", "ffn.w_up.weight", "ffn.w_down.weight")
    linear += () if variant.get("ffn") == "gelu" else ("ffn.w_gate.weight",)
    assert sorted(muon) == sorted(f"blocks.{i}.{n}" for i in range(TINY.n_layers) for n in linear)
    assert sorted(muon + adamw) == sorted(names.values())  # every parameter once
    assert "embed.weight" in adamw and all(not n.startswith("blocks.") or n.endswith(
        ("norm.weight", "norm.bias", ".bias")) for n in adamw)
    assert ("lm_head.weight" in adamw) == (not variant.get("tie_embeddings", False))
    if variant.get("positional") == "learned":
        assert "pos_embed.weight" in adamw
    qkv = [g for g in opt.optimizers["muon"].param_groups if g["row_splits"] is not None]
    assert len(qkv) == 1 and len(qkv[0]["params"]) == TINY.n_layers
    assert qkv[0]["row_splits"] == (32, 16, 16)  # H·D_h, H_kv·D_h, H_kv·D_h
    decayed = {names[id(p)] for g in opt.optimizers["adamw"].param_groups if g["weight_decay"] > 0
               for p in g["params"]}
    assert decayed == {n for n in adamw if dict(model.named_parameters())[n].dim() == 2}
    unsplit = make_muon_optimizer(model, 1e-3, 1e-3, split_qkv=False)
    assert all(g["row_splits"] is None for g in unsplit.optimizers["muon"].param_groups)


def batches(n: int, seed: int = 0):
    """Windows of a periodic sequence (period 7) that a model can learn in a few steps."""
    g = torch.Generator().manual_seed(seed)
    sequence = torch.arange(400) % 7 + torch.arange(400) // 50 % 2 * 7  # (400,), tokens < 14
    out = []
    for _ in range(n):
        start = torch.randint(0, 400 - 17, (8,), generator=g)
        window = torch.stack([sequence[s:s + 17] for s in start.tolist()])  # (B, T + 1)
        out.append((window[:, :-1], window[:, 1:]))
    return out


def test_a_few_steps_reduce_the_loss():
    model = build_model(TINY, seed=1)
    opt = make_muon_optimizer(model, lr_muon=0.02, lr_adamw=0.02, weight_decay=0.0)
    data = batches(20)
    x, y = data[0]
    with torch.no_grad():
        before = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    for xb, yb in data:
        train_step(model, opt, xb, yb, lr=0.02)  # the course's step sets group["lr"] on all groups
    with torch.no_grad():
        after = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    assert before > math.log(10) and after < 0.5 * before


def test_state_round_trip_resumes_bit_for_bit():
    config = TINY.replace(tie_embeddings=True)
    data = batches(8, seed=2)
    k = 4

    def fresh():
        model = build_model(config, seed=3)
        return model, make_muon_optimizer(model, lr_muon=0.01, lr_adamw=0.005, weight_decay=0.1)

    model, opt = fresh()  # k + m steps without a break
    for x, y in data:
        train_step(model, opt, x, y, lr=0.01)
    model_a, opt_a = fresh()  # k steps, saved, loaded into fresh objects, m more
    for x, y in data[:k]:
        train_step(model_a, opt_a, x, y, lr=0.01)
    buffer = io.BytesIO()
    torch.save({"model": model_a.state_dict(), "optimizer": opt_a.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    model_b, opt_b = build_model(config, seed=99), None
    model_b.load_state_dict(saved["model"])
    opt_b = make_muon_optimizer(model_b, lr_muon=0.01, lr_adamw=0.005, weight_decay=0.1)
    opt_b.load_state_dict(saved["optimizer"])
    assert len(opt_b.optimizers["muon"].state) == len(opt_a.optimizers["muon"].state) > 0
    for x, y in data[k:]:
        train_step(model_b, opt_b, x, y, lr=0.01)
    for (name, p), q in zip(model.named_parameters(), model_b.parameters()):
        assert torch.equal(p, q), name  # equal to the bit
    with pytest.raises(ValueError, match="keys"):
        opt_b.load_state_dict({"muon": saved["optimizer"]["muon"]})


def test_combined_optimizer_refuses_shared_parameters():
    W = torch.nn.Parameter(torch.ones(4, 4))
    with pytest.raises(ValueError, match="two optimisers"):
        CombinedOptimizer(muon=Muon([W], lr=0.01), adamw=torch.optim.AdamW([W]))
    with pytest.raises(TypeError, match="adamw"):
        CombinedOptimizer(adamw="AdamW")


def test_step_batches_matrices_by_shape_and_matches_one_matrix_at_a_time():
    """Muon.step stacks the matrices of one shape (whole, or blocks of a fused q, k, v) into one
    batched iteration; each update must still be muon_update of that matrix alone."""
    torch.manual_seed(11)
    shapes = [(24, 16), (24, 16), (16, 24), (40, 16)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    reference = [p.detach().clone() for p in params]
    groups = [{"params": params[:3]}, {"params": params[3:], "row_splits": (24, 8, 8)}]
    opt = Muon(groups, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)
    momenta = [torch.zeros(s) for s in shapes]
    for _ in range(3):
        grads = [torch.randn(s) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(grads):
            momenta[i].lerp_(g, 1 - 0.9)
            d = g.lerp(momenta[i], 0.9)
            splits = (24, 8, 8) if i == 3 else None
            reference[i] = reference[i] * (1 - 0.05 * 0.1) - 0.05 * muon_update(d, row_splits=splits)
    for p, expected in zip(params, reference):
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
