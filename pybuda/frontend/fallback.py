"""CPU fallback: split a captured model into [CPU pre, device graph, CPU post] (TT-Buda §1.6).

Which ops run on the host
    An FX op falls back when it has no pybuda mapping, or when its ATen name (e.g. ``embedding``) or a
    pybuda op it maps to is listed in ``CompilerConfig.cpu_fallback_ops``. As in TT-Buda, a fallback op
    drags along whichever is smaller: its *ancestors* (everything it depends on, back to the inputs),
    making it part of the CPU **pre** stage; or its *descendants* (everything that depends on it, up to
    the outputs), making it part of the CPU **post** stage. Ties go to pre. Constants and parameters
    are not ops and never move (a parameter used on both sides is shared: the CPU stage holds the very
    ``torch.nn.Parameter`` of the model).

Ops in the middle of the graph
    An unsupported op deep inside the model has large ancestor *and* descendant sets. We still fall
    back the smaller side (TT-Buda's behaviour) rather than refusing to compile: the model runs, and
    :class:`FallbackReport` says how much of it left the device (``host_fraction``; a warning is logged
    above :data:`HOST_FRACTION_WARNING`). The per-op choices never contradict each other: an op placed
    in pre cannot depend on one placed in post (the size rule rules it out), so the pre set stays closed
    under ancestors and the post set under descendants, and the device graph is what lies between.

Stage contract (what :meth:`pybuda.frontend.torch.CaptureResult.split_for_devices` returns)
    - ``pre(*flat_user_inputs) -> tuple`` of tensors, one per ``device_graph.inputs`` in order;
      ``flat_user_inputs`` are the model's tensor inputs in ``CaptureResult.input_names`` order.
    - Without a pre stage, ``device_graph.inputs`` are exactly those flat user inputs.
    - The device graph returns one tensor per ``device_graph.outputs`` in order.
    - ``post(*device_outputs) -> tuple`` of the model's flat tensor outputs; without a post stage the
      device outputs are the model outputs. Values a later stage needs from an earlier one pass
      through the stage in between (a ``nop`` on the device).
    - ``pre``/``post`` are ``torch.fx.GraphModule``\\ s of ATen ops, runnable on CPU as plain callables.
"""

from __future__ import annotations

import logging
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Collection, Dict, Iterable, List, Mapping, Sequence, Set, Tuple

import torch
import torch.fx

from pybuda.errors import CompileError, InputError, UnsupportedOp

from pybuda.frontend.fx_program import FxProgram, meta_val, qualified_op_name, source_location, source_code_line

log = logging.getLogger(__name__)

PRE, DEVICE, POST = "pre", "device", "post"
HOST_FRACTION_WARNING = 0.25


@dataclass
class FallbackOp:
    """One op that runs on the host, and why."""

    name: str  # FX node name
    aten_op: str
    location: str  # file:line of the model code
    reason: str
    side: str  # "pre" or "post"
    moved_with: int = 0  # other ops that went to the host because of this one
    code: str = ""

    def __str__(self) -> str:
        code = f"  `{self.code}`" if self.code else ""
        return (f"{self.name} ({self.aten_op}) at {self.location}{code} -> CPU {self.side}: {self.reason}"
                f" (+{self.moved_with} op(s) moved with it)")


@dataclass
class FallbackReport:
    """Which ops of a captured model run where, and why. ``str(report)`` is a readable summary."""

    graph_name: str
    enabled: bool
    fallback_ops: List[FallbackOp] = field(default_factory=list)
    pre_ops: List[str] = field(default_factory=list)  # "name (aten op)" in execution order
    post_ops: List[str] = field(default_factory=list)
    device_ops: int = 0  # FX ops mapped onto the device graph
    shared_parameters: List[str] = field(default_factory=list)

    @property
    def has_fallback(self) -> bool:
        return bool(self.pre_ops or self.post_ops)

    @property
    def host_fraction(self) -> float:
        """Share of the model's ops that run on the host."""
        host = len(self.pre_ops) + len(self.post_ops)
        total = host + self.device_ops
        return host / total if total else 0.0

    @property
    def unsupported(self) -> List[UnsupportedOp]:
        """The fallback ops as :class:`~pybuda.errors.UnsupportedOp` entries."""
        return [UnsupportedOp(f.aten_op, f.location, f.reason) for f in self.fallback_ops]

    def op_names(self) -> List[str]:
        """ATen names of the ops that fell back (not counting those moved along with them)."""
        return [f.aten_op for f in self.fallback_ops]

    def __str__(self) -> str:
        lines = [f"CPU fallback report for '{self.graph_name}' "
                 f"(fallback {'enabled' if self.enabled else 'disabled'})"]
        if not self.has_fallback:
            lines.append(f"  all {self.device_ops} op(s) run on the device")
            return "\n".join(lines)
        lines.append(f"  {len(self.fallback_ops)} op(s) fall back to the CPU:")
        lines += [f"    - {f}" for f in self.fallback_ops]

        def listing(ops: Sequence[str]) -> str:
            if not ops:
                return "none"
            shown = ", ".join(ops[:8])
            return f"{len(ops)} op(s): {shown}{', ...' if len(ops) > 8 else ''}"

        lines.append(f"  CPU pre : {listing(self.pre_ops)}")
        lines.append(f"  device  : {self.device_ops} op(s)")
        lines.append(f"  CPU post: {listing(self.post_ops)}")
        lines.append(f"  host share of ops: {self.host_fraction:.1%}")
        if self.shared_parameters:
            lines.append(f"  parameters shared by host and device: {', '.join(self.shared_parameters[:8])}"
                         f"{', ...' if len(self.shared_parameters) > 8 else ''}")
        return "\n".join(lines)


