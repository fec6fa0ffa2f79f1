"""The reference-time script trains the model nanoGPT's recipe describes, at the speed of nanoGPT's own
code: its LayerNorms run PyTorch's fused kernel, as nanoGPT's do."""

from __future__ import annotations

import importlib.util
import pathlib

import torch

from course_lib.model import DecoderLM

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "nanogpt_recipe.py"


def load_recipe():
    spec = importlib.util.spec_from_file_location("nanogpt_recipe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def backward_nodes(output: torch.Tensor) -> list[str]:
    """The names of the autograd nodes behind ``output``, each once."""
    seen, todo, names = set(), [output.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return names


def test_the_recipe_model_is_gpt2_shaped_and_its_layer_norms_are_fused():
    recipe = load_recipe()
    config = recipe.gpt2_config(65)
    assert (config.n_layers, config.n_heads, config.d_model, config.max_seq_len) == (4, 4, 128, 64)
    assert (config.norm, config.ffn, config.positional, config.bias) == ("layer", "gelu", "learned", True)
    model = DecoderLM(config)
    ids = torch.randint(0, 65, (2, recipe.BLOCK_SIZE), generator=torch.Generator().manual_seed(0))
    logits = model(ids)  # the script's call: the default path
    assert backward_nodes(logits).count("NativeLayerNormBackward0") == 2 * 4 + 1  # two a block, one final
