"""``lax.scan`` unrolled into the graph: Flax ``nn.RNN`` over a sequence, ``nn.scan``'ed layers.

A scan of a static length runs its body once per step: step i reads the consts, the carry and slice i of each
scanned input, and its outputs are the next carry and slice i of each stacked output. All or nothing: a scan
longer than :data:`MAX_SCAN_STEPS`, or one whose body has an equation that cannot be mapped, emits nothing and
stays one unsupported equation (a loop cannot be split between the host and the device).
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch

from pybuda.frontend.aten_builder import Const, Unsupported
from pybuda.frontend.jax.capture import _fix_shape, to_torch, torch_dtype

#: Longest ``lax.scan`` unrolled; a longer one is one unsupported equation.
MAX_SCAN_STEPS = 256


def unroll_scan(mapper: Any, eqn: Any, env: Dict[Any, Any]) -> bool:
    """Unroll the ``scan`` equation ``eqn`` (``params``: num_consts, num_carry, length, reverse) with ``mapper`` (the
    capture's jaxpr walker) into ``env``; False, with nothing emitted, when it cannot be."""
    params = eqn.params
    length = int(params["length"])
    if length < 1 or length > MAX_SCAN_STEPS:
        return False
    closed = params["jaxpr"]
    inner = closed.jaxpr if hasattr(closed, "jaxpr") else closed
    n_consts, n_carry = int(params["num_consts"]), int(params["num_carry"])
    b = mapper.b
    marks = (len(b.graph.nodes), len(mapper.unsupported), dict(mapper.counts))
    args = [mapper.read(env, v) for v in eqn.invars]
    consts, carry, xs = args[:n_consts], args[n_consts:n_consts + n_carry], args[n_consts + n_carry:]
    body_consts = {var: Const(to_torch(value), f"scan_const_{k}")
                   for k, (var, value) in enumerate(zip(inner.constvars, getattr(closed, "consts", []) or []))}
    steps: List[List[Any]] = [[] for _ in inner.outvars[n_carry:]]
    order = range(length - 1, -1, -1) if params.get("reverse") else range(length)
    try:
        for i in order:
            sub_env: Dict[Any, Any] = dict(body_consts)
            slices = [_step_of(b, x, i, var.aval) for x, var in zip(xs, inner.invars[n_consts + n_carry:])]
            for var, value in zip(inner.invars, consts + carry + slices):
                sub_env[var] = value
            mapper.run_jaxpr(inner, sub_env)
            outs = [mapper.read(sub_env, v) for v in inner.outvars]
            carry = outs[:n_carry]
            for k, y in enumerate(outs[n_carry:]):
                steps[k].append(y)
            if len(mapper.unsupported) > marks[1]:
                raise Unsupported("its body has an unsupported equation")
        stacked = [_stacked(b, ys[::-1] if params.get("reverse") else ys, var.aval)
                   for ys, var in zip(steps, eqn.outvars[n_carry:])]
    except Unsupported:
        mapper.drop_nodes_since(marks[0])
        del mapper.unsupported[marks[1]:]
        mapper.counts = marks[2]
        return False
    mapper.counts["scan"] = mapper.counts.get("scan", 0) + 1
    for var, value in zip(eqn.outvars, carry + stacked):
        env[var] = _fix_shape(b, value, var.aval) if isinstance(value, str) else value
    return True


def _step_of(b: Any, x: Any, i: int, aval: Any) -> Any:
    """Slice ``i`` along the leading axis of a scanned input (shape ``aval``)."""
    if isinstance(x, Const):
        return Const(x.value[i], f"{x.name}_{i}")
    if not isinstance(x, str):
        raise Unsupported("a scanned input that is not an array")
    return _fix_shape(b, b.op("index", [x], dim=0, start=i, stop=i + 1, stride=1), aval)


def _stacked(b: Any, ys: List[Any], aval: Any) -> Any:
    """The per-step values ``ys`` of one scanned output, stacked along a new leading axis (shape ``aval``)."""
    if all(isinstance(y, Const) for y in ys):
        return Const(torch.stack([y.value for y in ys]), "scan_stacked")
    dtype = torch_dtype(aval.dtype)
    names = [b.tensor(y, dtype) for y in ys]
    stacked = b.op("unsqueeze", names, dim=0) if len(names) == 1 else b.op("stack", names, axis=0)
    return _fix_shape(b, stacked, aval)
