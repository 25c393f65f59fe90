"""The contract between the ONNX importer and its op converters (:mod:`pybuda.frontend.onnx.ops`).

A converter is registered with ``@converts("OpType", ...)`` in :data:`CONVERTERS` and called with a
:class:`NodeCtx`: one ONNX node's inputs (graph values or import-time constants), its validated
attributes (:class:`OnnxAttributeError` for a bad one), its static output shapes and dtypes, and the
:class:`OnnxBuilder` that emits registry ops. Float initializers reach converters as :class:`Param`.
Infinite constants enter the device graph as a finite stand-in (:data:`INF_STANDIN`). The importer
that walks a model's nodes is :mod:`pybuda.frontend.onnx.importer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch

from pybuda.errors import CompileError
from pybuda.frontend.aten_builder import Builder, Const, Unsupported
from pybuda.frontend.converters import registrar
from pybuda.frontend.onnx.model import onnx
from pybuda.ir.graph import Graph

if TYPE_CHECKING:
    from pybuda.frontend.onnx.importer import _Importer

STAGE = "GENERATE_INITIAL_GRAPH"


@dataclass(eq=False)
class Param(Const):
    """A float initializer: a parameter of the device graph (its value is readable as a static input too)."""


class OnnxAttributeError(CompileError):
    """An ONNX node carries an attribute value that the op does not accept."""


#: The device's stand-in for an infinite constant (a ``-inf`` mask fill, an open Clip bound): 2**125. The
#: chip's formats saturate or turn ``0 * inf`` into NaN (``where`` blends its branches arithmetically), so an
#: infinite constant enters the device graph as this finite value; its exp after softmax's max subtraction
#: is 0 as inf's would be, and up to eight of them add up without overflowing Float32 (a causal mask plus an
#: attention mask stay "-inf" rather than becoming a real -inf whose difference is NaN). A device output
#: value at least this large in magnitude is infinite again on the host (:func:`restore_infinities`), and
#: ``Equal`` against infinity compares against it. Float16 data (largest value 65504) uses
#: :data:`INF_STANDIN_FP16` instead, for the same reasons at its scale (three masks add up to 49152).
INF_STANDIN = 2.0 ** 125
INF_STANDIN_FP16 = 2.0 ** 14


def inf_standin(dtype: torch.dtype) -> float:
    """The device's stand-in for infinity in data of ``dtype``."""
    return INF_STANDIN_FP16 if dtype == torch.float16 else INF_STANDIN


def finite_standins(value: torch.Tensor) -> torch.Tensor:
    """``value`` with +-inf replaced by the stand-in of its dtype (float tensors; others unchanged)."""
    if value.dtype.is_floating_point and value.numel() and bool(torch.isinf(value).any()):
        return torch.where(torch.isinf(value), torch.sign(value) * inf_standin(value.dtype), value).to(value.dtype)
    return value


def restore_infinities(value: Any) -> Any:
    """A device output with every value at least its dtype's stand-in in magnitude turned back into +-inf."""
    if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
        big = value.abs() >= inf_standin(value.dtype)
        return torch.where(big, torch.sign(value) * math.inf, value).to(value.dtype)
    return value


class OnnxBuilder(Builder):
    """The torch frontend's Builder, driven by ONNX nodes instead of FX nodes."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self._param_nodes: Dict[int, str] = {}

    def begin_onnx(self, node: "onnx.NodeProto", label: str) -> None:
        """Start emitting ops for ONNX ``node`` (``label`` names the ops)."""
        self.node = _NameOnly(label)
        self.op_types = []
        self._tags = {"onnx": node.op_type, "source": f"onnx node '{node.name or label}'"}

    def const(self, value: torch.Tensor, name: str = "const") -> str:
        """A constant node; infinities become :data:`INF_STANDIN` (see there)."""
        return super().const(self._standins(value), name)

    def _standins(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` with infinities as the stand-in; the graph remembers that it holds one, so that only its
        outputs are turned back into infinities (a model without infinities keeps its large values)."""
        finite = finite_standins(value)
        if finite is not value:
            self.graph.inf_standins = True
        return finite

    def tensor(self, v: Any, dtype: Optional[torch.dtype] = None) -> str:
        if isinstance(v, Param):
            name = self._param_nodes.get(id(v))
            if name is None:
                name = self.graph.add_parameter(self.graph.unique_name(v.name), self._standins(v.value),
                                                requires_grad=False).name
                self._param_nodes[id(v)] = name
            if dtype is not None and self.graph[name].dtype != dtype:
                return self.cast(name, dtype)
            return name
        if v is None:
            raise Unsupported("uses an absent optional input")
        return super().tensor(v, dtype)


@dataclass
class _NameOnly:
    name: str


