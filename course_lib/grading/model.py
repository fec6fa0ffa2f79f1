"""Checkers for exercise 09 (from block to language model).

1. ``lm_forward`` — implement the forward pass: embedding, the given blocks, final RMSNorm, LM head
   (tied or not).
2. ``next_token_probs`` — find and fix the bug in a padded next-token read (it assumes right padding;
   generation batches are padded on the left).
3. ``sample_generate`` — extend greedy generation to temperature and top-k sampling with an explicit
   generator.
4. ``tied_embedding_grad`` — derive the gradient of the loss with respect to a tied embedding table,
   which receives two contributions, and check it against autograd.
"""

from __future__ import annotations

import math

import torch

from .. import model as ref
from .. import norms, sampling
from ..block import TransformerBlock
from ..config import ModelConfig
from ..positional import rope_cos_sin
from ._core import Case, Forbid, Mistake, Task, TensorOutput, describe
from ._watch import paused

__all__ = ["check_lm_forward", "check_next_token_probs", "check_sample_generate", "check_tied_embedding_grad"]


def _realistic_(module: torch.nn.Module, gen: torch.Generator) -> torch.nn.Module:
    """Weights of a realistic scale: gains in [0.5, 1.5], embeddings N(0, 1), matrices N(0, 1/fan_in), so
    that a forgotten norm or a mixed-up head changes the answer by far more than rounding."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1:
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("embed.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)
    return module.eval()


# --- Task 1: the forward pass ---------------------------------------------------------------------------

class _GivenBlock:
    """A decoder block handed to the student as a plain callable x (B, T, D) → (B, T, D): a real
    course_lib TransformerBlock (RMSNorm, GQA with RoPE for positions 0 … T − 1, SwiGLU), run unwatched
    (the student may call the blocks, not a ready-made final norm or model)."""

    def __init__(self, block: torch.nn.Module, head_dim: int, rope_theta: float):
        self.block, self.head_dim, self.rope_theta = block, head_dim, rope_theta

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with paused(), torch.no_grad():
            cos, sin = rope_cos_sin(x.shape[1], self.head_dim, self.rope_theta, dtype=x.dtype,
                                    device=x.device)  # (T, D_h/2) each
            return self.block(x, cos, sin)  # (B, T, D)

    def __repr__(self) -> str:
        return "<decoder block: (B, T, D) -> (B, T, D)>"


def _lm_case(gen, *, B, T, V, D, H, H_kv, n_layers, tie, dtype, eps, what) -> Case:
    config = ModelConfig(vocab_size=V, d_model=D, n_layers=max(n_layers, 1), n_heads=H, n_kv_heads=H_kv,
                         d_ff=2 * D, norm_eps=eps)
    blocks = [_GivenBlock(_realistic_(TransformerBlock(config), gen).to(dtype), config.head_dim,
                          config.rope_theta) for _ in range(n_layers)]
    ids = torch.randint(0, V, (B, T), generator=gen)
    embedding = (2.0 * torch.randn(V, D, generator=gen, dtype=torch.float64)).to(dtype)
    norm_weight = (0.5 + torch.rand(D, generator=gen, dtype=torch.float64)).to(dtype)
    head_weight = (torch.randn(V, D, generator=gen, dtype=torch.float64) * D ** -0.5).to(dtype)
    label = (f"{what}: ids of shape {(B, T)}, embedding {describe(embedding)}, {n_layers} blocks, "
             f"tie_embeddings={tie}, eps={eps:g}")
    return Case(label, (ids, embedding, blocks, norm_weight, head_weight, tie), {"eps": eps})


def _lm_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    return [
        _lm_case(gen, B=2, T=6, V=40, D=32, H=4, H_kv=2, n_layers=2, tie=False, dtype=f64, eps=1e-5,
                 what="an untied model"),
        _lm_case(gen, B=2, T=5, V=50, D=32, H=4, H_kv=2, n_layers=2, tie=True, dtype=f64, eps=1e-5,
                 what="a tied model"),
        _lm_case(gen, B=1, T=7, V=30, D=48, H=6, H_kv=1, n_layers=3, tie=True, dtype=f64, eps=1e-6,
                 what="a tied model with multi-query attention"),
        _lm_case(gen, B=3, T=1, V=20, D=16, H=2, H_kv=2, n_layers=1, tie=False, dtype=f64, eps=1e-5,
                 what="a single position"),
        _lm_case(gen, B=2, T=4, V=24, D=16, H=2, H_kv=1, n_layers=0, tie=False, dtype=f64, eps=1e-5,
                 what="no blocks at all"),
        _lm_case(gen, B=2, T=6, V=40, D=32, H=4, H_kv=2, n_layers=2, tie=False, dtype=f32, eps=1e-5,
                 what="float32"),
        _lm_case(gen, B=2, T=6, V=40, D=32, H=4, H_kv=4, n_layers=2, tie=True, dtype=f32, eps=1e-5,
                 what="a tied model in float32"),
    ]


def _lm(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5, *, scale=False,
        norm="rms", gain=True, norm_first=False, head="auto", softmax=False, eps_mode="inside"):
    """The forward pass with knobs: what a solution with a given mistake computes."""
    x = embedding[ids]  # (B, T, D)
    if scale:
        x = x * math.sqrt(embedding.shape[1])

    def final_norm(h):
        if norm == "none":
            return h
        if norm == "layer":
            h = h - h.mean(-1, keepdim=True)
        ms = h.pow(2).mean(-1, keepdim=True)  # (B, T, 1)
        out = h / (torch.sqrt(ms) + eps if eps_mode == "outside" else torch.sqrt(ms + eps))
        return out * norm_weight if gain else out

    if norm_first:
        x = final_norm(x)
    for block in blocks:
        x = block(x)  # (B, T, D)
    if not norm_first:
        x = final_norm(x)
    table = {"auto": embedding if tie_embeddings else head_weight, "embedding": embedding,
             "head": head_weight}[head]
    logits = x @ table.T  # (B, T, V)
    return logits.softmax(-1) if softmax else logits


def _lm_mistake(**knobs):
    return lambda *a, **k: _lm(*a, **k, **knobs)


LM_FORWARD = Task(
    name="lm_forward", seed=909, cases=_lm_cases, reference=_lm,
    output=TensorOutput("the embedding's dtype"), rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("the final norm is missing: a pre-norm stack ends with an RMSNorm (with its gain "
                "norm_weight) between the last block and the LM head.", _lm_mistake(norm="none")),
        Mistake("the final norm ignores its gain: multiply the normalised vector by norm_weight.",
                _lm_mistake(gain=False)),
        Mistake("the final norm subtracts the mean (that is LayerNorm); Llama's final norm is RMSNorm: "
                "x / sqrt(mean(x²) + eps) · norm_weight.", _lm_mistake(norm="layer")),
        Mistake("the final norm is applied before the blocks; it belongs after the last block, just before "
                "the LM head.", _lm_mistake(norm_first=True)),
        Mistake("the model is untied although tie_embeddings is True: the LM head must reuse the embedding "
                "table (logits = h · embeddingᵀ), not head_weight.", _lm_mistake(head="head")),
        Mistake("you used the embedding table as the LM head although tie_embeddings is False: use "
                "head_weight.", _lm_mistake(head="embedding")),
        Mistake("the embeddings are multiplied by √D. The original Transformer does that; Llama and Mistral "
                "(and this task) use the rows of the table as they are.", _lm_mistake(scale=True)),
        Mistake("you returned probabilities (a softmax over the vocabulary); return the logits.",
                _lm_mistake(softmax=True)),
    ],
    forbid=Forbid(operations=("rms_norm", "layer_norm"), modules=(ref, norms)),
    hint="Check the order: embedding rows, every block, the final RMSNorm with its gain, then the head.",
)

check_lm_forward = LM_FORWARD.checker(
    """Check ``lm_forward(ids, embedding, blocks, norm_weight, head_weight, tie_embeddings, eps=1e-5)``:
    logits = RMSNorm(block_N(… block_1(E[ids]))) · W_headᵀ, with W_head = E when tied.""")


# --- Task 2: the next-token distribution of a padded batch (find and fix) --------------------------------

def _last_real(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,): the position of each sequence's last real token (mask 1 = real, contiguous)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)  # (T,)
    return (attention_mask.bool() * positions).amax(dim=1)  # (B,)


def _probs(logits, attention_mask, temperature=1.0, *, read="last-real", temp="divide", out="probs",
           dim=-1, stable=True):
    """The next-token distribution with knobs: what a solution with a given mistake computes."""
    B, T, V = logits.shape
    rows = torch.arange(B)
    lengths = attention_mask.long().sum(1)  # (B,)
    if read == "all-rows":
        z = logits[:, _last_real(attention_mask)]  # (B, B, V)
    else:
        index = {"last-real": lambda: _last_real(attention_mask), "length": lambda: lengths - 1,
                 "length+1": lambda: lengths, "last": lambda: torch.full((B,), T - 1),
                 "first-real": lambda: attention_mask.long().argmax(1),
                 "from-end": lambda: attention_mask.long().flip(1).argmax(1)}[read]()
        z = logits[rows, index]  # (B, V)
    z = {"divide": z / temperature, "multiply": z * temperature, "ignore": z}[temp]
    if out == "logits":
        return z
    if out == "log-probs":
        return torch.log_softmax(z, dim=-1)
    if not stable:
        e = torch.exp(z)
        return e / e.sum(dim, keepdim=True)
    return torch.softmax(z, dim=dim)


def _probs_cases(gen) -> list[Case]:
    def mask(lengths, T, side):
        m = torch.zeros(len(lengths), T, dtype=torch.int64)
        for b, n in enumerate(lengths):
            if side == "left":
                m[b, T - n:] = 1
            else:
                m[b, :n] = 1
        return m

    cases = []
    for B, T, V, lengths, side, temperature, scale, dtype, what in [
        (3, 6, 10, [4, 2, 6], "left", 1.0, 2.0, torch.float64, "a left-padded batch (as for generation)"),
        (3, 6, 10, [4, 2, 5], "right", 1.0, 2.0, torch.float64, "a right-padded batch"),
        (2, 5, 7, [3, 5], "left", 0.5, 2.0, torch.float64, "a left-padded batch at temperature 0.5"),
        (4, 4, 12, [1, 4, 2, 3], "right", 2.0, 2.0, torch.float64, "a right-padded batch at temperature 2"),
        (2, 7, 9, [7, 7], "left", 1.0, 2.0, torch.float64, "sequences without padding"),
        (1, 1, 5, [1], "right", 1.0, 2.0, torch.float64, "a single one-token sequence"),
        (3, 5, 6, [2, 5, 1], "left", 0.7, 300.0, torch.float64, "very large logits (hundreds), left-padded"),
        (3, 6, 10, [4, 6, 1], "right", 1.5, 2.0, torch.float32, "float32 logits, right-padded"),
        (5, 8, 5, [8, 3, 5, 1, 6], "left", 1.0, 2.0, torch.float64, "more sequences than vocabulary entries"),
    ]:
        logits = (scale * torch.randn(B, T, V, generator=gen, dtype=torch.float64)).to(dtype)
        m = mask(lengths, T, side)
        if what.startswith("float32"):
            m = m.bool()  # a bool mask works too
        cases.append(Case(f"{what}: logits {describe(logits)}, attention_mask of shape ({B}, {T}), "
                          f"temperature {temperature}", (logits, m), {"temperature": temperature}))
    return cases


def _probs_mistake(**knobs):
    return lambda logits, mask, temperature=1.0: _probs(logits, mask, temperature, **knobs)


NEXT_TOKEN_PROBS = Task(
    name="next_token_probs", seed=919, cases=_probs_cases, reference=_probs,
    output=TensorOutput("the logits' dtype"), rtol=1e-4, atol=1e-6,
    mistakes=[
        Mistake("this is still what the given version does: it reads position attention_mask.sum() − 1, "
                "which is the last real token only when the padding is on the right. In a left-padded batch "
                "the real tokens end at the last position; find the last position whose mask is 1.",
                _probs_mistake(read="length")),
        Mistake("you read every sequence at the last position, T − 1: right for left padding, but in a "
                "right-padded batch that is padding. Find each sequence's last position whose mask is 1.",
                _probs_mistake(read="last")),
        Mistake("you read the FIRST real token (argmax of the mask finds the first 1). The next token comes "
                "after the last real token.", _probs_mistake(read="first-real")),
        Mistake("counting from the end of the flipped mask gives the distance from the end, not the "
                "position: convert it back (T − 1 − …).", _probs_mistake(read="from-end")),
        Mistake("off by one: the next token after a real token at position t is scored at position t itself "
                "(the logits at position t predict the token at t + 1).", _probs_mistake(read="length+1")),
        Mistake("logits[:, index] picks every index for every sequence (shape (B, B, V)); pair each "
                "sequence with its own index: logits[torch.arange(B), index].", _probs_mistake(read="all-rows")),
        Mistake("the softmax normalises over the batch; each row (the vocabulary, the last dimension) must "
                "sum to 1.", _probs_mistake(dim=0)),
        Mistake("the temperature multiplies the logits; divide them by it (τ < 1 sharpens).",
                _probs_mistake(temp="multiply")),
        Mistake("the temperature is ignored: divide the logits by it before the softmax.",
                _probs_mistake(temp="ignore")),
        Mistake("you returned the logits; return probabilities (softmax over the vocabulary).",
                _probs_mistake(out="logits")),
        Mistake("you returned log-probabilities; return probabilities.", _probs_mistake(out="log-probs")),
        Mistake("exp overflows for large logits: subtract each row's maximum before exponentiating (or use "
                "torch.softmax, which does).", _probs_mistake(stable=False)),
    ],
    forbid=Forbid(modules=(ref, sampling)),
    hint="Mark, for each sequence, the position of its last real token on a small left-padded and a small "
         "right-padded example, and check that your index finds it in both.",
)

check_next_token_probs = NEXT_TOKEN_PROBS.checker(
    """Check ``next_token_probs(logits, attention_mask, temperature=1.0)``: softmax over the vocabulary of
    logits[b, t_b] / τ, t_b the last position whose mask is 1 (left- or right-padded batches).""")


# --- Task 3: sampling with temperature and top-k (extend) --------------------------------------------------

_GLOBAL_SEED = 4242  # the global RNG's seed before each call: a solution that ignores `generator` draws from it


class _Model:
    """The model as the student sees it: a callable ids (B, T) → logits (B, T, V), run unwatched."""

    def __init__(self, model: ref.DecoderLM, what: str):
        self.model, self.what = model, what

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        with paused(), torch.no_grad():
            return self.model(ids)

    def __repr__(self) -> str:
        return f"<{self.what}: ids (B, T) -> logits (B, T, V)>"


def _demo_model(gen: torch.Generator, **changes) -> ref.DecoderLM:
    shape = dict(vocab_size=37, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64)
    return _realistic_(ref.DecoderLM(ModelConfig(**{**shape, **changes})), gen)


def _sample(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None, *, temp="divide",
            use_top_k=True, position=-1, feed="all", keep_prompt=True, rng="generator", how="multinomial"):
    """Sampling with knobs: what a solution with a given mistake computes."""
    if rng == "global":
        torch.manual_seed(_GLOBAL_SEED)
        generator = None
    out = ids  # (B, T)
    for _ in range(max_new_tokens):
        logits = model(out if feed == "all" else ids)[:, position]  # (B, V)
        z = {"divide": logits / temperature, "multiply": logits * temperature, "ignore": logits}[temp]
        if top_k is not None and use_top_k:
            kth = torch.topk(z, min(top_k, z.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
            z = z.masked_fill(z < kth, float("-inf"))  # (B, V)
        probs = torch.softmax(z, dim=-1)  # (B, V)
        if how == "argmax":
            next_id = probs.argmax(-1, keepdim=True)
        elif how == "replacement":
            next_id = torch.multinomial(probs, 1, replacement=True, generator=generator)
        else:
            next_id = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        out = torch.cat([out, next_id], dim=1)  # (B, T + steps)
    return out if keep_prompt else out[:, ids.shape[1]:]


def _sample_reference(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = ids  # (B, T)
    for _ in range(max_new_tokens):
        logits = model(out)[:, -1]  # (B, V)
        out = torch.cat([out, sampling.sample_next(logits, temperature, top_k, None, generator)], dim=1)
    return out


def _sample_run(student, *args, **kwargs):
    torch.manual_seed(_GLOBAL_SEED)
    return student(*args, **kwargs)


def _sample_cases(gen) -> list[Case]:
    models = [
        _Model(_demo_model(gen), "a model with grouped-query attention"),
        _Model(_demo_model(gen, n_kv_heads=1, tie_embeddings=True), "a tied model with multi-query attention"),
    ]
    cases = []
    for i, (B, T, n, temperature, top_k) in enumerate([
            (2, 4, 6, 1.0, 5), (1, 3, 8, 0.7, None), (3, 5, 6, 1.5, 3), (2, 1, 5, 1.0, None),
            (1, 6, 4, 2.0, 1), (2, 3, 0, 1.0, 4), (2, 2, 7, 0.5, 10)]):
        model = models[i % 2]
        ids = torch.randint(0, 37, (B, T), generator=gen)
        seed = int(torch.randint(0, 2**31, (1,), generator=gen))
        cases.append(Case(f"{model.what}, a prompt of shape {(B, T)}, max_new_tokens={n}, "
                          f"temperature={temperature}, top_k={top_k}",
                          (model, ids, n), {"temperature": temperature, "top_k": top_k,
                                            "generator": torch.Generator().manual_seed(seed)}))
    return cases


def _sample_mistake(**knobs):
    return lambda model, ids, n, temperature=1.0, top_k=None, generator=None: _sample(
        model, ids, n, temperature, top_k, generator, **knobs)


SAMPLE_GENERATE = Task(
    name="sample_generate", seed=929, cases=_sample_cases, reference=_sample_reference, run=_sample_run,
    output=TensorOutput("int64 token ids"), mutates=("generator",), seconds=20.0,
    mistakes=[
        Mistake("the draws do not come from `generator`: pass generator=generator to torch.multinomial, "
                "so that the same generator state gives the same tokens.", _sample_mistake(rng="global")),
        Mistake("the draws do not come from `generator`: pass generator=generator to torch.multinomial, "
                "so that the same generator state gives the same tokens.",
                _sample_mistake(rng="global", how="replacement")),
        Mistake("you took the most likely token (greedy); this task samples from the distribution.",
                _sample_mistake(how="argmax")),
        Mistake("the temperature multiplies the logits; divide them by it (τ < 1 sharpens).",
                _sample_mistake(temp="multiply")),
        Mistake("the temperature is ignored: divide the logits by it before the softmax.",
                _sample_mistake(temp="ignore")),
        Mistake("top_k is ignored: keep only the top_k largest logits (set the others to −inf) before the "
                "softmax.", _sample_mistake(use_top_k=False)),
        Mistake("each step feeds only the prompt. Feed the whole sequence so far, including the tokens you "
                "generated.", _sample_mistake(feed="prompt")),
        Mistake("you sampled from the first position's logits; the next token comes from the last position "
                "(logits[:, -1]).", _sample_mistake(position=0)),
        Mistake("you returned only the new tokens; return the prompt followed by them, shape "
                "(B, T + max_new_tokens).", _sample_mistake(keep_prompt=False)),
    ],
    # generate is decorated (torch.no_grad), and the decorator's wrapper code is shared by every decorated
    # function: watch the function itself
    forbid=Forbid(modules=(sampling,),
                  functions=((ref.DecoderLM.generate.__wrapped__, "course_lib.model.DecoderLM.generate"),)),
    hint="Write one step on paper: logits of the last position, divided by τ, the top_k kept, softmax, one "
         "draw with torch.multinomial(probs, 1, generator=generator), appended.",
)

check_sample_generate = SAMPLE_GENERATE.checker(
    """Check ``sample_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None)``:
    each step draws torch.multinomial(softmax(top_k(logits[:, -1] / τ)), 1, generator=generator).""")


# --- Task 4: the gradient with respect to a tied embedding (derive) ---------------------------------------

def _tied_grad_reference(ids, targets, embedding, w):
    """dL/dE by autograd (in float64, outside any watch), for L = mean cross-entropy of
    logits = (E[ids] wᵀ) Eᵀ."""
    E = embedding.detach().double().requires_grad_()
    with torch.enable_grad():
        h = E[ids] @ w.double().T  # (B, T, D)
        logits = h @ E.T  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, E.shape[0]), targets.reshape(-1))
        (grad,) = torch.autograd.grad(loss, E)
    return grad.to(embedding.dtype)


def _tied_grad(ids, targets, embedding, w, *, head=True, input_side=True, accumulate=True, mean="all",
               w_side="right", onehot=True, head_reads="h"):
    """dL/dE by hand, with knobs: what a solution with a given mistake computes."""
    V, D = embedding.shape
    n = ids.numel()
    x = embedding[ids].reshape(n, D)  # (n, D)
    h = x @ w.T  # (n, D)
    p = torch.softmax(h @ embedding.T, dim=-1)  # (n, V)
    g = p - (torch.nn.functional.one_hot(targets.reshape(n), V).to(p.dtype) if onehot else 0)  # (n, V)
    g = g / {"all": n, "none": 1, "batch": ids.shape[0]}[mean]
    grad = torch.zeros_like(embedding)
    if head:
        grad = grad + g.T @ (h if head_reads == "h" else x)  # (V, D): the LM head's side
    if input_side:
        g_x = g @ embedding @ (w if w_side == "right" else w.T)  # (n, D): back through h = x wᵀ
        if accumulate:
            grad = grad.index_add(0, ids.reshape(n), g_x)
        else:
            grad = grad.clone()
            grad[ids.reshape(n)] += g_x  # repeated ids: only one write survives
    return grad


def _tied_cases(gen) -> list[Case]:
    cases = []
    for B, T, V, D, dtype, what in [
        (2, 5, 7, 4, torch.float64, "a batch with repeated ids"),
        (1, 1, 5, 3, torch.float64, "a single position"),
        (3, 4, 11, 6, torch.float64, ""),
        (2, 6, 4, 8, torch.float64, "a vocabulary smaller than the sequence"),
        (2, 5, 9, 5, torch.float32, "float32"),
    ]:
        ids = torch.randint(0, V, (B, T), generator=gen)
        targets = torch.randint(0, V, (B, T), generator=gen)
        embedding = torch.randn(V, D, generator=gen, dtype=torch.float64).to(dtype)
        w = (torch.randn(D, D, generator=gen, dtype=torch.float64) / math.sqrt(D)).to(dtype)
        label = f"ids and targets of shape {(B, T)}, embedding {describe(embedding)}, w of shape {(D, D)}"
        cases.append(Case(f"{what}: {label}" if what else label, (ids, targets, embedding, w)))
    return cases


def _tied_mistake(**knobs):
    return lambda ids, targets, embedding, w: _tied_grad(ids, targets, embedding, w, **knobs)


def _tied_explain(got, want, case) -> str | None:
    if got.shape == want.shape[::-1] and got.shape != want.shape:
        return ("the gradient has the shape of the table, (V, D): gᵀ h is (V, n) @ (n, D), not hᵀ g.")
    return None


TIED_EMBEDDING_GRAD = Task(
    name="tied_embedding_grad", seed=939, cases=_tied_cases, reference=_tied_grad_reference,
    output=TensorOutput("the embedding's dtype"), rtol=1e-4, atol=1e-6, explain=_tied_explain,
    mistakes=[
        Mistake("only the LM head's contribution, gᵀ h, is there. The table is also the embedding: each "
                "position's gradient with respect to its input row, (g E) w, flows back into row ids[b, t].",
                _tied_mistake(input_side=False)),
        Mistake("only the embedding's contribution is there. The table is also the LM head (logits = h Eᵀ): "
                "add gᵀ h.", _tied_mistake(head=False)),
        Mistake("repeated ids: `grad[ids] += rows` writes each row once, so when a token occurs several times "
                "only one of its contributions survives. Accumulate with index_add_ (or a loop).",
                _tied_mistake(accumulate=False)),
        Mistake("the loss is the MEAN over all B·T positions: divide g = softmax − one-hot by B·T.",
                _tied_mistake(mean="none")),
        Mistake("the loss averages over all B·T positions, not over the B sequences.",
                _tied_mistake(mean="batch")),
        Mistake("the gradient of cross-entropy with respect to the logits is softmax(z) − one-hot(target): "
                "the one-hot is missing.", _tied_mistake(onehot=False)),
        Mistake("back through h = x wᵀ the gradient is ∂L/∂x = (∂L/∂h) w, not (∂L/∂h) wᵀ.",
                _tied_mistake(w_side="left")),
        Mistake("the head reads h = x wᵀ, not the embedding rows x: its contribution is gᵀ h.",
                _tied_mistake(head_reads="x")),
    ],
    forbid=Forbid(autograd=True),
    hint="Write the loss for one position with the table appearing twice, differentiate each appearance "
         "separately, and add: the head's gᵀ h and the embedding's (g E) w scattered to the rows ids.",
)

check_tied_embedding_grad = TIED_EMBEDDING_GRAD.checker(
    """Check ``tied_embedding_grad(ids, targets, embedding, w)``: ∂L/∂E for L = mean cross-entropy of
    logits = (E[ids] wᵀ) Eᵀ, by hand (no autograd).""")
