"""What ``torch.compile`` buys course_lib on this machine: a training step and greedy decoding,
eager against compiled, timed in turn.

    python benchmarks/compiled.py                  # a few minutes on a 2-core CPU, most of it compiling
    python benchmarks/compiled.py --device cuda    # the same on a GPU
    python benchmarks/compiled.py --smoke          # tiny shapes, one round: checks that it runs
    python benchmarks/compiled.py --json FILE      # also write the measurements to FILE

1. Training: benchmark.py's modern model at the nanoGPT recipe's size (V=65, d_model=128, 4 layers,
   4 heads, SwiGLU 344, tied embeddings; batch 16 × 128 characters), one step of
   ``course_lib.training.train_step`` with AdamW, through the model itself and through
   ``torch.compile(model)``, which shares its weights: what ``python -m course_lib.train --compile``
   (``TrainConfig.compile``) does.
2. Decoding: benchmark.py's decoding model (d_model=256, 4 layers, GQA 8/2) generating 256 tokens
   greedily with the preallocated KV cache, its ``forward`` eager and compiled. The cache's length
   changes every token: Dynamo recompiles once, then treats it as a symbol (``dynamic=True`` would
   make the model's float settings symbols too, and split the graph at the checks on them). The
   tokens must be identical.

Compiling happens in each compiled candidate's first call and is reported on its own, with the
number of graphs Dynamo compiled and the graph breaks it met; the rounds time compiled code only.
The candidates of a comparison run in turn, in a new random order each round, and the speed-up is
the median of the per-round ratios with a bootstrap 95 % interval (benchmark.py's
``round_robin_samples`` and ``paired_ratio``). Other processes add noise: run it on a quiet machine.
"""

from __future__ import annotations

import copy
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmark import SMOKE, Sizes, paired_ratio, pin_heap, round_robin_samples, synchronizer  # noqa: E402

from course_lib._cli import OneLineParser  # noqa: E402
from course_lib._io import write_json  # noqa: E402
from course_lib.config import ModelConfig  # noqa: E402
from course_lib.device import usable_device  # noqa: E402
from course_lib.experiments.provenance import provenance  # noqa: E402
from course_lib.model import DecoderLM  # noqa: E402
from course_lib.training import TrainConfig, make_optimizer, train_step  # noqa: E402


def _dynamo_counts() -> dict[str, int]:
    """Graphs Dynamo has compiled and graph breaks it has met so far in this process."""
    from torch._dynamo.utils import counters

    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "breaks": int(sum(counters["graph_break"].values()))}


def _compiled_first_call(fn, sync) -> dict:
    """Call ``fn`` once (the call that compiles); its seconds and what Dynamo made of it."""
    before = _dynamo_counts()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    after = _dynamo_counts()
    return {"seconds": time.perf_counter() - start, "graphs": after["graphs"] - before["graphs"],
            "breaks": after["breaks"] - before["breaks"]}


def bench_training(rounds: int, sizes: Sizes, device: torch.device) -> dict:
    batch, T = sizes.train_batch, sizes.train_t
    torch.manual_seed(0)
    model = DecoderLM(ModelConfig(**sizes.train, d_ff=sizes.modern_d_ff, max_seq_len=T,
                                  tie_embeddings=True)).train().to(device)
    compiled = torch.compile(model)
    optimizer = make_optimizer(model, TrainConfig(batch_size=batch, context=T))  # AdamW, fused
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(0, sizes.train["vocab_size"], (batch, T), generator=gen).to(device)  # (B, T)
    y = torch.randint(0, sizes.train["vocab_size"], (batch, T), generator=gen).to(device)  # (B, T)
    steps = {"eager": lambda: train_step(model, optimizer, x, y, lr=1e-4),
             "compiled": lambda: train_step(compiled, optimizer, x, y, lr=1e-4)}
    sync = synchronizer(device)
    compiling = _compiled_first_call(steps["compiled"], sync)
    samples = round_robin_samples(steps, rounds, warmup=2, sync=sync)
    seconds = {name: statistics.median(s) for name, s in samples.items()}
    return {"ms_per_step": {name: 1e3 * t for name, t in seconds.items()},
            "tokens_per_second": {name: batch * T / t for name, t in seconds.items()},
            "speedup": paired_ratio(samples["eager"], samples["compiled"]),
            "compiling": compiling, "rounds": rounds}


