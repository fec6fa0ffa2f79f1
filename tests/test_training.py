"""course_lib.training: the schedule, weight decay on matrices only, one step against its definition,
deterministic whole-split evaluation, same seed → same losses, checkpoints (weights_only, atomic, config
checks) and exact resumption."""

import math
import os
import pickle
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from course_lib import training
from course_lib.config import ModelConfig
from course_lib.data import eval_windows, get_batch, induction_batch, load_char_data
from course_lib.training import (CheckpointError, Trainer, TrainConfig, build_model, evaluate, get_preset,
                                 load_checkpoint, lr_at, make_optimizer, param_groups, train_step)

MODEL = ModelConfig(vocab_size=65, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32,
                    tie_embeddings=True)
RUN = TrainConfig(batch_size=4, context=16, steps=12, lr=3e-3, min_lr=3e-4, warmup_steps=3, eval_interval=4,
                  eval_batch_size=256, eval_at_start=True, seed=3)


@pytest.fixture(scope="module")
def corpus():
    data = load_char_data()
    return data.train[:50_000], data.val[:3_000]  # small slices: fast tests


def trainer_for(corpus, run=RUN, model=MODEL, seed=None):
    return Trainer(build_model(model, run.seed if seed is None else seed), *corpus, run, progress=False)


# --- schedule ------------------------------------------------------------------------------------------

