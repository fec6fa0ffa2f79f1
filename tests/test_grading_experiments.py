"""The chapter 12 checkers for experiments that hold, beyond the catalogue (tests/mistakes/ex12.py, tasks 6
and 7): other correct formulations pass, and the checkers refuse what they must (the course's statistics,
the statistics module and SciPy, the course's ablation, inputs changed, a model left changed, wrong
types)."""

import contextlib
import functools
import math
import statistics

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_lib.experiments import stats
from course_lib.grading import check_ablated_loss, check_paired_interval
from course_lib.grading import experiments as grading_experiments
from course_lib.grading._core import Case, Forbid, NumberOutput, Task
from grading_helpers import expect_failure, no_values_leak


# --- Task 6 ----------------------------------------------------------------------------------------------

def interval_by_numpy(a, b, confidence=0.95):
    """numpy's sample standard deviation (ddof=1); numpy scalars and a numpy bool are accepted."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = d.size
    half = stats.t_quantile(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / np.sqrt(n)
    low, high = d.mean() - half, d.mean() + half
    return low, high, (low > 0) | (high < 0)


def interval_by_torch(a, b, confidence=0.95):
    """The differences as a float64 tensor, the ends read with .item(), returned as a list."""
    d = torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)
    se = d.std(unbiased=True) / math.sqrt(len(d))
    q = stats.t_quantile((1 + confidence) / 2, len(d) - 1)
    low, high = (d.mean() - q * se).item(), (d.mean() + q * se).item()
    return [low, high, not (low <= 0 <= high)]


def test_other_correct_intervals_pass():
    check_paired_interval(interval_by_numpy)
    check_paired_interval(interval_by_torch)


def test_the_course_statistics_are_refused_by_any_road():
    def by_summarize(a, b, confidence=0.95):
        from course_lib.experiments import summarize
        out = summarize([x - y for x, y in zip(a, b)], confidence)
        return out["low"], out["high"], out["low"] > 0 or out["high"] < 0

    expect_failure(check_paired_interval, by_summarize, "course_lib.experiments.stats.summarize",
                   no_leak=no_values_leak)

    def by_partial(a, b, confidence=0.95):
        paired = functools.partial(stats.paired_difference, confidence=confidence)
        out = paired(a, b)
        return out["low"], out["high"], out["found"]

    expect_failure(check_paired_interval, by_partial, "course_lib.experiments.stats.paired_difference",
                   no_leak=no_values_leak)


def test_the_statistics_module_is_refused():
    spread = statistics.stdev  # an alias made before the call

    def by_statistics(a, b, confidence=0.95):
        d = [x - y for x, y in zip(a, b)]
        half = stats.t_quantile(0.5 + confidence / 2, len(d) - 1) * spread(d) / math.sqrt(len(d))
        m = sum(d) / len(d)
        return m - half, m + half, m - half > 0 or m + half < 0

    message = expect_failure(check_paired_interval, by_statistics, "which does the work this task asks you to do",
                             no_leak=no_values_leak)
    assert "statistics" in message


def test_scipy_is_refused_without_being_imported():
    """SciPy is not installed here: a function whose module is scipy.stats stands in for it."""
    fake = {"__name__": "scipy.stats._stats_py"}
    exec("def ttest_rel(a, b):\n    return [x - y for x, y in zip(a, b)]\n", fake)
    ttest_rel = fake["ttest_rel"]

    def by_scipy(a, b, confidence=0.95):
        d = ttest_rel(a, b)
        return interval_by_numpy(d, [0.0] * len(d), confidence)

    message = expect_failure(check_paired_interval, by_scipy, "which does the work this task asks you to do",
                             no_leak=no_values_leak)
    assert "scipy.stats" in message


def test_a_list_sorted_in_place_is_refused():
    def sorting(a, b, confidence=0.95):
        a.sort()  # "to look at it": it breaks the pairs of the caller too
        return interval_by_numpy(a, b, confidence)

    expect_failure(check_paired_interval, sorting, "changed its input `a` in place", no_leak=no_values_leak)


@pytest.mark.parametrize("found, words", [(lambda low, high: int(low > 0 or high < 0), "(True or False)"),
                                          (lambda low, high: torch.tensor(low > 0 or high < 0), "bool(...)")])
def test_found_must_be_a_bool(found, words):
    def answer(a, b, confidence=0.95):
        low, high, _ = interval_by_torch(a, b, confidence)
        return low, high, found(low, high)

    expect_failure(check_paired_interval, answer, "`paired_interval`'s found returned", words,
                   no_leak=no_values_leak)


def test_the_ends_must_be_numbers_and_the_answer_a_triple():
    def tensors(a, b, confidence=0.95):
        low, high, found = interval_by_torch(a, b, confidence)
        return torch.tensor(low), torch.tensor(high), found

    expect_failure(check_paired_interval, tensors, "`paired_interval`'s low returned a tensor",
                   no_leak=no_values_leak)
    expect_failure(check_paired_interval, lambda a, b, confidence=0.95: interval_by_torch(a, b, confidence)[:2],
                   "it should return a tuple of 3", no_leak=no_values_leak)


def test_the_interval_cases_cover_what_the_mistakes_need():
    """Differences found in both directions and not found; overlapping rows with a paired difference (the
    trap of comparing by overlap); two seeds; confidence levels other than 95 %; identical rows."""
    task = grading_experiments.PAIRED_INTERVAL
    cases = task.cases(torch.Generator().manual_seed(task.seed))
    found, overlap_hides, levels, sizes = set(), False, set(), set()
    for case in cases:
        a, b = case.args
        out = stats.paired_difference(a, b, case.kwargs["confidence"])
        found.add((out["found"], out["low"] > 0))
        ra, rb = stats.summarize(a, case.kwargs["confidence"]), stats.summarize(b, case.kwargs["confidence"])
        overlap_hides |= out["found"] and not (ra["low"] > rb["high"] or rb["low"] > ra["high"])
        levels.add(case.kwargs["confidence"])
        sizes.add(len(a))
    assert {(True, True), (True, False), (False, False)} <= found
    assert overlap_hides and 2 in sizes and len(levels) >= 3
    first = cases[0].args
    assert not stats.paired_difference(*first)["found"], "the first case has no difference (see the mistakes)"


# --- Task 7 ----------------------------------------------------------------------------------------------

def loss_of(logits, ids):
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)  # float64, by hand
    return -logp.gather(-1, ids[:, 1:, None]).mean().item()


def ablate_by_columns(model, ids, heads):
    """W_o's columns zeroed and restored in a finally block."""
    saved = {}
    try:
        with torch.no_grad():
            for layer, h in heads:
                attn = model.blocks[layer].attn
                w = attn.w_o.weight
                saved.setdefault(layer, w.clone())
                w[:, h * attn.head_dim:(h + 1) * attn.head_dim] = 0
            logits = model(ids)
    finally:
        with torch.no_grad():
            for layer, w in saved.items():
                model.blocks[layer].attn.w_o.weight.copy_(w)
    return loss_of(logits, ids)


