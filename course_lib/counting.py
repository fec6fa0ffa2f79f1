"""Counting a decoder-only model: parameters, FLOPs, the attention/FFN crossover, KV-cache and training
memory — all pure functions of a :class:`~course_lib.config.ModelConfig`.

Conventions
-----------
* Parameters are counted exactly as ``model.DecoderLM`` builds them (tests compare with
  ``sum(p.numel())`` of the model on the ``meta`` device, and with Hugging Face's Llama/Mistral).
* FLOPs are forward-pass FLOPs, a multiply-add counting 2: a (m × k) @ (k × n) product costs 2·m·k·n.
  The attention scores are counted for all T × S query–key pairs, as a dense kernel computes them;
  ``causal=True`` counts only the pairs a causal mask keeps (about half), the least a kernel that
  skips masked scores must do. Softmax is counted as 5 FLOPs
  per score (max, subtract, exp, sum, divide) — a convention, not a measurement.
* Elementwise work is left out: the norms, RoPE and the residual adds touch O(T·D) numbers, and
  SwiGLU's SiLU and gating product O(T·F) — a few FLOPs per number, against the O(T·D·F) of the
  FFN's matrix products (chapter 8 measures the share: well under 1 %).
* Dropout (``config.dropout``) has no parameters and changes no count here. Its masks are
  activations, which :func:`training_bytes` leaves out: in training with p > 0, autograd keeps
  what backward needs to replay each mask (on the CPU a float mask the size of the dropped
  tensor; CUDA's dropout a bool one; a fused attention kernel may keep only its random state),
  which chapter 11's count of saved tensors, made for the block without dropout, leaves out too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import ModelConfig

__all__ = [
    "ParamCount",
    "count_params",
    "approx_params",
    "block_flops",
    "attention_core_flops",
    "crossover_length",
    "moe_params",
    "kv_cache_bytes",
    "weight_bytes",
    "training_bytes",
]


@dataclass(frozen=True)
class ParamCount:
    """Exact parameter counts: the total and where they are. ``per_block`` is one block's split."""

    total: int
    embedding: int
    positional: int
    attention: int
    ffn: int
    norms: int
    lm_head: int
    per_block: dict[str, int]
    bigram: int = 0  # the bigram table, (V + 1)·V·D with ``bigram_embed``
    trigram: int = 0  # the hashed trigram table, R·D with ``trigram_buckets`` R

    def as_dict(self) -> dict[str, int]:
        """The model-wide components (without ``per_block``, and without ``bigram`` or
        ``trigram`` where the model has no such table)."""
        d = asdict(self)
        d.pop("per_block")
        for table in ("bigram", "trigram"):
            if not d[table]:
                d.pop(table)
        return d


def _check_config(config) -> ModelConfig:
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
    return config


def _norm_params(c: ModelConfig) -> int:
    """RMSNorm has a gain per feature; LayerNorm a gain, and a bias when the config has biases."""
    return c.d_model * (2 if c.norm == "layer" and c.bias else 1)


def _attention_params(c: ModelConfig) -> int:
    q_width = c.n_heads * c.head_dim  # H · D_h
    kv_width = c.n_kv_heads * c.head_dim  # H_kv · D_h
    weights = c.d_model * q_width + 2 * c.d_model * kv_width + q_width * c.d_model  # w_q, w_k, w_v, w_o
    biases = (q_width + 2 * kv_width + c.d_model) if c.bias else 0
    return weights + biases


def _ffn_params(c: ModelConfig) -> int:
    if c.ffn == "swiglu":  # w_gate, w_up: D → F; w_down: F → D (never biased: see ModelConfig)
        return 3 * c.d_model * c.d_ff
    return 2 * c.d_model * c.d_ff + ((c.d_ff + c.d_model) if c.bias else 0)  # w_up, w_down


