"""The course's named grids, defined in one place: ``python -m course_lib.experiments NAME`` runs
one; chapters 12 and 13 read their committed results from ``course_lib/experiments/results/NAME/``.

Chapter 12's grids (every one above the speedrun's) train the character model on Tiny Shakespeare
(V = 65) with AdamW, warmup and cosine decay, and clip the gradient's norm at 1.0, as chapter 12's
main run does, at sizes a 2-core CPU trains in about a minute a run on one thread. Every model
starts from σ = 1/√D (chapter 12, "How large the first weights should be"), so that no comparison
is one of initial scales. Together with the copying model they regenerate in under an hour on 2
cores (``make results``; the Makefile says when that was timed).

Chapter 13's grids (``speedrun``, ``speedrun-short``, ``speedrun-long``) start from nanoGPT's CPU
recipe and change one thing per row; most of their runs train for the whole of the recipe's time,
so they take longer (the comments beside them say how long).
"""

from __future__ import annotations

from ..config import ModelConfig
from ..training import TrainConfig, get_preset
from .grid import Grid, Probe, Row

__all__ = ["GRIDS", "IN_PROGRESS", "SPEEDRUN_ROWS", "get_grid"]

V = 65  # Tiny Shakespeare's characters

# The modern block at width 64: 4 blocks, 2 heads of width 32, SwiGLU at 8/3·D rounded to 172.
MODERN = ModelConfig(vocab_size=V, d_model=64, n_layers=4, n_heads=2, d_ff=172, max_seq_len=128,
                     tie_embeddings=True, init_std=64 ** -0.5)
# GPT-2's block at (almost) the same parameter count: LayerNorm with biases, GELU, learned positions;
# d_ff 240 instead of 4·D = 256 pays for the biases and the position table (1 % apart).
GPT2 = MODERN.replace(norm="layer", ffn="gelu", positional="learned", bias=True, d_ff=240)
RUN = TrainConfig(batch_size=12, context=128, steps=1000, lr=3e-3, min_lr=3e-4, warmup_steps=50,
                  weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_interval=200,
                  eval_batch_size=64, eval_at_start=True)

# Depth makes the placement of the norm matter: 8 blocks, at twice the learning rate.
DEEP = MODERN.replace(n_layers=8)
DEEP_RUN = RUN.replace(steps=600, lr=6e-3, min_lr=6e-4, warmup_steps=100)

# Positions: train on windows of 64, evaluate on windows of 256 (max_seq_len 256 for every model, so
# that the learned table has rows there too — rows that training never reached).
POS = MODERN.replace(max_seq_len=256)
POS_RUN = RUN.replace(context=64, batch_size=24, steps=800)

SWEEP_RUN = RUN.replace(steps=400, eval_interval=100)

# Overfitting: the same model on the first 50,000 characters only: 1,000 steps of 12 × 128 characters
# pass over them about 25 times.
OVERFIT = MODERN
OVERFIT_RUN = RUN.replace(eval_interval=100)
OVERFIT_CHARS = 50_000


def _speedrun_rows() -> tuple[Row, ...]:
    """Chapter 13's rows: nanoGPT's CPU recipe, then one change per row, each row keeping every
    change above it. The order: first the block (norm, biases, positions, FFN: the modern block at
    the recipe's width), then how it starts and is trained (initial scale, learning rate, cool-down,
    optimiser), then the speedrun's additions to the block, then the shape. Every run is evaluated
    on the whole validation split in windows of 64 characters, the recipe's context."""
    model, run = get_preset("nanogpt-cpu")
    run = run.replace(eval_context=64, eval_at_start=False, eval_batch_size=64, precision="float32")
    steps = [("recipe", model, run)]

    def then(label: str, model_changes: dict | None = None, run_changes: dict | None = None) -> None:
        _, last_model, last_run = steps[-1]
        steps.append((label, last_model.replace(**(model_changes or {})),
                      last_run.replace(**(run_changes or {}))))

    then("rmsnorm", {"norm": "rms"})
    then("no-biases", {"bias": False})
    then("rope", {"positional": "rope"})
    then("swiglu", {"ffn": "swiglu", "d_ff": 344})  # 3·128·344 ≈ 2·128·512: the same parameters
    then("sigma=1-sqrtD", {"init_std": 128 ** -0.5})
    then("lr=3e-3", run_changes={"lr": 3e-3, "min_lr": 3e-4})
    then("linear-cooldown", run_changes={"cooldown": 0.5})
    then("muon", run_changes={"optimizer": "muon"})
    then("qk-norm", {"qk_norm": True})
    then("zero-init", {"zero_init_out": True})
    then("untied-head", {"tie_embeddings": False})
    then("softcap=15", {"logit_softcap": 15.0})
    then("gqa", {"n_kv_heads": 2})
    then("relu2", {"ffn": "relu2", "d_ff": 512})  # 2·128·512: the same parameters as SwiGLU's 344
    return tuple(Row(label, m, r) for label, m, r in steps)


