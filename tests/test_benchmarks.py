"""The reference-time script's one piece of model surgery: swapping in PyTorch's fused LayerNorm changes
the kernel, not the function."""

from __future__ import annotations

import importlib.util
import pathlib

import torch

from course_lib.model import DecoderLM
from course_lib.norms import LayerNorm

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "nanogpt_recipe.py"


def load_recipe():
    spec = importlib.util.spec_from_file_location("nanogpt_recipe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fused_layernorm_computes_the_same_model():
    recipe = load_recipe()
    torch.manual_seed(0)
    model = DecoderLM(recipe.gpt2_config(65))
    with torch.no_grad():  # non-trivial gains and shifts, so that copying them is tested
        for module in model.modules():
            if isinstance(module, LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    ids = torch.randint(0, 65, (2, recipe.BLOCK_SIZE))
    before = model(ids)
    n_norms = sum(isinstance(m, LayerNorm) for m in model.modules())
    recipe.use_fused_layernorm(model)
    assert n_norms == 2 * 4 + 1  # two per block and the final one
    assert not any(isinstance(m, LayerNorm) for m in model.modules())
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in model.modules()) == n_norms
    torch.testing.assert_close(model(ids), before, rtol=1e-5, atol=1e-5)
