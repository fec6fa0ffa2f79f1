"""DecoderLM: a decoder-only language model built from the course's blocks, and loading Hugging Face's
Llama and Mistral checkpoints into it.

    ids (B, T) → token embedding (+ absolute positions) → N × TransformerBlock → final norm (pre-norm)
               → LM head → logits (B, T, V)

The logits at position t score the token at position t + 1: softmax over the last dimension gives the
next-token distribution (``next_token_probs`` reads it at each sequence's last position). ``generate``
decodes greedily or samples (temperature, top-k, top-p: ``sampling``), with or without a KV cache.

Dropout (``config.dropout`` = p > 0) acts in training mode only, where GPT-2 and nanoGPT put it:
on the block input (embeddings plus absolute positions), on attention's weights and on each
residual branch's output. ``generate`` always runs in eval mode: it never drops anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .block import TransformerBlock, apply_norm, build_norm
from .config import ModelConfig
from .embeddings import TokenEmbedding
from .init import gpt2_init_
from .kv_cache import ConcatKVCache, KVCache
from .positional import LearnedPositionalEmbedding, rope_cos_sin, sinusoidal_encoding
from .sampling import check_sampling_args, sample_next

__all__ = ["DecoderLM", "bigram_rows", "config_from_hf", "next_token_probs", "trigram_rows"]


def bigram_rows(earlier: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Row id_{t−1}·V + id_t of the bigram table for every position, (B, T), from ``earlier``
    (B, 2 + T): the two tokens before the first position (V: none), then the T tokens."""
    return earlier[:, 1:-1] * vocab_size + earlier[:, 2:]  # (B, T)


def trigram_rows(earlier: torch.Tensor, vocab_size: int, buckets: int) -> torch.Tensor:
    """Row ((id_{t−2}·(V + 1) + id_{t−1})·V + id_t) mod R of the hashed trigram table, (B, T):
    each of the (V + 1)²·V triples has an index of its own, and R rows take them in turn."""
    V = vocab_size
    triple = (earlier[:, :-2] * (V + 1) + earlier[:, 1:-1]) * V + earlier[:, 2:]  # (B, T)
    return triple % buckets  # (B, T)


