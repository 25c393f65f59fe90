"""One training netlist per device: the forward, backward and optimizer netlists merged, with their queues linked.

The compiler builds each training program (a module's forward, its backward, the optimizer) with its own
compile (:func:`pybuda.runtime.training.compile_program`), which gives one netlist each. This module merges
them into the netlist TT-Buda would have produced for the device (netlist_backend_spec §1, ttbuda_spec
AUTOGRAD): graphs ``fwd_N`` / ``bwd_N`` / ``opt_N`` numbered over the whole netlist, programs ``run_fwd_K`` /
``run_bwd_K`` / ``run_opt_0``, and one set of queues in which what the programs hand each other stays in
device DRAM:

* **parameters** — one ``ram`` queue read by the forward and the backward and written by the optimizer op
  that computes its new value (``input: <op>``);
* **saved activations** — the forward's output queue for an activation the backward needs is read by the
  backward directly (a DRAM FIFO of ``saved_entries`` entries, so several forwards may wait for their
  backward);
* **gradient accumulators** — the backward op producing a parameter's gradient becomes a ``gradient_op``
  that accumulates every sample of every microbatch into a one-entry ``ram`` queue in the accumulate
  format (``acc_df``), zeroed by the backward program's ``$p_zero_grad`` on the first microbatch of an
  accumulation; the optimizer graph reads the accumulator;
* **optimizer state** — written back in place by the op computing its next value.

A link is made only where the two sides hold a tensor in the same device layout, or in layouts one tile
transpose apart (the transpose becomes an input TM of the reading ops). This is decided from the host-I/O
records alone: each side's host path is a chain of views of one buffer, compared position by position
(:func:`output_to_input`, :func:`ram_to_ram`); a host step that is no view (a pad) is checked on distinct
values instead (:func:`layout_relation`). So a link can never change what a program computes, and deciding
the links of a large model takes no tensor work. Everything else keeps going through the host, as :class:`Part` records (``linked_inputs`` /
``linked_outputs`` name what no longer does).

Names: every queue and op of a part is prefixed with the part's key (``fwd0.``, ``bwd1.``, ``opt.``) except
linked parameter queues, which keep the parameter's name. DRAM (and host) addresses of each part are moved
past the previous parts' so that queues of different programs never share memory.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import CompileError
from pybuda.netlist.host_io import HostIO, QueueIO, from_device_layout, to_canonical, to_device_layout
from pybuda.netlist.model import (
    BINARY_OPS, COPY_OPS, MATMUL_OPS, SFPU_OPS, Execute, GraphDef, Netlist, NetlistOp, Param, Program, QueueDef, QueueSetting, Transpose, Var,
    VarInst, EndLoop,
)

#: The backward program's parameter: 1 zeroes the gradient accumulators before the first microbatch.
ZERO_GRAD_PARAM = "$p_zero_grad"
ZERO_GRAD_VAR = "$v_zero_grad"
#: Microbatches of saved activations a forward program may leave for the backward by default.
DEFAULT_SAVED_MICROBATCHES = 8
_ALIGN = 64


@dataclass
class Part:
    """One compiled program's netlist and host-I/O record inside a training netlist.

    ``key``: name prefix of its queues and ops; ``kind``: fwd, bwd or opt; ``program``: its program's
    name in the merged netlist. After :func:`build_training_netlist`: ``host_io`` names merged queues,
    ``queue_names`` maps the part's own queue names to merged ones, ``linked_inputs`` / ``linked_outputs``
    are the framework names of inputs / outputs that stay on the device (the host neither pushes nor pops
    them) and ``linked_rams`` the ram queues written by another part (the host must not write them)."""

    key: str
    kind: str
    program: str
    netlist: Netlist
    host_io: HostIO
    queue_names: Dict[str, str] = field(default_factory=dict)
    linked_inputs: Set[str] = field(default_factory=set)
    linked_outputs: Set[str] = field(default_factory=set)
    linked_rams: Set[str] = field(default_factory=set)
    graphs: List[str] = field(default_factory=list)


@dataclass
class Link:
    """Queue ``alias`` of part ``alias_part`` is replaced by queue ``target`` of part ``target_part``.

    ``kind``: ``saved`` (forward output read by the backward), ``param`` (a parameter ram read by two
    programs), ``grad`` (a backward gradient output read by the optimizer: becomes an accumulator),
    ``update`` / ``state`` (an optimizer output written into the parameter / state ram it replaces).
    ``tms``: TMs the alias's readers apply to the target's layout. ``at_producer``: the target's producer
    (a nop) transposes instead, so the target holds the alias's layout (readers that may not transpose)."""

    kind: str
    target_part: str
    target: str
    alias_part: str
    alias: str
    tms: Tuple[Any, ...] = ()
    at_producer: bool = False


