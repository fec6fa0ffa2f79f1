"""course_lib.tensor_bytes against counts made by hand: what each operator returns, views and
in-place results not counted, and attention's memory as chapter 3 reports it."""

import torch
import torch.nn.functional as F

from course_lib import attention as at
from course_lib.tensor_bytes import NewTensorBytes, bytes_created

FP32 = 4  # bytes per float32 number


def test_a_matrix_product_creates_its_output():
    a, b = torch.randn(3, 5), torch.randn(5, 7)
    assert bytes_created(lambda: a @ b) == 3 * 7 * FP32


def test_each_new_tensor_counts_once_with_its_dtype():
    x = torch.randn(10, 20)

    def two_steps():
        y = x * 2  # 200 float32 numbers
        return (y > 0).sum()  # 200 bools, then one int64

    assert bytes_created(two_steps) == 200 * FP32 + 200 * 1 + 8
    assert bytes_created(lambda: x.to(torch.float64)) == 200 * 8


def test_views_and_in_place_results_are_not_new():
    x = torch.randn(6, 8)
    assert bytes_created(lambda: x.view(8, 6)) == 0
    assert bytes_created(lambda: x.T) == 0
    assert bytes_created(lambda: x[2:4]) == 0
    assert bytes_created(lambda: x.add_(1.0)) == 0
    assert bytes_created(lambda: x.T.contiguous()) == 6 * 8 * FP32  # a copy is new


def test_by_op_splits_the_total_by_operator():
    x, w = torch.randn(4, 16), torch.randn(16, 32)
    with NewTensorBytes() as counter:
        torch.relu(x @ w)
    assert counter.by_op == {"aten.mm.default": 4 * 32 * FP32,
                             "aten.relu.default": 4 * 32 * FP32}
    assert counter.total == sum(counter.by_op.values())


def test_tensors_made_outside_the_block_are_not_counted():
    x = torch.randn(100)
    with NewTensorBytes() as counter:
        pass
    y = x + 1  # noqa: F841  (after the block)
    assert counter.total == 0 and counter.by_op == {}


def test_attention_memory_as_chapter_3_reports_it():
    """The explicit math makes several (B, H, T, T) float32 tensors; the fused causal kernel
    makes its output and one log-sum-exp per query; a bool mask adds one float32 (T, T) bias."""
    B, H, T, D_h = 1, 2, 256, 16
    q, k, v = (torch.randn(B, H, T, D_h) for _ in range(3))
    mask = at.causal_mask(T)
    score = B * H * T * T * FP32
    explicit = bytes_created(lambda: at.attention_reference(q, k, v, mask))
    assert explicit >= 2 * score
    fused = bytes_created(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    output, lse = B * H * T * D_h * FP32, B * H * T * FP32
    assert output <= fused <= output + lse
    with NewTensorBytes() as counter:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert max(counter.by_op.values()) == T * T * FP32  # the bool mask as a float bias
