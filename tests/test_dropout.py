"""Dropout (ModelConfig.dropout): off by default and validated; in training mode it drops the attention
weights (explicit and fused paths, the same weights from the same random state as PyTorch's
F.scaled_dot_product_attention), each residual branch and the blocks' input, with the 1/(1 − p)
rescaling that keeps expectations; in eval mode, in generation, and at p = 0 the model is exactly the
model without dropout, operation for operation."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib import attention as at
from course_lib import counting
from course_lib.block import TransformerBlock
from course_lib.checkpointing import checkpoint_blocks
from course_lib.config import PRESETS, ModelConfig
from course_lib.model import DecoderLM, config_from_hf

P = 0.3
BASE = dict(vocab_size=61, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32)
VARIANTS = {
    "modern": {},
    "gpt2": dict(norm="layer", ffn="gelu", positional="learned", bias=True, tie_embeddings=True),
    "post-norm-window": dict(placement="post", positional="sinusoidal", sliding_window=6),
}


def config(**changes) -> ModelConfig:
    return ModelConfig(**{**BASE, **changes})


def pair(p: float = P, **changes) -> tuple[DecoderLM, DecoderLM]:
    """A model with dropout p and the same model (same weights) without dropout."""
    torch.manual_seed(0)
    dropped = DecoderLM(config(dropout=p, **changes))
    plain = DecoderLM(config(**changes))
    plain.load_state_dict(dropped.state_dict())
    return dropped, plain


def ids(B: int = 3, T: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, BASE["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


def qkv(B=8, H=4, H_kv=2, T=16, S=16, D_h=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, D_h, generator=g), torch.randn(B, H_kv, S, D_h, generator=g),
            torch.randn(B, H_kv, S, D_h, generator=g))


# --- the setting -------------------------------------------------------------------------------------

def test_dropout_is_off_by_default_everywhere():
    assert config().dropout == 0.0
    assert all(c.dropout == 0.0 for c in PRESETS.values())
    assert at.GroupedQueryAttention(32, 4, 2).dropout == 0.0
    assert config().replace(dropout=0.1).replace(n_heads=2, n_kv_heads=2).dropout == 0.1


@pytest.mark.parametrize("value, error, words", [
    ("0.1", TypeError, "dropout must be a number"),
    (True, TypeError, "dropout must be a number"),
    (None, TypeError, "dropout must be a number"),
    (-0.1, ValueError, "dropout (-0.1) must be in [0, 1)"),
    (1.0, ValueError, "dropout (1.0) must be in [0, 1)"),
    (1.5, ValueError, "dropout (1.5) must be in [0, 1)"),
    (math.nan, ValueError, "dropout (nan) must be in [0, 1)"),
])
def test_bad_dropout_is_refused_with_the_rule(value, error, words):
    with pytest.raises(error) as info:
        config(dropout=value)
    assert words in str(info.value)
    with pytest.raises(error) as info:
        at.GroupedQueryAttention(32, 4, 2, dropout=value)
    assert words in str(info.value)
    q, k, v = qkv(B=1, T=3, S=3)
    with pytest.raises(error, match=r"dropout_p"):
        at.attention(q, k, v, causal=True, enable_gqa=True, dropout_p=value)
    with pytest.raises(error, match=r"dropout_p"):
        at.attention_reference(q, q, q, dropout_p=value)


def test_zero_and_integer_zero_are_accepted():
    assert config(dropout=0).dropout == 0
    assert DecoderLM(config(dropout=0)).blocks[0].dropout == 0.0


def test_dropout_adds_no_parameters():
    for p in (0.0, 0.5):
        c = config(dropout=p)
        with torch.device("meta"):
            model = DecoderLM(c)
        assert counting.count_params(c) == counting.count_params(config())
        assert counting.count_params(c).total == sum(t.numel() for t in model.parameters())


def test_repr_names_dropout_only_when_it_is_on():
    assert "dropout" not in repr(DecoderLM(config()))
    block = DecoderLM(config(dropout=0.1)).blocks[0]
    assert "dropout=0.1" in block.extra_repr() and "dropout=0.1" in block.attn.extra_repr()


# --- p = 0 and eval mode: exactly the model without dropout -------------------------------------------

class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("implementation", ["sdpa", "reference"])
def test_p0_runs_the_same_operations_in_training_and_eval_mode(variant, implementation):
    """No dropout operation at all at p = 0, no random number drawn: train mode == eval mode exactly."""
    torch.manual_seed(0)
    model = DecoderLM(config(**VARIANTS[variant]))
    x = ids()
    logs, outs = {}, {}
    for mode in ("train", "eval"):
        getattr(model, mode)()
        state = torch.get_rng_state()
        with _OpLog() as log:
            outs[mode] = model(x, implementation=implementation)
        assert torch.equal(torch.get_rng_state(), state)
        logs[mode] = log.ops
    assert logs["train"] == logs["eval"]
    assert not any("dropout" in op or "bernoulli" in op for op in logs["train"])
    assert torch.equal(outs["train"], outs["eval"])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("implementation", ["sdpa", "reference"])
def test_eval_mode_with_dropout_is_exactly_the_model_without(variant, implementation):
    dropped, plain = pair(**VARIANTS[variant])
    x = ids()
    dropped.eval(), plain.eval()
    torch.testing.assert_close(dropped(x, implementation=implementation),
                               plain(x, implementation=implementation), rtol=0, atol=0)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("implementation", ["sdpa", "reference"])
def test_training_mode_draws_a_new_mask_each_call(variant, implementation):
    dropped, plain = pair(**VARIANTS[variant])
    x = ids()
    dropped.train()
    first, second = dropped(x, implementation=implementation), dropped(x, implementation=implementation)
    assert not torch.allclose(first, second)
    assert not torch.allclose(first, plain.eval()(x, implementation=implementation))
    torch.manual_seed(3)
    again = dropped(x, implementation=implementation)
    torch.manual_seed(3)
    assert torch.equal(dropped(x, implementation=implementation), again)  # the global generator decides


# --- the attention weights ---------------------------------------------------------------------------

def test_explicit_path_zeroes_a_fraction_p_of_the_weights_and_rescales_the_rest():
    q, k, v = qkv(B=64, H=4, H_kv=4, T=32, S=32)
    mask = at.causal_mask(32)  # (T, S)
    weights = at.attention_reference(q, k, v, mask, return_weights=True)[1]  # (B, H, T, S)
    torch.manual_seed(0)
    out, dropped = at.attention_reference(q, k, v, mask, return_weights=True, dropout_p=P)
    allowed = mask.expand_as(weights)
    zeroed = (dropped == 0) & allowed
    n = allowed.sum().item()
    assert abs(zeroed.sum().item() / n - P) < 5 * math.sqrt(P * (1 - P) / n)
    assert (dropped[~allowed] == 0).all()  # a blocked key stays blocked
    kept = ~zeroed & allowed
    torch.testing.assert_close(dropped[kept], weights[kept] / (1 - P))  # inverted dropout
    torch.testing.assert_close(out, dropped @ v)  # the output is made of the dropped weights


def test_fused_path_drops_the_weights_too():
    """With V = I the output *is* the weight matrix: the fused kernel's dropped weights, seen directly."""
    T = 24
    q, k, _ = qkv(B=64, H=4, H_kv=4, T=T, S=T)
    eye = torch.eye(T).expand(64, 4, T, T)  # (B, H, S, D_v = S)
    weights = at.attention(q, k, eye, causal=True)  # (B, H, T, S)
    torch.manual_seed(0)
    dropped = at.attention(q, k, eye, causal=True, dropout_p=P)  # (B, H, T, S)
    allowed = at.causal_mask(T).expand_as(weights)
    zeroed = (dropped == 0) & allowed
    n = allowed.sum().item()
    assert abs(zeroed.sum().item() / n - P) < 5 * math.sqrt(P * (1 - P) / n)
    kept = ~zeroed & allowed
    torch.testing.assert_close(dropped[kept], weights[kept] / (1 - P))


