"""Seeing what a student's function really executes, so that a task which teaches an operation can refuse
a solution that delegates it.

Three layers watch one call, and a solution is refused if any of them sees a forbidden thing:

1. **torch's Python API** — a ``TorchFunctionMode`` sees every call into torch from Python, however it
   was reached: ``F.softmax``, ``torch.softmax``, ``x.softmax``, ``torch.special.softmax``,
   ``torch.ops.aten._softmax``, ``torch._C._nn.gelu``, through an alias, ``functools.partial`` or ``map``.
   It sees composite operations (``rms_norm``, ``scaled_dot_product_attention``) before they decompose.
2. **the aten operators actually executed** — a ``TorchDispatchMode`` sees each operator that runs,
   whatever Python did to get there, including code that switched the first layer off.
3. **Python calls** — a ``sys.setprofile`` hook sees calls to the course's reference functions (matched
   by code object, so aliases and bound methods are caught) and the escape hatches a solution could use
   to leave the other two layers' sight: starting threads or processes, replacing the hook, popping the
   modes. After the call, the watch checks that its layers are still in place.

What is forbidden is named by *operation* (``"softmax"``), not by road: the table :data:`OPERATIONS`
lists each operation's names in torch's API and among aten operators, once. The watch is defence in
depth, not a sandbox: grading also runs the student's code in a separate process (``_isolate``).
"""

from __future__ import annotations

import _thread
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.utils.flop_counter
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OPERATIONS", "Forbid", "Watch", "paused"]

# Each operation a task may forbid, with the names it has in torch's Python API (function and method
# names, torch.special and torch.nn.functional included) and among aten operators. A name here matches
# a call of that name at either level.
OPERATIONS: dict[str, frozenset[str]] = {
    name: frozenset(aliases) for name, aliases in {
        "softmax": ["softmax", "_softmax", "special_softmax", "softmin", "_safe_softmax", "Softmax"],
        "log_softmax": ["log_softmax", "_log_softmax", "special_log_softmax", "LogSoftmax"],
        "logsumexp": ["logsumexp", "special_logsumexp"],
        "cross_entropy": ["cross_entropy", "cross_entropy_loss", "nll_loss", "nll_loss_forward", "nll_loss2d",
                          "nll_loss2d_forward", "nll_loss_nd", "binary_cross_entropy",
                          "binary_cross_entropy_with_logits", "poisson_nll_loss"],
        "kl_div": ["kl_div"],
        "entropy": ["entr", "special_entr"],
        "layer_norm": ["layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm",
                       "batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                       "_native_batch_norm_legit_no_training", "_batch_norm_impl_index",
                       "_batch_norm_with_update", "_batch_norm_no_update", "local_response_norm"],
        "rms_norm": ["rms_norm", "_fused_rms_norm", "normalize"],
        "silu": ["silu", "silu_", "SiLU"],
        "gelu": ["gelu", "gelu_", "GELU"],
        "attention": ["scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                      "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                      "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                      "_scaled_dot_product_fused_attention_overrideable", "multi_head_attention_forward",
                      "_native_multi_head_attention", "_transformer_encoder_layer_fwd"],
        "clip_grad_norm": ["clip_grad_norm_", "clip_grad_norm", "_foreach_norm"],
    }.items()
}

