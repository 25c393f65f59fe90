"""The op registry: one :class:`OpDef` per op, the single table every stage reads.

An OpDef says what an op is (name, family, operand count, attribute schema), how its output shape and
dtype follow from its operands (``shape``, ``dtype``), what it computes (``eval``, a torch reference),
``lower`` (the netlist op an elementwise op becomes: a row of :mod:`pybuda.netlist.device_ops`, whose
table holds everything per netlist op type: class, golden kernel, cycles, compiler flags), and the slot
training fills: ``backward`` (autograd).

Frontends map framework ops onto registry names, the tracer and the graph builder validate through
:func:`infer`, the CPU reference runs :func:`evaluate`, and the compiler and backend look up the rest.
"""

from __future__ import annotations

import contextlib
import numbers
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.errors import OpError

Shape = Tuple[int, ...]

_REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """Schema of one op attribute: accepted python types, default (absent = required), allowed values."""

    types: Tuple[type, ...]
    default: Any = _REQUIRED
    choices: Optional[Tuple[Any, ...]] = None
    optional: bool = False  # None is accepted

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


def attr(*types: type, default: Any = _REQUIRED, choices: Optional[Sequence[Any]] = None) -> Attr:
    """Shorthand for :class:`Attr`; a default of None makes the attribute optional."""
    return Attr(tuple(types), default, tuple(choices) if choices is not None else None,
                optional=default is None)


# Signatures of the callables an OpDef holds. Attrs are the validated, defaults-filled dict.
ShapeFn = Callable[[List[Shape], Dict[str, Any]], Shape]
EvalFn = Callable[[List[torch.Tensor], Dict[str, Any]], torch.Tensor]
DtypeFn = Callable[[List[torch.dtype], Dict[str, Any]], torch.dtype]


@dataclass(frozen=True)
class DeviceLowering:
    """How an elementwise op becomes one netlist op: the device op type ``op`` (a row of
    :mod:`pybuda.netlist.device_ops`) and ``attrs``, which maps the op's validated attributes to the
    netlist op's attributes (raising ValueError when these attributes have no device form)."""

    op: str
    attrs: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None

    def device_attrs(self, attrs: Mapping[str, Any]) -> Dict[str, Any]:
        """The netlist attributes of an op with (validated) attributes ``attrs``."""
        return dict(self.attrs(dict(attrs))) if self.attrs is not None else {}


class _NoGradient:
    """The ``backward`` of an op that has no gradient (comparisons, logical ops, argmax, quantisation...):
    autograd stops there, as if every operand got a zero gradient. Calling it gives None (no gradient)."""

    def __call__(self, ac: Any, operand: int, inputs: List[str], output: str, grad: str,
                 attrs: Dict[str, Any]) -> None:
        return None

    def __repr__(self) -> str:
        return "NO_GRADIENT"


#: Marks an op as not differentiable (``OpDef(backward=NO_GRADIENT)``).
NO_GRADIENT = _NoGradient()

#: Signature of an op's backward: ``backward(ac, operand, inputs, output, grad, attrs) -> Optional[str]``, where
#: ``inputs``/``output`` are forward node names, ``grad`` the backward node holding d(loss)/d(output), and the
#: result the backward node holding d(loss)/d(inputs[operand]) (None: that operand gets no gradient).
BackwardFn = Callable[[Any, int, List[str], str, str, Dict[str, Any]], Optional[str]]


def first_operand_dtype(dtypes: List[torch.dtype], attrs: Dict[str, Any]) -> torch.dtype:
    """TT-Buda's default output format rule: the format of operand 0."""
    return dtypes[0] if dtypes else torch.float32


