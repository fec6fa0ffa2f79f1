"""Checkers for exercise 09 (the language model): the forward pass from token ids to logits, the
next-token distribution of a padded batch, and greedy generation."""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

from .. import model as ref
from .. import norms
from ..block import TransformerBlock
from ..config import ModelConfig
from ..positional import rope_cos_sin
from ._core import Case, Forbidden, Mistake, check_function, describe

__all__ = ["check_lm_forward", "check_next_token_probs", "check_greedy_generate"]

# float32 students must pass on float64 inputs too: the mistakes below differ by far more than this.
_RTOL, _ATOL = 1e-4, 1e-5


# --- Task 1: the forward pass --------------------------------------------------------------------------

class _GivenBlock:
    """A decoder block handed to the student as a plain callable x (B, T, D) → (B, T, D).

    It is a real course_lib TransformerBlock (RMSNorm, GQA with RoPE for positions 0 … T − 1, SwiGLU).
    Its own norms and attention run outside the delegation watcher: the student is allowed to call the
    blocks, just not a ready-made final norm or model.
    """

    def __init__(self, block: nn.Module, head_dim: int, rope_theta: float):
        self.block, self.head_dim, self.rope_theta = block, head_dim, rope_theta

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        watcher = sys.getprofile()
        sys.setprofile(None)
        try:
            cos, sin = rope_cos_sin(x.shape[1], self.head_dim, self.rope_theta, dtype=x.dtype,
                                    device=x.device)  # (T, D_h/2) each
            with torch.no_grad():
                return self.block(x, cos, sin)  # (B, T, D)
        finally:
            sys.setprofile(watcher)

    def __repr__(self) -> str:
        return "<decoder block: (B, T, D) -> (B, T, D)>"


def _lm_case(gen: torch.Generator, *, B: int, T: int, V: int, D: int, H: int, H_kv: int, n_layers: int,
             tie: bool, dtype: torch.dtype, eps: float, what: str) -> Case:
    """Random weights with a realistic scale: embeddings std 1 (so that a forgotten final norm shows),
    projections std 1/√fan_in, norm gains in [0.5, 1.5]."""
    config = ModelConfig(vocab_size=V, d_model=D, n_layers=max(n_layers, 1), n_heads=H, n_kv_heads=H_kv,
                         d_ff=2 * D, norm_eps=eps)
    blocks = []
    for _ in range(n_layers):
        module = TransformerBlock(config)
        with torch.no_grad():
            for p in module.parameters():
                if p.dim() == 1:
                    p.copy_(0.5 + torch.rand(p.shape, generator=gen))
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)
        blocks.append(_GivenBlock(module.to(dtype).eval(), config.head_dim, config.rope_theta))
    ids = torch.randint(0, V, (B, T), generator=gen)
    embedding = (2.0 * torch.randn(V, D, generator=gen, dtype=torch.float64)).to(dtype)
    norm_weight = (0.5 + torch.rand(D, generator=gen, dtype=torch.float64)).to(dtype)
    head_weight = (torch.randn(V, D, generator=gen, dtype=torch.float64) * D ** -0.5).to(dtype)
    label = (f"{what}: ids of shape {(B, T)}, embedding {describe(embedding)}, {n_layers} blocks, "
             f"norm_weight of shape {(D,)}, head_weight of shape {(V, D)}, tie_embeddings={tie}, eps={eps:g}")
    return Case(label, (ids, embedding, blocks, norm_weight, head_weight, tie), {"eps": eps})


def _lm_variant(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5, *,
                scale_embeddings=False, norm="rms", gain=True, norm_first=False, head="auto", softmax=False):
    """The forward pass with one mistake switched on."""
    x = embedding[ids]  # (B, T, D)
    if scale_embeddings:
        x = x * math.sqrt(embedding.shape[1])

    def final_norm(h):
        if norm == "none":
            return h
        if norm == "layer":
            h = h - h.mean(-1, keepdim=True)
        out = norms.rms_norm(h, None, eps)  # (B, T, D)
        return out * norm_weight if gain else out

    if norm_first:
        x = final_norm(x)
    for block in blocks:
        x = block(x)  # (B, T, D)
    if not norm_first:
        x = final_norm(x)
    table = {"auto": embedding if tie_embeddings else head_weight, "embedding": embedding,
             "head": head_weight}[head]
    logits = x @ table.T  # (B, T, V)
    return logits.softmax(-1) if softmax else logits


