"""KV caches: keep every layer's keys and values so that each generation step computes
only the new tokens' (Pope et al., 2023, on why decoding is then bound by reading the
cache and the weights). The idea is as old as autoregressive decoding with Transformers:
Tensor2Tensor's fast decoding (Vaswani et al., 2018) kept such a cache.

Two versions, taught in this order:

* :class:`ConcatKVCache` appends the new keys and values with ``torch.cat`` — the idea
  in its plainest form, but every step allocates and copies the whole history (O(S)
  bytes moved per step and layer).
* :class:`KVCache` preallocates (B, H_kv, max_len, D_h) buffers per layer and writes in
  place; one explicit ``length`` owns the positions (as ``start_pos`` does in Meta's
  reference Llama code).

Both follow one protocol. During a forward pass over T new tokens, layer ℓ calls
``update(ℓ, k, v)`` with k, v of shape (B, H_kv, T, D_h) — k already rotated by RoPE,
so that a cached key never needs its position again. The cache stores them after the
``length`` positions already held and returns the keys and values of all
``length + T`` positions. The new tokens therefore sit at positions
``length … length + T − 1``: that offset is what RoPE and the causal mask must use.
After the last layer the model calls ``advance(T)``; ``length`` changes nowhere else.

Memory: 2 (K and V) · N layers · H_kv · D_h elements per cached position and sequence,
2 · N · H_kv · D_h · S · B · bytes per element in all (``counting.kv_cache_bytes``).
Grouped-query attention divides it by H / H_kv.
"""

from __future__ import annotations

import torch

__all__ = ["ConcatKVCache", "KVCache"]


def _check_layer(layer, n_layers: int) -> None:
    valid = isinstance(layer, int) and not isinstance(layer, bool)
    if not valid or not 0 <= layer < n_layers:
        raise ValueError(f"layer ({layer}) must be an int in [0, {n_layers - 1}]")


def _check_kv(k, v) -> None:
    if not isinstance(k, torch.Tensor) or not isinstance(v, torch.Tensor):
        raise TypeError(f"k and v must be tensors, got {type(k).__name__} and "
                        f"{type(v).__name__}")
    if k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, H_kv, T, D_h), got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if k.dtype != v.dtype:
        raise TypeError(f"k and v must have the same dtype, got {k.dtype} and "
                        f"{v.dtype}")