def ablate_in_place(model, ids, heads):
    """One pre-hook per head that zeroes the features in the hook's input itself and returns None."""
    handles = []
    with contextlib.ExitStack() as stack:
        for layer, h in heads:
            attn = model.blocks[layer].attn

            def hook(module, args, h=h, d=attn.head_dim):
                args[0][..., h * d:(h + 1) * d] = 0

            handle = attn.w_o.register_forward_pre_hook(hook)
            stack.callback(handle.remove)
            handles.append(handle)
        with torch.no_grad():
            logits = model(ids)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item()


def test_other_correct_ablations_pass():
    check_ablated_loss(ablate_by_columns)
    check_ablated_loss(ablate_in_place)


def test_the_course_ablation_is_refused_by_any_road():
    from course_lib import heads as course_heads

    def by_exit_stack(model, ids, heads):
        with contextlib.ExitStack() as stack, torch.no_grad():
            stack.enter_context(course_heads.ablate_heads(model, heads, mode="zero"))
            logits = model(ids)
        return loss_of(logits, ids)

    expect_failure(check_ablated_loss, by_exit_stack, "course_lib.heads.ablate_heads", no_leak=no_values_leak)

    def by_generator(model, ids, heads):
        gen = course_heads.ablate_heads.__wrapped__(model, heads)  # the generator under the decorator
        next(gen)
        try:
            with torch.no_grad():
                logits = model(ids)
        finally:
            gen.close()
        return loss_of(logits, ids)

    expect_failure(check_ablated_loss, by_generator, "course_lib.heads.ablate_heads", no_leak=no_values_leak)