def test_lr_schedule_warmup_then_cosine():
    kw = dict(lr=1.0, min_lr=0.1, warmup_steps=10, total_steps=110)
    assert lr_at(0, **kw) == pytest.approx(0.1)  # the first step already moves
    assert lr_at(4, **kw) == pytest.approx(0.5)
    assert lr_at(9, **kw) == pytest.approx(1.0)  # warmup ends at the peak
    assert lr_at(10, **kw) == pytest.approx(1.0)  # the cosine starts at the peak
    assert lr_at(60, **kw) == pytest.approx(0.55)  # halfway: the mean of lr and min_lr
    assert lr_at(110, **kw) == pytest.approx(0.1) and lr_at(500, **kw) == pytest.approx(0.1)
    values = [lr_at(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # decays monotonically
    assert lr_at(0, lr=1.0, min_lr=0.0, warmup_steps=0, total_steps=10) == pytest.approx(1.0)  # no warmup
    with pytest.raises(ValueError, match=r"step \(-1\)"):
        lr_at(-1, **kw)


# --- weight decay --------------------------------------------------------------------------------------

def test_weight_decay_on_matrices_only():
    gpt2 = ModelConfig(vocab_size=65, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=32, norm="layer",
                       ffn="gelu", positional="learned", bias=True, tie_embeddings=True)
    model = build_model(gpt2)
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(n.endswith("weight") and "norm" not in n for n in decayed)
    assert {"embed.weight", "pos_embed.weight", "blocks.0.attn.w_qkv.weight"} <= decayed
    assert all(n.endswith("bias") or "norm" in n for n in kept)
    assert {"blocks.0.attn_norm.weight", "blocks.0.attn_norm.bias", "blocks.0.attn.w_qkv.bias", "norm.weight"} <= kept
    n_params = sum(p.numel() for p in decay["params"] + no_decay["params"])
    assert n_params == sum(p.numel() for p in model.parameters())  # every parameter once (tied table once)


def test_decay_shrinks_matrices_and_leaves_gains_alone():
    model = build_model(MODEL)
    run = RUN.replace(weight_decay=0.5)
    opt = make_optimizer(model, run)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # no gradient: only the decay moves the weights
    for g in opt.param_groups:
        g["lr"] = 0.1
    opt.step()
    for n, p in model.named_parameters():
        factor = 1 - 0.1 * 0.5 if p.dim() >= 2 else 1.0  # θ ← θ − lr · λ · θ
        assert torch.allclose(p, before[n] * factor), n


# --- one step and evaluation ---------------------------------------------------------------------------

def test_train_step_is_loss_backward_clip_adamw(corpus):
    model_a, model_b = build_model(MODEL, 1), build_model(MODEL, 1)
    opt_a = make_optimizer(model_a, RUN)
    opt_b = torch.optim.AdamW(param_groups(model_b, RUN.weight_decay), lr=RUN.lr, betas=RUN.betas, foreach=False)
    x = torch.randint(0, 65, (4, 16), generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 65, (4, 16), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        loss_a = train_step(model_a, opt_a, x, y, lr=2e-3, grad_clip=0.05)
        logits = model_b(x)
        loss_b = F.cross_entropy(logits.reshape(-1, 65), y.reshape(-1))
        loss_b.backward()
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model_b.parameters()))
        assert norm > 0.05  # the clip really acts
        for p in model_b.parameters():
            p.grad *= 0.05 / (norm + 1e-6)
        for g in opt_b.param_groups:
            g["lr"] = 2e-3
        opt_b.step()
        opt_b.zero_grad()
        assert loss_a.item() == pytest.approx(loss_b.item(), rel=1e-6) and not loss_a.requires_grad
    for (n, a), b in zip(model_a.named_parameters(), model_b.parameters()):
        assert torch.allclose(a, b, atol=1e-6), n


def test_evaluate_is_the_mean_over_every_window(corpus):
    _, val = corpus
    model = build_model(MODEL, 2)
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in eval_windows(val, 1000, 16):
            total += F.cross_entropy(model(x).reshape(-1, 65), y.reshape(-1), reduction="sum").item()
            count += y.numel()
    assert count == (len(val) - 1) // 16 * 16
    expected = total / count
    assert evaluate(model, val, 16, batch_size=7) == pytest.approx(expected, rel=1e-6)
    assert evaluate(model, val, 16, batch_size=7) == evaluate(model, val, 16, batch_size=7)  # deterministic
    assert model.training  # restored


# --- the loop ------------------------------------------------------------------------------------------

def test_same_seed_same_losses(corpus):
    a, b = trainer_for(corpus), trainer_for(corpus)
    a.train()
    b.train()
    assert len(a.step_losses) == 12
    assert a.step_losses == b.step_losses
    assert [r["val_loss"] for r in a.history] == [r["val_loss"] for r in b.history]
    c = trainer_for(corpus, run=RUN.replace(seed=4))
    c.train()
    assert c.step_losses != a.step_losses


def test_history_records_every_evaluation(corpus):
    t = trainer_for(corpus)
    history = t.train()
    assert [r["step"] for r in history] == [0, 4, 8, 12]
    assert history[0]["train_loss"] is None and history[0]["val_loss"] == pytest.approx(math.log(65), abs=0.1)
    for r in history[1:]:
        assert r["tokens"] == r["step"] * 64 and r["tokens_per_second"] > 0
        assert r["val_bits_per_char"] == pytest.approx(r["val_loss"] / math.log(2))
    assert history[1]["train_loss"] == pytest.approx(sum(t.step_losses[:4]) / 4)
    assert history[-1]["val_loss"] < history[0]["val_loss"] - 0.3  # it learns
    assert history[-1]["lr"] == pytest.approx(lr_at(11, lr=3e-3, min_lr=3e-4, warmup_steps=3, total_steps=12))
    elapsed = [r["elapsed_seconds"] for r in history]
    assert elapsed == sorted(elapsed)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_resume_reproduces_the_uninterrupted_run(corpus, tmp_path, dropout):
    """With dropout too: its masks come from torch's own generator, which the checkpoint keeps (the
    resumed model is built with another seed, which moves that generator elsewhere)."""
    model = MODEL.replace(dropout=dropout)
    straight = trainer_for(corpus, model=model)
    straight.train()
    first = trainer_for(corpus, model=model)
    first.train(until=6)  # stop between two evaluations
    first.save(tmp_path / "ck.pt")
    resumed = Trainer.from_checkpoint(tmp_path / "ck.pt", build_model(model, 99), *corpus, RUN, progress=False)
    assert resumed.step == 6
    resumed.train()
    assert resumed.step_losses == straight.step_losses  # exactly, step by step
    assert [(r["step"], r["train_loss"], r["val_loss"]) for r in resumed.history] == \
           [(r["step"], r["train_loss"], r["val_loss"]) for r in straight.history]
    for a, b in zip(resumed.model.parameters(), straight.model.parameters()):
        assert torch.equal(a, b)


def test_dropout_masks_come_from_the_run_seed_not_from_what_ran_before(corpus):
    model = MODEL.replace(dropout=0.1)
    first = trainer_for(corpus, model=model)
    before = torch.get_rng_state()
    first.train(until=4)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generator is left alone
    torch.rand(1000)  # the caller draws in between
    second = trainer_for(corpus, model=model)
    second.train(until=4)
    assert second.step_losses == first.step_losses
    without = trainer_for(corpus)
    without.train(until=4)
    assert without.step_losses != first.step_losses  # the masks are drawn, and they matter
    fresh = [Trainer(build_model(model), *corpus, RUN.replace(seed=seed), progress=False).rng["cpu"]
             for seed in (3, 3, 4)]
    assert torch.equal(fresh[0], fresh[1]) and not torch.equal(fresh[0], fresh[2])  # per seed
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RUN.seed)  # how the experiment runner seeded dropout: its records still hold
        assert torch.equal(fresh[0], torch.get_rng_state())


