"""Step 2 of the PyTorch frontend: map ATen ops of an exported FX graph onto pybuda registry ops.

One converter per ATen op (keyed by the overload packet name, e.g. ``"linear"`` for every
``aten.linear.*`` overload) receives the op's arguments bound to their schema names and emits registry
ops through a :class:`Builder`. Where one ATen op needs several pybuda ops (``linear`` is a transpose
plus a matmul with bias; ``permute`` a chain of transposes; ``var`` a mean, a subtraction, a square
and another mean ...) the converter decomposes it here.

A converter that cannot express a particular call raises :class:`Unsupported` with the reason; the
caller then treats the FX node like an op with no converter at all (CPU fallback, or an
:class:`~pybuda.errors.UnsupportedOpError`). After a converter returns, the builder compares the
result against the shape and dtype torch recorded for the node: a rank-only difference is fixed with a
reshape, a dtype difference with a cast, and any other difference makes the node unsupported, so a
mapping bug can never silently produce a wrong graph.

Values flowing between converters are:

- ``str``: the name of an ir.Graph node (a tensor on the device);
- :class:`Const`: a tensor known at capture time (buffer, lifted or folded constant); it becomes a
  constant node only when an op uses it as an operand;
- plain Python values (ints, floats, lists of ints, dtypes, None);
- tuples/lists of the above (ops with several results, e.g. ``split``);
- :class:`Missing`: a result pybuda does not compute (the indices of ``max_pool2d_with_indices``,
  the mean/rstd of ``native_layer_norm``); using one makes the user unsupported.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.fx

from pybuda.errors import OpError
from pybuda.ir.graph import CONSTANT, OP, Graph
from pybuda.ops import registry

from pybuda.frontend.fx_program import bind, meta_val, module_path, op_name, qualified_op_name, source_location


class Unsupported(Exception):
    """A converter cannot map this call (the message says why)."""


@dataclass(eq=False)
class Const:
    """A tensor value known at capture time; materialised as a constant node on first use."""

    value: torch.Tensor
    name: str


@dataclass(frozen=True)
class Missing:
    """A result that pybuda does not compute; ``reason`` says which."""

    reason: str


Converter = Callable[["Builder", torch.fx.Node, Dict[str, Any]], Any]
CONVERTERS: Dict[str, Converter] = {}


def converts(*names: str) -> Callable[[Converter], Converter]:
    """Register a converter for the ATen ops named (overload packet names, e.g. ``'add'``)."""
    def deco(fn: Converter) -> Converter:
        for name in names:
            if name in CONVERTERS:
                raise ValueError(f"converter for '{name}' registered twice")
            CONVERTERS[name] = fn
        return fn
    return deco


def has_converter(target: Any) -> bool:
    """True when the FX call target has a converter (ATen ops by packet name, and ``getitem``)."""
    if target is operator.getitem:
        return True
    if isinstance(target, torch._ops.OpOverload) and target.namespace == "aten":
        return op_name(target) in CONVERTERS
    return False


def mapped_aten_ops() -> List[str]:
    """Names of the ATen ops (overload packets) the frontend maps, sorted."""
    return sorted(CONVERTERS)


# --- the builder ----------------------------------------------------------------------------------
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
    """The dtype torch recorded for FX node ``n``."""
    return meta_val(n).dtype


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


# --- getitem --------------------------------------------------------------------------------------
def convert_getitem(b: Builder, n: torch.fx.Node, container: Any, index: Any) -> Any:
    """``container[index]`` for the results of multi-result ops (no graph op)."""
    if isinstance(container, (list, tuple)):
        return container[index]
    raise Unsupported(f"getitem on a {type(container).__name__}")


# --- elementwise binary ---------------------------------------------------------------------------
@converts("add", "sub", "rsub")
def _add_sub(b: Builder, n, p):
    name = op_name(n.target)
    x, y = p["self"], p["other"]
    if name == "rsub":
        x, y = y, x
    alpha = p.get("alpha", 1)
    dt = out_dtype(n)
    if alpha is not None and alpha != 1:
        y = b.binary("multiply", y, alpha, dt) if b.is_tensor(y) else y * alpha
    if _is_number(x) and _is_number(y):
        raise Unsupported("scalar-only arithmetic")
    return b.binary("subtract" if name in ("sub", "rsub") else "add", x, y, dt)


@converts("mul")
def _mul(b: Builder, n, p):
    return b.binary("multiply", p["self"], p["other"], out_dtype(n))


@converts("div", "true_divide")
def _div(b: Builder, n, p):
    if p.get("rounding_mode") is not None:
        raise Unsupported(f"division with rounding_mode={p['rounding_mode']!r}")
    x, y = p["self"], p["other"]
    dt = out_dtype(n)
    if _is_number(y) and dt.is_floating_point and y != 0:
        # A constant divisor becomes a multiply by its reciprocal (cheaper on the device).
        return b.binary("multiply", x, 1.0 / float(y), dt)
    return b.binary("divide", x, y, dt)


@converts("maximum", "minimum", "fmax", "fmin")
def _maxmin(b: Builder, n, p):
    op = "maximum" if op_name(n.target) in ("maximum", "fmax") else "minimum"
    return b.binary(op, p["self"], p["other"], out_dtype(n))


@converts("max", "min")
def _max_min(b: Builder, n, p):
    name = op_name(n.target)
    overload = n.target._overloadname
    if overload == "other":
        return b.binary("maximum" if name == "max" else "minimum", p["self"], p["other"], out_dtype(n))
    x = p["self"]
    if overload == "dim":
        dims = [p["dim"]]
        keep = p["keepdim"]
        vals = _reduce_max_or_min(b, x, dims, keep, name == "min", out_shape_of(n, 0))
        return vals, _argmax_value(b, x, p["dim"], keep, name == "min", n)
    if overload == "default":
        return _reduce_max_or_min(b, x, None, False, name == "min", out_shape(n))
    raise Unsupported(f"{name}.{overload}")


def out_shape_of(n: torch.fx.Node, i: int) -> Tuple[int, ...]:
    """Static shape of result ``i`` of a multi-result FX node."""
    return tuple(int(d) for d in meta_val(n)[i].shape)


def _reduce_max_or_min(b: Builder, x, dims, keepdim, is_min, final_shape):
    rank = b.rank(x)
    v = b.tensor(x)
    if is_min:
        v = b.binary("multiply", v, -1, b.dtype(v))
    for d in _dims(dims, rank):
        if b.graph[v].shape[d] != 1:
            v = b.op("reduce_max", [v], dim=d)
    if is_min:
        v = b.binary("multiply", v, -1, b.dtype(v))
    return b.reshape(v, final_shape)


def _argmax_value(b: Builder, x, dim, keepdim, is_min, n):
    if len(n.users) and not any(u.target is operator.getitem and u.args[1] == 1 for u in n.users):
        return Missing("argmax of max.dim is unused")
    v = b.tensor(x)
    if is_min:
        v = b.binary("multiply", v, -1, b.dtype(v))
    shape = out_shape_of(n, 1)
    r = b.op("argmax", [v], dim=_norm_dim(dim, b.rank(x)))
    return b.cast(b.reshape(r, shape), meta_val(n)[1].dtype)


@converts("pow")
def _pow(b: Builder, n, p):
    overload = n.target._overloadname
    dt = out_dtype(n)
    if overload == "Tensor_Scalar":
        x, e = b.tensor(p["self"], dt), p["exponent"]
        if e == 1:
            return x
        if e == 2:
            return b.op("square", [x])
        if e == 0.5:
            return b.op("sqrt", [x])
        if e == -1:
            return b.op("reciprocal", [x])
        if e == -0.5:
            return b.op("reciprocal", [b.op("sqrt", [x])])
        return b.op("pow", [x], exponent=float(e))
    if overload == "Scalar":
        return b.binary("power", p["self"], p["exponent"], dt)
    return b.binary("power", p["self"], p["exponent"], dt)


_COMPARE = {"eq": "equal", "ne": "not_equal", "gt": "greater", "lt": "less", "ge": "greater_equal",
            "le": "less_equal"}


@converts(*_COMPARE)
def _compare(b: Builder, n, p):
    x, y = p["self"], p["other"]
    dt = _promote(b, x, y)
    r = b.binary(_COMPARE[op_name(n.target)], x, y, dt)
    return b.cast(r, torch.bool)


def _as_bool(b: Builder, v) -> str:
    name = b.tensor(v)
    if b.dtype(name) != torch.bool:
        name = b.cast(b.binary("not_equal", name, 0, b.dtype(name)), torch.bool)
    return name


@converts("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "__and__",
          "__or__", "__xor__")
def _logical(b: Builder, n, p):
    name = op_name(n.target)
    x, y = p["self"], p["other"]
    if name.startswith("bitwise") or name.startswith("__"):
        if out_dtype(n) != torch.bool:
            raise Unsupported("bitwise ops on integers")
    if _is_number(y):
        y = b.scalar(bool(y), torch.bool, b.rank(x))
    a, c = _as_bool(b, x), _as_bool(b, y)
    kind = name.replace("logical_", "").replace("bitwise_", "").strip("_")
    if kind == "and":
        return b.op("logical_and", [a, c])
    if kind == "or":
        return b.op("logical_not", [b.op("logical_and", [b.op("logical_not", [a]), b.op("logical_not", [c])])])
    return b.op("not_equal", [a, c])


@converts("logical_not", "bitwise_not")
def _logical_not(b: Builder, n, p):
    if op_name(n.target) == "bitwise_not" and out_dtype(n) != torch.bool:
        raise Unsupported("bitwise_not on integers")
    return b.op("logical_not", [_as_bool(b, p["self"])])


@converts("where")
def _where(b: Builder, n, p):
    if n.target._overloadname == "default":
        raise Unsupported("single-argument where (nonzero) has a data-dependent shape")
    dt = out_dtype(n)
    cond, x, y = p["condition"], p["self"], p["other"]
    rank = max(b.rank(v) for v in (cond, x, y) if b.is_tensor(v))
    xs = b.scalar(x, dt, rank) if _is_number(x) else b.tensor(x, dt)
    ys = b.scalar(y, dt, rank) if _is_number(y) else b.tensor(y, dt)
    return b.op("where", [b.tensor(cond), xs, ys])


@converts("masked_fill")
def _masked_fill(b: Builder, n, p):
    dt = out_dtype(n)
    x, mask, value = p["self"], p["mask"], p["value"]
    vs = b.scalar(value, dt, b.rank(x)) if _is_number(value) else b.tensor(value, dt)
    return b.op("where", [b.tensor(mask), vs, b.tensor(x, dt)])


# --- elementwise unary ----------------------------------------------------------------------------
_UNARY = {"abs": "abs", "exp": "exp", "log": "log", "reciprocal": "reciprocal", "sqrt": "sqrt",
          "sigmoid": "sigmoid", "sin": "sine", "cos": "cosine", "tanh": "tanh", "erf": "erf", "square": "square"}


@converts(*_UNARY)
def _unary(b: Builder, n, p):
    return b.op(_UNARY[op_name(n.target)], [b.tensor(p["self"], out_dtype(n))])


@converts("neg")
def _neg(b: Builder, n, p):
    return b.binary("multiply", p["self"], -1, out_dtype(n))


@converts("rsqrt")
def _rsqrt(b: Builder, n, p):
    return b.op("reciprocal", [b.op("sqrt", [b.tensor(p["self"], out_dtype(n))])])


@converts("log1p")
def _log1p(b: Builder, n, p):
    return b.op("log", [b.binary("add", p["self"], 1.0, out_dtype(n))])


@converts("expm1")
def _expm1(b: Builder, n, p):
    dt = out_dtype(n)
    return b.binary("subtract", b.op("exp", [b.tensor(p["self"], dt)]), 1.0, dt)


@converts("relu")
def _relu(b: Builder, n, p):
    return b.op("relu", [p["self"]])


@converts("gelu")
def _gelu(b: Builder, n, p):
    return b.op("gelu", [b.tensor(p["self"], out_dtype(n))], approximate=p.get("approximate") or "none")


@converts("leaky_relu")
def _leaky_relu(b: Builder, n, p):
    return b.op("leaky_relu", [p["self"]], alpha=float(p["negative_slope"]))


@converts("hardtanh", "relu6")
def _hardtanh(b: Builder, n, p):
    if op_name(n.target) == "relu6":
        lo, hi = 0.0, 6.0
    else:
        lo, hi = float(p["min_val"]), float(p["max_val"])
    return b.op("clip", [p["self"]], min=lo, max=hi)


@converts("clamp", "clip", "clamp_min", "clamp_max")
def _clamp(b: Builder, n, p):
    name = op_name(n.target)
    x = p["self"]
    dt = out_dtype(n)
    lo = p.get("min") if name != "clamp_max" else None
    hi = p.get("max") if name != "clamp_min" else None
    if name == "clamp_max":
        hi = p["max"]
    if (lo is None or _is_number(lo)) and (hi is None or _is_number(hi)):
        lo_f = float(lo) if lo is not None else -math.inf
        hi_f = float(hi) if hi is not None else math.inf
        return b.op("clip", [b.tensor(x, dt)], min=lo_f, max=hi_f)
    v = b.tensor(x, dt)
    if lo is not None:
        v = b.binary("maximum", v, lo, dt)
    if hi is not None:
        v = b.binary("minimum", v, hi, dt)
    return v


@converts("silu")
def _silu(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("multiply", [x, b.op("sigmoid", [x])])


def _hardsigmoid_of(b: Builder, x: str, dt) -> str:
    return b.op("clip", [b.binary("add", b.binary("multiply", x, 1.0 / 6.0, dt), 0.5, dt)], min=0.0, max=1.0)


@converts("hardsigmoid")
def _hardsigmoid(b: Builder, n, p):
    dt = out_dtype(n)
    return _hardsigmoid_of(b, b.tensor(p["self"], dt), dt)


@converts("hardswish")
def _hardswish(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    return b.op("multiply", [x, _hardsigmoid_of(b, x, dt)])


@converts("elu")
def _elu(b: Builder, n, p):
    if p.get("scale", 1) != 1 or p.get("input_scale", 1) != 1:
        raise Unsupported("elu with scale/input_scale")
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    neg = b.binary("multiply", b.binary("subtract", b.op("exp", [x]), 1.0, dt), float(p["alpha"]), dt)
    return b.op("where", [b.binary("greater", x, 0.0, dt), x, neg])


def _softplus_of(b: Builder, x: str, beta: float, threshold: float, dt) -> str:
    bx = b.binary("multiply", x, beta, dt) if beta != 1 else x
    soft = b.op("log", [b.binary("add", b.op("exp", [bx]), 1.0, dt)])
    if beta != 1:
        soft = b.binary("multiply", soft, 1.0 / beta, dt)
    return b.op("where", [b.binary("greater", bx, threshold, dt), x, soft])


@converts("softplus")
def _softplus(b: Builder, n, p):
    dt = out_dtype(n)
    return _softplus_of(b, b.tensor(p["self"], dt), float(p["beta"]), float(p["threshold"]), dt)


@converts("mish")
def _mish(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    return b.op("multiply", [x, b.op("tanh", [_softplus_of(b, x, 1.0, 20.0, dt)])])


@converts("dropout", "feature_dropout", "alpha_dropout", "native_dropout")
def _dropout(b: Builder, n, p):
    x = p["input"]
    train = p.get("train")
    prob = float(p["p"])
    if not train or prob == 0.0:
        out = b.tensor(x)
    elif op_name(n.target) in ("dropout", "native_dropout"):
        out = b.op("dropout", [x], p=prob, training=True, seed=0)
    else:
        raise Unsupported(f"{op_name(n.target)} in training mode")
    if op_name(n.target) == "native_dropout":
        return out, Missing("dropout mask")
    return out


# --- type conversion and copies -------------------------------------------------------------------
@converts("clone", "contiguous", "alias", "detach", "lift_fresh_copy", "lift_fresh", "_to_copy", "to", "type_as")
def _copy_or_cast(b: Builder, n, p):
    x = p.get("self", p.get("input"))
    return b.cast(x, out_dtype(n))


@converts("copy")
def _copy(b: Builder, n, p):
    src = b.tensor(p["src"], out_dtype(n))
    return b.broadcast_to(src, out_shape(n))


# --- shape manipulation ---------------------------------------------------------------------------
@converts("view", "_unsafe_view", "reshape", "flatten", "unflatten", "view_as", "reshape_as", "squeeze_copy",
          "view_copy", "_reshape_alias")
def _reshape(b: Builder, n, p):
    return b.reshape(p["self"], out_shape(n))


@converts("squeeze")
def _squeeze(b: Builder, n, p):
    x = b.tensor(p["self"])
    shape = b.shape(x)
    dims = [d for d in _dims(p.get("dim"), len(shape)) if shape[d] == 1] if len(shape) else []
    if len(dims) == 1:
        return b.op("squeeze", [x], dim=dims[0])
    return b.reshape(x, out_shape(n))


@converts("unsqueeze")
def _unsqueeze(b: Builder, n, p):
    x = b.tensor(p["self"])
    return b.op("unsqueeze", [x], dim=_norm_dim(p["dim"], b.rank(x) + 1))


@converts("transpose", "swapaxes", "swapdims")
def _transpose(b: Builder, n, p):
    return b.transpose(p["self"], p.get("dim0", p.get("axis0")), p.get("dim1", p.get("axis1")))


@converts("t", "numpy_T", "mT", "adjoint")
def _t(b: Builder, n, p):
    x = p["self"]
    if b.rank(x) < 2:
        return b.tensor(x)
    if op_name(n.target) == "numpy_T":
        return _permute_by(b, x, list(range(b.rank(x)))[::-1])
    return b.transpose(x, -2, -1)


def _permute_by(b: Builder, x: Any, dims: Sequence[int]) -> str:
    """A permutation as a chain of transposes (at most rank-1 of them)."""
    rank = b.rank(x)
    dims = [d % rank for d in dims]
    v = b.tensor(x)
    cur = list(range(rank))  # cur[i] = source dim now at position i
    for i in range(rank):
        if cur[i] != dims[i]:
            j = cur.index(dims[i])
            v = b.transpose(v, i, j)
            cur[i], cur[j] = cur[j], cur[i]
    return v


@converts("permute", "permute_copy")
def _permute(b: Builder, n, p):
    return _permute_by(b, p["self"], p["dims"])


@converts("expand", "expand_as", "broadcast_to", "expand_copy")
def _expand(b: Builder, n, p):
    return b.broadcast_to(p["self"], out_shape(n))


@converts("repeat")
def _repeat(b: Builder, n, p):
    x = b.tensor(p["self"])
    factors = tuple(int(f) for f in p["repeats"])
    shape = b.shape(x)
    if len(factors) > len(shape):
        x = b.reshape(x, (1,) * (len(factors) - len(shape)) + shape)
    if all(f == 1 for f in factors):
        return x
    return b.op("repeat", [x], factors=factors)


def _index_range(b: Builder, x: Any, dim: int, start: int, stop: int, step: int = 1) -> str:
    size = b.shape(x)[dim]
    if start == 0 and stop == size and step == 1:
        return b.tensor(x)
    if stop <= start:
        raise Unsupported("empty slice (zero-size tensors are not supported on the device)")
    return b.op("index", [x], dim=dim, start=start, stop=stop, stride=step)


@converts("slice", "slice_copy")
def _slice(b: Builder, n, p):
    x = p["self"]
    rank = b.rank(x)
    dim = _norm_dim(p["dim"], rank)
    size = b.shape(x)[dim]
    start = p["start"] if p["start"] is not None else 0
    end = p["end"] if p["end"] is not None else size
    step = p["step"] or 1
    r = range(size)[slice(start, end, step)]
    if len(r) == 0:
        raise Unsupported("empty slice (zero-size tensors are not supported on the device)")
    return _index_range(b, x, dim, r.start, r.start + (len(r) - 1) * step + 1, step)


@converts("select", "select_copy")
def _select(b: Builder, n, p):
    x = p["self"]
    rank = b.rank(x)
    dim = _norm_dim(p["dim"], rank)
    idx = p["index"] % b.shape(x)[dim]
    v = _index_range(b, x, dim, idx, idx + 1)
    return b.op("squeeze", [v], dim=dim) if b.shape(v)[dim] == 1 and rank > 0 else v


@converts("narrow", "narrow_copy")
def _narrow(b: Builder, n, p):
    x = p["self"]
    dim = _norm_dim(p["dim"], b.rank(x))
    start = p["start"] % b.shape(x)[dim]
    return _index_range(b, x, dim, start, start + p["length"])


@converts("split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split", "unsafe_split_with_sizes",
          "split_copy", "split_with_sizes_copy")
def _split(b: Builder, n, p):
    x = p["self"]
    rank = b.rank(x)
    dim = _norm_dim(p.get("dim", 0), rank)
    outs = []
    offset = 0
    for val in meta_val(n):
        size = int(val.shape[dim])
        if size == 0:
            outs.append(Missing("empty split piece"))
            continue
        outs.append(_index_range(b, x, dim, offset, offset + size))
        offset += size
    return outs


@converts("unbind", "unbind_copy")
def _unbind(b: Builder, n, p):
    x = p["self"]
    dim = _norm_dim(p.get("dim", 0), b.rank(x))
    return [b.op("squeeze", [_index_range(b, x, dim, i, i + 1)], dim=dim) for i in range(b.shape(x)[dim])]


@converts("cat", "concat", "concatenate")
def _cat(b: Builder, n, p):
    dt = out_dtype(n)
    parts = [t for t in p["tensors"] if not (b.is_tensor(t) and math.prod(b.shape(t)) == 0)]
    if not parts:
        raise Unsupported("concatenation of empty tensors")
    names = [b.tensor(t, dt) for t in parts]
    if len(names) == 1:
        return names[0]
    return b.op("concatenate", names, axis=_norm_dim(p["dim"], len(out_shape(n))))


@converts("stack")
def _stack(b: Builder, n, p):
    dt = out_dtype(n)
    names = [b.tensor(t, dt) for t in p["tensors"]]
    axis = _norm_dim(p["dim"], len(out_shape(n)))
    if len(names) == 1:
        return b.op("unsqueeze", names, dim=axis)
    return b.op("stack", names, axis=axis)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "replicate"}


@converts("pad", "constant_pad_nd", "reflection_pad2d", "reflection_pad1d", "replication_pad2d",
          "replication_pad1d")
def _pad(b: Builder, n, p):
    name = op_name(n.target)
    x = b.tensor(p["self"])
    pad = [int(v) for v in (p["pad"] if "pad" in p else p["padding"])]
    if name.startswith("reflection"):
        mode = "reflect"
    elif name.startswith("replication"):
        mode = "replicate"
    else:
        mode = p.get("mode") or "constant"
    if mode not in _PAD_MODES:
        raise Unsupported(f"padding mode {mode!r}")
    value = p.get("value")
    value = float(value) if value is not None else 0.0
    if any(v < 0 for v in pad):
        raise Unsupported("negative padding (cropping)")
    if all(v == 0 for v in pad):
        return x
    if len(pad) > 4:
        raise Unsupported(f"padding of more than two dims ({pad})")
    # pybuda's pad covers the last two dims only; trailing zero pairs are dropped.
    if len(pad) == 4 and pad[2] == 0 and pad[3] == 0:
        pad = pad[:2]
    return b.op("pad", [x], pad=tuple(pad), mode=mode, value=value, channel_last=False)


@converts("tril", "triu")
def _tril_triu(b: Builder, n, p):
    x = b.tensor(p["self"])
    shape = b.shape(x)
    rows, cols = shape[-2], shape[-1]
    ones = torch.ones(rows, cols, dtype=torch.bool)
    mask = torch.tril(ones, p["diagonal"]) if op_name(n.target) == "tril" else torch.triu(ones, p["diagonal"])
    dt = b.dtype(x)
    return b.op("where", [b.const(mask, f"{n.name}.mask"), x, b.scalar(0, dt, 1)])


# --- indexing -------------------------------------------------------------------------------------
def _adv_index(b: Builder, x: Any, idx: Any, dim: int, final_shape: Sequence[int]) -> str:
    if b.dtype(idx) == torch.bool:
        raise Unsupported("boolean-mask indexing has a data-dependent shape")
    idx_shape = b.shape(idx)
    flat = b.reshape(idx, (max(1, math.prod(idx_shape)),)) if len(idx_shape) != 1 else b.tensor(idx)
    r = b.op("adv_index", [x, flat], dim=dim)
    return b.reshape(r, final_shape)


@converts("index")
def _index(b: Builder, n, p):
    x = p["self"]
    indices = list(p["indices"])
    used = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(used) == 1:
        dim, idx = used[0]
        return _adv_index(b, x, idx, dim, out_shape(n))
    return _multi_index(b, n, x, used)


def _multi_index(b: Builder, n, x: Any, used: List[Tuple[int, Any]]) -> str:
    """``x[i, j]`` with constant index tensors on adjacent dims: one gather on the flattened dims.

    (Mask builders index a bool mask by broadcast batch/position index tensors like this.)
    """
    dims = [d for d, _ in used]
    if dims != list(range(dims[0], dims[0] + len(dims))):
        raise Unsupported("advanced indexing on non-adjacent dims")
    if not all(isinstance(i, Const) for _, i in used):
        raise Unsupported("advanced indexing with more than one index tensor computed at run time")
    if any(i.value.dtype == torch.bool for _, i in used):
        raise Unsupported("boolean-mask indexing has a data-dependent shape")
    shape = b.shape(x)
    start, stop = dims[0], dims[-1] + 1
    sizes = shape[start:stop]
    flat = torch.zeros((), dtype=torch.int64)
    for (d, idx), size in zip(used, sizes):
        flat = flat * size + idx.value.to(torch.int64) % size
    flat = torch.broadcast_to(flat, torch.broadcast_shapes(*(i.value.shape for _, i in used))).reshape(-1)
    merged = b.reshape(x, shape[:start] + (math.prod(sizes),) + shape[stop:])
    out = b.op("adv_index", [merged, b.const(flat.contiguous(), f"{n.name}.flat_index")], dim=start)
    return b.reshape(out, out_shape(n))


@converts("index_select")
def _index_select(b: Builder, n, p):
    x = p["self"]
    return _adv_index(b, x, p["index"], _norm_dim(p["dim"], b.rank(x)), out_shape(n))


@converts("gather")
def _gather(b: Builder, n, p):
    """``gather(x, dim, index)`` as one adv_index over the flattened ``x`` with computed flat indices."""
    x, idx = p["self"], p["index"]
    xs, ish = b.shape(x), b.shape(idx)
    rank = len(xs)
    if rank == 0 or len(ish) != rank:
        raise Unsupported("gather on a scalar")
    dim = _norm_dim(p["dim"], rank)
    strides = [math.prod(xs[k + 1:]) for k in range(rank)]
    # Offset of every index position in the flattened x, ignoring the gathered dim.
    base = torch.zeros(ish, dtype=torch.int64)
    for k in range(rank):
        if k != dim:
            pos = torch.arange(ish[k], dtype=torch.int64).reshape([-1 if j == k else 1 for j in range(rank)])
            base = base + pos * strides[k]
    index = b.tensor(idx, torch.int64)
    flat = b.op("add", [b.binary("multiply", index, strides[dim], torch.int64), b.const(base, f"{n.name}.offsets")])
    flat = b.reshape(flat, (max(1, math.prod(ish)),))
    out = b.op("adv_index", [b.reshape(x, (math.prod(xs),)), flat], dim=0)
    return b.reshape(out, ish)


@converts("embedding")
def _embedding(b: Builder, n, p):
    weight, indices = p["weight"], p["indices"]
    return b.op("embedding", [weight, indices])


# --- reductions -----------------------------------------------------------------------------------
def _reduce(b: Builder, op_type: str, x: Any, dims: Any, final_shape: Sequence[int], dt=None) -> str:
    v = b.tensor(x, dt)
    shape = b.shape(v)
    for d in _dims(dims, len(shape)):
        if shape[d] != 1 or op_type == "reduce_avg":
            v = b.op(op_type, [v], dim=d)
    return b.reshape(v, final_shape)


@converts("sum")
def _sum(b: Builder, n, p):
    x = p["self"]
    if b.rank(x) == 0:
        return b.cast(x, out_dtype(n))
    return _reduce(b, "reduce_sum", x, p.get("dim"), out_shape(n), out_dtype(n))


@converts("mean")
def _mean(b: Builder, n, p):
    x = p["self"]
    if b.rank(x) == 0:
        return b.cast(x, out_dtype(n))
    return _reduce(b, "reduce_avg", x, p.get("dim"), out_shape(n), out_dtype(n))


@converts("amax", "amin")
def _amax(b: Builder, n, p):
    return _reduce_max_or_min(b, p["self"], p["dim"], p["keepdim"], op_name(n.target) == "amin", out_shape(n))


@converts("argmax", "argmin")
def _argmax(b: Builder, n, p):
    x = b.tensor(p["self"])
    if op_name(n.target) == "argmin":
        x = b.binary("multiply", x, -1, b.dtype(x))
    if p["dim"] is None:
        x = b.reshape(x, (math.prod(b.shape(x)),))
        dim = 0
    else:
        dim = _norm_dim(p["dim"], b.rank(x))
    return b.cast(b.reshape(b.op("argmax", [x], dim=dim), out_shape(n)), out_dtype(n))


def _var_parts(b: Builder, n, p, final_var_shape, with_mean_shape=None):
    x = b.tensor(p["self"], out_dtype(n) if not isinstance(meta_val(n), (list, tuple)) else meta_val(n)[0].dtype)
    shape = b.shape(x)
    dims = _dims(p.get("dim"), len(shape))
    count = math.prod(shape[d] for d in dims)
    correction = p.get("correction")
    if correction is None:
        unbiased = p.get("unbiased")
        correction = 1 if unbiased is None or unbiased else 0
    dt = b.dtype(x)
    mean = x
    for d in dims:
        mean = b.op("reduce_avg", [mean], dim=d)
    centered = b.op("subtract", [x, mean])
    var = b.op("square", [centered])
    for d in dims:
        var = b.op("reduce_avg", [var], dim=d)
    if correction != 0:
        if count - correction <= 0:
            raise Unsupported("variance with correction >= number of elements")
        var = b.binary("multiply", var, count / (count - correction), dt)
    var = b.reshape(var, final_var_shape)
    if with_mean_shape is not None:
        return var, b.reshape(mean, with_mean_shape)
    return var


@converts("var")
def _var(b: Builder, n, p):
    return _var_parts(b, n, p, out_shape(n))


@converts("std")
def _std(b: Builder, n, p):
    return b.op("sqrt", [_var_parts(b, n, p, out_shape(n))])


@converts("var_mean")
def _var_mean(b: Builder, n, p):
    return _var_parts(b, n, p, out_shape_of(n, 0), out_shape_of(n, 1))


@converts("linalg_vector_norm")
def _vector_norm(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    order = float(p["ord"])
    final = out_shape(n)
    if order == 2:
        return b.op("sqrt", [_reduce(b, "reduce_sum", b.op("square", [x]), p.get("dim"), final)])
    if order == 1:
        return _reduce(b, "reduce_sum", b.op("abs", [x]), p.get("dim"), final)
    if order == math.inf:
        return _reduce_max_or_min(b, b.op("abs", [x]), p.get("dim"), p.get("keepdim"), False, final)
    raise Unsupported(f"vector norm of order {order}")


@converts("any", "all")
def _any_all(b: Builder, n, p):
    x = _as_bool(b, p["self"])
    is_all = op_name(n.target) == "all"
    if is_all:
        x = b.op("logical_not", [x])
    dims = p.get("dim")
    v = b.cast(x, torch.float32)
    v = _reduce_max_or_min(b, v, dims, p.get("keepdim"), False, out_shape(n))
    v = b.cast(v, torch.bool)
    return b.op("logical_not", [v]) if is_all else v


@converts("sign")
def _sign(b: Builder, n, p):
    dt = out_dtype(n)
    x = b.tensor(p["self"], dt)
    pos = b.cast(b.binary("greater", x, 0, dt), dt)
    neg = b.cast(b.binary("less", x, 0, dt), dt)
    return b.op("subtract", [pos, neg])


@converts("flip")
def _flip(b: Builder, n, p):
    v = b.tensor(p["self"])
    for d in _dims(p["dims"], b.rank(v)):
        size = b.shape(v)[d]
        if size > 1:
            v = b.op("adv_index", [v, b.const(torch.arange(size - 1, -1, -1), f"{n.name}.reversed")], dim=d)
    return v


@converts("pixel_shuffle")
def _pixel_shuffle(b: Builder, n, p):
    return b.op("pixel_shuffle", [p["self"]], upscale_factor=int(p["upscale_factor"]))


@converts("softmax", "_softmax", "_safe_softmax")
def _softmax(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("softmax", [x], dim=_norm_dim(p["dim"], b.rank(x)), stable=True)


@converts("log_softmax", "_log_softmax")
def _log_softmax(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("log_softmax", [x], dim=_norm_dim(p["dim"], b.rank(x)), stable=True)


@converts("cumsum")
def _cumsum(b: Builder, n, p):
    x = b.tensor(p["self"], out_dtype(n))
    return b.op("cumsum", [x], axis=_norm_dim(p["dim"], b.rank(x)), exclusive=False)


# --- normalisation --------------------------------------------------------------------------------
def _param_or(b: Builder, v: Any, fill: float, size: int, dt: torch.dtype, name: str) -> str:
    if v is None:
        return b.const(torch.full((size,), fill, dtype=dt), name)
    return b.tensor(v)


@converts("layer_norm", "native_layer_norm")
def _layer_norm(b: Builder, n, p):
    x = b.tensor(p["input"])
    shape = b.shape(x)
    normalized = [int(d) for d in p["normalized_shape"]]
    size = math.prod(normalized)
    dt = b.dtype(x)
    w = _param_or(b, p["weight"], 1.0, size, dt, f"{n.name}.weight")
    bias = _param_or(b, p["bias"], 0.0, size, dt, f"{n.name}.bias")
    eps = float(p["eps"])
    if len(normalized) == 1:
        out = b.op("layernorm", [x, w, bias], dim=-1, epsilon=eps)
    else:
        flat = b.reshape(x, shape[: len(shape) - len(normalized)] + (size,))
        out = b.reshape(b.op("layernorm", [flat, b.reshape(w, (size,)), b.reshape(bias, (size,))], dim=-1,
                             epsilon=eps), shape)
    if op_name(n.target) == "native_layer_norm":
        return out, Missing("layer_norm mean"), Missing("layer_norm rstd")
    return out


@converts("batch_norm", "_native_batch_norm_legit_no_training", "native_batch_norm", "_native_batch_norm_legit")
def _batch_norm(b: Builder, n, p):
    name = op_name(n.target)
    training = p.get("training", False)
    if training:
        raise Unsupported("batch norm in training mode (batch statistics); call model.eval() before compiling")
    x = b.tensor(p["input"])
    channels = b.shape(x)[1]
    dt = b.dtype(x)
    mean, var = p.get("running_mean"), p.get("running_var")
    if mean is None or var is None:
        raise Unsupported("batch norm without running statistics")
    w = _param_or(b, p["weight"], 1.0, channels, dt, f"{n.name}.weight")
    bias = _param_or(b, p["bias"], 0.0, channels, dt, f"{n.name}.bias")
    out = b.op("batchnorm", [x, w, bias, mean, var], epsilon=float(p["eps"]))
    if name == "batch_norm":
        return out
    return out, Missing("batch_norm save_mean"), Missing("batch_norm save_invstd")


@converts("group_norm")
def _group_norm(b: Builder, n, p):
    x = b.tensor(p["input"])
    shape = b.shape(x)
    groups = int(p["num_groups"])
    N, C = shape[0], shape[1]
    dt = b.dtype(x)
    eps = float(p["eps"])
    grouped = b.reshape(x, (N, groups, math.prod(shape[1:]) // groups))
    mean = b.op("reduce_avg", [grouped], dim=2)
    centered = b.op("subtract", [grouped, mean])
    var = b.op("reduce_avg", [b.op("square", [centered])], dim=2)
    rstd = b.op("reciprocal", [b.op("sqrt", [b.binary("add", var, eps, dt)])])
    normed = b.reshape(b.op("multiply", [centered, rstd]), shape)
    bshape = (1, C) + (1,) * (len(shape) - 2)
    if p["weight"] is not None:
        normed = b.op("multiply", [normed, b.reshape(p["weight"], bshape)])
    if p["bias"] is not None:
        normed = b.op("add", [normed, b.reshape(p["bias"], bshape)])
    return normed


# --- matmul ---------------------------------------------------------------------------------------
def _matmul(b: Builder, x: Any, y: Any, bias: Any, final_shape: Sequence[int], dt: torch.dtype) -> str:
    a, c = b.tensor(x, dt), b.tensor(y, dt)
    if b.rank(a) == 1:
        a = b.reshape(a, (1,) + b.shape(a))
    if b.rank(c) == 1:
        c = b.reshape(c, b.shape(c) + (1,))
    operands = [a, c] if bias is None else [a, c, b.tensor(bias, dt)]
    return b.reshape(b.op("matmul", operands), final_shape)


@converts("linear")
def _linear(b: Builder, n, p):
    w = p["weight"]
    wt = b.transpose(w, -2, -1) if b.rank(w) == 2 else b.tensor(w)
    return _matmul(b, p["input"], wt, p.get("bias"), out_shape(n), out_dtype(n))


@converts("mm", "bmm", "matmul")
def _mm(b: Builder, n, p):
    return _matmul(b, p["self"], p.get("mat2", p.get("other")), None, out_shape(n), out_dtype(n))


@converts("addmm", "baddbmm")
def _addmm(b: Builder, n, p):
    dt = out_dtype(n)
    x, y = (p["mat1"], p["mat2"]) if "mat1" in p else (p["batch1"], p["batch2"])
    beta, alpha = p.get("beta", 1), p.get("alpha", 1)
    bias = p["self"]
    if alpha != 1:
        x = b.binary("multiply", x, alpha, dt)
    if beta == 0:
        bias = None
    elif beta != 1:
        bias = b.binary("multiply", bias, beta, dt)
    return _matmul(b, x, y, bias, out_shape(n), dt)


@converts("scaled_dot_product_attention")
def _sdpa(b: Builder, n, p):
    dt = out_dtype(n)
    q, k, v = (b.tensor(p[key], dt) for key in ("query", "key", "value"))
    if p.get("dropout_p", 0.0):
        raise Unsupported("scaled_dot_product_attention with dropout")
    qs, ks = b.shape(q), b.shape(k)
    if p.get("enable_gqa") and qs[-3] != ks[-3]:
        raise Unsupported("grouped-query attention (enable_gqa)")
    scale = p.get("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(qs[-1])
    scores = b.op("matmul", [q, b.transpose(k, -2, -1)])
    scores = b.binary("multiply", scores, scale, dt)
    L, S = qs[-2], ks[-2]
    mask = p.get("attn_mask")
    if p.get("is_causal"):
        causal = torch.ones(L, S, dtype=torch.bool).tril()
        scores = b.op("where", [b.const(causal, f"{n.name}.causal"), scores, b.scalar(-math.inf, dt, 1)])
    if mask is not None:
        if b.dtype(mask) == torch.bool:
            scores = b.op("where", [b.tensor(mask), scores, b.scalar(-math.inf, dt, 1)])
        else:
            scores = b.op("add", [scores, b.tensor(mask, dt)])
    probs = b.op("softmax", [scores], dim=b.rank(scores) - 1, stable=True)
    return b.reshape(b.op("matmul", [probs, v]), out_shape(n))


# --- convolution and pooling ----------------------------------------------------------------------
def _pair(v: Any, n: int = 2) -> Tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    return v * n if len(v) == 1 else v


def _conv2d(b: Builder, x: str, w: Any, bias: Any, stride, padding, dilation, groups, transposed=False,
            output_padding=(0, 0)) -> str:
    stride, dilation = _pair(stride), _pair(dilation)
    ph, pw = _pair(padding)
    operands = [x, w] if bias is None else [x, w, bias]
    attrs = dict(stride=stride, padding=(pw, pw, ph, ph), dilation=dilation, groups=int(groups), channel_last=False)
    if transposed:
        if any(_pair(output_padding)):
            attrs["output_padding"] = _pair(output_padding)
        return b.op("conv2d_transpose", operands, **attrs)
    return b.op("conv2d", operands, **attrs)


def _same_padding(kernel: Sequence[int], dilation: Sequence[int]) -> Tuple[int, ...]:
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        if total % 2:
            raise Unsupported("padding='same' with an asymmetric total padding")
        pads.append(total // 2)
    return tuple(pads)


@converts("conv2d", "conv1d", "convolution", "_convolution", "conv_transpose2d", "conv_transpose1d")
def _conv(b: Builder, n, p):
    name = op_name(n.target)
    x = b.tensor(p["input"])
    w = b.tensor(p["weight"])
    bias = p.get("bias")
    transposed = bool(p.get("transposed", False)) or name.startswith("conv_transpose")
    groups = p.get("groups", 1)
    stride, dilation = p["stride"], p["dilation"]
    padding = p["padding"]
    spatial = b.rank(x) - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-d convolution")
    if isinstance(padding, str):
        if padding == "valid":
            padding = [0] * spatial
        else:
            dil = tuple(int(d) for d in (dilation if isinstance(dilation, (list, tuple)) else [dilation]))
            padding = _same_padding(b.shape(w)[2:], dil * spatial if len(dil) == 1 else dil)
    output_padding = p.get("output_padding") or [0] * spatial
    if spatial == 2:
        out = _conv2d(b, x, w, bias, stride, padding, dilation, groups, transposed, output_padding)
    else:
        # 1-d convolution: run it as a 2-d one over a height-1 image.
        xs, ws = b.shape(x), b.shape(w)
        x2 = b.reshape(x, (xs[0], xs[1], 1, xs[2]))
        w2 = b.reshape(w, (ws[0], ws[1], 1, ws[2]))
        one = lambda v: (1, _pair(v, 1)[0])  # noqa: E731
        out = _conv2d(b, x2, w2, bias, one(stride), (0, _pair(padding, 1)[0]), one(dilation), groups, transposed,
                      (0, _pair(output_padding, 1)[0]))
    return b.reshape(out, out_shape(n))


def _pool_padding(padding) -> Tuple[int, int, int, int]:
    ph, pw = _pair(padding)
    return (pw, pw, ph, ph)


@converts("max_pool2d", "max_pool2d_with_indices")
def _max_pool2d(b: Builder, n, p):
    kernel = _pair(p["kernel_size"])
    stride = _pair(p["stride"]) if p["stride"] else kernel
    out = b.op("max_pool2d", [p["self"]], kernel_size=kernel, stride=stride, padding=_pool_padding(p["padding"]),
               dilation=_pair(p["dilation"]), ceil_mode=bool(p["ceil_mode"]), channel_last=False)
    if op_name(n.target) == "max_pool2d_with_indices":
        return out, Missing("max_pool2d indices")
    return out


@converts("avg_pool2d")
def _avg_pool2d(b: Builder, n, p):
    kernel = _pair(p["kernel_size"])
    stride = _pair(p["stride"]) if p["stride"] else kernel
    return b.op("avg_pool2d", [p["self"]], kernel_size=kernel, stride=stride, padding=_pool_padding(p["padding"]),
                ceil_mode=bool(p["ceil_mode"]), count_include_pad=bool(p["count_include_pad"]),
                divisor_override=p["divisor_override"], channel_last=False)


@converts("adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool1d")
def _adaptive_avg_pool(b: Builder, n, p):
    x = b.tensor(p["self"])
    shape = b.shape(x)
    final = out_shape(n)
    spatial = len(_pair(p["output_size"], 1)) if op_name(n.target) == "adaptive_avg_pool1d" else 2
    out_sizes = final[-spatial:]
    in_sizes = shape[-spatial:]
    if all(o == 1 for o in out_sizes):
        v = x
        for d in range(len(shape) - spatial, len(shape)):
            v = b.op("reduce_avg", [v], dim=d)
        return b.reshape(v, final)
    if spatial == 2 and all(i % o == 0 for i, o in zip(in_sizes, out_sizes)):
        kernel = tuple(i // o for i, o in zip(in_sizes, out_sizes))
        return b.op("avg_pool2d", [x], kernel_size=kernel, stride=kernel, padding=(0, 0, 0, 0), ceil_mode=False,
                    count_include_pad=True, divisor_override=None, channel_last=False)
    raise Unsupported(f"adaptive pooling from {list(in_sizes)} to {list(out_sizes)} (sizes must divide)")


@converts("upsample_nearest2d", "upsample_bilinear2d")
def _upsample(b: Builder, n, p):
    name = op_name(n.target)
    method = "nearest_neighbor" if "nearest" in name else "bilinear"
    sizes = tuple(out_shape(n)[-2:])
    attrs = dict(sizes=sizes, method=method, channel_last=False)
    if method == "bilinear":
        attrs["align_corners"] = bool(p.get("align_corners", False))
    return b.op("resize2d", [p.get("self", p.get("input"))], **attrs)


# --- misc -----------------------------------------------------------------------------------------
@converts("fill")
def _fill(b: Builder, n, p):
    value = p["value"]
    dt = out_dtype(n)
    if _is_number(value):
        return b.const(torch.full(out_shape(n), value, dtype=dt), n.name)
    return b.broadcast_to(b.tensor(value, dt), out_shape(n))


# --- driving the conversion of one FX node --------------------------------------------------------
def _lookup(env: Mapping[torch.fx.Node, Any]) -> Callable[[torch.fx.Node], Any]:
    def get(n: torch.fx.Node) -> Any:
        try:
            return env[n]
        except KeyError:
            raise Unsupported(f"uses '{n.name}', which is not available here") from None
    return get


def convert_node(b: Builder, node: torch.fx.Node, env: Mapping[torch.fx.Node, Any]) -> Any:
    """Map one FX call onto registry ops; returns its value (see module doc) or raises Unsupported.

    The result is checked against the shape/dtype torch recorded: rank-only shape differences get a
    reshape, dtype differences a cast; anything else is reported as unsupported.
    """
    get = _lookup(env)
    args = torch.fx.node.map_arg(node.args, get)
    kwargs = torch.fx.node.map_arg(node.kwargs, get)
    b.begin(node)
    if node.target is operator.getitem:
        return convert_getitem(b, node, args[0], args[1])
    if not has_converter(node.target):
        raise Unsupported("no mapping to a pybuda op")
    params = bind(node.target, args, kwargs)
    value = CONVERTERS[op_name(node.target)](b, node, params)
    return b.finish(_conform(b, node, value, meta_val(node)))


def _conform(b: Builder, node: torch.fx.Node, value: Any, expected: Any) -> Any:
    if isinstance(expected, torch.Tensor):
        if isinstance(value, Missing):
            return value
        if not isinstance(value, str):
            value = b.tensor(value)
        shape = tuple(int(d) for d in expected.shape)
        have = b.graph[value].shape
        if have != shape:
            if math.prod(have) != math.prod(shape):
                raise Unsupported(f"internal mapping error: pybuda computes shape {list(have)}, torch {list(shape)}")
            value = b.reshape(value, shape)
        if b.graph[value].dtype != expected.dtype:
            value = b.cast(value, expected.dtype)
        return value
    if isinstance(expected, (list, tuple)) and isinstance(value, (list, tuple)):
        if len(value) != len(expected):
            raise Unsupported(f"internal mapping error: {len(value)} results, torch has {len(expected)}")
        return type(value)(_conform(b, node, v, e) for v, e in zip(value, expected))
    return value
