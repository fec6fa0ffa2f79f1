"""--compile (issue 29, point 3): the training steps through torch.compile give the eager steps'
numbers, on the tiny preset, where the compiler works on a CPU (it needs a C++ compiler)."""

from __future__ import annotations

import pytest
import torch

from course_lib.data import load_char_data
from course_lib.training import Trainer, build_model, get_preset


def train_tiny(compile_: bool, steps: int = 3) -> tuple[list[float], torch.nn.Module]:
    """The tiny preset for ``steps`` steps: (its logged losses, the trained model)."""
    model_config, train_config = get_preset("tiny")
    train_config = train_config.replace(steps=steps, eval_interval=steps, compile=compile_)
    corpus = load_char_data()
    model = build_model(model_config, seed=0)
    trainer = Trainer(model, corpus.train, corpus.val[:2048], train_config, progress=False)
    trainer.train()
    logged = [r[k] for r in trainer.history for k in ("train_loss", "val_loss") if r[k] is not None]
    return logged, model


def test_compiled_steps_match_eager_steps_and_keep_the_models_own_state_dict():
    eager, eager_model = train_tiny(False)
    compiled, compiled_model = train_tiny(True)
    assert compiled == pytest.approx(eager, rel=1e-5)
    assert list(compiled_model.state_dict()) == list(eager_model.state_dict())  # no "_orig_mod."
    for (name, a), b in zip(eager_model.state_dict().items(), compiled_model.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5), name


def test_compile_must_be_a_bool():
    with pytest.raises(ValueError, match="compile"):
        get_preset("tiny")[1].replace(compile="yes")
