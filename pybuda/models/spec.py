"""`ModelSpec`: what every model-zoo builder returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

import torch


@dataclass
class ModelSpec:
    """A ready-to-run model: an eval-mode torch module, example inputs for one microbatch, and metadata.

    ``module(*example_inputs)`` returns plain tensors (never a ``ModelOutput``) so that ``torch.export``
    captures a clean graph.
    """

    name: str
    variant: str
    module: torch.nn.Module
    example_inputs: Tuple[torch.Tensor, ...]
    input_names: Tuple[str, ...]
    task: str
    description: str
    #: The framework config the module was built from (a transformers config), for reference.
    config: Any = field(default=None, repr=False)
    seed: int = 0
    microbatch: int = 1

    @property
    def full_name(self) -> str:
        """``name_variant[_task]``: a stable identifier for file names and reports."""
        return f"{self.name}_{self.variant}_{self.task}"

    def num_parameters(self) -> int:
        """Number of scalar parameters in the module."""
        return sum(p.numel() for p in self.module.parameters())

    def run(self, *inputs: torch.Tensor) -> Any:
        """Run the module in PyTorch (no grad) on ``inputs``, or on ``example_inputs`` when none are given."""
        with torch.no_grad():
            return self.module(*(inputs or self.example_inputs))

    def to_pybuda(self, name: Optional[str] = None):
        """Wrap the module as a :class:`pybuda.PyTorchModule` (named ``full_name`` unless ``name`` is given)."""
        from pybuda.module import PyTorchModule  # late: keeps the zoo importable without the rest of pybuda

        return PyTorchModule(name or self.full_name, self.module)