# --- partitioning ---------------------------------------------------------------------------------
def _closure(start: torch.fx.Node, compute: Set[torch.fx.Node], up: bool) -> Set[torch.fx.Node]:
    """Compute-node ancestors (``up``) or descendants of ``start``, excluding ``start``."""
    seen: Set[torch.fx.Node] = set()
    stack = [start]
    while stack:
        node = stack.pop()
        nexts = node.all_input_nodes if up else node.users
        for m in nexts:
            if m in compute and m not in seen:
                seen.add(m)
                stack.append(m)
    return seen


def downstream_of(starts: Iterable[torch.fx.Node], compute: Set[torch.fx.Node]) -> Set[torch.fx.Node]:
    """The compute nodes that depend on any of ``starts`` (the model's inputs, say)."""
    seen: Set[torch.fx.Node] = set()
    for start in starts:
        seen |= _closure(start, compute, up=False)
    return seen


@dataclass
class Partition:
    """Stage of every compute node, and the fallback decisions that produced it."""

    stage: Dict[torch.fx.Node, str]
    decisions: List[FallbackOp]


def assign_sides(host: Iterable[Any], anc: Mapping[Any, Set[Any]], desc: Mapping[Any, Set[Any]],
                 stage: str) -> Tuple[Dict[Any, str], Set[Any], Set[Any]]:
    """The module doc's rule for any node type: each host op goes with the smaller of its ancestors ``anc[u]``
    (pre) and descendants ``desc[u]`` (post), ties to pre. Returns ``(side per host op, pre set, post set)``."""
    side = {u: PRE if len(anc[u]) <= len(desc[u]) else POST for u in host}
    pre: Set[Any] = set()
    post: Set[Any] = set()
    for u, where in side.items():
        if where == PRE:
            pre |= anc[u] | {u}
        else:
            post |= desc[u] | {u}
    if pre & post:
        # Cannot happen: a pre-placed op downstream of a post-placed one would need
        # |anc(post op)| > |desc(post op)| > |desc(pre op)| >= |anc(pre op)| > |anc(post op)|.
        raise CompileError("CPU fallback: an op was placed both before and after the device graph "
                           "(internal partitioning error)", stage=stage)
    return side, pre, post


def _parameter_readers(prog: FxProgram, compute: Set[torch.fx.Node]) -> Dict[str, List[torch.fx.Node]]:
    """The compute nodes reading each parameter tensor, keyed by the first name it has. Tied weights (one
    ``nn.Parameter`` under two names) count as one parameter, whichever placeholders export gave them."""
    names: Dict[int, str] = {}
    readers: Dict[str, List[torch.fx.Node]] = {}
    for node, (pname, tensor) in prog.params.items():
        key = names.setdefault(id(tensor), pname)
        readers.setdefault(key, []).extend(u for u in node.users if u in compute)
    return readers


