"""Checkers for exercise 12 (training the model).

1. ``train_step`` — one optimisation step (loss, backward, the global gradient norm clipped by hand,
   the optimiser's step, gradients cleared), checked by the parameters it produces over a few steps.
2. ``learning_rate`` — the schedule: linear warmup, then cosine decay to a floor.
3. ``sampling_probs`` — the distribution the next token is drawn from: temperature, top-k, then top-p.
4. ``evaluate_loss`` — find and fix the bug in an evaluation loop (a mean of batch means).
5. ``predictions`` — predict five numbers before computing them (a function returning a dict).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import torch.optim.lr_scheduler

from .. import data, sampling, training
from ..config import ModelConfig
from ..model import DecoderLM, next_token_probs
from ._core import Case, Forbid, GradingError, Mistake, NumberOutput, Task, TensorOutput, describe
from ._predictions import predictions_task
from ._watch import paused

__all__ = ["check_train_step", "check_learning_rate", "check_sampling_probs", "check_evaluate_loss",
           "check_training_predictions"]

_F64, _F32 = torch.float64, torch.float32


def _tiny_model(gen: torch.Generator, dtype=_F32, **changes) -> DecoderLM:
    """A small DecoderLM (two blocks) with weights drawn from ``gen``: matrices N(0, 1/fan_in), so that
    its gradients are large enough for clipping to act, and gains in [0.5, 1.5]."""
    shape = dict(vocab_size=23, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=16)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
        model = DecoderLM(ModelConfig(**{**shape, **changes}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name == "embed.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)
    return model.to(dtype).train()


# --- Task 1: one training step ---------------------------------------------------------------------------

def _step(model, optimizer, x, y, max_norm, *, clip="global", zero="after", loss_kind="mean",
          shift=False, returned="loss"):
    """One step with knobs: what a solution with a given mistake computes. Returns the loss (a float)."""
    logits = model(x)  # (B, T, V)
    if shift:  # the targets shifted once more: y is already x shifted by one
        logits, y = logits[:, :-1], y[:, 1:]
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum" if loss_kind == "sum" else "mean")
    if zero == "before-step":
        loss.backward()
        optimizer.zero_grad(set_to_none=True)
    else:
        loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if grads and clip != "none":
        with torch.no_grad():
            norms = torch.stack([g.norm() for g in grads])  # (P,): one per parameter tensor
            if clip == "per-parameter":
                for g, n in zip(grads, norms):
                    g.mul_(min(1.0, max_norm / (n.item() + 1e-6)))
            elif clip == "value":
                for g in grads:
                    g.clamp_(-max_norm, max_norm)
            else:
                total = {"global": lambda: norms.pow(2).sum().sqrt(), "sum": lambda: norms.sum(),
                         "squared": lambda: norms.pow(2).sum(), "always": lambda: norms.pow(2).sum().sqrt(),
                         "inverted": lambda: norms.pow(2).sum().sqrt()}[clip]().item()
                if clip == "always":
                    scale = max_norm / (total + 1e-6)
                elif clip == "inverted":
                    scale = min(1.0, total / max_norm)
                else:
                    scale = min(1.0, max_norm / (total + 1e-6))
                for g in grads:
                    g.mul_(scale)
    optimizer.step()
    if zero == "after":
        optimizer.zero_grad(set_to_none=True)
    if returned == "after":
        with torch.no_grad():
            return F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    return loss.item()


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def _steps(model, optimizer, batches, max_norm, **knobs) -> torch.Tensor:
    """The reference (no knobs) or a mistake: every step's loss, then every parameter after the steps."""
    losses = [_step(model, optimizer, x, y, max_norm, **knobs) for x, y in batches]
    return torch.cat([torch.tensor(losses, dtype=_F64), _params(model)])


def _run_steps(student, model, optimizer, batches, max_norm) -> torch.Tensor:
    """Call the student's train_step once per batch; read the losses it returns and the parameters."""
    losses = []
    for x, y in batches:
        loss = student(model, optimizer, x, y, max_norm)
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            loss = loss.item()
        if isinstance(loss, bool) or not isinstance(loss, (int, float)):
            raise GradingError(f"`train_step` returned a {type(loss).__name__}; it should return the batch's "
                               f"loss as a number (loss.item()).")
        losses.append(float(loss))
    return torch.cat([torch.tensor(losses, dtype=_F64), _params(model)])


