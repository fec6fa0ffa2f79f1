"""ModelConfig: every shape and variant of a decoder-only model, validated once, in one place.

Only the model (``model.DecoderLM``) and the counting functions see a whole config; the leaf modules
take plain scalars. ``PRESETS`` holds published shapes of real models by name.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["ModelConfig", "PRESETS", "get_preset"]

Norm = Literal["rms", "layer"]
Placement = Literal["pre", "post"]
FFN = Literal["swiglu", "gelu", "relu", "relu2"]
Positional = Literal["rope", "sinusoidal", "learned", "alibi", "none"]

_CHOICES = {
    "norm": ("rms", "layer"),
    "placement": ("pre", "post"),
    "ffn": ("swiglu", "gelu", "relu", "relu2"),
    "positional": ("rope", "sinusoidal", "learned", "alibi", "none"),
}


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and variants of a decoder-only transformer.

    Shape letters (see the notation page): V = vocab_size, D = d_model, N = n_layers, H = n_heads,
    H_kv = n_kv_heads, D_h = head_dim (default D / H), F = d_ff.

    The defaults describe the modern pre-norm block: RMSNorm, RoPE, SwiGLU, no biases. The variants
    the course compares are selected by ``norm``, ``placement``, ``ffn`` and ``positional``; ``bias``
    adds biases to every linear layer and LayerNorm (as in GPT-2 and GPT-3).

    ``dropout`` p is the probability of zeroing an activation during training, the survivors
    scaled by 1/(1 − p) so that every expectation is unchanged (inverted dropout; Srivastava et
    al., 2014). As in GPT-2 and nanoGPT it acts in three places: the attention weights (after the
    softmax), the output of each residual branch (attention and FFN) before it is added to the
    stream, and the input of the first block (token embeddings plus any absolute positions). It
    acts only in training mode (``model.train()``): in eval mode, and in ``generate``, the model
    is deterministic and computes exactly what the same weights compute with p = 0. The default,
    0, is the modern recipe (Llama and Mistral train without dropout) and adds no operation at all.
    Dropout has no parameters: the counts of ``counting`` do not depend on it.

    Three more variants come from the speedrun's recipe (chapter 13); each is off by default and
    adds no parameter. ``qk_norm``: every query and key vector is RMS-normalised over its D_h
    features, without a gain, before the attention scores (Dehghani et al., 2023; Wortsman et al.,
    2023): a score q·k/√D_h is then at most √D_h in size. ``zero_init_out``: the residual output
    projections (attention's ``w_o``, the FFN's ``w_down``) start at zero, so every block starts as
    the identity map (modded-nanogpt). ``logit_softcap`` c: the logits become c·tanh(z/c), bounded
    by ±c and close to z where |z| ≪ c (Gemma 2, Gemma Team 2024). ``ffn="relu2"`` is the FFN with
    ReLU(x)² (So et al., 2021).

    ``bigram_embed``: a second table, one row of D per pair (previous token, token), added to the
    token embedding: x_t = E[id_t] + B[id_{t−1}·V + id_t], with id_{−1} = V (no previous token: the
    first position of a sequence, or of a window), so (V + 1)·V rows, all starting at zero. It
    gives the first block what a previous-token head would have to learn; a lookup, it costs no
    FLOPs to speak of but (V + 1)·V·D parameters (cheap at V = 65 characters, not at 32,000 tokens).

    ``trigram_buckets`` R: a third table, of R rows, for the triple (token before the previous,
    previous token, token): x_t gains G[((id_{t−2}·(V + 1) + id_{t−1})·V + id_t) mod R], the
    missing tokens before a sequence's start again V, the table again all zero at first. There are
    (V + 1)²·V triples, too many for a row each, so triples share rows, R of them: a hashed
    embedding (Svenstrup et al., 2017), the trick of the n-gram tables that Huang et al. (2025)
    add to a transformer's input. Few occurrences fall in a row shared with a more frequent triple
    when R well exceeds the number of distinct triples in the text (chapter 13 counts them). None:
    no table.
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    n_kv_heads: int | None = None  # None: equal to n_heads (multi-head attention)
    head_dim: int | None = None  # None: d_model // n_heads
    max_seq_len: int = 2048
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    norm: Norm = "rms"
    placement: Placement = "pre"
    ffn: FFN = "swiglu"
    positional: Positional = "rope"
    bias: bool = False
    sliding_window: int | None = None  # Mistral: a query sees at most this many positions (itself included)
    init_std: float = 0.02  # σ of the initial weights (init.gpt2_init_): GPT-2's; 1/√D suits small D
    dropout: float = 0.0  # p: probability of zeroing, in training mode only (see above); 0 = none
    qk_norm: bool = False  # RMS-normalise each query and key vector (no gain) before the scores
    zero_init_out: bool = False  # w_o and w_down start at zero: every block starts as the identity
    logit_softcap: float | None = None  # c: logits → c·tanh(logits / c); None = no cap
    bigram_embed: bool = False  # add B[previous id · V + id], a row per pair of tokens (see above)
    trigram_buckets: int | None = None  # R: add a hashed trigram table of R rows (see above)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
            _positive_int(name, getattr(self, name))
        # the fields left to their defaults, which :meth:`replace` derives again
        object.__setattr__(self, "_derived", tuple(
            name for name in ("n_kv_heads", "head_dim") if getattr(self, name) is None))
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        _positive_int("n_kv_heads", self.n_kv_heads)
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        if self.head_dim is None:
            if self.d_model % self.n_heads != 0:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}), "
                    f"or head_dim must be given"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        _positive_int("head_dim", self.head_dim)
        if self.positional == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for RoPE, which rotates pairs of dimensions")
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(f"d_model ({self.d_model}) must be even for sinusoidal positions (sin/cos pairs)")
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta ({self.rope_theta}) must be positive")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps ({self.norm_eps}) must be positive")
        if isinstance(self.init_std, bool) or not isinstance(self.init_std, (int, float)):
            raise TypeError(f"init_std must be a number, got {type(self.init_std).__name__}")
        if not (self.init_std > 0 and math.isfinite(self.init_std)):
            raise ValueError(f"init_std ({self.init_std}) must be positive and finite")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)):
            raise TypeError(f"dropout must be a number, got {type(self.dropout).__name__}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout ({self.dropout}) must be in [0, 1): the probability of "
                             f"zeroing an activation (1 would zero every one)")
        for name, allowed in _CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.sliding_window is not None:
            _positive_int("sliding_window", self.sliding_window)
        if self.bias and self.ffn == "swiglu":
            raise ValueError("bias=True goes with ffn 'gelu', 'relu' or 'relu2' (GPT-style); SwiGLU blocks have no biases")
        if self.logit_softcap is not None:
            if isinstance(self.logit_softcap, bool) or not isinstance(self.logit_softcap, (int, float)):
                raise TypeError(f"logit_softcap must be a number or None, got {type(self.logit_softcap).__name__}")
            if not (self.logit_softcap > 0 and math.isfinite(self.logit_softcap)):
                raise ValueError(f"logit_softcap ({self.logit_softcap}) must be positive and finite: "
                                 f"the logits' bound c in c·tanh(z / c)")
        if self.trigram_buckets is not None:
            _positive_int("trigram_buckets", self.trigram_buckets)
        for name in ("tie_embeddings", "bias", "qk_norm", "zero_init_out", "bigram_embed"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def n_rep(self) -> int:
        """How many query heads share each key/value head: H / H_kv (1 for MHA, H for MQA)."""
        return self.n_heads // self.n_kv_heads

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (validated again).

        ``n_kv_heads`` and ``head_dim``, when they were left to their defaults, are derived again
        from the new fields: ``replace(n_heads=3)`` of a width-96 config has head_dim 32, not
        the old 24, and multi-head attention stays multi-head."""
        for name in self._derived:
            changes.setdefault(name, None)
        return dataclasses.replace(self, **changes)


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} ({value}) must be positive")


