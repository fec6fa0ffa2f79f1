"""Named training runs on Tiny Shakespeare (V = 65 characters), for the chapter and
``python -m course_lib.train --preset NAME``: a (:class:`~course_lib.config.ModelConfig`,
:class:`TrainConfig`) pair per name in :data:`PRESETS`, looked up with :func:`get_preset`. One
place: the command line, the tests and the book all read them from here.
"""

from __future__ import annotations

from ..config import ModelConfig
from .run_config import TrainConfig

__all__ = ["PRESETS", "get_preset"]

PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = {
    # nanoGPT's CPU recipe with the GPT-2 block: the reference run whose time is the budget.
    "nanogpt-cpu": (
        ModelConfig(vocab_size=65, d_model=128, n_layers=4, n_heads=4, d_ff=512, max_seq_len=64,
                    norm="layer", ffn="gelu", positional="learned", bias=True, tie_embeddings=True),
        TrainConfig(batch_size=12, context=64, steps=2000, lr=1e-3, min_lr=1e-4, warmup_steps=100,
                    weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_interval=250,
                    eval_at_start=True, seed=1337),
    ),
    # The modern block on a CPU: validation loss ≤ 1.65 nats/char within the time the nanoGPT recipe
    # takes on the same machine. Chosen by measurement (validation loss at equal compute): a smaller
    # model (449 k parameters) seeing more text beat the 800 k one; small batches (8–12 × 128 tokens)
    # beat 16–32 × 128; context 128 beat 256. The largest gain is the initial scale: σ = 0.1 ≈ 1/√96
    # instead of GPT-2's 0.02 (see chapter 12). With σ = 0.02 the best learning rate was 6e-3 and the
    # run needed 1,550 steps (1.637); with σ = 0.1, lr 3e-3 beat 4e-3 and 6e-3, and σ 0.08 and 0.15
    # did no better. Three heads of width 32 rather than four of 24: the same parameters, as low a
    # loss (1.611–1.629 over seeds 0–3, against 1.614–1.634 for seeds 0–2 with four heads), and a
    # step about 5 % faster, since PyTorch's CPU attention kernel runs a head width of 32 faster
    # than one of 24 (README, "Train a model"). Evaluation in batches of 64 windows: a whole-split
    # pass takes 1.6 s on 2 cores.
    "shakespeare-cpu": (
        ModelConfig(vocab_size=65, d_model=96, n_layers=4, n_heads=3, n_kv_heads=3, d_ff=256,
                    max_seq_len=128, tie_embeddings=True, init_std=0.1),
        TrainConfig(batch_size=12, context=128, steps=1300, lr=3e-3, min_lr=3e-4, warmup_steps=70,
                    weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_interval=650,
                    eval_batch_size=64, eval_at_start=False, seed=0),
    ),
    # The speedrun (chapter 13): nanoGPT's CPU recipe's final loss, measured as the recipe's is (whole
    # validation split, windows of 64 characters), in at most a sixth of the recipe's time, whole
    # processes timed in turn (benchmarks/speedrun.py). The modern block at the shakespeare-cpu width,
    # three blocks deep, with the speedrun's additions (QK-norm, zero-initialised output projections,
    # an untied head, logits soft-capped at 15), trained by Muon at a learning rate of 10⁻² with a
    # short warm-up, a constant rate and a linear cool-down over the second half, on the recipe's
    # context of 64, and evaluated once, at the end. Chosen by measurement (loss at a step count, and
    # step times taken interleaved with the recipe's): Muon's Newton–Schulz iterations cost the same
    # whatever the batch, so a fourth block (1.69 recipe steps a step, against 1.30 for three) did not
    # pay for itself in this time, and batches of 32 reached no lower loss in it than batches of 24.
    "shakespeare-speedrun": (
        ModelConfig(vocab_size=65, d_model=96, n_layers=3, n_heads=3, d_ff=256, max_seq_len=64,
                    init_std=0.1, qk_norm=True, zero_init_out=True, logit_softcap=15.0),
        TrainConfig(batch_size=24, context=64, steps=200, lr=1e-2, min_lr=1e-3, warmup_steps=20,
                    cooldown=0.5, optimizer="muon", weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0,
                    eval_interval=200, eval_batch_size=64, eval_at_start=False, seed=0),
    ),
    # The speedrun's other target (chapter 13): at most 1.55 nats per character, measured as above, in
    # the recipe's whole time, whole processes timed in turn (benchmarks/speedrun.py --long). The last
    # row of the speedrun-long grid: two blocks of width 96 with a bigram table and a hashed trigram
    # table of 2¹⁴ rows beside the token embedding, batches of 48 as two micro-batches of 24, Muon at
    # 1.2·10⁻² cooling down to 0 over the second half, and a moving average of the weights (β = 0.99)
    # evaluated once, at the end. The grid, which counts training time only, fitted 1,176–1,191 of its
    # steps in the recipe's 2,000; 1,000 leave the margin that evaluation, the checkpoint and the
    # machine's drift take in a whole process.
    "shakespeare-speedrun-long": (
        ModelConfig(vocab_size=65, d_model=96, n_layers=2, n_heads=3, d_ff=256, max_seq_len=64,
                    init_std=0.1, qk_norm=True, zero_init_out=True, logit_softcap=15.0,
                    bigram_embed=True, trigram_buckets=2 ** 14),
        TrainConfig(batch_size=48, grad_accum=2, context=64, steps=1000, lr=1.2e-2, min_lr=0.0,
                    warmup_steps=20, cooldown=0.5, optimizer="muon", weight_decay=0.1, betas=(0.9, 0.99),
                    grad_clip=1.0, ema=0.99, eval_interval=1000, eval_batch_size=64, eval_at_start=False,
                    seed=0),
    ),
    # A larger model for a GPU (Colab): nanoGPT's GPU shape (6 × 384, context 256) with the modern block.
    # 2,500 steps of 64 × 256 characters pass over the 1.0 M training characters about 41 times: a
    # 9.5 M-parameter model overfits that (chapter 12, "Overfitting"), so it trains with dropout
    # 0.2, the value nanoGPT uses for this shape and length.
    "shakespeare-gpu": (
        ModelConfig(vocab_size=65, d_model=384, n_layers=6, n_heads=6, n_kv_heads=2, d_ff=1024,
                    max_seq_len=256, tie_embeddings=True, dropout=0.2),
        TrainConfig(batch_size=64, context=256, steps=2500, lr=1e-3, min_lr=1e-4, warmup_steps=200,
                    weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_interval=250,
                    eval_batch_size=128, eval_at_start=True, seed=0),
    ),
    # A few seconds anywhere: for tests and smoke runs.
    "tiny": (
        ModelConfig(vocab_size=65, d_model=32, n_layers=1, n_heads=2, d_ff=64, max_seq_len=32,
                    tie_embeddings=True),
        TrainConfig(batch_size=8, context=32, steps=20, lr=3e-3, min_lr=3e-4, warmup_steps=5,
                    eval_interval=10, eval_batch_size=512, eval_at_start=False, seed=0),
    ),
}


def get_preset(name: str) -> tuple[ModelConfig, TrainConfig]:
    """The (ModelConfig, TrainConfig) of a named run; an unknown name raises a ValueError listing the
    known ones."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}") from None
