"""course_lib.attention against PyTorch (F.scaled_dot_product_attention, nn.MultiheadAttention), Hugging
Face's LlamaAttention (eager and sdpa, explicit mask) and exact properties (causality, grouping)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib import attention as at
from course_lib.positional import apply_rope, rope_cos_sin


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def randn(*shape, gen, dtype=torch.float32):
    return torch.randn(shape, generator=gen, dtype=dtype)


def random_mask(*shape, gen):
    """A random bool mask (True = may attend) in which every query may attend to at least one key."""
    mask = torch.rand(shape, generator=gen) > 0.4
    mask[..., 0] = True
    return mask


# --- scaled dot-product attention: explicit math vs the fused kernel ----------------------------------

def test_hand_example():
    q = torch.tensor([[1.0, 0.0]])  # one query
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # three keys
    v = torch.tensor([[1.0], [2.0], [3.0]])
    scores = torch.tensor([1.0, 0.0, -1.0]) / math.sqrt(2)
    weights = scores.exp() / scores.exp().sum()
    out, w = at.attention_reference(q, k, v, return_weights=True)
    torch.testing.assert_close(w[0], weights)
    torch.testing.assert_close(out[0, 0], (weights * v[:, 0]).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lead, T, S, d_k, d_v", [((2, 3), 5, 5, 8, 8), ((1, 4), 3, 7, 16, 4), ((6,), 9, 12, 8, 8)])
def test_reference_matches_sdpa(lead, T, S, d_k, d_v, dtype, gen):
    q = randn(*lead, T, d_k, gen=gen, dtype=dtype)
    k = randn(*lead, S, d_k, gen=gen, dtype=dtype)
    v = randn(*lead, S, d_v, gen=gen, dtype=dtype)
    masks = [None, random_mask(T, S, gen=gen), random_mask(*lead, T, S, gen=gen), at.causal_mask(T, S)]
    if T == S:
        masks.append(at.causal_mask(T))
    for mask in masks:
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(at.attention_reference(q, k, v, mask), want)
        torch.testing.assert_close(at.attention(q, k, v, mask, implementation="reference"), want)
        torch.testing.assert_close(at.attention(q, k, v, mask, implementation="sdpa"), want)


def test_weights_are_distributions_and_masked_weights_are_exactly_zero(gen):
    q, k, v = randn(2, 6, 8, gen=gen), randn(2, 9, 8, gen=gen), randn(2, 9, 3, gen=gen)
    mask = random_mask(2, 6, 9, gen=gen)
    _, w = at.attention_reference(q, k, v, mask, return_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 6))
    assert (w[~mask] == 0).all()
    assert (w[mask] > 0).all()


def test_scale_argument_and_default(gen):
    q, k, v = randn(3, 4, 16, gen=gen), randn(3, 5, 16, gen=gen), randn(3, 5, 16, gen=gen)
    torch.testing.assert_close(at.attention_reference(q, k, v, scale=0.25), at.attention_reference(q, k, v))
    torch.testing.assert_close(at.attention_reference(q, k, v, scale=1.0),
                               F.scaled_dot_product_attention(q, k, v, scale=1.0))
    torch.testing.assert_close(at.attention(q, k, v, scale=0.1),
                               at.attention(q, k, v, scale=0.1, implementation="reference"))


def test_fully_masked_query_gives_zero_like_sdpa(gen):
    q, k, v = randn(1, 3, 4, gen=gen), randn(1, 5, 4, gen=gen), randn(1, 5, 4, gen=gen)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    out, w = at.attention_reference(q, k, v, mask, return_weights=True)
    assert torch.isfinite(out).all() and (out[0, 1] == 0).all() and (w[0, 1] == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_low_precision_reference_stays_close_to_float32(gen):
    q, k, v = randn(2, 4, 16, 32, gen=gen), randn(2, 4, 16, 32, gen=gen), randn(2, 4, 16, 32, gen=gen)
    mask = at.causal_mask(16)
    exact = at.attention_reference(q, k, v, mask)
    for dtype in (torch.bfloat16, torch.float16):
        low = at.attention_reference(q.to(dtype), k.to(dtype), v.to(dtype), mask)
        assert low.dtype == dtype
        torch.testing.assert_close(low.float(), exact, atol=3e-2, rtol=3e-2)
        torch.testing.assert_close(low.float(), F.scaled_dot_product_attention(
            q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=mask).float(), atol=3e-2, rtol=3e-2)


def test_gradients_of_both_paths_agree(gen):
    q0, k0, v0 = randn(2, 2, 6, 8, gen=gen), randn(2, 2, 6, 8, gen=gen), randn(2, 2, 6, 8, gen=gen)
    grads = []
    for implementation in at.IMPLEMENTATIONS:
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        at.attention(q, k, v, causal=True, implementation=implementation).square().sum().backward()
        grads.append((q.grad, k.grad, v.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


# --- causal masks -------------------------------------------------------------------------------------

def test_causal_mask_square_is_lower_triangular():
    for T in (1, 2, 7):
        assert torch.equal(at.causal_mask(T), torch.ones(T, T, dtype=torch.bool).tril())
        assert at.causal_mask(T).dtype == torch.bool


def test_causal_mask_with_offset():
    # T queries at positions offset..offset+T-1 over keys 0..S-1: tril with the diagonal moved by offset
    for T, S, offset in [(1, 8, 7), (3, 8, 5), (3, 8, 2), (4, 4, 0), (2, 9, 0)]:
        want = torch.ones(T, S, dtype=torch.bool).tril(diagonal=offset)
        assert torch.equal(at.causal_mask(T, S, offset=offset), want)
    assert torch.equal(at.causal_mask(3, 8), at.causal_mask(3, 8, offset=5))  # default: the last T positions
    assert at.causal_mask(1, 6).all()  # one new token with a cache sees everything before it


def test_causal_mask_from_positions_batched():
    q_pos = torch.tensor([[2, 3], [0, 1]])  # two sequences at different positions
    k_pos = torch.arange(4).expand(2, 4)
    mask = at.causal_mask_from_positions(q_pos, k_pos)
    assert mask.shape == (2, 2, 4)
    assert torch.equal(mask[0], at.causal_mask(2, 4, offset=2))
    assert torch.equal(mask[1], at.causal_mask(2, 4, offset=0))


def test_is_causal_is_only_right_when_T_equals_S(gen):
    q, k, v = randn(1, 2, 3, 8, gen=gen), randn(1, 2, 7, 8, gen=gen), randn(1, 2, 7, 8, gen=gen)
    ours = at.attention(q, k, v, causal=True)
    torch.testing.assert_close(ours, at.attention_reference(q, k, v, at.causal_mask(3, 7, offset=4)))
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # queries aligned with keys 0..2
    torch.testing.assert_close(top_left, at.attention_reference(q, k, v, at.causal_mask(3, 7, offset=0)))
    assert not torch.allclose(ours, top_left)
    square = at.attention(q, k[..., :3, :], v[..., :3, :], causal=True)  # T == S: is_causal is used
    torch.testing.assert_close(square, F.scaled_dot_product_attention(q, k[..., :3, :], v[..., :3, :], is_causal=True))


def test_a_block_of_queries_at_an_offset_matches_the_full_computation(gen):
    T, start = 10, 6
    q, k, v = randn(2, 2, T, 8, gen=gen), randn(2, 2, T, 8, gen=gen), randn(2, 2, T, 8, gen=gen)
    full = at.attention_reference(q, k, v, at.causal_mask(T))
    block = at.attention_reference(q[..., start:, :], k, v, at.causal_mask(T - start, T))
    torch.testing.assert_close(block, full[..., start:, :])
    # and with only the keys up to the last query (a cache holding positions 0..start+1)
    part = at.attention(q[..., start:start + 2, :], k[..., :start + 2, :], v[..., :start + 2, :], causal=True)
    torch.testing.assert_close(part, full[..., start:start + 2, :])


def test_sliding_window_mask_is_the_definition():
    for T, S, offset, window in [(5, 5, 0, 2), (2, 6, 4, 3), (2, 6, 1, 3), (7, 7, 0, 1), (3, 9, 6, 9), (4, 10, 3, 4)]:
        mask = at.sliding_window_mask(T, S, window=window, offset=offset)
        assert mask.dtype == torch.bool and mask.shape == (T, S)
        for t in range(T):
            i = offset + t
            for j in range(S):
                assert bool(mask[t, j]) == (i - window < j <= i), (T, S, offset, window, t, j)
    assert torch.equal(at.sliding_window_mask(3, 8, window=2), at.sliding_window_mask(3, 8, window=2, offset=5))
    assert torch.equal(at.sliding_window_mask(6, window=6), at.causal_mask(6))  # a window as long as the sequence
    assert (at.sliding_window_mask(9, window=4).sum(-1) <= 4).all()  # at most `window` keys per query


def test_sliding_window_mask_matches_hugging_face_mistral():
    masking_utils = pytest.importorskip("transformers.masking_utils")
    window, T = 3, 7
    overlay = masking_utils.sliding_window_overlay(window)
    want = torch.tensor([[j <= i and bool(overlay(0, 0, torch.tensor(i), torch.tensor(j))) for j in range(T)]
                         for i in range(T)])
    assert torch.equal(at.sliding_window_mask(T, window=window), want)


# --- the backward pass by hand ---------------------------------------------------------------------------

@pytest.mark.parametrize("H, H_kv, T, S, masked", [(1, 1, 5, 5, False), (4, 4, 3, 7, True), (4, 2, 6, 6, True),
                                                    (6, 1, 4, 5, True), (6, 3, 5, 8, False)])
def test_attention_backward_matches_autograd(H, H_kv, T, S, masked, gen):
    q = randn(2, H, T, 8, gen=gen, dtype=torch.float64).requires_grad_()
    k = randn(2, H_kv, S, 8, gen=gen, dtype=torch.float64).requires_grad_()
    v = randn(2, H_kv, S, 4, gen=gen, dtype=torch.float64).requires_grad_()
    grad_out = randn(2, H, T, 4, gen=gen, dtype=torch.float64)
    mask = random_mask(2, 1, T, S, gen=gen) if masked else None
    n_rep = H // H_kv
    out = at.attention_reference(q, at.repeat_kv(k, n_rep), at.repeat_kv(v, n_rep), mask)
    out.backward(grad_out)
    grads = at.attention_backward(q.detach(), k.detach(), v.detach(), grad_out, mask)
    for mine, leaf in zip(grads, (q, k, v)):
        assert mine.shape == leaf.shape and mine.dtype == leaf.dtype
        torch.testing.assert_close(mine, leaf.grad)


def test_attention_backward_scale_dtype_and_an_empty_row(gen):
    q, k, v = (randn(3, 4, 8, gen=gen).requires_grad_() for _ in range(3))
    grad_out = randn(3, 4, 8, gen=gen)
    mask = at.causal_mask(4).clone()
    mask[1] = False  # query 1 may attend to nothing: output 0, and no gradient
    at.attention_reference(q, k, v, mask, scale=0.3).backward(grad_out)
    grads = at.attention_backward(q.detach(), k.detach(), v.detach(), grad_out, mask, scale=0.3)
    for mine, leaf in zip(grads, (q, k, v)):
        assert mine.dtype == torch.float32
        torch.testing.assert_close(mine, leaf.grad)
    assert (grads[0][:, 1] == 0).all()
    # rowsum(dP ⊙ P) = rowsum(dO ⊙ O): the identity FlashAttention's backward uses
    out, p = at.attention_reference(q.detach(), k.detach(), v.detach(), return_weights=True)
    torch.testing.assert_close(((grad_out @ v.detach().transpose(-2, -1)) * p).sum(-1), (grad_out * out).sum(-1))


# --- grouped-query attention ----------------------------------------------------------------------------

def test_repeat_kv_grouping_is_h_floordiv_n_rep(gen):
    H_kv, n_rep = 3, 4
    x = randn(2, H_kv, 5, 6, gen=gen)
    y = at.repeat_kv(x, n_rep)
    assert y.shape == (2, H_kv * n_rep, 5, 6)
    for h in range(H_kv * n_rep):
        assert torch.equal(y[:, h], x[:, h // n_rep])
    assert at.repeat_kv(x, 1) is x


def test_repeat_kv_matches_hugging_face_and_sdpa_enable_gqa(gen):
    from transformers.models.llama.modeling_llama import repeat_kv as hf_repeat_kv

    k, v = randn(2, 2, 7, 8, gen=gen), randn(2, 2, 7, 8, gen=gen)
    q = randn(2, 6, 7, 8, gen=gen)
    assert torch.equal(at.repeat_kv(k, 3), hf_repeat_kv(k, 3))
    ours = at.attention_reference(q, at.repeat_kv(k, 3), at.repeat_kv(v, 3), at.causal_mask(7))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


@pytest.mark.parametrize("bias", [False, True])
def test_mha_matches_nn_multihead_attention(bias, gen):
    D, H, T = 32, 4, 7
    ours = at.GroupedQueryAttention(D, H, H, bias=bias)
    theirs = nn.MultiheadAttention(D, H, bias=bias, batch_first=True)
    with torch.no_grad():
        # the same layout: W_q, W_k, W_v stacked by rows
        theirs.in_proj_weight.copy_(ours.w_qkv.weight)
        theirs.out_proj.weight.copy_(ours.w_o.weight)
        if bias:
            theirs.in_proj_bias.copy_(ours.w_qkv.bias)
            theirs.out_proj.bias.copy_(ours.w_o.bias)
    x = randn(3, T, D, gen=gen)
    causal = at.causal_mask(T)
    # nn.MultiheadAttention's bool mask means the opposite: True = blocked
    want, _ = theirs(x, x, x, attn_mask=~causal, need_weights=False)
    for implementation in at.IMPLEMENTATIONS:
        torch.testing.assert_close(ours(x, implementation=implementation), want)
        torch.testing.assert_close(ours(x, mask=causal, implementation=implementation), want)
    full = torch.ones(T, T, dtype=torch.bool)
    want_bidirectional, _ = theirs(x, x, x, need_weights=False)
    torch.testing.assert_close(ours(x, mask=full), want_bidirectional)


def _hf_pair(n_heads, n_kv_heads, implementation, head_dim=None, bias=False):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

    D = 48
    config = LlamaConfig(hidden_size=D, num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
                         head_dim=head_dim if head_dim is not None else D // n_heads, attention_bias=bias,
                         intermediate_size=64, num_hidden_layers=1, vocab_size=32)
    config._attn_implementation = implementation
    torch.manual_seed(0)
    hf = LlamaAttention(config, layer_idx=0).eval()
    ours = at.GroupedQueryAttention(D, n_heads, n_kv_heads, head_dim=head_dim, bias=bias)
    theirs = hf.state_dict()
    state = {f"w_o.{kind}": theirs[f"o_proj.{kind}"] for kind in ("weight", "bias") if f"o_proj.{kind}" in theirs}
    for kind in ("weight", "bias") if bias else ("weight",):  # q_proj, k_proj, v_proj stacked by rows
        state[f"w_qkv.{kind}"] = torch.cat([theirs[f"{n}_proj.{kind}"] for n in "qkv"])
    ours.load_state_dict(state, strict=True)
    return hf, ours, LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("n_heads, n_kv_heads, head_dim, bias",
                         [(6, 2, None, False), (6, 6, None, False), (6, 1, None, False), (4, 2, 16, True)])
def test_matches_hugging_face_llama_attention(implementation, n_heads, n_kv_heads, head_dim, bias, gen):
    hf, ours, rotary = _hf_pair(n_heads, n_kv_heads, implementation, head_dim, bias)
    B, T = 2, 9
    x = randn(B, T, 48, gen=gen)
    positions = torch.arange(T).expand(B, T)
    hf_cos, hf_sin = rotary(x, positions)  # (B, T, D_h): each angle twice, for rotate_half
    head_dim = ours.head_dim
    cos, sin = rope_cos_sin(positions, head_dim)  # (B, 1, T, D_h/2): course_lib's half-width tables
    torch.testing.assert_close(cos[:, 0], hf_cos[..., : head_dim // 2])
    allowed = at.causal_mask(T)
    additive = torch.zeros(B, 1, T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)  # HF's format
    with torch.no_grad():
        want, _ = hf(x, position_embeddings=(hf_cos, hf_sin), attention_mask=additive)
        cos_t, sin_t = rope_cos_sin(T, head_dim)  # (T, D_h/2): the same positions for every sequence
        for ours_impl in at.IMPLEMENTATIONS:
            torch.testing.assert_close(ours(x, cos, sin, implementation=ours_impl), want)
            torch.testing.assert_close(ours(x, cos_t, sin_t, mask=allowed, implementation=ours_impl), want)


def test_matches_hugging_face_with_a_padding_mask(gen):
    hf, ours, rotary = _hf_pair(4, 2, "eager")
    B, T = 2, 6
    x = randn(B, T, 48, gen=gen)
    hf_cos, hf_sin = rotary(x, torch.arange(T).expand(B, T))
    cos, sin = rope_cos_sin(T, ours.head_dim)
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[1, -2:] = False  # sequence 1 ends with two padding tokens
    allowed = at.causal_mask(T) & keep[:, None, None, :]  # (B, 1, T, T)
    additive = torch.zeros(B, 1, T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        want, _ = hf(x, position_embeddings=(hf_cos, hf_sin), attention_mask=additive)
        torch.testing.assert_close(ours(x, cos, sin, mask=allowed), want)


@pytest.mark.parametrize("bias", [False, True])
def test_one_product_equals_the_three_projections(bias, gen):
    """w_qkv holds W_q, W_k and W_v stacked by rows: its one product gives what the three
    separate products give, per head, before and after RoPE."""
    attn = at.GroupedQueryAttention(32, 4, 2, bias=bias)
    B, T, H, H_kv, D_h = 2, 5, 4, 2, 8
    x = randn(B, T, 32, gen=gen)
    w_q, w_k, w_v = attn.w_qkv.weight.split(attn.qkv_sizes)  # (H·D_h, D), (H_kv·D_h, D) ×2
    b_q, b_k, b_v = attn.w_qkv.bias.split(attn.qkv_sizes) if bias else (0, 0, 0)
    cos, sin = rope_cos_sin(torch.arange(T), D_h)
    with torch.no_grad():
        want_q = (x @ w_q.T + b_q).view(B, T, H, D_h).transpose(1, 2)  # (B, H, T, D_h)
        want_k = (x @ w_k.T + b_k).view(B, T, H_kv, D_h).transpose(1, 2)  # (B, H_kv, T, D_h)
        want_v = (x @ w_v.T + b_v).view(B, T, H_kv, D_h).transpose(1, 2)  # (B, H_kv, T, D_h)
        q, k, v = attn.project_qkv(x)
        for got, want in ((q, want_q), (k, want_k), (v, want_v)):
            torch.testing.assert_close(got, want)
        q, k, v = attn.project_qkv(x, cos, sin)
        torch.testing.assert_close(q, apply_rope(want_q, cos, sin))
        torch.testing.assert_close(k, apply_rope(want_k, cos, sin))
        torch.testing.assert_close(v, want_v)


@pytest.mark.parametrize("T", [1, 5])  # T = 1: v is already "contiguous", yet a view
def test_rope_projection_keeps_no_view_of_the_unrotated_features(T, gen):
    """With RoPE, q and k are rotated copies; v, which attention keeps for its backward pass, is
    copied too when a gradient is wanted, so that nothing keeps the projection's whole output
    alive. Without RoPE, q, k and v are views of that output, all three kept, nothing wasted."""
    attn = at.GroupedQueryAttention(32, 4, 2)
    x = randn(1, T, 32, gen=gen).requires_grad_()
    cos, sin = rope_cos_sin(torch.arange(T), 8)
    q, k, v = attn.project_qkv(x, cos, sin)
    for t in (q, k, v):
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
    q, k, v = attn.project_qkv(x)
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()


def test_attend_with_cached_keys_matches_the_full_forward(gen):
    attn = at.GroupedQueryAttention(32, 4, 2)
    x = randn(2, 8, 32, gen=gen)
    q, k, v = attn.project_qkv(x)
    with torch.no_grad():
        full = attn(x)
        for implementation in at.IMPLEMENTATIONS:
            last = attn.attend(q[:, :, -3:], k, v, implementation=implementation)  # 3 new queries, 8 keys
            torch.testing.assert_close(last, full[:, -3:])


def test_implementations_agree_and_are_exactly_causal(gen):
    torch.manual_seed(1)
    attn = at.GroupedQueryAttention(32, 8, 2)
    x = randn(2, 10, 32, gen=gen)
    t = 6
    changed = x.clone()
    changed[:, t:] = randn(2, 10 - t, 32, gen=gen)  # new tokens from position t on
    with torch.no_grad():
        outs = {i: attn(x, implementation=i) for i in at.IMPLEMENTATIONS}
        torch.testing.assert_close(outs["reference"], outs["sdpa"])
        for implementation in at.IMPLEMENTATIONS:
            before, after = attn(x, implementation=implementation), attn(changed, implementation=implementation)
            assert torch.equal(before[:, :t], after[:, :t])  # exactly equal: difference 0, not just small
            assert not torch.allclose(before[:, t:], after[:, t:])


def test_parameter_and_kv_counts():
    D, H, D_h = 64, 8, 8
    for H_kv in (8, 2, 1):
        attn = at.GroupedQueryAttention(D, H, H_kv)
        n = sum(p.numel() for p in attn.parameters())
        assert n == 2 * D * H * D_h + 2 * D * H_kv * D_h
        assert attn.qkv_sizes == (H * D_h, H_kv * D_h, H_kv * D_h)
        assert attn.w_qkv.out_features == sum(attn.qkv_sizes)
    assert sum(p.numel() for p in at.GroupedQueryAttention(D, H, H).parameters()) == 4 * D * D
    with torch.device("meta"):
        llama2_70b = at.GroupedQueryAttention(8192, 64, 8)
        mha = at.GroupedQueryAttention(8192, 64, 64)
    saving = 1 - sum(p.numel() for p in llama2_70b.parameters()) / sum(p.numel() for p in mha.parameters())
    assert saving == pytest.approx(0.4375)


def test_head_dim_can_differ_from_d_model_over_n_heads(gen):
    attn = at.GroupedQueryAttention(32, 4, 2, head_dim=12)
    assert attn.qkv_sizes == (48, 24, 24) and attn.w_o.in_features == 48
    assert attn(randn(2, 5, 32, gen=gen)).shape == (2, 5, 32)


def test_works_on_the_device():
    from course_lib.device import get_device

    device = get_device()
    attn = at.GroupedQueryAttention(32, 4, 2).to(device)
    x = torch.randn(2, 5, 32, device=device)
    cos, sin = rope_cos_sin(5, 8, device=device)
    zero_angle = torch.ones(5, 4, device=device), torch.zeros(5, 4, device=device)  # RoPE at angle 0
    for implementation in at.IMPLEMENTATIONS:
        out = attn(x, cos, sin, implementation=implementation)
        assert out.device.type == device.type and out.shape == (2, 5, 32)
        torch.testing.assert_close(attn(x, *zero_angle, implementation=implementation),
                                   attn(x, implementation=implementation))
    assert at.causal_mask(3, 5, device=device).device.type == device.type


# --- clear errors ---------------------------------------------------------------------------------------

Q = torch.zeros(2, 3, 4)
K = torch.zeros(2, 5, 4)
V = torch.zeros(2, 5, 6)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: at.GroupedQueryAttention(64, 6, 4), ValueError, "n_heads (6) must be divisible by n_kv_heads (4)"),
        (lambda: at.GroupedQueryAttention(65, 4, 2), ValueError, "d_model (65) must be divisible by n_heads (4)"),
        (lambda: at.GroupedQueryAttention(64, 0, 1), ValueError, "n_heads (0) must be at least 1"),
        (lambda: at.GroupedQueryAttention(64, 4.0, 2), TypeError, "n_heads must be an int"),
        (lambda: at.GroupedQueryAttention(64, 4, 2, bias=1), TypeError, "bias must be a bool"),
        (lambda: at.GroupedQueryAttention(64, 4, 2)(torch.zeros(2, 3, 32)), ValueError, "x must have shape (B, T, D) with D = d_model (64)"),
        (lambda: at.GroupedQueryAttention(64, 4, 2)(torch.zeros(2, 3, 64), torch.ones(3, 8)), ValueError, "give both cos and sin"),
        (lambda: at.GroupedQueryAttention(64, 4, 2)(torch.zeros(2, 3, 64), *rope_cos_sin(4, 16)), ValueError, "do not broadcast"),
        (lambda: at.GroupedQueryAttention(64, 4, 2)(torch.zeros(1, 3, 64), implementation="flash"), ValueError, "implementation must be one of"),
        (lambda: at.attention_reference(Q, K[..., :3], V), ValueError, "q and k must have the same head width"),
        (lambda: at.attention_reference(Q, K, V[:, :4]), ValueError, "k and v must hold the same number of keys"),
        (lambda: at.attention_reference(Q, K, V.double()), TypeError, "q, k and v must have the same dtype"),
        (lambda: at.attention_reference(Q.long(), K, V), TypeError, "q must be a floating-point tensor"),
        (lambda: at.attention_reference(Q, K, V, torch.zeros(3, 5)), TypeError, "mask must be a bool tensor with True = may attend"),
        (lambda: at.attention_reference(Q, K, V, torch.ones(5, 3, dtype=torch.bool)), ValueError, "does not broadcast"),
        (lambda: at.attention(torch.zeros(1, 4, 3, 8), torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8)), ValueError, "repeat_kv"),
        (lambda: at.attention(Q, K, V, torch.ones(3, 5, dtype=torch.bool), causal=True), ValueError, "not both"),
        (lambda: at.causal_mask(4, 3), ValueError, "n_keys (3) must be at least n_queries (4)"),
        (lambda: at.causal_mask(2, 5, offset=-1), ValueError, "offset (-1) must be at least 0"),
        (lambda: at.causal_mask(3, 8, offset=6), ValueError, "offset (6) + n_queries (3) must not exceed n_keys (8)"),
        (lambda: at.causal_mask(0), ValueError, "n_queries (0) must be at least 1"),
        (lambda: at.causal_mask_from_positions(torch.arange(3.0), torch.arange(3)), TypeError, "q_pos must hold integer positions"),
        (lambda: at.repeat_kv(torch.zeros(2, 3, 4), 2), ValueError, "x must have shape (B, H_kv, S, D_h)"),
        (lambda: at.repeat_kv(torch.zeros(1, 2, 3, 4), 0), ValueError, "n_rep (0) must be at least 1"),
        (lambda: at.sliding_window_mask(4, window=0), ValueError, "window (0) must be at least 1"),
        (lambda: at.sliding_window_mask(4, 3, window=2), ValueError, "n_keys (3) must be at least n_queries (4)"),
        (lambda: at.attention_backward(Q, K, V, torch.zeros(2, 3, 4)), ValueError, "grad_out must have the output's shape"),
        (lambda: at.attention_backward(torch.zeros(1, 4, 3, 8), torch.zeros(1, 3, 3, 8), torch.zeros(1, 3, 3, 8),
                                       torch.zeros(1, 4, 3, 8)), ValueError, "must be a multiple of the key/value heads"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
