"""The reference time: nanoGPT's recipe for Tiny Shakespeare, run with course_lib's GPT-2 variant.

    python benchmarks/nanogpt_recipe.py                                     # about 100 s on a 2-core CPU
    python benchmarks/nanogpt_recipe.py --shape gpu --device cuda --full-eval   # nanoGPT's GPU run

nanoGPT's README trains a character-level model on a CPU with

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20
        --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
        --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0

and on a GPU with ``python train.py config/train_shakespeare_char.py``: 6 layers of width 384 with 6
heads, context 256, batch 64, dropout 0.2, 5,000 steps, the loss estimated every 250 steps on 200
random batches of each split (its README reports a best validation loss of 1.47). ``--shape`` picks
one: ``cpu`` (the default) or ``gpu``; ``tiny`` is a shape of our own, seconds anywhere, that only
checks the plumbing (``benchmarks/gpu_check.py --dry-run``). Every shape shares the learning rate
1e-3 warmed up over 100 steps (5 for ``tiny``) and decayed along a cosine to 1e-4 at the last step,
AdamW with betas (0.9, 0.99) and weight decay 0.1 on the matrices, and clipping at 1.0.

This script is that run, its loop written the way nanoGPT's ``train.py`` is (same batches drawn with
``torch.randint`` and ``torch.stack``, the same schedule, optimiser, clipping and estimates of the
loss), with ``course_lib.model.DecoderLM`` in its GPT-2 variant (LayerNorm, learned positions, GELU,
biases, tied embeddings) in place of nanoGPT's model. On a CUDA device it also does what nanoGPT's
``train.py`` does there: TF32 matrix products, bfloat16 autocast (float16 with a gradient scaler
on a GPU without bfloat16), fused AdamW, batches copied from pinned memory; it does not compile
the model (nanoGPT's default does; course_lib's presets run uncompiled too). The wall-clock time
of the whole process is the budget the course's presets must meet: ``shakespeare-cpu`` against
the CPU shape, ``shakespeare-gpu`` against the GPU shape on the same GPU. With ``--full-eval`` it
also reports, after the clock stops, the validation loss over the whole split in windows of the
shape's context, as ``course_lib.training`` measures it. Its LayerNorms run PyTorch's fused kernel,
as nanoGPT's model does (the model's default path; see ``course_lib.block.apply_norm``). A device
that cannot be used ends the script with a one-line error and exit status 2.
"""

# Annotations are evaluated (no `from __future__ import annotations`): the tests import this script
# from its file without registering it in sys.modules, where dataclasses look string annotations up.
import contextlib
import math
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course_lib._cli import OneLineParser
from course_lib.config import ModelConfig
from course_lib.data import eval_windows, load_char_data
from course_lib.device import usable_device
from course_lib.model import DecoderLM


