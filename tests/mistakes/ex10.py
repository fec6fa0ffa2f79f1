"""Realistic wrong answers for exercise 10 (the KV cache)."""

from . import Wrong

ASSIGNMENT = "10_kv_cache"

WRONG = [
    # --- Task 1: predictions ------------------------------------------------------------------------
    Wrong("predictions-answer", "counts all 64 query heads", '''
def predictions():
    return {"llama2_70b_gib": 2 * 80 * 64 * 128 * 4096 * 2 / 2**30, "llama2_7b_gib": 2.0,
            "mistral_window_gib": 0.5, "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "keys AND values", '''
def predictions():
    # one vector per head, layer and token
    return {"llama2_70b_gib": 0.625, "llama2_7b_gib": 1.0, "mistral_window_gib": 0.25,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "2 bytes each, not 4", '''
def predictions():
    return {"llama2_70b_gib": 2.5, "llama2_7b_gib": 4.0, "mistral_window_gib": 1.0,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "that is in GB", '''
def predictions():
    return {"llama2_70b_gib": 1.342, "llama2_7b_gib": 2.147, "mistral_window_gib": 0.537,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "multi-head attention: 32 key/value heads", '''
def predictions():
    # all Llama 2 models use GQA with 8 kv heads
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 0.5, "mistral_window_gib": 0.5,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "rolling buffer keeps only the last 4,096 positions", '''
def predictions():
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0, "mistral_window_gib": 4.0,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "the last token is generated, not fed back", '''
def predictions():
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0, "mistral_window_gib": 0.5,
            "positions_without_cache": 10 + 11 + 12 + 13 + 14 + 15}
'''),
    Wrong("predictions-answer", "WITH a cache", '''
def predictions():
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0, "mistral_window_gib": 0.5,
            "positions_without_cache": 14}
'''),
    Wrong("predictions-answer", "only the recomputed positions", '''
def predictions():
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0, "mistral_window_gib": 0.5,
            "positions_without_cache": 46}
'''),
    # --- Task 2: kv_cache_bytes ------------------------------------------------------------------------
    Wrong("bytes-answer", "counted the query heads", '''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    return 2 * n_layers * n_heads * head_dim * seq_len * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "the factor 2 is missing", '''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    per_token = n_layers * n_kv_heads * head_dim * bytes_per_element
    return per_token * seq_len * batch
'''),
    Wrong("bytes-answer", "the batch is missing", '''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element
'''),
    Wrong("bytes-answer", "the layers are missing", '''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    keys = n_kv_heads * head_dim * seq_len * batch
    return 2 * keys * bytes_per_element
'''),
    Wrong("bytes-answer", "bits, not bytes", '''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    bits = 8 * bytes_per_element
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * batch * bits
'''),
    Wrong("bytes-answer", "as an int", '''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    d_kv = n_kv_heads * head_dim
    return 2.0 * n_layers * d_kv * seq_len * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "number of elements", '''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * batch
'''),
    Wrong("bytes-answer", "course_lib.kv_cache", '''
from course_lib.kv_cache import KVCache

def kv_cache_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    dtype = {1: torch.int8, 2: torch.bfloat16, 4: torch.float32}[bytes_per_element]
    cache = KVCache(n_layers, batch, n_kv_heads, head_dim, seq_len, dtype=dtype, device="meta")
    return cache.nbytes()
'''),
    # --- Task 3: attend_with_cache ------------------------------------------------------------------------
    Wrong("step-answer", "not in the cache when you attend", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    n_rep = H // k.shape[1]
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    keys = cache_k[:, :, :length].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :length].repeat_interleave(n_rep, dim=1)
    out = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    return out
'''),
    Wrong("step-answer", "as if they were at positions 0", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    q, k = rotate(q, cos[:T], sin[:T]), rotate(k, cos[:T], sin[:T])
    cache_k[:, :, length:length + T] = k
    cache_v[:, :, length:length + T] = v
    n_rep = H // k.shape[1]
    keys = cache_k[:, :, :length + T].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :length + T].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    allowed = torch.arange(length, length + T)[:, None] >= torch.arange(length + T)[None, :]
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ values
'''),
    Wrong("step-answer", "aligns the queries with the FIRST keys", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :end].repeat_interleave(H // k.shape[1], dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    causal = torch.tril(torch.ones(T, end, dtype=torch.bool))
    scores = scores.masked_fill(~causal, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values
'''),
    Wrong("step-answer", "the kv heads are tiled", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    n_rep = H // k.shape[1]
    keys = cache_k[:, :, :end].repeat(1, n_rep, 1, 1)
    values = cache_v[:, :, :end].repeat(1, n_rep, 1, 1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    mask = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ values
'''),
    Wrong("step-answer", "not scaled", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :end].repeat_interleave(H // k.shape[1], dim=1)
    scores = q @ keys.transpose(-2, -1)
    mask = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ values
'''),
    Wrong("step-answer", "not changed in place", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    k = rotate(k, cos[length:end], sin[length:end])
    cache_k = torch.cat([cache_k[:, :, :length], k], dim=2)  # the history plus the new keys
    cache_v = torch.cat([cache_v[:, :, :length], v], dim=2)
    keys = cache_k.repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v.repeat_interleave(H // k.shape[1], dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    mask = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ values
'''),
    Wrong("step-answer", "including slots not filled yet", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    # one new token sees every earlier one, so no mask is needed
    B, H, T, D_h = q.shape
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k.repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v.repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("step-answer", "no causal mask among the new tokens", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    # the new tokens come after every cached one, so they may see all of them
    B, H, T, D_h = q.shape
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :end].repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("step-answer", "rotated again when read", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    cache_k[:, :, length:end] = k
    cache_v[:, :, length:end] = v
    q = rotate(q, cos[length:end], sin[length:end])
    keys = rotate(cache_k[:, :, :end], cos[:end], sin[:end])  # every key at its position
    keys = keys.repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :end].repeat_interleave(H // k.shape[1], dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    mask = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ values
'''),
    Wrong("step-answer", "scaled_dot_product_attention", '''
import torch.nn.functional as F

def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    T = q.shape[2]
    end = length + T
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    mask = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    return F.scaled_dot_product_attention(q, cache_k[:, :, :end], cache_v[:, :, :end],
                                          attn_mask=mask, enable_gqa=True)
'''),
    # --- Task 4: the KVCache class ------------------------------------------------------------------------
    Wrong("cache-answer", "`length` moves inside update()", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        T = k.shape[2]
        self.k[layer][:, :, self.length:self.length + T] = k
        self.v[layer][:, :, self.length:self.length + T] = v
        self.length += T
        return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]

    def advance(self, n):
        self.length += n  # the model calls this, so count here too
'''),
    Wrong("cache-answer", "`length` moves inside update()", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        T = k.shape[2]
        self.k[layer][:, :, self.length:self.length + T] = k
        self.v[layer][:, :, self.length:self.length + T] = v
        if layer == 0:  # count the new tokens once, not once per layer
            self.length += T
        return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]

    def advance(self, n):
        pass
'''),
    Wrong("cache-answer", "shares ONE buffer", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype)] * n_layers
        self.v = [torch.zeros(shape, dtype=dtype)] * n_layers
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "leaves out the new tokens", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        T = k.shape[2]
        self.k[layer][:, :, self.length:self.length + T] = k
        self.v[layer][:, :, self.length:self.length + T] = v
        return self.k[layer][:, :, :self.length], self.v[layer][:, :, :self.length]

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "adds n positions, not 1", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n):
        self.length += 1  # one more token generated
'''),
    Wrong("cache-answer", "written at the start of the buffers", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        T = k.shape[2]
        self.k[layer][:, :, :T] = k
        self.v[layer][:, :, :T] = v
        return self.k[layer][:, :, :self.length + T], self.v[layer][:, :, :self.length + T]

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "it should be float64", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape) for _ in range(n_layers)]
        self.v = [torch.zeros(shape) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "returns slots that hold nothing yet", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer], self.v[layer]  # the mask hides the empty slots

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "course_lib.kv_cache", '''
from course_lib import kv_cache


class KVCache(kv_cache.KVCache):
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        super().__init__(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=dtype)
'''),
    # --- Task 5: attend_with_window ------------------------------------------------------------------------
    Wrong("window-answer", "rotated by its SLOT", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    slot = position % W
    q = rotate(q, cos[slot:slot + 1], sin[slot:slot + 1])
    cache_k[:, :, slot:slot + 1] = rotate(k, cos[slot:slot + 1], sin[slot:slot + 1])
    cache_v[:, :, slot:slot + 1] = v
    n = min(position + 1, W)
    keys = cache_k[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "attended over every slot", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    c, s = cos[position:position + 1], sin[position:position + 1]
    q = rotate(q, c, s)
    cache_k[:, :, position % W] = rotate(k, c, s)[:, :, 0]
    cache_v[:, :, position % W] = v[:, :, 0]
    keys = cache_k.repeat_interleave(H // k.shape[1], dim=1)  # the window: all W slots
    values = cache_v.repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "before writing", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    c, s = cos[position:position + 1], sin[position:position + 1]
    q, k = rotate(q, c, s), rotate(k, c, s)
    n = min(position, W)  # the keys cached so far
    keys = cache_k[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    out = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
    cache_k[:, :, position % W:position % W + 1] = k
    cache_v[:, :, position % W:position % W + 1] = v
    return out
'''),
    Wrong("window-answer", "slot p % W", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    c, s = cos[position:position + 1], sin[position:position + 1]
    q = rotate(q, c, s)
    cache_k[:, :, position] = rotate(k, c, s)[:, :, 0]
    cache_v[:, :, position] = v[:, :, 0]
    n = min(position + 1, W)
    keys = cache_k[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "the kv heads are tiled", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    c, s = cos[position:position + 1], sin[position:position + 1]
    q = rotate(q, c, s)
    slot = position % W
    cache_k[:, :, slot:slot + 1] = rotate(k, c, s)
    cache_v[:, :, slot:slot + 1] = v
    n = min(position + 1, W)
    n_rep = H // k.shape[1]
    keys = cache_k[:, :, :n].repeat(1, n_rep, 1, 1)
    values = cache_v[:, :, :n].repeat(1, n_rep, 1, 1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "not changed in place", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    c, s = cos[position:position + 1], sin[position:position + 1]
    q, k = rotate(q, c, s), rotate(k, c, s)
    slot = position % W
    keys, values = cache_k.clone(), cache_v.clone()
    keys[:, :, slot:slot + 1], values[:, :, slot:slot + 1] = k, v
    n = min(position + 1, W)
    keys = keys[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    values = values[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "not scaled", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    c, s = cos[position:position + 1], sin[position:position + 1]
    q = rotate(q, c, s)
    slot = position % W
    cache_k[:, :, slot:slot + 1] = rotate(k, c, s)
    cache_v[:, :, slot:slot + 1] = v
    n = min(position + 1, W)
    keys = cache_k[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1), dim=-1) @ values
'''),
    Wrong("window-answer", "holds the key before RoPE", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    slot = position % W
    cache_k[:, :, slot:slot + 1] = k
    cache_v[:, :, slot:slot + 1] = v
    c, s = cos[position:position + 1], sin[position:position + 1]
    q = rotate(q, c, s)
    n = min(position + 1, W)
    keys = cache_k[:, :, :n].clone()
    keys[:, :, slot:slot + 1] = rotate(k, c, s)
    keys = keys.repeat_interleave(H // k.shape[1], dim=1)
    values = cache_v[:, :, :n].repeat_interleave(H // k.shape[1], dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
]