@pytest.mark.parametrize("implementation", ["sdpa", "reference"])
def test_the_output_is_preserved_in_expectation(implementation):
    q, k, v = qkv(B=2, T=6, S=6)
    want = at.attention(q, k, v, causal=True, enable_gqa=True, implementation=implementation)
    torch.manual_seed(0)
    draws = torch.stack([at.attention(q, k, v, causal=True, enable_gqa=True, dropout_p=P,
                                      implementation=implementation) for _ in range(4000)])
    mean, sem = draws.mean(0), draws.std(0) / math.sqrt(len(draws))
    assert not torch.allclose(draws[0], want)
    assert ((mean - want).abs() <= 5 * sem + 1e-6).float().mean() > 0.99  # within 5 standard errors


@pytest.mark.parametrize("causal, window", [(True, None), (False, None), (False, 4)])
def test_same_random_state_same_weights_dropped_as_pytorch(causal, window):
    """From the same random state, the explicit path drops exactly the weights PyTorch's own
    F.scaled_dot_product_attention drops (CPU: its math kernel, which runs dropout on the weights)."""
    q, k, v = qkv(B=2, T=10, S=10)
    mask = at.sliding_window_mask(10, window=window) if window else None
    kv = at.repeat_kv(k, 2), at.repeat_kv(v, 2)
    torch.manual_seed(7)
    theirs = F.scaled_dot_product_attention(q, *kv, attn_mask=mask, is_causal=causal, dropout_p=P)
    for implementation in ("reference", "sdpa"):
        torch.manual_seed(7)
        ours = at.attention(q, k, v, mask, causal=causal, enable_gqa=True, dropout_p=P,
                            implementation=implementation)
        torch.testing.assert_close(ours, theirs)
    torch.manual_seed(8)
    assert not torch.allclose(at.attention(q, *kv, mask, causal=causal, dropout_p=P), theirs)