# --- the per-node context handed to converters ------------------------------------------------------
_REQUIRED = object()


class NodeCtx:
    """What a converter sees of one ONNX node: its inputs (graph values or constants), validated
    attributes, the static output shapes/dtypes, and the builder."""

    def __init__(self, imp: "_Importer", node: "onnx.NodeProto", label: str, inputs: List[Any]):
        self.imp = imp
        self.node = node
        self.label = label
        self.b: OnnxBuilder = imp.b
        self.inputs = inputs
        self.opset = imp.opset
        self.attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        self._used: Set[str] = set()

    @property
    def op_type(self) -> str:
        return self.node.op_type

    # --- inputs ---
    def has(self, i: int) -> bool:
        """True when optional input ``i`` is given."""
        return i < len(self.inputs) and self.inputs[i] is not None

    def x(self, i: int, dtype: Optional[torch.dtype] = None) -> str:
        """Input ``i`` as a graph node name (cast to ``dtype`` if given)."""
        if not self.has(i):
            raise self.bad(f"input {i} is required")
        return self.b.tensor(self.inputs[i], dtype)

    def value(self, i: int) -> Any:
        """Input ``i`` as the raw value (node name, Const or None)."""
        return self.inputs[i] if i < len(self.inputs) else None

    def const(self, i: int, what: str = "") -> torch.Tensor:
        """Input ``i``'s value when known at import time; Unsupported (runtime-computed) otherwise."""
        v = self.value(i)
        if isinstance(v, Const):
            return v.value
        label = what or f"input {i}"
        raise Unsupported(f"{self.op_type} with a {label} computed at run time (it must be a constant)")

    def ints(self, i: int, what: str = "") -> List[int]:
        """Input ``i`` as a list of Python ints (a static 0-d/1-d tensor)."""
        return [int(v) for v in self.const(i, what).reshape(-1).tolist()]

    def shape(self, i: int) -> Tuple[int, ...]:
        return self.b.shape(self.inputs[i])

    def dtype(self, i: int) -> torch.dtype:
        return self.b.dtype(self.inputs[i])

    def rank(self, i: int) -> int:
        return len(self.shape(i))

    # --- outputs ---
    def out_shape(self, k: int = 0) -> Tuple[int, ...]:
        """Static shape of output ``k`` (from shape inference / the sample run)."""
        info = self.imp.info.get(self.node.output[k])
        if info is None or info[0] is None:
            raise Unsupported(f"the shape of output '{self.node.output[k]}' is unknown")
        return info[0]

    def out_dtype(self, k: int = 0) -> torch.dtype:
        info = self.imp.info.get(self.node.output[k])
        if info is None or info[1] is None:
            raise Unsupported(f"the element type of output '{self.node.output[k]}' is unknown")
        return info[1]

    # --- attributes ---
    def attr(self, name: str, default: Any = _REQUIRED, types: Tuple[type, ...] = (), choices: Sequence[Any] = ()) -> Any:
        """Attribute ``name`` (bytes decoded), checked against ``types``/``choices``; OnnxAttributeError on a
        missing required attribute or a bad value."""
        self._used.add(name)
        if name not in self.attrs:
            if default is _REQUIRED:
                raise self.bad(f"missing required attribute '{name}'")
            return default
        value = self.attrs[name]
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, list):
            value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
        if types and not isinstance(value, types):
            raise self.bad(f"attribute '{name}' must be {' or '.join(t.__name__ for t in types)}, got {value!r}")
        if choices and value not in choices:
            raise self.bad(f"attribute '{name}' must be one of {list(choices)}, got {value!r}")
        return value

    def axis(self, value: int, rank: int, what: str = "axis") -> int:
        """``value`` normalised into ``[0, rank)``; OnnxAttributeError when out of range."""
        if not -max(rank, 1) <= value < max(rank, 1):
            raise self.bad(f"{what} {value} is out of range for a rank-{rank} input")
        return value % rank if rank else 0

    def bad(self, message: str) -> OnnxAttributeError:
        return OnnxAttributeError(f"ONNX node '{self.node.name or self.label}' ({self.op_type}): {message}",
                                  stage=STAGE, op=self.label)


Converter = Callable[[NodeCtx], Any]
#: ONNX op type -> converter (filled by :mod:`pybuda.frontend.onnx.ops`).
CONVERTERS: Dict[str, Converter] = {}
#: ``@converts("Add", ...)`` registers a converter for ONNX op types.
converts = registrar(CONVERTERS, "ONNX op type")


def mapped_op_types() -> List[str]:
    """ONNX op types (default domain) the importer maps onto registry ops, sorted."""
    from pybuda.frontend.onnx import ops  # noqa: F401  (registers the converters)

    return sorted(CONVERTERS)