def _check_advance(n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n ({n}) must be a non-negative int")


class ConcatKVCache:
    """A KV cache that grows by concatenation: simple, and O(length) copying per step.

    ``k[ℓ]`` and ``v[ℓ]`` hold layer ℓ's keys and values, (B, H_kv, length, D_h), or
    None before the first update. Each ``update`` builds new, longer tensors.
    """

    def __init__(self, n_layers: int):
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(f"n_layers ({n_layers}) must be a positive int")
        self.n_layers = n_layers
        self.length = 0  # positions stored in every layer after the last advance()
        self.last_ids: torch.Tensor | None = None  # (B, 2): the two newest tokens (for n-gram tables)
        self.k: list[torch.Tensor | None] = [None] * n_layers
        self.v: list[torch.Tensor | None] = [None] * n_layers

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Append k, v (B, H_kv, T, D_h); return all keys and values, each
        (B, H_kv, length + T, D_h)."""
        _check_layer(layer, self.n_layers)
        _check_kv(k, v)
        old_k, old_v = self.k[layer], self.v[layer]
        if old_k is None:
            self.k[layer], self.v[layer] = k, v
        else:
            b, h, _, d = old_k.shape
            same = (k.shape[0], k.shape[1], k.shape[3]) == (b, h, d)
            if not same or k.dtype != old_k.dtype:
                raise ValueError(
                    f"k has shape {tuple(k.shape)} and dtype {k.dtype}, but layer "
                    f"{layer} holds (B, H_kv, ·, D_h) = ({b}, {h}, ·, {d}) in "
                    f"{old_k.dtype}")
            # new tensors, (B, H_kv, length + T, D_h): the history is copied
            self.k[layer] = torch.cat([old_k, k], dim=2)
            self.v[layer] = torch.cat([old_v, v], dim=2)
        return self.k[layer], self.v[layer]

    def advance(self, n: int) -> None:
        """Declare that ``n`` more positions are stored in every layer."""
        _check_advance(n)
        self.length += n

    def reset(self) -> None:
        """Forget every position (and free the tensors)."""
        self.length = 0
        self.last_ids = None
        self.k = [None] * self.n_layers
        self.v = [None] * self.n_layers

    def nbytes(self) -> int:
        """Bytes held now: 2 · N · B · H_kv · length · D_h · element size."""
        held = [t for t in self.k + self.v if t is not None]
        return sum(t.numel() * t.element_size() for t in held)


class KVCache:
    """A preallocated KV cache: per layer, buffers (B, H_kv, max_len, D_h) for keys and
    values, filled in place; ``length`` is the number of positions already stored, the
    one source of truth for where new tokens go and which positions they have."""

    def __init__(
        self, n_layers: int, batch: int, n_kv_heads: int, head_dim: int, max_len: int,
        *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
    ):
        for name, value in [("n_layers", n_layers), ("batch", batch),
                            ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                            ("max_len", max_len)]:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} ({value}) must be a positive int")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch.dtype, got "
                            f"{dtype!r}")
        shape = (batch, n_kv_heads, max_len, head_dim)  # (B, H_kv, S_max, D_h)
        new = dict(dtype=dtype, device=device)
        self.k = [torch.zeros(shape, **new) for _ in range(n_layers)]  # keys, per layer
        self.v = [torch.zeros(shape, **new) for _ in range(n_layers)]  # values
        self.n_layers, self.max_len = n_layers, max_len
        self.length = 0  # positions 0 … length − 1 are filled in every layer
        self.last_ids: torch.Tensor | None = None  # (B, 2): the two newest tokens (for n-gram tables)

    @classmethod
    def for_model(cls, config, batch: int, max_len: int | None = None, *,
                  dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> KVCache:
        """A cache shaped for a model with this ``ModelConfig`` (max_len defaults to
        its max_seq_len)."""
        max_len = config.max_seq_len if max_len is None else max_len
        return cls(config.n_layers, batch, config.n_kv_heads, config.head_dim, max_len,
                   dtype=dtype, device=device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write k, v (B, H_kv, T, D_h) at positions length … length + T − 1; return
        views of all keys and values stored so far, each (B, H_kv, length + T, D_h).
        No copy of the history."""
        _check_layer(layer, self.n_layers)
        _check_kv(k, v)
        cache_k, cache_v = self.k[layer], self.v[layer]
        b, h, t, d = k.shape
        held = (cache_k.shape[0], cache_k.shape[1], cache_k.shape[3])
        if (b, h, d) != held:
            raise ValueError(f"k has shape {tuple(k.shape)}, but the cache holds "
                             f"(B, H_kv, ·, D_h) = {(held[0], held[1], '·', held[2])}")
        if k.dtype != cache_k.dtype:
            raise TypeError(f"k and v have dtype {k.dtype}, but the cache holds "
                            f"{cache_k.dtype}: build the cache with the model's dtype "
                            f"rather than casting silently")
        end = self.length + t
        if end > self.max_len:
            raise ValueError(f"the cache holds max_len ({self.max_len}) positions; "
                             f"{self.length} are used and {t} more do not fit")
        cache_k[:, :, self.length:end] = k  # (B, H_kv, T, D_h) written at the offset
        cache_v[:, :, self.length:end] = v
        return cache_k[:, :, :end], cache_v[:, :, :end]  # (B, H_kv, length + T, D_h)

    def advance(self, n: int) -> None:
        """Declare that ``n`` more positions are stored in every layer."""
        _check_advance(n)
        if self.length + n > self.max_len:
            raise ValueError(f"cannot advance past max_len ({self.max_len}): length is "
                             f"{self.length}, n is {n}")
        self.length += n

    def reset(self) -> None:
        """Forget every position (the buffers are reused)."""
        self.length = 0
        self.last_ids = None

    def nbytes(self) -> int:
        """Bytes of the buffers: 2 · N · B · H_kv · max_len · D_h · element size."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)
