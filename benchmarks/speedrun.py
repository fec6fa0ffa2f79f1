"""The speedrun's measurement: the `shakespeare-speedrun` preset against nanoGPT's CPU recipe, both as
whole processes, timed in turn.

    python benchmarks/speedrun.py                 # 3 pairs: about 3 × (the recipe's time + a sixth)
    python benchmarks/speedrun.py --pairs 3 --json course_lib/experiments/results/benchmarks/speedrun.json
    python benchmarks/speedrun.py --long --json course_lib/experiments/results/benchmarks/speedrun-long.json

(the committed result lives inside the package, where chapter 13 reads it, in Colab too)

Each pair runs the two commands one after the other, the order alternating from pair to pair, so
that a drift in the machine's speed hits both alike:

    python benchmarks/nanogpt_recipe.py --full-eval
    python -m course_lib.train --preset shakespeare-speedrun --no-progress --out TMP

A time is the whole process, from its start to its exit: importing torch, reading the text,
training, the evaluations (the recipe's own estimates every 250 steps and the whole-split loss it
prints at the end; the preset's evaluation at its last step) and, for the preset, writing its
checkpoint. Both losses are measured by the same function, ``course_lib.training.evaluate``: the
whole validation split in windows of 64 characters, the recipe's context. The targets (issue 28,
chapter 13): the preset's loss at or below the recipe's, in at most a sixth of the recipe's time.

``--long`` measures the other target the same way: the `shakespeare-speedrun-long` preset (the last
row of the ``speedrun-long`` grid, with a fixed number of steps) at or below 1.55 nats per
character in every pair, in at most the recipe's time (about 6 × the recipe's time for 3 pairs).

Prints one line per pair and a summary: the per-pair ratios (preset / recipe), their median and
range, the losses, and the machine (CPU, cores, torch, threads, load) and the date. With ``--json``
also writes them to a file. Ends with a non-zero status when a target is missed.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course_lib._cli import OneLineParser
from course_lib._io import write_json

ROOT = Path(__file__).resolve().parents[1]
PRESET, SPEED_TARGET = "shakespeare-speedrun", 1 / 6  # the recipe's loss in a sixth of its time
LONG_PRESET, LONG_SPEED_TARGET, LONG_LOSS_TARGET = "shakespeare-speedrun-long", 1.0, 1.55  # in all of it
RECIPE_LOSS = re.compile(r"validation loss over the whole split \(windows of 64\): ([0-9.]+) nats/char")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _timed(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{' '.join(command[1:3])} failed: {tail[0]}")
    return seconds, done.stdout


def run_recipe() -> tuple[float, float]:
    seconds, out = _timed([sys.executable, "benchmarks/nanogpt_recipe.py", "--full-eval"])
    match = RECIPE_LOSS.search(out)
    if match is None:
        raise RuntimeError("the recipe printed no whole-split loss")
    return seconds, float(match.group(1))


def run_preset(preset: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="speedrun-") as out:
        seconds, _ = _timed([sys.executable, "-m", "course_lib.train", "--preset", preset, "--no-progress",
                             "--out", out])
        log = json.loads((Path(out) / "log.json").read_text())
    return seconds, log["evaluations"][-1]["val_loss"]


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="benchmarks/speedrun.py", description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (default 3, at least 3)")
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE")
    parser.add_argument("--long", action="store_true",
                        help=f"{LONG_PRESET} against ≤ {LONG_LOSS_TARGET} nats/char in the recipe's whole time")
    args = parser.parse_args(argv)
    if args.pairs < 3:
        parser.error("--pairs must be at least 3: a ratio from fewer pairs does not hold")
    preset, speed_target = (LONG_PRESET, LONG_SPEED_TARGET) if args.long else (PRESET, SPEED_TARGET)
    pairs = []
    try:
        for i in range(args.pairs):
            order = (("recipe", run_recipe), ("preset", lambda: run_preset(preset)))
            results = dict((name, fn()) for name, fn in (order if i % 2 == 0 else order[::-1]))
            (t_r, loss_r), (t_p, loss_p) = results["recipe"], results["preset"]
            pairs.append({"recipe_seconds": t_r, "recipe_loss": loss_r, "preset_seconds": t_p,
                          "preset_loss": loss_p, "ratio": t_p / t_r})
            print(f"pair {i + 1}: recipe {t_r:.1f} s, loss {loss_r:.4f}; {preset} {t_p:.1f} s, "
                  f"loss {loss_p:.4f}; ratio {t_p / t_r:.3f}", flush=True)
    except (RuntimeError, OSError, KeyError, ValueError) as err:
        print(f"benchmarks/speedrun.py: error: {err}", file=sys.stderr)
        return 2
    ratios = [p["ratio"] for p in pairs]
    loss_target = LONG_LOSS_TARGET if args.long else None  # None: each pair's recipe loss
    summary = {
        "preset": preset,
        "pairs": pairs,
        "median_ratio": statistics.median(ratios), "max_ratio": max(ratios), "min_ratio": min(ratios),
        "speed_target": speed_target,
        "loss_target": loss_target,
        "loss_met": all(p["preset_loss"] <= (p["recipe_loss"] if loss_target is None else loss_target)
                        for p in pairs),
        "speed_met": max(ratios) <= speed_target,
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "load": os.getloadavg()[0],
                    "python": platform.python_version(),
                    "torch": __import__("torch").__version__},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip() or None,
    }
    bar = "the recipe's" if loss_target is None else f"{loss_target:g}"
    print(f"ratio {summary['median_ratio']:.3f} (median of {len(pairs)} pairs; "
          f"{summary['min_ratio']:.3f}–{summary['max_ratio']:.3f}); target ≤ {speed_target:.3f}: "
          f"{'met' if summary['speed_met'] else 'MISSED'}; loss at or below {bar} in every pair: "
          f"{'yes' if summary['loss_met'] else 'NO'}")
    print(f"machine: {summary['machine']['cpu']}, {summary['machine']['cores']} cores, torch "
          f"{summary['machine']['torch']}, load {summary['machine']['load']:.2f}; {summary['date']}")
    if args.json:
        write_json(summary, args.json, indent=1)  # whole or not at all
    return 0 if summary["speed_met"] and summary["loss_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
