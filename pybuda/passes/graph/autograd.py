"""Autograd (TT-Buda's AUTOGRAD stage, engine "autograd2"): from a forward Graph, the backward Graph.

:func:`build_training_graphs` propagates ``requires_grad`` from trainable parameters (and the inputs
named in ``input_grads``) toward the outputs, then walks the forward ops in reverse topological order
and calls each op's registry ``backward`` - only for ops on a gradient path - adding up gradients that
arrive on several edges (tied weights, residuals). Backwards are written with registry ops only, through
an :class:`AutogradContext`, so the backward graph compiles through the same pipeline as the forward.

The backward graph's interface is uniform:

* inputs: ``grad.<output>`` for every forward output (in output order), then the saved forward values
  (``TrainingGraphs.saved``, each under its forward name);
* parameters: the forward parameters it reads (same names, values and ``requires_grad``); constants are
  copied;
* outputs: ``grad.<param>`` for every trainable parameter (in forward order), then ``grad.<input>`` for
  every name in ``input_grads``.

Without recompute, every forward op value a backward reads is saved: the forward graph returns it as an
extra output (after the original outputs). With ``recompute=True`` the backward graph recomputes those
values from the forward inputs and parameters, so only forward inputs are saved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.ops.common import transpositions
from pybuda.errors import CompileError
from pybuda.ir.graph import CONSTANT, INPUT, OP, PARAMETER, Graph
from pybuda.ops import registry

STAGE = "AUTOGRAD"
GRAD_PREFIX = "grad."
SAVED_PREFIX = "saved."


@dataclass
class TrainingGraphs:
    """What :func:`build_training_graphs` returns.

    ``forward``: the forward graph plus one extra output per saved op activation (``saved_outputs``,
    after the original outputs). ``backward``: inputs ``grad.<output>`` per forward output, then the
    ``saved`` values; outputs ``grad.<param>`` per trainable parameter, then ``grad.<input>`` per
    requested input gradient. ``param_grads`` / ``input_grads`` map a forward parameter / input name to
    its backward output node name. ``output_grads`` lists the backward's gradient inputs (one per
    forward output, in order).
    """

    forward: Graph
    backward: Graph
    saved: List[str] = field(default_factory=list)
    saved_outputs: List[str] = field(default_factory=list)
    param_grads: Dict[str, str] = field(default_factory=dict)
    input_grads: Dict[str, str] = field(default_factory=dict)
    output_grads: List[str] = field(default_factory=list)
    recompute: bool = False
    #: Saved outputs that return a kept copy of a forward input (:func:`save_inputs_on_device`) -> the input.
    input_copies: Dict[str, str] = field(default_factory=dict)

    def saved_outputs_sources(self) -> List[str]:
        """The saved forward value each extra forward output returns (parallel to ``saved_outputs``)."""
        return [self.input_copies.get(name) or self.forward[name].operands[0] for name in self.saved_outputs]


def save_inputs_on_device(tg: TrainingGraphs) -> List[str]:
    """Return every saved floating-point forward input from the forward as well, through a ``buffer`` op (a
    copy the compiler keeps), so that on a device the backward reads the copy the forward left in device DRAM
    instead of the host pushing the input a second time. Integer inputs (embedding ids) are still fed again.
    Returns the inputs now returned."""
    inputs = {node.name: node for node in tg.forward.inputs}
    kept = []
    for name in tg.saved:
        node = inputs.get(name)
        if node is None or not node.dtype.is_floating_point or name in tg.input_copies.values():
            continue
        copy = tg.forward.add_op(tg.forward.unique_name(f"{name}.saved_copy"), "buffer", [name])
        out_name = tg.forward.unique_name(SAVED_PREFIX + name)
        tg.forward.add_output(out_name, copy.name)
        tg.saved_outputs.append(out_name)
        tg.input_copies[out_name] = name
        kept.append(name)
    return kept


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


class AutogradContext:
    """The handle an op's ``backward`` builds its part of the backward graph through.

    Forward values are named by their forward node names; :meth:`fwd` turns one into a backward-graph
    node (a saved activation, a shared parameter, a copied constant, or - with recompute - the
    recomputed op), created on first use. Every other method adds registry ops to the backward graph and
    returns the new node's name.
    """

    def __init__(self, forward: Graph, backward: Graph, recompute: bool = False):
        self.forward = forward
        self.backward = backward
        self.recompute = recompute
        self.saved: List[str] = []
        self.memo: Dict[Any, Any] = {}  # shared sub-results of one op's backward across its operands
        self._scalars: Dict[Tuple[float, torch.dtype], str] = {}
        self._from_forward: set = set()  # backward nodes standing for forward values (same names)
        self._leaf_only: Dict[str, bool] = {}  # forward ops computed from parameters/constants alone
        self._current = "bw"
        self._counter = 0

    def _fresh(self, base: str) -> str:
        """A new backward node name that no forward node has either (forward values keep their names)."""
        name, i = base, 0
        while name in self.backward or name in self.forward:
            i += 1
            name = f"{base}_{i}"
        return name

    # --- core API -------------------------------------------------------------------------------------
    def op(self, op_type: str, operands: Sequence[str], attrs: Optional[Mapping[str, Any]] = None) -> str:
        """Add registry op ``op_type`` on backward-graph nodes ``operands``; returns its name."""
        name = self._fresh(f"bw.{self._current}.{op_type}")
        try:
            self.backward.add_op(name, op_type, list(operands), dict(attrs or {}))
        except Exception as e:  # a backward that builds an invalid op is a compiler bug: name the op
            raise CompileError(f"backward of '{self._current}' built an invalid '{op_type}': {e}", stage=STAGE,
                               op=self._current) from e
        return name

    def constant(self, value: Any, dtype: Optional[torch.dtype] = None) -> str:
        """A constant node: a python scalar (stored with shape (1,), which broadcasts) or a tensor."""
        if isinstance(value, torch.Tensor):
            t = value.to(dtype) if dtype is not None else value
            self._counter += 1
            name = self._fresh(f"bw.const.{self._counter}")
            self.backward.add_constant(name, t.detach().clone().contiguous())
            return name
        dtype = dtype or torch.float32
        key = (float(value), dtype)
        if key not in self._scalars:
            name = self._fresh(f"bw.const.{float(value):g}")
            self.backward.add_constant(name, torch.tensor([float(value)], dtype=dtype))
            self._scalars[key] = name
        return self._scalars[key]

    def fwd(self, name: str) -> str:
        """The backward-graph node for forward value ``name`` (same name), created on first use."""
        if name in self._from_forward:
            return name
        # Recomputed values need their operands first: visit the missing ones depth-first with an explicit
        # stack (a deep model would overflow Python's recursion limit), each added after its operands.
        stack = [(name, False)]
        while stack:
            current, expanded = stack.pop()
            if current in self._from_forward:
                continue
            operands = self._recomputed_operands(current)
            if expanded or not operands:
                self._add_forward_value(current)
                continue
            stack.append((current, True))
            stack.extend((o, False) for o in reversed(operands) if o not in self._from_forward)
        return name

    def _recomputed_operands(self, name: str) -> List[str]:
        node = self.forward[name]
        if node.kind == OP and (self.recompute or self._from_leaves_only(name)):
            return list(node.operands)
        return []

    def _add_forward_value(self, name: str) -> None:
        if name in self.backward:
            raise CompileError(f"forward node '{name}' collides with a backward node name", stage=STAGE, op=name)
        self._from_forward.add(name)
        node = self.forward[name]
        if node.kind == PARAMETER:
            self.backward.add_parameter(name, self.forward.tensors[name], requires_grad=node.requires_grad)
            self.backward[name].tags.update(node.tags)
        elif node.kind == CONSTANT:
            self.backward.add_constant(name, self.forward.tensors[name])
        elif node.kind == INPUT or not (self.recompute or self._from_leaves_only(name)):
            if node.kind not in (INPUT, OP):
                raise CompileError(f"cannot save forward node '{name}' of kind {node.kind}", stage=STAGE, op=name)
            self.backward.add_input(name, node.shape, node.dtype)
            self.saved.append(name)
        else:
            self.backward.add_op(name, node.op_type, list(node.operands), node.attrs, tags=node.tags)

    def _from_leaves_only(self, name: str) -> bool:
        """True for a forward op computed from parameters and constants alone (a transposed weight): the
        backward recomputes it from the parameters instead of saving a copy per sample, which would also
        lack the microbatch dim every saved activation has."""
        known = self._leaf_only
        if not known:  # one pass in topological order (a recursive walk overflows on deep models)
            for node in self.forward:
                known[node.name] = node.kind in (PARAMETER, CONSTANT) or (
                    node.kind == OP and all(known[o] for o in node.operands))
        return known[name]

    def shape(self, name: str) -> Tuple[int, ...]:
        """Shape of a backward node, or of a forward value (they agree where both exist)."""
        if name in self.backward:
            return tuple(self.backward[name].shape)
        return tuple(self.forward[name].shape)

    def dtype(self, name: str) -> torch.dtype:
        if name in self.backward:
            return self.backward[name].dtype
        return self.forward[name].dtype

    # --- helpers built from registry ops ---------------------------------------------------------------
    def add(self, a: str, b: str) -> str:
        return self.op("add", [a, b])

    def sub(self, a: str, b: str) -> str:
        return self.op("subtract", [a, b])

    def mul(self, a: str, b: Any) -> str:
        return self.op("multiply", [a, self._node(b)])

    def div(self, a: str, b: Any) -> str:
        return self.op("divide", [a, self._node(b)])

    def neg(self, a: str) -> str:
        return self.mul(a, -1.0)

    def _node(self, value: Any) -> str:
        return self.constant(value) if isinstance(value, (int, float, torch.Tensor)) else value

    def zeros(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> str:
        return self.constant(torch.zeros(tuple(shape), dtype=dtype))

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        """``x`` reshaped to ``shape`` (``x`` itself when it already has it)."""
        shape = tuple(int(d) for d in shape)
        return x if self.shape(x) == shape else self.op("reshape", [x], {"shape": shape})

    def transpose(self, x: str, dim0: int, dim1: int) -> str:
        rank = len(self.shape(x))
        if dim0 % rank == dim1 % rank:
            return x
        return self.op("transpose", [x], {"dim0": dim0 % rank, "dim1": dim1 % rank})

    def permute(self, x: str, perm: Sequence[int]) -> str:
        """``x`` with its dims permuted (output dim i = input dim perm[i]), as a chain of transposes."""
        for i, j in transpositions(perm):
            x = self.transpose(x, i, j)
        return x

    def movedim(self, x: str, src: int, dst: int) -> str:
        rank = len(self.shape(x))
        src, dst = src % rank, dst % rank
        dims = [d for d in range(rank) if d != src]
        dims.insert(dst, src)
        return self.permute(x, dims)

    def crop(self, x: str, dim: int, start: int, length: int) -> str:
        """Elements [start, start + length) of dim."""
        size = self.shape(x)[dim]
        if start == 0 and length == size:
            return x
        return self.op("index", [x], {"dim": dim, "start": start, "stop": start + length, "stride": 1})

    def pad_dim(self, x: str, dim: int, before: int, after: int, value: float = 0.0) -> str:
        """``x`` with ``before``/``after`` elements of ``value`` added along ``dim`` (any dim)."""
        if before == 0 and after == 0:
            return x
        shape = list(self.shape(x))
        dim = dim % len(shape)
        parts = []
        for n in (before, None, after):
            if n is None:
                parts.append(x)
            elif n:
                fill = list(shape)
                fill[dim] = n
                parts.append(self.constant(torch.full(fill, value, dtype=self.dtype(x))))
        return self.op("concatenate", parts, {"axis": dim})

    def fit_dim(self, x: str, dim: int, start: int, size: int) -> str:
        """Place ``x`` at offset ``start`` of a zero tensor with ``size`` elements along dim (cropping what
        falls outside)."""
        length = self.shape(x)[dim]
        if start < 0:
            x = self.crop(x, dim, -start, length + start)
            length += start
            start = 0
        if start + length > size:
            x = self.crop(x, dim, 0, size - start)
            length = size - start
        return self.pad_dim(x, dim, start, size - start - length)

    def reduce_sum(self, x: str, dim: int) -> str:
        return self.op("reduce_sum", [x], {"dim": dim})

    def sum_to(self, x: str, keep_dim: int, to_shape: Sequence[int]) -> str:
        """Sum ``x`` over every dim but ``keep_dim`` and reshape to ``to_shape`` (per-channel parameters)."""
        rank = len(self.shape(x))
        keep_dim %= rank
        for d in range(rank):
            if d != keep_dim and self.shape(x)[d] != 1:
                x = self.reduce_sum(x, d)
        return self.reshape(x, to_shape)

    def unbroadcast(self, grad: str, to_shape: Sequence[int]) -> str:
        """Sum ``grad`` over the dims it was broadcast along, so it gets ``to_shape``."""
        to_shape = tuple(to_shape)
        shape = self.shape(grad)
        if shape == to_shape:
            return grad
        lead = len(shape) - len(to_shape)
        for d in range(len(shape)):
            target = 1 if d < lead else to_shape[d - lead]
            if shape[d] != target:
                if target != 1:
                    raise CompileError(f"cannot unbroadcast a gradient of shape {list(shape)} to {list(to_shape)}",
                                       stage=STAGE, op=self._current)
                grad = self.reduce_sum(grad, d)
        return self.reshape(grad, to_shape)

    def gather_backward(self, grad: str, dim: int, positions: Sequence[int], size: int) -> str:
        """Backward of ``out = x.index_select(dim, positions)`` (a position -1 reads a zero): every output
        element adds into its source position, as one matmul with a constant 0/1 matrix."""
        rank = len(self.shape(grad))
        dim %= rank
        mat = torch.zeros(len(positions), size)
        for i, p in enumerate(positions):
            if p >= 0:
                mat[i, p] += 1.0
        g = self.transpose(grad, dim, rank - 1) if dim != rank - 1 else grad
        if rank == 1:
            g = self.reshape(g, (1, len(positions)))
        out = self.op("matmul", [g, self.constant(mat, self.dtype(grad))])
        if rank == 1:
            return self.reshape(out, (size,))
        return self.transpose(out, dim, rank - 1) if dim != rank - 1 else out

    def one_hot(self, indices: str, size: int) -> str:
        """[N, size] float32 one-hot rows of the (flattened) integer-valued ``indices``; a negative index
        counts from the end, as in torch indexing."""
        n = math.prod(self.shape(indices))
        idx = self.reshape(indices, (n, 1))
        if self.dtype(idx) != torch.float32:
            idx = self.op("cast", [idx], {"dtype": "float32"})
        negative = self.op("less", [idx, self.constant(0.0)])
        idx = self.add(idx, self.mul(negative, float(size)))
        return self.op("equal", [idx, self.constant(torch.arange(size, dtype=torch.float32).reshape(1, size))])

    def sum_all(self, grads: Sequence[str]) -> str:
        out = grads[0]
        for g in grads[1:]:
            out = self.add(out, g)
        return out


def build_training_graphs(graph: Graph, *, recompute: bool = False, input_grads: Sequence[str] = ()) -> TrainingGraphs:
    """The forward graph with saved activations and the backward graph of ``graph`` (see the module doc)."""
    input_grads = list(input_grads)
    for name in input_grads:
        if name not in graph or graph[name].kind != INPUT:
            raise CompileError(f"input_grads names '{name}', which is no input of graph '{graph.name}'", stage=STAGE)
        if not _is_float(graph[name].dtype):
            raise CompileError(f"input '{name}' has dtype {graph[name].dtype}: integer and bool values carry no "
                               f"gradient", stage=STAGE)
    trainable = [p.name for p in graph.parameters if p.requires_grad and _is_float(p.dtype)]

    # 1. requires_grad: from trainable parameters and requested inputs toward the outputs.
    live = set(trainable) | set(input_grads)
    for node in graph:
        if node.kind != OP or not _is_float(node.dtype):
            continue
        if registry.get(node.op_type).backward is registry.NO_GRADIENT:
            continue
        if any(o in live for o in node.operands):
            live.add(node.name)

    backward = Graph(f"{graph.name}_bwd")
    backward.microbatch = graph.microbatch
    output_grads = []
    for out in graph.outputs:
        name = GRAD_PREFIX + out.name
        if name in graph:
            raise CompileError(f"forward node '{name}' collides with the gradient input of output '{out.name}'",
                               stage=STAGE, op=name)
        backward.add_input(name, out.shape, out.dtype)
        output_grads.append(name)
    ac = AutogradContext(graph, backward, recompute)

    # 2. gradients flow back from the outputs; each op's backward runs once its gradient is complete.
    pending: Dict[str, List[str]] = {}
    for out, gname in zip(graph.outputs, output_grads):
        src = out.operands[0]
        if src in live:
            pending.setdefault(src, []).append(gname)
    for node in reversed(graph.ops):
        if node.name not in live or node.name not in pending:
            continue
        ac._current = node.name
        ac.memo = {}
        grad = ac.sum_all(pending.pop(node.name))
        opdef = registry.get(node.op_type)
        if opdef.backward is None:
            raise CompileError(f"op type '{node.op_type}' has no backward, and op '{node.name}' is on a gradient "
                               f"path", stage=STAGE, op=node.name)
        for i, operand in enumerate(node.operands):
            if operand not in live:
                continue
            try:
                result = opdef.backward(ac, i, list(node.operands), node.name, grad, dict(node.attrs))
            except CompileError:
                raise
            except Exception as e:
                raise CompileError(f"backward of '{node.op_type}' failed for operand {i}: {e!r}", stage=STAGE,
                                   op=node.name) from e
            if result is None:
                continue
            result = _rank_restored(ac, result, tuple(graph[operand].shape))
            if ac.shape(result) != tuple(graph[operand].shape):
                raise CompileError(f"backward of '{node.op_type}' gave operand {i} a gradient of shape "
                                   f"{list(ac.shape(result))}, expected {list(graph[operand].shape)}", stage=STAGE,
                                   op=node.name)
            pending.setdefault(operand, []).append(result)

    # 3. outputs: parameter gradients, then input gradients (zero where no path reaches an output).
    ac._current = "out"
    param_grads: Dict[str, str] = {}
    in_grads: Dict[str, str] = {}
    for names, table in ((trainable, param_grads), (input_grads, in_grads)):
        for name in names:
            grads = pending.get(name)
            src = ac.sum_all(grads) if grads else ac.constant(torch.zeros(graph[name].shape, dtype=graph[name].dtype))
            out_name = GRAD_PREFIX + name
            if out_name in backward:
                raise CompileError(f"gradient output '{out_name}' collides with a backward node", stage=STAGE,
                                   op=name)
            backward.add_output(out_name, src)
            table[name] = out_name

    # Inputs in interface order: output gradients, then saved values (in first-use order).
    saved = list(ac.saved)
    order = output_grads + saved
    nodes = {n: backward.nodes[n] for n in order}
    nodes.update({n: node for n, node in backward.nodes.items() if n not in nodes})
    backward.nodes = nodes

    forward = graph.copy()
    # A parameter or constant a backward looked at but did not use (created on first use, then not needed)
    # would be a device parameter no program reads: drop it.
    for node in list(backward.parameters) + list(backward.constants):
        if not backward.users(node.name):
            backward.remove(node.name)
    saved_outputs: List[str] = []
    for name in saved:
        if graph[name].kind == OP:
            out_name = forward.unique_name(SAVED_PREFIX + name)
            forward.add_output(out_name, name)
            saved_outputs.append(out_name)
    return TrainingGraphs(forward=forward, backward=backward, saved=saved, saved_outputs=saved_outputs,
                          param_grads=param_grads, input_grads=in_grads, output_grads=output_grads,
                          recompute=recompute)


def run_training_graphs_on_cpu(tg: TrainingGraphs, inputs: Sequence[torch.Tensor],
                               output_grads: Optional[Sequence[torch.Tensor]] = None,
                               parameters: Optional[Mapping[str, torch.Tensor]] = None
                               ) -> Tuple[List[torch.Tensor], Dict[str, torch.Tensor]]:
    """Run forward then backward with the registry's torch references (the CPU golden of training).

    ``output_grads`` default to ones. Returns (the forward's original outputs, gradients keyed by the
    forward parameter / input name).
    """
    from pybuda.verify import run_graph_on_cpu

    outs = run_graph_on_cpu(tg.forward, inputs, parameters)
    n = len(tg.output_grads)
    originals, extra = outs[:n], outs[n:]
    values = {node.name: v for node, v in zip(tg.forward.inputs, inputs)}
    values.update(zip(tg.saved_outputs_sources(), extra))
    if output_grads is None:
        output_grads = [torch.ones_like(o) for o in originals]
    bwd_inputs = list(output_grads) + [values[name] for name in tg.saved]
    bwd_params = {k: v for k, v in (parameters or {}).items() if k in tg.backward}
    results = run_graph_on_cpu(tg.backward, bwd_inputs, bwd_params)
    named = dict(zip([o.name for o in tg.backward.outputs], results))
    grads = {p: named[o] for p, o in tg.param_grads.items()}
    grads.update({i: named[o] for i, o in tg.input_grads.items()})
    return originals, grads


def _rank_restored(ac: Any, grad: str, shape: Tuple[int, ...]) -> str:
    """``grad`` reshaped to ``shape`` when it differs only by leading dims of size 1: a Python scalar in a backward
    (a constant of shape (1,), which broadcasts) raises a 0-dim operand's gradient to rank 1 (``s.square()`` of a
    scalar parameter: ``grad * (s * 2.0)``)."""
    got = tuple(ac.shape(grad))
    extra = len(got) - len(shape)
    if got == shape or extra <= 0 or got[extra:] != shape or any(d != 1 for d in got[:extra]):
        return grad
    return ac.reshape(grad, shape)


__all__ = ["AutogradContext", "TrainingGraphs", "build_training_graphs", "run_training_graphs_on_cpu"]
