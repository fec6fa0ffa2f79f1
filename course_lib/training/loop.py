"""The training loop, step s = 0, 1, …, steps − 1::

    x, y = next batch                                           (B, T) each
    train_step(model, optimizer, x, y, lr_at(s), grad_clip)

:class:`Trainer` draws the batches from a corpus with its own generator (seed + 1), evaluates the
whole validation split as the config says, keeps a log and saves checkpoints that resume exactly;
:func:`train_on_batches` takes them from any function and does none of that. Both first pass the
config through :func:`smoke_capped`, which shortens the run when ``COURSE_LIB_MAX_STEPS`` is set.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable

import torch
from torch import nn

from ..config import ModelConfig
from ..data import get_batch
from ..device import synchronize
from .averaging import weight_average
from .checkpoints import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from .distributed import World, mean_over_ranks, rank_rows
from .evaluation import bits_per_char, evaluate
from .optimizer import make_optimizer
from .precision import make_grad_scaler, resolve_precision
from .progress import close_progress_bar, progress_bar
from .randomness import current_states, drawing_from, seeded_states
from .run_config import TrainConfig
from .schedule import lr_at
from .step import train_step

__all__ = ["smoke_capped", "train_on_batches", "Trainer"]


def smoke_capped(config: TrainConfig) -> TrainConfig:
    """``config`` itself, or — when the environment variable ``COURSE_LIB_MAX_STEPS`` holds a number N
    smaller than ``config.steps`` — the same run shortened to N steps, with at most N // 2 warmup
    steps and an evaluation at least every N steps (so that the last step is evaluated)."""
    value = os.environ.get("COURSE_LIB_MAX_STEPS", "").strip()
    if not value:
        return config
    try:
        cap = int(value)
    except ValueError:
        raise ValueError(f"COURSE_LIB_MAX_STEPS ({value!r}) must be a positive integer") from None
    if cap < 1:
        raise ValueError(f"COURSE_LIB_MAX_STEPS ({value!r}) must be a positive integer")
    if config.steps <= cap:
        return config
    return config.replace(steps=cap, warmup_steps=min(config.warmup_steps, cap // 2),
                          eval_interval=min(config.eval_interval, cap))


def _takes_float16(optimizer: str) -> bool:
    """Does ``optimizer`` run with float16's gradient scaler? The course runs Muon in float32 or
    bfloat16 only, so for Muon "auto" falls back to float32 on a GPU without bfloat16."""
    return optimizer != "muon"


def _check_optimizer_precision(optimizer: str, precision: str) -> None:
    if precision == "float16" and not _takes_float16(optimizer):
        raise ValueError("optimizer 'muon' runs in float32 or bfloat16, not with float16's gradient "
                         "scaler: choose precision 'bfloat16' or 'float32'")


def train_on_batches(model: nn.Module, next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
                     config: TrainConfig, *, progress: bool = False) -> list[float]:
    """Train ``model`` for ``config.steps`` steps on batches ``x, y = next_batch()`` (B, T) — for data
    that is not a corpus, such as ``data.induction_batch`` — with the same optimiser
    (:func:`make_optimizer`), schedule (:func:`lr_at`) and step (:func:`train_step`, clipping to
    ``config.grad_clip``, in ``config.precision``) as :class:`Trainer`. No evaluation, no
    checkpoints. Returns every step's training loss (nats)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if not callable(next_batch):
        raise TypeError("next_batch must be a function of no arguments returning (x, y)")
    c = smoke_capped(config)
    optimizer = make_optimizer(model, c)
    device = next(model.parameters()).device
    precision = resolve_precision(c.precision, device, float16=_takes_float16(c.optimizer))
    _check_optimizer_precision(c.optimizer, precision)
    scaler = make_grad_scaler(precision, device)
    model.train()
    bar = progress_bar(c.steps) if progress else None
    losses: list[torch.Tensor] = []
    try:
        for step in range(c.steps):
            x, y = next_batch()  # (B, T) each
            lr = lr_at(step, lr=c.lr, min_lr=c.min_lr, warmup_steps=c.warmup_steps, total_steps=c.steps,
                       cooldown=c.cooldown)
            losses.append(train_step(model, optimizer, x, y, lr, c.grad_clip, grad_accum=c.grad_accum,
                                     precision=precision, scaler=scaler))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            close_progress_bar(bar)
    return [loss.item() for loss in losses]


