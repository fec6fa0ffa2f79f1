"""KV caches: keep every layer's keys and values so each generation step computes only the new token's.

Two versions, taught in this order:

* :class:`ConcatKVCache` appends the new keys and values with ``torch.cat`` — the idea in its plainest
  form, but every step allocates and copies the whole history (O(S) bytes moved per step per layer).
* :class:`KVCache` preallocates (B, H_kv, max_len, D_h) buffers per layer and writes in place; one
  explicit ``length`` owns the positions (as ``start_pos`` does in Meta's reference Llama code).

Both follow one protocol. During a forward pass over T new tokens each layer calls
``update(layer, k, v)`` with k, v of shape (B, H_kv, T, D_h); it stores them after the ``length``
positions already cached and returns keys and values for all ``length + T`` positions. The new tokens
therefore sit at positions ``length … length + T − 1`` (for RoPE and the causal mask). After the last
layer the model calls ``advance(T)``. Memory: 2 · N · H_kv · D_h · bytes per cached position, for each
sequence of the batch (``counting.kv_cache_bytes``).
"""

from __future__ import annotations

import torch

__all__ = ["ConcatKVCache", "KVCache"]


def _check_kv(k: torch.Tensor, v: torch.Tensor) -> None:
    if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor):
        raise TypeError("k and v must be tensors")
    if k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, H_kv, T, D_h), got {tuple(k.shape)} and {tuple(v.shape)}")


class ConcatKVCache:
    """A KV cache that grows by concatenation: simple, and O(length) copying per step."""

    def __init__(self, n_layers: int):
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(f"n_layers ({n_layers}) must be a positive int")
        self.n_layers = n_layers
        self.length = 0  # positions stored in every layer after the last advance()
        self.k: list[torch.Tensor | None] = [None] * n_layers
        self.v: list[torch.Tensor | None] = [None] * n_layers

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v (B, H_kv, T, D_h); return all keys and values (B, H_kv, length + T, D_h)."""
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer ({layer}) must be an int in [0, {self.n_layers - 1}]")
        _check_kv(k, v)
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            self.k[layer] = torch.cat([self.k[layer], k], dim=2)  # (B, H_kv, length + T, D_h): a new copy
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)  # (B, H_kv, length + T, D_h)
        return self.k[layer], self.v[layer]

    def advance(self, n: int) -> None:
        """Declare that ``n`` more positions are stored in every layer."""
        self.length += n


class KVCache:
    """A preallocated KV cache: per layer, buffers (B, H_kv, max_len, D_h) for keys and values, filled
    in place; ``length`` is the number of positions already stored, the one source of truth for where
    new tokens go and which positions they have."""

    def __init__(
        self, n_layers: int, batch: int, n_kv_heads: int, head_dim: int, max_len: int,
        *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
    ):
        for name, value in [("n_layers", n_layers), ("batch", batch), ("n_kv_heads", n_kv_heads),
                            ("head_dim", head_dim), ("max_len", max_len)]:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} ({value}) must be a positive int")
        shape = (batch, n_kv_heads, max_len, head_dim)  # (B, H_kv, S_max, D_h)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.n_layers, self.max_len = n_layers, max_len
        self.length = 0

    @classmethod
    def for_model(cls, config, batch: int, max_len: int | None = None, *, dtype=torch.float32, device=None):
        """A cache shaped for a model with this ``ModelConfig`` (max_len defaults to its max_seq_len)."""
        return cls(config.n_layers, batch, config.n_kv_heads, config.head_dim,
                   max_len or config.max_seq_len, dtype=dtype, device=device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, H_kv, T, D_h) at positions length … length + T − 1; return views of all
        keys and values stored so far, (B, H_kv, length + T, D_h). No copy of the history."""
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer ({layer}) must be an int in [0, {self.n_layers - 1}]")
        _check_kv(k, v)
        cache_k, cache_v = self.k[layer], self.v[layer]
        b, h, t, d = k.shape
        if (b, h, d) != (cache_k.shape[0], cache_k.shape[1], cache_k.shape[3]):
            raise ValueError(f"k has shape {tuple(k.shape)}, but the cache holds (B, H_kv, ·, D_h) = "
                             f"{(cache_k.shape[0], cache_k.shape[1], '·', cache_k.shape[3])}")
        end = self.length + t
        if end > self.max_len:
            raise ValueError(f"the cache holds max_len ({self.max_len}) positions; {self.length} are used and "
                             f"{t} more do not fit")
        cache_k[:, :, self.length:end] = k  # (B, H_kv, T, D_h) written in place
        cache_v[:, :, self.length:end] = v
        return cache_k[:, :, :end], cache_v[:, :, :end]  # (B, H_kv, length + T, D_h): views

    def advance(self, n: int) -> None:
        """Declare that ``n`` more positions are stored in every layer."""
        if self.length + n > self.max_len:
            raise ValueError(f"cannot advance past max_len ({self.max_len})")
        self.length += n

    def reset(self) -> None:
        """Forget every position (the buffers are reused)."""
        self.length = 0

    def nbytes(self) -> int:
        """Bytes held by the buffers: 2 · N · B · H_kv · max_len · D_h · element size."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)