# Builtins that leave the watch's sight (other threads, other processes, the hook or modes replaced).
_ESCAPES: dict[object, str] = {
    _thread.start_new_thread: "a new thread (work in other threads is not watched)",
    os.fork: "a new process (os.fork)",
    os.system: "a shell command (os.system)",
    sys.setprofile: "sys.setprofile, which replaces the grader's watcher",
    sys.settrace: "sys.settrace",
    torch._C._pop_torch_function_stack: "torch's function-mode stack (popping the grader's watcher)",
    torch._C._pop_torch_dispatch_stack: "torch's dispatch-mode stack (popping the grader's watcher)",
}
# Popping a mode is also what torch's own Python-level handling of a torch call does, on the way to the
# mode's handler: such a pop is legitimate when it happens inside torch.overrides.handle_torch_function.
_MODE_POPS = {id(torch._C._pop_torch_function_stack), id(torch._C._pop_torch_dispatch_stack)}
_TORCH_HANDLER_CODE = torch.overrides.handle_torch_function.__code__
for _name in ("forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "kill", "killpg", "abort"):
    if hasattr(os, _name):
        _ESCAPES[getattr(os, _name)] = f"os.{_name}"
if hasattr(_thread, "start_joinable_thread"):  # Python 3.13
    _ESCAPES[_thread.start_joinable_thread] = "a new thread (work in other threads is not watched)"
try:
    import _posixsubprocess

    _ESCAPES[_posixsubprocess.fork_exec] = "a subprocess"
except ImportError:  # not on this platform
    pass

# Automatic differentiation, for tasks that ask for a derivative by hand: the entry points of reverse
# mode (the autograd engine is also seen running, below), forward mode and torch.func's transforms.
_AUTOGRAD_BUILTINS: dict[object, str] = {
    torch._C._functorch._grad_increment_nesting: "torch.func (grad, vjp, jacrev)",
    torch._C._functorch._jvp_increment_nesting: "torch.func (jvp, jacfwd)",
    torch._C._enter_dual_level: "forward-mode autograd (torch.autograd.forward_ad)",
}
_AUTOGRAD_FUNCTIONS: list[tuple[Callable, str]] = [
    (torch.autograd.grad, "torch.autograd.grad"),
    (torch.autograd.backward, "torch.autograd.backward"),
    (torch.Tensor.backward, "Tensor.backward"),
    (torch.autograd.functional.jacobian, "torch.autograd.functional.jacobian"),
    (torch.autograd.functional.hessian, "torch.autograd.functional.hessian"),
    (torch.autograd.functional.vjp, "torch.autograd.functional.vjp"),
    (torch.autograd.functional.jvp, "torch.autograd.functional.jvp"),
]

# Building or measuring a model, for tasks that ask for a count or a size by formula.
_MODEL_FUNCTIONS: list[tuple[Callable, str]] = [
    (torch.nn.Module.__init__, "building an nn.Module (a model or a layer)"),
    (torch.autograd.graph.saved_tensors_hooks.__init__, "saved-tensor hooks (measuring instead of counting)"),
    (torch.utils.flop_counter.FlopCounterMode.__init__, "torch.utils.flop_counter.FlopCounterMode"),
]


@dataclass(frozen=True)
class Forbid:
    """What one task's solution may not use.

    ``operations``: names from :data:`OPERATIONS`. ``modules``: every function and method defined in
    these modules, a package's submodules included (the course's references for the task's concept).
    ``functions``: more Python functions, each with the name a message uses. ``packages``: names of
    Python packages or modules (``"scipy"``, ``"statistics"``) none of whose code may run, matched by the
    module a called function belongs to, so that a library the course does not install (or too large to
    list) is forbidden without importing it. ``autograd``: derivatives
    by automatic differentiation. ``models``: building an ``nn.Module``, tensors on the meta device,
    saved-tensor hooks or FLOP counters (for tasks that count by formula).
    """

    operations: tuple[str, ...] = ()
    modules: tuple[types.ModuleType, ...] = ()
    functions: tuple[tuple[Callable, str], ...] = ()
    packages: tuple[str, ...] = ()
    autograd: bool = False
    models: bool = False

    def __post_init__(self) -> None:
        unknown = [op for op in self.operations if op not in OPERATIONS]
        if unknown:
            raise ValueError(f"unknown operations {unknown}; known: {sorted(OPERATIONS)}")


def _code_objects(obj, seen: set[int]) -> Iterable[types.CodeType]:
    """The code objects a call of ``obj`` (a function, method, property or class) would run first."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for part in (obj.fget, obj.fset):
            if part is not None:
                yield from _code_objects(part, seen)
        return
    if inspect.isclass(obj):
        for value in vars(obj).values():
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property)):
                yield from _code_objects(value, seen)
        return
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        yield from _code_objects(wrapped, seen)
    code = getattr(obj, "__code__", None)
    if code is not None:
        yield code


def _package_parts(module: types.ModuleType) -> list[types.ModuleType]:
    """The module itself and, for a package (``course_lib.training``), its imported submodules, nested
    ones included, in order of name."""
    parts = [module]
    if hasattr(module, "__path__"):
        prefix = module.__name__ + "."
        subs = {v.__name__: v for v in vars(module).values()
                if isinstance(v, types.ModuleType) and v.__name__.startswith(prefix)}
        for name in sorted(subs):
            parts += _package_parts(subs[name])
    return parts


def _module_members(module: types.ModuleType) -> list[tuple[object, str, str | None]]:
    """The functions and classes a module defines (not the ones it imports), with their public names and
    the file that defines them. A package counts as one module: its submodules' members are named as
    the package's (``course_lib.training.lr_at``, defined in ``course_lib/training/schedule.py``)."""
    members = []
    for part in _package_parts(module):
        filename = getattr(part, "__file__", None)
        for name, value in vars(part).items():
            defined_here = getattr(value, "__module__", None) == part.__name__
            if (inspect.isfunction(value) or inspect.isclass(value)) and defined_here:
                members.append((value, f"{module.__name__}.{name}", filename))
    return members


def _module_codes(module: types.ModuleType, seen: set[int]) -> list[tuple[types.CodeType, str]]:
    """The code objects of a module's own functions and methods: only those whose source is the file that
    defines them, so that a shared decorator's wrapper or a generic inherited method (an Enum's __new__)
    defined elsewhere is not mistaken for the module's work."""
    found = []
    for obj, name, filename in _module_members(module):
        for code in _code_objects(obj, seen):
            if filename is None or code.co_filename == filename:
                found.append((code, name))
    return found


def _op_name(func) -> str:
    """The name an operation is known by at its level: 'softmax' for torch.softmax and Tensor.softmax,
    '_softmax' for aten._softmax.default."""
    packet = getattr(func, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(func, "__name__", "")


class Watch:
    """Watch one call of a student's function; ``offence`` is a description of the first forbidden thing
    seen (or None). Use as a context manager around the call."""

    def __init__(self, forbid: Forbid):
        self.offence: str | None = None
        self.escape = False  # whether the offence is a way out of the watch rather than a delegation
        self._paused = 0
        self._names: dict[str, str] = {}  # torch / aten name → the operation it belongs to
        for op in forbid.operations:
            for alias in OPERATIONS[op]:
                self._names[alias] = op
        self._codes: dict[types.CodeType, str] = {}
        seen: set[int] = set()
        targets = list(forbid.functions)
        for module in forbid.modules:
            for code, name in _module_codes(module, seen):
                self._codes.setdefault(code, name)
        if forbid.autograd:
            targets += _AUTOGRAD_FUNCTIONS
        if forbid.models:
            targets += _MODEL_FUNCTIONS
        for obj, name in targets:
            for code in _code_objects(obj, seen):
                self._codes.setdefault(code, name)
        self._builtins: dict[int, str] = {id(b): f"{n}" for b, n in _ESCAPES.items()}
        if forbid.autograd:
            self._builtins.update({id(b): n for b, n in _AUTOGRAD_BUILTINS.items()})
        self._escape_ids = {id(b) for b in _ESCAPES}
        self._packages = tuple(forbid.packages)
        self._autograd = forbid.autograd
        self._models = forbid.models
        self._function_mode = _FunctionMode(self)
        self._dispatch_mode = _DispatchMode(self)
        self._previous_profile = None

    # --- recording -------------------------------------------------------------------------------

    def _record(self, what: str) -> None:
        """A forbidden operation or function: the work the task asks for, delegated."""
        if self.offence is None and not self._paused:
            self.offence = what
            self.escape = False

    def _record_escape(self, what: str) -> None:
        """A way out of the watch's sight (threads, processes, hooks replaced)."""
        if self.offence is None and not self._paused:
            self.offence = what
            self.escape = True

    def _torch_call(self, func) -> None:
        if self._paused:
            return
        name = _op_name(func)
        op = self._names.get(name)
        if op is not None:
            self._record(f"torch's `{name}` (the {op} operation)")

    def _aten_call(self, func, args, kwargs) -> None:
        if self._paused:
            return
        if torch._C._is_torch_function_all_disabled():
            self._record_escape("torch._C.DisableTorchFunction, which hides torch calls from the grader")
        name = _op_name(func)
        op = self._names.get(name)
        if op is not None:
            self._record(f"the aten operator `{name}` (the {op} operation)")
        if self._autograd and torch._C._current_graph_task_id() != -1:
            self._record("autograd (a backward pass ran)")
        if self._models:
            for value in list(args) + list((kwargs or {}).values()):
                if isinstance(value, torch.Tensor) and value.device.type == "meta":
                    self._record("tensors on the meta device (building a model to read its sizes)")
                    break

    def _profile(self, frame, event, arg) -> None:
        if self._paused or self.offence is not None:
            return
        if event == "call":
            name = self._codes.get(frame.f_code)
            if name is None and self._packages:
                name = _in_packages(frame, self._packages)
            if name is not None:
                self._record(f"`{name}`")
        elif event == "c_call":
            name = self._builtins.get(id(arg))
            if name is None:
                return
            if id(arg) in _MODE_POPS and _inside_torch_handling(frame):
                return
            if id(arg) in self._escape_ids:
                self._record_escape(name)
            else:
                self._record(f"`{name}`")

    # --- installing ------------------------------------------------------------------------------

    def __enter__(self) -> Watch:
        self._previous_profile = sys.getprofile()
        self._function_mode.__enter__()
        self._dispatch_mode.__enter__()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        intact = sys.getprofile() == self._profile
        if not intact:
            self._record_escape("a replacement for the grader's profile hook")
        self._paused += 1  # from here on, the calls are the watch's own
        sys.setprofile(self._previous_profile)
        for mode, length, at in ((self._dispatch_mode, torch._C._len_torch_dispatch_stack,
                                  torch._C._get_dispatch_stack_at),
                                 (self._function_mode, torch._C._len_torch_function_stack,
                                  torch._C._get_function_stack_at)):
            n = length()
            if n == 0 or at(n - 1) is not mode:
                self._paused -= 1
                self._record_escape("code that removed the grader's torch modes")
                self._paused += 1
                _remove_mode(mode, length, at)
            else:
                mode.__exit__(None, None, None)
        self._paused -= 1

    @contextmanager
    def pause(self):
        """Run the checker's own objects (given to the student) without watching them."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1


def _in_packages(frame, packages: tuple[str, ...]) -> str | None:
    """``module.function`` when ``frame`` runs code of one of ``packages`` (a module's own code, run on
    import, is named by the module), else None."""
    module = frame.f_globals.get("__name__")
    if not isinstance(module, str):
        return None
    for package in packages:
        if module == package or module.startswith(package + "."):
            code = frame.f_code
            return module if code.co_name == "<module>" else f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
    return None


def _inside_torch_handling(frame, depth: int = 12) -> bool:
    """Whether ``frame`` runs inside torch.overrides.handle_torch_function (torch's own mode handling)."""
    while frame is not None and depth:
        if frame.f_code is _TORCH_HANDLER_CODE:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _remove_mode(mode, length, at) -> None:
    """Take ``mode`` off its stack wherever it is (the student's code disturbed the stack)."""
    from torch.overrides import _pop_mode as pop_function_mode
    from torch.utils._python_dispatch import _pop_mode as pop_dispatch_mode

    pop = pop_function_mode if isinstance(mode, TorchFunctionMode) else pop_dispatch_mode
    kept = []
    while length() and at(length() - 1) is not mode:
        kept.append(pop())
    if length():
        pop()
    for other in reversed(kept):
        other.__enter__()


class _FunctionMode(TorchFunctionMode):
    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.watch._torch_call(func)
        return func(*args, **(kwargs or {}))


class _DispatchMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # never compiled; and True would import torch._dynamo (2 s) on first use

    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.watch._aten_call(func, args, kwargs)
        out = func(*args, **(kwargs or {}))
        if self.watch._models and not self.watch._paused:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            if any(isinstance(o, torch.Tensor) and o.device.type == "meta" for o in outs):
                self.watch._record("tensors on the meta device (building a model to read its sizes)")
        return out


_current: list[Watch] = []


@contextmanager
def watching(forbid: Forbid):
    """Install a :class:`Watch` and make it the one :func:`paused` pauses."""
    watch = Watch(forbid)
    _current.append(watch)
    try:
        with watch:
            yield watch
    finally:
        _current.pop()


@contextmanager
def paused():
    """Inside a checker's own callables handed to the student (a given block, a given sublayer): run
    without watching, so that the course code they use is not mistaken for the student's."""
    if not _current:
        yield
        return
    with _current[-1].pause():
        yield