def partition(prog: FxProgram, host: Mapping[torch.fx.Node, str], one_side_parameters: bool = False) -> Partition:
    """Assign every compute node of ``prog`` to pre, device or post, given the ops that must run on
    the host (``host``: node -> reason). See the module doc for the rule.

    With ``one_side_parameters`` (training), a parameter is never read both on the host and on the device: the
    CPU stages train the model's own ``nn.Parameter`` and the device a copy of it, so each would step with
    only its side's share of the gradient and the two copies would drift apart (a tied embedding and LM head,
    say). Device ops reading a parameter a host op reads join the host, as TT-Buda moved shared parameters'
    users there, until no parameter is read on both sides."""
    compute = set(prog.compute)
    host = dict(host)
    readers = _parameter_readers(prog, compute) if one_side_parameters else {}
    while True:
        anc = {u: _closure(u, compute, up=True) for u in host}
        desc = {u: _closure(u, compute, up=False) for u in host}
        side, pre, post = assign_sides(host, anc, desc, "GENERATE_INITIAL_GRAPH")
        on_host = pre | post
        moved: Dict[torch.fx.Node, str] = complex_crossings(prog, compute, on_host)
        for pname, users in readers.items():
            host_user = next((u for u in users if u in on_host), None)
            if host_user is not None:
                moved.update({u: f"reads parameter '{pname}', which CPU op '{host_user.name}' reads too "
                                 f"(training steps one copy of it)" for u in users if u not in on_host})
        if not moved:
            break
        host.update(moved)
    # A tuple result (split, max.dim ...) never crosses stages: its getitems follow their producer.
    for node in prog.compute:
        if node.target is operator.getitem and node.args[0] in pre:
            pre.add(node)
    stage = {n: PRE if n in pre else POST if n in post else DEVICE for n in prog.compute}
    order = {n: i for i, n in enumerate(prog.compute)}
    decisions = []
    for u in sorted(host, key=order.__getitem__):
        moved = len(anc[u]) if side[u] == PRE else len(desc[u])
        decisions.append(FallbackOp(u.name, qualified_op_name(u.target), source_location(u), host[u], side[u],
                                    moved, source_code_line(u)))
    return Partition(stage, decisions)