def count_params(config: ModelConfig) -> ParamCount:
    """Exact parameter count of ``DecoderLM(config)``, split by component.

    Per block: attention (w_q, w_k, w_v, w_o), FFN, two norms. Model: token embedding V·D, learned
    positions (``positional="learned"``) max_seq_len·D, N blocks, a final norm (pre-norm only: a
    post-norm stack already ends normalised), an LM head V·D unless it is tied to the embedding,
    with ``bigram_embed`` a bigram table (V + 1)·V·D, and with ``trigram_buckets`` R a trigram
    table R·D.
    """
    c = _check_config(config)
    per_block = {"attention": _attention_params(c), "ffn": _ffn_params(c), "norms": 2 * _norm_params(c)}
    embedding = c.vocab_size * c.d_model
    positional = c.max_seq_len * c.d_model if c.positional == "learned" else 0
    lm_head = 0 if c.tie_embeddings else c.vocab_size * c.d_model
    parts = {
        "embedding": embedding,
        "positional": positional,
        "attention": c.n_layers * per_block["attention"],
        "ffn": c.n_layers * per_block["ffn"],
        "norms": c.n_layers * per_block["norms"] + (_norm_params(c) if c.placement == "pre" else 0),
        "lm_head": lm_head,
        "bigram": (c.vocab_size + 1) * c.vocab_size * c.d_model if c.bigram_embed else 0,
        "trigram": (c.trigram_buckets or 0) * c.d_model,
    }
    return ParamCount(total=sum(parts.values()), per_block=per_block, **parts)


def approx_params(config: ModelConfig) -> int:
    """The rule of thumb 12·N·D² + 2·V·D, an approximation.

    12·N·D² is Kaplan et al.'s (2020) count of the blocks, 12·n_layer·d_model², which leaves
    out the embeddings on purpose; the 2·V·D for two untied V × D tables (embedding and LM
    head) is this course's addition, so that the rule estimates the whole model. Per block it
    counts 4·D² of attention (multi-head, H·D_h = D) and 8·D² of FFN (two matrices of width
    4·D, or SwiGLU's three of width 8/3·D), and it leaves out norms, biases and learned
    positions. GQA, other FFN widths and tying make it drift further (chapter 8 compares it
    with :func:`count_params`).
    """
    c = _check_config(config)
    return 12 * c.n_layers * c.d_model**2 + 2 * c.vocab_size * c.d_model


def block_flops(
    config: ModelConfig, seq_len: int, batch: int = 1, kv_len: int | None = None,
    *, causal: bool = False
) -> dict[str, int]:
    """Forward FLOPs of one block by component, for ``batch`` sequences of ``seq_len``
    queries attending to ``kv_len`` keys (default ``seq_len``; larger when decoding
    with a cache).

    Keys: q_proj, k_proj, v_proj, o_proj, qk (scores QKᵀ), softmax, av (weights × V),
    and the FFN's matrices (ffn_gate, ffn_up, ffn_down for SwiGLU; ffn_up, ffn_down
    otherwise). Per component::

        q_proj, o_proj    2·B·T·D·(H·D_h)         k_proj, v_proj   2·B·T·D·(H_kv·D_h)
        qk, av            2·B·H·P·D_h             softmax          5·B·H·P
        each FFN matrix   2·B·T·D·F

    where P is the number of query–key pairs scored: T·S (dense), or with
    ``causal=True`` only those a causal mask keeps, T·(S − T) + T·(T + 1)/2 (the T
    queries are the last T of the S positions). See the module docstring for the
    conventions.
    """
    c = _check_config(config)
    if seq_len <= 0 or batch <= 0:
        raise ValueError(f"seq_len ({seq_len}) and batch ({batch}) must be positive")
    s = seq_len if kv_len is None else kv_len
    if s < seq_len:
        raise ValueError(f"kv_len ({s}) must be at least seq_len ({seq_len}): queries attend to themselves")
    tokens = batch * seq_len
    pairs = (seq_len * (s - seq_len) + seq_len * (seq_len + 1) // 2 if causal
             else seq_len * s)
    q_width, kv_width = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    flops = {
        "q_proj": 2 * tokens * c.d_model * q_width,
        "k_proj": 2 * tokens * c.d_model * kv_width,
        "v_proj": 2 * tokens * c.d_model * kv_width,
        "o_proj": 2 * tokens * q_width * c.d_model,
        "qk": 2 * batch * c.n_heads * pairs * c.head_dim,
        "softmax": 5 * batch * c.n_heads * pairs,
        "av": 2 * batch * c.n_heads * pairs * c.head_dim,
    }
    matrix = 2 * tokens * c.d_model * c.d_ff
    if c.ffn == "swiglu":
        flops.update(ffn_gate=matrix, ffn_up=matrix, ffn_down=matrix)
    else:
        flops.update(ffn_up=matrix, ffn_down=matrix)
    return flops


