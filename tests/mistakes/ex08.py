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
    Wrong("count-answer", "attention is still 4·D²", '''
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
    Wrong("count-answer", "a tied model still gets its own LM head", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    attention = D * q + D * kv + D * kv + q * D
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    return blocks + V * D + D + V * D
'''),
    Wrong("count-answer", "assumes head_dim = D / n_heads", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    kv_dim = D * config.n_kv_heads // config.n_heads  # K and V are n_kv/n_heads as wide
    attention = 2 * D * D + 2 * D * kv_dim
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "need not equal D when head_dim is given", '''
def count_params(config):
    D, F, V = config.d_model, config.d_ff, config.vocab_size
    kv = config.n_kv_heads * config.head_dim
    attention = 2 * D * D + 2 * D * kv  # q and o are D x D
    blocks = config.n_layers * (attention + 3 * D * F + 2 * D)
    head = 0 if config.tie_embeddings else V * D
    return blocks + V * D + D + head
'''),
    Wrong("count-answer", "which way round", '''
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
    Wrong("moe-answer", "the active count has only the experts", '''
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
    Wrong("moe-answer", "three matrices", '''
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
    Wrong("moe-answer", "Task 1's bug", '''
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
    Wrong("window-answer", "computed by all n_heads query heads", '''
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
    # --- Task 4: predictions ----------------------------------------------------------------------------
    Wrong("predictions-answer", "rule of thumb", '''
def predictions():
    return {"llama_2_13b_params_b": (12 * 40 * 5120**2 + 2 * 32_000 * 5120) / 1e9,
            "kv_cache_gib": 4.0, "max_train_params_b": 5.0, "train_flops_e21": 80.86}
'''),
    Wrong("predictions-answer", "does not tie", '''
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
    Wrong("predictions-answer", "come on top", '''
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
]