class DecoderLM(nn.Module):
    """A decoder-only transformer language model described by a :class:`ModelConfig`.

    Modules: ``embed`` (V, D); ``pos_embed`` for learned positions; ``blocks``, N
    :class:`TransformerBlock`; ``norm``, the final norm of a pre-norm stack (a post-norm stack already
    ends normalised and has none); ``lm_head``, D → V, sharing ``embed``'s table when
    ``tie_embeddings``. Weights start as in GPT-2: N(0, σ²) with σ = ``config.init_std`` (0.02
    by default) for the token table, learned positions and every linear layer, σ/√(2N) for the
    residual output projections (``init.gpt2_init_``). With ``config.dropout`` = p > 0, training
    mode drops the blocks' input, attention's weights and each branch's output (probability p,
    survivors scaled by 1/(1 − p)); eval mode never does. ``config.zero_init_out`` starts
    ``w_o`` and ``w_down`` at zero instead; ``config.logit_softcap`` c bounds the logits as
    c·tanh(z/c). ``config.bigram_embed`` and ``config.trigram_buckets`` add the tables ``bigram``
    and ``trigram`` (zero at first) to the token embedding, read at each token and the one or two
    before it (:func:`bigram_rows`, :func:`trigram_rows`).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
        if config.positional == "alibi":
            raise ValueError(
                "positional='alibi' is taught in chapter 2 (positional.alibi_bias) but DecoderLM's blocks "
                "take RoPE tables or nothing; use 'rope', 'sinusoidal', 'learned' or 'none'"
            )
        self.config = config
        self.embed = TokenEmbedding(config.vocab_size, config.d_model, init_std=config.init_std)
        if config.bigram_embed:  # a row per (previous token or none, token), all zero at first
            self.bigram = nn.Embedding((config.vocab_size + 1) * config.vocab_size, config.d_model)
        if config.trigram_buckets:  # R rows shared by the (V + 1)²·V triples, all zero at first
            self.trigram = nn.Embedding(config.trigram_buckets, config.d_model)
        if config.positional == "learned":
            self.pos_embed = LearnedPositionalEmbedding(config.max_seq_len, config.d_model,
                                                        init_std=config.init_std)
        self.blocks = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.norm = build_norm(config) if config.placement == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        gpt2_init_(self, config.n_layers, std=config.init_std)
        if config.bigram_embed:  # after gpt2_init_, which draws every nn.Embedding
            nn.init.zeros_(self.bigram.weight)
        if config.trigram_buckets:
            nn.init.zeros_(self.trigram.weight)
        if config.zero_init_out:  # every block starts as the identity: x + 0 + 0
            with torch.no_grad():
                for block in self.blocks:
                    block.attn.w_o.weight.zero_()
                    block.ffn.w_down.weight.zero_()
        self.activation_checkpointing = False  # checkpointing.checkpoint_blocks turns it on (ch. 11)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight  # one (V, D) table for reading and writing tokens

    # --- forward ---------------------------------------------------------------------------------

    def forward(self, ids: torch.Tensor, *, positions: torch.Tensor | None = None,
                cache: KVCache | ConcatKVCache | None = None,
                implementation: str = "sdpa") -> torch.Tensor:
        """ids (B, T) of token indices → logits (B, T, V); softmax(logits[:, t]) is the
        model's distribution for the token at position t + 1.

            x = E[ids] (+ B[previous ids · V + ids]) (+ P[positions])
                                         →  x = block_ℓ(x), ℓ = 1 … N
                                         →  logits = Norm(x) W_headᵀ
                                            (→ c·tanh(logits / c) with ``logit_softcap`` c)

        ``positions`` (T,): the tokens' absolute positions for the position encoding,
        increasing (Hugging Face's ``position_ids``); the default is 0 … T − 1. The causal
        mask (and Mistral's sliding window) follows the order of the tokens, whatever
        their positions. With a ``cache`` the T tokens continue the cached sequence
        instead: they take positions ``cache.length … cache.length + T − 1``, attend to
        every cached position, and are stored (the cache advances by T).
        ``implementation``: ``"sdpa"`` (fused kernels) or ``"reference"`` (explicit
        math), for every attention layer and every LayerNorm. In training mode, dropout
        (``config.dropout`` > 0) acts on the blocks' input and inside the blocks.
        """
        c = self.config
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise ValueError(f"ids must be a (B, T) tensor of token indices, got {getattr(ids, 'shape', type(ids))}")
        B, T = ids.shape
        if cache is not None and positions is not None:
            raise ValueError("give positions or a cache, not both: with a cache its length owns the positions")
        # the cache's length owns the positions
        start = cache.length if cache is not None else 0
        # the tokens' places in the sequence
        slots = torch.arange(start, start + T, device=ids.device)  # (T,)
        if positions is None:
            positions = slots  # (T,)
        else:
            # for the position encoding only
            positions = _check_positions(positions, T).to(ids.device)  # (T,)
        x = self.embed(ids)  # (B, T, D)
        if c.bigram_embed or c.trigram_buckets:
            earlier = self._earlier_ids(ids, cache)  # (B, 2 + T)
            if c.bigram_embed:
                x = x + self.bigram(bigram_rows(earlier, c.vocab_size))  # (B, T, D)
            if c.trigram_buckets:
                rows = trigram_rows(earlier, c.vocab_size, c.trigram_buckets)  # (B, T)
                x = x + self.trigram(rows)  # (B, T, D)
        cos = sin = None
        if c.positional == "rope":
            cos, sin = rope_cos_sin(positions, c.head_dim, c.rope_theta,
                                    device=ids.device)  # (T, D_h/2) each
        elif c.positional == "learned":
            x = x + self.pos_embed(positions)  # (B, T, D) + (T, D)
        elif c.positional == "sinusoidal":
            x = x + sinusoidal_encoding(positions, c.d_model, dtype=x.dtype,
                                        device=ids.device)  # (T, D)
        if c.dropout and self.training:  # embedding dropout, as in GPT-2: training only
            x = F.dropout(x, p=c.dropout)  # (B, T, D)
        # masks follow the token order (as in Hugging Face):
        # query slot i sees key slots j ≤ i
        mask = self._sliding_window_mask(slots, start + T)  # None: plain causal attention
        for i, block in enumerate(self.blocks):
            if self.activation_checkpointing and cache is None and torch.is_grad_enabled():
                # keep only the block's input;
                # backward recomputes its activations (chapter 11)
                x = checkpoint(block, x, cos, sin, mask=mask, implementation=implementation,
                               use_reentrant=False)  # (B, T, D)
            else:
                x = block(x, cos, sin, mask=mask, cache=cache, layer=i,
                          implementation=implementation)  # (B, T, D)
        if cache is not None:
            cache.advance(T)
        logits = self.lm_head(apply_norm(self.norm, x, implementation))  # (B, T, V)
        if c.logit_softcap is not None:  # bounded by ±c, ≈ logits where |logits| ≪ c
            logits = c.logit_softcap * torch.tanh(logits / c.logit_softcap)  # (B, T, V)
        return logits

    def _earlier_ids(self, ids: torch.Tensor, cache) -> torch.Tensor:
        """(B, 2 + T): the two tokens before ``ids``, then ``ids``. The two are the cache's newest
        or, with none, V ("no token"), as at the start of every training window; the cache keeps
        the newest two for the next call."""
        V = self.config.vocab_size
        before = ids.new_full((ids.shape[0], 2), V)  # (B, 2): no tokens before the first
        if cache is not None:
            if cache.length and cache.last_ids is None:
                raise ValueError("a model with bigram_embed or trigram_buckets needs a cache its own "
                                 "forward filled: this one holds positions but not the tokens before "
                                 "the new ones")
            if cache.length:
                before = cache.last_ids  # (B, 2)
        earlier = torch.cat([before, ids], dim=1)  # (B, 2 + T)
        if cache is not None:
            cache.last_ids = earlier[:, -2:]  # (B, 2): the two before the next call's first
        return earlier

    def _sliding_window_mask(self, q_pos: torch.Tensor, n_keys: int) -> torch.Tensor | None:
        """Mistral's sliding window: query q may attend to key k when 0 ≤ q − k < window."""
        window = self.config.sliding_window
        if window is None or n_keys <= window:
            return None  # every key is inside the window: the causal mask is the whole story
        k_pos = torch.arange(n_keys, device=q_pos.device)  # (S,)
        distance = q_pos[:, None] - k_pos[None, :]  # (T, S)
        return (distance >= 0) & (distance < window)  # (T, S), True = may attend

    # --- generation ------------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int, use_cache: bool = True, *,
                 cache: str = "preallocated", temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Extend ``ids`` (B, T) by ``max_new_tokens`` tokens; returns
        (B, T + max_new_tokens).

        Each new token comes from ``sampling.sample_next``: ``temperature=0`` picks the
        most likely token (greedy); a positive temperature samples from
        softmax(logits / temperature), restricted to the ``top_k`` most likely tokens
        and/or the ``top_p`` nucleus, with ``generator`` (on the model's device; the
        same generator state gives the same tokens, cached or not). With ``use_cache``
        the prompt is processed once (prefill) and each step feeds only the newest
        token, reading earlier keys and values from a KV cache
        (``cache="preallocated"``, or ``"concat"`` for the teaching version); without it
        every step recomputes the whole sequence.

        The window: the model reads at most ``max_seq_len`` tokens, the last ones (crop
        to the window, as in training). Without a cache each step feeds
        ``ids[:, -max_seq_len:]``, at positions 0 … max_seq_len − 1. With a cache, once
        it holds max_seq_len positions the next step cannot append (every cached key
        would need a new position): the cache is emptied and refilled from the last
        max_seq_len tokens, exactly what the uncached step computes — so past the window
        a step costs a full window's forward pass, cached or not, and both give the same
        tokens.

        Generation runs in eval mode, so no dropout ever applies; a model in training
        mode is put back in it afterwards, each module as it was.
        """
        _check_generate_args(max_new_tokens, cache, temperature, top_k, top_p)
        window = self.config.max_seq_len
        # no autograd bookkeeping at all: cheaper decoding steps; eval mode: no dropout
        with torch.inference_mode(), _eval_mode(self):
            kv = None
            if use_cache:
                if cache == "concat":
                    kv = ConcatKVCache(self.config.n_layers)
                else:
                    kv = KVCache.for_model(self.config, ids.shape[0],
                                           min(ids.shape[1] + max_new_tokens, window),
                                           dtype=self.lm_head.weight.dtype,
                                           device=ids.device)
            out = ids
            step_input = ids[:, -window:]  # the prefill: the prompt, cropped to the window
            for _ in range(max_new_tokens):
                if not use_cache:
                    logits = self(out[:, -window:])[:, -1]  # (B, V): the last position
                else:
                    # full: refill from the last window
                    if kv.length + step_input.shape[1] > window:
                        kv.reset()
                        step_input = out[:, -window:]  # (B, max_seq_len)
                    logits = self(step_input, cache=kv)[:, -1]  # (B, V): the last position
                next_id = sample_next(logits, temperature, top_k, top_p,
                                      generator)  # (B, 1)
                out = torch.cat([out, next_id], dim=1)  # (B, T + steps so far)
                # with a cache, only the newest token goes in next time
                step_input = next_id
        # an ordinary tensor again: inference tensors cannot enter autograd
        return out.clone()

    # --- Hugging Face ----------------------------------------------------------------------------

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> DecoderLM:
        """Build a DecoderLM from a ``transformers`` ``LlamaForCausalLM`` or
        ``MistralForCausalLM`` (any size, GQA or not, tied or untied) and load its
        weights strictly: every tensor of the Hugging Face model lands in exactly one
        parameter here, and every parameter is filled. The result computes the same
        logits (same dtype and device as the source). Each layer's q_proj, k_proj and
        v_proj are stacked by rows into one ``attn.w_qkv`` (a copy, the size of those
        three); every other parameter is the Hugging Face model's own tensor
        (``load_state_dict(assign=True)``), so changing it in one model changes it in
        the other. The model comes back in eval mode, with ``dropout`` 0 (see
        :func:`config_from_hf`)."""
        config = config_from_hf(hf_model.config)
        with torch.device("meta"):
            model = cls(config)
        state, qkv = {}, {}
        for name, tensor in hf_model.state_dict().items():
            ours = _hf_name(name)
            if ours is None:
                raise ValueError(f"unexpected Hugging Face tensor {name!r}: no matching DecoderLM parameter")
            if isinstance(ours, tuple):  # (stacked parameter, which block of its rows)
                qkv.setdefault(ours[0], {})[ours[1]] = tensor
            else:
                state[ours] = tensor
        for ours, parts in qkv.items():
            if sorted(parts) != ["k", "q", "v"]:
                raise ValueError(f"{ours} needs q_proj, k_proj and v_proj; the Hugging Face model "
                                 f"has only {sorted(parts)}")
            # rows: W_q, then W_k, then W_v
            state[ours] = torch.cat([parts["q"], parts["k"], parts["v"]])
        if config.tie_embeddings:
            state.setdefault("lm_head.weight", state["embed.weight"])
        # strict: nothing missing, nothing left over
        model.load_state_dict(state, strict=True, assign=True)
        if config.tie_embeddings:
            # assign=True replaced the shared Parameter: re-tie
            model.lm_head.weight = model.embed.weight
        return model.eval()


_HF_NAMES = [  # Hugging Face Llama/Mistral name → DecoderLM name
    (r"model\.embed_tokens\.weight", "embed.weight"),
    (r"model\.norm\.weight", "norm.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"blocks.\1.attn_norm.weight"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"blocks.\1.ffn_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.weight", r"blocks.\1.attn.w_o.weight"),
    # q_proj, k_proj, v_proj: blocks of rows of one stacked parameter (see from_hf)
    (r"model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.weight", (r"blocks.\1.attn.w_qkv.weight", r"\2")),
    (r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", r"blocks.\1.ffn.w_\2.weight"),
]


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode (no dropout) inside the block; afterwards every submodule gets
    back its own mode (``model.train(was_training)`` would overwrite submodules' own modes)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training


def _check_generate_args(max_new_tokens, cache, temperature, top_k, top_p) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens ({max_new_tokens}) must be a non-negative int")
    if cache not in ("preallocated", "concat"):
        raise ValueError(f"cache must be 'preallocated' or 'concat', got {cache!r}")
    check_sampling_args(temperature, top_k, top_p)


def _check_positions(positions, T: int) -> torch.Tensor:
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a tensor of integer positions, got {type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must hold integers, got dtype {positions.dtype}")
    if positions.shape != (T,):
        raise ValueError(f"positions must have shape (T,) = ({T},), one per token, got {tuple(positions.shape)}")
    if T and positions.min() < 0:
        raise ValueError("positions must be non-negative")
    if T > 1 and not (positions[1:] > positions[:-1]).all():
        raise ValueError("positions must be strictly increasing: the causal mask follows the token order")
    return positions


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0,
                     lengths: torch.Tensor | None = None) -> torch.Tensor:
    """p(next token) = softmax(z / τ) over the vocabulary, z the logits at each
    sequence's last position.

    ``logits`` (B, T, V) come from :class:`DecoderLM`, whose position t scores the token
    at t + 1; the token after a whole sequence is therefore read at position T − 1, or
    at ``lengths[b] − 1`` for a batch of right-padded sequences of real lengths
    ``lengths`` (B,). ``temperature`` τ > 0 sharpens (τ < 1) or flattens (τ > 1) the
    distribution; τ → 0 approaches the greedy argmax. The softmax runs in at least
    float32. Returns (B, V); each row sums to 1.
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating-point (B, T, V) tensor, got {getattr(logits, 'shape', type(logits))}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature ({temperature}) must be a positive number (use argmax for greedy)")
    B, T, V = logits.shape
    if lengths is None:
        last = logits[:, -1]  # (B, V): the position after which the next token comes
    else:
        if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,) or lengths.is_floating_point():
            raise ValueError(f"lengths must be an integer tensor of shape (B,) = ({B},), got "
                             f"{getattr(lengths, 'shape', type(lengths))}")
        if (lengths < 1).any() or (lengths > T).any():
            raise ValueError(f"lengths must lie in [1, T] = [1, {T}]")
        rows = torch.arange(B, device=logits.device)  # (B,)
        # each sequence's own last token
        last = logits[rows, lengths.to(logits.device) - 1]  # (B, V)
    z = last.to(torch.promote_types(last.dtype, torch.float32)) / temperature  # (B, V)
    return torch.softmax(z, dim=-1)  # (B, V): normalised over the vocabulary


def _hf_name(name: str) -> str | tuple[str, str] | None:
    """Our name for a Hugging Face tensor, or (our stacked parameter, "q" | "k" | "v")."""
    for pattern, replacement in _HF_NAMES:
        if re.fullmatch(pattern, name):
            if isinstance(replacement, tuple):
                return tuple(re.sub(pattern, part, name) for part in replacement)
            return re.sub(pattern, replacement, name)
    return None


def _hf_rope(hf_config) -> dict:
    """RoPE's settings of a Hugging Face config as ``{"rope_type": ..., "rope_theta": ..., ...}``.

    transformers 4.x keeps θ in ``config.rope_theta`` and any context-extension scheme in
    ``config.rope_scaling`` (None, or a dict with "rope_type" or the older "type"); transformers 5.x
    keeps both in one dict, ``config.rope_parameters``, and has no ``rope_theta`` attribute.
    """
    if getattr(hf_config, "rope_theta", None) is not None:  # transformers 4.x
        rope = {"rope_theta": hf_config.rope_theta, **(getattr(hf_config, "rope_scaling", None) or {})}
    else:  # transformers 5.x
        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
    rope.setdefault("rope_theta", 10_000.0)  # both lines' default θ
    rope.setdefault("rope_type", rope.get("type", "default"))
    return rope


def config_from_hf(hf_config) -> ModelConfig:
    """The ModelConfig of a Hugging Face ``LlamaConfig`` or ``MistralConfig``, refusing features
    DecoderLM does not implement (biases, rope scaling, other activations) rather than ignoring them.
    Works with transformers 4.x (``rope_theta``, ``rope_scaling``) and 5.x (``rope_parameters``).
    ``attention_dropout`` is not mapped: ``dropout`` stays 0, because Hugging Face's drops only the
    attention weights where ours also drops the embeddings and the residual branches (GPT-2's
    three places). Neither acts in eval mode, so the logits are the same whatever its value."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in ("llama", "mistral"):
        raise ValueError(f"from_hf loads Llama or Mistral models, got model_type {model_type!r}")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act must be 'silu' (SwiGLU), got {hf_config.hidden_act!r}")
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(hf_config, flag, False):
            raise ValueError(f"{flag}=True is not supported: DecoderLM's Llama blocks have no biases")
    rope = _hf_rope(hf_config)
    if rope["rope_type"] != "default":
        raise ValueError(f"rope_type {rope['rope_type']!r} is not supported: only plain RoPE ('default')")
    n_heads = hf_config.num_attention_heads
    return ModelConfig(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        n_layers=hf_config.num_hidden_layers,
        n_heads=n_heads,
        n_kv_heads=getattr(hf_config, "num_key_value_heads", None) or n_heads,
        head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // n_heads,
        d_ff=hf_config.intermediate_size,
        max_seq_len=hf_config.max_position_embeddings,
        rope_theta=float(rope["rope_theta"]),
        norm_eps=hf_config.rms_norm_eps,
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        sliding_window=getattr(hf_config, "sliding_window", None) if model_type == "mistral" else None,
        init_std=float(getattr(hf_config, "initializer_range", 0.02)),
    )