SPEEDRUN_ROWS = _speedrun_rows()


def _short_rows() -> tuple[Row, ...]:
    """The rows of ``speedrun-short``: the recipe (its whole run, the finish line), then the speedrun
    grid's row with the speedrun's ingredients (``softcap=15``: everything but GQA and ReLU²) made to
    end in a sixth of the recipe's time, its warm-up shortened to fit; then, one at a time, what
    the ``shakespeare-speedrun`` preset changes for so short a race: batches of 24 (Muon's
    iteration paid once for twice the characters), a learning rate of 10⁻², and three blocks of
    width 96 (σ = 0.1 ≈ 1/√96). The last row is the preset's model and schedule."""
    by_label = {row.label: row for row in SPEEDRUN_ROWS}
    recipe, start = by_label["recipe"], by_label["softcap=15"]
    steps = [Row("recipe", recipe.model, recipe.train),
             Row("in-a-sixth", start.model, start.train.replace(warmup_steps=20))]

    def then(label: str, model_changes: dict | None = None, run_changes: dict | None = None) -> None:
        last = steps[-1]
        steps.append(Row(label, last.model.replace(**(model_changes or {})),
                         last.train.replace(**(run_changes or {}))))

    then("batch=24", run_changes={"batch_size": 24})
    then("lr=1e-2", run_changes={"lr": 1e-2, "min_lr": 1e-3})
    then("3x96", {"d_model": 96, "n_layers": 3, "n_heads": 3, "n_kv_heads": 3, "d_ff": 256, "init_std": 0.1})
    return tuple(steps)


def _long_rows() -> tuple[Row, ...]:
    """The rows of ``speedrun-long``: the recipe, then the ``shakespeare-speedrun`` preset (the last
    row of ``speedrun-short``) given the recipe's whole time, its schedule fitted to it; then the
    same with four changes found by single-seed probes to pay at that length: a bigram embedding
    (one learned vector per pair of characters, cheap at 65 of them), batches of 48, a learning
    rate of 1.2·10⁻² and a cool-down all the way to 0. Then four more, one at a time, suggested by
    later probes: the batch of 48 taken as two micro-batches of 24 (the same update, to float
    rounding; probes timed the split step as quicker, the grid's calibration does not);
    evaluating a moving average of the weights (β = 0.99, about the last hundred steps). Then a
    hashed trigram table of 2¹⁴ rows beside the bigram table (``ModelConfig.trigram_buckets``):
    probes at a fixed 770 steps, with the triples' indices scrambled by a multiplicative hash
    before the modulo (which leaves as many triples sharing rows), found it lower in each of three
    seeds, by 0.005–0.011, for a step that costs about the same. A table of 2¹⁶ rows for the
    four-character strings on top of it (6.3 M parameters for AdamW to update every step) lowered
    the loss by under a hundredth in two seeds, for a step that timed a sixth slower in one
    rough measurement, and has no row. Last, one block fewer: with the tables reading the last
    three characters, probes of three seeds per shape (each budgeted as the grid budgets a run)
    put two blocks of width 96 lowest of those tried. Four blocks of 96, three or two of 128, one
    of 96, two of 64, and two of 96 with a narrower FFN (d_ff = 192) all ended higher; against the
    trigram row, two blocks ended lower in each seed, by 0.010–0.020, in about 40 % more steps.
    With two blocks, batches of 32 or 64 ended higher, and a rate of 1.5·10⁻² no lower."""
    short = _short_rows()
    preset = short[-1]
    bigram = Row("3x96+bigram+b48", preset.model.replace(bigram_embed=True),
                 preset.train.replace(batch_size=48, lr=1.2e-2, min_lr=0.0))
    split = Row("grad-accum=2", bigram.model, bigram.train.replace(grad_accum=2))
    averaged = Row("ema=0.99", split.model, split.train.replace(ema=0.99))
    trigram = Row("trigram", averaged.model.replace(trigram_buckets=2 ** 14), averaged.train)
    shallower = Row("2x96", trigram.model.replace(n_layers=2), trigram.train)
    return (short[0], Row("3x96", preset.model, preset.train), bigram, split, averaged, trigram, shallower)