class Trainer:
    """Trains ``model`` on the token ids ``train_data`` and evaluates on ``val_data`` (1-D tensors,
    kept on the model's device), as ``config`` says.

    ``train()`` runs up to ``config.steps`` (or a given step), showing a progress bar with the loss,
    bits per character and tokens per second. ``history`` is the log: one record (a dict) per
    evaluation,

        step               steps done when evaluated
        train_loss         mean loss of the training batches since the previous evaluation (nats;
                           None before the first step) — the model changed meanwhile, so it lags
        val_loss           the mean loss over the whole validation split (:func:`evaluate`), nats
        val_bits_per_char  val_loss / ln 2
        lr                 the learning rate of the last step taken
        tokens             training tokens seen
        tokens_per_second  training tokens per second of training time since the previous record
                           (evaluation time excluded)
        elapsed_seconds    wall-clock seconds since training started, evaluations included

    ``step_losses`` holds every step's training loss and ``grad_norms`` every step's gradient norm
    before clipping (‖g‖₂ over all parameters). ``precision`` is the run's number format, decided
    once from ``config.precision`` and the device (:func:`resolve_precision`); in float16 a gradient
    scaler runs beside the optimiser, and ``skipped_steps`` lists the steps it skipped because a
    gradient overflowed (each is also printed). ``save(path)`` writes a checkpoint, the precision
    and the scaler's state with it; :meth:`from_checkpoint` continues it exactly, in the precision it
    was started in.

    With ``config.ema`` the trainer also keeps ``average``, an exponential moving average of the
    weights (:func:`~course_lib.training.averaging.weight_average`, updated after every step), and
    every evaluation scores it instead of the weights themselves (:attr:`evaluated_model`); the
    checkpoint holds both.

    ``world`` (:class:`~course_lib.training.distributed.World`, from ``init_distributed`` under
    torchrun): with N processes every rank draws the same global batch and trains on its B / N rows
    through ``DistributedDataParallel``, which averages the gradients; the logged losses are the
    means over the ranks, so the log is that of one process training on the whole batch. Every
    rank evaluates the whole validation split (the same number on each); only rank 0 shows a
    progress bar. Saving is the caller's choice: the command line saves on rank 0. Every rank
    starts dropout's generators from the same seed and draws the same shapes, so they stay equal
    and rank 0's checkpoint resumes all of them exactly; with dropout, each rank's rows therefore
    get the same masks as the other ranks' rows in the same places.

    Randomness: the initial weights come from the caller (:func:`build_model` draws them from
    ``config.seed``), the batches from a CPU generator seeded with ``seed + 1``, dropout's masks
    from generator states seeded with ``seed`` (:mod:`~course_lib.training.randomness`; the
    stream the experiment runner's records were made with, ``torch.manual_seed(seed)``): the
    same seed gives the same losses whatever ran before in the process, and a checkpoint carries
    both, so a resumed run continues the uninterrupted one's losses exactly.
    """

    def __init__(self, model: nn.Module, train_data: torch.Tensor, val_data: torch.Tensor,
                 config: TrainConfig, *, progress: bool = True, vocab: str | None = None,
                 world: World | None = None):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        config = smoke_capped(config)
        model_config = getattr(model, "config", None)
        if not isinstance(model_config, ModelConfig):
            raise TypeError("model must be a course_lib DecoderLM (with a ModelConfig in .config)")
        if config.context > model_config.max_seq_len:
            raise ValueError(f"context ({config.context}) must not exceed the model's max_seq_len "
                             f"({model_config.max_seq_len})")
        if config.evaluation_context > model_config.max_seq_len:
            raise ValueError(f"eval_context ({config.evaluation_context}) must not exceed the model's "
                             f"max_seq_len ({model_config.max_seq_len})")
        self.device = next(model.parameters()).device
        self.world = world if world is not None else World(0, 1, self.device)
        if config.batch_size % (self.world.size * config.grad_accum):
            raise ValueError(f"batch_size ({config.batch_size}) must divide into {self.world.size} "
                             f"process(es) × grad_accum {config.grad_accum}")
        self.model, self.config, self.vocab = model, config, vocab
        self.progress = progress and self.world.is_main  # one bar, on rank 0
        # What the steps run through: the model itself, or (several processes) a wrapper whose
        # backward pass averages the gradients across the ranks.
        self.step_model = model
        if self.world.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.step_model = DistributedDataParallel(model, device_ids=ids)
        if config.compile:
            # the steps run the compiled graph; evaluation, sampling and checkpoints use the
            # model itself, whose parameters the compiled one shares (its state_dict keys unchanged)
            self.step_model = torch.compile(self.step_model)
        self.train_data = train_data.to(self.device)
        self.val_data = val_data.to(self.device)
        for name, split in (("train_data", self.train_data), ("val_data", self.val_data)):
            if split.numel() and int(split.max()) >= model_config.vocab_size:
                raise ValueError(f"{name} holds token id {int(split.max())}, outside the model's "
                                 f"vocabulary (vocab_size {model_config.vocab_size})")
        self.optimizer = make_optimizer(model, config)
        # θ̄, the weights' moving average (config.ema), or None: what is evaluated and sampled
        self.average = weight_average(model, config.ema) if config.ema is not None else None
        self.precision = resolve_precision(config.precision, self.device,  # "auto" decided here
                                           float16=_takes_float16(config.optimizer))
        _check_optimizer_precision(config.optimizer, self.precision)
        self.scaler = make_grad_scaler(self.precision, self.device)  # float16 only
        self.skipped_steps: list[int] = []  # float16 steps the scaler skipped (overflow)
        self.generator = torch.Generator().manual_seed(config.seed + 1)  # the batches (CPU)
        self.rng = seeded_states(config.seed, self.device)  # dropout's (randomness.py)
        self._drawing = False  # inside train(): the global generators hold self.rng's draws
        self.step = 0
        self.history: list[dict] = []
        self.step_losses: list[float] = []
        self.grad_norms: list[float] = []
        self.elapsed = 0.0  # seconds of train() so far, evaluations included
        self.reached_target: dict | None = None  # the evaluation that met train()'s target_loss
        self._interval_loss, self._interval_steps, self._interval_seconds = 0.0, 0, 0.0

    # --- running -----------------------------------------------------------------------------------

    def lr(self, step: int) -> float:
        c = self.config
        return lr_at(step, lr=c.lr, min_lr=c.min_lr, warmup_steps=c.warmup_steps, total_steps=c.steps,
                     cooldown=c.cooldown)

    @property
    def evaluated_model(self) -> nn.Module:
        """The model that evaluations score: the weights' moving average with ``config.ema``, else
        the model itself."""
        return self.average.module if self.average is not None else self.model

    def evaluate(self) -> float:
        """The validation loss now (nats per character, whole split) of :attr:`evaluated_model`."""
        return evaluate(self.evaluated_model, self.val_data, self.config.evaluation_context,
                        self.config.eval_batch_size, self.precision)

    def train(self, until: int | None = None,
              on_eval: Callable[[Trainer, dict], None] | None = None,
              target_loss: float | None = None) -> list[dict]:
        """Train from the current step up to step ``until`` (default: ``config.steps``), evaluating as
        the config says; ``on_eval(trainer, record)`` is called after each evaluation (e.g. to save a
        checkpoint). With ``target_loss``, stop after the first evaluation whose validation loss is
        at or below it; ``reached_target`` then holds that evaluation's record (None otherwise).
        Returns ``history``. Dropout draws from the trainer's own generator states
        (:mod:`~course_lib.training.randomness`); the caller's are left as they were."""
        with drawing_from(self.rng, self.device):
            self._drawing = True
            try:
                return self._train(until, on_eval, target_loss)
            finally:
                self.rng = current_states(self.device)
                self._drawing = False

    def _train(self, until: int | None, on_eval: Callable[[Trainer, dict], None] | None,
               target_loss: float | None) -> list[dict]:
        c = self.config
        if target_loss is not None and not (isinstance(target_loss, (int, float))
                                            and not isinstance(target_loss, bool)
                                            and math.isfinite(target_loss) and target_loss > 0):
            raise ValueError(f"target_loss ({target_loss!r}) must be a finite number > 0 (nats)")
        self.reached_target = None
        until = c.steps if until is None else until
        if isinstance(until, bool) or not isinstance(until, int) or not self.step <= until <= c.steps:
            raise ValueError(f"until ({until}) must be an int between the current step ({self.step}) "
                             f"and config.steps ({c.steps})")
        bar = self._progress_bar(until)
        model, tokens_per_step = self.model, c.tokens_per_step
        model.train()
        started = time.perf_counter() - self.elapsed
        losses: list[torch.Tensor] = []  # this interval's losses, read at the next evaluation
        norms: list[torch.Tensor] = []  # and gradient norms
        postfix: dict[str, str] = {}  # what the bar shows after the counts

        def record() -> None:
            step_losses = [loss.item() for loss in losses]
            self.grad_norms += [norm.item() for norm in norms]
            losses.clear()
            norms.clear()
            self.step_losses += step_losses
            self._interval_loss += sum(step_losses)
            self._interval_steps += len(step_losses)
            self.elapsed = time.perf_counter() - started
            if not self._due(self.step):
                return
            val_loss = self.evaluate()
            self.elapsed = time.perf_counter() - started
            n = self._interval_steps
            entry = {
                "step": self.step,
                "train_loss": self._interval_loss / n if n else None,
                "val_loss": val_loss,
                "val_bits_per_char": bits_per_char(val_loss),
                "lr": self.lr(self.step - 1) if self.step else 0.0,
                "tokens": self.step * tokens_per_step,
                "tokens_per_second": n * tokens_per_step / self._interval_seconds if n else None,
                "elapsed_seconds": self.elapsed,
            }
            self.history.append(entry)
            self._interval_loss, self._interval_steps, self._interval_seconds = 0.0, 0, 0.0
            if bar is not None:
                postfix["val"] = f"{val_loss:.3f}"
                bar.set_postfix(postfix, refresh=False)
                train = entry["train_loss"]  # None before the first step
                bar.write(f"step {self.step:5d}: val loss {val_loss:.4f} nats/char "
                          f"({bits_per_char(val_loss):.3f} bits)"
                          + ("" if train is None else f", train {train:.4f}")
                          + f", {self.elapsed:.1f} s")
            if on_eval is not None:
                on_eval(self, entry)

        def met(evaluations: int) -> bool:
            """Did an evaluation just happen (history grew past ``evaluations``) and meet the target?"""
            if target_loss is None or len(self.history) == evaluations:
                return False
            if self.history[-1]["val_loss"] <= target_loss:
                self.reached_target = self.history[-1]
            return self.reached_target is not None

        if self.step == 0 and c.eval_at_start and not self.history:
            record()
            if met(0):
                if bar is not None:
                    close_progress_bar(bar)
                return self.history
        shown_at = time.perf_counter()
        shown_steps = 0
        try:
            while self.step < until:
                tick = time.perf_counter()
                x, y = get_batch(self.train_data, c.batch_size, c.context, self.generator)  # (B, T)
                x, y = rank_rows(x, self.world), rank_rows(y, self.world)  # (B / N, T): this rank's
                scale = self.scaler.get_scale() if self.scaler is not None else None
                loss, norm = train_step(self.step_model, self.optimizer, x, y, self.lr(self.step),
                                        c.grad_clip, return_grad_norm=True, grad_accum=c.grad_accum,
                                        precision=self.precision, scaler=self.scaler)
                if self.average is not None:
                    self.average.update_parameters(model)  # θ̄ ← β θ̄ + (1 − β) θ
                losses.append(mean_over_ranks(loss, self.world))  # the whole batch's loss
                norms.append(norm)
                self.step += 1
                if scale is not None and self.scaler.get_scale() < scale:  # overflow: step skipped
                    self.skipped_steps.append(self.step)
                    message = (f"step {self.step}: float16 gradients overflowed; step skipped, loss "
                               f"scale lowered to {self.scaler.get_scale():g}")
                    if bar is not None:
                        bar.write(message)
                    elif self.world.is_main:
                        print(message, flush=True)
                show = bar is not None and (time.perf_counter() - shown_at > 0.5 or self.step == until)
                due = self._due(self.step) or self.step == until
                if show or due:  # the clock is read for a rate: the GPU's queued work counts first
                    synchronize(self.device)
                self._interval_seconds += time.perf_counter() - tick
                shown_steps += 1
                if show:
                    loss = losses[-1].item()
                    now = time.perf_counter()
                    postfix.update(loss=f"{loss:.3f}", bpc=f"{bits_per_char(loss):.2f}",
                                   tok_s=f"{shown_steps * tokens_per_step / (now - shown_at):,.0f}")
                    bar.set_postfix(postfix, refresh=False)
                    bar.update(shown_steps)
                    shown_at, shown_steps = now, 0
                if due:
                    evaluations = len(self.history)
                    record()
                    if met(evaluations):
                        break
        finally:
            if bar is not None:
                close_progress_bar(bar)
        return self.history

    def _due(self, step: int) -> bool:
        """Is an evaluation due after ``step`` steps?"""
        c = self.config
        if step == 0:
            return c.eval_at_start
        return step % c.eval_interval == 0 or step == c.steps

    def _progress_bar(self, until: int):
        return progress_bar(until, initial=self.step) if self.progress else None

    # --- checkpoints -------------------------------------------------------------------------------

    def state(self) -> dict:
        """Everything needed to continue exactly, as tensors and plain Python values."""
        rng = current_states(self.device) if self._drawing else self.rng
        return {
            "format": CHECKPOINT_FORMAT,
            "model_config": dataclasses.asdict(self.model.config),
            "train_config": dataclasses.asdict(self.config),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "batch_generator": self.generator.get_state(),
            # dropout's generators (randomness.py): where they are now during train(), else kept
            "dropout_rng_cpu": rng["cpu"],
            "dropout_rng_cuda": rng["cuda"],
            "history": [dict(r) for r in self.history],
            "step_losses": torch.tensor(self.step_losses, dtype=torch.float64),
            "grad_norms": torch.tensor(self.grad_norms, dtype=torch.float64),
            "interval": [self._interval_loss, self._interval_steps, self._interval_seconds],
            "elapsed_seconds": self.elapsed,
            "vocab": self.vocab,
            "precision": self.precision,
            "grad_scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "skipped_steps": list(self.skipped_steps),
            # with config.ema: the averaged weights (keys as "model"'s), updated once per step
            "averaged_model": self.average.module.state_dict() if self.average is not None else None,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write a checkpoint atomically (see :func:`save_checkpoint`)."""
        save_checkpoint(self.state(), path)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, model: nn.Module, train_data: torch.Tensor,
                        val_data: torch.Tensor, config: TrainConfig, *, progress: bool = True,
                        world: World | None = None) -> Trainer:
        """The trainer saved in ``path``, continuing with ``model`` (whose config must equal the
        checkpoint's) and ``config`` (likewise): weights, optimiser state, step, the batch generator,
        the log. A mismatch raises an error naming the field."""
        state = load_checkpoint(path, model_config=model.config, train_config=config)
        trainer = cls(model, train_data, val_data, config, progress=progress, vocab=state.get("vocab"),
                      world=world)
        model.load_state_dict(state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.step = state["step"]
        trainer.generator.set_state(state["batch_generator"])
        # dropout draws on where the saved run had got to (checkpoints from before the trainer kept
        # its generators have none: the seed's fresh states then; a CPU run resumed on a GPU, the
        # device's fresh state)
        if state.get("dropout_rng_cpu") is not None:
            trainer.rng["cpu"] = state["dropout_rng_cpu"]
        if state.get("dropout_rng_cuda") is not None and trainer.device.type == "cuda":
            trainer.rng["cuda"] = state["dropout_rng_cuda"]
        trainer.history = [dict(r) for r in state["history"]]
        trainer.step_losses = state["step_losses"].tolist()
        trainer.grad_norms = state["grad_norms"].tolist() if "grad_norms" in state else []
        trainer._interval_loss, trainer._interval_steps, trainer._interval_seconds = state["interval"]
        trainer.elapsed = state["elapsed_seconds"]
        # The run keeps the precision it started in (float32 for checkpoints from before it was
        # recorded). An explicit precision must equal the checkpoint's config (load_checkpoint checks
        # it); "auto" may resolve differently on another device, and then the saved one wins.
        saved = state.get("precision", "float32")
        if saved != trainer.precision:
            trainer.precision = resolve_precision(saved, trainer.device)
            trainer.scaler = make_grad_scaler(trainer.precision, trainer.device)
        if trainer.scaler is not None and state.get("grad_scaler"):
            trainer.scaler.load_state_dict(state["grad_scaler"])
        trainer.skipped_steps = list(state.get("skipped_steps", []))
        if trainer.average is not None:
            trainer.average.module.load_state_dict(state["averaged_model"])
            trainer.average.n_averaged.fill_(trainer.step)  # one update per step taken
        return trainer
