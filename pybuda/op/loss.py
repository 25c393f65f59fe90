"""``pybuda.op.loss``: loss modules built from ops, as TT-Buda builds them. ``forward(prediction, labels)``.

Reductions follow TT-Buda: over the last two dims (R, then C) for L1/MSE, and for cross-entropy a sum
over classes (the last dim) followed by a mean over rows (dim -2). Outputs keep their rank (reduced
dims have size 1).
"""

from __future__ import annotations

from pybuda.errors import ModuleError
from pybuda.module import PyBudaModule
from pybuda.op.eltwise import Abs, Exp, Log, Multiply, Subtract
from pybuda.op.misc import Constant
from pybuda.op.reduce import ReduceAvg, ReduceSum
from pybuda.tensor import Tensor

__all__ = ["CrossEntropyLoss", "L1Loss", "MSELoss"]

_REDUCTIONS = ("avg", "sum", "none")


class CrossEntropyLoss(PyBudaModule):
    """Cross-entropy of logits against (one-hot or soft) labels of the same shape.

    loss = mean over rows of sum over classes of -labels * (logits - log(sum(exp(logits)))). Like
    TT-Buda it does not subtract the row max first, so very large logits overflow exp.
    """

    def forward(self, predictions: Tensor, labels: Tensor) -> Tensor:
        """Return the loss, of shape [.., 1, 1]."""
        n = self.name
        exp = Exp(f"{n}.exp", predictions)
        sum_exp = ReduceSum(f"{n}.reduce_sum", exp, dim=-1)
        log_sum_exp = Log(f"{n}.log", sum_exp)
        log_probs = Subtract(f"{n}.subtract", predictions, log_sum_exp)
        neg_log_probs = Multiply(f"{n}.multiply", log_probs, Constant(f"{n}.negative_one_const", constant=-1.0))
        word_losses = Multiply(f"{n}.word_losses", neg_log_probs, labels)
        token_losses = ReduceSum(f"{n}.token_losses", word_losses, dim=-1)
        return ReduceAvg(f"{n}.avg_sequence_loss", token_losses, dim=-2)


class _ElementwiseLoss(PyBudaModule):
    """A per-element loss reduced over R and C by 'avg' (default), 'sum', or not at all ('none')."""

    def __init__(self, name: str, reduction: str = "avg"):
        super().__init__(name)
        if reduction not in _REDUCTIONS:
            raise ModuleError(f"{type(self).__name__} '{name}': reduction must be one of {list(_REDUCTIONS)}, "
                              f"got {reduction!r}")
        self.reduction = reduction

    def elementwise(self, prediction: Tensor, labels: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, prediction: Tensor, labels: Tensor) -> Tensor:
        """Return the loss: reduced to [.., 1, 1], or elementwise for reduction='none'."""
        loss = self.elementwise(prediction, labels)
        if self.reduction == "none":
            return loss
        reduce = ReduceAvg if self.reduction == "avg" else ReduceSum
        rows = reduce(f"{self.name}.r_{self.reduction}", loss, -2)
        return reduce(f"{self.name}.c_{self.reduction}", rows, -1)


class L1Loss(_ElementwiseLoss):
    """|prediction - labels|, reduced over R and C ('avg' | 'sum' | 'none')."""

    def elementwise(self, prediction: Tensor, labels: Tensor) -> Tensor:
        """|prediction - labels|."""
        return Abs(f"{self.name}.abs", Subtract(f"{self.name}.sub", prediction, labels))


class MSELoss(_ElementwiseLoss):
    """(prediction - labels)^2, reduced over R and C ('avg' | 'sum' | 'none')."""

    def elementwise(self, prediction: Tensor, labels: Tensor) -> Tensor:
        """(prediction - labels)^2."""
        diff = Subtract(f"{self.name}.sub", prediction, labels)
        return Multiply(f"{self.name}.square", diff, diff)
