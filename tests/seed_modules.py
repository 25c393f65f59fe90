"""Modules written in the seed documents, shared by the tests that run them (tests/ is on sys.path
through tests/conftest.py)."""

import pybuda
import pybuda.op
from pybuda import PyBudaModule


class BudaMatmul(PyBudaModule):
    """Seed 001, example 2, as written: a matmul against a 32x32 parameter, with the old documented
    ``Matmul(self, name, ...)`` call form."""

    def __init__(self, name):
        super().__init__(name)
        self.weights = pybuda.Parameter(1, 1, 32, 32, requires_grad=False)

    def forward(self, act):
        return pybuda.op.Matmul(self, "matmul", act, self.weights)