def bench_decoding(rounds: int, sizes: Sizes, device: torch.device) -> dict:
    config = ModelConfig(**sizes.decode)
    torch.manual_seed(0)
    model = DecoderLM(config).eval().to(device)
    fast = copy.deepcopy(model)
    fast.forward = torch.compile(fast.forward)  # generate() calls self(...)
    prompt = torch.randint(0, config.vocab_size, (1, sizes.prompt),
                           generator=torch.Generator().manual_seed(2)).to(device)
    runs = {"eager": lambda: model.generate(prompt, sizes.new_tokens, cache="preallocated"),
            "compiled": lambda: fast.generate(prompt, sizes.new_tokens, cache="preallocated")}
    sync = synchronizer(device)
    compiling = _compiled_first_call(runs["compiled"], sync)
    identical = torch.equal(runs["eager"](), runs["compiled"]())
    samples = round_robin_samples(runs, rounds, warmup=1, sync=sync)
    seconds = {name: statistics.median(s) for name, s in samples.items()}
    return {"ms_per_token": {name: 1e3 * t / sizes.new_tokens for name, t in seconds.items()},
            "speedup": paired_ratio(samples["eager"], samples["compiled"]),
            "identical": identical, "compiling": compiling, "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="benchmarks/compiled.py", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: one per core on a CPU; left alone on a GPU)")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds of each comparison")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, one round each: checks that the script runs; the numbers mean nothing")
    parser.add_argument("--json", metavar="FILE", help="also write the measurements to FILE")
    args = parser.parse_args(argv)
    try:
        device = usable_device(args.device)
        if args.rounds < 1:
            raise ValueError(f"--rounds ({args.rounds}) must be at least 1")
    except ValueError as err:
        print(f"benchmarks/compiled.py: error: {err}", file=sys.stderr)
        return 2
    on_cpu = device.type == "cpu"
    sizes = SMOKE if args.smoke else Sizes()
    pinned = pin_heap() if on_cpu else False
    if on_cpu or args.threads is not None:
        torch.set_num_threads(args.threads or os.cpu_count())
    rounds = 1 if args.smoke else args.rounds
    load_before = os.getloadavg()[0]
    print(f"torch {torch.__version__} · {platform.machine()} · {os.cpu_count()} cores · "
          f"{torch.get_num_threads()} threads · load average {load_before:.2f} · {device}"
          + (" · smoke test: the numbers mean nothing" if args.smoke else ""))

    train = bench_training(rounds, sizes, device)
    decode = bench_decoding(rounds, sizes, device)
    load_after = os.getloadavg()[0]

    tr = sizes.train
    ratio, low, high = train["speedup"]
    c = train["compiling"]
    print(f"\ntraining step: V={tr['vocab_size']}, d_model={tr['d_model']}, {tr['n_layers']} layers, "
          f"B={sizes.train_batch}, T={sizes.train_t}, float32")
    for name in ("eager", "compiled"):
        print(f"  {name:9}{train['ms_per_step'][name]:9.1f} ms/step{train['tokens_per_second'][name]:10,.0f} tokens/s")
    print(f"  compiled / eager speed: {ratio:.2f}× (median of {rounds} rounds, 95 % interval "
          f"{low:.2f}–{high:.2f}); compiling took {c['seconds']:.1f} s "
          f"({c['graphs']} graphs, {c['breaks']} graph breaks)")
    ratio, low, high = decode["speedup"]
    c = decode["compiling"]
    dc = sizes.decode
    print(f"\ngreedy decoding, preallocated cache: {sizes.new_tokens} tokens, d_model={dc['d_model']}, "
          f"{dc['n_layers']} layers")
    for name in ("eager", "compiled"):
        print(f"  {name:9}{decode['ms_per_token'][name]:9.2f} ms/token")
    print(f"  compiled / eager speed: {ratio:.2f}× (95 % interval {low:.2f}–{high:.2f}); compiling took "
          f"{c['seconds']:.1f} s ({c['graphs']} graphs, {c['breaks']} graph breaks); identical tokens: "
          f"{decode['identical']}")
    print(f"\nload average (1 min): {load_before:.2f} before, {load_after:.2f} after, {os.cpu_count()} cores")
    if args.json:
        write_json({"device": str(device), "smoke": args.smoke, "heap_pinned": pinned, "sizes": asdict(sizes),
                    "load_average": [load_before, load_after], "training": train, "decoding": decode,
                    "provenance": provenance(["python", "benchmarks/compiled.py", *(argv or sys.argv[1:])])},
                   args.json)
    return 0 if decode["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
