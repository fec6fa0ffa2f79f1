"""The decoder block: a norm, grouped-query attention and a feed-forward network around
a residual stream.

Pre-norm (Xiong et al., 2020; GPT-2 onwards, Llama, Mistral)::

    h   = x + Attention(Norm₁(x))   # attention reads a normalised copy, adds its result
    out = h + FFN(Norm₂(h))         # so does the FFN; the stream is never normalised

Post-norm (the original Transformer, Vaswani et al., 2017)::

    h   = Norm₁(x + Attention(x))
    out = Norm₂(h + FFN(h))

The variants the course compares come from a :class:`~course_lib.config.ModelConfig`:
``norm`` (rms|layer), ``placement`` (pre|post), ``ffn`` (swiglu|gelu|relu). Positions
enter through the RoPE tables ``cos``/``sin`` the model passes in
(``positional="rope"``); other schemes act on the embeddings.

Dropout (``config.dropout`` = p; Srivastava et al., 2014), in training mode only, as in
GPT-2 and the original Transformer: each branch's output is dropped before it joins the
stream, ``h = x + Dropout(Attention(Norm₁(x)))``, and attention drops its weights after
the softmax. Each element is zeroed with probability p and the others scaled by
1/(1 − p). In eval mode, or with p = 0 (the default), the block is what it is without
dropout, operation for operation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import GroupedQueryAttention
from .config import ModelConfig
from .ffn import build_ffn
from .norms import LayerNorm, RMSNorm

__all__ = ["TransformerBlock", "build_norm", "apply_norm"]


def build_norm(config: ModelConfig) -> nn.Module:
    """RMSNorm, or LayerNorm (with a shift only when the config has biases), width D."""
    if config.norm == "rms":
        return RMSNorm(config.d_model, eps=config.norm_eps)
    return LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias)


class TransformerBlock(nn.Module):
    """One decoder block: ``attn_norm`` → ``attn`` → residual add → ``ffn_norm`` →
    ``ffn`` → residual add (pre-norm), or the post-norm arrangement, as
    ``config.placement`` says.

    ``forward(x, cos, sin)`` maps (B, T, D) to (B, T, D) with causal self-attention;
    ``cos`` and ``sin`` are required when ``config.positional == "rope"`` and refused
    otherwise. With a KV cache (``cache`` and ``layer``), the new keys and values are
    stored and the queries attend to every cached position before them; the cache's
    length says where the new tokens start. ``config.dropout`` = p > 0 drops the
    branches' outputs (and attention's weights) in training mode (see the module).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError("config must be a ModelConfig, "
                            f"got {type(config).__name__}")
        self.placement = config.placement
        self.d_model = config.d_model
        self.uses_rope = config.positional == "rope"  # other schemes act on embeddings
        self.dropout = float(config.dropout)  # p for the branches' outputs, in training
        self.attn_norm = build_norm(config)
        self.attn = GroupedQueryAttention(
            config.d_model, config.n_heads, config.n_kv_heads, head_dim=config.head_dim,
            bias=config.bias, dropout=config.dropout, qk_norm=config.qk_norm,
            norm_eps=config.norm_eps)
        self.ffn_norm = build_norm(config)
        self.ffn = build_ffn(config.ffn, config.d_model, config.d_ff, bias=config.bias)

    def extra_repr(self) -> str:
        text = f"placement={self.placement!r}, rope={self.uses_rope}"
        return text + (f", dropout={self.dropout}" if self.dropout else "")

    def drop_branch(self, out: torch.Tensor) -> torch.Tensor:
        """Residual dropout on a branch's output before it joins the stream: in training
        mode each element is zeroed with probability p, the others scaled by 1/(1 − p);
        otherwise (eval mode, or p = 0) ``out`` itself, no operation at all."""
        if self.dropout and self.training:
            return F.dropout(out, p=self.dropout)  # (B, T, D)
        return out

    def attention(self, x: torch.Tensor, cos=None, sin=None, *, mask=None, cache=None,
                  layer: int | None = None,
                  implementation: str = "sdpa") -> torch.Tensor:
        """The attention sublayer on its own input x (B, T, D) → (B, T, D), through the
        KV cache if one is given."""
        q, k, v = self.attn.project_qkv(x, cos, sin)  # (B, H | H_kv, T, D_h)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, H_kv, S, D_h): cached, then the new
        # mask=None: causal, the T queries being the last T of the S positions
        out = self.attn.attend(q, k, v, mask, implementation=implementation)
        return out  # (B, T, D)

    def forward(self, x: torch.Tensor, cos=None, sin=None, *, mask=None, cache=None,
                layer: int | None = None,
                implementation: str = "sdpa") -> torch.Tensor:
        """x (B, T, D) → (B, T, D). ``cos``/``sin``: RoPE tables for the T positions
        (None without RoPE); ``mask``: a bool (T, S) mask, True = may attend (default:
        causal); ``cache``/``layer``: a KV cache and this block's index in it;
        ``implementation``: ``"sdpa"`` (fused kernels: attention, and LayerNorm's) or
        ``"reference"`` (explicit math)."""
        _check_inputs(self, x, cos, sin)
        kw = dict(mask=mask, cache=cache, layer=layer, implementation=implementation)
        path = implementation  # fused or explicit norms too (see apply_norm)
        drop = self.drop_branch  # residual dropout (training only)
        if self.placement == "pre":
            a = apply_norm(self.attn_norm, x, path)  # (B, T, D): what attention reads
            h = x + drop(self.attention(a, cos, sin, **kw))  # (B, T, D)
            return h + drop(self.ffn(apply_norm(self.ffn_norm, h, path)))  # (B, T, D)
        h = x + drop(self.attention(x, cos, sin, **kw))  # (B, T, D)
        h = apply_norm(self.attn_norm, h, path)  # (B, T, D)
        return apply_norm(self.ffn_norm, h + drop(self.ffn(h)), path)  # (B, T, D)


def apply_norm(norm: nn.Module, x: torch.Tensor, implementation: str) -> torch.Tensor:
    """``norm(x)`` on the model's path. On ``"sdpa"``, LayerNorm runs PyTorch's fused
    kernel and RMSNorm its hand-written backward pass (PyTorch's ``F.rms_norm`` is no
    faster on CPU); on ``"reference"`` both run their explicit math, every step recorded
    by autograd."""
    if isinstance(norm, (LayerNorm, RMSNorm)):
        return norm(x, fused=implementation == "sdpa")
    return norm(x)


def _check_inputs(block: TransformerBlock, x, cos, sin) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() != 3 or x.shape[-1] != block.d_model:
        raise ValueError("x must have shape (B, T, D) with D = d_model "
                         f"({block.d_model}), got {tuple(x.shape)}")
    if block.uses_rope and (cos is None or sin is None):
        raise ValueError("this block was built with positional='rope': pass the RoPE "
                         "tables cos and sin for the T positions "
                         "(positional.rope_cos_sin); without them attention would "
                         "silently ignore positions")
    if not block.uses_rope and (cos is not None or sin is not None):
        raise ValueError("cos and sin are RoPE tables, but this block was built "
                         "without RoPE (config.positional is not 'rope'): pass neither")
