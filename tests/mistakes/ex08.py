"""Realistic wrong answers for exercise 08 (counting parameters, FLOPs and memory)."""

from . import Wrong

ASSIGNMENT = "08_counting"

WRONG = [
    # --- Task 1: count_params (find and fix) -----------------------------------------------------------
    Wrong("count-answer", "still what the given version returns", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * D * D  # looks right to me: q, k, v, o
    ffn = 3 * D * F
    norms = 2 * D
    return config.n_layers * (attention + ffn + norms) + V * D + D + V * D
'''),
    Wrong("count-answer", "w_k and w_v are counted as D × d_model", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * D * D
    ffn = 3 * D * F
    norms = 2 * D
    blocks = config.n_layers * (attention + ffn + norms)
    if config.tie_embeddings:
        return blocks + V * D + D
    return blocks + 2 * V * D + D
'''),
    Wrong("count-answer", "a tied model gets its own LM head", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    attention = D * q + D * kv + D * kv + q * D
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    return blocks + V * D + D + V * D
'''),
    Wrong("count-answer", "that assumes head_dim = d_model / n_heads", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    kv_dim = D * config.n_kv_heads // config.n_heads  # K and V are n_kv/n_heads as wide
    attention = 2 * D * D + 2 * D * kv_dim
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "w_q and w_o are counted as D × d_model", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    kv = config.n_kv_heads * config.head_dim
    attention = 2 * D * D + 2 * D * kv  # q and o are D x D
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "ties are the wrong way round", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    blocks = config.n_layers * (2 * D * q + 2 * D * kv + 3 * D * F + 2 * D)
    head = V * D if config.tie_embeddings else 0  # tied = the head is there too
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "the final norm", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    blocks = config.n_layers * (2 * D * q + 2 * D * kv + 3 * D * F + 2 * D)
    return blocks + V * D * (1 if config.tie_embeddings else 2)
'''),
    Wrong("count-answer", "as an int", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    ratio = config.n_kv_heads / config.n_heads
    q = config.n_heads * config.head_dim
    attention = 2 * D * q + 2 * D * q * ratio
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "scores no points", '''
import torch
from course_lib.model import DecoderLM

def count_params(config):
    with torch.device("meta"):
        model = DecoderLM(config)
    return sum(p.numel() for p in model.parameters())
'''),
    Wrong("count-answer", "scores no points", '''
from course_lib import counting

def count_params(config):
    return counting.count_params(config).total
'''),
    Wrong("count-answer", "biases? The linear layers of a Llama-style block have none", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    attention = (D * q + q) + 2 * (D * kv + kv) + (q * D + D)  # each projection with its bias
    ffn = 2 * (D * F + F) + (F * D + D)
    blocks = config.n_layers * (attention + ffn + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "each norm is counted with two vectors of d_model (a gain and a bias)", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    norm = 2 * D  # a norm has a gain and a bias
    blocks = config.n_layers * (2 * D * q + 2 * D * kv + 3 * D * F + 2 * norm)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + norm + head
'''),
    Wrong("count-answer", "(max_seq_len, D) table", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    blocks = config.n_layers * (2 * D * q + 2 * D * kv + 3 * D * F + 2 * D)
    embeddings = V * D + config.max_seq_len * D  # tokens and positions
    head = 0 if config.tie_embeddings else V * D
    return blocks + embeddings + D + head
'''),
    Wrong("count-answer", "the final norm is counted in every block", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    per_block = 2 * D * q + 2 * D * kv + 3 * D * F + 3 * D  # two norms and the final one
    head = 0 if config.tie_embeddings else V * D
    return config.n_layers * per_block + V * D + head
'''),
    Wrong("count-answer", "does not change with config.d_ff", '''
def count_params(config):
    D, V = config.d_model, config.vocab_size
    F = 256 * ((8 * D // 3 + 255) // 256)  # Llama's hidden width
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    blocks = config.n_layers * (2 * D * q + 2 * D * kv + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "w_k and w_v are counted as D × head_dim (one head)", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.head_dim  # keys and values: one head's width, shared by the query heads
    blocks = config.n_layers * (2 * D * q + 2 * D * kv + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "w_q and w_o are counted as D × n_kv_heads · head_dim", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    kv = config.n_kv_heads * config.head_dim
    attention = 4 * D * kv  # q, k, v, o
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    # --- Task 2: moe_params (extend) -------------------------------------------------------------------
    Wrong("moe-answer", "the router is missing", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert) + tables
    active = config.n_layers * (attention + 2 * D + top_k * expert) + tables
    return total, active
'''),
    Wrong("moe-answer", "the router counts in the active parameters too", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    router = D * n_experts
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert + router) + tables
    active = config.n_layers * (attention + 2 * D + top_k * expert) + tables  # only experts run
    return total, active
'''),
    Wrong("moe-answer", "the active count leaves out parts every token uses", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    router = D * n_experts
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert + router) + tables
    active = config.n_layers * (top_k * expert + router)  # the experts a token uses
    return total, active
'''),
    Wrong("moe-answer", "scales the whole model", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    block = attention + 2 * D + n_experts * 3 * D * F + D * n_experts
    total = config.n_layers * block + V * D * (1 if config.tie_embeddings else 2) + D
    return total, total * top_k // n_experts
'''),
    Wrong("moe-answer", "the dense FFN is still counted", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q, kv = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    dense_block = 2 * D * q + 2 * D * kv + 3 * D * F + 2 * D
    dense = config.n_layers * dense_block + V * D * (1 if config.tie_embeddings else 2) + D
    expert, router = 3 * D * F, D * n_experts
    total = dense + config.n_layers * (n_experts * expert + router)
    active = dense + config.n_layers * (top_k * expert + router)
    return total, active
'''),
    Wrong("moe-answer", "the two numbers are swapped", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    rest = config.n_layers * (attention + 2 * D + D * n_experts)
    rest += V * D * (1 if config.tie_embeddings else 2) + D
    active = rest + config.n_layers * top_k * 3 * D * F
    total = rest + config.n_layers * n_experts * 3 * D * F
    return active, total
'''),
    Wrong("moe-answer", "each expert is a SwiGLU FFN with three D × d_ff matrices", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 2 * D * F  # up and down
    router = D * n_experts
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert + router) + tables
    active = config.n_layers * (attention + 2 * D + top_k * expert + router) + tables
    return total, active
'''),
    Wrong("moe-answer", "outside the FFNs, w_q and w_o are counted as D × d_model", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 4 * D * D
    expert = 3 * D * F
    router = D * n_experts
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert + router) + tables
    active = config.n_layers * (attention + 2 * D + top_k * expert + router) + tables
    return total, active
'''),
    Wrong("moe-answer", "the router is a linear map without bias", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    router = D * n_experts + n_experts  # a linear layer with its bias
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert + router) + tables
    active = config.n_layers * (attention + 2 * D + top_k * expert + router) + tables
    return total, active
'''),
    Wrong("moe-answer", "one router for the whole model", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    router = D * n_experts  # one router decides for the whole model
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert) + router + tables
    active = config.n_layers * (attention + 2 * D + top_k * expert) + router + tables
    return total, active
'''),
    Wrong("moe-answer", "one set of experts for the whole model", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    experts = n_experts * 3 * D * F  # the expert pool, shared by the blocks
    router = D * n_experts
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + router) + experts + tables
    active = config.n_layers * (attention + 2 * D + router) + top_k * 3 * D * F + tables
    return total, active
'''),
    Wrong("moe-answer", "the router maps D to n_experts scores", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    router = D * top_k  # it scores the experts a token uses
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    total = config.n_layers * (attention + 2 * D + n_experts * expert + router) + tables
    active = config.n_layers * (attention + 2 * D + top_k * expert + router) + tables
    return total, active
'''),
    Wrong("moe-answer", "the total scales the active count by n_experts / top_k", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    router = D * n_experts
    tables = V * D * (1 if config.tie_embeddings else 2) + D
    active = config.n_layers * (attention + 2 * D + top_k * expert + router) + tables
    total = active * n_experts // top_k  # n_experts / top_k times as many experts
    return total, active
'''),
    Wrong("moe-answer", "the active count leaves out the (V, D) embedding table", '''
def moe_params(config, n_experts, top_k):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    attention = 2 * D * config.n_heads * config.head_dim + 2 * D * config.n_kv_heads * config.head_dim
    expert = 3 * D * F
    router = D * n_experts
    head = 0 if config.tie_embeddings else V * D
    total = config.n_layers * (attention + 2 * D + n_experts * expert + router) + V * D + D + head
    # the embedding is a lookup, not a matrix product: no token "uses" its weights
    active = config.n_layers * (attention + 2 * D + top_k * expert + router) + D + head
    return total, active
'''),
    # --- Task 3: window_core_flops (extend) -------------------------------------------------------------
    Wrong("window-answer", "the window is ignored", '''
def window_core_flops(config, seq_len, window=None):
    kept = seq_len * (seq_len + 1) // 2
    return config.n_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "every query is scored against every key", '''
def window_core_flops(config, seq_len, window=None):
    scores = seq_len * seq_len  # a T x T score matrix per head
    return config.n_heads * scores * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "every query is given W keys", '''
def window_core_flops(config, seq_len, window=None):
    if window is None:
        kept = seq_len * (seq_len + 1) // 2
    else:
        kept = seq_len * min(window, seq_len)  # each query sees W keys
    return config.n_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "a query also attends to itself", '''
def window_core_flops(config, seq_len, window=None):
    W = seq_len if window is None else window
    kept = sum(min(i, W) for i in range(seq_len))  # keys before query i
    return config.n_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "not W + 1", '''
def window_core_flops(config, seq_len, window=None):
    kept = 0
    for i in range(seq_len):
        for j in range(i + 1):
            if window is None or i - j <= window:
                kept += 1
    return config.n_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "the windowed formula holds only when", '''
def window_core_flops(config, seq_len, window=None):
    T, W = seq_len, window
    if W is None:
        kept = T * (T + 1) // 2
    else:
        kept = W * (W + 1) // 2 + (T - W) * W
    return config.n_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "every one of the n_heads query heads computes its own", '''
def window_core_flops(config, seq_len, window=None):
    W = seq_len if window is None else window
    kept = sum(min(i + 1, W) for i in range(seq_len))
    return config.n_kv_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "the softmax", '''
def window_core_flops(config, seq_len, window=None):
    W = seq_len if window is None else window
    kept = sum(min(i + 1, W) for i in range(seq_len))
    return config.n_heads * kept * 2 * (2 * config.head_dim)  # QK^T and AV
'''),
    Wrong("window-answer", "as an int", '''
def window_core_flops(config, seq_len, window=None):
    T, W = seq_len, window
    if W is None or W >= T:
        kept = T * (T + 1) / 2
    else:
        kept = W * (W + 1) / 2 + (T - W) * W
    return config.n_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "two matrix products per score", '''
def window_core_flops(config, seq_len, window=None):
    W = seq_len if window is None else window
    kept = sum(min(i + 1, W) for i in range(seq_len))
    return config.n_heads * kept * (2 * config.head_dim + 5)
'''),
    Wrong("window-answer", "the softmax is counted once per query row", '''
def window_core_flops(config, seq_len, window=None):
    T, W = seq_len, window
    kept = T * (T + 1) // 2 if W is None or W >= T else W * (W + 1) // 2 + (T - W) * W
    products = kept * 4 * config.head_dim  # QK^T and AV
    softmax = 5 * T  # one softmax per query row
    return config.n_heads * (products + softmax)
'''),
    Wrong("window-answer", "your count changes with d_model: the head width is config.head_dim", '''
def window_core_flops(config, seq_len, window=None):
    d_head = config.d_model // config.n_heads
    W = seq_len if window is None else window
    kept = sum(min(i + 1, W) for i in range(seq_len))
    return config.n_heads * kept * (4 * d_head + 5)
'''),
    Wrong("window-answer", "your count lets the window reach forward too", '''
def window_core_flops(config, seq_len, window=None):
    kept = 0
    for i in range(seq_len):
        for j in range(seq_len):
            if j <= i and (window is None or abs(i - j) < window):
                kept += 1
            elif window is not None and j > i and j - i < window:
                kept += 1  # the window reaches both ways
    return config.n_heads * kept * (4 * config.head_dim + 5)
'''),
    Wrong("window-answer", "your count grows with n_layers", '''
def window_core_flops(config, seq_len, window=None):
    W = seq_len if window is None else window
    kept = sum(min(i + 1, W) for i in range(seq_len))
    per_layer = config.n_heads * kept * (4 * config.head_dim + 5)
    return config.n_layers * per_layer
'''),
    Wrong("window-answer", "your count changes with n_kv_heads", '''
def window_core_flops(config, seq_len, window=None):
    W = seq_len if window is None else window
    kept = sum(min(i + 1, W) for i in range(seq_len))
    scores = config.n_heads * kept * (2 * config.head_dim + 5)  # QK^T and softmax, every query head
    mix = config.n_kv_heads * kept * 2 * config.head_dim  # AV, once per value head
    return scores + mix
'''),
    Wrong("window-answer", "your count is twice the right one", '''
def window_core_flops(config, seq_len, window=None):
    W = seq_len if window is None else window
    kept = sum(min(i + 1, W) for i in range(seq_len))
    forward = config.n_heads * kept * (4 * config.head_dim + 5)
    return 2 * forward  # a multiply and an add for each term
'''),
    # --- Task 4: predictions ----------------------------------------------------------------------------
    Wrong("predictions-answer", "rule of thumb", '''
def predictions():
    return {"llama_2_13b_params_b": (12 * 40 * 5120**2 + 2 * 32_000 * 5120) / 1e9,
            "kv_cache_gib": 4.0, "max_train_params_b": 5.0, "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "one (V, D) table too few", '''
def predictions():
    D, F, V, N = 5120, 13_824, 32_000, 40
    n = N * (4 * D * D + 3 * D * F + 2 * D) + V * D + D
    return {"llama_2_13b_params_b": n / 1e9, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "nominal size", '''
def predictions():
    return {"llama_2_13b_params_b": 13.0, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "grouped-query attention", '''
def predictions():
    kv = 2 * 32 * 32 * 128 * 8192 * 4 * 2  # 32 heads of width 128
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": kv / 2**30, "max_train_params_b": 5.0,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "GiB (2³⁰ bytes)", '''
def predictions():
    kv = 2 * 32 * 8 * 128 * 8192 * 4 * 2
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": kv / 1e9, "max_train_params_b": 5.0,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "2 bytes per parameter", '''
def predictions():
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 80 / 2,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "leaves out the 16-bit weights and the 16-bit gradients", '''
def predictions():
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0,
            "max_train_params_b": 80 / (4 + 4 + 4), "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "forward pass alone", '''
def predictions():
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": 2 * 6_738_415_616 * 2e12 / 1e21}
'''),
    Wrong("predictions-answer", "exact count", '''
def predictions():
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": 6 * 7e9 * 2e12 / 1e21}
'''),
    Wrong("predictions-answer", "one D × F FFN matrix per block too few", '''
def predictions():
    D, F, V, N = 5120, 13_824, 32_000, 40
    n = N * (4 * D * D + 2 * D * F + 2 * D) + 2 * V * D + D  # up and down
    return {"llama_2_13b_params_b": n / 1e9, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "every one of the 32 layers keeps its own keys and values", '''
def predictions():
    kv = 2 * 8 * 128 * 8192 * 4 * 2  # K and V, kv heads, head width, tokens, batch, bytes
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": kv / 2**30, "max_train_params_b": 5.0,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "that counts bits", '''
def predictions():
    kv = 2 * 32 * 8 * 128 * 8192 * 4 * 16  # 16 bits per number
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": kv / 2**30, "max_train_params_b": 5.0,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "it counts the float32 gradients, which the recipe does not keep", '''
def predictions():
    # bf16 weights and grads, fp32 master copy and two moments, and fp32 gradients for Adam
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 80 / 20,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "use the number of parameters, not the number in billions", '''
def predictions():
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": 6 * 6.738 * 2e12 / 1e21}
'''),
    Wrong("predictions-answer", "6 in all, not 3", '''
def predictions():
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": 3 * 6_738_415_616 * 2e12 / 1e21}
'''),
    Wrong("predictions-answer", "it implies 14 bytes per parameter: your answer leaves out the 16-bit gradients", '''
def predictions():
    # bf16 weights, fp32 master copy, Adam's m and v: the gradients live in the master copy
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 80 / 14,
            "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "already counts the multiply-add as 2; do not double it", '''
def predictions():
    flops_per_token = 2 * 6 * 6_738_415_616  # 6 per parameter, a multiply and an add each
    return {"llama_2_13b_params_b": 13.0159, "kv_cache_gib": 4.0, "max_train_params_b": 5.0,
            "train_flops_e21": flops_per_token * 2e12 / 1e21}
'''),
]