def _lm_reference(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5):
    return _lm_variant(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps)


def check_lm_forward(lm_forward) -> None:
    """Check ``lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5)``:
    logits = RMSNorm(block_N(… block_1(E[ids]))) · W_headᵀ, with W_head = E when tied."""
    gen = torch.Generator().manual_seed(909)
    f64, f32 = torch.float64, torch.float32
    cases = [
        _lm_case(gen, B=2, T=6, V=40, D=32, H=4, H_kv=2, n_layers=2, tie=False, dtype=f64, eps=1e-5,
                 what="an untied model"),
        _lm_case(gen, B=2, T=5, V=50, D=32, H=4, H_kv=2, n_layers=2, tie=True, dtype=f64, eps=1e-5,
                 what="a tied model"),
        _lm_case(gen, B=1, T=7, V=30, D=48, H=6, H_kv=1, n_layers=3, tie=True, dtype=f64, eps=1e-6,
                 what="a tied model with multi-query attention"),
        _lm_case(gen, B=3, T=1, V=20, D=16, H=2, H_kv=2, n_layers=1, tie=False, dtype=f64, eps=1e-5,
                 what="a single position"),
        _lm_case(gen, B=2, T=4, V=24, D=16, H=2, H_kv=1, n_layers=0, tie=False, dtype=f64, eps=1e-5,
                 what="no blocks at all"),
        _lm_case(gen, B=2, T=6, V=40, D=32, H=4, H_kv=2, n_layers=2, tie=False, dtype=f32, eps=1e-5,
                 what="float32"),
        _lm_case(gen, B=2, T=6, V=40, D=32, H=4, H_kv=4, n_layers=2, tie=True, dtype=f32, eps=1e-5,
                 what="a tied model in float32"),
    ]

    def variant(**knobs):
        return lambda *a, **k: _lm_variant(*a, **k, **knobs)

    mistakes = [
        Mistake("the final norm is missing: a pre-norm stack ends with an RMSNorm (with its gain "
                "norm_weight) between the last block and the LM head.", variant(norm="none")),
        Mistake("the final norm ignores its gain: multiply the normalised vector by norm_weight.",
                variant(gain=False)),
        Mistake("the final norm subtracts the mean (that is LayerNorm); Llama's final norm is RMSNorm: "
                "x / sqrt(mean(x²) + eps) · norm_weight.", variant(norm="layer")),
        Mistake("the final norm is applied before the blocks; it belongs after the last block, just before "
                "the LM head.", variant(norm_first=True)),
        Mistake("the model is untied although tie_embeddings is True: the LM head must reuse the embedding "
                "table (logits = h · embeddingᵀ), not head_weight.", variant(head="head")),
        Mistake("you used the embedding table as the LM head although tie_embeddings is False: use "
                "head_weight.", variant(head="embedding")),
        Mistake("the embeddings are multiplied by √D. The original Transformer does that; Llama and Mistral "
                "(and this task) use the rows of the table as they are.", variant(scale_embeddings=True)),
        Mistake("you returned probabilities (a softmax over the vocabulary); return the logits.",
                variant(softmax=True)),
    ]
    forbidden = [
        Forbidden(ref.DecoderLM.forward, "course_lib.model.DecoderLM"),
        Forbidden(norms.rms_norm, "course_lib.norms.rms_norm"),
        Forbidden(norms.RMSNorm.forward, "course_lib.norms.RMSNorm"),
        Forbidden(F.rms_norm, "torch.nn.functional.rms_norm"),
        Forbidden(torch.rms_norm, "torch.rms_norm"),
        Forbidden(nn.RMSNorm.forward, "torch.nn.RMSNorm"),
    ]
    check_function(lm_forward, _lm_reference, cases, task="lm_forward", mistakes=mistakes, forbidden=forbidden,
                   rtol=_RTOL, atol=_ATOL)


# --- Task 2: next-token probabilities of a padded batch ------------------------------------------------