@dataclass
class TrainingNetlist:
    """The merged netlist, its parts (with merged names) and the links made."""

    netlist: Netlist
    parts: Dict[str, Part]
    links: List[Link]
    accumulators: Dict[str, str]  # parameter -> its gradient accumulator queue

    def part(self, key: str) -> Part:
        return self.parts[key]


# --- layouts ---------------------------------------------------------------------------------------------------


def _random_like_queue(rec: QueueIO, entries: int, gen: torch.Generator) -> torch.Tensor:
    shape = rec.device_shape if rec.device_shape is not None else rec.framework_shape
    return torch.stack([to_canonical(torch.rand(tuple(shape), generator=gen) + 0.5) for _ in range(entries)])


def layout_relation(held: torch.Tensor, wanted: torch.Tensor) -> Optional[Tuple[Any, ...]]:
    """The netlist TMs that turn device data ``held`` into ``wanted`` (``()`` or a tile transpose), or None."""
    if held.shape == wanted.shape and torch.equal(held, wanted):
        return ()
    t = held.transpose(-1, -2)
    if t.shape == wanted.shape and torch.equal(t, wanted):
        return (Transpose(),)
    return None


# Layouts are compared analytically: each side's host path (host TMs, the reshape to the device shape, the
# canonical [z, R, C] form, one entry per sample) is a chain of view operations, so the element a device
# position holds is an affine function of the position, a strided view (shape, strides, offset) of one
# contiguous buffer. Two layouts agree when their views agree on every position of size > 1; they are a tile
# transpose apart when one's last two dims swapped give the other. Steps that are not views (a zero pad, a
# reshape of dims that cannot merge) fall back to comparing random values through the same host path.