@dataclass(frozen=True)
class OpDef:
    """Everything the stack knows about one op."""

    name: str
    family: str  # eltwise_unary, eltwise_binary, eltwise_nary, matmul, reduce, tm, nn, conv, pool, misc, quant
    arity: Tuple[int, Optional[int]]  # (min, max); max None = variadic
    shape: ShapeFn
    eval: EvalFn
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    dtype: DtypeFn = first_operand_dtype
    doc: str = ""
    # Turns validated attributes into their one canonical form (e.g. stride 2 -> (2, 2), padding 'same' ->
    # a 4-tuple), given the operand shapes. Graphs store canonical attrs, so later stages read one form.
    canonicalize: Optional[Callable[[List[Shape], Dict[str, Any]], Dict[str, Any]]] = None
    # The one netlist op an elementwise op lowers to (lowering and the device-capability check read it).
    # Ops lowered by a structural routine of pybuda.passes.lower (matmul, reductions, convolutions, data
    # movement) or rewritten by pybuda.passes.graph.decompose first leave it None.
    lower: Optional[DeviceLowering] = None
    # Autograd: a BackwardFn (see pybuda.passes.graph.autograd), NO_GRADIENT for an op with no gradient, or
    # None where nobody wrote one yet (autograd raises when such an op is on a gradient path).
    backward: Optional[Callable[..., Any]] = None
    # Integer-valued results (pybuda.ops.integer): ``(operand ranges, operand shapes, attrs) -> range or None``,
    # the closed interval the result's integers lie in given each operand's (None: not integer-valued). None
    # here: the result need not be an integer (exp, divide...). Rules describe what the device computes
    # exactly, so ops on the multiplier refuse integer operands it would round (MULTIPLIER_EXACT_INT).
    int_range: Optional[Callable[..., Any]] = None

    @property
    def differentiable(self) -> bool:
        """True when the op has a backward (not None, not NO_GRADIENT)."""
        return self.backward is not None and self.backward is not NO_GRADIENT

    @property
    def is_tm(self) -> bool:
        return self.family == "tm"

    @property
    def is_eltwise(self) -> bool:
        return self.family.startswith("eltwise")

    def validate_attrs(self, attrs: Mapping[str, Any], op_name: Optional[str] = None,
                       context: str = "") -> Dict[str, Any]:
        """Check attribute names, types and choices; return a copy with defaults filled in.

        ``context`` (e.g. the operand shapes) is appended to every error message.
        """
        def fail(message: str) -> OpError:
            return OpError(self.name, f"{message}{' ' + context if context else ''}", op_name)

        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise fail(f"unknown attribute(s) {unknown}; accepted: {sorted(self.attrs)}")
        out: Dict[str, Any] = {}
        for key, spec in self.attrs.items():
            if key not in attrs:
                if spec.required:
                    raise fail(f"missing required attribute '{key}'")
                out[key] = spec.default
                continue
            value = attrs[key]
            if value is None and spec.optional:
                out[key] = None
                continue
            value = _plain(value)
            if isinstance(value, list) and tuple in spec.types:
                value = tuple(value)  # graphs loaded from JSON hand back lists
            if isinstance(value, bool) and bool not in spec.types:
                raise fail(f"attribute '{key}' must be {_type_names(spec.types)}, got bool")
            if float in spec.types and isinstance(value, int) and not isinstance(value, bool):
                value = float(value) if int not in spec.types else value
            if not isinstance(value, spec.types):
                raise fail(f"attribute '{key}' must be {_type_names(spec.types)}, got {type(value).__name__} {value!r}")
            if spec.choices is not None and value not in spec.choices:
                raise fail(f"attribute '{key}' must be one of {list(spec.choices)}, got {value!r}")
            out[key] = value
        return out


def _plain(value: Any) -> Any:
    """numpy / torch scalars (frontends pass them) as python int / float, inside sequences too."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):  # torch.Size included
        return tuple(_plain(v) for v in value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _type_names(types: Tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


_REGISTRY: Dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an op to the registry; names are unique."""
    if opdef.name in _REGISTRY:
        raise ValueError(f"op '{opdef.name}' is registered twice")
    _REGISTRY[opdef.name] = opdef
    return opdef


def get(name: str) -> OpDef:
    """The OpDef for ``name``; raises OpError naming the known ops if there is none."""
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OpError(name, f"unknown op; the registry has {len(_REGISTRY)} ops") from None


def has(name: str) -> bool:
    """True when ``name`` is a registered op."""
    _ensure_loaded()
    return name in _REGISTRY


def all_ops() -> List[OpDef]:
    """Every registered op, sorted by name."""
    _ensure_loaded()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def infer(op_type: str, shapes: Sequence[Shape], dtypes: Sequence[torch.dtype], attrs: Mapping[str, Any],
          op_name: Optional[str] = None) -> Tuple[Shape, torch.dtype, Dict[str, Any]]:
    """Validate operand count and attributes, then compute output shape and dtype.

    Returns ``(shape, dtype, attrs)`` where ``attrs`` are validated, defaults-filled and canonical.
    Shape and canonicalize functions raise ``ValueError`` with a short reason; it is re-raised as an
    OpError naming the op and the operand shapes, so the user sees exactly which call was wrong.
    Inside :func:`memoized_inference` a repeated call is answered from its memo.
    """
    opdef = get(op_type)
    shapes = [tuple(int(d) for d in s) for s in shapes]
    memo = getattr(_INFER_STATE, "memo", None)
    if memo is None:
        return _infer(opdef, op_type, shapes, dtypes, attrs, op_name)
    try:
        key = (op_type, tuple(shapes), tuple(dtypes), _freeze(attrs))
        hit = memo.get(key)
    except (_Unfrozen, TypeError):  # a value without a frozen form, or an unhashable dtype
        return _infer(opdef, op_type, shapes, dtypes, attrs, op_name)
    if hit is not None and hit[3] is opdef:
        return hit[0], hit[1], _thaw(hit[2])
    shape, dtype, full_attrs = _infer(opdef, op_type, shapes, dtypes, attrs, op_name)
    try:
        memo[key] = (shape, dtype, _freeze(full_attrs), opdef)
    except _Unfrozen:
        pass
    return shape, dtype, full_attrs