def _probs_variant(logits, lengths, temperature=1.0, *, position="length", dim=-1, temp="divide", out="probs",
                   stable=True):
    B, T, V = logits.shape
    rows = torch.arange(B)
    if position == "softmax-over-time":  # normalised over the positions, then read
        return torch.softmax(logits / temperature, dim=1)[rows, lengths - 1]
    if position == "all-lengths":  # logits[:, lengths - 1]: every length for every sequence
        return torch.softmax(logits[:, lengths - 1] / temperature, dim=-1)  # (B, B, V)
    if position == "length":
        z = logits[rows, lengths - 1]  # (B, V)
    elif position == "length+1":
        z = logits[rows, lengths]  # one past the last real token
    elif position == "last":
        z = logits[:, -1]
    elif position == "first":
        z = logits[:, 0]
    z = {"divide": z / temperature, "multiply": z * temperature, "ignore": z}[temp]
    if out == "logits":
        return z
    if out == "log-probs":
        return torch.log_softmax(z, dim=-1)
    if not stable:
        e = torch.exp(z)
        return e / e.sum(dim, keepdim=True)
    return torch.softmax(z, dim=dim)


def _probs_reference(logits, lengths, temperature=1.0):
    return ref.next_token_probs(logits, temperature=temperature, lengths=lengths)


def check_next_token_probs(next_token_probs) -> None:
    """Check ``next_token_probs(logits, lengths, temperature=1.0)``: softmax(logits[b, lengths[b] − 1] / τ)
    over the vocabulary, one row per sequence."""
    gen = torch.Generator().manual_seed(919)
    cases = []
    for B, T, V, lengths, temperature, scale, dtype, what in [
        (3, 6, 10, [4, 2, 5], 1.0, 2.0, torch.float64, "a padded batch"),
        (2, 5, 7, [3, 5], 0.5, 2.0, torch.float64, "a padded batch at temperature 0.5"),
        (4, 4, 12, [1, 4, 2, 3], 2.0, 2.0, torch.float64, "a padded batch at temperature 2"),
        (2, 7, 9, [7, 7], 1.0, 2.0, torch.float64, "sequences without padding"),
        (1, 1, 5, [1], 1.0, 2.0, torch.float64, "a single one-token sequence"),
        (3, 5, 6, [2, 5, 1], 0.7, 300.0, torch.float64, "very large logits (hundreds)"),
        (3, 6, 10, [4, 6, 1], 1.5, 2.0, torch.float32, "float32 logits"),
        (5, 8, 5, [8, 3, 5, 1, 6], 1.0, 2.0, torch.float64, "more sequences than vocabulary entries"),
    ]:
        logits = (scale * torch.randn(B, T, V, generator=gen, dtype=torch.float64)).to(dtype)
        lengths = torch.tensor(lengths)
        cases.append(Case(f"{what}: logits {describe(logits)}, lengths of shape ({B},), temperature {temperature}",
                          (logits, lengths), {"temperature": temperature}))

    def variant(**knobs):
        return lambda logits, lengths, temperature=1.0: _probs_variant(logits, lengths, temperature, **knobs)

    mistakes = [
        Mistake("you read every sequence at the last position, T − 1. In a right-padded batch that is padding "
                "for the shorter sequences: read sequence b at lengths[b] − 1.", variant(position="last")),
        Mistake("logits[:, lengths - 1] picks every length for every sequence (shape (B, B, V)); pair each "
                "sequence with its own length: logits[torch.arange(B), lengths - 1].",
                variant(position="all-lengths")),
        Mistake("off by one: the next token after a sequence of length n is scored at position n − 1 (the "
                "logits at position t predict the token at t + 1).", variant(position="length+1")),
        Mistake("you read the first position; the next token is scored at each sequence's last real token.",
                variant(position="first")),
        Mistake("the softmax normalises over the wrong dimension: over the batch. Each row (the vocabulary, the "
                "last dimension) must sum to 1.", variant(dim=0)),
        Mistake("the softmax normalises over the positions; it must normalise over the vocabulary (the last "
                "dimension).", variant(position="softmax-over-time")),
        Mistake("the temperature multiplies the logits; divide them by it (τ < 1 sharpens).",
                variant(temp="multiply")),
        Mistake("the temperature is ignored: divide the logits by it before the softmax.", variant(temp="ignore")),
        Mistake("you returned the logits; return probabilities (softmax over the vocabulary).",
                variant(out="logits")),
        Mistake("you returned log-probabilities; return probabilities.", variant(out="log-probs")),
        Mistake("exp overflows for large logits: subtract each row's maximum before exponentiating (or use "
                "torch.softmax, which does).", variant(stable=False)),
    ]
    forbidden = [Forbidden(ref.next_token_probs, "course_lib.model.next_token_probs")]
    check_function(next_token_probs, _probs_reference, cases, task="next_token_probs", mistakes=mistakes,
                   forbidden=forbidden, rtol=_RTOL, atol=_ATOL)


