"""A PyBudaModule made from a function, shared by the op tests."""

import pybuda


class FnModule(pybuda.PyBudaModule):
    """forward(*inputs) = fn(self, *inputs); ``params`` become frozen Parameters named ``fn.<key>``."""

    def __init__(self, fn, params=None):
        super().__init__("fn")
        self.fn = fn
        for key, value in (params or {}).items():
            setattr(self, key, pybuda.Parameter(value, requires_grad=False))

    def forward(self, *xs):
        return self.fn(self, *xs)