def attention_core_flops(config: ModelConfig, seq_len: int, *, window: int | None = None) -> int:
    """Forward FLOPs of one block's attention core (QKᵀ, softmax, AV) for one sequence of ``seq_len``
    tokens under a causal mask, counting only the scores the mask keeps (a kernel that skips the
    masked ones), optionally within a sliding ``window`` (query i sees the keys i − W + 1 … i, itself
    included, as Mistral's ``sliding_window``)::

        (4·D_h + 5) · H · P,   P = Σ_{i<T} min(i + 1, W) = T(T + 1)/2               if W ≥ T
                                                           W(W + 1)/2 + (T − W)·W   otherwise

    2·D_h FLOPs per kept score for QKᵀ, 2·D_h for AV and 5 for the softmax (the module's
    conventions). With a window the cost grows linearly in T once T > W.
    """
    c = _check_config(config)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise ValueError(f"seq_len ({seq_len}) must be a positive int")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise ValueError(f"window ({window}) must be a positive int or None")
    T = seq_len
    if window is None or window >= T:
        pairs = T * (T + 1) // 2  # query i sees i + 1 keys
    else:
        pairs = window * (window + 1) // 2 + (T - window) * window  # the first W fill up, then W each
    return (4 * c.head_dim + 5) * c.n_heads * pairs


def moe_params(config: ModelConfig, n_experts: int, top_k: int) -> tuple[int, int]:
    """(total, active) parameters of ``config`` with every FFN replaced by a mixture of experts.

    Each block's FFN becomes ``n_experts`` SwiGLU experts (3·D·F each) and a router, a D → E linear
    map without bias; each token runs through ``top_k`` of the experts (Mixtral: E = 8, k = 2; Jiang
    et al., 2024). *Total* counts every parameter; *active* those one token uses: everything but the
    E − k experts it skips. Everything outside the FFN is as in :func:`count_params`.
    """
    c = _check_config(config)
    if c.ffn != "swiglu":
        raise ValueError(f"moe_params counts SwiGLU experts; config.ffn is {c.ffn!r}")
    for name, value in (("n_experts", n_experts), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} ({value}) must be a positive int")
    if top_k > n_experts:
        raise ValueError(f"top_k ({top_k}) cannot exceed n_experts ({n_experts})")
    dense = count_params(c)
    expert = _ffn_params(c)  # w_gate, w_up, w_down of one expert
    router = c.d_model * n_experts  # D → E, no bias
    outside = dense.total - dense.ffn  # everything but the FFNs
    total = outside + c.n_layers * (n_experts * expert + router)
    active = outside + c.n_layers * (top_k * expert + router)
    return total, active


def crossover_length(config: ModelConfig, *, causal: bool = False) -> float:
    """The sequence length T at which the attention core (QKᵀ, softmax, AV) costs as
    many FLOPs as the FFN. Per sequence the core costs (4·D_h + 5)·H·T² and the FFN
    m·D·F·T (m = 6 for SwiGLU's three matrices, 4 for two), so
    T = m·D·F / ((4·D_h + 5)·H). Below it the FFN dominates.

    The key/value heads H_kv do not appear: grouped-query attention shrinks the K and
    V projections, not the H score matrices. With ``causal=True`` the core scores only
    T·(T + 1)/2 pairs, and the crossover moves from L (dense) to 2·L − 1.
    """
    c = _check_config(config)
    m = 6 if c.ffn == "swiglu" else 4
    dense = m * c.d_model * c.d_ff / ((4 * c.head_dim + 5) * c.n_heads)
    return 2 * dense - 1 if causal else dense


def kv_cache_bytes(config: ModelConfig, seq_len: int, batch: int = 1, bytes_per_element: int = 2) -> int:
    """Bytes of a KV cache holding ``seq_len`` positions: 2 (K and V) · N · H_kv · D_h · T · B · bytes.

    Grouped-query attention shrinks it by H / H_kv relative to multi-head attention.
    """
    c = _check_config(config)
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * seq_len * batch * bytes_per_element


def weight_bytes(config: ModelConfig, bytes_per_param: int = 2) -> int:
    """Bytes to hold the weights (2 per parameter in 16-bit: bfloat16 or float16)."""
    return count_params(config).total * bytes_per_param


def training_bytes(config: ModelConfig, weight: int = 2, grad: int = 2, optimizer: int = 12) -> int:
    """Bytes of training state per the usual mixed-precision Adam recipe, activations excluded:
    16-bit weights and gradients plus float32 master weights and Adam's two moments (4 + 4 + 4 = 12),
    16 bytes per parameter in all."""
    return count_params(config).total * (weight + grad + optimizer)