def _train_step_cases(gen) -> list[Case]:
    cases = []
    for what, dtype, make_opt, max_norm, n_steps, B, T in [
        ("SGD (lr 0.5), max_norm 0.5: clipping acts", _F32, lambda ps: torch.optim.SGD(ps, lr=0.5), 0.5, 2, 4, 8),
        ("SGD with momentum 0.9 (lr 0.1), max_norm 5: clipping never acts", _F32,
         lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 5.0, 3, 3, 6),
        ("SGD (lr 0.2) in float64, max_norm 1", _F64, lambda ps: torch.optim.SGD(ps, lr=0.2), 1.0, 3, 2, 10),
        ("AdamW (lr 0.01, weight decay 0.1), max_norm 0.5", _F32,
         lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1), 0.5, 3, 4, 8),
        ("SGD (lr 0.3), max_norm 2, a batch of one sequence", _F32, lambda ps: torch.optim.SGD(ps, lr=0.3), 2.0,
         2, 1, 12),
    ]:
        model = _tiny_model(gen, dtype)
        optimizer = make_opt(model.parameters())
        batches = []
        for _ in range(n_steps):
            seq = torch.randint(0, model.config.vocab_size, (B, T + 1), generator=gen)
            batches.append((seq[:, :-1], seq[:, 1:]))  # x (B, T) and y, x shifted by one
        label = (f"a 2-block {str(dtype).replace('torch.', '')} model with {what}, {n_steps} steps on batches "
                 f"x, y of shape {(B, T)}")
        cases.append(Case(label, (model, optimizer, batches, max_norm)))
    return cases


def _step_mistake(**knobs):
    return lambda model, optimizer, batches, max_norm: _steps(model, optimizer, batches, max_norm, **knobs)


# torch's clipping by norm, by function (clip_grad_value_ is another operation); the last two exist
# from torch 2.6 on
_TORCH_CLIPPING = tuple(
    (getattr(fn, "__wrapped__", fn), f"torch.nn.utils.{name}")
    for name in ("clip_grad_norm_", "clip_grad_norm", "get_total_norm", "clip_grads_with_norm_")
    if (fn := getattr(torch.nn.utils, name, None)) is not None)

def _load_optimizer_machinery() -> None:
    """torch imports torch._dynamo (about 2 s) when the first optimizer is built: import it once, in the
    grading process, not again in every isolated child against its time limit."""
    import torch._dynamo  # noqa: F401


