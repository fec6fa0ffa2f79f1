"""The grading core, attacked the way students would: every road to a forbidden operation, wrong dtypes,
changed inputs, crashes, loops and memory exhaustion. One toy task (a row softmax) stands for all of them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import math
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib import counting, info_theory
from course_lib.config import ModelConfig
from course_lib.grading._core import Case, Forbid, GradingError, Mistake, NumberOutput, Task
from course_lib.grading._isolate import can_fork


def _softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape, dtype in [((3, 5), torch.float64), ((2, 4, 6), torch.float32), ((7,), torch.float64)]:
        x = (3 * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
        cases.append(Case(f"x of shape {shape} ({dtype})", (x,)))
    return cases


SOFTMAX = Task(
    name="softmax_rows", reference=_softmax, cases=_cases, seed=1,
    mistakes=[Mistake("normalised over the first dimension instead of the last.",
                      lambda x: torch.exp(x) / torch.exp(x).sum(0, keepdim=True))],
    forbid=Forbid(operations=("softmax", "log_softmax", "logsumexp"), modules=(info_theory,)),
    seconds=4.0,
)


def failure(student, task: Task = SOFTMAX) -> str:
    with pytest.raises(GradingError) as info:
        task.check(student)
    return str(info.value)


def test_a_correct_solution_passes():
    SOFTMAX.check(lambda x: torch.exp(x - x.amax(-1, keepdim=True)) / torch.exp(x - x.amax(-1, keepdim=True)).sum(-1, keepdim=True))


# --- shortcuts, by every road ----------------------------------------------------------------------------

_pool = ThreadPoolExecutor(max_workers=1)
_pool.submit(lambda: None).result()  # its worker thread exists before grading starts
_softmax_alias = torch.softmax


def _hide_from_function_mode(x):
    with torch._C.DisableTorchFunction():
        return torch.softmax(x, -1)


def _pop_modes(x):
    from torch.overrides import _pop_mode

    mode = _pop_mode()
    try:
        return torch.softmax(x, -1)
    finally:
        mode.__enter__()


def _remove_profile_hook(x):
    import sys

    sys.setprofile(None)
    return info_theory.softmax(x) if hasattr(info_theory, "softmax") else torch.softmax(x, -1)


def _in_a_new_thread(x):
    box = []
    worker = threading.Thread(target=lambda: box.append(torch.softmax(x, -1)))
    worker.start()
    worker.join()
    return box[0]


_only_later = {"calls": 0}


def _delegates_on_later_cases(x):
    _only_later["calls"] += 1
    if x.dim() == 3:  # only for one shape of input
        return F.softmax(x, dim=-1)
    return _softmax(x)


ROADS = {
    "torch.softmax": lambda x: torch.softmax(x, -1),
    "an alias": lambda x: _softmax_alias(x, -1),
    "a Tensor method": lambda x: x.softmax(-1),
    "torch.nn.functional": lambda x: F.softmax(x, dim=-1),
    "an nn.Module": lambda x: nn.Softmax(dim=-1)(x),
    "torch.special": lambda x: torch.special.softmax(x, -1),
    "functools.partial": lambda x: functools.partial(torch.softmax, dim=-1)(x),
    "map": lambda x: torch.stack(list(map(functools.partial(torch.softmax, dim=-1), x.unbind(0)))),
    "torch.ops.aten": lambda x: torch.ops.aten._softmax(x, -1, False),
    "torch._C": lambda x: torch._C._VariableFunctions.softmax(x, -1),
    "exp of log_softmax": lambda x: torch.log_softmax(x, -1).exp(),
    "logsumexp": lambda x: torch.exp(x - torch.logsumexp(x, -1, keepdim=True)),
    "DisableTorchFunction": _hide_from_function_mode,
    "popping the modes": _pop_modes,
    "removing the profile hook": _remove_profile_hook,
    "a new thread": _in_a_new_thread,
    "only on later cases": _delegates_on_later_cases,
    "course_lib's reference": lambda x: torch.exp(info_theory.log_softmax(x)),
}


@pytest.mark.parametrize("road", list(ROADS), ids=list(ROADS))
def test_every_road_to_the_forbidden_operation_is_refused(road):
    message = failure(ROADS[road])
    assert "softmax" in message or "log_softmax" in message or "logsumexp" in message or "grader" in message, message
    assert ("delegates" in message) or ("not allowed" in message), message


@pytest.mark.skipif(not can_fork(), reason="needs fork: the pool's thread does not exist in the forked check")
def test_a_thread_pool_created_before_grading_is_refused_or_times_out():
    message = failure(lambda x: _pool.submit(torch.softmax, x, -1).result())
    assert "thread" in message or "did not finish" in message, message


def test_the_message_names_what_was_called():
    assert "`softmax`" in failure(lambda x: torch.softmax(x, -1))
    assert "course_lib.info_theory.log_softmax" in failure(lambda x: torch.exp(info_theory.log_softmax(x)))
    assert "thread" in failure(_in_a_new_thread)


def test_the_watch_leaves_no_trace_behind():
    import sys

    before = (sys.getprofile(), torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())
    failure(lambda x: torch.softmax(x, -1))
    SOFTMAX.check(_softmax)
    assert (sys.getprofile(), torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()) == before


# --- counting by formula, not by building --------------------------------------------------------------

def _count_cases(gen):
    return [Case("the tiny config", (ModelConfig(vocab_size=50, d_model=16, n_layers=2, n_heads=4, d_ff=40),))]


COUNT = Task(name="count_params", reference=lambda c: counting.count_params(c).total, cases=_count_cases, seed=0,
             forbid=Forbid(modules=(counting,), models=True), output=NumberOutput("the parameter count", integer=True),
             seconds=8.0)


def _build_and_count(config):
    from course_lib.model import DecoderLM

    return sum(p.numel() for p in DecoderLM(config).parameters())


def _build_on_meta_and_count(config):
    from course_lib.model import DecoderLM

    with torch.device("meta"):
        model = DecoderLM(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("student", [_build_and_count, _build_on_meta_and_count,
                                     lambda c: counting.count_params(c).total])
def test_counting_tasks_refuse_building_a_model(student):
    message = failure(student, COUNT)
    assert "nn.Module" in message or "meta" in message or "course_lib.counting" in message, message


def test_counting_by_formula_passes():
    def by_formula(c):
        attn = 2 * c.d_model * c.n_heads * c.head_dim + 2 * c.d_model * c.n_kv_heads * c.head_dim
        block = attn + 3 * c.d_model * c.d_ff + 2 * c.d_model
        return c.n_layers * block + 2 * c.vocab_size * c.d_model + c.d_model

    COUNT.check(by_formula)
    assert "float" in failure(lambda c: float(by_formula(c)), COUNT)


# --- types, shapes, devices, inputs --------------------------------------------------------------------

def test_a_wrong_dtype_is_named_and_never_cast_away():
    message = failure(lambda x: _softmax(x.double()))
    assert "returned a float64 tensor" in message and "should be float32" in message


def test_integer_outputs_must_stay_integers():
    task = Task(name="argmax_ids", reference=lambda x: x.argmax(-1), cases=_cases, seed=2)
    task.check(lambda x: x.argmax(-1))
    assert "Indices and ids must be integers" in failure(lambda x: x.argmax(-1).float(), task)


def test_changing_an_input_in_place_fails_with_a_message_that_says_so():
    def in_place(x):
        x -= x.amax(-1, keepdim=True)  # looks harmless: softmax is shift-invariant
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True)

    message = failure(in_place)
    assert "changed its input `x` in place" in message


def test_the_reference_sees_pristine_inputs():
    """A mutation that would make the answer right on the mutated input still fails."""

    def mutate_then_answer(x):
        x.mul_(2)
        return _softmax(x)

    assert "in place" in failure(mutate_then_answer)


def test_a_wrong_shape_and_a_catalogued_mistake_are_named():
    assert "normalised over the first dimension" in failure(
        lambda x: torch.exp(x) / torch.exp(x).sum(0, keepdim=True))
    assert "returned shape" in failure(lambda x: _softmax(x).unsqueeze(0))


def test_generic_diagnoses_name_the_shape_of_the_error():
    assert "constant multiple" in failure(lambda x: 2 * _softmax(x))
    assert "opposite sign" in failure(lambda x: -_softmax(x))
    assert "NaN or inf" in failure(lambda x: torch.exp(x * 1e3) / torch.exp(x * 1e3).sum(-1, keepdim=True))


def test_not_implemented_and_errors_in_the_students_code():
    def blank(x):
        raise NotImplementedError()

    assert "not implemented yet" in failure(blank)
    message = failure(lambda x: x @ x)
    assert "raised RuntimeError" in message and "x of shape" in message
    assert "should be a function" in failure(3)


# --- faults contained and bounded ----------------------------------------------------------------------

needs_fork = pytest.mark.skipif(not can_fork(), reason="crash containment needs fork")


@needs_fork
def test_a_process_exit_costs_only_the_task():
    import os

    assert "ended the Python process" in failure(lambda x: os._exit(3))


@needs_fork
def test_a_segfault_costs_only_the_task():
    import ctypes

    assert "crashed the Python process" in failure(lambda x: ctypes.string_at(0))


@needs_fork
def test_memory_exhaustion_costs_only_the_task():
    def hog(x):
        keep = []
        while True:
            keep.append(torch.ones(2**27))  # 512 MB at a time

    message = failure(hog, dataclasses.replace(SOFTMAX, seconds=30))
    assert "ran out of memory" in message, message


def test_an_infinite_loop_costs_at_most_the_tasks_time_limit():
    def loop(x):
        while True:
            pass

    start = time.perf_counter()
    message = failure(loop)
    assert time.perf_counter() - start < SOFTMAX.seconds + 3
    assert "did not finish within" in message


def test_sys_exit_is_reported():
    import sys

    assert "sys.exit" in failure(lambda x: sys.exit(0))


def test_a_check_is_fast():
    start = time.perf_counter()
    SOFTMAX.check(_softmax)
    assert time.perf_counter() - start < 2.0


def test_messages_leak_no_values():
    from grading_helpers import no_values_leak

    for student in (ROADS["torch.softmax"], ROADS["a new thread"], lambda x: 2 * _softmax(x),
                    lambda x: _softmax(x) + 1e-3, lambda x: x @ x):
        no_values_leak(failure(student))


# --- what the core's users reported ----------------------------------------------------------------------

def test_a_meta_tensor_made_by_a_factory_is_refused_for_counting():
    message = failure(lambda c: int(torch.empty(c.d_model, c.d_model, device="meta").numel()) * 0
                      + counting_by_formula(c), COUNT)
    assert "meta device" in message


def counting_by_formula(c):
    attn = 2 * c.d_model * c.n_heads * c.head_dim + 2 * c.d_model * c.n_kv_heads * c.head_dim
    return c.n_layers * (attn + 3 * c.d_model * c.d_ff + 2 * c.d_model) + 2 * c.vocab_size * c.d_model + c.d_model


def test_forbidding_a_module_refuses_its_own_code_only():
    import enum

    import torch.utils.checkpoint as torch_checkpoint

    from course_lib.grading._watch import Watch

    codes = Watch(Forbid(modules=(torch_checkpoint,)))._codes
    assert all(code.co_filename == torch_checkpoint.__file__ for code in codes)
    assert enum.Enum.__new__.__code__ not in codes  # an inherited method defined elsewhere


def test_a_forbidden_use_is_reported_before_the_error_it_caused():
    def delegates_then_crashes(x):
        torch.softmax(x, -1)
        raise ValueError("my own bug")

    assert "delegates" in failure(delegates_then_crashes)


def test_a_prediction_task_names_each_known_wrong_value_and_never_the_right_one():
    from course_lib.grading._predictions import predictions_task

    task = predictions_task(truth=lambda: {"loss": math.log(65), "slopes": [0.5, 0.25], "kl": math.inf},
                            wrong={"loss": [(65.0, "that is the vocabulary size, not its log")],
                                   "kl": [(None, "what does an impossible outcome cost?")]}, seed=0)
    task.check(lambda: {"loss": 4.1744, "slopes": torch.tensor([0.5, 0.25]), "kl": float("inf")})
    assert "vocabulary size" in failure(lambda: {"loss": 65, "slopes": [0.5, 0.25], "kl": math.inf}, task)
    assert "impossible outcome" in failure(lambda: {"loss": 4.1744, "slopes": [0.5, 0.25], "kl": 1e9}, task)
    message = failure(lambda: {"loss": 4.1744, "slopes": [0.5, 0.5], "kl": math.inf}, task)
    assert "`slopes` is not what happens" in message and "0.25" not in message
    assert "list of 2 numbers" in failure(lambda: {"loss": 4.17, "slopes": 0.5, "kl": math.inf}, task)
    assert "still empty" in failure(lambda: {"loss": ..., "slopes": [0.5, 0.25], "kl": math.inf}, task)


def test_a_prediction_task_computes_its_truth_when_first_graded_not_when_defined():
    """Every exercise imports every checker: a truth that trains or builds something must not run then."""
    from course_lib.grading._predictions import predictions_task

    calls = []

    def truth():
        calls.append(1)
        return {"loss": math.log(65)}

    task = predictions_task(truth=truth, wrong={}, seed=0)
    assert calls == []
    task.check(lambda: {"loss": 4.1744})  # (graded in a child process: `calls` stays empty here)
    assert "`loss` is not what happens" in failure(lambda: {"loss": 65.0}, task)
    # a key in `wrong` that the truth does not have is the author's error: no answer passes such a task
    # (so the catalogue's solution tests catch it), and the error is named where it is raised
    typo = predictions_task(truth=truth, wrong={"los": [(65.0, "the vocabulary size")]}, seed=0)
    assert "could not finish" in failure(lambda: {"loss": 4.1744}, typo)
    with pytest.raises(ValueError, match=r"unknown keys \['los'\]"):
        typo.reference()


def test_what_a_task_prepares_is_loaded_once_in_the_grading_process(monkeypatch, capsys):
    """`prepare` runs here, before the task's isolated run and before a self-check of a function of the
    task's name, so that the children inherit what it loaded instead of loading it against their limit."""
    from course_lib.grading import _core, self_check

    calls = []
    task = dataclasses.replace(SOFTMAX, name="softmax_prepared", prepare=lambda: calls.append("prepared"))
    task.check(_softmax)
    assert calls == ["prepared"]

    def softmax_prepared(x):
        return _softmax(x)

    @self_check(softmax_prepared)
    def _():
        assert softmax_prepared(torch.zeros(2)).sum() == 1

    assert calls == ["prepared"] * 2 and "all self-checks passed" in capsys.readouterr().out
    # a name that several tasks share (every exercise has `predictions`) prepares nothing
    monkeypatch.setitem(_core._PREPARE, "softmax_prepared", [lambda: calls.append("a"), lambda: calls.append("b")])
    _core.prepare_for("softmax_prepared")
    assert calls == ["prepared"] * 2


