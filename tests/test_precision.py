"""Mixed precision (course_lib.training.precision): how "auto" resolves, that bfloat16 autocast really
computes in bfloat16 and stays close to float32, that float16's gradient scaler skips an overflowed
step and says so, and that a checkpoint keeps the precision it was trained in."""

from __future__ import annotations

import pytest
import torch

from course_lib.config import ModelConfig
from course_lib.data import load_char_data
from course_lib.training import (CheckpointError, Trainer, TrainConfig, autocast, build_model, evaluate,
                                 make_grad_scaler, resolve_precision)

MODEL = ModelConfig(vocab_size=65, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=32,
                    tie_embeddings=True)
RUN = TrainConfig(batch_size=8, context=32, steps=8, lr=3e-3, min_lr=3e-4, warmup_steps=2, eval_interval=4,
                  eval_batch_size=256, eval_at_start=False, seed=1)


@pytest.fixture(scope="module")
def corpus():
    data = load_char_data()
    return data.train[:50_000], data.val[:4_000]


def run(corpus, precision, steps=None, model_seed=1):
    trainer = Trainer(build_model(MODEL, model_seed), *corpus, RUN.replace(precision=precision), progress=False)
    trainer.train(until=steps)
    return trainer


def test_auto_resolves_by_device(monkeypatch):
    assert resolve_precision("auto", "cpu") == "float32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_precision("auto", "cuda") == "bfloat16"  # A100, H100, L4 ...
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_precision("auto", "cuda") == "float16"  # a GPU without bfloat16
    # a T4: torch says yes to bfloat16 when emulation counts (its default), no when it does not
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_precision("auto", "cuda") == "float16"
    assert resolve_precision("auto", "cuda", float16=False) == "float32"  # for Muon
    assert resolve_precision("auto", "cpu", float16=False) == "float32"
    assert resolve_precision("bfloat16", "cpu") == "bfloat16"  # an explicit choice is kept
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp8", "cpu")
    with pytest.raises(ValueError, match=r"precision must be one of .*got 'half'"):
        TrainConfig(precision="half")


def test_scaler_only_for_float16():
    assert make_grad_scaler("float32", "cpu") is None and make_grad_scaler("bfloat16", "cpu") is None
    assert isinstance(make_grad_scaler("float16", "cpu"), torch.amp.GradScaler)


def test_bfloat16_autocast_computes_in_bfloat16_on_a_cpu():
    model = build_model(MODEL, 0)
    seen = []
    hook = model.blocks[0].attn.w_qkv.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    x = torch.zeros(2, 8, dtype=torch.long)
    with autocast("bfloat16", "cpu"):
        model(x)
    with autocast("float32", "cpu"):
        model(x)
    hook.remove()
    assert seen == [torch.bfloat16, torch.float32]


def test_bfloat16_on_a_cpu_stays_within_tolerance_of_float32(corpus):
    """Eight steps: every step's loss within 0.03 nats of float32's (bfloat16 keeps 8 significant
    bits, a relative rounding of 2⁻⁹ ≈ 0.2 % per operation), the weights still float32 and apart by
    a little, not identical (so autocast was on)."""
    full = run(corpus, "float32")
    half = run(corpus, "bfloat16")
    assert half.precision == "bfloat16" and full.precision == "float32"
    gaps = [abs(a - b) for a, b in zip(full.step_losses, half.step_losses, strict=True)]
    assert max(gaps) < 0.03, gaps
    assert max(gaps) > 0  # the two runs did compute differently
    assert abs(full.history[-1]["val_loss"] - half.history[-1]["val_loss"]) < 0.03
    for p in half.model.parameters():
        assert p.dtype == torch.float32  # master weights stay float32
    # evaluation in float32 of the bfloat16-trained model agrees with its bfloat16 evaluation
    val = corpus[1]
    assert abs(evaluate(half.model, val, 32, 256) - evaluate(half.model, val, 32, 256, "bfloat16")) < 0.03


def test_float16_overflow_skips_the_step_and_says_so(corpus, capsys):
    trainer = Trainer(build_model(MODEL, 1), *corpus, RUN.replace(precision="float16"), progress=False)
    assert trainer.scaler is not None
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 40)  # float16 overflows at 65,504
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train(until=1)
    assert trainer.skipped_steps == [1]
    assert "step 1: float16 gradients overflowed; step skipped" in capsys.readouterr().out
    for a, b in zip(before, trainer.model.parameters()):
        assert torch.equal(a, b)  # a skipped step changes nothing
    assert trainer.scaler.get_scale() == 2.0 ** 39
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)  # a scale that fits
    trainer.train(until=3)
    assert trainer.skipped_steps == [1] and trainer.step == 3
    assert all(torch.isfinite(torch.tensor(trainer.step_losses)))


def test_a_checkpoint_keeps_its_precision(corpus, tmp_path):
    straight = run(corpus, "bfloat16")
    first = run(corpus, "bfloat16", steps=4)
    first.save(tmp_path / "ck.pt")
    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert state["precision"] == "bfloat16" and state["train_config"]["precision"] == "bfloat16"
    resumed = Trainer.from_checkpoint(tmp_path / "ck.pt", build_model(MODEL, 99), *corpus,
                                      RUN.replace(precision="bfloat16"), progress=False)
    assert resumed.precision == "bfloat16"
    resumed.train()
    assert resumed.step_losses == straight.step_losses  # exactly, in bfloat16 too
    # a run started under "auto" that resolved to bfloat16 (on a GPU) resumes in bfloat16 anywhere
    auto = run(corpus, "auto", steps=4)
    auto.save(tmp_path / "auto.pt")
    state = torch.load(tmp_path / "auto.pt", weights_only=True)
    state["precision"] = "bfloat16"
    torch.save(state, tmp_path / "auto.pt")
    again = Trainer.from_checkpoint(tmp_path / "auto.pt", build_model(MODEL, 99), *corpus, RUN, progress=False)
    assert again.precision == "bfloat16"
    # an explicit precision that differs from the checkpoint's is refused, naming the field
    with pytest.raises(CheckpointError, match=r"train_config.precision is 'bfloat16', but this run's is 'float32'"):
        Trainer.from_checkpoint(tmp_path / "ck.pt", build_model(MODEL, 99), *corpus,
                                RUN.replace(precision="float32"), progress=False)