TRAIN_STEP = Task(
    name="train_step", seed=1201, cases=_train_step_cases, reference=_steps, run=_run_steps,
    prepare=_load_optimizer_machinery,
    mutates=("model", "optimizer"), output=TensorOutput("float64: the losses, then the parameters"),
    rtol=1e-4, atol=1e-6, seconds=20.0,
    mistakes=[
        Mistake("the gradients reach the optimizer unclipped: compute the global norm and rescale the "
                "gradients after loss.backward() and BEFORE optimizer.step() (clipping after the step changes "
                "nothing: the step has already used them).", _step_mistake(clip="none")),
        Mistake("each parameter's gradient is clipped by its own norm. Clipping uses ONE global norm, "
                "sqrt(Σ over all parameters of ‖g‖²), and one factor for every gradient, so the direction of "
                "the whole update is kept.", _step_mistake(clip="per-parameter")),
        Mistake("the gradients are scaled to norm max_norm even when their norm is already smaller: the "
                "factor is min(1, max_norm / norm) — clipping only ever shrinks.", _step_mistake(clip="always")),
        Mistake("the global norm adds the parameters' norms; it is the square root of the sum of their "
                "SQUARED norms: sqrt(Σ ‖g‖²).", _step_mistake(clip="sum")),
        Mistake("the square root is missing from the global norm: sqrt(Σ ‖g‖²), not Σ ‖g‖².",
                _step_mistake(clip="squared")),
        Mistake("the clipping factor is upside down: multiply the gradients by max_norm / norm (when the "
                "norm exceeds max_norm).", _step_mistake(clip="inverted")),
        Mistake("each gradient entry is clamped to [−max_norm, max_norm] (clipping by value). Clip by the "
                "global norm: one factor for all gradients.", _step_mistake(clip="value")),
        Mistake("the gradients are never cleared, so each step adds its gradient to the previous steps' "
                "(backward() accumulates into .grad): call optimizer.zero_grad() once per step.",
                _step_mistake(zero="never")),
        Mistake("the gradients are cleared between backward() and optimizer.step(), so the step has nothing "
                "to use: clear them after the step (or before the forward pass).",
                _step_mistake(zero="before-step")),
        Mistake("the loss is summed over the B·T positions; the training loss is their MEAN (the default "
                "reduction of F.cross_entropy).", _step_mistake(loss_kind="sum")),
        Mistake("the targets are shifted once more: y is already x shifted by one (y[:, t] is the token "
                "after x[:, t]), so compare logits[:, t] with y[:, t] directly.", _step_mistake(shift=True)),
        Mistake("the returned loss is computed after the step; return the loss of the batch as it was "
                "computed for the gradient (before the update).", _step_mistake(returned="after")),
    ],
    forbid=Forbid(operations=("clip_grad_norm",), modules=(training,), functions=_TORCH_CLIPPING),
    hint="Check the order on paper: forward, mean loss, backward, one global norm sqrt(Σ‖g‖²), one factor "
         "min(1, max_norm / norm) for every gradient, step, clear the gradients.",
)

check_train_step = TRAIN_STEP.checker(
    """Check ``train_step(model, optimizer, x, y, max_norm) -> float``: mean cross-entropy, backward, every
    gradient scaled by min(1, max_norm / sqrt(Σ‖g‖²)) by hand, optimizer.step(), gradients cleared; the
    loss returned. Checked by the losses and the parameters after a few steps.""")


# --- Task 2: the learning-rate schedule --------------------------------------------------------------------

def _lr(step, max_lr, min_lr, warmup_steps, total_steps, *, warmup="plus-one", start="warmup", floor=True,
        clamp=True, shape="cosine"):
    """The schedule with knobs: what a solution with a given mistake computes."""
    if step < warmup_steps:
        return {"plus-one": max_lr * (step + 1) / warmup_steps, "zero": max_lr * step / warmup_steps,
                "nanogpt": max_lr * (step + 1) / (warmup_steps + 1)}[warmup]
    if clamp and step >= total_steps:
        return min_lr
    progress = {"warmup": (step - warmup_steps) / max(1, total_steps - warmup_steps),
                "zero": step / total_steps,
                "shifted": (step - warmup_steps) / total_steps}[start]
    low = min_lr if floor else 0.0
    if shape == "linear":
        return max_lr - (max_lr - low) * progress
    if shape == "quarter":
        return low + (max_lr - low) * math.cos(math.pi * progress / 2)
    if shape == "floor-added":
        return min_lr + 0.5 * max_lr * (1 + math.cos(math.pi * progress))
    return low + 0.5 * (max_lr - low) * (1 + math.cos(math.pi * progress))


def _lr_reference(step, max_lr, min_lr, warmup_steps, total_steps):
    return _lr(step, max_lr, min_lr, warmup_steps, total_steps)


def _short(x: float) -> str:
    """1e-3 rather than 0.001 (a case label shows settings, never many decimals)."""
    return f"{x:g}" if x == 0 or x >= 0.01 else f"{x:.0e}".replace("e-0", "e-")


