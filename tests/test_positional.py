"""course_lib.positional against the Vaswani formula, Hugging Face's Llama RoPE and Bloom/MPT ALiBi,
Meta's complex-number RoPE, and the mathematical properties the chapter relies on."""

import math

import pytest
import torch

from course_lib import checkpointing as ck
from course_lib import positional as pe


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# --- sinusoidal -----------------------------------------------------------------------------------

def vaswani_by_loops(n_positions, d_model, base=10000.0):
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(pos / base^(2i/d)), term by term."""
    table = [[0.0] * d_model for _ in range(n_positions)]
    for pos in range(n_positions):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            table[pos][2 * i] = math.sin(angle)
            table[pos][2 * i + 1] = math.cos(angle)
    return torch.tensor(table, dtype=torch.float64)


@pytest.mark.parametrize("n_positions, d_model, base", [(50, 16, 10000.0), (7, 2, 10000.0), (33, 10, 500.0)])
def test_sinusoidal_is_the_vaswani_formula(n_positions, d_model, base):
    ours = pe.sinusoidal_encoding(n_positions, d_model, base, dtype=torch.float64)
    torch.testing.assert_close(ours, vaswani_by_loops(n_positions, d_model, base), rtol=0, atol=1e-12)


def test_sinusoidal_accepts_positions_and_batches():
    full = pe.sinusoidal_encoding(40, 8, dtype=torch.float64)
    positions = torch.tensor([3, 17, 39])
    torch.testing.assert_close(pe.sinusoidal_encoding(positions, 8, dtype=torch.float64), full[positions])
    batch = torch.stack([torch.arange(5), torch.arange(10, 15)])  # (B, T)
    out = pe.sinusoidal_encoding(batch, 8, dtype=torch.float64)
    assert out.shape == (2, 5, 8)
    torch.testing.assert_close(out[1], full[10:15])
    assert pe.sinusoidal_encoding(4, 6).dtype == torch.get_default_dtype()


@pytest.mark.parametrize("k", [1, 5, -3, 2.5, 1000])
def test_shift_is_a_linear_map(k):
    positions = torch.arange(0, 200, dtype=torch.float64)
    table = pe.sinusoidal_encoding(positions, 32, dtype=torch.float64)
    shifted = pe.sinusoidal_encoding(positions + k, 32, dtype=torch.float64)
    m_k = pe.sinusoidal_shift_matrix(k, 32)
    torch.testing.assert_close(table @ m_k, shifted, rtol=0, atol=1e-10)
    torch.testing.assert_close(m_k @ m_k.T, torch.eye(32, dtype=torch.float64))  # a rotation
    torch.testing.assert_close(m_k @ pe.sinusoidal_shift_matrix(7, 32), pe.sinusoidal_shift_matrix(k + 7, 32))


def test_sinusoidal_dot_products_depend_on_the_offset_only():
    table = pe.sinusoidal_encoding(300, 64, dtype=torch.float64)
    gram = table @ table.T  # (300, 300)
    for offset in (0, 1, 10, 100):
        diagonal = torch.diagonal(gram, offset)
        assert (diagonal - diagonal[0]).abs().max() < 1e-10
    assert gram[0, 0].item() == pytest.approx(32.0)  # ‖PE(p)‖² = D/2


# --- learned absolute positions ------------------------------------------------------------------

def test_learned_positions_are_rows_and_stop_at_max_seq_len():
    table = pe.LearnedPositionalEmbedding(16, 8)
    torch.testing.assert_close(table(5), table.weight[:5])
    batch = torch.tensor([[0, 1, 2], [13, 14, 15]])
    assert table(batch).shape == (2, 3, 8)
    with pytest.raises(ValueError, match=r"no row for position 16 \(max_seq_len = 16\)"):
        table(17)
    with pytest.raises(ValueError, match="no row for position -1"):
        table(torch.tensor([-1, 0]))
    with pytest.raises(TypeError, match="positions must be integers"):
        table(torch.tensor([0.0, 1.0]))


def test_unseen_positions_get_no_gradient():
    table = pe.LearnedPositionalEmbedding(32, 4)
    table(10).pow(2).sum().backward()
    assert table.weight.grad[:10].abs().sum() > 0
    assert torch.equal(table.weight.grad[10:], torch.zeros(22, 4))


# --- RoPE against Hugging Face --------------------------------------------------------------------

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
    rotate_half,
)


def hf_rotary(head_dim, theta, n_heads=2):
    config = LlamaConfig(hidden_size=head_dim * n_heads, num_attention_heads=n_heads, num_key_value_heads=n_heads,
                         head_dim=head_dim, max_position_embeddings=4096, rope_theta=theta)
    config.rope_parameters["rope_theta"] = theta
    return LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("head_dim, theta", [(16, 10000.0), (128, 500000.0), (2, 10000.0), (64, 1e6)])
def test_tables_match_llama_rotary_embedding_bit_for_bit(head_dim, theta, gen):
    rotary = hf_rotary(head_dim, theta)
    assert rotary.config.rope_parameters["rope_theta"] == theta
    positions = torch.stack([torch.arange(12), torch.arange(3000, 3012)])  # (B, T), one sequence far out
    x = torch.randn(2, 12, head_dim, generator=gen)
    hf_cos, hf_sin = rotary(x, positions)  # (B, T, D_h), half layout [θ_0 … θ_{D/2−1}, θ_0 … θ_{D/2−1}]
    cos, sin = pe.rope_cos_sin(positions, head_dim, theta)  # (B, 1, T, D_h/2)
    assert cos.shape == (2, 1, 12, head_dim // 2)
    assert torch.equal(torch.cat((cos, cos), -1)[:, 0], hf_cos)
    assert torch.equal(torch.cat((sin, sin), -1)[:, 0], hf_sin)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_apply_rope_half_matches_apply_rotary_pos_emb(dtype, gen):
    B, H, T, D_h = 2, 3, 9, 32
    rotary = hf_rotary(D_h, 10000.0)
    q = torch.randn(B, H, T, D_h, generator=gen).to(dtype)
    k = torch.randn(B, H, T, D_h, generator=gen).to(dtype)
    positions = torch.arange(T)[None] + torch.tensor([[0], [100]])  # (B, T): second sequence at an offset
    hf_cos, hf_sin = rotary(q, positions)  # in q's dtype
    hf_q, hf_k = apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    cos, sin = pe.rope_cos_sin(positions, D_h, dtype=dtype)
    assert torch.equal(pe.apply_rope(q, cos, sin, "half"), hf_q)  # the same operations, in the same dtype
    assert torch.equal(pe.apply_rope(k, cos, sin, "half"), hf_k)
    # float32 tables with low-precision activations: at least as close to the float64 truth as HF
    cos32, sin32 = pe.rope_cos_sin(positions, D_h)
    truth = pe.apply_rope(q.double(), cos32.double(), sin32.double())
    ours = pe.apply_rope(q, cos32, sin32)
    assert ours.dtype == dtype
    assert (ours.double() - truth).abs().max() <= (hf_q.double() - truth).abs().max() + 1e-12


def test_rotate_half_form_is_our_formula(gen):
    x = torch.randn(4, 10, 16, generator=gen, dtype=torch.float64)
    cos, sin = pe.rope_cos_sin(10, 16, dtype=torch.float64)
    full_cos, full_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    torch.testing.assert_close(pe.apply_rope(x, cos, sin), x * full_cos + rotate_half(x) * full_sin, rtol=0, atol=0)


# --- RoPE's backward pass, written by hand -------------------------------------------------------

def rope_by_autograd(x, cos, sin, pairing):
    """The rotation as plain differentiable operations, for autograd to differentiate."""
    half = x.shape[-1] // 2
    if pairing == "half":
        full_cos, full_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        return x * full_cos + rotate_half(x) * full_sin  # Hugging Face's form
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
@pytest.mark.parametrize("batched_positions", [False, True])
def test_backward_equals_autograds_bit_for_bit(pairing, batched_positions, gen):
    B, T, H, D_h = 3, 7, 2, 8
    positions = torch.arange(T)[None] + torch.tensor([[0], [5], [40]]) if batched_positions else T
    cos, sin = pe.rope_cos_sin(positions, D_h)
    x0 = torch.randn(B, T, H, D_h, generator=gen)  # as the model has it: a (B, H, T, D_h) strided view
    grad_out = torch.randn(B, H, T, D_h, generator=gen)
    ours, theirs = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    y = pe.apply_rope(ours.transpose(1, 2), cos, sin, pairing)
    y.backward(grad_out)
    rope_by_autograd(theirs.transpose(1, 2), cos, sin, pairing).backward(grad_out)
    assert y.grad_fn is not None and "Rope" in type(y.grad_fn).__name__  # the hand-written backward ran
    assert torch.equal(ours.grad, theirs.grad)


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_gradient_is_the_output_gradient_turned_back(pairing, gen):
    T, D_h = 6, 8
    positions = torch.tensor([0, 3, 9, 100, 7, 2])
    cos, sin = pe.rope_cos_sin(positions, D_h, dtype=torch.float64)
    x = torch.randn(2, T, D_h, generator=gen, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(2, T, D_h, generator=gen, dtype=torch.float64)
    (grad_x,) = torch.autograd.grad(pe.apply_rope(x, cos, sin, pairing), x, grad_out)
    # ∂L/∂x_p = R_pᵀ ∂L/∂y_p = R_(−p) ∂L/∂y_p, with the explicit matrices
    turned_back = pe.apply_rope_reference(grad_out, -positions, pairing=pairing)
    torch.testing.assert_close(grad_x, turned_back, rtol=0, atol=1e-6)  # the tables' angles are float32
    assert torch.equal(grad_x, pe.apply_rope(grad_out, cos, -sin, pairing))  # the same tables, by −θ


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
@pytest.mark.parametrize("batched_positions", [False, True])
def test_gradcheck_through_x_and_the_tables(pairing, batched_positions, gen):
    T, D_h = 4, 6
    shape = (2, 1, T, D_h // 2) if batched_positions else (T, D_h // 2)
    x = torch.randn(2, 3, T, D_h, generator=gen, dtype=torch.float64, requires_grad=True)
    cos = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
    sin = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, c, s: pe.apply_rope(x, c, s, pairing), (x, cos, sin))
    assert torch.autograd.gradcheck(lambda x: pe.apply_rope(x, cos.detach(), sin.detach(), pairing), (x,))


def test_backward_keeps_only_the_tables(gen):
    x = torch.randn(2, 3, 5, 8, generator=gen, requires_grad=True)
    cos, sin = pe.rope_cos_sin(5, 8)
    with ck.SavedTensorLog() as every:
        pe.apply_rope(x * 1.0, cos, sin)  # x * 1.0: the rotation's input is not a leaf
    with ck.SavedTensorLog(exclude=[cos, sin]) as besides_tables:
        pe.apply_rope(x * 1.0, cos, sin)
    assert [t.shape for t in every.tensors] == [tuple(cos.shape), tuple(sin.shape)]
    assert besides_tables.nbytes == 0


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_backward_lays_the_gradient_out_as_it_came(pairing, gen):
    """Attention's backward hands RoPE a gradient laid out (B, T, H, D_h) in memory; the
    turned-back gradient keeps that layout (and the values of the explicit rotation)."""
    x = torch.randn(2, 3, 5, 8, generator=gen, requires_grad=True)  # (B, H, T, D_h)
    cos, sin = pe.rope_cos_sin(5, 8)
    grad = torch.randn(2, 5, 3, 8, generator=gen).transpose(1, 2)  # (B, H, T, D_h), as SDPA's
    seen = []
    inner = x * 1.0  # not a leaf: its gradient is RoPE's, as RoPE returns it
    inner.register_hook(seen.append)
    pe.apply_rope(inner, cos, sin, pairing).backward(grad)
    assert seen[0].stride() == grad.stride()
    torch.testing.assert_close(seen[0], pe.apply_rope(grad.contiguous(), cos, -sin, pairing))


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_plain_tensors_take_the_path_without_concatenation(pairing, gen, monkeypatch):
    x = torch.randn(2, 3, 5, 8, generator=gen, requires_grad=True)
    cos, sin = pe.rope_cos_sin(5, 8)
    expected = rope_by_autograd(x.detach(), cos, sin, pairing)

    def forbidden(*args, **kwargs):
        raise AssertionError("the fallback for batched tensors ran on plain ones")

    monkeypatch.setattr(torch, "cat", forbidden)
    monkeypatch.setattr(torch, "stack", forbidden)
    y = pe.apply_rope(x, cos, sin, pairing)  # forward and backward write each pair in place
    y.sum().backward()
    with torch.no_grad():
        assert torch.equal(pe.apply_rope(x, cos, sin, pairing), y)
    assert torch.equal(y, expected)


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_vmap_and_vectorized_jacobians_agree_with_the_loop(pairing, gen):
    T, D_h = 4, 6
    cos, sin = pe.rope_cos_sin(torch.tensor([1, 5, 2, 30]), D_h, dtype=torch.float64)
    xs = torch.randn(3, 2, T, D_h, generator=gen, dtype=torch.float64)

    def rope(x):
        return pe.apply_rope(x, cos, sin, pairing)

    looped = torch.stack([rope(x) for x in xs])
    torch.testing.assert_close(torch.func.vmap(rope)(xs), looped, rtol=0, atol=0)
    by_loop = torch.autograd.functional.jacobian(rope, xs[0])  # (2, T, D_h, 2, T, D_h)
    vectorized = torch.autograd.functional.jacobian(rope, xs[0], vectorize=True)
    torch.testing.assert_close(vectorized, by_loop, rtol=0, atol=0)
    torch.testing.assert_close(torch.func.jacrev(rope)(xs[0]), by_loop, rtol=0, atol=0)
    torch.testing.assert_close(torch.func.jacfwd(rope)(xs[0]), by_loop, rtol=0, atol=1e-15)


# --- RoPE against Meta's reference (interleaved pairs, complex numbers) ----------------------------

def meta_precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def meta_apply_rotary_emb(xq, freqs_cis):
    """Meta's llama/model.py, for xq of shape (B, T, H, D_h)."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    return torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)


