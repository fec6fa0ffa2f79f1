"""course_lib.heads: captured attention weights equal Hugging Face's (output_attentions, eager) and
reproduce each block's attention output; the model is left as it was; head scores on hand-made
patterns; clear errors."""

import copy

import pytest
import torch

from course_lib.config import ModelConfig
from course_lib.heads import (ablate_heads, attention_weights, diagonal_score, induction_score,
                              prefix_matching_score, previous_token_score, repeat_targets, uniform_baseline)
from course_lib.model import DecoderLM
from course_lib.positional import rope_cos_sin


def model_of(seed=0, **changes):
    base = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64)
    torch.manual_seed(seed)
    model = DecoderLM(ModelConfig(**{**base, **changes})).eval()
    with torch.no_grad():  # larger weights than GPT-2's init: sharp, distinct attention patterns
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)
    return model


def ids_of(B=2, T=10, V=50, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_weights_match_hugging_face_output_attentions():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=61, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                                      rms_norm_eps=1e-5, eos_token_id=None)
    config._attn_implementation = "eager"  # the implementation that returns its weights
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.2)
    ours = DecoderLM.from_hf(hf)
    ids = ids_of(B=2, T=11, V=61)
    with torch.no_grad():
        expected = torch.stack(hf(ids, output_attentions=True).attentions)  # (N, B, H, T, T)
    got = attention_weights(ours, ids)
    assert got.shape == (3, 2, 6, 11, 11)
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("changes", [
    {},  # RoPE, GQA, pre-norm RMSNorm
    {"placement": "post"},
    {"positional": "learned", "norm": "layer", "ffn": "gelu", "bias": True, "n_kv_heads": 4},
    {"positional": "none", "n_kv_heads": 1},
])
def test_weights_reproduce_every_blocks_attention_output(changes):
    model = model_of(**changes)
    ids = ids_of()
    weights = attention_weights(model, ids)  # (N, B, H, T, T)
    B, T = ids.shape
    c = model.config
    assert weights.shape == (c.n_layers, B, c.n_heads, T, T)
    assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-5)  # each row a distribution
    assert (weights.triu(1) == 0).all()  # causal: no weight on later keys
    with torch.no_grad():
        x = model.embed(ids)  # (B, T, D)
        if c.positional == "learned":
            x = x + model.pos_embed(torch.arange(T))
        cos = sin = None
        if c.positional == "rope":
            cos, sin = rope_cos_sin(torch.arange(T), c.head_dim, c.rope_theta)
        for layer, block in enumerate(model.blocks):
            attn_in = block.attn_norm(x) if c.placement == "pre" else x
            expected = block.attention(attn_in, cos, sin)  # (B, T, D): the block's own sublayer
            _, _, v = block.attn.project_qkv(attn_in, cos, sin)  # (B, H_kv, T, D_h)
            v = v.repeat_interleave(block.attn.n_rep, dim=1)  # (B, H, T, D_h)
            heads = weights[layer] @ v  # (B, H, T, D_h)
            rebuilt = block.attn.w_o(heads.transpose(1, 2).reshape(B, T, -1))  # (B, T, D)
            assert torch.allclose(rebuilt, expected, atol=1e-5), layer
            x = block(x, cos, sin)


def test_the_model_is_left_as_it_was():
    model = model_of()
    ids = ids_of()
    with torch.no_grad():
        before = model(ids)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    attention_weights(model, ids)
    assert all(len(block._forward_pre_hooks) == 0 for block in model.blocks)  # hooks removed
    with torch.no_grad():
        assert torch.equal(model(ids), before)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    model.train()
    attention_weights(model, ids)
    assert model.training  # the mode is not changed either


def test_hooks_are_removed_when_the_forward_pass_fails():
    model = model_of()
    with pytest.raises(Exception):
        attention_weights(model, torch.full((1, 4), 999))  # an id outside the vocabulary
    assert all(len(block._forward_pre_hooks) == 0 for block in model.blocks)


def causal_uniform(T):
    w = torch.tril(torch.ones(T, T))
    return w / w.sum(-1, keepdim=True)  # (T, T): row t spreads over t + 1 keys


def shifted(T, offset, first=0):
    """Row t puts all its weight on key t − offset (rows before `first` and t < offset: on itself)."""
    w = torch.zeros(T, T)
    for t in range(T):
        w[t, t - offset if t >= max(offset, first) else t] = 1.0
    return w


def test_scores_on_hand_made_patterns():
    T, L = 12, 6
    previous = shifted(T, 1)
    induction = shifted(T, L - 1, first=L)
    uniform = causal_uniform(T)
    weights = torch.stack([previous, induction, uniform])[None, None].expand(2, 3, 3, T, T)  # (N, B, H, T, T)
    prev_scores = previous_token_score(weights)
    match_scores = prefix_matching_score(weights, L)
    assert prev_scores.shape == match_scores.shape == (2, 3)
    assert torch.allclose(prev_scores[:, 0], torch.ones(2)) and torch.allclose(match_scores[:, 1], torch.ones(2))
    assert torch.allclose(match_scores[:, 0], torch.zeros(2))  # a previous-token head does not match prefixes
    assert prev_scores[0, 1] == 0  # nor the reverse
    expected_uniform = torch.tensor([1 / (t + 1) for t in range(1, T)]).mean()
    assert torch.allclose(prev_scores[:, 2], expected_uniform)
    assert torch.allclose(diagonal_score(weights, 0)[:, 2], torch.tensor([1 / (t + 1) for t in range(T)]).mean())


def test_scores_average_over_the_batch():
    T = 8
    weights = torch.stack([shifted(T, 1), causal_uniform(T)])[None, :, None]  # (1, B=2, H=1, T, T)
    expected = (1 + torch.tensor([1 / (t + 1) for t in range(1, T)]).mean()) / 2
    assert torch.allclose(previous_token_score(weights), expected.reshape(1, 1))