def _lr_cases(gen) -> list[Case]:
    cases = []
    for step, max_lr, min_lr, warmup, total, what in [
        (0, 1e-3, 1e-4, 100, 2000, "the very first step (step 0)"),
        (49, 1e-3, 1e-4, 100, 2000, "halfway through the warmup"),
        (99, 1e-3, 1e-4, 100, 2000, "the last warmup step"),
        (100, 1e-3, 1e-4, 100, 2000, "the first step after the warmup"),
        (1050, 1e-3, 1e-4, 100, 2000, "halfway through the decay"),
        (500, 6e-3, 6e-4, 70, 1550, "a step of the decay"),
        (1400, 6e-3, 6e-4, 70, 1550, "late in the decay"),
        (1999, 1e-3, 1e-4, 100, 2000, "the second-to-last step"),
        (2000, 1e-3, 1e-4, 100, 2000, "step == total_steps"),
        (2600, 1e-3, 1e-4, 100, 2000, "a step after total_steps"),
        (0, 3e-3, 0.0, 0, 1000, "step 0 without warmup (warmup_steps = 0)"),
        (250, 3e-3, 0.0, 0, 1000, "a quarter of the way, without warmup, min_lr = 0"),
        (3, 2.0, 0.5, 10, 50, "a short run during warmup"),
        (30, 2.0, 0.5, 10, 50, "a short run during the decay"),
    ]:
        cases.append(Case(f"{what}: step={step}, max_lr={_short(max_lr)}, min_lr={_short(min_lr)}, "
                          f"warmup_steps={warmup}, total_steps={total}", (step, max_lr, min_lr, warmup, total)))
    return cases


def _lr_mistake(**knobs):
    return lambda step, max_lr, min_lr, warmup_steps, total_steps: _lr(step, max_lr, min_lr, warmup_steps,
                                                                       total_steps, **knobs)


LEARNING_RATE = Task(
    name="learning_rate", seed=1202, cases=_lr_cases, reference=_lr_reference,
    output=NumberOutput("the learning rate"), rtol=1e-9, atol=1e-12,
    mistakes=[
        Mistake("the warmup starts at 0: step 0 would not move the weights at all. The first step already "
                "uses max_lr · 1 / warmup_steps, and step warmup_steps − 1 reaches max_lr: (step + 1) / "
                "warmup_steps.", _lr_mistake(warmup="zero")),
        Mistake("the warmup divides by warmup_steps + 1, so it never quite reaches max_lr; this schedule's "
                "warmup is max_lr · (step + 1) / warmup_steps.", _lr_mistake(warmup="nanogpt")),
        Mistake("the cosine is measured from step 0; it starts when the warmup ends: progress = (step − "
                "warmup_steps) / (total_steps − warmup_steps).", _lr_mistake(start="zero")),
        Mistake("the cosine's progress divides by total_steps; the decay lasts total_steps − warmup_steps "
                "steps, so it must reach min_lr exactly at total_steps.", _lr_mistake(start="shifted")),
        Mistake("the schedule decays to 0 instead of min_lr: lr = min_lr + ½ (max_lr − min_lr)(1 + "
                "cos(π · progress)).", _lr_mistake(floor=False)),
        Mistake("min_lr is added to the whole cosine, so the peak is max_lr + min_lr: only the difference "
                "max_lr − min_lr follows the cosine.", _lr_mistake(shape="floor-added")),
        Mistake("the decay is linear; it follows half a cosine period: ½ (1 + cos(π · progress)).",
                _lr_mistake(shape="linear")),
        Mistake("the decay uses a quarter period, cos(π · progress / 2); this schedule's is the half period "
                "½ (1 + cos(π · progress)), flat at both ends.", _lr_mistake(shape="quarter")),
        Mistake("after total_steps the cosine climbs back up: from total_steps on, the learning rate stays "
                "at min_lr.", _lr_mistake(clamp=False)),
    ],
    forbid=Forbid(modules=(training, torch.optim.lr_scheduler)),
    hint="Evaluate your schedule by hand at step 0, at warmup_steps − 1, at warmup_steps, halfway through "
         "the decay and at total_steps, and compare with the plot in the chapter.",
)

check_learning_rate = LEARNING_RATE.checker(
    """Check ``learning_rate(step, max_lr, min_lr, warmup_steps, total_steps) -> float``: max_lr · (step + 1)
    / warmup_steps during the warmup, then min_lr + ½ (max_lr − min_lr)(1 + cos(π (step − W) / (S − W)))
    up to total_steps, min_lr after.""")


