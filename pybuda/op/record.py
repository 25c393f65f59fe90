"""Recording ops while tracing: what every ``pybuda.op.*`` function calls.

``record(op_type, name, operands, **attrs)`` validates the call against the registry (operand count,
attributes, shapes), evaluates it eagerly in torch when every operand has a value, and returns a
Tensor that remembers the :class:`TracedOp` that produced it. The graph is built afterwards by
walking back from a module's outputs (see :mod:`pybuda.ir.builder`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence

import torch

from pybuda.errors import ModuleError, OpError
from pybuda.ops import registry
from pybuda.tensor import Tensor, pytorch_dtype_to_buda_dataformat

from pybuda.dtypes import DataFormat
_ids = itertools.count()
_state = threading.local()


@dataclass(eq=False)
class TracedOp:
    """One recorded op call: its registry type, unique name, operand tensors and validated attributes."""

    op_type: str
    name: str
    operands: List[Tensor]
    attrs: Dict[str, Any]
    layer: Optional[str] = None
    tags: Dict[str, Any] = field(default_factory=dict)


class TraceScope:
    """Names used by one trace; a second op with a name already used is an error at the call site."""

    def __init__(self, module_name: str):
        self.module_name = module_name
        self.ops: Dict[str, TracedOp] = {}

    def claim(self, name: str, op_type: str) -> None:
        if name in self.ops:
            other = self.ops[name]
            raise ModuleError(f"module '{self.module_name}': two ops are named '{name}' "
                              f"({other.op_type} and {op_type}); op names must be unique within a module")


@contextlib.contextmanager
def trace_scope(module_name: str) -> Iterator[TraceScope]:
    """Activate a fresh naming scope for tracing one module's forward."""
    scope = TraceScope(module_name)
    previous = getattr(_state, "scope", None)
    _state.scope = scope
    try:
        yield scope
    finally:
        _state.scope = previous


def current_scope() -> Optional[TraceScope]:
    return getattr(_state, "scope", None)


def auto_name(op_type: str) -> str:
    return f"{op_type}_{next(_ids)}"


def as_operand(value: Any, op_type: str, index: int, op_name: str) -> Tensor:
    """Accept pybuda Tensors and Parameters; python numbers become constants (as in TT-Buda)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Tensor.create_from_torch(torch.tensor([float(value)]), constant=True)
    if isinstance(value, torch.Tensor):
        raise OpError(op_type, f"operand {index} is a torch.Tensor; wrap it with pybuda.Tensor.create_from_torch() "
                               f"or pass it as a module input", op_name)
    raise OpError(op_type, f"operand {index} must be a pybuda Tensor or Parameter, got {type(value).__name__}", op_name)


def op_function(fn):
    """Decorator for ``pybuda.op`` functions.

    Older TT-Buda docs (and the seed BudaMatmul example) call ops as ``Matmul(self, "name", ...)``,
    passing the module first; that form is accepted by dropping a leading Module argument.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from pybuda.module import Module

        if args and isinstance(args[0], Module):
            args = args[1:]
        if args and not isinstance(args[0], str) and "name" not in kwargs:
            raise OpError(fn.__name__, f"the first argument must be the op name (a str, '' to auto-name), "
                                       f"got {type(args[0]).__name__}")
        return fn(*args, **kwargs)

    return wrapper


def record(op_type: str, name: str, operands: Sequence[Any], **attrs: Any) -> Tensor:
    """Record one op call and return its output tensor (with a value when all operands have one)."""
    if not isinstance(name, str):
        raise OpError(op_type, f"the first argument must be the op name (a str, '' to auto-name), got {type(name).__name__}")
    op_name = name or auto_name(op_type)
    tensors = [as_operand(v, op_type, i, op_name) for i, v in enumerate(operands)]
    shape, dtype, full_attrs = registry.infer(op_type, [tuple(t.shape.dims) for t in tensors],
                                              [t.dtype for t in tensors], attrs, op_name=op_name)
    scope = current_scope()
    if scope is not None:
        scope.claim(op_name, op_type)
    traced = TracedOp(op_type, op_name, tensors, full_attrs, layer=scope.module_name if scope else None)
    if scope is not None:
        scope.ops[op_name] = traced
    df = _output_format(op_type, tensors, dtype)
    out = Tensor.create_from_trace(traced, shape, df, dtype=dtype)
    out.requires_grad = any(t.requires_grad for t in tensors)
    if tensors and all(t.has_value() for t in tensors) or (not tensors):
        value = registry.evaluate(op_type, [t.value() for t in tensors], full_attrs)
        out.set_value(value)
    return out


def _output_format(op_type: str, operands: List[Tensor], dtype: torch.dtype) -> DataFormat:
    # TT-Buda: Int8 x Int8 matmul/conv gives Int32; `where` takes operand 1's format; else operand 0's.
    # When the op changes the dtype (cast, quantize, int -> float math), the format follows the dtype.
    if not operands:
        return pytorch_dtype_to_buda_dataformat(dtype)
    if op_type in ("matmul", "conv2d") and all(t.data_format == DataFormat.Int8 for t in operands[:2]):
        return DataFormat.Int32
    if op_type == "where" and len(operands) > 1 and dtype == operands[1].dtype:
        return operands[1].data_format
    if dtype != operands[0].dtype:
        return pytorch_dtype_to_buda_dataformat(dtype)
    return operands[0].data_format
