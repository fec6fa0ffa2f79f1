"""The chapter 8 checkers beyond the catalogue (tests/mistakes/ex08.py): other correct formulations
pass, counts must be ints, and building or measuring a model is refused however it is done."""

import math

import pytest
import torch

import course_lib
from course_lib.grading import (GradingError, check_count_params, check_counting_predictions,
                                check_moe_params, check_window_core_flops)
from grading_helpers import no_values_leak


def count_by_shapes(config):  # list every tensor's shape, then multiply out
    d, q, kv, f = config.d_model, config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim, config.d_ff
    shapes = [(q, d), (kv, d), (kv, d), (d, q), (f, d), (f, d), (d, f), (d,), (d,)] * config.n_layers
    shapes += [(config.vocab_size, d), (d,)] + ([] if config.tie_embeddings else [(config.vocab_size, d)])
    return sum(math.prod(shape) for shape in shapes)


def moe_from_the_dense_count(config, n_experts, top_k):  # dense count, minus the FFNs, plus experts
    dense = count_by_shapes(config)
    ffn = 3 * config.d_model * config.d_ff
    base = dense - config.n_layers * ffn + config.n_layers * config.d_model * n_experts
    return base + config.n_layers * n_experts * ffn, base + config.n_layers * top_k * ffn


def window_by_loop(config, seq_len, window=None):  # count the mask's entries row by row
    kept = sum(i + 1 if window is None else min(i + 1, window) for i in range(seq_len))
    return config.n_heads * kept * (2 * config.head_dim + 5 + 2 * config.head_dim)


def test_other_correct_formulations_pass():
    check_count_params(count_by_shapes)
    check_moe_params(moe_from_the_dense_count)
    check_moe_params(lambda c, e, k: list(moe_from_the_dense_count(c, e, k)))  # a list is a sequence too
    check_window_core_flops(window_by_loop)


def test_predictions_pass_within_each_keys_tolerance_and_wrong_types_are_named():
    close = {"llama_2_13b_params_b": 13.016, "kv_cache_gib": 4.02, "max_train_params_b": 4.97,
             "train_flops_e21": 81.0}
    check_counting_predictions(lambda: close)
    with pytest.raises(GradingError, match="llama_2_13b_params_b"):  # 13.0 is the name, not the count
        check_counting_predictions(lambda: {**close, "llama_2_13b_params_b": 13.0})
    with pytest.raises(GradingError, match="`kv_cache_gib` is not what happens"):  # unrecognised: generic, no value
        check_counting_predictions(lambda: {**close, "kv_cache_gib": 3.0})
    with pytest.raises(GradingError, match="should return a dict"):
        check_counting_predictions(lambda: [13.0, 4.0, 5.0, 80.9])
    with pytest.raises(GradingError, match="still empty"):
        check_counting_predictions(lambda: {**close, "train_flops_e21": ...})


def test_counts_must_be_python_ints():
    with pytest.raises(GradingError, match="as an int") as info:
        check_count_params(lambda c: float(count_by_shapes(c)))
    no_values_leak(str(info.value))
    with pytest.raises(GradingError, match="Python number"):
        check_count_params(lambda c: torch.tensor(count_by_shapes(c)))
    with pytest.raises(GradingError, match="tuple of 2"):
        check_moe_params(lambda c, e, k: moe_from_the_dense_count(c, e, k)[0])


def test_building_or_measuring_a_model_is_refused():
    from torch.utils.flop_counter import FlopCounterMode

    from course_lib.model import DecoderLM

    with torch.device("meta"):  # the first model built on meta imports torch._dynamo: do it unwatched
        DecoderLM(course_lib.config.PRESETS["tiny"])

    def on_meta(config):
        with torch.device("meta"):
            model = DecoderLM(config)
        return sum(p.numel() for p in model.parameters())

    with pytest.raises(GradingError, match="building an nn.Module"):
        check_count_params(on_meta)

    def by_flop_counter(config, seq_len, window=None):
        with FlopCounterMode(display=False):
            pass
        return window_by_loop(config, seq_len, window)

    with pytest.raises(GradingError, match="FlopCounterMode"):
        check_window_core_flops(by_flop_counter)


def test_calling_course_lib_counting_is_refused():
    with pytest.raises(GradingError, match="course_lib.counting.moe_params"):
        check_moe_params(course_lib.counting.moe_params)
    with pytest.raises(GradingError, match="course_lib.counting.attention_core_flops"):
        check_window_core_flops(lambda c, t, window=None: course_lib.counting.attention_core_flops(c, t, window=window))
    with pytest.raises(GradingError, match="course_lib.counting.kv_cache_bytes"):
        check_counting_predictions(lambda: {
            "llama_2_13b_params_b": 13.016, "max_train_params_b": 5.0, "train_flops_e21": 80.9,
            "kv_cache_gib": course_lib.counting.kv_cache_bytes(course_lib.config.PRESETS["llama-3-8b"], 8192, 4) / 2**30})


def test_unrecognised_wrong_answers_get_a_hint_without_values():
    with pytest.raises(GradingError, match="List every tensor") as info:
        check_count_params(lambda c: count_by_shapes(c) + 1)
    no_values_leak(str(info.value))
    with pytest.raises(GradingError, match="Draw the mask"):
        check_window_core_flops(lambda c, t, window=None: window_by_loop(c, t, window) + 2)


def test_each_task_of_the_catalogue_is_named_nine_times_in_ten():
    """tests/test_mistake_catalogue.py checks the share for the whole assignment; here, task by task."""
    from collections import Counter

    from mistakes import ex08

    total, named = Counter(w.answer for w in ex08.WRONG), Counter(w.answer for w in ex08.WRONG if w.expect)
    assert all(named[a] >= 0.9 * total[a] for a in total), (named, total)


# --- mistakes nobody catalogued are named from what the count gets wrong ----------------------------------

def test_a_count_with_two_unlisted_slips_names_both():
    def head_bias_no_final_norm(config):  # an LM-head bias, and the final norm forgotten
        return count_by_shapes(config) + config.vocab_size - config.d_model

    message = expect_named(check_count_params, head_bias_no_final_norm)
    assert "vector of vocab_size" in message and "final norm is missing" in message, message


def test_an_active_count_with_an_extra_expert_is_named():
    def shared_expert(config, n_experts, top_k):  # a 'shared' expert that the model does not have
        total, active = moe_from_the_dense_count(config, n_experts, top_k)
        return total, active + 3 * config.n_layers * config.d_model * config.d_ff

    assert "the active count has one expert too many per block" in expect_named(check_moe_params, shared_expert)


def test_a_window_two_keys_too_wide_is_named():
    def wider(config, seq_len, window=None):
        W = seq_len if window is None else window + 2
        kept = sum(min(i + 1, W) for i in range(seq_len))
        return config.n_heads * kept * (4 * config.head_dim + 5)

    assert "past the window's edge a number of keys other than W" in expect_named(check_window_core_flops, wider)


def expect_named(checker, student) -> str:
    with pytest.raises(GradingError) as info:
        checker(student)
    message = str(info.value)
    assert "Likely mistake" in message, message
    no_values_leak(message)
    return message