# --- Task 3: the sampling distribution -----------------------------------------------------------------------

def _probs(logits, temperature=1.0, top_k=None, top_p=None, *, temp="divide", k_off=0, use_k=True,
           p_rule="mass-above", p_on="after-k", p_sorted=True, renorm=True, p_before_temp=False,
           out="probs", use_p=True, dim=-1):
    """The sampling distribution with knobs: what a solution with a given mistake computes."""
    z = logits.double()  # (..., V)
    z = {"divide": z / temperature, "multiply": z * temperature, "ignore": z}[temp]
    probs = torch.softmax(z, dim=dim)  # (..., V)
    base = torch.softmax(logits.double(), dim=-1) if p_before_temp else None  # τ not applied yet
    if top_k is not None and use_k and top_k + k_off < probs.shape[-1]:
        kth = torch.topk(probs, max(top_k + k_off, 1), dim=-1).values[..., -1:]  # (..., 1)
        kept = probs >= kth  # (..., V)
        probs = probs * kept
        if renorm:
            probs = probs / probs.sum(-1, keepdim=True)
        if base is not None:
            base = base * kept / (base * kept).sum(-1, keepdim=True)
    if top_p is not None and top_p < 1 and use_p:
        source = base if base is not None else (probs if p_on == "after-k" else torch.softmax(z, dim=-1))
        if p_sorted:
            ranked, order = torch.sort(source, dim=-1, descending=True, stable=True)  # (..., V)
        else:
            ranked, order = source, torch.arange(source.shape[-1]).expand_as(source)
        cumulative = ranked.cumsum(-1)  # (..., V)
        keep_ranked = {"mass-above": cumulative - ranked < top_p, "cumsum-below": cumulative < top_p,
                       "cumsum-at-most": cumulative <= top_p}[p_rule]
        keep = torch.zeros_like(keep_ranked).scatter(-1, order, keep_ranked)  # (..., V)
        probs = probs * keep
        if renorm:
            probs = probs / probs.sum(-1, keepdim=True)
    if out == "log-probs":
        probs = probs.log()
    return probs.to(logits.dtype)


def _probs_reference(logits, temperature=1.0, top_k=None, top_p=None):
    return sampling.sampling_probs(logits, temperature, top_k, top_p).to(logits.dtype)


def _probs_cases(gen) -> list[Case]:
    def logits(shape, scale=2.0, dtype=_F64):
        return (scale * torch.randn(shape, generator=gen, dtype=_F64)).to(dtype)

    cases = []
    for shape, scale, dtype, temperature, top_k, top_p, what in [
        ((10,), 2.0, _F64, 1.0, None, None, "one row, no filtering"),
        ((3, 12), 2.0, _F64, 0.5, None, None, "temperature 0.5 alone"),
        ((3, 12), 2.0, _F64, 2.0, None, None, "temperature 2 alone"),
        ((4, 15), 2.0, _F64, 1.0, 5, None, "top-k alone"),
        ((4, 20), 2.0, _F64, 1.0, None, 0.9, "top-p alone"),
        ((5, 20), 3.0, _F64, 1.0, None, 0.5, "a small nucleus"),
        ((2, 3, 16), 2.0, _F64, 0.8, 6, 0.8, "temperature, top-k and top-p together"),
        ((4, 25), 1.0, _F32, 1.3, 10, 0.7, "float32, all three knobs"),
        ((3, 12), 2.0, _F64, 1.0, 1, None, "top_k = 1"),
        ((3, 12), 2.0, _F64, 1.0, 30, 1.0, "top_k larger than the vocabulary, top_p = 1"),
        ((2, 30), 300.0, _F64, 0.7, 8, 0.95, "very large logits (hundreds)"),
        ((6, 9), 2.0, _F64, 1.5, 4, 0.6, "top-p after a top-k that renormalised"),
    ]:
        z = logits(shape, scale, dtype)
        cases.append(Case(f"{what}: logits {describe(z)}, temperature={temperature}, top_k={top_k}, "
                          f"top_p={top_p}", (z,), {"temperature": temperature, "top_k": top_k, "top_p": top_p}))
    return cases


