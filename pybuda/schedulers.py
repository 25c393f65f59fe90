"""Learning-rate schedulers for :mod:`pybuda.optimizers`.

A scheduler owns a step counter (``last_epoch``, 0 at construction, +1 per :meth:`step`) and a formula
``lr_at(step)``. :meth:`LearningRateScheduler.step` pushes the new rate into the optimizer with
``optimizer.set_optimizer_parameters(learning_rate=...)``; the optimizer's update graph reads ``lr`` as a
graph parameter, so the next optimizer step uses it without a rebuild. The sequence is the one the
torch scheduler of the same name gives (``StepLR``, ``ExponentialLR``, ``LambdaLR``: lr after ``k`` calls to
``step()``), and :meth:`get_pytorch_scheduler` returns a torch scheduler that follows this object's formula
for verification against a torch run.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional

import torch

from pybuda.errors import ConfigError
from pybuda.optimizers import Optimizer

__all__ = ["LearningRateScheduler", "StepLR", "ExponentialLR", "LambdaLR", "TorchLearningRateScheduler"]


class TorchLearningRateScheduler(torch.optim.lr_scheduler.LRScheduler):
    """A torch LR scheduler whose every param group's lr is ``lr_at(last_epoch)``: the pybuda scheduler's
    formula, driven by torch's own step counter."""

    def __init__(self, optimizer: torch.optim.Optimizer, lr_at: Callable[[int], float], last_epoch: int = -1):
        self._lr_at = lr_at
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> List[float]:
        lr = float(self._lr_at(self.last_epoch))
        return [lr for _ in self.optimizer.param_groups]


class LearningRateScheduler:
    """Base scheduler: a constant learning rate (the optimizer's rate when the scheduler was made).
    Subclasses override :meth:`lr_at`."""

    def __init__(self, optimizer: Optimizer):
        if not isinstance(optimizer, Optimizer):
            raise ConfigError(f"{type(self).__name__}: optimizer must be a pybuda.optimizers.Optimizer, "
                              f"got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lr: float = float(optimizer.learning_rate)
        self.last_epoch: int = 0

    def lr_at(self, step: int) -> float:
        """The learning rate after ``step`` calls to :meth:`step`."""
        return self.base_lr

    def get_lr(self) -> float:
        """The learning rate for the current step."""
        return float(self.lr_at(self.last_epoch))

    def step(self) -> None:
        """Advance one step and give the optimizer its new learning rate."""
        self.last_epoch += 1
        lr = self.get_lr()
        if not math.isfinite(lr) or lr < 0:
            raise ConfigError(f"{type(self).__name__}: schedule gave an invalid learning rate {lr!r} "
                              f"at step {self.last_epoch}")
        self.optimizer.set_optimizer_parameters(learning_rate=lr)

    def get_scheduler_params(self, param_name: Optional[str] = None, is_buda: bool = False
                             ) -> Dict[str, torch.Tensor]:
        """The optimizer inputs the scheduler drives, as pushed to the device: ``{"lr": (1, 1) tensor}``
        (the same for every parameter; ``param_name`` and ``is_buda`` are for API compatibility)."""
        return {"lr": torch.tensor([[float(self.optimizer.learning_rate)]], dtype=torch.float32)}

    def get_pytorch_scheduler(self, optimizer: torch.optim.Optimizer) -> TorchLearningRateScheduler:
        """A torch scheduler on ``optimizer`` giving this scheduler's learning-rate sequence."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(f"{type(self).__name__}: get_pytorch_scheduler needs a torch.optim.Optimizer, "
                              f"got {type(optimizer).__name__}")
        return TorchLearningRateScheduler(optimizer, self.lr_at)

    def state_dict(self) -> Dict[str, Any]:
        return {"base_lr": self.base_lr, "last_epoch": self.last_epoch}


def _positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return value


def _gamma(owner: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{owner}: gamma must be a positive number, got {value!r}")
    return float(value)


class StepLR(LearningRateScheduler):
    """``lr = base_lr · gamma^(step // step_size)`` (as ``torch.optim.lr_scheduler.StepLR``)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        super().__init__(optimizer)
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = _gamma("StepLR", gamma)

    def lr_at(self, step: int) -> float:
        return self.base_lr * self.gamma ** (step // self.step_size)


class ExponentialLR(LearningRateScheduler):
    """``lr = base_lr · gamma^step`` (as ``torch.optim.lr_scheduler.ExponentialLR``)."""

    def __init__(self, optimizer: Optimizer, gamma: float):
        super().__init__(optimizer)
        self.gamma = _gamma("ExponentialLR", gamma)

    def lr_at(self, step: int) -> float:
        return self.base_lr * self.gamma ** step


class LambdaLR(LearningRateScheduler):
    """``lr = base_lr · lr_lambda(step)`` (as ``torch.optim.lr_scheduler.LambdaLR``), e.g. a warm-up."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]):
        super().__init__(optimizer)
        if not callable(lr_lambda):
            raise ConfigError(f"LambdaLR: lr_lambda must be callable, got {lr_lambda!r}")
        self.lr_lambda = lr_lambda

    def lr_at(self, step: int) -> float:
        return self.base_lr * float(self.lr_lambda(step))
