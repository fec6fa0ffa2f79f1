"""The chapter 11 checkers: independent correct solutions pass, each common mistake is named,
delegation is refused, and no message leaks a reference value."""

from functools import partial
import re

import pytest
import torch

from course_lib import checkpointing as ck
from course_lib.grading import GradingError, check_block_saved_bytes, check_saved_bytes

from grading_helpers import expect_failure


# --- correct solutions written independently of course_lib -----------------------------------------

def good_saved_bytes(fn, args, exclude=()):
    skip = {p.untyped_storage().data_ptr() for p in exclude}
    storages = {}  # address -> bytes; the tensors stay alive in `kept` while we count

    kept = []

    def pack(t):
        kept.append(t)
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return sum(storages.values())


def tensor_returning_saved_bytes(fn, args, exclude=()):  # a 0-d integer tensor is fine too
    return torch.tensor(good_saved_bytes(fn, args, exclude))


def good_block_saved_bytes(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention):
    B, T, D, H, F = batch, seq_len, d_model, n_heads, d_ff
    d_h = D // H
    norms = 2 * (3 * B * T * D + B * T)
    rope = 2 * T * (d_h // 2)
    swiglu = 4 * B * T * F
    w_o_in = B * T * H * d_h
    if attention == "sdpa":
        attn = B * H * T * d_h + 2 * B * n_kv_heads * T * d_h + B * H * T * d_h + B * H * T
        return 4 * (norms + rope + attn + w_o_in + swiglu)
    attn = 3 * B * H * T * d_h + 2 * B * H * T * T
    return 4 * (norms + rope + attn + w_o_in + swiglu) + 2 * T * T


@pytest.mark.parametrize("checker, solution", [
    (check_saved_bytes, good_saved_bytes),
    (check_saved_bytes, tensor_returning_saved_bytes),
    (check_block_saved_bytes, good_block_saved_bytes),
])
def test_correct_solutions_pass(checker, solution):
    checker(solution)


def test_the_block_solution_matches_a_measured_block():
    """The independent formula is the measurement, not just the reference's arithmetic."""
    from course_lib.block import TransformerBlock
    from course_lib.config import ModelConfig
    from course_lib.positional import rope_cos_sin

    cfg = ModelConfig(vocab_size=10, d_model=48, n_layers=1, n_heads=6, n_kv_heads=2, d_ff=72)
    block = TransformerBlock(cfg)
    x = torch.randn(2, 5, 48, requires_grad=True)
    cos, sin = rope_cos_sin(torch.arange(5), cfg.head_dim)
    for attention in ("sdpa", "reference"):
        measured = good_saved_bytes(lambda a: block(a, cos, sin, implementation=attention), (x,),
                                    tuple(block.parameters()))
        assert measured == good_block_saved_bytes(2, 5, 48, 6, 2, 72, attention)


# --- mistakes are named ----------------------------------------------------------------------------

def assert_no_values_leak(message):
    assert "tensor(" not in message
    assert not re.search(r"\d\.\d{3,}", message), message
    assert not re.search(r"\d{4,}", message), message  # no byte counts


expect = partial(expect_failure, no_leak=assert_no_values_leak)


def measuring(*, dedupe=True, whole=True, identity=False, skip=True, floats_only=False):
    def saved_bytes(fn, args, exclude=()):
        seen, total, kept = set(), 0, []
        skip_ptrs = {p.untyped_storage().data_ptr() for p in exclude}

        def pack(t):
            nonlocal total
            kept.append(t)
            ptr = t.untyped_storage().data_ptr()
            if skip and (any(t is p for p in exclude) if identity else ptr in skip_ptrs):
                return t
            if floats_only and not t.is_floating_point():
                return t
            if dedupe and ptr in seen:
                return t
            seen.add(ptr)
            total += t.untyped_storage().nbytes() if whole else t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(*args)
        return total

    return saved_bytes


SAVED_BYTES_MISTAKES = {
    "parameters were counted": measuring(skip=False),
    "recognised by identity": measuring(identity=True),
    "only floating-point tensors": measuring(floats_only=True),
    "count each storage once": measuring(dedupe=False),
    "keeps its whole storage alive": measuring(whole=False),
    "every time it was saved": measuring(dedupe=False, whole=False),
}


@pytest.mark.parametrize("fragment", SAVED_BYTES_MISTAKES)
def test_saved_bytes_mistakes_are_named(fragment):
    expect(check_saved_bytes, SAVED_BYTES_MISTAKES[fragment], fragment)


def block_with(**change):
    def formula(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention):
        B, T, D, H, F = batch, seq_len, d_model, n_heads, d_ff
        d_h = D // H
        kv = change.get("kv", n_kv_heads if attention == "sdpa" else H)
        e = 2 * (change.get("norm", 3) * B * T * D + change.get("rms", 1) * B * T)
        e += change.get("rope", 1) * T * d_h
        e += B * H * T * d_h + 2 * B * kv * T * d_h
        if attention == "sdpa":
            e += B * H * T * d_h + change.get("lse", 1) * B * H * T
        else:
            e += change.get("weights", 2) * B * H * T * T
        e += change.get("w_o", 1) * B * T * H * d_h + change.get("swiglu", 4) * B * T * F
        e += change.get("params", 0) * (2 * D * H * d_h + 2 * D * n_kv_heads * d_h + 3 * D * F + 2 * D)
        masks = 2 * T * T * change.get("masks", 1) if attention == "reference" else 0
        return change.get("bytes", 4) * e + masks

    return formula


def kv_as(heads_of):
    def formula(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention):
        kv = n_kv_heads if heads_of == "kv" else n_heads
        return block_with(kv=kv)(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention)
    return formula


def only_on(attention_path, wrong):
    def formula(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention):
        f = wrong if attention == attention_path else good_block_saved_bytes
        return f(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention)
    return formula


BLOCK_MISTAKES = {
    "explicit path's K and V were counted with n_kv_heads": only_on("reference", kv_as("kv")),
    "fused path's K and V were counted with n_heads": only_on("sdpa", kv_as("heads")),
    "keeps two (B, H, T, T) tensors": only_on("reference", block_with(weights=1)),
    "two bool causal masks are missing": only_on("reference", block_with(masks=0)),
    "log-sum-exp": only_on("sdpa", block_with(lse=0)),
    "1/rms(x)": block_with(rms=0),
    "RoPE tables": block_with(rope=0),
    "three (B, T, D) tensors": block_with(norm=2),
    "input of w_o": block_with(w_o=0),
    "four (B, T, F) tensors": block_with(swiglu=3),
    "parameters were counted": block_with(params=1),
    "counted elements, not bytes": block_with(bytes=1),
}


@pytest.mark.parametrize("fragment", BLOCK_MISTAKES)
def test_block_mistakes_are_named(fragment):
    expect(check_block_saved_bytes, BLOCK_MISTAKES[fragment], fragment)


def test_wrong_return_types_are_explained():
    expect(check_saved_bytes, lambda fn, args, exclude=(): 1.5, "should return a number of bytes as an int")
    expect(check_block_saved_bytes, lambda *a: [1], "should return a number of bytes as an int")
    expect(check_block_saved_bytes, lambda *a: 0, "block_saved_bytes returns wrong values")


def test_not_implemented_is_reported():
    def todo(*args):
        raise NotImplementedError()

    expect(check_saved_bytes, todo, "not implemented yet")
    expect(check_block_saved_bytes, todo, "not implemented yet")


# --- delegation is refused -------------------------------------------------------------------------

@pytest.mark.parametrize("delegate", [
    lambda fn, args, exclude=(): ck.saved_bytes(fn, *args, exclude=exclude),
    lambda fn, args, exclude=(): _with_log(fn, args, exclude),
])
def test_saved_bytes_delegation_is_refused(delegate):
    with pytest.raises(GradingError, match="course_lib.checkpointing"):
        check_saved_bytes(delegate)


def _with_log(fn, args, exclude):
    with ck.SavedTensorLog(exclude=exclude) as log:
        fn(*args)
    return log.nbytes


def test_block_delegation_is_refused():
    def delegate(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention):
        return ck.block_saved_bytes(batch, seq_len, d_model, n_heads, n_kv_heads, d_ff, attention=attention)

    with pytest.raises(GradingError, match="course_lib.checkpointing.block_saved_bytes"):
        check_block_saved_bytes(delegate)
