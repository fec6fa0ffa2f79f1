"""The reference time: nanoGPT's CPU recipe for Tiny Shakespeare, run with course_lib's GPT-2 variant.

    python benchmarks/nanogpt_recipe.py          # about 100 s on a 2-core CPU

nanoGPT's README trains a character-level model on a CPU with

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20
        --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
        --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0

This script is that run, its loop written the way nanoGPT's ``train.py`` is (same batches drawn with
``torch.randint`` and ``torch.stack``, the same schedule, optimiser, clipping and estimate of the loss
every 250 steps on 20 random batches of each split), with ``course_lib.model.DecoderLM`` in its GPT-2
variant (LayerNorm, learned positions, GELU, biases, tied embeddings) in place of nanoGPT's model.
The wall-clock time of the whole process is the budget the ``shakespeare-cpu`` preset of
``python -m course_lib.train`` must meet. With ``--full-eval`` it also reports, after the clock stops,
the validation loss over the whole split as ``course_lib.training`` measures it. Its LayerNorms run
PyTorch's fused kernel, as nanoGPT's model does (the model's default path; see
``course_lib.block.apply_norm``).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F

from course_lib.config import ModelConfig
from course_lib.data import eval_windows, load_char_data
from course_lib.model import DecoderLM

BLOCK_SIZE, BATCH_SIZE, MAX_ITERS = 64, 12, 2000
LR, MIN_LR, WARMUP, WEIGHT_DECAY, BETAS, CLIP = 1e-3, 1e-4, 100, 0.1, (0.9, 0.99), 1.0
EVAL_INTERVAL, EVAL_ITERS = 250, 20


def gpt2_config(vocab_size: int) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, d_model=128, n_layers=4, n_heads=4, d_ff=512,
                       max_seq_len=BLOCK_SIZE, norm="layer", ffn="gelu", positional="learned",
                       bias=True, tie_embeddings=True)


def get_lr(it: int) -> float:  # nanoGPT's train.py
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > MAX_ITERS:
        return MIN_LR
    ratio = (it - WARMUP) / (MAX_ITERS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=MAX_ITERS, help="training steps (default 2000)")
    parser.add_argument("--full-eval", action="store_true",
                        help="after the timed run, also report the loss over the whole validation split")
    args = parser.parse_args()
    torch.manual_seed(1337)
    corpus = load_char_data()
    splits = {"train": corpus.train, "val": corpus.val}
    model = DecoderLM(gpt2_config(corpus.tokenizer.vocab_size))

    def get_batch(split):
        data = splits[split]
        ix = torch.randint(len(data) - BLOCK_SIZE, (BATCH_SIZE,))
        x = torch.stack([data[i:i + BLOCK_SIZE] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + BLOCK_SIZE] for i in ix])
        return x, y

    def loss_of(x, y):
        logits = model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split in splits:
            out[split] = torch.stack([loss_of(*get_batch(split)) for _ in range(EVAL_ITERS)]).mean().item()
        model.train()
        return out

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=BETAS)
    n_params = sum(p.numel() for p in params)
    print(f"{n_params} parameters, {torch.get_num_threads()} threads")

    start = time.perf_counter()
    for it in range(args.iters + 1):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it)
        if it % EVAL_INTERVAL == 0:
            losses = estimate_loss()
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
        x, y = get_batch("train")
        loss = loss_of(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # nanoGPT logs every step (log_interval=1)
    elapsed = time.perf_counter() - start

    print(f"done: {args.iters} steps in {elapsed:.1f} s "
          f"({args.iters * BATCH_SIZE * BLOCK_SIZE / elapsed:.0f} tokens/s)", flush=True)
    if not args.full_eval:
        return
    model.eval()
    with torch.no_grad():
        total, count = 0.0, 0
        for x, y in eval_windows(corpus.val, 256, BLOCK_SIZE):
            logits = model(x)
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    print(f"validation loss over the whole split (windows of {BLOCK_SIZE}): {total / count:.4f} nats/char")


if __name__ == "__main__":
    main()