def test_an_optimizer_in_an_exercise_12_check_is_not_imported_in_each_child():
    """Building the first optimizer imports torch._dynamo (about 2 s): exercise 12's tasks that build one
    load it in the grading process, so a loaded machine does not push their checks over the limit."""
    code = ("import sys, course_lib.grading.training as t\n"
            "t.TRAIN_STEP.prepare()\n"
            "print('torch._dynamo' in sys.modules, t.TRAINING_PREDICTIONS.prepare is t.TRAIN_STEP.prepare)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_a_shared_task_name_prepares_nothing_even_when_one_of_its_tasks_prepares():
    """Every exercise has a `predictions` task and only exercise 12's prepares (an optimizer): the
    self-check of chapter 6's `predictions` must not pay two seconds for exercise 12's import."""
    code = ("import sys\nfrom course_lib.grading import _core\n"
            "assert sum(p is not None for p in _core._PREPARE['predictions']) == 1\n"
            "_core.prepare_for('predictions')\n"
            "print(len(_core._PREPARE['predictions']) > 1, 'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def test_importing_the_checkers_is_quick():
    """No checker trains, builds an optimiser or otherwise computes at import (an optimiser alone
    imports torch._dynamo: two seconds of every student's kernel start)."""
    code = "import sys, course_lib.grading; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