def test_the_clock_waits_for_the_device_before_each_rate(corpus, monkeypatch):
    """A GPU runs the steps asynchronously: before the clock is read for a rate (an evaluation's
    tokens per second, the bar's speed) the trainer waits for the device — here at steps 4, 8, 12
    (the evaluations) and on a CPU, where waiting is nothing."""
    from course_lib.training import loop

    waits = []
    monkeypatch.setattr(loop, "synchronize", lambda device: waits.append((device.type, loop_trainer.step)))
    loop_trainer = trainer_for(corpus)
    loop_trainer.train()
    assert waits == [("cpu", 4), ("cpu", 8), ("cpu", 12)]


def test_synchronize_waits_on_a_gpu_only(monkeypatch):
    from course_lib.device import synchronize

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    synchronize("cpu")
    synchronize(torch.device("cuda", 1))
    assert calls == [torch.device("cuda", 1)]


def test_progress_bar_shows_loss_bits_and_speed(corpus, capsys):
    t = Trainer(build_model(MODEL), *corpus, RUN.replace(steps=4, eval_interval=4), progress=True)
    t.train()
    err = capsys.readouterr().err
    assert "training" in err and "bpc=" in err and "tok_s=" in err and "loss=" in err


def test_course_lib_imports_without_tqdm():
    """tqdm is imported only when a bar is shown: with tqdm unimportable (after torch, which may load it
    itself), the package and its commands still import."""
    code = ("import sys, torch; sys.modules['tqdm'] = None; "
            "import course_lib, course_lib.training, course_lib.data, course_lib.sampling, course_lib.train, "
            "course_lib.sample; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


# --- checkpoints ---------------------------------------------------------------------------------------

def test_checkpoint_holds_plain_values_and_loads_weights_only(corpus, tmp_path):
    t = trainer_for(corpus)
    t.train(until=4)
    t.save(tmp_path / "ck.pt")
    state = torch.load(tmp_path / "ck.pt", weights_only=True)  # no pickled objects inside
    assert isinstance(state["model_config"], dict) and isinstance(state["train_config"], dict)
    assert state["step"] == 4 and state["model_config"]["d_model"] == 32
    assert set(state["optimizer"]) == {"state", "param_groups"}
    assert isinstance(state["batch_generator"], torch.Tensor)


def test_config_mismatch_names_the_field(corpus, tmp_path):
    t = trainer_for(corpus)
    t.train(until=2)
    t.save(tmp_path / "ck.pt")
    other_model = MODEL.replace(d_ff=96)
    with pytest.raises(CheckpointError, match=r"model_config\.d_ff is 64, but this run's is 96"):
        Trainer.from_checkpoint(tmp_path / "ck.pt", build_model(other_model), *corpus, RUN, progress=False)
    with pytest.raises(CheckpointError, match=r"train_config\.lr is 0\.003, but this run's is 0\.001"):
        Trainer.from_checkpoint(tmp_path / "ck.pt", build_model(MODEL), *corpus, RUN.replace(lr=1e-3),
                                progress=False)


def test_corrupt_and_foreign_checkpoints_raise(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"format": "course_lib.training/1", "evil": _Evil()}, tmp_path / "pickled.pt")
    with pytest.raises(CheckpointError, match="corrupt or not a course_lib checkpoint"):
        load_checkpoint(tmp_path / "pickled.pt")  # weights_only refuses the object
    assert not _Evil.ran
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a course_lib training checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")


class _Evil:
    ran = False

    def __reduce__(self):
        return (_Evil._run, ())

    @staticmethod
    def _run():
        _Evil.ran = True


