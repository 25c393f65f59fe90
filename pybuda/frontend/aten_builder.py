"""The ATen mapper's building blocks: the :class:`Builder` that emits registry ops for one FX node, the
value kinds flowing between converters (:class:`Const`, :class:`Missing`), :class:`Unsupported`, the
``@converts`` registry and shared shape/dtype helpers. The converter families (``aten_eltwise``,
``aten_nn``, ``aten_shape``) import this module; :mod:`pybuda.frontend.aten_map` drives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from pybuda.frontend.converters import registrar
from pybuda.errors import OpError
from pybuda.ir.graph import CONSTANT, HOLDS_OPERAND, INPUT, OP, Graph
from pybuda.ops import registry

from pybuda.frontend.fx_program import meta_val, module_path, qualified_op_name, source_location


class Unsupported(Exception):
    """A converter cannot map this call (the message says why)."""


@dataclass(eq=False)
class Const:
    """A tensor value known at capture time; materialised as a constant node on first use."""

    value: torch.Tensor
    name: str


@dataclass(eq=False)
class Complex:
    """A complex tensor as two real tensors (graph node names or Consts): the device computes in real formats,
    so complex arithmetic (an FFT, the real or imaginary part of its result) is carried out on the pair. ``im``
    None is an imaginary part of zeros. An op that reads it as one tensor is unsupported (CPU fallback)."""

    re: Any
    im: Any = None


@dataclass(eq=False)
class RealView:
    """``view_as_real`` of a :class:`Complex`: ``[..., 2]`` with the real and imaginary parts on the last dim.
    Selecting either part reads it directly; any other use stacks the two (once)."""

    value: Complex
    stacked: Optional[str] = None


@dataclass(frozen=True)
class Missing:
    """A result that pybuda does not compute; ``reason`` says which."""

    reason: str


Converter = Callable[["Builder", torch.fx.Node, Dict[str, Any]], Any]
CONVERTERS: Dict[str, Converter] = {}
#: ``@converts("add", ...)`` registers a converter for ATen ops (overload packet names, e.g. ``'add'``).
converts = registrar(CONVERTERS, "ATen op")


def _dtype_str(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class Builder:
    """Emits registry ops into an ir.Graph on behalf of one FX node at a time.

    Op names derive from the FX node (the first op takes the node's name, helpers get suffixes), and
    every op is tagged with the model source line (``tags['source']``), the module path
    (``tags['layer']``) and the ATen op (``tags['aten']``). Ops whose operands are all constants are
    evaluated right away and stored as constants (constant folding at construction).
    """

    def __init__(self, graph: Graph, fold_constants: bool = True):
        self.graph = graph
        self.fold_constants = fold_constants
        self._const_nodes: Dict[int, str] = {}
        self._scalar_nodes: Dict[Tuple[Any, ...], str] = {}
        self.node: Optional[torch.fx.Node] = None
        self.op_types: List[str] = []  # registry ops emitted for the current node
        self._tags: Dict[str, Any] = {}

    # --- context ---
    def begin(self, node: torch.fx.Node) -> None:
        """Start emitting ops for FX ``node`` (sets names and tags)."""
        self.node = node
        self.op_types = []
        self._tags = {"source": source_location(node), "aten": qualified_op_name(node.target)}
        layer = module_path(node)
        if layer:
            self._tags["layer"] = layer

    def _name(self, op_type: str) -> str:
        # Helpers are named "<fx node>.<op type>"; the op producing the node's value is renamed to the
        # FX node's own name when the node is done (see finish()).
        base = self.node.name if self.node is not None else op_type
        return self.graph.unique_name(f"{base}.{op_type}")

    def finish(self, value: Any) -> Any:
        """Give the op that produces the current node's value the FX node's name (when it is free)."""
        if not isinstance(value, str) or self.node is None:
            return value
        base = self.node.name
        nodes = self.graph.nodes
        if base in nodes or value not in nodes or nodes[value].kind != OP or not value.startswith(base + "."):
            return value
        if next(reversed(nodes)) != value:
            return value  # only the newest node can be renamed without touching its users
        node = nodes.pop(value)
        node.name = base
        nodes[base] = node
        return base

    # --- queries ---
    def shape(self, v: Any) -> Tuple[int, ...]:
        """Static shape of a tensor value (node name or Const)."""
        if isinstance(v, Const):
            return tuple(v.value.shape)
        return self.graph[self.tensor(v)].shape

    def dtype(self, v: Any) -> torch.dtype:
        """dtype of a tensor value (node name or Const)."""
        if isinstance(v, Const):
            return v.value.dtype
        return self.graph[self.tensor(v)].dtype

    def rank(self, v: Any) -> int:
        """Rank of a tensor value."""
        return len(self.shape(v))

    @staticmethod
    def is_tensor(v: Any) -> bool:
        """True for tensor values (graph node names and Consts), False for Python scalars etc."""
        return isinstance(v, (str, Const))

    # --- operands ---
    def tensor(self, v: Any, dtype: Optional[torch.dtype] = None) -> str:
        """``v`` as a graph node name (materialising constants and scalars), cast to ``dtype`` if given."""
        if isinstance(v, Missing):
            raise Unsupported(f"uses a result pybuda does not compute ({v.reason})")
        if isinstance(v, Complex):
            raise Unsupported("reads a complex tensor as one tensor (the device computes in real formats)")
        if isinstance(v, RealView):
            if v.stacked is None:
                v.stacked = self.op("stack", [v.value.re, self.imaginary(v.value)], axis=self.rank(v.value.re))
            return self.tensor(v.stacked, dtype)
        if isinstance(v, str):
            name = v
        elif isinstance(v, Const):
            value = v.value
            if dtype is not None and value.dtype != dtype:
                return self.const(value.to(dtype), f"{v.name}.{_dtype_str(dtype)}")
            key = id(v)
            name = self._const_nodes.get(key)
            if name is None:
                name = self.const(value, v.name)
                self._const_nodes[key] = name
        elif isinstance(v, (bool, int, float)):
            return self.scalar(v, dtype or _scalar_dtype(v))
        elif isinstance(v, torch.Tensor):
            return self.const(v.detach(), "const")
        else:
            raise Unsupported(f"operand of type {type(v).__name__} is not a tensor")
        if dtype is not None and self.graph[name].dtype != dtype:
            return self.cast(name, dtype)
        return name

    def const(self, value: torch.Tensor, name: str = "const") -> str:
        """Add a constant node holding ``value``."""
        return self.graph.add_constant(self.graph.unique_name(name), value.detach()).name

    def scalar(self, value: Any, dtype: torch.dtype, rank: int = 1) -> str:
        """A one-element constant (shape (1,), or () with rank 0) of ``dtype``, shared by equal scalars."""
        key = (type(value), value, dtype, rank)
        name = self._scalar_nodes.get(key)
        if name is None:
            shape = (1,) if rank else ()
            name = self.const(torch.full(shape, value, dtype=dtype), "const")
            self._scalar_nodes[key] = name
        return name

    # --- ops ---
    def op(self, op_type: str, operands: Sequence[Any], **attrs: Any) -> str:
        """Add registry op ``op_type`` on ``operands`` (names, Consts or scalars); returns the node name."""
        names = [self.tensor(o) for o in operands]
        name = self._name(op_type)
        try:
            node = self.graph.add_op(name, op_type, names, attrs, tags=self._tags)
        except OpError as e:
            raise Unsupported(f"pybuda op '{op_type}' rejected the call: {e}") from None
        self.op_types.append(op_type)
        if self.fold_constants and op_type != "dropout" and names and \
                all(self.graph[n].kind == CONSTANT for n in names):
            value = registry.evaluate(op_type, [self.graph.tensors[n] for n in names], node.attrs)
            del self.graph.nodes[name]
            self.graph.add_constant(name, value)
        return node.name

    def reads_inputs(self, v: Any) -> bool:
        """Whether tensor value ``v`` is computed from a graph input (is per-sample), not only from parameters
        and constants."""
        return isinstance(v, str) and any(node.kind == INPUT for node in self.graph.ancestry(v))

    def cast(self, v: Any, dtype: torch.dtype) -> str:
        """``v`` in ``dtype`` (a cast op only when the dtype differs)."""
        name = self.tensor(v)
        if self.graph[name].dtype == dtype:
            return name
        return self.op("cast", [name], dtype=_dtype_str(dtype))

    def reshape(self, v: Any, shape: Sequence[int]) -> str:
        """``v`` reshaped to ``shape`` (no op when it already has it)."""
        name = self.tensor(v)
        shape = tuple(int(d) for d in shape)
        if self.graph[name].shape == shape:
            return name
        return self.op("reshape", [name], shape=shape)

    def transpose(self, v: Any, dim0: int, dim1: int) -> str:
        """``v`` with two dims swapped (no op when they are the same dim)."""
        rank = self.rank(v)
        d0, d1 = dim0 % rank, dim1 % rank
        if d0 == d1:
            return self.tensor(v)
        return self.op("transpose", [v], dim0=d0, dim1=d1)

    def broadcast_to(self, v: Any, shape: Sequence[int]) -> str:
        """Broadcast (torch ``expand`` rules) to ``shape`` with reshape + per-dim broadcast ops."""
        name = self.tensor(v)
        shape = tuple(int(d) for d in shape)
        cur = self.graph[name].shape
        if len(cur) < len(shape):
            name = self.reshape(name, (1,) * (len(shape) - len(cur)) + cur)
            cur = self.graph[name].shape
        for d, (have, want) in enumerate(zip(cur, shape)):
            if have != want:
                if have != 1:
                    raise Unsupported(f"cannot broadcast shape {list(cur)} to {list(shape)}")
                name = self.op("broadcast", [name], dim=d, shape=want)
        return name

    def binary(self, op_type: str, a: Any, b: Any, dtype: torch.dtype) -> str:
        """Elementwise binary op with both operands (tensors or scalars) in ``dtype``."""
        rank = max(self.rank(x) if self.is_tensor(x) else 0 for x in (a, b))
        ops = [self.scalar(x, dtype, rank) if isinstance(x, (bool, int, float)) else self.tensor(x, dtype)
               for x in (a, b)]
        return self.op(op_type, ops)

    def imaginary(self, v: Complex) -> str:
        """The imaginary part of ``v`` as a tensor (zeros when it has none)."""
        if v.im is not None:
            return self.tensor(v.im)
        return self.const(torch.zeros(self.shape(v.re), dtype=self.dtype(v.re)), "zeros")

    def negative(self, x: Any, dtype: torch.dtype) -> str:
        """``-x`` as ``0 - x``: exact, where a multiply by -1 reads ``x`` through the multiplier's source
        registers (10 mantissa bits or fewer: a Float32 value loses the rest)."""
        return self.binary("subtract", 0, x, dtype)


def _scalar_dtype(v: Any) -> torch.dtype:
    if isinstance(v, bool):
        return torch.bool
    if isinstance(v, int):
        return torch.int64
    return torch.float32


# --- helpers for converters -----------------------------------------------------------------------
def out_shape(n: torch.fx.Node) -> Tuple[int, ...]:
    """The static shape torch recorded for FX node ``n``."""
    val = meta_val(n)
    return tuple(int(d) for d in val.shape)


def out_dtype(n: torch.fx.Node) -> torch.dtype:
    """The dtype torch recorded for FX node ``n``; for a complex node, the dtype of its real and imaginary parts
    (the device holds a complex value as a :class:`Complex` pair)."""
    dtype = meta_val(n).dtype
    return dtype.to_real() if dtype.is_complex else dtype


def _norm_dim(dim: int, rank: int) -> int:
    if rank == 0:
        return 0
    return dim % rank


def _dims(dim: Any, rank: int) -> List[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({_norm_dim(d, rank) for d in dim})


def _is_number(v: Any) -> bool:
    return isinstance(v, (bool, int, float))


def _probe(b: Builder, v: Any) -> Any:
    if b.is_tensor(v):
        return torch.empty((1,) if b.rank(v) else (), dtype=b.dtype(v))
    return v


def _promote(b: Builder, x: Any, y: Any) -> torch.dtype:
    """torch's type promotion of two operands (tensors or Python scalars), e.g. for comparisons."""
    px, py = _probe(b, x), _probe(b, y)
    if not isinstance(px, torch.Tensor) and not isinstance(py, torch.Tensor):
        return torch.result_type(torch.tensor(px), py)
    return torch.result_type(px, py)


def out_shape_of(n: torch.fx.Node, i: int) -> Tuple[int, ...]:
    """Static shape of result ``i`` of a multi-result FX node."""
    return tuple(int(d) for d in meta_val(n)[i].shape)


def negated(b: Builder, v) -> str:
    """``0 - v``, how a min is the max of a negation: exact where a multiply by -1 would read ``v`` through the
    multiplier's 19-bit source registers (the min of Float32 data would equal none of its elements). Tagged
    ``HOLDS_OPERAND``, so that its data formats hold ``v``'s values too."""
    name = b.negative(v, b.dtype(v))
    if b.graph[name].kind == OP:  # not folded into a constant
        b.graph[name].tags[HOLDS_OPERAND] = 1
    return name


def _reduce_max_or_min(b: Builder, x, dims, keepdim, is_min, final_shape):
    rank = b.rank(x)
    v = b.tensor(x)
    if is_min:
        v = negated(b, v)
    for d in _dims(dims, rank):
        if b.graph[v].shape[d] != 1:
            v = b.op("reduce_max", [v], dim=d)
    if is_min:
        v = negated(b, v)
    return b.reshape(v, final_shape)

def _as_bool(b: Builder, v) -> str:
    name = b.tensor(v)
    if b.dtype(name) != torch.bool:
        name = b.cast(b.binary("not_equal", name, 0, b.dtype(name)), torch.bool)
    return name
