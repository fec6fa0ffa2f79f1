"""The speedrun's ingredients (chapter 13): ReLU², QK-norm, zero-initialised output projections,
logit soft-capping, the linear cool-down, Muon as a run's optimiser, and evaluation at a context of
its own. Each off by default; each checked against its formula, an independent reference where one
exists (Hugging Face's Qwen3, whose attention normalises q and k per head before RoPE), and the
properties the chapter states."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import GroupedQueryAttention
from course_lib.config import ModelConfig
from course_lib.counting import count_params
from course_lib.ffn import FeedForward, ffn_params, relu_squared
from course_lib.kv_cache import KVCache
from course_lib.model import DecoderLM, _hf_name, bigram_rows, trigram_rows
from course_lib.positional import rope_cos_sin
from course_lib.training import Trainer, TrainConfig, evaluate, get_preset, lr_at, make_optimizer
from course_lib.training.muon import CombinedOptimizer

SMALL = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                    max_seq_len=64, tie_embeddings=True, init_std=0.1)


# ------------------------------------------------------------------------------------------- ReLU²

def test_relu_squared_is_relu_times_itself_and_the_module_agrees():
    x = torch.randn(4, 7, 16, dtype=torch.float64)
    assert torch.equal(relu_squared(x), F.relu(x) ** 2)
    assert torch.equal(relu_squared(torch.tensor([-2.0, 0.0, 3.0])), torch.tensor([0.0, 0.0, 9.0]))
    ffn = FeedForward(16, 48, activation="relu2").double()
    explicit = relu_squared(x @ ffn.w_up.weight.T) @ ffn.w_down.weight.T
    torch.testing.assert_close(ffn(x), explicit, rtol=1e-12, atol=1e-12)


def test_relu2_model_counts_like_relu():
    config = SMALL.replace(ffn="relu2")
    model = DecoderLM(config)
    assert count_params(config).total == sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert ffn_params(32, 64, "relu2") == ffn_params(32, 64, "relu") == 2 * 32 * 64
    assert count_params(config).total == count_params(SMALL.replace(ffn="relu")).total


# ------------------------------------------------------------------------------------------ QK-norm

def test_qk_norm_gives_every_query_and_key_rms_one_with_and_without_rope():
    torch.manual_seed(0)
    attn = GroupedQueryAttention(32, 4, 2, qk_norm=True)
    x = torch.randn(2, 9, 32) * 5
    cos, sin = rope_cos_sin(torch.arange(9), 8)
    for tables in ((None, None), (cos, sin)):
        q, k, v = attn.project_qkv(x, *tables)  # (B, H, T, D_h), (B, H_kv, T, D_h) ×2
        for t in (q, k):
            torch.testing.assert_close(t.pow(2).mean(-1), torch.ones(t.shape[:-1]), rtol=1e-4, atol=1e-4)
        assert not torch.allclose(v.pow(2).mean(-1), torch.ones(v.shape[:-1]), atol=0.1)  # v untouched
    plain = GroupedQueryAttention(32, 4, 2)
    plain.load_state_dict(attn.state_dict())  # qk_norm adds no parameter
    assert not torch.allclose(plain(x), attn(x))


def test_qk_norm_bounds_every_score_by_sqrt_head_dim():
    torch.manual_seed(1)
    attn = GroupedQueryAttention(32, 4, 4, qk_norm=True)
    q, k, _ = attn.project_qkv(torch.randn(1, 16, 32) * 100)
    scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)  # (1, H, T, T)
    assert scores.abs().max() <= math.sqrt(attn.head_dim) * (1 + 1e-5)


def test_qk_norm_model_matches_hugging_face_qwen3():
    """Qwen3 normalises each head's q and k (RMSNorm with a gain that starts at 1) before RoPE: with
    those gains at 1 our qk_norm model must compute its logits."""
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.Qwen3Config(
        vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False)
    torch.manual_seed(2)
    hf = transformers.Qwen3ForCausalLM(hf_config).eval()
    config = SMALL.replace(norm_eps=1e-6, qk_norm=True, init_std=0.02)
    ours = DecoderLM(config).eval()
    state, qkv = {}, {}
    for name, tensor in hf.state_dict().items():
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            assert torch.equal(tensor, torch.ones_like(tensor))  # gains at 1: ours has none
            continue
        target = _hf_name(name)
        if isinstance(target, tuple):
            qkv.setdefault(target[0], {})[target[1]] = tensor
        else:
            state[target] = tensor
    for target, parts in qkv.items():
        state[target] = torch.cat([parts["q"], parts["k"], parts["v"]])
    state.setdefault("lm_head.weight", state["embed.weight"])
    ours.load_state_dict(state, strict=True)
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, rtol=1e-5, atol=1e-5)
        plain = DecoderLM(config.replace(qk_norm=False)).eval()
        plain.load_state_dict(state, strict=True)
        assert not torch.allclose(plain(ids), hf(ids).logits, atol=1e-3)  # the test can tell


def test_qk_norm_cached_decoding_equals_the_whole_sequence():
    torch.manual_seed(4)
    model = DecoderLM(SMALL.replace(qk_norm=True)).eval()
    ids = torch.randint(0, 40, (2, 10))
    c = model.config
    cache = KVCache(n_layers=c.n_layers, batch=2, n_kv_heads=c.n_kv_heads, head_dim=c.head_dim, max_len=10)
    with torch.no_grad():
        whole = model(ids)
        steps = torch.cat([model(ids[:, :6], cache=cache)] +
                          [model(ids[:, t:t + 1], cache=cache) for t in range(6, 10)], dim=1)
    torch.testing.assert_close(steps, whole, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------- zero-initialised outputs

def test_zero_init_out_starts_every_block_as_the_identity_and_still_learns():
    torch.manual_seed(5)
    model = DecoderLM(SMALL.replace(zero_init_out=True))
    for block in model.blocks:
        assert not block.attn.w_o.weight.any() and not block.ffn.w_down.weight.any()
        assert block.attn.w_qkv.weight.std() > 0.05  # the others keep σ
    ids = torch.randint(0, 40, (2, 8))
    x = model.embed(ids)
    torch.testing.assert_close(model(ids), model.lm_head(model.norm(x)))  # blocks add nothing yet
    F.cross_entropy(model(ids).flatten(0, 1), ids.roll(-1, 1).flatten()).backward()
    for block in model.blocks:  # the zero matrices still receive gradient
        assert block.attn.w_o.weight.grad.abs().sum() > 0 and block.ffn.w_down.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------- logit soft-capping

def test_logit_softcap_is_c_tanh_of_the_uncapped_logits_and_bounded():
    torch.manual_seed(6)
    capped = DecoderLM(SMALL.replace(logit_softcap=2.0, init_std=0.5))
    plain = DecoderLM(SMALL.replace(init_std=0.5))
    plain.load_state_dict(capped.state_dict())  # no parameter of its own
    ids = torch.randint(0, 40, (2, 8))
    with torch.no_grad():
        z, capped_z = plain(ids), capped(ids)
    assert z.abs().max() > 2.0  # the cap has something to bound
    torch.testing.assert_close(capped_z, 2.0 * torch.tanh(z / 2.0))
    assert capped_z.abs().max() < 2.0


@pytest.mark.parametrize("bad, error", [(0.0, ValueError), (-1.0, ValueError), (math.inf, ValueError),
                                        (True, TypeError), ("30", TypeError)])
def test_logit_softcap_refuses_bad_values_naming_the_field(bad, error):
    with pytest.raises(error, match="logit_softcap"):
        SMALL.replace(logit_softcap=bad)


@pytest.mark.parametrize("field", ["qk_norm", "zero_init_out"])
def test_flags_must_be_booleans(field):
    with pytest.raises(TypeError, match=field):
        SMALL.replace(**{field: 1})


# ------------------------------------------------------------------------------ linear cool-down

def test_linear_cooldown_holds_the_rate_then_falls_linearly_to_min_lr():
    kw = dict(lr=1.0, min_lr=0.1, warmup_steps=10, total_steps=100)
    rates = [lr_at(s, cooldown=0.4, **kw) for s in range(101)]
    assert rates[:10] == [lr_at(s, **kw) for s in range(10)]  # the same warmup
    assert all(r == 1.0 for r in rates[10:60])  # stable until S − C = 60
    assert rates[100] == pytest.approx(0.1) and rates[80] == pytest.approx(0.55)
    steps = [rates[s] - rates[s + 1] for s in range(60, 100)]
    assert all(d == pytest.approx(0.9 / 40) for d in steps)  # one slope
    # cool-down over everything after warmup: starts at the warmup's end
    assert lr_at(10, cooldown=1.0, **kw) == 1.0 and lr_at(55, cooldown=1.0, **kw) == pytest.approx(0.55)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, math.nan])
def test_cooldown_must_be_a_fraction(bad):
    with pytest.raises(ValueError, match="cooldown"):
        TrainConfig(cooldown=bad)


# ------------------------------------------------------------------------- Muon as the optimiser

def test_muon_run_trains_and_resumes_exactly(tmp_path):
    model_config, run = get_preset("tiny")
    run = run.replace(optimizer="muon", steps=12, eval_interval=6, cooldown=0.5)
    data = torch.randint(0, 65, (5000,), generator=torch.Generator().manual_seed(0))
    whole = Trainer(_seeded(model_config), data[:4000], data[4000:], run, progress=False)
    assert isinstance(whole.optimizer, CombinedOptimizer)
    whole.train()
    assert whole.step_losses[-1] < whole.step_losses[0]
    a = Trainer(_seeded(model_config), data[:4000], data[4000:], run, progress=False)
    a.train(until=6)
    a.save(tmp_path / "ckpt.pt")
    b = Trainer.from_checkpoint(tmp_path / "ckpt.pt", _seeded(model_config, 999), data[:4000], data[4000:], run,
                                progress=False)
    b.train()
    assert len(b.step_losses) == 12 and b.step_losses == whole.step_losses  # momentum restored too


def _seeded(config, seed=7):
    torch.manual_seed(seed)
    return DecoderLM(config)


def test_make_optimizer_gives_muon_the_block_matrices_only():
    model = DecoderLM(SMALL)
    opt = make_optimizer(model, TrainConfig(optimizer="muon"))
    muon_params = {id(p) for g in opt.optimizers["muon"].param_groups for p in g["params"]}
    blocks = {id(m.weight) for m in model.blocks.modules() if isinstance(m, torch.nn.Linear)}
    assert muon_params == blocks
    assert id(model.embed.weight) not in muon_params


def test_optimizer_is_validated_and_muon_refuses_float16():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="sgd")
    model_config, run = get_preset("tiny")
    data = torch.randint(0, 65, (3000,))
    with pytest.raises(ValueError, match="muon.*float16|float16.*muon"):
        Trainer(DecoderLM(model_config), data, data, run.replace(optimizer="muon", precision="float16"),
                progress=False)


# ------------------------------------------------------------------------ evaluation's own context

def test_eval_context_sets_the_evaluation_windows():
    model_config, run = get_preset("tiny")
    data = torch.randint(0, 65, (4000,), generator=torch.Generator().manual_seed(1))
    model = _seeded(model_config)
    trainer = Trainer(model, data, data[:1000], run.replace(eval_context=16), progress=False)
    assert trainer.evaluate() == evaluate(model, data[:1000], 16, run.eval_batch_size)
    assert trainer.evaluate() != evaluate(model, data[:1000], 32, run.eval_batch_size)
    with pytest.raises(ValueError, match="eval_context"):
        Trainer(model, data, data, run.replace(eval_context=64), progress=False)
    with pytest.raises(ValueError, match="eval_context"):
        TrainConfig(eval_context=0)


# ------------------------------------------------------------------------------- a bigram embedding

BIGRAM = SMALL.replace(bigram_embed=True)


def _with_random_ngram_tables(config: ModelConfig = BIGRAM, seed: int = 0) -> DecoderLM:
    """The model of ``config`` in eval mode, its bigram and trigram tables (those it has) drawn
    at random instead of zero, so that reading a wrong row shows."""
    torch.manual_seed(seed)
    model = DecoderLM(config).eval()
    with torch.no_grad():
        for name in ("bigram", "trigram"):
            if hasattr(model, name):
                getattr(model, name).weight.normal_(0, 0.5)
    return model


def _first_block_input(model: DecoderLM, ids: torch.Tensor) -> torch.Tensor:
    """What the first block receives for ``ids``: the embedding with every table added."""
    seen = {}
    hook = model.blocks[0].register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    with torch.no_grad():
        model(ids)
    hook.remove()
    return seen["x"]


def test_each_position_reads_the_row_of_its_previous_token_and_itself():
    V = BIGRAM.vocab_size
    model = DecoderLM(BIGRAM)
    ids = torch.tensor([[3, 5, 7], [0, 0, V - 1]])
    rows = bigram_rows(model._earlier_ids(ids, None), V)
    assert rows.tolist() == [[V * V + 3, 3 * V + 5, 5 * V + 7], [V * V + 0, 0 * V + 0, 0 * V + V - 1]]
    assert model.bigram.weight.shape == ((V + 1) * V, BIGRAM.d_model)
    # the embedding the blocks see is E[id] + B[row]
    model = _with_random_ngram_tables()
    expected = model.embed(ids) + model.bigram.weight[rows]
    torch.testing.assert_close(_first_block_input(model, ids), expected)


@pytest.mark.parametrize("cache", ["preallocated", "concat"])
def test_cached_decoding_with_a_bigram_table_matches_decoding_without_a_cache(cache):
    """The cache carries the newest token, so that the first new position reads the right row; a
    window refilled from the text starts again from "no token", as every training window does."""
    model = _with_random_ngram_tables()
    prompt = torch.randint(0, BIGRAM.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    uncached = model.generate(prompt, 20, use_cache=False)
    assert torch.equal(model.generate(prompt, 20, cache=cache), uncached)
    # past the window (64): the cache is emptied and refilled, as the uncached window slides
    long = model.generate(prompt, 70, use_cache=False)
    assert torch.equal(model.generate(prompt, 70, cache=cache), long)


def test_a_cache_filled_without_its_newest_token_is_refused():
    model = _with_random_ngram_tables()
    cache = KVCache.for_model(BIGRAM, 1, 16)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), cache=cache)
        cache.last_ids = None  # as a cache filled by another model would be
        with pytest.raises(ValueError, match="bigram_embed or trigram_buckets"):
            model(torch.tensor([[4]]), cache=cache)
    cache.reset()
    assert cache.length == 0 and cache.last_ids is None


def test_the_bigram_table_is_counted_trained_by_adamw_and_only_its_used_rows_learn():
    V, D = BIGRAM.vocab_size, BIGRAM.d_model
    model = DecoderLM(BIGRAM)
    counts = count_params(BIGRAM)
    assert counts.bigram == (V + 1) * V * D and count_params(SMALL).bigram == 0
    assert counts.total == sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert counts.total - count_params(SMALL).total == counts.bigram
    optimizer = make_optimizer(model, TrainConfig(batch_size=2, context=8, optimizer="muon"))
    assert isinstance(optimizer, CombinedOptimizer)
    in_muon = {id(p) for g in optimizer.optimizers["muon"].param_groups for p in g["params"]}
    assert id(model.bigram.weight) not in in_muon  # an embedding: AdamW's, like the token table
    ids = torch.tensor([[3, 5, 7, 5]])
    F.cross_entropy(model(ids).flatten(0, 1), torch.tensor([5, 7, 5, 3])).backward()
    used = {V * V + 3, 3 * V + 5, 5 * V + 7, 7 * V + 5}
    nonzero = set(torch.nonzero(model.bigram.weight.grad.abs().sum(-1)).flatten().tolist())
    assert nonzero == used  # the rows of the pairs present, and no others


# ----------------------------------------------------------------------- a hashed trigram table

TRIGRAM = BIGRAM.replace(trigram_buckets=97)  # a prime, smaller than the 66·66·65 triples


def test_each_position_reads_the_trigram_row_of_its_two_previous_tokens_and_itself():
    V, R = TRIGRAM.vocab_size, TRIGRAM.trigram_buckets
    ids = torch.tensor([[3, 5, 7, 9]])
    earlier = torch.tensor([[V, V, 3, 5, 7, 9]])  # V: no token before the first
    assert torch.equal(DecoderLM(TRIGRAM)._earlier_ids(ids, None), earlier)
    triples = [(V * (V + 1) + V) * V + 3, (V * (V + 1) + 3) * V + 5, (3 * (V + 1) + 5) * V + 7,
               (5 * (V + 1) + 7) * V + 9]
    assert trigram_rows(earlier, V, R).tolist() == [[t % R for t in triples]]
    assert bigram_rows(earlier, V).tolist() == [[V * V + 3, 3 * V + 5, 5 * V + 7, 7 * V + 9]]
    # every triple has an index of its own: the (V + 1)²·V of them fill 0 … (V + 1)²·V − 1 once each
    a, b, c = torch.meshgrid(torch.arange(V + 1), torch.arange(V + 1), torch.arange(V), indexing="ij")
    every = trigram_rows(torch.stack([a.flatten(), b.flatten(), c.flatten()], 1), V, 10 ** 9)
    assert torch.equal(every.flatten().sort().values, torch.arange((V + 1) ** 2 * V))
    # the embedding the blocks see is E[id] + B[bigram row] + G[trigram row]
    model = _with_random_ngram_tables(TRIGRAM)
    assert model.trigram.weight.shape == (R, TRIGRAM.d_model)
    expected = (model.embed(ids) + model.bigram.weight[bigram_rows(earlier, V)]
                + model.trigram.weight[trigram_rows(earlier, V, R)])
    torch.testing.assert_close(_first_block_input(model, ids), expected)


@pytest.mark.parametrize("config, table, without", [(BIGRAM, "bigram", SMALL), (TRIGRAM, "trigram", BIGRAM)],
                         ids=["bigram", "trigram"])
def test_a_new_ngram_table_is_zero_so_the_model_starts_as_without_it(config, table, without):
    """A new table (bigram, or trigram beside a bigram one) is all zeros: the model's logits are
    those of the model without it, holding the same other weights."""
    model = DecoderLM(config)
    assert torch.count_nonzero(getattr(model, table).weight) == 0
    plain = DecoderLM(without)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith(table)})
    ids = torch.randint(0, config.vocab_size, (2, 16))
    torch.testing.assert_close(model(ids), plain(ids), rtol=0, atol=0)


@pytest.mark.parametrize("config", [TRIGRAM, SMALL.replace(trigram_buckets=50)], ids=["both", "trigram"])
@pytest.mark.parametrize("cache", ["preallocated", "concat"])
def test_cached_decoding_with_a_trigram_table_matches_decoding_without_a_cache(cache, config):
    """The cache carries the two newest tokens; a window refilled from the text starts again from
    "no token" twice, as every training window does."""
    model = _with_random_ngram_tables(config)
    prompt = torch.randint(0, config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    for new in (1, 20, 70):  # 70: past the window (64), where the cache is emptied and refilled
        assert torch.equal(model.generate(prompt, new, cache=cache), model.generate(prompt, new, use_cache=False))


def test_the_trigram_table_is_counted_trained_by_adamw_and_only_its_used_rows_learn():
    V, D, R = TRIGRAM.vocab_size, TRIGRAM.d_model, TRIGRAM.trigram_buckets
    model = DecoderLM(TRIGRAM)
    counts = count_params(TRIGRAM)
    assert counts.trigram == R * D and count_params(BIGRAM).trigram == 0
    assert counts.total == sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert counts.total - count_params(BIGRAM).total == counts.trigram
    assert "trigram" in counts.as_dict() and "trigram" not in count_params(BIGRAM).as_dict()
    optimizer = make_optimizer(model, TrainConfig(batch_size=2, context=8, optimizer="muon"))
    in_muon = {id(p) for g in optimizer.optimizers["muon"].param_groups for p in g["params"]}
    assert id(model.trigram.weight) not in in_muon  # a table: AdamW's
    ids = torch.tensor([[3, 5, 7, 5]])
    F.cross_entropy(model(ids).flatten(0, 1), torch.tensor([5, 7, 5, 3])).backward()
    used = set(trigram_rows(model._earlier_ids(ids, None), V, R).flatten().tolist())
    nonzero = set(torch.nonzero(model.trigram.weight.grad.abs().sum(-1)).flatten().tolist())
    assert nonzero == used  # the rows of the triples present, and no others


@pytest.mark.parametrize("value, error", [(0, ValueError), (-3, ValueError), (True, TypeError), (2.0, TypeError)])
def test_trigram_buckets_must_be_a_positive_int_or_none(value, error):
    with pytest.raises(error, match="trigram_buckets"):
        SMALL.replace(trigram_buckets=value)


def test_bigram_embed_must_be_a_bool():
    with pytest.raises(TypeError, match="bigram_embed"):
        SMALL.replace(bigram_embed="yes")