def test_a_crash_while_saving_keeps_the_good_checkpoint(corpus, tmp_path, monkeypatch):
    t = trainer_for(corpus)
    t.train(until=4)
    path = tmp_path / "ck.pt"
    t.save(path)
    good = path.read_bytes()
    t.train(until=8)

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        t.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == good  # untouched
    assert load_checkpoint(path)["step"] == 4
    assert os.listdir(tmp_path) == ["ck.pt"]  # no temporary file left behind


# --- gradient accumulation ----------------------------------------------------------------------------

@pytest.mark.parametrize("accum", [2, 4])
def test_an_accumulated_step_equals_a_step_on_the_whole_batch(accum):
    """N micro-batches of B/N windows, each loss divided by N: the same loss, gradient and update."""
    x = torch.randint(0, 65, (8, 16), generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 65, (8, 16), generator=torch.Generator().manual_seed(1))
    whole, split = build_model(MODEL, 1), build_model(MODEL, 1)
    opt_whole, opt_split = make_optimizer(whole, RUN), make_optimizer(split, RUN)
    for _ in range(3):  # the clip acts (norm > 0.05), so a wrong scale would change the update's direction
        loss_w, norm_w = train_step(whole, opt_whole, x, y, lr=2e-3, grad_clip=0.05, return_grad_norm=True)
        loss_s, norm_s = train_step(split, opt_split, x, y, lr=2e-3, grad_clip=0.05, return_grad_norm=True,
                                    grad_accum=accum)
        assert loss_s.item() == pytest.approx(loss_w.item(), rel=1e-6)
        assert norm_s.item() == pytest.approx(norm_w.item(), rel=1e-5) and norm_w > 0.05
    for (name, a), b in zip(whole.named_parameters(), split.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def test_accumulation_that_forgets_to_divide_is_caught():
    """The test above fails on an accumulation that sums the micro-batch means (N times the gradient):
    its gradient norm is N times too large."""
    x = torch.randint(0, 65, (8, 16), generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 65, (8, 16), generator=torch.Generator().manual_seed(1))
    model = build_model(MODEL, 1)
    for x_k, y_k in zip(x.chunk(4), y.chunk(4)):
        F.cross_entropy(model(x_k).flatten(0, 1), y_k.flatten()).backward()  # no / N
    summed = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    reference = build_model(MODEL, 1)
    F.cross_entropy(reference(x).flatten(0, 1), y.flatten()).backward()
    whole = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in reference.parameters()]))
    assert summed.item() == pytest.approx(4 * whole.item(), rel=1e-4)


def test_a_trainer_with_accumulation_follows_the_same_run(corpus):
    plain = trainer_for(corpus)
    plain.train()
    accumulated = trainer_for(corpus, run=RUN.replace(grad_accum=2))
    accumulated.train()
    assert accumulated.step_losses == pytest.approx(plain.step_losses, rel=1e-4)
    with pytest.raises(ValueError, match=r"grad_accum \(3\) must be a positive int dividing the batch"):
        train_step(build_model(MODEL), make_optimizer(build_model(MODEL), RUN),
                   torch.zeros(4, 16, dtype=torch.long), torch.zeros(4, 16, dtype=torch.long), 1e-3, grad_accum=3)


def test_a_checkpoint_written_before_a_field_existed_resumes(corpus, tmp_path):
    t = trainer_for(corpus)
    t.train(until=4)
    path = tmp_path / "ck.pt"
    t.save(path)
    state = torch.load(path, weights_only=True)
    del state["train_config"]["grad_accum"]  # as written before grad_accum existed
    torch.save(state, path)
    assert load_checkpoint(path, train_config=RUN)["step"] == 4  # a missing field holds its default
    with pytest.raises(CheckpointError, match=r"train_config.grad_accum is 1, but this run's is 2"):
        load_checkpoint(path, train_config=RUN.replace(grad_accum=2))


# --- the weights' moving average ---------------------------------------------------------------------

def test_the_moving_average_follows_its_formula_and_is_what_is_evaluated(corpus):
    """With ema β the trainer keeps θ̄₁ = θ₁, θ̄ₜ = β θ̄ₜ₋₁ + (1 − β) θₜ, recomputed here from the
    weights after every step; evaluations score θ̄, and training θ is as without the average."""
    beta = 0.8
    run = RUN.replace(ema=beta, steps=5, eval_interval=5)
    plain = trainer_for(corpus, RUN.replace(steps=5, eval_interval=5))
    plain.train()
    averaged = trainer_for(corpus, run)
    expected = None
    for step in range(1, 6):
        averaged.train(until=step)
        weights = [p.detach().clone() for p in averaged.model.parameters()]
        expected = weights if expected is None else [beta * e + (1 - beta) * w for e, w in zip(expected, weights)]
    assert int(averaged.average.n_averaged) == 5
    for e, a in zip(expected, averaged.evaluated_model.parameters()):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-7)
    assert averaged.step_losses == plain.step_losses  # the average does not touch training
    assert averaged.history[-1]["val_loss"] == evaluate(averaged.average.module, corpus[1], RUN.context, 256)
    assert averaged.history[-1]["val_loss"] != plain.history[-1]["val_loss"]
    assert plain.evaluated_model is plain.model and plain.average is None


