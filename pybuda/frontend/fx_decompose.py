"""Rewrite ops a stored CPU stage may not hold (a library's custom op) into ATen ops, by tracing their kernels.

A device image stores a CPU fallback stage as data that only names allow-listed targets
(:mod:`pybuda.frontend.fx_serde`), so a stage holding, say, a ``torch.library.custom_op`` cannot be stored
as is. :func:`decompose_ops` replaces each such node by the graph its implementation runs: the op is
called once on *fake* tensors (shapes, strides and dtypes only, from the node's ``meta["val"]``) under
``make_fx``, which records the ATen ops it reaches. The implementation traced is the one a CPU call runs:

- a Python kernel registered through ``torch.library`` for the CPU (or for every backend: the default
  kernel of ``torch.library.custom_op``), called below the dispatcher's tracing layer so that the ops it
  calls are recorded;
- otherwise the op itself, which ``make_fx`` decomposes when it has a ``CompositeImplicitAutograd`` kernel.

Fake tensors make the result sound: an implementation that reads tensor values (``.item()``,
``.tolist()``, ``.numpy()``, a loop over values, an output shape that depends on values) cannot be
traced, where a trace on real tensors would silently bake in one sample's values. Compiled (C++) kernels
are never called with fake tensors (they may read memory fake tensors do not have). An op that cannot be
decomposed stays in the graph with the reason in ``node.meta[NOT_DECOMPOSED]``, for the caller's error.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import operator
import re
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch
import torch.fx
from torch.fx.node import map_arg

#: ``node.meta`` key: why an op that is not allowed could not be decomposed.
NOT_DECOMPOSED = "pybuda_not_decomposed"
#: ``node.meta`` key: the ops (outermost first) whose decomposition produced this node.
DECOMPOSED_FROM = "pybuda_decomposed_from"

_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
# Kernel registrations a CPU call can reach below autograd, most specific first.
_CPU_KERNEL_KEYS = ("CPU", "CompositeExplicitAutograd")


class _NotDecomposable(Exception):
    pass


def op_name(op: torch._ops.OpOverload) -> str:
    """``namespace.op.overload``, as error messages name an op."""
    return f"{op.namespace}.{op.__name__}"


def decompose_ops(gm: torch.fx.GraphModule, keep: Callable[[Any], bool]) -> torch.fx.GraphModule:
    """``gm`` with each ``call_function`` node on an ``OpOverload`` that ``keep`` refuses replaced by the ATen
    ops its implementation runs (see the module doc), repeatedly (a decomposition may call other such ops).

    Returns ``gm`` itself when there is nothing to replace, else a new ``GraphModule`` sharing ``gm``'s
    parameters and buffers (not copies); ``gm`` is left untouched. Nodes that cannot be replaced stay, with
    the reason in ``meta[NOT_DECOMPOSED]``.
    """
    def pending(node: torch.fx.Node) -> bool:
        return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
                and not keep(node.target))

    if not any(pending(n) for n in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))  # node_copy copies each node's meta (shallow)
    out = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)  # attributes shared, not copied
    work = collections.deque(n for n in graph.nodes if pending(n))
    while work:
        node = work.popleft()
        try:
            inserted = _replace(out, node)
        except _NotDecomposable as e:
            node.meta[NOT_DECOMPOSED] = str(e)
            continue
        work.extend(n for n in inserted if pending(n))
    graph.lint()
    out.recompile()
    return out


# --- tracing one op ---------------------------------------------------------------------------------------------
def _has_python_cpu_kernel(op: torch._ops.OpOverload) -> bool:
    """Whether the kernel a CPU call of ``op`` reaches below autograd is a Python function registered with
    ``torch.library`` (``torch.library.custom_op``, ``torch.library.impl``/``Library.impl``)."""
    # torch records every Python kernel registration as "namespace/op[.overload]/DispatchKey" in
    # torch.library._impls; no public API says whether a kernel is Python or compiled.
    registered = getattr(torch.library, "_impls", set())
    base = op._schema.name.split("::", 1)[-1]
    names = {f"{base}.{op._schema.overload_name}"} if op._schema.overload_name else {base, f"{base}.default"}
    for key in _CPU_KERNEL_KEYS:
        if op.has_kernel_for_dispatch_key(getattr(torch._C.DispatchKey, key)):
            return any(f"{op.namespace}/{name}/{key}" in registered for name in names)
    return False


def _example(node: torch.fx.Node, gm: torch.fx.GraphModule) -> torch.Tensor:
    """A tensor with the shape, strides and dtype ``node`` has when the stage runs (its value is not used)."""
    value = node.meta.get("val")
    if value is None and node.op == "get_attr":
        value = gm
        for part in node.target.split("."):
            value = getattr(value, part, None)
    if not isinstance(value, torch.Tensor):
        raise _NotDecomposable(f"the stage records no tensor shape for its argument '{node.name}'")
    if any(not isinstance(d, int) for d in (*value.shape, *value.stride())):
        raise _NotDecomposable(f"its argument '{node.name}' has a symbolic shape")
    if value.device.type != "cpu":  # the kernel traced is the CPU one
        raise _NotDecomposable(f"its argument '{node.name}' is not a CPU tensor")
    return value


def _trace(node: torch.fx.Node, gm: torch.fx.GraphModule) -> Tuple[torch.fx.GraphModule, List[torch.fx.Node]]:
    """The graph of ATen ops the node's op runs, and the stage nodes feeding its placeholders (in order)."""
    from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException,
                                               FakeTensorMode)
    from torch.fx.experimental.proxy_tensor import make_fx

    op = node.target
    leaves: Dict[torch.fx.Node, None] = {}  # the tensor arguments, in order, without repeats
    map_arg((node.args, node.kwargs), lambda n: leaves.setdefault(n))
    examples = [_example(n, gm) for n in leaves]
    python_kernel = _has_python_cpu_kernel(op)

    def run(*tensors: torch.Tensor) -> Any:
        env = dict(zip(leaves, tensors))
        args, kwargs = map_arg((node.args, node.kwargs), env.__getitem__)
        if python_kernel:  # straight to the kernel, below the layer make_fx records at: its ops are recorded
            return op.redispatch(_CPU, *args, **kwargs)
        return op(*args, **kwargs)  # a CompositeImplicitAutograd kernel decomposes on the way; else a leaf

    # allow_non_fake_inputs: an implementation may use a real constant tensor of its own (recorded as one).
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with _quiet_fake_tensor_log(), mode:
            fakes = [torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device=v.device)
                     for v in examples]
        with _quiet_fake_tensor_log(), mode, torch.no_grad():
            sub = make_fx(run)(*fakes)
    except (DataDependentOutputException, DynamicOutputShapeException) as e:
        raise _NotDecomposable(
            f"its implementation depends on the values in its input tensors (it reads them with .item(), "
            f".tolist() or the like, or makes an output whose shape depends on them: {_first_line(e)}), so no "
            f"fixed graph of ATen ops computes it for every input") from None
    except Exception as e:  # noqa: BLE001 -- any failure of the user's kernel means: not decomposable
        raise _NotDecomposable(f"its implementation cannot be traced on shape-only (fake) tensors (it may leave "
                               f"torch, e.g. for NumPy, or read tensor values): {type(e).__name__}: "
                               f"{_first_line(e)}") from None
    if any(n.op == "call_function" and n.target is op for n in sub.graph.nodes):
        raise _NotDecomposable(
            "its implementation calls the op itself" if python_kernel else
            "it has no implementation to trace (no Python kernel registered with torch.library and no "
            "CompositeImplicitAutograd decomposition; a compiled kernel cannot be traced)")
    return sub, list(leaves)


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    """Fake tensors log a traceback for each kernel that fails on them; the failure becomes the reason."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


# --- splicing the traced graph into the stage ------------------------------------------------------------------
def _replace(gm: torch.fx.GraphModule, node: torch.fx.Node) -> List[torch.fx.Node]:
    """Replace ``node`` by its traced decomposition; returns the nodes inserted."""
    op = node.target
    lineage = tuple(node.meta.get(DECOMPOSED_FROM, ())) + (op_name(op),)
    if op_name(op) in lineage[:-1]:
        raise _NotDecomposable("its implementation calls the op itself (through other ops)")
    sub, leaves = _trace(node, gm)
    sub_nodes = list(sub.graph.nodes)
    result = sub_nodes[-1].args[0]
    if isinstance(result, (tuple, list)):
        # Several outputs: the stage reads them through getitem with constant indices, replaced below.
        if not all(isinstance(r, torch.fx.Node) for r in result) or not all(
                u.target is operator.getitem and u.args[0] is node and isinstance(u.args[1], int)
                for u in node.users):
            raise _NotDecomposable("its outputs are used other than by index")
    elif not isinstance(result, torch.fx.Node):
        raise _NotDecomposable(f"its traced implementation returns a {type(result).__name__}, not tensors")

    # A view in a graph that writes into views must stay a view; elsewhere a view becomes a reshape for the
    # reason build_cpu_stage gives (inputs may arrive with strides other than the traced ones).
    writes = any(_mutates(n.target) for n in sub_nodes if n.op == "call_function")
    env: Dict[torch.fx.Node, Any] = dict(zip((n for n in sub_nodes if n.op == "placeholder"), leaves))
    inserted: List[torch.fx.Node] = []
    with gm.graph.inserting_before(node):
        for sn in sub_nodes:
            if sn.op == "get_attr":  # a constant the implementation made: a buffer of the stage
                env[sn] = gm.graph.get_attr(_add_buffer(gm, f"{node.name}_{sn.target}", getattr(sub, sn.target)))
            elif sn.op == "call_function":
                new = gm.graph.node_copy(sn, env.__getitem__)
                if new.target is torch.ops.aten.view.default and not writes:
                    new.target = torch.ops.aten.reshape.default
                env[sn] = new
            else:
                continue
            env[sn].meta[DECOMPOSED_FROM] = lineage
            inserted.append(env[sn])
    if isinstance(result, torch.fx.Node):
        node.replace_all_uses_with(env[result])
    else:
        for user in list(node.users):
            user.replace_all_uses_with(env[result[user.args[1]]])
            gm.graph.erase_node(user)
    gm.graph.erase_node(node)
    return inserted


def _mutates(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _add_buffer(gm: torch.fx.GraphModule, base: str, value: torch.Tensor) -> str:
    name = re.sub(r"[^0-9A-Za-z_]", "_", base).lstrip("_") or "c"
    cand, i = name, 1
    while hasattr(gm, cand):
        cand, i = f"{name}_{i}", i + 1
    gm.register_buffer(cand, value)
    return cand

