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
- :class:`Complex` (a complex tensor as its real and imaginary parts) and :class:`RealView` (its
  ``view_as_real``), from :mod:`pybuda.frontend.aten_complex`;
- :class:`Missing`: a result pybuda does not compute (the indices of ``max_pool2d_with_indices``,
  the mean/rstd of ``native_layer_norm``); using one makes the user unsupported.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, List, Mapping

import torch
import torch.fx

# The converter families register themselves with @converts on import.
from pybuda.frontend import (  # noqa: F401
    aten_complex, aten_complex_ops, aten_eltwise, aten_index, aten_nn, aten_products, aten_sampling, aten_scatter,
    aten_shape, aten_sort,
)
from pybuda.frontend.aten_builder import (  # noqa: F401  (re-exported: the frontend's names)
    CONVERTERS, Builder, Complex, Const, Missing, RealView, Unsupported, converts,
)
from pybuda.frontend.fx_program import bind, meta_val, op_name


def mapped_aten_ops() -> List[str]:
    """Names of the ATen ops (overload packets) the frontend maps, sorted."""
    return sorted(CONVERTERS)


# --- the builder ----------------------------------------------------------------------------------
# --- getitem --------------------------------------------------------------------------------------
def convert_getitem(b: Builder, n: torch.fx.Node, container: Any, index: Any) -> Any:
    """``container[index]`` for the results of multi-result ops (no graph op)."""
    if isinstance(container, (list, tuple)):
        return container[index]
    raise Unsupported(f"getitem on a {type(container).__name__}")


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
    if not isinstance(node.target, torch._ops.OpOverload) or node.target.namespace != "aten":
        raise Unsupported("no mapping to a pybuda op")
    params = bind(node.target, args, kwargs)
    converter = CONVERTERS.get(op_name(node.target))
    value = aten_complex_ops.convert(b, node, params, converter)  # an op with a complex operand
    if value is NotImplemented:
        if converter is None:
            raise Unsupported("no mapping to a pybuda op")
        value = converter(b, node, params)
    return b.finish(_conform(b, node, value, meta_val(node)))


def _conform(b: Builder, node: torch.fx.Node, value: Any, expected: Any) -> Any:
    if isinstance(expected, torch.Tensor):
        if isinstance(value, Missing):
            return value
        if isinstance(value, (Complex, RealView)):
            # A pair of real tensors (aten_complex): the parts hold the shape torch has, less view_as_real's 2.
            part = value.re if isinstance(value, Complex) else value.value.re
            have = b.shape(part) + (() if isinstance(value, Complex) else (2,))
            if have != tuple(int(d) for d in expected.shape) or expected.dtype.is_complex != isinstance(value, Complex):
                raise Unsupported(f"internal mapping error: pybuda computes complex shape {list(have)}, torch "
                                  f"{list(expected.shape)} ({expected.dtype})")
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