def test_a_run_with_a_moving_average_resumes_exactly_and_samples_from_it(corpus, tmp_path):
    from course_lib.sample import load_model

    run = RUN.replace(ema=0.9)
    straight = trainer_for(corpus, run)
    straight.train()
    first = trainer_for(corpus, run)
    first.train(until=6)
    first.save(tmp_path / "ck.pt")
    resumed = Trainer.from_checkpoint(tmp_path / "ck.pt", build_model(MODEL, 99), *corpus, run, progress=False)
    resumed.train()
    assert [r["val_loss"] for r in resumed.history] == [r["val_loss"] for r in straight.history]
    for a, b in zip(resumed.evaluated_model.parameters(), straight.evaluated_model.parameters()):
        assert torch.equal(a, b)
    resumed.vocab = load_char_data().tokenizer.vocab
    resumed.save(tmp_path / "end.pt")
    sampled, _ = load_model(str(tmp_path / "end.pt"), torch.device("cpu"))
    for a, b in zip(sampled.parameters(), straight.evaluated_model.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(CheckpointError, match="ema"):  # a run without the average cannot resume it
        Trainer.from_checkpoint(tmp_path / "ck.pt", build_model(MODEL), *corpus, RUN, progress=False)


# --- configs and presets -------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    (dict(batch_size=0), r"batch_size \(0\)"),
    (dict(lr=0.0), r"lr \(0.0\)"),
    (dict(min_lr=1.0), r"min_lr \(1.0\) must not exceed lr"),
    (dict(betas=(0.9, 1.0)), "betas"),
    (dict(grad_clip=-1.0), r"grad_clip \(-1.0\)"),
    (dict(warmup_steps=-1), r"warmup_steps \(-1\)"),
    (dict(grad_accum=0), r"grad_accum \(0\)"),
    (dict(grad_accum=3), r"grad_accum \(3\) must divide batch_size \(4\)"),
    (dict(ema=1.0), r"ema \(1.0\) must be None or a decay in \(0, 1\)"),
    (dict(ema=0), r"ema \(0\)"),
    (dict(ema=True), r"ema \(True\)"),
])
def test_train_config_errors_name_the_field(change, message):
    with pytest.raises((ValueError, TypeError), match=message):
        RUN.replace(**change)


def test_trainer_refuses_a_context_beyond_the_model(corpus):
    with pytest.raises(ValueError, match=r"context \(64\) must not exceed the model's max_seq_len \(32\)"):
        Trainer(build_model(MODEL), *corpus, RUN.replace(context=64), progress=False)


def test_presets():
    model, run = get_preset("shakespeare-cpu")
    assert model.norm == "rms" and model.ffn == "swiglu" and model.positional == "rope"
    with torch.device("meta"):
        n_params = sum(p.numel() for p in build_model(model).parameters())
    assert n_params <= 1_000_000
    assert run.context <= model.max_seq_len
    gpt2, ref = get_preset("nanogpt-cpu")
    assert (gpt2.n_layers, gpt2.n_heads, gpt2.d_model, ref.context, ref.batch_size, ref.steps) == (4, 4, 128, 64, 12, 2000)
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        get_preset("nope")


def test_train_on_batches_is_the_trainers_loop(corpus):
    """Fed the trainer's own batches, train_on_batches takes exactly the trainer's steps."""
    train, val = corpus
    config = RUN.replace(eval_at_start=False, eval_interval=RUN.steps)
    trainer = Trainer(build_model(MODEL, seed=config.seed), train, val, config, progress=False)
    trainer.train()
    model = build_model(MODEL, seed=config.seed)
    generator = torch.Generator().manual_seed(config.seed + 1)
    losses = training.train_on_batches(
        model, lambda: get_batch(train, config.batch_size, config.context, generator), config)
    assert len(losses) == config.steps
    assert losses == pytest.approx(trainer.step_losses, rel=1e-6)
    for mine, theirs in zip(model.parameters(), trainer.model.parameters()):
        torch.testing.assert_close(mine, theirs)


