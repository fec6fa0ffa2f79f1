"""Data-parallel training (course_lib.training.distributed): torchrun with two CPU processes (gloo)
trains the same run as one process, and the comparison catches the two classic mistakes: every rank
training on the same rows, and losses summed over the ranks instead of averaged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from course_lib.config import ModelConfig
from course_lib.data import get_batch, load_char_data
from course_lib.training import TrainConfig, build_model, make_optimizer, train_step
from course_lib.training.distributed import World, mean_over_ranks, rank_rows
from course_lib.training.checkpoints import load_checkpoint

TOL = 1e-5


def torchrun(*args, nproc=2, timeout=240):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "course_lib.train", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def single(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "course_lib.train", "--threads", "1", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny preset (20 steps, evaluated at 10 and 20): once in one process, once in two."""
    root = tmp_path_factory.mktemp("ddp")
    one = single("--preset", "tiny", "--out", str(root / "one"), "--no-progress")
    assert one.returncode == 0, one.stderr
    two = torchrun("--preset", "tiny", "--out", str(root / "two"), "--no-progress")
    assert two.returncode == 0, two.stderr
    return root, one, two


def log(path):
    return json.loads((path / "log.json").read_text())


def same_evaluations(a, b):
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert rb["val_loss"] == pytest.approx(ra["val_loss"], abs=TOL)
        if ra["train_loss"] is not None:
            assert rb["train_loss"] == pytest.approx(ra["train_loss"], abs=TOL)


def test_two_processes_train_the_run_of_one(runs):
    root, one, two = runs
    a, b = log(root / "one"), log(root / "two")
    assert b["processes"] == 2 and a["processes"] == 1
    same_evaluations(a["evaluations"], b["evaluations"])
    ca = load_checkpoint(root / "one" / "checkpoint.pt")
    cb = load_checkpoint(root / "two" / "checkpoint.pt")
    assert cb["step_losses"].tolist() == pytest.approx(ca["step_losses"].tolist(), abs=TOL)
    for name, weight in ca["model"].items():
        torch.testing.assert_close(cb["model"][name], weight, atol=TOL, rtol=0)


def test_only_rank_zero_speaks(runs):
    _, _, two = runs
    assert two.stdout.count("done: step") == 1 and "2 processes" in two.stdout
    assert "error" not in two.stderr.lower()


def test_a_run_stopped_half_way_resumes_in_two_processes(runs, tmp_path):
    """A checkpoint written at step 10 (by one process) continues under torchrun to the log of the
    uninterrupted run: the batches do not depend on the number of processes."""
    from course_lib.training import Trainer, get_preset

    root, _, _ = runs
    model_config, train_config = get_preset("tiny")
    data = load_char_data()
    first = Trainer(build_model(model_config, train_config.seed), data.train, data.val, train_config,
                    progress=False, vocab=data.tokenizer.vocab)
    first.train(until=10)
    out = tmp_path / "resumed"
    out.mkdir()
    first.save(out / "checkpoint.pt")
    resumed = torchrun("--preset", "tiny", "--out", str(out), "--no-progress", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    same_evaluations(log(root / "one")["evaluations"], log(out)["evaluations"])


# --- the arithmetic a two-process step relies on, checked in one process --------------------------------

MODEL = ModelConfig(vocab_size=65, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32)
RUN = TrainConfig(batch_size=8, context=16, steps=4, lr=3e-3, min_lr=3e-4, warmup_steps=1)


def simulated_two_ranks(x, y, rows=rank_rows, reduce="mean"):
    """One step of a two-rank run, simulated: each rank's gradient on its rows, averaged as DDP does;
    returns the logged loss and the updated weights."""
    grads, losses, model = [], [], None
    for rank in range(2):
        world = World(rank, 2)
        model = build_model(MODEL, 0)
        opt = make_optimizer(model, RUN)
        xr, yr = rows(x, world), rows(y, world)
        loss = torch.nn.functional.cross_entropy(model(xr).flatten(0, 1), yr.flatten())
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        losses.append(loss.detach())
    for p, g0, g1 in zip(model.parameters(), *grads):
        p.grad = (g0 + g1) / 2  # DistributedDataParallel's average
    torch.nn.utils.clip_grad_norm_(model.parameters(), RUN.grad_clip)
    opt.step()
    logged = (losses[0] + losses[1]) / (2 if reduce == "mean" else 1)
    return logged.item(), [p.detach() for p in model.parameters()]


def one_process(x, y):
    model = build_model(MODEL, 0)
    opt = make_optimizer(model, RUN)
    loss = train_step(model, opt, x, y, RUN.lr, RUN.grad_clip)
    return loss.item(), [p.detach() for p in model.parameters()]


def batch():
    data = load_char_data().train[:20_000]
    return get_batch(data, RUN.batch_size, RUN.context, torch.Generator().manual_seed(0))


def agree(a, b):
    return abs(a[0] - b[0]) <= TOL and all(torch.allclose(p, q, atol=TOL, rtol=0) for p, q in zip(a[1], b[1]))


def test_rank_rows_split_the_batch_without_overlap():
    x = torch.arange(8)[:, None].expand(8, 3)
    parts = [rank_rows(x, World(r, 4)) for r in range(4)]
    assert torch.equal(torch.cat(parts), x)
    with pytest.raises(ValueError, match="must divide among 3 processes"):
        rank_rows(x, World(0, 3))
    assert mean_over_ranks(torch.tensor(2.5), World()) == 2.5


def test_the_comparison_catches_wrong_rows_and_wrong_scaling():
    """The simulated two-rank step with the real rank_rows and a mean equals the one-process step to
    1e-5; each classic mistake moves the result far beyond that tolerance."""
    x, y = batch()
    right = simulated_two_ranks(x, y)
    assert agree(right, one_process(x, y))
    same_rows = simulated_two_ranks(x, y, rows=lambda t, world: rank_rows(t, World(0, 2)))
    assert not agree(same_rows, one_process(x, y))  # both ranks on rank 0's rows
    summed = simulated_two_ranks(x, y, reduce="sum")
    assert not agree(summed, one_process(x, y))  # losses added, not averaged


def test_a_batch_that_does_not_divide_is_refused():
    from course_lib.training import Trainer

    data = load_char_data()
    with pytest.raises(ValueError, match=r"batch_size \(8\) must divide into 3 process\(es\)"):
        Trainer(build_model(MODEL, 0), data.train[:5000], data.val[:2000], RUN, progress=False, world=World(0, 3))