def is_complex(node: Any) -> bool:
    """Whether FX ``node`` computes a complex tensor."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dtype.is_complex


def complex_crossings(prog: FxProgram, compute: Set[torch.fx.Node], on_host: Set[torch.fx.Node]) \
        -> Dict[torch.fx.Node, str]:
    """Device nodes that would pass a complex tensor to or from the host (or out of the model), each with the
    reason it joins the host: the device holds a complex value as two real tensors (``aten_complex``), which a
    stage boundary cannot carry."""
    outputs = set(prog.output_nodes)
    moved: Dict[torch.fx.Node, str] = {}
    for node in prog.compute:
        if node in on_host:
            continue
        if is_complex(node) and (node in outputs or any(u in on_host for u in node.users)):
            moved[node] = "its complex result is read on the host (the device holds it as two real tensors)"
        elif any(is_complex(i) and i in on_host for i in node.all_input_nodes if i in compute):
            moved[node] = "reads a complex result of a CPU op (the device holds complex values as real pairs)"
    return moved


# --- stage boundaries -----------------------------------------------------------------------------
@dataclass
class StagePlan:
    """The values each stage takes and gives (FX nodes; Python values for constant outputs)."""

    pre_nodes: List[torch.fx.Node]
    device_nodes: List[torch.fx.Node]
    post_nodes: List[torch.fx.Node]
    device_inputs: List[torch.fx.Node]
    device_outputs: List[Any]
    pre_outputs: List[torch.fx.Node]


def plan_stages(prog: FxProgram, part: Partition) -> StagePlan:
    """Work out the tensors passed between stages (see the module doc's contract)."""
    pre_nodes = [n for n in prog.compute if part.stage[n] == PRE]
    dev_nodes = [n for n in prog.compute if part.stage[n] == DEVICE]
    post_nodes = [n for n in prog.compute if part.stage[n] == POST]
    has_pre, has_post = bool(pre_nodes), bool(post_nodes)
    order = {n: i for i, n in enumerate(prog.user_inputs)}
    order.update({n: len(order) + i for i, n in enumerate(prog.compute)})

    def produced_before(stage: str, node: torch.fx.Node) -> bool:
        if node in prog.consts or node in prog.params:
            return False  # available in every stage
        if node in order and node not in part.stage:
            return True  # a user input
        s = part.stage.get(node)
        return s is not None and (stage == DEVICE and s == PRE or stage == POST and s in (PRE, DEVICE))

    def needed_by(nodes: Iterable[torch.fx.Node], stage: str) -> Set[torch.fx.Node]:
        out: Set[torch.fx.Node] = set()
        for n in nodes:
            for m in n.all_input_nodes:
                if produced_before(stage, m):
                    out.add(m)
        return out

    final_tensors = [o for o in prog.output_leaves if isinstance(o, torch.fx.Node) and o not in prog.consts
                     and o not in prog.params]
    # What post needs, and (without post) what the model returns, must leave the device.
    if has_post:
        post_needs = needed_by(post_nodes, POST) | {o for o in final_tensors if part.stage.get(o) != POST}
        device_outputs: List[Any] = sorted(post_needs, key=order.__getitem__)
    else:
        device_outputs = list(prog.output_leaves)
    dev_out_nodes = {o for o in device_outputs if isinstance(o, torch.fx.Node)}
    if has_pre:
        needs = needed_by(dev_nodes, DEVICE) | {o for o in dev_out_nodes
                                                  if o in order and part.stage.get(o) != DEVICE}
        device_inputs = sorted(needs, key=order.__getitem__)
    else:
        device_inputs = list(prog.user_inputs)
    return StagePlan(pre_nodes, dev_nodes, post_nodes, device_inputs, device_outputs,
                     device_inputs if has_pre else [])


# --- CPU stages -----------------------------------------------------------------------------------
_ATTR_SAFE = re.compile(r"[^0-9a-zA-Z_]")


def not_batch_first(outputs: Sequence[Any], user_inputs: Sequence[torch.fx.Node]) -> Set[torch.fx.Node]:
    """The CPU stage ``outputs`` whose dim 0 cannot be the samples' (:func:`off_batch`), as FX nodes."""
    def shapes(nodes):
        return {n: tensor_meta(n)[0] for n in nodes if isinstance(n, torch.fx.Node) and isinstance(meta_val(n), torch.Tensor)}
    return off_batch(shapes(user_inputs), shapes(outputs))


def off_batch(user_inputs: Mapping[Any, Sequence[int]], values: Mapping[Any, Sequence[int]]) -> Set[Any]:
    """The keys of ``values`` (a CPU stage's results for the device: key -> shape) whose dim 0 cannot be the
    samples': its length differs from the user inputs' (a sequence-first RNN output ``[seq, 1, hidden]`` of a
    one-sample capture), or they have none. The runtime cuts and joins pushes along dim 0, so such values cross
    with a leading sample dim of their own (:func:`add_sample_input`). Shared by the torch and ONNX frontends."""
    batch = {tuple(s)[0] for s in user_inputs.values() if len(s)}
    if len(batch) != 1:
        return set()
    (b,) = batch
    return {k for k, s in values.items() if k not in user_inputs and (not len(s) or tuple(s)[0] != b)}


def add_sample_input(graph: Any, name: str, shape: Sequence[int], dtype: torch.dtype) -> str:
    """A device-graph input for a value that crosses with a leading sample dim (:func:`off_batch`): the input
    ``[1, *shape]`` and a reshape that drops the dim; returns the reshape's name."""
    held = graph.add_input(graph.unique_name(name), (1,) + tuple(shape), dtype).name
    return graph.add_op(graph.unique_name(f"{name}.sample"), "reshape", [held], {"shape": tuple(shape)}).name


def build_cpu_stage(prog: FxProgram, nodes: Sequence[torch.fx.Node], inputs: Sequence[torch.fx.Node],
                    outputs: Sequence[Any], class_name: str,
                    lead: Collection[torch.fx.Node] = ()) -> Tuple[torch.fx.GraphModule, List[str]]:
    """A ``torch.fx.GraphModule`` running ``nodes`` on CPU: ``forward(*inputs) -> tuple(outputs)``; outputs in
    ``lead`` get a leading dim of 1 (:func:`not_batch_first`).

    Parameters become attributes holding the model's own ``nn.Parameter`` objects (shared, not
    copied); constants become buffers. Returns the module and the parameter names it uses.
    """
    root = torch.nn.Module()
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, Any] = {}
    used_params: List[str] = []
    attr_names: Set[str] = set()

    def attr_name(base: str) -> str:
        name = _ATTR_SAFE.sub("_", base) or "c"
        if name[0].isdigit():
            name = "_" + name
        cand, i = name, 1
        while cand in attr_names or hasattr(torch.nn.Module, cand):
            cand, i = f"{name}_{i}", i + 1
        attr_names.add(cand)
        return cand

    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)

    def lookup(node: torch.fx.Node) -> Any:
        if node in env:
            return env[node]
        if node in prog.params:
            pname, tensor = prog.params[node]
            a = attr_name(pname)
            if isinstance(tensor, torch.nn.Parameter):
                root.register_parameter(a, tensor)
            else:
                root.register_buffer(a, tensor)
            used_params.append(pname)
            env[node] = graph.get_attr(a)
            return env[node]
        if node in prog.consts:
            value = prog.consts[node]
            if isinstance(value, torch.Tensor):
                a = attr_name(prog.const_names.get(node, node.name))
                root.register_buffer(a, value)
                env[node] = graph.get_attr(a)
                return env[node]
            if isinstance(value, torch.nn.Module):  # subgraphs of higher-order ops
                a = attr_name(prog.const_names.get(node, node.name))
                root.add_module(a, value)
                env[node] = graph.get_attr(a)
                return env[node]
            return value
        raise CompileError(f"CPU fallback stage '{class_name}': value '{node.name}' is not available there "
                           f"(internal partitioning error)", stage="GENERATE_INITIAL_GRAPH")

    for node in nodes:
        env[node] = graph.node_copy(node, lookup)
        if node.op == "call_function" and node.target is torch.ops.aten.view.default:
            # The stage's inputs come from the device (or another stage) with strides of their own: a view
            # the traced run could take of its tensor may not fit them. The graph is functional, so a
            # reshape (a view where the strides allow, else a copy) computes the same values.
            env[node].target = torch.ops.aten.reshape.default
        if node.op == "call_function" and node.target is torch.ops.aten.embedding.default:
            # torch's own out-of-range message ("index out of range in self") names neither the ids
            # nor the table: check the ids here, where the lookup runs, and say which input is wrong.
            copy = env[node]
            copy.target = checked_embedding
            copy.kwargs = {**copy.kwargs, "label": _ids_label(node)}
    out_values = [lookup(o) if isinstance(o, torch.fx.Node) else o for o in outputs]
    out_values = [graph.call_function(torch.ops.aten.unsqueeze.default, (v, 0)) if o in lead else v
                  for o, v in zip(outputs, out_values)]
    graph.output(tuple(out_values))
    graph.lint()
    gm = torch.fx.GraphModule(root, graph, class_name=class_name)
    gm.eval()
    return gm, used_params