def test_interleaved_matches_meta_reference(gen):
    B, T, H, D_h = 2, 11, 4, 16
    xq = torch.randn(B, T, H, D_h, generator=gen)
    meta = meta_apply_rotary_emb(xq, meta_precompute_freqs_cis(D_h, T))  # (B, T, H, D_h)
    cos, sin = pe.rope_cos_sin(T, D_h)
    ours = pe.apply_rope(xq.transpose(1, 2), cos, sin, "interleaved").transpose(1, 2)  # rope on (B, H, T, D_h)
    torch.testing.assert_close(ours, meta, rtol=1e-6, atol=1e-6)


# --- the two pairings, explicit math, properties ---------------------------------------------------

@pytest.mark.parametrize("head_dim", [2, 8, 64])
def test_pairings_agree_after_permuting_dimensions(head_dim, gen):
    x = torch.randn(3, 2, 7, head_dim, generator=gen)
    cos, sin = pe.rope_cos_sin(torch.arange(5, 12), head_dim)
    perm = pe.rope_permutation(head_dim)
    interleaved = pe.apply_rope(x, cos, sin, "interleaved")
    half = pe.apply_rope(x[..., perm], cos, sin, "half")
    assert torch.equal(interleaved[..., perm], half)
    torch.testing.assert_close(pe.apply_rope(half, cos, -sin, "half"), x[..., perm])  # −θ undoes +θ
    if head_dim > 2:  # without the permutation they differ: the classic checkpoint-conversion bug
        assert (interleaved - pe.apply_rope(x, cos, sin, "half")).abs().max() > 0.1


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_fast_path_matches_rotation_matrices(pairing, gen):
    x = torch.randn(2, 3, 6, 12, generator=gen, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 50, 51, 4000])
    cos, sin = pe.rope_cos_sin(positions, 12, dtype=torch.float64)
    fast = pe.apply_rope(x, cos, sin, pairing)
    explicit = pe.apply_rope_reference(x, positions, pairing=pairing)
    # The tables hold float32 angles p·θ_i (as in HF and Meta); the matrices float64 ones. An angle
    # near p carries a rounding error up to p · 2^-24: negligible for small p, ~1e-4 rad at p = 4000.
    torch.testing.assert_close(fast[..., :3, :], explicit[..., :3, :], rtol=0, atol=1e-6)
    torch.testing.assert_close(fast[..., 3:, :], explicit[..., 3:, :], rtol=0, atol=4000 * 2**-24 * 4)


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_rotation_matrices(pairing):
    r = lambda p: pe.rope_rotation_matrix(p, 16, pairing=pairing)  # noqa: E731
    eye = torch.eye(16, dtype=torch.float64)
    assert torch.equal(r(0), eye)
    torch.testing.assert_close(r(37) @ r(37).T, eye)
    torch.testing.assert_close(r(-37), r(37).T)
    for m, n in [(3, 10), (100, 7), (1234, 1300)]:
        torch.testing.assert_close(r(m).T @ r(n), r(n - m), rtol=0, atol=1e-10)


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_scores_depend_on_relative_position_only(pairing, gen):
    q = torch.randn(32, generator=gen, dtype=torch.float64)
    k = torch.randn(32, generator=gen, dtype=torch.float64)
    R = lambda p: pe.rope_rotation_matrix(p, 32, pairing=pairing)  # noqa: E731
    for offset in (0, 3, -20):
        scores = torch.stack([(R(m) @ q) @ (R(m + offset) @ k) for m in (0, 7, 100, 2500)])
        assert (scores - scores[0]).abs().max() < 1e-10
    assert abs(((R(0) @ q) @ (R(3) @ k) - (R(0) @ q) @ (R(4) @ k)).item()) > 1e-3  # but offsets matter


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_position_zero_is_the_identity_and_norms_are_kept(pairing, gen):
    x = torch.randn(2, 4, 5, 16, generator=gen)
    cos, sin = pe.rope_cos_sin(torch.zeros(5, dtype=torch.long), 16)
    assert torch.equal(pe.apply_rope(x, cos, sin, pairing), x)
    cos, sin = pe.rope_cos_sin(torch.arange(100, 105), 16)
    torch.testing.assert_close(pe.apply_rope(x, cos, sin, pairing).norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("pairing", pe.PAIRINGS)
def test_uniform_shift_leaves_scores_unchanged(pairing, gen):
    q = torch.randn(1, 4, 16, 64, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 4, 16, 64, generator=gen, dtype=torch.float64)

    def scores(start):
        cos, sin = pe.rope_cos_sin(torch.arange(start, start + 16), 64, dtype=torch.float64)
        return pe.apply_rope(q, cos, sin, pairing) @ pe.apply_rope(k, cos, sin, pairing).transpose(-1, -2)

    base = scores(0)
    for shift in (1, 37, 1000):
        # float32 angles: the error grows with the position, still far below the scores' size
        torch.testing.assert_close(scores(shift), base, rtol=0, atol=1e-3 * base.abs().max().item())
    exact = [pe.apply_rope_reference(q, torch.arange(s, s + 16), pairing=pairing) for s in (0, 1000)]
    exact_k = [pe.apply_rope_reference(k, torch.arange(s, s + 16), pairing=pairing) for s in (0, 1000)]
    s0, s1 = (a @ b.transpose(-1, -2) for a, b in zip(exact, exact_k))
    assert (s0 - s1).abs().max() < 1e-10  # float64 throughout: rounding level


def test_tables_broadcast_over_batch_and_heads(gen):
    x = torch.randn(2, 3, 5, 8, generator=gen)
    positions = torch.stack([torch.arange(5), torch.arange(20, 25)])
    cos, sin = pe.rope_cos_sin(positions, 8)
    out = pe.apply_rope(x, cos, sin)
    for b in range(2):
        c, s = pe.rope_cos_sin(positions[b], 8)
        torch.testing.assert_close(out[b], pe.apply_rope(x[b], c, s))


def test_works_on_the_device():
    from course_lib.device import get_device

    device = get_device()
    x = torch.randn(1, 2, 6, 8, device=device)
    cos, sin = pe.rope_cos_sin(torch.arange(6, device=device), 8)
    assert cos.device.type == device.type
    assert pe.apply_rope(x, cos, sin).device.type == device.type
    assert pe.sinusoidal_encoding(6, 8, device=device).device.type == device.type
    slopes = pe.alibi_slopes(4, device=device)
    assert pe.alibi_bias(slopes, 6).device.type == device.type
    table = pe.LearnedPositionalEmbedding(8, 4).to(device)
    assert table(6).device.type == device.type


# --- ALiBi ----------------------------------------------------------------------------------------

def paper_get_slopes(n):
    """The ALiBi paper's reference code (ofirpress/attention_with_linear_biases), as published."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + paper_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]


@pytest.mark.parametrize("n_heads", list(range(1, 41)) + [64, 96, 100])
def test_slopes_match_the_paper_bloom_and_mpt(n_heads):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    ours = pe.alibi_slopes(n_heads, dtype=torch.float64)
    torch.testing.assert_close(ours, torch.tensor(paper_get_slopes(n_heads), dtype=torch.float64), rtol=1e-12, atol=0)
    torch.testing.assert_close(ours.float(), _get_alibi_slopes(n_heads, "cpu"))
    mpt = build_mpt_alibi_tensor(n_heads, 2)  # (H, 1, 2): slope × (−1, 0)
    torch.testing.assert_close(ours.float(), -mpt[:, 0, 0])


def test_slopes_for_eight_heads_and_a_non_power_of_two():
    assert pe.alibi_slopes(8, dtype=torch.float64).tolist() == [2.0**-k for k in range(1, 9)]
    assert pe.alibi_slopes(3, dtype=torch.float64).tolist() == [2.0**-4, 2.0**-8, 2.0**-2]


def test_bias_is_minus_slope_times_distance():
    slopes = pe.alibi_slopes(4, dtype=torch.float64)
    bias = pe.alibi_bias(slopes, 6)
    assert bias.shape == (4, 6, 6)
    for h in range(4):
        for i in range(6):
            for j in range(6):
                assert bias[h, i, j].item() == -slopes[h].item() * abs(i - j)


def test_bias_with_a_query_offset_is_a_block_of_the_full_bias():
    slopes = pe.alibi_slopes(8)
    full = pe.alibi_bias(slopes, 12)
    block = pe.alibi_bias(slopes, torch.arange(9, 12), torch.arange(12))  # 3 new queries, 12 keys (a cache)
    assert torch.equal(block, full[:, 9:])


@pytest.mark.parametrize("n_heads", [4, 6, 12])
def test_causal_softmax_equals_bloom_and_mpt_biases(n_heads, gen):
    """Bloom adds m·j and MPT m·(j − T + 1): per-row constants apart from ours, invisible to softmax."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    T = 10
    scores = torch.randn(n_heads, T, T, generator=gen, dtype=torch.float64)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend

    def attn(bias):
        return (scores + bias).masked_fill(~causal, float("-inf")).softmax(-1)

    ours = attn(pe.alibi_bias(pe.alibi_slopes(n_heads, dtype=torch.float64), T))
    bloom = build_alibi_tensor(torch.ones(1, T, dtype=torch.long), n_heads, torch.float32)  # (H, 1, T)
    mpt = build_mpt_alibi_tensor(n_heads, T)  # (H, 1, T)
    torch.testing.assert_close(ours, attn(bloom.double()), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours, attn(mpt.double()), rtol=1e-5, atol=1e-6)


# --- clear errors ----------------------------------------------------------------------------------

x8 = torch.zeros(2, 5, 8)
cos8, sin8 = pe.rope_cos_sin(5, 8)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: pe.sinusoidal_encoding(10, 7), ValueError, "d_model (7) must be a positive even number"),
        (lambda: pe.sinusoidal_encoding(10, 8, base=1.0), ValueError, "base (1.0) must be finite and greater than 1"),
        (lambda: pe.sinusoidal_encoding(0, 8), ValueError, "positions (0) must be at least 1"),
        (lambda: pe.sinusoidal_encoding(torch.tensor(3), 8), ValueError, "got a scalar"),
        (lambda: pe.sinusoidal_encoding(torch.tensor([True]), 8), TypeError, "positions must hold real numbers"),
        (lambda: pe.sinusoidal_encoding([0, 1], 8), TypeError, "positions must be an int or a tensor"),
        (lambda: pe.rope_cos_sin(5, 9), ValueError, "head_dim (9) must be a positive even number"),
        (lambda: pe.rope_cos_sin(5, 8, theta=0.5), ValueError, "theta (0.5) must be finite"),
        (lambda: pe.rope_cos_sin(torch.zeros(2, 3, 4), 8), ValueError, "positions must be (T,) or (B, T)"),
        (lambda: pe.apply_rope(x8, cos8, sin8, pairing="rotate_half"), ValueError, "pairing must be 'half'"),
        (lambda: pe.apply_rope(x8.long(), cos8, sin8), TypeError, "x must be a floating-point tensor"),
        (lambda: pe.apply_rope(torch.zeros(2, 5, 7), cos8, sin8), ValueError, "x.shape[-1] (D_h) (7) must be"),
        (lambda: pe.apply_rope(x8, torch.cat((cos8, cos8), -1), torch.cat((sin8, sin8), -1)), ValueError,
         "must have D_h/2 = 4 columns"),
        (lambda: pe.apply_rope(x8, cos8, sin8[:3]), ValueError, "cos and sin must be tensors of one shape"),
        (lambda: pe.apply_rope(torch.zeros(2, 6, 8), cos8, sin8), ValueError, "do not broadcast to x's pairs"),
        (lambda: pe.apply_rope(x8[0, 0], cos8, sin8), ValueError, "x must have shape (..., T, D_h)"),
        (lambda: pe.apply_rope_reference(x8, torch.arange(4)), ValueError, "T = x.shape[-2] = 5"),
        (lambda: pe.alibi_slopes(0), ValueError, "n_heads (0) must be at least 1"),
        (lambda: pe.alibi_slopes(4.0), TypeError, "n_heads must be an int"),
        (lambda: pe.alibi_bias(torch.ones(2, 2), 4), ValueError, "slopes must be a 1-D float tensor"),
        (lambda: pe.alibi_bias(torch.ones(2), torch.zeros(2, 2)), ValueError, "must be 1-D"),
        (lambda: pe.LearnedPositionalEmbedding(0, 4), ValueError, "max_seq_len (0) must be at least 1"),
        (lambda: pe.LearnedPositionalEmbedding(8, 4, init_std=-1.0), ValueError, "init_std (-1.0)"),
        (lambda: pe.rope_permutation(5), ValueError, "head_dim (5)"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