def test_train_on_batches_fits_a_fixed_batch():
    model = build_model(MODEL, seed=0)
    x, y = induction_batch(4, 8, 65, torch.Generator().manual_seed(0))  # one batch, seen every step
    losses = training.train_on_batches(model, lambda: (x, y), RUN.replace(steps=40, lr=1e-2))
    assert losses[0] > math.log(65) - 0.5 and losses[-1] < 1.0


def test_train_on_batches_refuses_bad_arguments():
    model = build_model(MODEL, seed=0)
    with pytest.raises(TypeError, match="config"):
        training.train_on_batches(model, lambda: None, {"steps": 3})
    with pytest.raises(TypeError, match="next_batch"):
        training.train_on_batches(model, None, RUN)


def test_loss_per_position_averages_to_evaluate(corpus):
    _, val = corpus
    model = build_model(MODEL, seed=1)
    curve = training.loss_per_position(model, val, 32, batch_size=16)
    assert curve.shape == (32,)
    assert curve.mean().item() == pytest.approx(evaluate(model, val, 32, 16), rel=1e-5)
    x, y = next(eval_windows(val, 5, 32))  # the first 5 windows, by hand
    with torch.no_grad():
        nll = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none")  # (5, T)
    torch.testing.assert_close(training.loss_per_position(model, val, 32, 4, max_windows=5),
                               nll.mean(dim=0), rtol=1e-5, atol=1e-6)
    assert model.training  # left as it was


def test_the_smoke_cap_shortens_every_run_and_still_ends_in_an_evaluation(corpus, monkeypatch):
    """COURSE_LIB_MAX_STEPS (set by the Colab-like test run only) caps the steps of every run; the
    last step is evaluated; unset, a run is untouched; a bad value is named."""
    long_run = RUN.replace(steps=40, warmup_steps=10, eval_interval=20, eval_at_start=False)
    assert training.smoke_capped(long_run) is long_run
    monkeypatch.setenv("COURSE_LIB_MAX_STEPS", "6")
    capped = training.smoke_capped(long_run)
    assert (capped.steps, capped.warmup_steps, capped.eval_interval) == (6, 3, 6)
    assert training.smoke_capped(RUN.replace(steps=5)).steps == 5  # shorter runs are left alone
    trainer = trainer_for(corpus, long_run)
    history = trainer.train()
    assert trainer.step == 6 and [h["step"] for h in history] == [6]
    losses = training.train_on_batches(build_model(MODEL), lambda: get_batch(corpus[0], 4, 16, torch.Generator()),
                                       long_run)
    assert len(losses) == 6
    monkeypatch.setenv("COURSE_LIB_MAX_STEPS", "many")
    with pytest.raises(ValueError, match="COURSE_LIB_MAX_STEPS"):
        training.smoke_capped(long_run)


def test_in_a_notebook_the_progress_bar_ends_as_text_beside_its_widget():
    """A static page cannot render the widget: the output must also carry the bar's final state."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from course_lib.training import progress_bar, close_progress_bar\n"
        "bar = progress_bar(30)\n"
        "for _ in range(30):\n"
        "    bar.update(1)\n"
        "    bar.set_postfix(val='1.637', loss='1.512', lr='3.0e-04', refresh=False)\n"
        "close_progress_bar(bar)\n")]
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    (output,) = nb.cells[0].outputs
    assert "application/vnd.jupyter.widget-view+json" in output["data"]
    text = output["data"]["text/plain"]
    assert text.startswith("training: 100%") and "30/30" in text
    assert "val=1.637" in text and "loss=1.512" in text
    assert max(len(line) for line in text.splitlines()) <= 88, text  # the site's column


def test_target_loss_stops_early_and_is_checked(corpus):
    t = trainer_for(corpus)
    t.train(target_loss=100.0)  # met by the evaluation at step 0
    assert t.step == 0 and t.reached_target is t.history[0]
    t.train(target_loss=1e-3)  # never met: the whole run
    assert t.step == RUN.steps and t.reached_target is None
    for bad in (0.0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="target_loss"):
            trainer_for(corpus).train(target_loss=bad)