@pytest.mark.parametrize("call, fragment", [
    (lambda w: diagonal_score(w, 8), r"offset \(8\)"),
    (lambda w: diagonal_score(w, -1), r"offset \(-1\)"),
    (lambda w: diagonal_score(w, 2, first_query=1), r"first_query \(1\)"),
    (lambda w: prefix_matching_score(w, 8), r"half_len \(8\)"),
    (lambda w: prefix_matching_score(w, 1), r"half_len \(1\)"),
    (lambda w: previous_token_score(w[..., :3]), "weights must be attention weights"),
])
def test_bad_arguments_are_named(call, fragment):
    weights = causal_uniform(8)[None, None, None]
    with pytest.raises(ValueError, match=fragment):
        call(weights)


def test_bad_model_or_ids():
    with pytest.raises(ValueError, match="ids must be a"):
        attention_weights(model_of(), torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="DecoderLM"):
        attention_weights(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))


# --- natural-text induction and ablation ------------------------------------------------------------

def test_uniform_baseline_averages_over_the_scored_queries_only():
    assert uniform_baseline(48, 24) == pytest.approx(sum(1 / (t + 1) for t in range(24, 48)) / 24)
    assert uniform_baseline(48, 24) < uniform_baseline(48, 1) < uniform_baseline(48, 0)
    A = torch.tril(torch.ones(48, 48))
    A = (A / A.sum(-1, keepdim=True))[None, None, None]  # (1, 1, 1, T, T): even spread
    assert previous_token_score(A).item() == pytest.approx(uniform_baseline(48, 1))
    assert prefix_matching_score(A, 24).item() == pytest.approx(uniform_baseline(48, 24))


def test_repeat_targets_point_after_earlier_occurrences():
    ids = torch.tensor([[1, 2, 3, 4, 9, 1, 2, 3, 4]])
    assert repeat_targets(ids, 3)[0].nonzero().tolist() == [[7, 3], [8, 4]]
    # on r ‖ r every query of the second copy has exactly the prefix-matching target
    r = torch.randperm(20)[None]
    targets = repeat_targets(torch.cat([r, r], dim=1), 2)[0]
    L = 20
    expected = torch.zeros(2 * L, 2 * L, dtype=torch.bool)
    for t in range(L + 1, 2 * L):
        expected[t, t - L + 1] = True
    assert torch.equal(targets, expected)


def test_induction_score_equals_prefix_matching_on_repeated_sequences():
    torch.manual_seed(0)
    L = 12
    r = torch.randperm(30)[:L][None]
    ids = torch.cat([r, r], dim=1)  # (1, 2L)
    weights = torch.rand(2, 1, 3, 2 * L, 2 * L).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    scores, baseline = induction_score(weights, ids, n=1)
    torch.testing.assert_close(scores, prefix_matching_score(weights, L))
    assert baseline == pytest.approx(uniform_baseline(2 * L, L))
    with pytest.raises(ValueError, match="no query"):
        induction_score(weights, torch.arange(2 * L)[None], n=2)


def _model():
    torch.manual_seed(0)
    return DecoderLM(ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                 d_ff=64, max_seq_len=32, init_std=0.2)).eval()


def test_ablating_a_head_equals_zeroing_its_columns_of_w_o():
    model = _model()
    ids = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        with ablate_heads(model, [(1, 2), (0, 0)]):
            ablated = model(ids)
        plain = model(ids)
        edited = copy.deepcopy(model)
        D_h = edited.blocks[0].attn.head_dim
        edited.blocks[1].attn.w_o.weight[:, 2 * D_h:3 * D_h] = 0
        edited.blocks[0].attn.w_o.weight[:, 0:D_h] = 0
        torch.testing.assert_close(ablated, edited(ids))
        assert not torch.allclose(ablated, plain)
        torch.testing.assert_close(model(ids), plain)  # hooks gone afterwards


def test_mean_ablation_keeps_the_heads_average_output():
    model = _model()
    ids = torch.randint(0, 50, (2, 16))
    seen = []
    observe = lambda module, args: seen.append(args[0].clone())  # noqa: E731 — what W_o reads
    D_h = model.blocks[0].attn.head_dim
    with torch.no_grad():
        handle = model.blocks[0].attn.w_o.register_forward_pre_hook(observe)
        model(ids)  # seen[0]: the heads as they are
        handle.remove()
        with ablate_heads(model, [(0, 1)], mode="mean"):
            handle = model.blocks[0].attn.w_o.register_forward_pre_hook(observe)  # runs after the ablation
            model(ids)  # seen[1]
            handle.remove()
    plain, ablated = seen
    head = slice(D_h, 2 * D_h)
    expected = plain[..., head].mean(dim=(0, 1)).expand_as(plain[..., head])  # constant: its mean
    torch.testing.assert_close(ablated[..., head], expected)
    torch.testing.assert_close(ablated[..., :D_h], plain[..., :D_h])  # the other heads untouched
    torch.testing.assert_close(ablated[..., 2 * D_h:], plain[..., 2 * D_h:])


def test_ablate_heads_refuses_heads_that_do_not_exist_and_cleans_up_on_errors():
    model = _model()
    with pytest.raises(ValueError, match=r"head \(2, 0\) does not exist"):
        with ablate_heads(model, [(2, 0)]):
            pass
    with pytest.raises(ValueError, match="mode"):
        with ablate_heads(model, [(0, 0)], mode="half"):
            pass
    with pytest.raises(RuntimeError):
        with ablate_heads(model, [(0, 0)]):
            raise RuntimeError
    assert all(not b.attn.w_o._forward_pre_hooks for b in model.blocks)