def _probs_mistake(**knobs):
    return lambda logits, temperature=1.0, top_k=None, top_p=None: _probs(logits, temperature, top_k, top_p,
                                                                           **knobs)


SAMPLING_PROBS = Task(
    name="sampling_probs", seed=1203, cases=_probs_cases, reference=_probs_reference,
    output=TensorOutput("the logits' dtype"), rtol=1e-4, atol=1e-6,
    mistakes=[
        Mistake("the temperature multiplies the logits; divide them by it (τ < 1 sharpens).",
                _probs_mistake(temp="multiply")),
        Mistake("the temperature is ignored: divide the logits by it before the softmax.",
                _probs_mistake(temp="ignore")),
        Mistake("top-k keeps one token too few: keep every token whose probability is at least the k-th "
                "largest (>=, not >).", _probs_mistake(k_off=-1)),
        Mistake("top-k keeps one token too many: keep exactly the k most probable tokens.",
                _probs_mistake(k_off=1)),
        Mistake("top_k is ignored: keep only the k most probable tokens.", _probs_mistake(use_k=False)),
        Mistake("top_p is ignored: keep only the nucleus, the most probable tokens up to total probability p.",
                _probs_mistake(use_p=False)),
        Mistake("the nucleus stops one token short: it must keep the token whose probability makes the total "
                "REACH p (keep a token when the tokens ranked above it hold less than p).",
                _probs_mistake(p_rule="cumsum-below")),
        Mistake("the nucleus stops one token short: it must keep the token whose probability makes the total "
                "REACH p (keep a token when the tokens ranked above it hold less than p).",
                _probs_mistake(p_rule="cumsum-at-most")),
        Mistake("the running total is taken in token order; sort the probabilities from the most to the least "
                "probable first, and map the kept set back to token order.", _probs_mistake(p_sorted=False)),
        Mistake("the nucleus is computed on the probabilities before top-k renormalised them; top-p applies to "
                "the distribution top-k left (renormalised), as the order temperature → top-k → top-p says.",
                _probs_mistake(p_on="before-k")),
        Mistake("the nucleus is chosen before the temperature is applied; divide by the temperature first, "
                "then filter.", _probs_mistake(p_before_temp=True)),
        Mistake("the kept probabilities are not renormalised: after each filter, divide by their sum so each "
                "row sums to 1.", _probs_mistake(renorm=False)),
        Mistake("you returned log-probabilities; return probabilities (0 for the tokens filtered out).",
                _probs_mistake(out="log-probs")),
        Mistake("the softmax normalises over the first dimension; each row of the vocabulary (the LAST "
                "dimension) is a distribution: softmax(..., dim=-1).", _probs_mistake(dim=0)),
    ],
    forbid=Forbid(modules=(sampling, training), functions=((next_token_probs, "course_lib.model.next_token_probs"),)),
    hint="On a row of five logits, compute by hand: softmax(z / τ), the k most probable kept and renormalised, "
         "then the nucleus of what is left, renormalised.",
)

check_sampling_probs = SAMPLING_PROBS.checker(
    """Check ``sampling_probs(logits, temperature=1.0, top_k=None, top_p=None)``: softmax(z / τ), then the
    top_k most probable tokens kept and renormalised, then the smallest set reaching top_p kept and
    renormalised; (..., V) in the logits' dtype.""")


# --- Task 4: the evaluation loop (find and fix) ---------------------------------------------------------------

class _Model:
    """The model as the student sees it: a callable ids (b, T) → logits (b, T, V), run unwatched."""

    def __init__(self, model: DecoderLM, what: str):
        self.model, self.what = model, what

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        with paused(), torch.no_grad():
            return self.model(ids)

    def __repr__(self) -> str:
        return f"<{self.what}: ids (b, T) -> logits (b, T, V)>"


