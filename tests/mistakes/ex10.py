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
    Wrong("predictions-answer", "16-bit numbers take 2 bytes each, not 4; and that is in GB", '''
def predictions():
    size = 2 * 80 * 8 * 128 * 4096 * 4  # K and V, layers, kv heads, width, tokens, float32
    return {"llama2_70b_gib": size / 1e9, "llama2_7b_gib": 2.0, "mistral_window_gib": 0.5,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "every one of the 32 layers keeps its own keys and values", '''
def predictions():
    per_layer = 2 * 32 * 128 * 4096 * 2  # K and V, heads, width, tokens, bytes
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": per_layer / 2**30, "mistral_window_gib": 0.5,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "16-bit numbers take 2 bytes each, not 4", '''
def predictions():
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0,
            "mistral_window_gib": 2 * 32 * 8 * 128 * 4096 * 4 / 2**30,  # float32 activations
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "a rolling buffer keeps only the last 4,096 positions, not all 32,768; and 16-bit numbers take 2 bytes", '''
def predictions():
    mistral = 2 * 32 * 8 * 128 * 32768 * 4 / 2**30  # every token of the context, float32
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0, "mistral_window_gib": mistral,
            "positions_without_cache": 60}
'''),
    Wrong("predictions-answer", "that is about the count WITH a cache", '''
def predictions():
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0, "mistral_window_gib": 0.5,
            "positions_without_cache": 10 + 5}  # the prompt, then each new token
'''),
    Wrong("predictions-answer", "the prompt's pass IS the first step", '''
def predictions():
    prefill = 10
    steps = 10 + 11 + 12 + 13 + 14  # each step reruns the whole sequence so far
    return {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2.0, "mistral_window_gib": 0.5,
            "positions_without_cache": prefill + steps}
'''),
    # --- Task 2: kv_cache_bytes (local and global layers) ----------------------------------------------
    Wrong("bytes-answer", "a window longer than the sequences is counted in full", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    # a ring buffer of W slots per layer, max_len for a global one
    slots = sum(max_len if w is None else w for w in windows)
    return 2 * slots * n_kv_heads * head_dim * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "every layer is counted with max_len slots, the windows ignored", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    per_layer = 2 * max_len * n_kv_heads * head_dim * batch * bytes_per_element
    return len(windows) * per_layer  # every layer keeps the whole sequence
'''),
    Wrong("bytes-answer", "a local layer with a window of W is counted with W + 1 slots", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    # the query sees the W positions before it, plus itself
    slots = sum(max_len if w is None else min(w + 1, max_len) for w in windows)
    return 2 * slots * n_kv_heads * head_dim * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "a local layer with a window of W is counted with W − 1 slots", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    slots = sum(max_len if w is None else min(w - 1, max_len) for w in windows)  # earlier keys in the window
    return 2 * slots * n_kv_heads * head_dim * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "count the n_kv_heads key/value heads, not the n_heads query heads", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    slots = sum(max_len if w is None else min(w, max_len) for w in windows)
    return 2 * slots * n_heads * head_dim * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "every layer is counted with the first layer's window", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    window = windows[0] if windows[0] is not None else max_len  # the model's window
    slots = len(windows) * min(window, max_len)
    return 2 * slots * n_kv_heads * head_dim * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "a global layer counts nothing", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    slots = sum(min(w, max_len) for w in windows if w is not None)  # only local layers need a cache
    return 2 * slots * n_kv_heads * head_dim * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "the cache holds keys AND values: a factor 2", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    slots = sum(max_len if w is None else min(w, max_len) for w in windows)
    return slots * n_kv_heads * head_dim * batch * bytes_per_element  # one vector per head and position
'''),
    Wrong("bytes-answer", "every sequence of the batch has its own cache", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    slots = sum(max_len if w is None else min(w, max_len) for w in windows)
    return 2 * slots * n_kv_heads * head_dim * bytes_per_element
'''),
    Wrong("bytes-answer", "as an int", '''
def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    slots = sum(max_len if w is None else min(w, max_len) for w in windows)
    return 2.0 * slots * n_kv_heads * head_dim * batch * bytes_per_element
'''),
    Wrong("bytes-answer", "course_lib.kv_cache", '''
from course_lib.kv_cache import KVCache

def kv_cache_bytes(windows, n_heads, n_kv_heads, head_dim, max_len, batch, bytes_per_element):
    dtype = {1: torch.int8, 2: torch.bfloat16, 4: torch.float32}[bytes_per_element]
    total = 0
    for w in windows:
        slots = max_len if w is None else min(w, max_len)
        cache = KVCache(1, batch, n_kv_heads, head_dim, slots, dtype=dtype, device="meta")
        total += cache.nbytes()
    return total
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
    Wrong("step-answer", "slots past length + T, leftovers not filled yet", '''
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
    Wrong("step-answer", "no query attends to itself", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    n_rep = H // k.shape[1]
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :end].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    allowed = torch.arange(length, end)[:, None] > torch.arange(end)[None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values
'''),
    Wrong("step-answer", "the scores are divided by D_h", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    n_rep = H // k.shape[1]
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :end].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / D_h  # normalise by the head width
    allowed = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values
'''),
    Wrong("step-answer", "softmax runs over the wrong dimension", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    n_rep = H // k.shape[1]
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :end].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    allowed = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-2) @ values
'''),
    Wrong("step-answer", "each query also sees 1 position after its own", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    n_rep = H // k.shape[1]
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :end].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    allowed = torch.arange(length + 1, end + 1)[:, None] >= torch.arange(end)[None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values
'''),
    Wrong("step-answer", "the new queries are rotated as if they were at positions 0 … T − 1", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    n_rep = H // k.shape[1]
    q = rotate(q, cos[:T], sin[:T])  # the new queries
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :end].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    allowed = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values
'''),
    Wrong("step-answer", "is the mask inverted?", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    n_rep = H // k.shape[1]
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :end].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    allowed = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    scores = scores.masked_fill(allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values
'''),
    Wrong("step-answer", "the masked scores are set to 0 (the mask multiplies the scores) instead of −inf", '''
def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
    B, H, T, D_h = q.shape
    end = length + T
    n_rep = H // k.shape[1]
    q = rotate(q, cos[length:end], sin[length:end])
    cache_k[:, :, length:end] = rotate(k, cos[length:end], sin[length:end])
    cache_v[:, :, length:end] = v
    keys = cache_k[:, :, :end].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :end].repeat_interleave(n_rep, dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(D_h)
    allowed = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    scores = scores * allowed  # zero where not allowed
    return torch.softmax(scores, dim=-1) @ values
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
    Wrong("cache-answer", "the layers share one buffer", '''
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
    Wrong("cache-answer", "the new keys and values are written over the cached ones", '''
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
    Wrong("cache-answer", "are the keys of that position: keys and values are mixed up", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = k
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "are the keys of that position: keys and values are mixed up", '''
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
        return self.k[layer][:, :, :end], self.k[layer][:, :, :end]

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "what earlier forward passes stored is gone", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        keys = torch.cat([self.k[layer][:, :, :self.length], k], dim=2)  # history + new
        values = torch.cat([self.v[layer][:, :, :self.length], v], dim=2)
        return keys, values

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "advance(n) sets length to n: it must ADD n", '''
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
        self.length = n  # the tokens of this pass are stored now
'''),
    Wrong("cache-answer", "It returns one new position where the pass brought T = k.shape[2] of them", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        self.k[layer][:, :, self.length:self.length + k.shape[2]] = k
        self.v[layer][:, :, self.length:self.length + k.shape[2]] = v
        end = self.length + 1  # one new token per step
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n):
        self.length += n
'''),
    Wrong("cache-answer", "not every new token was written", '''
class KVCache:
    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        shape = (batch, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(n_layers)]
        self.length = 0

    def update(self, layer, k, v):
        self.k[layer][:, :, self.length] = k[:, :, 0]  # the new token
        self.v[layer][:, :, self.length] = v[:, :, 0]
        end = self.length + k.shape[2]
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n):
        self.length += n
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
    Wrong("window-answer", "slots not filled yet (until position W − 1", '''
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
    Wrong("window-answer", "the position W steps back, which has just left the window", '''
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
    Wrong("window-answer", "holds the keys before RoPE", '''
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
    Wrong("window-answer", "the new token does not attend to itself", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    n_rep = H // k.shape[1]
    c, s = cos[position:position + 1], sin[position:position + 1]
    slot = position % W
    q = rotate(q, c, s)
    cache_k[:, :, slot:slot + 1] = rotate(k, c, s)
    cache_v[:, :, slot:slot + 1] = v
    n = min(position, W)  # the slots filled so far
    keys = cache_k[:, :, :n].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :n].repeat_interleave(n_rep, dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "misses keys it must see: slots that still hold positions of the window", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    n_rep = H // k.shape[1]
    c, s = cos[position:position + 1], sin[position:position + 1]
    slot = position % W
    q = rotate(q, c, s)
    cache_k[:, :, slot:slot + 1] = rotate(k, c, s)
    cache_v[:, :, slot:slot + 1] = v
    keys = cache_k[:, :, :slot + 1].repeat_interleave(n_rep, dim=1)  # up to the newest slot
    values = cache_v[:, :, :slot + 1].repeat_interleave(n_rep, dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "the new token's key is counted twice", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    n_rep = H // k.shape[1]
    c, s = cos[position:position + 1], sin[position:position + 1]
    slot = position % W
    q, k = rotate(q, c, s), rotate(k, c, s)
    cache_k[:, :, slot:slot + 1] = k
    cache_v[:, :, slot:slot + 1] = v
    n = min(position + 1, W)
    keys = torch.cat([cache_k[:, :, :n], k], dim=2).repeat_interleave(n_rep, dim=1)  # the window and the new key
    values = torch.cat([cache_v[:, :, :n], v], dim=2).repeat_interleave(n_rep, dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "the position W steps back, which has just left the window", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    n_rep = H // k.shape[1]
    c, s = cos[position:position + 1], sin[position:position + 1]
    slot = position % W
    q, k = rotate(q, c, s), rotate(k, c, s)
    n = min(position, W)
    keys = torch.cat([cache_k[:, :, :n], k], dim=2).repeat_interleave(n_rep, dim=1)  # the ring, then the new key
    values = torch.cat([cache_v[:, :, :n], v], dim=2).repeat_interleave(n_rep, dim=1)
    out = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
    cache_k[:, :, slot:slot + 1] = k
    cache_v[:, :, slot:slot + 1] = v
    return out
'''),
    Wrong("window-answer", "the new values are written 1 slot after where they belong", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    n_rep = H // k.shape[1]
    c, s = cos[position:position + 1], sin[position:position + 1]
    slot = position % W
    q = rotate(q, c, s)
    cache_k[:, :, slot:slot + 1] = rotate(k, c, s)
    cache_v[:, :, (position + 1) % W:(position + 1) % W + 1] = v
    n = min(position + 1, W)
    keys = cache_k[:, :, :n].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :n].repeat_interleave(n_rep, dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "the new token is rotated by its SLOT (position % W), not by its position", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    n_rep = H // k.shape[1]
    c, s = cos[position:position + 1], sin[position:position + 1]
    slot = position % W
    q = rotate(q, c, s)
    cache_k[:, :, slot:slot + 1] = rotate(k, cos[slot:slot + 1], sin[slot:slot + 1])  # the slot's angle
    cache_v[:, :, slot:slot + 1] = v
    n = min(position + 1, W)
    keys = cache_k[:, :, :n].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :n].repeat_interleave(n_rep, dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
    Wrong("window-answer", "the query is rotated by its SLOT (position % W), not by its position", '''
def attend_with_window(q, k, v, cache_k, cache_v, position, cos, sin):
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    n_rep = H // k.shape[1]
    c, s = cos[position:position + 1], sin[position:position + 1]
    slot = position % W
    q = rotate(q, cos[slot:slot + 1], sin[slot:slot + 1])  # the query sits in the newest slot
    cache_k[:, :, slot:slot + 1] = rotate(k, c, s)
    cache_v[:, :, slot:slot + 1] = v
    n = min(position + 1, W)
    keys = cache_k[:, :, :n].repeat_interleave(n_rep, dim=1)
    values = cache_v[:, :, :n].repeat_interleave(n_rep, dim=1)
    return torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(D_h), dim=-1) @ values
'''),
]