# --- Task 3: greedy generation -------------------------------------------------------------------------

@torch.no_grad()
def _greedy_variant(model, ids, max_new_tokens, *, feed="all", position=-1, extra=0, keep_prompt=True):
    out = ids
    for _ in range(max_new_tokens + extra):
        logits = model(out if feed == "all" else ids)  # (B, T, V)
        next_id = logits[:, position].argmax(-1, keepdim=True)  # (B, 1)
        out = torch.cat([out, next_id], dim=1)
    return out if keep_prompt else out[:, ids.shape[1]:]


def _greedy_reference(model, ids, max_new_tokens):
    return model.model.generate(ids, max_new_tokens, use_cache=False)


def _demo_model(gen: torch.Generator, **changes) -> ref.DecoderLM:
    """A small DecoderLM with weights of a realistic scale (projections std 1/√fan_in), so that greedy
    choices are well separated."""
    shape = dict(vocab_size=37, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64)
    config = ModelConfig(**{**shape, **changes})
    model = ref.DecoderLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name == "embed.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)
    return model


class _Model:
    """The model as the student sees it: a callable ids (B, T) → logits (B, T, V)."""

    def __init__(self, model: ref.DecoderLM, what: str):
        self.model, self.what = model, what

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.model(ids)

    def __repr__(self) -> str:
        return f"<{self.what}: ids (B, T) -> logits (B, T, V)>"


def check_greedy_generate(greedy_generate) -> None:
    """Check ``greedy_generate(model, ids, max_new_tokens)``: append argmax(model(out)[:, −1]) that many
    times; return the prompt followed by the new tokens, (B, T + max_new_tokens)."""
    gen = torch.Generator().manual_seed(929)
    models = [
        _Model(_demo_model(gen), "a model with grouped-query attention"),
        _Model(_demo_model(gen, n_kv_heads=1, tie_embeddings=True), "a tied model with multi-query attention"),
        _Model(_demo_model(gen, sliding_window=4), "a model with a sliding window of 4"),
    ]
    cases = []
    for model, (B, T, n) in zip(models * 2, [(2, 4, 6), (1, 3, 8), (3, 5, 7), (2, 1, 5), (1, 6, 1), (2, 3, 0)]):
        ids = torch.randint(0, 37, (B, T), generator=gen)
        cases.append(Case(f"{model.what}, a prompt of shape {(B, T)}, max_new_tokens={n}", (model, ids, n)))

    def variant(**knobs):
        return lambda model, ids, n: _greedy_variant(model, ids, n, **knobs)

    mistakes = [
        Mistake("each step feeds only the prompt, so every step predicts the same token. Feed the whole "
                "sequence so far, including the tokens you generated.", variant(feed="prompt")),
        Mistake("you took the next token from the first position's logits; it comes from the last position "
                "(logits[:, -1]).", variant(position=0)),
        Mistake("you returned only the new tokens; return the prompt followed by them, shape "
                "(B, T + max_new_tokens).", variant(keep_prompt=False)),
        Mistake("one token too many: generate exactly max_new_tokens tokens.", variant(extra=1)),
        Mistake("one token too few: generate exactly max_new_tokens tokens.",
                lambda model, ids, n: _greedy_variant(model, ids, n)[:, :-1] if n else ids[:, :-1]),
    ]
    # generate is wrapped by torch.no_grad, whose wrapper code every decorated function shares: watch
    # the function itself
    forbidden = [Forbidden(ref.DecoderLM.generate.__wrapped__, "course_lib.model.DecoderLM.generate")]
    check_function(greedy_generate, _greedy_reference, cases, task="greedy_generate", mistakes=mistakes,
                   forbidden=forbidden)