def _evaluate(model, data_ids, context, batch_size, *, average="tokens", last="keep", stride=None,
              targets="next", unit="nats"):
    """The evaluation with knobs: what a solution with a given mistake computes."""
    step = context if stride is None else stride
    n_windows = (len(data_ids) - 1 - context) // step + 1
    starts = torch.arange(n_windows) * step  # (W,)
    offsets = torch.arange(context)  # (T,)
    inputs = data_ids[starts[:, None] + offsets]  # (W, T)
    labels = data_ids[starts[:, None] + offsets + (1 if targets == "next" else 0)]  # (W, T)
    total, count, means = 0.0, 0, []
    for start in range(0, n_windows, batch_size):
        x, y = inputs[start:start + batch_size], labels[start:start + batch_size]  # (b, T) each
        if last == "drop" and len(x) < batch_size:
            break
        logits = model(x)  # (b, T, V)
        losses = F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction="none")  # (b·T,)
        total += losses.sum().item()
        count += losses.numel()
        means.append(losses.mean().item())
    value = {"tokens": lambda: total / count, "batches": lambda: sum(means) / len(means),
             "sum-over-batches": lambda: total / len(means), "sum-over-windows": lambda: total / n_windows}[average]()
    return {"nats": value, "bits": value / math.log(2), "perplexity": math.exp(value)}[unit]


def _evaluate_reference(model, data_ids, context, batch_size):
    return _evaluate(model, data_ids, context, batch_size)


def _evaluate_cases(gen) -> list[Case]:
    model_a = _Model(_tiny_model(gen).eval(), "a 2-block model over 23 tokens")
    model_b = _Model(_tiny_model(gen, n_layers=1, vocab_size=31).eval(), "a 1-block model over 31 tokens")
    cases = []
    for model, n_tokens, context, batch_size, what in [
        (model_a, 203, 16, 5, "12 windows in batches of 5 (the last batch holds 2)"),
        (model_b, 300, 8, 16, "37 windows in batches of 16 (the last batch holds 5)"),
        (model_a, 161, 10, 4, "16 windows in batches of 4 (all batches full)"),
        (model_b, 130, 12, 3, "10 windows in batches of 3, 9 tokens left over"),
        (model_a, 90, 16, 64, "5 windows, all in one batch"),
        (model_b, 401, 4, 7, "100 windows in batches of 7 (the last batch holds 2)"),
    ]:
        ids = torch.randint(0, model.model.config.vocab_size, (n_tokens,), generator=gen)
        cases.append(Case(f"{model.what}, data of {n_tokens} token ids, context {context}, batch_size "
                          f"{batch_size}: {what}", (model, ids, context, batch_size)))
    return cases


def _evaluate_mistake(**knobs):
    return lambda model, data_ids, context, batch_size: _evaluate(model, data_ids, context, batch_size, **knobs)


EVALUATE_LOSS = Task(
    name="evaluate_loss", seed=1204, cases=_evaluate_cases, reference=_evaluate_reference,
    output=NumberOutput("the mean loss in nats per token"), rtol=1e-5, atol=1e-7,
    mistakes=[
        Mistake("this is still what the given version computes: the mean of the batches' mean losses. The "
                "last batch is smaller, so its tokens weigh more than the others'. Add up every token's loss "
                "(reduction='sum') and divide by the number of tokens.", _evaluate_mistake(average="batches")),
        Mistake("the last, smaller batch is left out, so some windows are never evaluated: every window of the "
                "split counts once.", _evaluate_mistake(last="drop")),
        Mistake("the sum of the token losses is divided by the number of batches; divide it by the number of "
                "target tokens.", _evaluate_mistake(average="sum-over-batches")),
        Mistake("the sum of the token losses is divided by the number of windows; each window holds context "
                "tokens: divide by the number of target tokens.", _evaluate_mistake(average="sum-over-windows")),
        Mistake("the windows overlap (they start at every position): the evaluation takes the non-overlapping "
                "windows, each target token counted once.", _evaluate_mistake(stride=1)),
        Mistake("the targets are the inputs themselves; the target of position t is the NEXT token, "
                "data[start + t + 1].", _evaluate_mistake(targets="same")),
        Mistake("the result is in bits; return nats per token (the loss as F.cross_entropy computes it).",
                _evaluate_mistake(unit="bits")),
        Mistake("you returned the perplexity; return the mean loss in nats per token.",
                _evaluate_mistake(unit="perplexity")),
    ],
    forbid=Forbid(modules=(training, data)),
    hint="Evaluate the same data with batch_size 1 and with one batch holding every window: the mean loss "
         "per token must not depend on how the windows are batched.",
)