@pytest.mark.parametrize("variant", VARIANTS)
def test_explicit_and_fused_models_drop_the_same_elements(variant):
    """The whole model in training mode: both paths draw their masks in the same order with the same
    shapes, so from the same seed they compute the same logits (and gradients)."""
    dropped, _ = pair(**VARIANTS[variant])
    dropped.train()
    x = ids()
    results = []
    for implementation in ("sdpa", "reference"):
        dropped.zero_grad()
        torch.manual_seed(11)
        logits = dropped(x, implementation=implementation)
        logits.logsumexp(-1).mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in dropped.parameters()]))
    (a, grads_a), (b, grads_b) = results
    torch.testing.assert_close(a, b)
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(ga, gb)


def test_attention_module_drops_in_training_mode_only():
    attn = at.GroupedQueryAttention(32, 4, 2, dropout=P)
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(0))
    attn.eval()
    plain = at.GroupedQueryAttention(32, 4, 2).eval()
    plain.load_state_dict(attn.state_dict())
    assert torch.equal(attn(x), plain(x))
    attn.train()
    assert not torch.allclose(attn(x), plain(x))


# --- the residual branches and the embeddings --------------------------------------------------------

def test_residual_branches_are_dropped_with_rescaling():
    block = TransformerBlock(config(dropout=P, positional="none"))
    branch = torch.ones(64, 32, 32)
    assert block.eval().drop_branch(branch) is branch  # eval mode: the tensor itself
    torch.manual_seed(0)
    dropped = block.train().drop_branch(branch)
    torch.testing.assert_close(dropped.unique(), torch.tensor([0.0, 1 / (1 - P)]))  # 0 or 1/(1 − p)
    assert abs((dropped == 0).float().mean().item() - P) < 0.01
    assert abs(dropped.mean().item() - 1) < 0.02  # the expectation is kept
    no_dropout = TransformerBlock(config(positional="none")).train()
    assert no_dropout.drop_branch(branch) is branch  # p = 0: the tensor itself, in any mode


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_a_block_with_only_residual_dropout_differs_from_the_plain_block(placement):
    """The attention weights alone are not all that is dropped: with the attention module's own p set
    to 0, the block still drops its branches."""
    torch.manual_seed(0)
    block = TransformerBlock(config(dropout=P, positional="none", placement=placement)).train()
    block.attn.dropout = 0.0
    plain = TransformerBlock(config(positional="none", placement=placement)).train()
    plain.load_state_dict(block.state_dict())
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(block(x), plain(x))
    assert torch.equal(block.eval()(x), plain(x))


def test_the_blocks_input_is_dropped():
    """GPT-2's embedding dropout: the first block reads the embeddings (plus positions) dropped."""
    dropped, plain = pair(**VARIANTS["gpt2"])
    seen = {}
    for name, model in (("dropped", dropped), ("plain", plain)):
        model.blocks[0].register_forward_pre_hook(lambda m, args, name=name: seen.__setitem__(name, args[0]))
    x = ids(B=64, T=32)
    plain.eval()(x)
    torch.manual_seed(0)
    dropped.train()(x)
    zeroed = seen["dropped"] == 0
    assert abs(zeroed.float().mean().item() - P) < 0.01
    torch.testing.assert_close(seen["dropped"][~zeroed], seen["plain"][~zeroed] / (1 - P))


def test_activation_checkpointing_replays_the_same_masks():
    dropped, _ = pair()
    dropped.train()
    x = ids()
    grads = []
    for enabled in (False, True):
        checkpoint_blocks(dropped, enabled)
        dropped.zero_grad()
        torch.manual_seed(5)
        dropped(x).logsumexp(-1).mean().backward()
        grads.append([p.grad.clone() for p in dropped.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


# --- generation --------------------------------------------------------------------------------------

def test_a_trained_model_with_dropout_generates_deterministically():
    dropped, _ = pair(p=0.2)
    optimizer = torch.optim.AdamW(dropped.parameters(), lr=1e-2)
    x = ids(B=4, T=16)
    dropped.train()
    for _ in range(3):
        logits = dropped(x[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dropped.blocks[1].eval()  # a submodule in its own mode: generate must leave it so
    modes = [m.training for m in dropped.modules()]
    prompt = x[:2, :5]
    outs = [dropped.generate(prompt, 10), dropped.generate(prompt, 10),
            dropped.generate(prompt, 10, use_cache=False), dropped.generate(prompt, 10, cache="concat")]
    assert [m.training for m in dropped.modules()] == modes  # each module's mode given back
    assert all(torch.equal(out, outs[0]) for out in outs)
    # greedy tokens of the eval-mode model, step by step
    dropped.eval()
    seq = prompt
    with torch.no_grad():
        for _ in range(10):
            seq = torch.cat([seq, dropped(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(seq, outs[0])
    sampled = [dropped.train().generate(prompt, 8, temperature=1.0,
                                        generator=torch.Generator().manual_seed(4)) for _ in range(2)]
    assert torch.equal(*sampled)


# --- Hugging Face ------------------------------------------------------------------------------------

def test_hugging_face_attention_dropout_is_not_mapped():
    from transformers import LlamaConfig

    hf = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     attention_dropout=0.1)
    assert config_from_hf(hf).dropout == 0.0