GRIDS: dict[str, Grid] = {grid.name: grid for grid in (
    Grid("arch", "the modern block against GPT-2's at equal parameters and equal steps",
         rows=(Row("modern", MODERN, RUN), Row("GPT-2", GPT2, RUN)), seeds=(0, 1, 2, 3, 4)),
    Grid("arch-time", "the modern block against GPT-2's at equal parameters and equal wall-clock time",
         rows=(Row("modern", MODERN, RUN), Row("GPT-2", GPT2, RUN)), seeds=(0, 1, 2, 3, 4), seconds=60.0),
    Grid("norm", "pre-norm against post-norm, with and without warmup, 8 blocks",
         rows=(Row("pre warmup", DEEP, DEEP_RUN),
               Row("pre no-warmup", DEEP, DEEP_RUN.replace(warmup_steps=0)),
               Row("post warmup", DEEP.replace(placement="post"), DEEP_RUN),
               Row("post no-warmup", DEEP.replace(placement="post"), DEEP_RUN.replace(warmup_steps=0))),
         seeds=(0, 1, 2, 3, 4)),  # five: the differences are small
    Grid("positions", "RoPE, learned and no positions, trained at 64 characters, read out to 256",
         rows=(Row("rope", POS, POS_RUN), Row("learned", POS.replace(positional="learned"), POS_RUN),
               Row("none", POS.replace(positional="none"), POS_RUN)),
         seeds=(0, 1, 2), probes=(Probe("loss_by_position", (("context", 256), ("windows", 256))),)),
    Grid("lr-sweep", "peak learning rate from 3e-4 to 3e-1, 400 steps",
         rows=tuple(Row(f"lr={lr:g}", MODERN, SWEEP_RUN.replace(lr=lr, min_lr=lr / 10))
                    for lr in (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)),
         seeds=(0, 1, 2), record_steps=True),
    Grid("init-scale", "initial weights drawn at GPT-2's σ = 0.02 against σ = 1/√D",
         rows=(Row("sigma=1-sqrtD", MODERN, RUN), Row("sigma=0.02", MODERN.replace(init_std=0.02), RUN)),
         seeds=(0, 1, 2)),
    Grid("overfit", "a model that overfits 50,000 characters, and two cures: dropout and weight decay",
         rows=(Row("plain", OVERFIT, OVERFIT_RUN, OVERFIT_CHARS),
               Row("dropout=0.2", OVERFIT.replace(dropout=0.2), OVERFIT_RUN, OVERFIT_CHARS),
               Row("weight-decay=1", OVERFIT, OVERFIT_RUN.replace(weight_decay=1.0), OVERFIT_CHARS)),
         seeds=(0, 1, 2)),
    # chapter 13; about two and a half hours on 2 cores (every run takes the recipe's time)
    Grid("speedrun", "nanoGPT's CPU recipe, then one change per row, each in the recipe's own time",
         rows=SPEEDRUN_ROWS, seeds=(0, 1, 2), budget_row="recipe", evaluations=10),
    # chapter 13; about twenty minutes on 2 cores (the recipe's runs take most of it)
    Grid("speedrun-short", "the speedrun's ingredients in a sixth of the recipe's time, schedule fitted",
         rows=_short_rows(), seeds=(0, 1, 2), budget_row="recipe", budget_fraction=1 / 6, evaluations=4),
    # chapter 13; half an hour to an hour on 2 cores, with the machine's speed (every run takes the
    # recipe's time)
    Grid("speedrun-long", "the speedrun's ingredients in the recipe's whole time, schedule fitted",
         rows=_long_rows(), seeds=(0, 1, 2), budget_row="recipe", evaluations=10),
)}

# Grids whose results are still being made (a few hours of a 2-core machine): the command runs and
# resumes them like any other, but no chapter reads them yet, so their results need not be committed
# complete. A grid moves to GRIDS with its complete results.
IN_PROGRESS: dict[str, Grid] = {grid.name: grid for grid in (
)}


def get_grid(name: str) -> Grid:
    """The grid called ``name`` (in :data:`GRIDS` or :data:`IN_PROGRESS`); an unknown name raises a
    ValueError listing the known ones."""
    try:
        return GRIDS[name] if name in GRIDS else IN_PROGRESS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown grid {name!r}; choose one of {sorted(GRIDS) + sorted(IN_PROGRESS)}") from None