def test_a_context_manager_of_ones_own_is_not_mistaken_for_the_course_one():
    @contextlib.contextmanager
    def switched_off(model, heads):
        with contextlib.ExitStack() as stack:
            for layer, h in heads:
                attn = model.blocks[layer].attn
                handle = attn.w_o.register_forward_pre_hook(
                    lambda m, args, h=h, d=attn.head_dim: (grading_experiments._zeroed(args[0], h, d),))
                stack.callback(handle.remove)
            yield

    def mine(model, ids, heads):
        with switched_off(model, heads), torch.no_grad():
            logits = model(ids)
        return loss_of(logits, ids)

    check_ablated_loss(mine)


def test_a_model_left_in_training_mode_or_patched_is_refused():
    def training_mode(model, ids, heads):
        loss = ablate_by_columns(model, ids, heads)
        model.train()
        return loss

    expect_failure(check_ablated_loss, training_mode, "left the model in training mode", no_leak=no_values_leak)

    def patched(model, ids, heads):
        loss = ablate_by_columns(model, ids, heads)
        block = model.blocks[0]
        block.forward = lambda x, *args, **kwargs: x  # "switch the block off", never undone
        return loss

    expect_failure(check_ablated_loss, patched, "left the model computing different outputs",
                   no_leak=no_values_leak)


def test_a_global_hook_left_behind_is_refused():
    left = []  # removed by the test, in case grading runs in this process (COURSE_GRADING_IN_PROCESS=1)

    def global_hook(model, ids, heads):
        from torch.nn.modules.module import register_module_forward_hook
        left.append(register_module_forward_hook(lambda module, args, out: None))
        return ablate_by_columns(model, ids, heads)

    try:
        expect_failure(check_ablated_loss, global_hook, "left a hook registered", no_leak=no_values_leak)
    finally:
        for handle in left:
            handle.remove()


def test_a_heads_list_sorted_in_place_is_refused():
    def sorting(model, ids, heads):
        heads.sort()
        return ablate_by_columns(model, ids, heads)

    expect_failure(check_ablated_loss, sorting, "changed its input `heads` in place", no_leak=no_values_leak)


def test_the_ablation_cases_cover_what_the_mistakes_need():
    """Multi-head, grouped-query and multi-query models; head_dim other than d_model / n_heads; biases;
    several heads in one block and across blocks; an empty list last; every model in eval mode."""
    task = grading_experiments.ABLATED_LOSS
    cases = task.cases(torch.Generator().manual_seed(task.seed))
    configs = [case.args[0].config for case in cases]
    assert all(not case.args[0].training for case in cases)
    assert {c.n_kv_heads == c.n_heads for c in configs} == {True, False}
    assert any(c.n_kv_heads == 1 for c in configs) and any(c.bias for c in configs)
    assert any(c.head_dim * c.n_heads != c.d_model for c in configs)
    layers = [[layer for layer, _ in case.args[2]] for case in cases]
    assert any(len(set(ls)) < len(ls) for ls in layers) and any(len(set(ls)) > 1 for ls in layers)
    assert cases[-1].args[2] == [] and all(case.args[2] for case in cases[:-1])


# --- the watch: packages forbidden by name -------------------------------------------------------------------

def test_a_forbidden_package_is_recognised_by_module_name():
    fake = {"__name__": "somepkg.sub"}
    exec("def helper(x):\n    return x * 2.0\n", fake)
    other = {"__name__": "somepkgother"}  # a prefix alone is not the package
    exec("def helper(x):\n    return x * 2.0\n", other)
    cases = lambda gen: [Case("a number", (1.5,))]  # noqa: E731
    task = Task(name="double_it", reference=lambda x: 2 * x, cases=cases, seed=0,
                output=NumberOutput("twice x"), forbid=Forbid(packages=("somepkg",)))
    with pytest.raises(AssertionError, match="somepkg.sub.helper"):
        task.check(fake["helper"])
    task.check(other["helper"])
