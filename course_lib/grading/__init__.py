"""Checkers called by the exercises' hidden tests, one module per chapter (chapter 12's in two: ``training``
and ``experiments``; chapter 13's is ``speedrun``).

Each ``check_<task>(student_function)`` returns None when the function agrees with the reference on
many random and edge cases, and otherwise raises ``AssertionError`` (a :class:`GradingError`) whose
message names the likely mistake without revealing reference values. A function that delegates the
operation it is meant to implement (to course_lib or to torch's own version) fails.

Importing this package inside a notebook makes grading failures display as their message alone
(see ``_display``), so feedback never shows a hidden-test cell's lines.
"""

from . import _display
from ._core import GradingError
from ._selfcheck import self_check
from .attention import (check_attention_backward, check_attention_predictions, check_gqa_forward,
                        check_sliding_window_attention)
from .block import (check_block_predictions, check_packed_block, check_pre_norm_block_backward,
                    check_res_post_norm_block_backward)
from .checkpointing import (check_checkpointed, check_gpt_block_saved_bytes, check_memory_predictions,
                            check_saved_bytes)
from .counting import (check_count_params, check_counting_predictions, check_moe_params,
                       check_window_core_flops)
from .experiments import check_ablated_loss, check_paired_interval
from .ffn import check_ffn_predictions, check_geglu_backward, check_llama_ffn, check_top_k_swiglu
from .info_theory import (check_entropy, check_info_predictions, check_label_smoothed_cross_entropy,
                          check_logsumexp, check_soft_cross_entropy_grad)
from .kv_cache import (check_attend_with_cache, check_attend_with_window, check_kv_cache_bytes,
                       check_kv_cache_class, check_kv_predictions)
from .model import (check_lm_forward, check_next_token_probs, check_sample_generate,
                    check_tied_embedding_grad)
from .norms import check_layer_norm, check_merge_moments, check_norm_predictions, check_rms_norm_backward
from .positional import (check_apply_rope, check_position_predictions, check_sinusoidal_encoding,
                         check_sinusoidal_shift_matrix)
from .residual import (check_deep_norm_residual, check_pre_norm_residual_backward, check_residual_predictions,
                       check_residual_scaled_init)
from .speedrun import (check_lr_wsd, check_muon_step, check_newton_schulz, check_qk_norm_attention, check_softcap,
                       check_speedrun_predictions)
from .training import (check_evaluate_loss, check_learning_rate, check_sampling_probs, check_train_step,
                       check_training_predictions)

__all__ = ["GradingError", "self_check", "check_entropy", "check_info_predictions", "check_logsumexp",
           "check_label_smoothed_cross_entropy", "check_soft_cross_entropy_grad",
           "check_sliding_window_attention", "check_gqa_forward", "check_attention_backward",
           "check_attention_predictions",
           "check_llama_ffn", "check_top_k_swiglu", "check_geglu_backward", "check_ffn_predictions",
           "check_layer_norm", "check_rms_norm_backward", "check_merge_moments", "check_norm_predictions",
           "check_sinusoidal_encoding", "check_sinusoidal_shift_matrix", "check_apply_rope",
           "check_position_predictions",
           "check_packed_block", "check_pre_norm_block_backward", "check_res_post_norm_block_backward",
           "check_block_predictions",
           "check_count_params", "check_moe_params", "check_window_core_flops", "check_counting_predictions",
           "check_lm_forward", "check_next_token_probs", "check_sample_generate", "check_tied_embedding_grad",
           "check_saved_bytes", "check_gpt_block_saved_bytes", "check_checkpointed", "check_memory_predictions",
           "check_deep_norm_residual", "check_pre_norm_residual_backward", "check_residual_scaled_init",
           "check_residual_predictions",
           "check_kv_predictions", "check_kv_cache_bytes", "check_attend_with_cache", "check_kv_cache_class",
           "check_attend_with_window",
           "check_train_step", "check_learning_rate", "check_sampling_probs", "check_evaluate_loss",
           "check_training_predictions", "check_paired_interval", "check_ablated_loss",
           "check_newton_schulz", "check_muon_step", "check_qk_norm_attention", "check_softcap", "check_lr_wsd",
           "check_speedrun_predictions"]

_display.install()