def _ids_label(node: torch.fx.Node) -> str:
    """How an embedding's id tensor is named in errors: the model input it is, or the op and its source."""
    ids = node.args[1] if len(node.args) > 1 else node.kwargs.get("indices")
    if isinstance(ids, torch.fx.Node) and ids.op == "placeholder":
        return f"model input '{ids.name}' (ids of embedding '{node.name}' at {source_location(node)})"
    name = ids.name if isinstance(ids, torch.fx.Node) else "?"
    return f"ids '{name}' of embedding '{node.name}' at {source_location(node)}"


def checked_embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int = -1,
                      scale_grad_by_freq: bool = False, sparse: bool = False, *, label: str = "ids"
                      ) -> torch.Tensor:
    """``aten.embedding`` that raises :class:`InputError` for ids outside ``[0, num_embeddings)``.

    The ids are data the user pushed, so a bad id is an input error, not a device failure."""
    vocab = int(weight.shape[0])
    if indices.numel():
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= vocab:
            bad = indices[(indices < 0) | (indices >= vocab)]
            raise InputError(f"{label}: ids must lie in [0, {vocab - 1}] (vocabulary size {vocab}), but "
                             f"{bad.numel()} id(s) lie outside it (ids range from {lo} to {hi}; first bad id "
                             f"{int(bad.flatten()[0])})")
    return torch.ops.aten.embedding.default(weight, indices, padding_idx, scale_grad_by_freq, sparse)


def describe(nodes: Sequence[torch.fx.Node]) -> List[str]:
    """'name (aten op)' strings for a report."""
    return [f"{n.name} ({qualified_op_name(n.target)})" for n in nodes]


def tensor_meta(node: torch.fx.Node) -> Tuple[Tuple[int, ...], torch.dtype]:
    """Static shape and dtype of a tensor-valued FX node."""
    val = meta_val(node)
    if not isinstance(val, torch.Tensor):
        raise CompileError(f"value '{node.name}' crosses a CPU/device boundary but is not a tensor "
                           f"({type(val).__name__})", stage="GENERATE_INITIAL_GRAPH")
    return tuple(int(d) for d in val.shape), val.dtype


def warn_if_large(report: FallbackReport) -> bool:
    """Log a warning (and return True) when much of the model leaves the device."""
    if report.has_fallback and report.host_fraction > HOST_FRACTION_WARNING:
        log.warning("model '%s': %.0f%% of the ops run on the CPU because of fallback ops:\n%s",
                    report.graph_name, 100 * report.host_fraction, report)
        return True
    return False