#: Per thread, ``memo``: the memo of :func:`infer` inside :func:`memoized_inference` (absent or None
#: outside): answers by (op type, operand shapes, operand dtypes, attributes frozen by :func:`_freeze`), each
#: with the OpDef that gave it. A compile builds the same ops again and again (every pass that rewrites a
#: graph re-adds its ops, and a transformer repeats its layers), and :func:`infer` is a function of exactly
#: that key: OpDef's validate/canonicalize/shape/dtype read nothing else (``op_name`` only names the op in
#: errors, and an error is never memoised). Attributes come back rebuilt from the frozen form, so no two
#: nodes share a mutable list or dict. (A thread-local attribute rather than a ContextVar: setting one
#: replaces no object the compile's ``gc.freeze`` froze, so the frozen count stays as the caller left it.)
_INFER_STATE = threading.local()


@contextlib.contextmanager
def memoized_inference() -> Iterator[None]:
    """Within the block, :func:`infer` answers repeated calls from a memo (see :data:`_INFER_STATE`); the
    memo lives as long as the block (one compile), so nothing is kept between compiles."""
    outer = getattr(_INFER_STATE, "memo", None)
    _INFER_STATE.memo = {}
    try:
        yield
    finally:
        _INFER_STATE.memo = outer


class _Unfrozen(Exception):
    """An attribute value :func:`_freeze` does not handle: :func:`infer` is not memoised for it."""


_SCALARS = (type(None), bool, int, str, torch.dtype)


def _freeze(value: Any) -> Any:
    """A hashable form of an attribute value that tells apart everything :func:`infer` might (1, 1.0
    and True; -0.0 and 0.0; a list and a tuple) and :func:`_thaw` turns back into an equal value of the
    same types. Raises :class:`_Unfrozen` for any other kind of value (a tensor, say)."""
    kind = type(value)
    if kind in _SCALARS:
        return (kind, value)
    if kind is float:
        return (kind, repr(value))  # the shortest text that reads back as this exact float (-0.0, nan)
    if kind is tuple or kind is list:
        return (kind, tuple([_freeze(v) for v in value]))
    if kind is dict:
        return (kind, tuple([(_freeze(k), _freeze(v)) for k, v in value.items()]))
    raise _Unfrozen(kind.__name__)


def _thaw(frozen: Any) -> Any:
    """The value :func:`_freeze` froze, in new containers."""
    kind, value = frozen
    if kind is float:
        return float(value)
    if kind is tuple:
        return tuple([_thaw(v) for v in value])
    if kind is list:
        return [_thaw(v) for v in value]
    if kind is dict:
        return {_thaw(k): _thaw(v) for k, v in value}
    return value


def _infer(opdef: "OpDef", op_type: str, shapes: List[Shape], dtypes: Sequence[torch.dtype],
           attrs: Mapping[str, Any], op_name: Optional[str]) -> Tuple[Shape, torch.dtype, Dict[str, Any]]:
    """:func:`infer` computed (``shapes`` already tuples of ints)."""
    full_attrs = _prepare(opdef, shapes, attrs, op_name)
    try:
        out_shape = tuple(int(d) for d in opdef.shape(list(shapes), full_attrs))
    except OpError:
        raise
    except (ValueError, IndexError, TypeError) as e:
        raise OpError(op_type, f"{e} {_context(shapes, full_attrs)}", op_name) from None
    if any(d < 0 for d in out_shape):
        raise OpError(op_type, f"computed a negative output dim {list(out_shape)} {_context(shapes, full_attrs)}",
                      op_name)
    return out_shape, opdef.dtype(list(dtypes), full_attrs), full_attrs


def _context(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> str:
    return f"(operand shapes {[list(s) for s in shapes]}, attrs {dict(attrs)})"


def _prepare(opdef: OpDef, shapes: List[Shape], attrs: Mapping[str, Any], op_name: Optional[str]) -> Dict[str, Any]:
    """Check the operand count, validate and canonicalise attrs; every error names the operand shapes."""
    lo, hi = opdef.arity
    n = len(shapes)
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise OpError(opdef.name, f"expects {want} operand(s), got {n} (operand shapes {[list(s) for s in shapes]})",
                      op_name)
    full_attrs = opdef.validate_attrs(attrs, op_name, context=f"(operand shapes {[list(s) for s in shapes]})")
    if opdef.canonicalize is not None:
        try:
            full_attrs = opdef.canonicalize(list(shapes), full_attrs)
        except OpError:
            raise
        except (ValueError, IndexError, TypeError) as e:
            raise OpError(opdef.name, f"{e} {_context(shapes, full_attrs)}", op_name) from None
    return full_attrs


def evaluate(op_type: str, inputs: Sequence[torch.Tensor], attrs: Mapping[str, Any]) -> torch.Tensor:
    """Run the op's torch reference.

    Attributes are validated and canonicalised again (both are idempotent and cheap), so a caller may
    pass attrs straight from a frontend, a JSON graph or :func:`infer`.
    """
    opdef = get(op_type)
    inputs = list(inputs)
    full_attrs = _prepare(opdef, [tuple(t.shape) for t in inputs], attrs, None)
    return opdef.eval(inputs, full_attrs)


_LOADED = False


def _ensure_loaded() -> None:
    # The op families register themselves on import; importing them lazily keeps this module free of
    # import cycles (families import helpers from here).
    global _LOADED
    if not _LOADED:
        _LOADED = True
        import pybuda.ops  # noqa: F401  (registers every family)