@dataclass(frozen=True)
class _View:
    """Which element of a contiguous buffer each position of a tensor holds: ``offset + sum(i * stride)``."""

    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: Sequence[int]) -> "_View":
        strides, step = [], 1
        for d in reversed(tuple(shape)):
            strides.insert(0, step)
            step *= int(d)
        return _View(tuple(int(d) for d in shape), tuple(strides))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def key(self) -> Tuple[Any, ...]:
        """What decides the element at every position (a size-1 dim's stride never matters)."""
        return (self.shape, tuple(st for d, st in zip(self.shape, self.strides) if d != 1), self.offset)

    def transpose(self, d0: int, d1: int) -> "_View":
        shape, strides = list(self.shape), list(self.strides)
        d0, d1 = d0 % len(shape), d1 % len(shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        strides[d0], strides[d1] = strides[d1], strides[d0]
        return _View(tuple(shape), tuple(strides), self.offset)

    def reshape(self, shape: Sequence[int]) -> Optional["_View"]:
        """The view with ``shape`` over the same elements in row-major order; None where that is not a view."""
        shape = [int(d) for d in shape]
        if shape.count(-1) == 1:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = self.numel // known if known else 0
        if math.prod(shape) != self.numel or self.numel == 0:
            return None
        # Runs of old dims that are contiguous with each other: (element count, stride of the run's last dim).
        runs: List[Tuple[int, int]] = []
        for d, st in zip(self.shape, self.strides):
            if d == 1:
                continue
            if runs and runs[-1][1] == st * d:
                runs[-1] = (runs[-1][0] * d, st)
            else:
                runs.append((d, st))
        strides = [0] * len(shape)
        dims = [k for k, d in enumerate(shape) if d != 1]
        for count, base in runs:
            group: List[int] = []
            while math.prod(shape[k] for k in group) < count:
                if not dims:
                    return None
                group.append(dims.pop(0))
            if math.prod(shape[k] for k in group) != count:
                return None
            step = base
            for k in reversed(group):
                strides[k] = step
                step *= shape[k]
        return _View(tuple(shape), tuple(strides), self.offset) if not dims else None

    def sample(self, i: int) -> "_View":
        """Entry ``i`` of dim 0 kept as a dim of size 1 (``x[i:i + 1]``)."""
        return _View((1,) + self.shape[1:], self.strides, self.offset + i * self.strides[0])


def _stack(views: Sequence[_View]) -> Optional[_View]:
    """``torch.stack(views)`` as one view: the views must differ only by evenly spaced offsets."""
    first = views[0]
    step = views[1].offset - first.offset if len(views) > 1 else first.numel
    for k, v in enumerate(views):
        if v.key()[:2] != first.key()[:2] or v.offset != first.offset + k * step:
            return None
    return _View((len(views),) + first.shape, (step,) + first.strides, first.offset)


class _NotAView(Exception):
    """A host step that is no view of its input: the layouts are compared on values instead."""


def _host_tms_view(view: _View, host_tms: Sequence[Any]) -> _View:
    for tm in host_tms:
        if tm.op_type == "reshape":
            out = view.reshape(tm.attrs["shape"])
        elif tm.op_type == "transpose":
            out = view.transpose(int(tm.attrs["dim0"]), int(tm.attrs["dim1"]))
        else:  # a pad writes zeros the buffer does not hold
            out = None
        if out is None:
            raise _NotAView(tm.op_type)
        view = out
    return view


def _must(view: Optional[_View]) -> _View:
    if view is None:
        raise _NotAView("reshape")
    return view


def _device_shape(rec: QueueIO) -> Tuple[int, ...]:
    return tuple(rec.device_shape) if rec.device_shape is not None else tuple(rec.framework_shape)


def _canonical(view: _View) -> _View:
    """A per-sample view in its canonical ``[z, r, c]`` form (tile padding holds zeros on both sides)."""
    from pybuda.netlist.host_io import canonical_zrc

    return _must(view.reshape(canonical_zrc(view.shape)))


def _pushed_view(rec: QueueIO, value: _View) -> _View:
    """:func:`to_device_layout` on a view: the ``[entries, z, r, c]`` the queue of ``rec`` holds."""
    value = _host_tms_view(value, rec.host_tms)
    shape = _device_shape(rec)
    if rec.batched:
        samples = [_canonical(_must(value.sample(i).reshape(shape))) for i in range(value.shape[0])]
    else:
        samples = [_canonical(_must(value.reshape(shape)))]
    return _must(_stack(samples))


def _popped_view(rec: QueueIO, data: _View) -> _View:
    """:func:`from_device_layout` on a view of ``[entries, z, r, c]`` device data."""
    shape = _device_shape(rec)
    samples = [_host_tms_view(_must(data.sample(i).reshape(shape)), rec.host_tms) for i in range(data.shape[0])]
    if not rec.batched:
        return samples[0]
    if samples[0].shape == ():
        return _must(_stack(samples))
    stacked = _must(_stack(samples))
    return _must(stacked.reshape((stacked.shape[0] * stacked.shape[1],) + stacked.shape[2:]))


def _view_relation(held: _View, wanted: _View) -> Optional[Tuple[Any, ...]]:
    """:func:`layout_relation` of two views of one buffer of distinct values."""
    if held.key() == wanted.key():
        return ()
    if len(held.shape) >= 2 and held.transpose(-1, -2).key() == wanted.key():
        return (Transpose(),)
    return None


def output_to_input(out_rec: QueueIO, in_rec: QueueIO, entries: int,
                    reshape: Optional[Sequence[int]] = None) -> Optional[Tuple[Any, ...]]:
    """How an input queue would hold what an output queue holds, when the host passes the tensor on
    (``from_device_layout``, then a reshape to ``reshape`` when given, then ``to_device_layout``): the TMs,
    or None. Decided from the records' shapes and host TMs (see :class:`_View`)."""
    from pybuda.netlist.host_io import canonical_zrc

    try:
        held = _View.contiguous((entries,) + canonical_zrc(_device_shape(out_rec)))
        value = _popped_view(out_rec, held)
        if reshape is not None:
            value = _must(value.reshape(reshape))
        return _view_relation(held, _pushed_view(in_rec, value))
    except (_NotAView, IndexError, ValueError):
        return _output_to_input_on_values(out_rec, in_rec, entries, reshape)


def _output_to_input_on_values(out_rec: QueueIO, in_rec: QueueIO, entries: int,
                               reshape: Optional[Sequence[int]]) -> Optional[Tuple[Any, ...]]:
    """:func:`output_to_input` by passing random values through the host path (steps that are not views)."""
    gen = torch.Generator().manual_seed(1234)
    held = _random_like_queue(out_rec, entries, gen)
    try:
        value = from_device_layout(out_rec, held)
        if reshape is not None:
            value = value.reshape(tuple(reshape))
        wanted = to_device_layout(in_rec, value)
    except (RuntimeError, ValueError, IndexError):
        return None
    return layout_relation(held, wanted)


def ram_to_ram(a: QueueIO, b: QueueIO, shape: Sequence[int]) -> Optional[Tuple[Any, ...]]:
    """How ram ``b`` holds a tensor of ``shape`` relative to ram ``a`` (the TMs), or None."""
    try:
        value = _View.contiguous(shape)
        return _view_relation(_pushed_view(a, value), _pushed_view(b, value))
    except (_NotAView, IndexError, ValueError):
        pass
    gen = torch.Generator().manual_seed(4321)
    tensor = torch.rand(tuple(shape), generator=gen) + 0.5
    try:
        return layout_relation(to_device_layout(a, tensor), to_device_layout(b, tensor))
    except (RuntimeError, ValueError, IndexError):
        return None


def plain_ram(rec: QueueIO, shape: Sequence[int]) -> bool:
    """True when ram ``rec`` holds a tensor of ``shape`` in element order (no host TMs; its device shape is
    ``shape`` or a reshape of it, such as a trained weight held compact): its value can be read back from the
    device."""
    return not rec.host_tms and (rec.device_shape is None or math.prod(rec.device_shape) == math.prod(shape))


def read_ram_value(rec: QueueIO, entry: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The framework value of shape ``shape`` that ram ``rec`` holds as ``entry`` (``[t, R, C]``).

    An op output's record (a gradient accumulator the backward writes) keeps its host TMs, which turn the
    device layout into the framework's: a weight gradient computed transposed comes back in the weight's
    orientation (dropping them returned a square weight's gradient transposed, and the host wrote it back
    so). A parameter or input record's host TMs go the other way; the rams read here have none."""
    tms = list(rec.host_tms) if rec.kind == "output" else []
    out = QueueIO(queue=rec.queue, kind="output", name=rec.name, framework_shape=tuple(shape),
                  device_shape=rec.device_shape, host_tms=tms)
    return from_device_layout(out, entry.unsqueeze(0)).reshape(tuple(shape))


# --- merging ---------------------------------------------------------------------------------------------------


def build_training_netlist(parts: Sequence[Part], links: Sequence[Link], *, microbatch: int,
                           acc_df: DataFormat, saved_entries: int) -> TrainingNetlist:
    """Merge ``parts`` (in program order: forwards, backwards, optimizer) into one netlist with ``links``
    (see the module docstring). ``saved_entries``: entries of each linked saved-activation queue."""
    by_key = {p.key: p for p in parts}
    if len(by_key) != len(parts):
        raise CompileError("training netlist: part keys must be unique", stage="training netlist")
    merged = Netlist(devices_arch=parts[0].netlist.devices_arch)
    # Merged queue names: a linked alias takes its target's name; a parameter ram keeps its own name.
    alias_of: Dict[Tuple[str, str], Link] = {(lk.alias_part, lk.alias): lk for lk in links}
    targets: Dict[Tuple[str, str], List[Link]] = {}
    for lk in links:
        targets.setdefault((lk.target_part, lk.target), []).append(lk)
    for part in parts:
        for qname in part.netlist.queues:
            if (part.key, qname) in alias_of:
                continue
            kinds = {lk.kind for lk in targets.get((part.key, qname), ())}
            part.queue_names[qname] = qname if kinds & {"param", "update"} else f"{part.key}.{qname}"
    for (pkey, qname), lk in alias_of.items():
        by_key[pkey].queue_names[qname] = by_key[lk.target_part].queue_names[lk.target]

    op_names: Dict[Tuple[str, str], str] = {}
    for part in parts:
        for graph in part.netlist.graphs.values():
            for op in graph.ops:
                op_names[(part.key, op)] = f"{part.key}.{op}"

    # Queues (targets first take their own definition; aliases vanish).
    base: Dict[Tuple[Any, str, int], int] = {}
    for part in parts:
        shifts = dict(base)
        for qname, q in part.netlist.queues.items():
            if (part.key, qname) in alias_of:
                continue
            new = copy.deepcopy(q)
            new.name = part.queue_names[qname]
            if not q.is_host_fed:
                new.input = op_names[(part.key, q.input)]
            new.dram = _shift(q.dram, q, "dram", shifts, base) if q.loc == "dram" else None
            new.host = _shift(q.host, q, "host", shifts, base) if q.loc == "host" else None
            merged.queues[new.name] = new

    accumulators: Dict[str, str] = {}
    traffic: Dict[Tuple[Any, int], int] = {}
    for lk in links:
        tpart, apart = by_key[lk.target_part], by_key[lk.alias_part]
        tq = merged.queues[tpart.queue_names[lk.target]]
        aq = apart.netlist.queues[lk.alias]
        if lk.kind == "saved":
            tq.entries = max(tq.entries, saved_entries)
            _to_dram(tq, base, traffic)
            tpart.linked_outputs.add(_rec_name(tpart.host_io.outputs, lk.target))
            apart.linked_inputs.add(_rec_name(apart.host_io.inputs, lk.alias))
        elif lk.kind == "param":
            apart.linked_rams.add(lk.alias)
        elif lk.kind in ("update", "state"):
            tq.input = op_names[(apart.key, aq.input)]
            apart.linked_outputs.add(_rec_name(apart.host_io.outputs, lk.alias))
            apart.linked_rams.discard(lk.alias)
        elif lk.kind == "grad":
            tq.type, tq.entries, tq.df = "ram", 1, acc_df
            _to_dram(tq, base, traffic)
            tpart.linked_outputs.add(_rec_name(tpart.host_io.outputs, lk.target))
            apart.linked_inputs.add(_rec_name(apart.host_io.inputs, lk.alias))
        else:
            raise CompileError(f"training netlist: unknown link kind '{lk.kind}'", stage="training netlist")
    for lk in links:
        if lk.kind == "grad":
            accumulators[_rec_name(by_key[lk.target_part].host_io.outputs, lk.target)] = \
                by_key[lk.target_part].queue_names[lk.target]

    # Graphs, renumbered over the whole netlist; fused ops renumbered per part.
    counter = 0
    graph_names: Dict[Tuple[str, str], str] = {}
    fused_base = 0
    grad_ops: Dict[str, Set[str]] = {}  # merged graph -> accumulator queues its gradient ops write
    grad_targets = {by_key[lk.target_part].queue_names[lk.target] for lk in links if lk.kind == "grad"}
    for part in parts:
        fused_map: Dict[int, int] = {}
        for fid, fdef in part.netlist.fused_ops.items():
            fused_map[fid] = fused_base + len(fused_map)
            new_def = copy.deepcopy(fdef)
            new_def.id = fused_map[fid]
            merged.fused_ops[new_def.id] = new_def
        fused_base += len(fused_map)
        for gname, graph in part.netlist.graphs.items():
            kind = gname.split("_")[0]
            new_name = f"{kind}_{counter}"
            counter += 1
            graph_names[(part.key, gname)] = new_name
            part.graphs.append(new_name)
            new_graph = GraphDef(name=new_name, target_device=graph.target_device, input_count=graph.input_count)
            for op in graph.ops.values():
                new_op = _renamed_op(op, part, op_names, alias_of, fused_map, merged)
                new_graph.ops[new_op.name] = new_op
            merged.graphs[new_name] = new_graph
    for qname in grad_targets:
        q = merged.queues[qname]
        graph, op = merged.find_op(q.input)
        _make_gradient_op(op, q)
        grad_ops.setdefault(graph.name, set()).add(qname)
    for lk in links:
        if lk.at_producer:
            _transpose_producer(merged, merged.queues[by_key[lk.target_part].queue_names[lk.target]])
    for lk in links:
        if lk.kind in ("saved", "update", "state"):
            # The tensor now stays in DRAM for a device reader: its producer writes tiles, not host rows.
            q = merged.queues[by_key[lk.target_part].queue_names[lk.target]]
            producer = merged.find_op(q.input)[1]
            producer.untilize_output = False
            if lk.kind != "saved":
                # The optimizer packs a new value straight into the parameter's (or state's) storage format.
                producer.out_df = q.df

    # Programs.
    for part in parts:
        merged.programs.extend(_renamed_programs(part, graph_names, alias_of, merged, grad_ops))
    return TrainingNetlist(merged, by_key, list(links), accumulators)


#: Op types that may accumulate into their output queue (spec §1.3: on Grayskull only these).
_GRADIENT_OP_TYPES = ("nop", "datacopy", "matmul", "multiply")


def _device_producer(netlist: Netlist, queue: str):
    """(graph, op) of the device op writing ``queue``; None for a host-fed or unknown queue."""
    q = netlist.queues.get(queue)
    if q is None or q.is_host_fed:
        return None
    return netlist.find_op(q.input)


def can_accumulate(netlist: Netlist, queue: str) -> bool:
    """True when the op writing ``queue`` can become a gradient op: an allowed type whose only consumer is
    that queue (its output format changes to the accumulator's)."""
    found = _device_producer(netlist, queue)
    if found is None:
        return False
    _, op = found
    if op.type not in _GRADIENT_OP_TYPES or netlist.readers_of(op.name) or len(netlist.queues_fed_by(op.name)) != 1:
        return False
    return all(tm.name != "transpose" or op.type in ("nop", "matmul") for tms in op.input_tms.values() for tm in tms)


def can_transpose_producer(netlist: Netlist, queue: str, grid: Tuple[int, int]) -> bool:
    """True when the nop writing ``queue`` (and only it) can transpose its input instead: it has no input TMs
    and its transposed footprint stays inside the ``grid`` (rows, cols) without touching another op."""
    found = _device_producer(netlist, queue)
    if found is None:
        return False
    graph, op = found
    if op.type != "nop" or op.input_tms or op.input_pad or op.input_unpad or netlist.readers_of(op.name) \
            or len(netlist.queues_fed_by(op.name)) != 1 or op.grid_loc is None:
        return False
    rows, cols = op.footprint
    r0, c0 = op.grid_loc
    cores = {(r0 + r, c0 + c) for r in range(cols) for c in range(rows)}
    if any(r >= grid[0] or c >= grid[1] for r, c in cores):
        return False
    taken = {core for other in graph.ops.values() if other is not op for core in other.cores()}
    return not cores & taken


def _transpose_producer(netlist: Netlist, q: QueueDef) -> None:
    """The nop writing ``q`` transposes its input; the op's and the queue's blocking turn with it."""
    _, op = netlist.find_op(q.input)
    op.input_tms[0] = (Transpose(),)
    op.grid_size = (op.grid_size[1], op.grid_size[0])
    op.mblock = (op.mblock[1], op.mblock[0])
    op.ublock = (op.ublock[1], op.ublock[0])
    q.grid_size = (q.grid_size[1], q.grid_size[0])
    q.mblock = (q.mblock[1], q.mblock[0])
    q.ublock = (q.ublock[1], q.ublock[0])


def readers_accept(netlist: Netlist, queue: str, tms: Sequence[Any]) -> bool:
    """True when every op reading ``queue`` may take ``tms`` in front of its own input TMs (a transpose only
    on matmul input 1, a unary input or binary input 0 off Grayskull: the tm_allowed rule)."""
    if not any(tm.name == "transpose" for tm in tms):
        return True
    grayskull = (netlist.arch or "").startswith("grayskull")
    for _, op, index in netlist.readers_of(queue):
        if op.type in MATMUL_OPS:
            ok = index == 1
        elif op.type in COPY_OPS or op.type in SFPU_OPS:
            ok = True
        elif op.type in BINARY_OPS:
            ok = index == 0 and not grayskull
        else:
            ok = False
        if not ok or (index < len(op.in_df) and op.in_df[index] == DataFormat.Int32):
            return False
    return True


def _rec_name(recs: Sequence[QueueIO], queue: str) -> str:
    for rec in recs:
        if rec.queue == queue:
            return rec.name
    raise CompileError(f"training netlist: queue '{queue}' has no host-I/O record", stage="training netlist")


def _channel_key(q: QueueDef, loc: str, channel: int) -> Tuple[Any, str, int]:
    return (q.target_device, loc, channel)


def _shift(allocs: Optional[Tuple[Tuple[int, int], ...]], q: QueueDef, loc: str,
           shifts: Dict[Tuple[Any, str, int], int], base: Dict[Tuple[Any, str, int], int]):
    """Move a part's buffers past the previous parts' (``shifts``) and record the new end in ``base``."""
    if allocs is None:
        return None
    size = q.buffer_size_bytes()
    out = []
    for ch, addr in allocs:
        key = _channel_key(q, loc, ch)
        new_addr = addr + shifts.get(key, 0)
        out.append((ch, new_addr))
        base[key] = max(base.get(key, 0), _aligned(new_addr + size))
    return tuple(out)


def _aligned(addr: int) -> int:
    return -(-addr // _ALIGN) * _ALIGN


def _to_dram(q: QueueDef, base: Dict[Tuple[Any, str, int], int], traffic: Dict[Tuple[Any, int], int]) -> None:
    """Give a queue DRAM buffers after everything allocated so far (it held host addresses or its size grew),
    each on the channel that the queues moved so far read and write least per input (``traffic``: bytes of
    one entry per channel), then the least-filled one: saved activations and gradient accumulators are read
    or written for every sample, so they must share the channels' bandwidth. Balancing by filled bytes
    instead sent every large accumulator to the emptiest channels (BERT's weight gradients on two of
    Grayskull's eight channels, which then bounded the backward)."""
    size = q.buffer_size_bytes()
    per_buffer = q.entry_size_bytes()
    channels = sorted({ch for (dev, loc, ch) in base if loc == "dram" and dev == q.target_device}) or [0]
    allocs = []
    for _ in range(q.buffers):
        ch = min(channels, key=lambda c: (traffic.get((q.target_device, c), 0),
                                          base.get(_channel_key(q, "dram", c), 0x1000_0000), c))
        key = _channel_key(q, "dram", ch)
        start = base.get(key, 0x1000_0000)
        allocs.append((ch, start))
        base[key] = _aligned(start + size)
        traffic[(q.target_device, ch)] = traffic.get((q.target_device, ch), 0) + per_buffer
    q.loc, q.dram, q.host = "dram", tuple(allocs), None


def _renamed_op(op: NetlistOp, part: Part, op_names: Dict[Tuple[str, str], str],
                alias_of: Dict[Tuple[str, str], Link], fused_map: Dict[int, int], merged: Netlist) -> NetlistOp:
    new = copy.deepcopy(op)
    new.name = op_names[(part.key, op.name)]
    inputs = []
    for i, src in enumerate(op.inputs):
        if (part.key, src) in op_names:
            inputs.append(op_names[(part.key, src)])
            continue
        inputs.append(part.queue_names[src])
        link = alias_of.get((part.key, src))
        if link is not None and link.tms:
            new.input_tms[i] = tuple(link.tms) + tuple(new.input_tms.get(i, ()))
        if link is not None and i < len(new.in_df):
            # The unpacker reads the shared queue in the format it is stored in (the forward's saved
            # activation, the parameter's storage format, the accumulator's acc_df).
            dfs = list(new.in_df)
            dfs[i] = merged.queues[part.queue_names[src]].df
            new.in_df = tuple(dfs)
    new.inputs = tuple(inputs)
    new.forked_dram_inputs = tuple((part.queue_names.get(a, a), op_names.get((part.key, b), b))
                                   for a, b in op.forked_dram_inputs)
    if op.type == "fused_op" and "fused_op_id" in op.attributes:
        new.attributes["fused_op_id"] = fused_map[int(op.attributes["fused_op_id"])]
    return new


def _make_gradient_op(op: NetlistOp, q: QueueDef) -> None:
    """The op writing an accumulator accumulates into it (spec §1.3 gradient_op), in the accumulator's format."""
    op.gradient_op = True
    op.out_df = op.intermed_df = op.acc_df = q.df
    op.untilize_output = False


def _renamed_programs(part: Part, graph_names: Dict[Tuple[str, str], str], alias_of: Dict[Tuple[str, str], Link],
                      merged: Netlist, grad_ops: Dict[str, Set[str]]) -> List[Program]:
    out = []
    programs = part.netlist.programs
    for k, prog in enumerate(programs):
        instrs = []
        zeroing = False
        pointer_queue: Dict[str, str] = {}  # pointer variable -> merged queue it walks
        for inst in prog.instructions:
            inst = copy.deepcopy(inst)
            if isinstance(inst, Execute):
                gname = graph_names[(part.key, inst.graph_name)]
                settings: Dict[str, QueueSetting] = {}
                for qname, s in inst.queue_settings.items():
                    merged_name = part.queue_names[qname]
                    q = merged.queues[merged_name]
                    link = alias_of.get((part.key, qname))
                    if q.type == "ram" and link is not None and link.kind == "grad":
                        # A streamed host input became a ram accumulator: read it in place.
                        s = QueueSetting(prologue=False, epilogue=False, zero=False, rd_ptr_global="$c_zero",
                                         wr_ptr_global="$c_zero")
                    for var in (s.rd_ptr_local, s.rd_ptr_global):
                        if isinstance(var, str) and var.startswith("$") and q.type == "queue":
                            pointer_queue[var] = merged_name
                    settings[merged_name] = s
                for qname in sorted(grad_ops.get(gname, ())):
                    settings[qname] = QueueSetting(prologue=True, epilogue=True, zero=ZERO_GRAD_VAR,
                                                   rd_ptr_global="$c_zero", wr_ptr_global="$c_zero")
                    zeroing = True
                inst = Execute(graph_name=gname, queue_settings=settings)
            elif hasattr(inst, "names") and not isinstance(inst, Param):  # allocate / deallocate queue
                inst.names = tuple(part.queue_names[n] for n in inst.names)
            instrs.append(inst)
        # Pointers of a queue whose size changed wrap at its new 2·entries.
        for inst in instrs:
            if isinstance(inst, VarInst) and inst.op == "incwrap" and inst.out in pointer_queue:
                inst.args = (inst.args[0], 2 * merged.queues[pointer_queue[inst.out]].entries)
        if zeroing:
            instrs = _with_zero_grad(instrs)
        name = part.program if len(programs) == 1 else f"{part.program}_{k}"
        out.append(Program(name=name, instructions=instrs))
    return out


def _with_zero_grad(instrs: List[Any]) -> List[Any]:
    """``$p_zero_grad`` zeroes the accumulators on the first loop iteration only."""
    first = instrs[0]
    params = tuple(first.names) + (ZERO_GRAD_PARAM,) if isinstance(first, Param) else (ZERO_GRAD_PARAM,)
    rest = instrs[1:] if isinstance(first, Param) else instrs
    head: List[Any] = [Param(names=params)]
    body = list(rest)
    # Declare the variable with the other locals, then set it from the parameter.
    k = next((i for i, inst in enumerate(body) if isinstance(inst, Var)), None)
    if k is None:
        body.insert(0, Var(values={ZERO_GRAD_VAR: 0}))
        k = 0
    else:
        body[k] = Var(values={**body[k].values, ZERO_GRAD_VAR: 0})
    body.insert(k + 1, VarInst(out=ZERO_GRAD_VAR, op="set", args=(ZERO_GRAD_PARAM,)))
    end = max((i for i, inst in enumerate(body) if isinstance(inst, EndLoop)), default=None)
    reset = VarInst(out=ZERO_GRAD_VAR, op="set", args=(0,))
    if end is None:
        body.append(reset)
    else:
        body.insert(end, reset)
    return head + body


__all__ = ["Part", "can_accumulate", "can_transpose_producer", "readers_accept", "Link", "TrainingNetlist", "build_training_netlist", "layout_relation", "output_to_input",
           "ram_to_ram", "plain_ram", "read_ram_value", "ZERO_GRAD_PARAM", "DEFAULT_SAVED_MICROBATCHES"]