@dataclass(frozen=True)
class Shape:
    """One of nanoGPT's Shakespeare runs: the GPT-2 model (``n_layer`` blocks of width ``n_embd``
    with ``n_head`` heads, FFN width 4 · n_embd), ``batch_size`` windows of ``block_size`` characters
    a step for ``max_iters`` steps (also the cosine's length, nanoGPT's ``lr_decay_iters``), the loss
    estimated every ``eval_interval`` steps on ``eval_iters`` random batches of each split, the
    training loss read back (a device synchronisation) every ``log_interval`` steps."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int
    dropout: float
    max_iters: int
    warmup_iters: int
    eval_iters: int
    log_interval: int
    eval_interval: int = 250


SHAPES = {
    "cpu": Shape(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0,
                 max_iters=2000, warmup_iters=100, eval_iters=20, log_interval=1),
    "gpu": Shape(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.2,
                 max_iters=5000, warmup_iters=100, eval_iters=200, log_interval=10),
    "tiny": Shape(n_layer=2, n_head=2, n_embd=32, block_size=32, batch_size=8, dropout=0.2,
                  max_iters=20, warmup_iters=5, eval_iters=4, log_interval=10, eval_interval=10),
}
CPU = SHAPES["cpu"]
BLOCK_SIZE, BATCH_SIZE, MAX_ITERS = CPU.block_size, CPU.batch_size, CPU.max_iters  # the CPU recipe's
LR, MIN_LR, WEIGHT_DECAY, BETAS, CLIP = 1e-3, 1e-4, 0.1, (0.9, 0.99), 1.0
EVAL_BATCH = 256  # windows a batch in the whole-split evaluation


def gpt2_config(vocab_size: int, shape: Shape = CPU) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, d_model=shape.n_embd, n_layers=shape.n_layer,
                       n_heads=shape.n_head, d_ff=4 * shape.n_embd, max_seq_len=shape.block_size,
                       norm="layer", ffn="gelu", positional="learned", bias=True, tie_embeddings=True,
                       dropout=shape.dropout)


def get_lr(it: int, shape: Shape = CPU) -> float:  # nanoGPT's train.py
    if it < shape.warmup_iters:
        return LR * (it + 1) / (shape.warmup_iters + 1)
    if it > shape.max_iters:
        return MIN_LR
    ratio = (it - shape.warmup_iters) / (shape.max_iters - shape.warmup_iters)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def main() -> int:
    parser = OneLineParser(prog="benchmarks/nanogpt_recipe.py", description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="cpu",
                        help="nanoGPT's CPU run (default), its GPU run, or a tiny smoke-test shape")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--iters", type=int, default=None,
                        help="training steps (default: the shape's, 2000 on cpu and 5000 on gpu)")
    parser.add_argument("--full-eval", action="store_true",
                        help="after the timed run, also report the loss over the whole validation split")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    iters = shape.max_iters if args.iters is None else args.iters
    try:
        device = usable_device(args.device)
    except ValueError as err:
        print(f"benchmarks/nanogpt_recipe.py: error: {err}", file=sys.stderr)
        return 2
    cuda = device.type == "cuda"
    torch.manual_seed(1337)
    corpus = load_char_data()
    splits = {"train": corpus.train, "val": corpus.val}
    model = DecoderLM(gpt2_config(corpus.tokenizer.vocab_size, shape)).to(device)
    block, batch = shape.block_size, shape.batch_size
    dtype = None
    if cuda:  # nanoGPT's train.py on a GPU
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    ctx = torch.autocast(device_type="cuda", dtype=dtype) if cuda else contextlib.nullcontext()
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16) if cuda else None

    def get_batch(split):
        data = splits[split]
        ix = torch.randint(len(data) - block, (batch,))
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        if cuda:
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x, y

    def loss_of(x, y):
        with ctx:
            logits = model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split in splits:
            out[split] = torch.stack([loss_of(*get_batch(split)) for _ in range(shape.eval_iters)]).mean().item()
        model.train()
        return out

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=BETAS, **({"fused": True} if cuda else {}))
    n_params = sum(p.numel() for p in params)
    on_device = f", {torch.cuda.get_device_name(device)}, {dtype} autocast" if cuda else ""
    print(f"{n_params} parameters, {torch.get_num_threads()} threads{on_device}")

    start = time.perf_counter()
    for it in range(iters + 1):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it, shape)
        if it % shape.eval_interval == 0:
            losses = estimate_loss()
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
        x, y = get_batch("train")
        loss = loss_of(x, y)
        if scaler is None:
            loss.backward()
        else:  # nanoGPT's: a no-op scaler unless float16
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if it % shape.log_interval == 0:
            loss.item()  # nanoGPT reads the loss back to log it (every step on the CPU command line)
    if cuda:
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start

    print(f"done: {iters} steps in {elapsed:.1f} s "
          f"({iters * batch * block / elapsed:.0f} tokens/s)", flush=True)
    if not args.full_eval:
        return 0
    model.eval()
    with torch.no_grad():
        total, count = 0.0, 0
        for x, y in eval_windows(corpus.val, EVAL_BATCH, block):
            x, y = x.to(device), y.to(device)
            with ctx:
                logits = model(x)
            total += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()
            count += y.numel()
    print(f"validation loss over the whole split (windows of {block}): {total / count:.4f} nats/char")
    return 0


if __name__ == "__main__":
    sys.exit(main())