check_evaluate_loss = EVALUATE_LOSS.checker(
    """Check ``evaluate_loss(model, data, context, batch_size) -> float``: the mean loss in nats over every
    target token of the non-overlapping windows of ``context`` tokens, whatever the batch size.""")


# --- Task 5: predictions -------------------------------------------------------------------------------------

_LOSS = 1.40  # nats per character, the validation loss the predictions start from


def _adam_ratio() -> float:
    """The size of AdamW's first update with the gradient scaled by 0.1, over the size without."""
    sizes = []
    for scale in (0.1, 1.0):
        w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=_F64))
        opt = torch.optim.AdamW([w], lr=0.01, weight_decay=0.0, eps=1e-12)
        w.grad = scale * torch.tensor([0.3, -1.2, 2.0], dtype=_F64)
        before = w.detach().clone()
        opt.step()
        sizes.append((w.detach() - before).norm().item())
    return sizes[0] / sizes[1]


def _true_predictions() -> dict[str, float]:
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]], dtype=_F64)
    return {
        "initial_loss": F.cross_entropy(torch.zeros(1, 65, dtype=_F64), torch.tensor([0])).item(),
        "bits_per_char": training.bits_per_char(_LOSS),
        "perplexity": math.exp(_LOSS),
        "adam_clip_ratio": _adam_ratio(),
        "top_p_tokens": int((sampling.sampling_probs(probs.log(), top_p=0.75) > 0).sum()),
    }


_WRONG_PREDICTIONS = {
    "initial_loss": [
        (math.log2(65), "that is in bits (log₂ 65); the loss is measured in nats: ln V."),
        (65.0, "65 is the perplexity of that model; its loss is the log of it."),
        (1 / 65, "1/65 is the probability each character gets; the loss is −ln of it."),
        (0.0, "every character gets probability 1/65, not 1: the loss is −ln(1/65)."),
    ],
    "bits_per_char": [
        (_LOSS * math.log(2), "you multiplied by ln 2; a loss in nats is DIVIDED by ln 2 to give bits "
                              "(a bit is ln 2 ≈ 0.69 nats)."),
        (_LOSS / math.log(10), "divide by ln 2, not by ln 10: bits are base-2 logarithms."),
        (_LOSS, "nats and bits differ: one bit is ln 2 ≈ 0.69 nats."),
    ],
    "perplexity": [
        (2 ** _LOSS, "2 to the power of the loss is right only for a loss in bits; this one is in nats: e^loss."),
        (math.log(_LOSS), "perplexity is the exponential of the loss, not its logarithm."),
        (_LOSS ** 2, "perplexity is the exponential of the loss (in nats), e^loss."),
    ],
    "adam_clip_ratio": [
        (0.1, "Adam divides each update by the running root mean square of the gradient, and on the first "
              "step both are made from the same gradient: a constant factor cancels."),
        (10.0, "Adam divides each update by the running root mean square of the gradient: scaling the "
               "gradient by a constant changes the first update by which factor?"),
    ],
    "top_p_tokens": [
        (2.0, "the nucleus keeps the token whose probability makes the total reach p: 0.4 + 0.3 is still "
              "below 0.75."),
        (4.0, "the nucleus stops as soon as the total reaches p: 0.4 + 0.3 + 0.2 already does."),
        (1.0, "the nucleus is the smallest set of most probable tokens whose total reaches p, not only the "
              "most probable token."),
    ],
}

TRAINING_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=1205,
    rtol=2e-3,
    atol=1e-3,
    advice="Work it out on paper first, then run the experiments below.",
    prepare=_load_optimizer_machinery,  # the truth builds AdamW
)

check_training_predictions = TRAINING_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the loss of a uniform model over 65 characters, a loss of 1.40 nats
    in bits and as a perplexity, the ratio of AdamW's first updates with and without a 0.1 gradient scale,
    and the size of a top-p = 0.75 nucleus.""")