# Published shapes, from the models' papers and released configuration files (Touvron et al. 2023
# for Llama 2; Meta's Llama 3 release; Jiang et al. 2023 for Mistral 7B v0.1; Brown et al. 2020,
# table 2.1, for GPT-3, whose remaining conventions — tied output layer, learned positions, biases —
# are GPT-2's).
PRESETS: dict[str, ModelConfig] = {
    "llama-2-7b": ModelConfig(
        vocab_size=32_000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11_008,
        max_seq_len=4096, rope_theta=10_000.0, norm_eps=1e-5,
    ),
    "llama-2-70b": ModelConfig(
        vocab_size=32_000, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28_672,
        max_seq_len=4096, rope_theta=10_000.0, norm_eps=1e-5,
    ),
    "llama-3-8b": ModelConfig(
        vocab_size=128_256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14_336,
        max_seq_len=8192, rope_theta=500_000.0, norm_eps=1e-5,
    ),
    "mistral-7b": ModelConfig(  # Jiang et al. 2023, table 1: context 8192, window 4096
        vocab_size=32_000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14_336,
        max_seq_len=8192, rope_theta=10_000.0, norm_eps=1e-5, sliding_window=4096,
    ),
    "gpt-3-175b": ModelConfig(
        vocab_size=50_257, d_model=12_288, n_layers=96, n_heads=96, d_ff=4 * 12_288, max_seq_len=2048,
        norm="layer", ffn="gelu", positional="learned", tie_embeddings=True, bias=True,
    ),
    # The course's own small model: runs anywhere in milliseconds.
    "tiny": ModelConfig(
        vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=172, max_seq_len=128,
    ),
}


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name``, with a helpful error for unknown names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}") from None
