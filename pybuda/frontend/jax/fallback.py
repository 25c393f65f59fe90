"""CPU fallback for JAX models: equations the chip cannot run execute in JAX on the host.

The rule is the torch and ONNX frontends' (:mod:`pybuda.frontend.fallback`), over the top-level equations of
the model's jaxpr (a model whose whole body is one ``jit`` call is unwrapped first): an equation that has no
mapping, or whose mapping (including any call it inlines) the chip cannot run, goes to the host together
with the smaller of its ancestors (CPU *pre*) or descendants (CPU *post*). Those stages are
:class:`JaxStage` callables that evaluate their equations with JAX's own primitives (``bind``), on the
model's parameters and constants; the device graph is what lies between.
"""

from __future__ import annotations

from typing import Any, Collection, Dict, List, Mapping, Sequence, Set, Tuple

import numpy as np
import torch

from pybuda.errors import CompileError

STAGE = "GENERATE_INITIAL_GRAPH"


class JaxStage:
    """``stage(*tensors) -> tuple`` of torch tensors, computed by JAX on the CPU from a list of jaxpr
    equations. ``inputs``/``outputs`` are jaxpr variables; ``bound`` maps the parameters and constants the
    equations read to their values."""

    def __init__(self, name: str, eqns: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any],
                 bound: Mapping[Any, Any], lead: Collection[Any] = ()):
        self.name = name
        self.eqns = list(eqns)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        #: Outputs handed over with a leading dim of 1: their dim 0 is not the samples' (a time-major scan's
        #: result), and the runtime cuts and joins pushes along dim 0 (:func:`pybuda.frontend.fallback.off_batch`).
        self.lead = set(lead)
        used = {v for e in self.eqns for v in e.invars if not _is_literal(v)} | set(self.outputs)
        self.bound = {k: v for k, v in bound.items() if k in used}
        self.primitives = sorted({e.primitive.name for e in self.eqns})

    def __call__(self, *tensors: Any) -> Tuple[torch.Tensor, ...]:
        from pybuda.frontend.jax.capture import to_jax_array, to_torch

        if len(tensors) != len(self.inputs):
            from pybuda.errors import InputError

            raise InputError(f"CPU stage '{self.name}' takes {len(self.inputs)} input(s), got {len(tensors)}")
        from pybuda.frontend.jax.capture import is_key_dtype

        env: Dict[Any, Any] = dict(self.bound)
        for i, (var, t) in enumerate(zip(self.inputs, tensors)):
            if is_key_dtype(var.aval.dtype):  # a typed PRNG key input: passed as it is
                if not is_key_dtype(getattr(t, "dtype", None)):
                    from pybuda.errors import InputError

                    raise InputError(f"CPU stage '{self.name}': input {i} must be a typed PRNG key "
                                     f"({var.aval.dtype}, from jax.random.key), got {type(t).__name__}")
                env[var] = t
                continue
            env[var] = to_jax_array(t).astype(var.aval.dtype)

        def read(v: Any) -> Any:
            return v.val if _is_literal(v) else env[v]

        for eqn in self.eqns:
            for var, value in zip(eqn.outvars, eval_eqn(eqn, [read(v) for v in eqn.invars])):
                env[var] = value
        return tuple(to_torch(np.asarray(read(v)))[None] if v in self.lead else to_torch(np.asarray(read(v)))
                     for v in self.outputs)

    def __repr__(self) -> str:
        return f"JaxStage({self.name!r}, {len(self.eqns)} equation(s): {', '.join(self.primitives)})"


