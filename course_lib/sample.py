"""Print text written by a trained model, from the command line.

    python -m course_lib.sample runs/shakespeare-cpu --prompt "ROMEO:" --temperature 0.8 --top-k 20

The checkpoint is a ``checkpoint.pt`` written by ``python -m course_lib.train`` (or the folder holding
it); it is read with ``torch.load(weights_only=True)``. Prints the prompt followed by the new
characters. Bad input ends with a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from ._cli import OneLineParser
from .data import CharTokenizer
from .device import usable_device
from .training import CheckpointError, load_checkpoint, model_config_from_dict
from .train import CHECKPOINT, non_negative_float, non_negative_int, positive_int, probability


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m course_lib.sample", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", metavar="CHECKPOINT",
                   help=f"a checkpoint written by python -m course_lib.train, or the folder holding its {CHECKPOINT}")
    p.add_argument("--prompt", default="\n",
                   help="text to continue, in the corpus's characters (default: a newline)")
    p.add_argument("--max-new-tokens", type=non_negative_int, default=500, metavar="N",
                   help="characters to generate (default: 500)")
    p.add_argument("--temperature", type=non_negative_float, default=0.8, metavar="T",
                   help="divides the logits before the softmax: < 1 sharper, > 1 flatter, 0 = always the "
                        "most likely character (default: 0.8)")
    p.add_argument("--top-k", type=positive_int, default=None, metavar="K",
                   help="sample only among the K most likely characters (default: all)")
    p.add_argument("--top-p", type=probability, default=None, metavar="P",
                   help="sample only among the most likely characters whose probabilities add up to P, "
                        "0 < P ≤ 1 (nucleus sampling; default: all)")
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="S",
                   help="seed of the sampling generator: the same seed prints the same text (default: 0)")
    p.add_argument("--device", default=None, metavar="DEV",
                   help="cpu or cuda (default: cuda when available, else cpu)")
    return p


def load_model(path: str, device: torch.device):
    """The model and tokenizer stored in a training checkpoint (file or folder)."""
    from .model import DecoderLM

    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT)
    state = load_checkpoint(path, map_location=device)
    if not state.get("vocab"):
        raise CheckpointError(f"checkpoint {path!r} holds no tokenizer vocabulary")
    tokenizer = CharTokenizer(state["vocab"])
    try:
        config = model_config_from_dict(state["model_config"])
        model = DecoderLM(config)
        # the weights' moving average when the run kept one (TrainConfig.ema): what it evaluated
        model.load_state_dict(state.get("averaged_model") or state["model"])
    except (TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {path!r} does not hold a valid model: "
                              f"{str(err).splitlines()[0]}") from None
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(f"checkpoint {path!r}: vocabulary of {tokenizer.vocab_size} characters for a "
                              f"model of vocab_size {config.vocab_size}")
    return model.to(device).eval(), tokenizer


def run(args: argparse.Namespace) -> str:
    device = usable_device(args.device)
    model, tokenizer = load_model(args.checkpoint, device)
    if not args.prompt:
        raise ValueError("--prompt must hold at least one character")
    unknown = tokenizer.unknown(args.prompt)
    if unknown:
        raise ValueError(f"--prompt contains characters outside the model's vocabulary: "
                         f"{', '.join(repr(c) for c in unknown)}")
    ids = tokenizer.encode(args.prompt)[None].to(device)  # (1, T)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    out = model.generate(ids, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                         top_p=args.top_p, generator=generator)  # (1, T + max_new_tokens)
    return tokenizer.decode(out[0])


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        text = run(args)
    except (ValueError, TypeError, OSError, CheckpointError) as err:
        print(f"python -m course_lib.sample: error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