def eval_eqn(eqn: Any, values: Sequence[Any]) -> List[Any]:
    """The outputs of jaxpr equation ``eqn`` on ``values`` (its operands), evaluated by JAX."""
    # As jax.core.eval_jaxpr does; older JAX versions return (subfuns, params).
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns: Sequence[Any] = ()
    if isinstance(params, tuple):
        subfuns, params = params
    out = eqn.primitive.bind(*subfuns, *values, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _is_literal(var: Any) -> bool:
    return type(var).__name__ == "Literal"


def partition(eqns: Sequence[Any], host: Mapping[int, str], force_pre: Set[int] = frozenset()
              ) -> Tuple[Dict[int, str], Dict[int, str], Dict[int, int]]:
    """``(stage per equation index, side per host equation, ops moved with each)`` by the shared rule. Device
    equations that would pass a complex value across a stage boundary join ``host`` (a dict: extended in place,
    with their reasons).

    The host equations in ``force_pre`` (those reading PRNG keys, which cannot cross the device graph) go
    before the device whatever their size; a host equation upstream of a pre one then goes there too."""
    from pybuda.frontend.fallback import DEVICE, POST, PRE, assign_sides

    producer = {v: i for i, e in enumerate(eqns) for v in e.outvars}
    users: Dict[int, Set[int]] = {i: set() for i in range(len(eqns))}
    for i, e in enumerate(eqns):
        for v in e.invars:
            if not _is_literal(v) and v in producer:
                users[producer[v]].add(i)

    def closure(start: int, up: bool) -> Set[int]:
        seen: Set[int] = set()
        stack = [start]
        while stack:
            k = stack.pop()
            nexts = [producer[v] for v in eqns[k].invars if not _is_literal(v) and v in producer] if up else users[k]
            for m in nexts:
                if m not in seen:
                    seen.add(m)
                    stack.append(m)
        return seen

    while True:
        anc = {u: closure(u, True) for u in host}
        desc = {u: closure(u, False) for u in host}
        side, pre, post = assign_sides(host, anc, desc, STAGE)
        staged = {i: PRE if i in pre else POST if i in post else DEVICE for i in range(len(eqns))}
        crossing = {k: why for k, why in _complex_crossings(eqns, staged, producer, users).items() if k not in host}
        if not crossing or not isinstance(host, dict):
            break
        host.update(crossing)
    if any(side[u] != PRE for u in force_pre if u in side):
        for u in force_pre:
            if u in side:
                side[u] = PRE
        while True:
            pre = set().union(*[anc[u] | {u} for u in host if side[u] == PRE])
            flip = [u for u in host if side[u] == POST and u in pre]
            if not flip:
                break
            for u in flip:
                side[u] = PRE
        post = set().union(*[desc[u] | {u} for u in host if side[u] == POST])
        if pre & post:  # pragma: no cover - a post op upstream of a pre one is flipped above
            raise CompileError("CPU fallback: an op was placed both before and after the device graph "
                               "(internal partitioning error)", stage=STAGE)
    stage = {i: PRE if i in pre else POST if i in post else DEVICE for i in range(len(eqns))}
    moved = {u: len(anc[u]) if side[u] == PRE else len(desc[u]) for u in host}
    return stage, side, moved


def _is_complex(var: Any) -> bool:
    # numpy's kind "c"; a PRNG key's extended dtype has none
    return not _is_literal(var) and getattr(getattr(var.aval, "dtype", None), "kind", None) == "c"


def _complex_crossings(eqns: Sequence[Any], stage: Mapping[int, str], producer: Mapping[Any, int],
                       users: Mapping[int, Set[int]]) -> Dict[int, str]:
    """Device equations that would pass a complex value to or from the host, with the reason each joins it: the
    device holds a complex value as two real tensors (``complex_values.complex_eqn``), which a stage boundary cannot
    carry (the torch frontend's ``fallback.complex_crossings``)."""
    from pybuda.frontend.fallback import DEVICE

    moved: Dict[int, str] = {}
    for i, e in enumerate(eqns):
        if stage[i] != DEVICE:
            continue
        if any(_is_complex(v) for v in e.outvars) and any(stage[u] != DEVICE for u in users[i]):
            moved[i] = "its complex result is read on the host (the device holds it as two real tensors)"
        elif any(_is_complex(v) and v in producer and stage[producer[v]] != DEVICE for v in e.invars):
            moved[i] = "reads a complex result of a CPU equation (the device holds complex values as real pairs)"
    return moved


def post_copies(eqns: Sequence[Any], stage: Mapping[int, str], bound: Mapping[Any, Any]) -> Set[int]:
    """The equations not staged POST that the CPU post stage computes again for itself: those that read only
    parameters, constants and literals (through other such equations) and whose result a post equation reads
    (a bias reshaped for a post op). Sent from the device, such a value would cross as one sample's worth
    beside per-sample tensors whose dim 0 holds the microbatch, and the post stage could not split the push;
    computed in the post stage it never crosses. The device keeps its own copy only where it reads one."""
    from pybuda.frontend.fallback import POST

    producer = {v: i for i, e in enumerate(eqns) for v in e.outvars}
    independent: Set[int] = set()
    for i, e in enumerate(eqns):  # jaxpr equations are in topological order
        if all(_is_literal(v) or v in bound or producer.get(v) in independent for v in e.invars):
            independent.add(i)
    copies: Set[int] = set()
    stack = [producer[v] for i, e in enumerate(eqns) if stage[i] == POST for v in e.invars
             if not _is_literal(v) and producer.get(v) in independent and stage[producer[v]] != POST]
    while stack:
        k = stack.pop()
        if k in copies:
            continue
        copies.add(k)
        stack.extend(producer[v] for v in eqns[k].invars if not _is_literal(v) and producer.get(v) in independent)
    return copies


def plan(eqns: Sequence[Any], stage: Mapping[int, str], user_inputs: Sequence[Any], outputs: Sequence[Any],
         bound: Mapping[Any, Any], need_pre: bool = False, copied_to_post: Set[int] = frozenset()
         ) -> Tuple[List[Any], List[Any]]:
    """``(device inputs, device outputs)`` as jaxpr variables, in a deterministic order (the torch
    frontend's :func:`~pybuda.frontend.fallback.plan_stages` contract). ``need_pre``: there is a CPU pre
    stage even without pre equations (it takes PRNG key inputs off the device). ``copied_to_post``: the
    equations the post stage computes for itself (:func:`post_copies`), whose results never leave the device."""
    from pybuda.frontend.fallback import DEVICE, POST, PRE

    producer = {v: i for i, e in enumerate(eqns) for v in e.outvars}
    order: Dict[Any, int] = {v: k for k, v in enumerate(user_inputs)}
    for e in eqns:
        for v in e.outvars:
            order.setdefault(v, len(order))

    def where(v: Any) -> str:
        return "input" if v in user_inputs else stage.get(producer.get(v, -1), "bound")

    def post_has(v: Any) -> bool:
        return where(v) == POST or producer.get(v) in copied_to_post

    def reads(st: str) -> Set[Any]:
        return {v for i, e in enumerate(eqns) if stage[i] == st for v in e.invars
                if not _is_literal(v) and v not in bound}

    finals = [v for v in outputs if not _is_literal(v) and v not in bound]
    has_post = any(s == POST for s in stage.values())
    has_pre = need_pre or any(s == PRE for s in stage.values())
    if has_post:
        need = {v for v in reads(POST) if not post_has(v)} | {v for v in finals if not post_has(v)}
        dev_outputs = sorted(need, key=order.__getitem__)
    else:
        dev_outputs = list(dict.fromkeys(finals))
    if has_pre:
        need = {v for v in reads(DEVICE) if where(v) in (PRE, "input")}
        need |= {v for v in dev_outputs if where(v) in (PRE, "input")}
        dev_inputs = sorted(need, key=order.__getitem__)
    else:
        dev_inputs = list(user_inputs)
    if any(where(v) == POST for v in dev_inputs):  # pragma: no cover - the partition rules this out
        raise CompileError("CPU fallback: a device input is produced after the device", stage=STAGE)
    return dev_inputs, dev_outputs
