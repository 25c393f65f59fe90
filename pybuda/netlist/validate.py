"""Check a netlist against the backend's rules (netlist_backend_spec §1.2, §1.3, §1.4, §1.5, §2.3, §5.3).

The checker is a list of small named rules, :data:`RULES`, each a generator of
:class:`NetlistRuleError` (a :class:`pybuda.errors.NetlistError` that also carries the rule name; the
message starts with ``[rule_name]``). :func:`validate` raises the first error; :func:`check` returns
them all. Rules are ordered so structural checks (names, fields, inputs) run before the ones that rely
on them; if an earlier rule failed, an exception inside a later rule is treated as a consequence and
dropped.

Arch-specific rules use the arch of ``device`` if given, else the netlist's ``devices.arch``. Rules that
need hardware sizes (grid fit, DRAM channel range, L1 fit) run only when a device is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from pybuda.arch.descriptor import DeviceDescriptor, arch_from_netlist_name
from pybuda.arch.tiles import is_legal_tile_dim
from pybuda.errors import NetlistError
from pybuda.netlist.attributes import FUSED_SUB_OP_ATTRIBUTES, check_attribute
from pybuda.netlist.model import (
    BINARY_OPS, COPY_OPS, FUSED_OPS, MATMUL_OPS, NON_TENSIX_OPS, OP_TYPES, SFPU_OPS, VARINST_ARITY,
    AllocateQueue, Broadcast, DeallocateQueue, EndLoop, Execute, GraphDef, HStack, Loop, Netlist, NetlistOp,
    Pad, Param, StaticVar, TileBroadcast, TMError, Transpose, Var, VarInst, VStack, apply_tms,
)
from pybuda.netlist.operands import expected_input_shape, input_shape_after_tms, op_l1_usage, prologue_inputs
from pybuda.tensor import DataFormat as DF
from pybuda.tensor import MathFidelity


class NetlistRuleError(NetlistError):
    """A netlist broke validation rule ``rule`` at YAML key path ``path``."""

    def __init__(self, rule: str, path: str, message: str):
        self.rule = rule
        super().__init__(path, f"[{rule}] {message}")


Rule = Callable[["Ctx"], Iterable[Tuple[str, str]]]
#: (name, rule) in the order they run. A rule yields (key path, message) pairs.
RULES: List[Tuple[str, Rule]] = []


def rule(fn: Rule) -> Rule:
    """Register ``fn`` as a validation rule named after the function."""
    RULES.append((fn.__name__, fn))
    return fn


@dataclass
class Ctx:
    """What every rule sees: the netlist, the optional device and the resolved arch."""

    netlist: Netlist
    device: Optional[DeviceDescriptor]
    arch: Optional[str]
    _op_graphs: Dict[str, List[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for graph in self.netlist.graphs.values():
            for name in graph.ops:
                self._op_graphs.setdefault(name, []).append(graph.name)

    @property
    def is_gs(self) -> bool:
        """True when the resolved arch is Grayskull."""
        return self.arch == "grayskull"

    @property
    def is_wh_a0(self) -> bool:
        """True for the pre-production ``wormhole`` (A0) arch."""
        return self.arch == "wormhole"

    def graphs_of_op(self, name: str) -> List[str]:
        """Graphs that define an op of this name."""
        return self._op_graphs.get(name, [])

    def producer_op(self, name: str) -> Optional[NetlistOp]:
        """The op of this name (first definition), or None."""
        graphs = self._op_graphs.get(name)
        return self.netlist.graphs[graphs[0]].ops[name] if graphs else None

    def ops(self) -> Iterator[Tuple[GraphDef, NetlistOp]]:
        """Every (graph, op)."""
        return self.netlist.iter_ops()

    def input_tile_dim(self, op: NetlistOp, index: int) -> Tuple[int, int]:
        """Tile shape of input ``index`` as unpacked: the producer's, swapped by an odd number of transposes."""
        name = op.inputs[index]
        if name in self.netlist.queues:
            dim = self.netlist.queues[name].effective_tile_dim
        else:
            producer = self.producer_op(name)
            dim = producer.effective_tile_dim if producer else op.effective_tile_dim
        if sum(isinstance(tm, Transpose) for tm in op.tms_of(index)) % 2:
            dim = (dim[1], dim[0])
        return dim


def _q(name: str, key: Optional[str] = None) -> str:
    return f"queues.{name}" + (f".{key}" if key else "")


def _o(graph: GraphDef, op: NetlistOp, key: Optional[str] = None) -> str:
    return f"graphs.{graph.name}.{op.name}" + (f".{key}" if key else "")


def _a(graph: GraphDef, op: NetlistOp, attr: str) -> str:
    return _o(graph, op, f"attributes.{attr}")


def _tms_path(graph: GraphDef, op: NetlistOp, index: int) -> str:
    return _o(graph, op, f"input_{index}_tms")


INT_FORMATS = {DF.Int8, DF.UInt8, DF.Int32}
INT_INPUT_FORMATS = {DF.Int8, DF.UInt8, DF.Int32, DF.UInt16}
ACC_FORMATS = {DF.Float16, DF.Float16_b, DF.Float32, DF.Int32}
EXP_A = {DF.Float16, DF.Bfp8, DF.Bfp4, DF.Bfp2}
EXP_B = {DF.Float16_b, DF.Bfp8_b, DF.Bfp4_b, DF.Bfp2_b}
LOW_BFP = {DF.Bfp4, DF.Bfp4_b, DF.Bfp2, DF.Bfp2_b}
RAW_FORMATS = {DF.RawUInt8, DF.RawUInt16, DF.RawUInt32}


def _positive_pair(p: Tuple[int, int]) -> bool:
    return all(isinstance(v, int) and v > 0 for v in p)


def _targets(value) -> Tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)


# ===================================================================================================
# Structure
# ===================================================================================================


@rule
def sections_nonempty(ctx: Ctx):
    """queues, graphs and programs must not be empty (§1.1)."""
    for section in ("queues", "graphs", "programs"):
        if not getattr(ctx.netlist, section):
            yield section, "must not be empty"


@rule
def devices_arch(ctx: Ctx):
    """Arch names are known; a list needs a selection; the device matches the netlist's arch (§1.1)."""
    archs = ctx.netlist.devices_arch
    names = (archs,) if isinstance(archs, str) else archs
    for name in names:
        try:
            arch_from_netlist_name(name)
        except Exception:
            yield "devices.arch", f"unknown arch {name!r}"
            return
    if ctx.device is not None:
        dev = ctx.device.arch.value
        if not any(arch_from_netlist_name(n) == ctx.device.arch for n in names):
            yield "devices.arch", f"netlist is for {list(names)}, but the device is {dev}"
        elif ctx.netlist.selected_arch is not None and ctx.netlist.selected_arch != dev:
            yield "devices.arch", f"netlist was parsed for {ctx.netlist.selected_arch}, but the device is {dev}"
    elif ctx.arch is None:
        yield "devices.arch", f"lists several archs {list(names)}; pick one (parse_yaml(arch=...) or a device)"


@rule
def target_device_range(ctx: Ctx):
    """target_device ids are >= 0 and, with a device, below its chip count."""
    limit = ctx.device.chip_count if ctx.device else None
    items = [(_q(q.name, "target_device"), q.target_device) for q in ctx.netlist.queues.values()]
    items += [(f"graphs.{g.name}.target_device", g.target_device) for g in ctx.netlist.graphs.values()]
    for path, value in items:
        for dev in _targets(value):
            if not isinstance(dev, int) or dev < 0:
                yield path, f"target_device must be an int >= 0, got {dev!r}"
            elif limit is not None and dev >= limit:
                yield path, f"target_device {dev} does not exist: the device has {limit} chip(s)"


@rule
def names_unique(ctx: Ctx):
    """Op names are unique across graphs and differ from queue names; dict keys match object names."""
    for key, q in ctx.netlist.queues.items():
        if q.name != key:
            yield _q(key), f"queue object is named {q.name!r}, not {key!r}"
    for key, g in ctx.netlist.graphs.items():
        if g.name != key:
            yield f"graphs.{key}", f"graph object is named {g.name!r}, not {key!r}"
        for okey, op in g.ops.items():
            if op.name != okey:
                yield f"graphs.{key}.{okey}", f"op object is named {op.name!r}, not {okey!r}"
    for name, graphs in ctx._op_graphs.items():
        if len(graphs) > 1:
            yield f"graphs.{graphs[1]}.{name}", f"op name is not unique: also in graph {graphs[0]}"
        if name in ctx.netlist.queues:
            yield f"graphs.{graphs[0]}.{name}", "op has the same name as a queue"


@rule
def queue_fields(ctx: Ctx):
    """Queue field values are in range (§1.2)."""
    for q in ctx.netlist.queues.values():
        if not q.input:
            yield _q(q.name, "input"), "input must be HOST or an op name"
        if q.type not in ("queue", "ram"):
            yield _q(q.name, "type"), f"type must be queue or ram, got {q.type!r}"
        if q.loc not in ("dram", "host"):
            yield _q(q.name, "loc"), f"loc must be dram or host, got {q.loc!r}"
        if q.ublock_order not in ("r", "c"):
            yield _q(q.name, "ublock_order"), f"ublock_order must be r or c, got {q.ublock_order!r}"
        if q.layout not in (None, "tilized", "flat"):
            yield _q(q.name, "layout"), f"layout must be tilized or flat, got {q.layout!r}"
        if not isinstance(q.entries, int) or q.entries < 1:
            yield _q(q.name, "entries"), f"entries must be >= 1, got {q.entries!r}"
        if not isinstance(q.t, int) or q.t < 1:
            yield _q(q.name, "t"), f"t must be >= 1, got {q.t!r}"
        for key in ("grid_size", "mblock", "ublock"):
            if not _positive_pair(getattr(q, key)):
                yield _q(q.name, key), f"{key} values must be > 0, got {list(getattr(q, key))}"
        if q.df == DF.Invalid:
            yield _q(q.name, "df"), "df must be a data format"


@rule
def graph_input_count(ctx: Ctx):
    """input_count is >= 1 (§1.3)."""
    for g in ctx.netlist.graphs.values():
        if isinstance(g.input_count, bool) or not isinstance(g.input_count, int) or g.input_count < 1:
            yield f"graphs.{g.name}.input_count", f"input_count must be >= 1, got {g.input_count!r}"


@rule
def op_type_known(ctx: Ctx):
    """Op types are ones the backend has kernels for (§3.1)."""
    for g, op in ctx.ops():
        if op.type not in OP_TYPES:
            yield _o(g, op, "type"), f"unknown op type {op.type!r}"


@rule
def op_fields(ctx: Ctx):
    """Grid, blocking, buffer and format fields are in range; grid_loc is set (§1.3)."""
    for g, op in ctx.ops():
        if not _positive_pair(op.grid_size):
            yield _o(g, op, "grid_size"), f"grid_size values must be > 0, got {list(op.grid_size)}"
        if not isinstance(op.t, int) or op.t < 1:
            yield _o(g, op, "t"), f"t must be >= 1, got {op.t!r}"
        for key in ("mblock", "ublock"):
            if not _positive_pair(getattr(op, key)):
                yield _o(g, op, key), f"{key} values must be > 0, got {list(getattr(op, key))}"
        if not isinstance(op.buf_size_mb, int) or op.buf_size_mb < 0:
            yield _o(g, op, "buf_size_mb"), f"buf_size_mb must be >= 0, got {op.buf_size_mb!r}"
        if op.ublock_order not in ("r", "c"):
            yield _o(g, op, "ublock_order"), f"ublock_order must be r or c, got {op.ublock_order!r}"
        if op.grid_loc is None:
            if op.type != "ethernet_datacopy":
                yield _o(g, op, "grid_loc"), "grid_loc is required"
        elif not all(isinstance(v, int) and v >= 0 for v in op.grid_loc):
            yield _o(g, op, "grid_loc"), f"grid_loc values must be >= 0, got {list(op.grid_loc)}"
        if op.overlay_size is not None and op.overlay_size < 0:
            yield _o(g, op, "overlay_size"), f"overlay_size must be >= 0, got {op.overlay_size}"
        for key in ("out_df", "intermed_df", "acc_df"):
            if getattr(op, key) == DF.Invalid:
                yield _o(g, op, key), f"{key} must be a data format"
        if op.math_fidelity == MathFidelity.Invalid:
            yield _o(g, op, "math_fidelity"), "math_fidelity must be LoFi, HiFi2, HiFi2_B, HiFi3 or HiFi4"


def _expected_input_count(op: NetlistOp) -> Optional[Tuple[int, int]]:
    bias = 1 if op.attr("bias") else 0
    if op.type in MATMUL_OPS:
        n = (3 if op.attr("identity") else 2) + bias + (1 if op.attr("requant") or op.attr("dequant") else 0)
        return (n, n)
    if op.type == "depthwise":
        return (2 + bias, 2 + bias)
    if op.type in BINARY_OPS or op.type == "embedding":
        return (2, 2)
    if op.type in COPY_OPS or op.type in SFPU_OPS or op.type in ("reduce", "tilizer"):
        return (1, 1)
    if op.type == "splice":
        return (1, 8)
    return None


@rule
def op_input_count(ctx: Ctx):
    """Inputs per op type (§3.1); one in_df per input; per-input lists have one value per input."""
    for g, op in ctx.ops():
        n = len(op.inputs)
        if n == 0:
            yield _o(g, op, "inputs"), "an op needs at least one input"
        expected = _expected_input_count(op)
        if expected and not expected[0] <= n <= expected[1]:
            want = expected[0] if expected[0] == expected[1] else f"{expected[0]}..{expected[1]}"
            yield _o(g, op, "inputs"), f"a {op.type} op with these attributes takes {want} input(s), got {n}"
        if len(op.in_df) != n:
            yield _o(g, op, "in_df"), f"in_df has {len(op.in_df)} format(s) for {n} input(s)"
        for key in ("input_buf_min_size_tiles", "input_dram_io_buf_size_tiles"):
            values = getattr(op, key)
            if values is None:
                continue
            if len(values) != n:
                yield _o(g, op, key), f"{key} has {len(values)} value(s) for {n} input(s)"
            elif any(not isinstance(v, int) or v < 0 for v in values):
                yield _o(g, op, key), f"{key} values must be >= 0, got {list(values)}"
        if len(op.forked_dram_inputs) > n:
            yield _o(g, op, "forked_dram_inputs"), "more forked DRAM inputs than inputs"


@rule
def op_input_keys(ctx: Ctx):
    """input_N_tms / input_N_pad / input_N_unpad name an existing input; an input is padded at most once."""
    for g, op in ctx.ops():
        n = len(op.inputs)
        for kind, table in (("tms", op.input_tms), ("pad", op.input_pad), ("unpad", op.input_unpad)):
            for index in table:
                if not 0 <= index < n:
                    yield _o(g, op, f"input_{index}_{kind}"), f"op has {n} input(s); there is no input {index}"
        for index, tms in op.input_tms.items():
            pads = sum(isinstance(tm, Pad) for tm in tms)
            if pads > 1 or (pads and index in op.input_pad):
                yield _tms_path(g, op, index), "padding must be specified only once per input"


@rule
def op_inputs_exist(ctx: Ctx):
    """Every input is a queue or an op of the same graph (§1.3)."""
    for g, op in ctx.ops():
        for i, name in enumerate(op.inputs):
            if name in ctx.netlist.queues or (name in g.ops and name != op.name):
                continue
            path = f"{_o(g, op, 'inputs')}[{i}]"
            if name == op.name:
                yield path, "an op cannot read its own output"
            elif ctx.graphs_of_op(name):
                yield path, (f"input {name!r} is an op of graph {ctx.graphs_of_op(name)[0]}; "
                             "cross-graph data must go through a queue")
            else:
                yield path, f"input {name!r} is neither a queue nor an op of graph {g.name}"


# ===================================================================================================
# Queues
# ===================================================================================================


@rule
def queue_allocation(ctx: Ctx):
    """A dram queue lists one [channel, addr] per buffer (grid r·c), a host queue one host address per
    buffer; addresses are 32-byte aligned (64 on Blackhole); with a device, channels exist and buffers fit."""
    align = 64 if ctx.arch == "blackhole" else 32
    for q in ctx.netlist.queues.values():
        allocs = q.dram if q.loc == "dram" else q.host
        key = "dram" if q.loc == "dram" else "host"
        if q.loc not in ("dram", "host"):
            continue
        if allocs is None:
            yield _q(q.name, key), f"loc is {q.loc}, so {key} allocations are required"
            continue
        if len(allocs) != q.buffers:
            yield _q(q.name, key), f"has {len(allocs)} allocation(s) for grid {list(q.grid_size)} = {q.buffers} buffer(s)"
            continue
        try:
            size = q.buffer_size_bytes()
        except ValueError:
            size = None
        for i, (ch, addr) in enumerate(allocs):
            path = f"{_q(q.name, key)}[{i}]"
            if ch < 0 or addr < 0:
                yield path, f"channel and address must be >= 0, got [{ch}, {addr:#x}]"
                continue
            if q.loc == "dram" and addr % align:
                yield path, f"address {addr:#x} is not {align}-byte aligned"
            if ctx.device is None:
                continue
            if q.loc == "dram":
                if ch >= ctx.device.dram_channel_count:
                    yield path, f"DRAM channel {ch} does not exist ({ctx.device.dram_channel_count} channels)"
                elif size is not None and addr + size > ctx.device.dram_channels[ch].size_bytes:
                    yield path, (f"buffer [{addr:#x}, {addr + size:#x}) runs past the end of channel {ch} "
                                 f"({ctx.device.dram_channels[ch].size_bytes:#x} bytes)")
            elif ch >= ctx.device.host_memory_channels:
                yield path, f"host channel {ch} does not exist ({ctx.device.host_memory_channels} channels)"


def _queue_lifetimes(netlist: Netlist) -> Dict[str, Dict[str, List[Tuple[int, int]]]]:
    """Dynamic queues: for each queue named by ``allocate_queue``/``deallocate_queue``, per program the
    (first, last) instruction intervals it is live in. An allocation without a later deallocation lives
    to the end of the program; a deallocation without an allocation from the start. A queue absent from
    a program's allocate/deallocate instructions is not live in that program. Queues never named are
    static (absent from the result) and live everywhere, always."""
    out: Dict[str, Dict[str, List[Tuple[int, int]]]] = {}
    for prog in netlist.programs:
        open_: Dict[str, int] = {}
        n = len(prog.instructions)
        for i, instr in enumerate(prog.instructions):
            if isinstance(instr, AllocateQueue):
                for name in instr.names:
                    open_.setdefault(name, i)
            elif isinstance(instr, DeallocateQueue):
                for name in instr.names:
                    start = open_.pop(name, 0)
                    out.setdefault(name, {}).setdefault(prog.name, []).append((start, i))
        for name, start in open_.items():
            out.setdefault(name, {}).setdefault(prog.name, []).append((start, n))
    return out


def _lifetimes_overlap(a: Optional[Dict[str, List[Tuple[int, int]]]],
                       b: Optional[Dict[str, List[Tuple[int, int]]]]) -> bool:
    """Whether two queues can be live at once: a static queue (None) overlaps everything; two dynamic
    queues overlap when some program has intersecting live intervals (a deallocation and a later
    allocation at distinct instructions do not intersect)."""
    if a is None or b is None:
        return True
    for prog, spans_a in a.items():
        for s1, e1 in spans_a:
            for s2, e2 in b.get(prog, ()):
                if s1 <= e2 and s2 <= e1:
                    return True
    return False


@rule
def queue_dram_overlap(ctx: Ctx):
    """Buffers of different queues in the same DRAM (or host) channel of a chip do not overlap while
    both queues are live, unless one queue aliases the other. Queues with ``allocate_queue`` /
    ``deallocate_queue`` lifetimes (epoch-to-epoch queues) are live only between the two instructions,
    so queues whose lifetimes are disjoint in every program may share the same addresses."""
    lifetimes = _queue_lifetimes(ctx.netlist)
    spans: Dict[Tuple[int, str, int], List[Tuple[int, int, str, int]]] = {}
    for q in ctx.netlist.queues.values():
        allocs = q.allocations
        if len(allocs) != q.buffers:
            continue
        try:
            size = q.buffer_size_bytes()
        except ValueError:
            continue
        for dev in _targets(q.target_device):
            for i, (ch, addr) in enumerate(allocs):
                spans.setdefault((dev, q.loc, ch), []).append((addr, addr + size, q.name, i))
    for (dev, loc, ch), items in spans.items():
        items.sort()
        for a, (start, end, name, i) in enumerate(items):
            for start2, _end2, name2, _i2 in items[a + 1:]:
                if start2 >= end:
                    break
                q1, q2 = ctx.netlist.queues[name], ctx.netlist.queues[name2]
                if name == name2 or q1.alias == name2 or q2.alias == name or (q1.alias and q1.alias == q2.alias):
                    continue
                if not _lifetimes_overlap(lifetimes.get(name), lifetimes.get(name2)):
                    continue
                yield (f"{_q(name2, loc)}", f"overlaps queue {name!r} in {loc} channel {ch} of device {dev} "
                                             f"at {start2:#x} (its buffer {i} is [{start:#x}, {end:#x}))")


@rule
def queue_ports(ctx: Ctx):
    """read_ports/write_ports: Wormhole B0 DRAM queues only, one per buffer, each 0..2 (§1.2)."""
    for q in ctx.netlist.queues.values():
        for key in ("read_ports", "write_ports"):
            ports = getattr(q, key)
            if ports is None:
                continue
            if ctx.arch is not None and ctx.arch != "wormhole_b0":
                yield _q(q.name, key), f"{key} is only available on wormhole_b0, not {ctx.arch}"
            elif q.loc != "dram":
                yield _q(q.name, key), f"{key} applies to DRAM queues only"
            elif len(ports) != q.buffers:
                yield _q(q.name, key), f"needs one port per buffer ({q.buffers}), got {len(ports)}"
            elif any(not isinstance(p, int) or not 0 <= p <= 2 for p in ports):
                yield _q(q.name, key), f"ports must be 0, 1 or 2, got {list(ports)}"


def _tile_dim_problem(ctx: Ctx, tile_dim, df) -> Optional[str]:
    if tile_dim is None:
        return None
    if not is_legal_tile_dim(tile_dim, df):
        return f"tile_dim {list(tile_dim)} is not legal for {df.name}"
    if ctx.is_gs and tuple(tile_dim) != (32, 32):
        return "Grayskull supports only 32x32 tiles"
    if ctx.device is not None and tuple(tile_dim) not in ctx.device.supported_tile_dims:
        return f"tile_dim {list(tile_dim)} is not supported by {ctx.device.name}"
    return None


@rule
def queue_tile_dim(ctx: Ctx):
    """tile_dim is a legal tile shape for the df and the arch (GS: 32x32 only; spec §1.2, §2.1)."""
    for q in ctx.netlist.queues.values():
        problem = _tile_dim_problem(ctx, q.tile_dim, q.df)
        if problem:
            yield _q(q.name, "tile_dim"), problem


@rule
def queue_single_producer(ctx: Ctx):
    """An op-fed queue has exactly one producer op in the whole netlist (§1.2)."""
    for q in ctx.netlist.queues.values():
        if q.is_host_fed:
            continue
        count = len(ctx.graphs_of_op(q.input))
        if count == 0:
            yield _q(q.name, "input"), f"producer op {q.input!r} does not exist (use HOST for host-fed queues)"
        elif count > 1:
            yield _q(q.name, "input"), f"producer {q.input!r} is defined in {count} graphs; it must be one op"


@rule
def queue_input_tms(ctx: Ctx):
    """A queue's input_tms may not pad, transpose or tile-broadcast (§1.2, parse_tm_info)."""
    for q in ctx.netlist.queues.values():
        for i, tm in enumerate(q.input_tms):
            if isinstance(tm, (Pad, Transpose, TileBroadcast)):
                yield f"{_q(q.name, 'input_tms')}[{i}]", f"{tm.name} is not allowed on a queue's input edge"


@rule
def queue_producer_match(ctx: Ctx):
    """An op-fed queue has the producer's shape (after the queue's input_tms), df and tile_dim."""
    for q in ctx.netlist.queues.values():
        if q.is_host_fed:
            continue
        producer = ctx.producer_op(q.input)
        if producer is None:
            continue
        try:
            shape = apply_tms(producer.shape, q.input_tms)
        except TMError as exc:
            yield _q(q.name, "input_tms"), str(exc)
            continue
        if shape != q.shape:
            via = " after input_tms" if q.input_tms else ""
            yield _q(q.name, "grid_size"), (f"queue shape (t, rt, ct) = {tuple(q.shape)} differs from producer "
                                            f"{producer.name!r} output {tuple(shape)}{via}")
        if q.df != producer.out_df:
            yield _q(q.name, "df"), f"df {q.df.name} differs from producer {producer.name!r} out_df {producer.out_df.name}"
        if q.effective_tile_dim != producer.effective_tile_dim:
            yield _q(q.name, "tile_dim"), f"tile_dim differs from producer {producer.name!r}"


@rule
def queue_alias(ctx: Ctx):
    """An alias names another, non-alias ram with the same allocations and element count (§1.2)."""
    for q in ctx.netlist.queues.values():
        if q.alias is None:
            continue
        path = _q(q.name, "alias")
        target = ctx.netlist.queues.get(q.alias)
        if q.alias == q.name:
            yield path, "a queue cannot alias itself"
        elif target is None:
            yield path, f"aliased queue {q.alias!r} does not exist"
        elif target.alias is not None:
            yield path, f"{q.alias!r} is itself an alias"
        elif q.type != "ram" or target.type != "ram":
            yield path, "only rams can alias each other"
        elif q.allocations != target.allocations:
            yield path, f"allocations differ from {q.alias!r}"
        else:
            mine = q.shape.t * q.shape.rt * q.shape.ct * q.entries
            theirs = target.shape.t * target.shape.rt * target.shape.ct * target.entries
            if mine != theirs:
                yield path, f"holds {mine} tiles in all entries, {q.alias!r} holds {theirs}"


@rule
def int_formats_arch(ctx: Ctx):
    """Int8, UInt8 and Int32 exist on Wormhole B0 and later only (§1.3)."""
    if not ctx.is_gs:
        return
    for q in ctx.netlist.queues.values():
        if q.df in INT_FORMATS:
            yield _q(q.name, "df"), f"{q.df.name} is not supported on Grayskull"
    for g, op in ctx.ops():
        for key in ("out_df", "intermed_df"):
            if getattr(op, key) in INT_FORMATS:
                yield _o(g, op, key), f"{getattr(op, key).name} is not supported on Grayskull"
        for i, df in enumerate(op.in_df):
            if df in INT_FORMATS:
                yield f"{_o(g, op, 'in_df')}[{i}]", f"{df.name} is not supported on Grayskull"


# ===================================================================================================
# Ops
# ===================================================================================================


@rule
def op_in_df_match(ctx: Ctx):
    """in_df[i] equals the producer queue's df or producer op's out_df (§1.3)."""
    for g, op in ctx.ops():
        for i, (name, df) in enumerate(zip(op.inputs, op.in_df)):
            producer = ctx.netlist.queues[name].df if name in ctx.netlist.queues else (
                g.ops[name].out_df if name in g.ops else None)
            if producer is not None and producer != df:
                yield f"{_o(g, op, 'in_df')}[{i}]", f"{df.name} differs from {name!r}'s format {producer.name}"


@rule
def op_cores_overlap(ctx: Ctx):
    """Ops of one graph use disjoint cores, counting grid_transpose (§1.3)."""
    for g in ctx.netlist.graphs.values():
        used: Dict[Tuple[int, int], str] = {}
        for op in g.ops.values():
            if op.type in NON_TENSIX_OPS or op.grid_loc is None or not _positive_pair(op.grid_size):
                continue
            for core in op.cores():
                if core in used:
                    yield _o(g, op, "grid_loc"), f"core {list(core)} is also used by op {used[core]!r}"
                    break
                used[core] = op.name


@rule
def op_grid_fits_device(ctx: Ctx):
    """With a device, every op's cores lie inside the harvested worker grid."""
    if ctx.device is None:
        return
    rows, cols = ctx.device.grid_size
    for g, op in ctx.ops():
        if op.grid_loc is None or op.type in NON_TENSIX_OPS or not _positive_pair(op.grid_size):
            continue
        (r0, c0), (fr, fc) = op.grid_loc, op.footprint
        if r0 + fr > rows or c0 + fc > cols:
            yield _o(g, op, "grid_loc"), (f"cores rows {r0}..{r0 + fr - 1}, cols {c0}..{c0 + fc - 1} fall outside "
                                          f"the {rows}x{cols} grid of {ctx.device.name}")


@rule
def op_acc_df(ctx: Ctx):
    """acc_df is Float16, Float16_b, Float32 or Int32 (§1.3)."""
    for g, op in ctx.ops():
        if op.acc_df not in ACC_FORMATS:
            yield _o(g, op, "acc_df"), f"acc_df must be Float16, Float16_b, Float32 or Int32, got {op.acc_df.name}"


def _max_ublock(ctx: Ctx, acc_df: DF) -> int:
    if ctx.device is not None:
        return ctx.device.max_ublock_tiles(acc_df)
    limit = 4 if acc_df in (DF.Float32, DF.Int32) else 8
    return limit * 4 if ctx.is_wh_a0 else limit  # WH A0 had a 4x larger Dest


@rule
def ublock_fits_dest(ctx: Ctx):
    """ublock rt·ct fits half of Dest: <= 8 tiles, <= 4 with Float32/Int32 acc_df (§1.3); fused sub-ops too."""
    for g, op in ctx.ops():
        limit = _max_ublock(ctx, op.acc_df)
        if op.ublock_tiles > limit:
            yield _o(g, op, "ublock"), (f"ublock {list(op.ublock)} = {op.ublock_tiles} tiles does not fit half of Dest "
                                        f"({limit} tiles with acc_df {op.acc_df.name})")
        if op.type == "fused_op":
            fused = ctx.netlist.fused_ops.get(op.attr("fused_op_id"))
            for si, sched in enumerate(fused.schedules if fused else ()):
                for sub in sched:
                    if sub.ublock[0] * sub.ublock[1] > limit:
                        yield (f"fused_ops.{fused.id}.schedules[{si}].{sub.name}.ublock",
                               f"ublock {list(sub.ublock)} does not fit half of Dest ({limit} tiles) for op {op.name!r}")


@rule
def matmul_ublock_order(ctx: Ctx):
    """Matmul output must use ublock_order r (§1.3)."""
    for g, op in ctx.ops():
        if op.type in MATMUL_OPS and op.ublock_order != "r":
            yield _o(g, op, "ublock_order"), "matmul must use ublock_order r"


@rule
def untilize_output(ctx: Ctx):
    """untilize_output: ublock_order r; out_df Float16/Float16_b/Float32 (Int8/Int32 off GS); feeds exactly
    one [1,1] queue; nothing reads the op or that queue (§1.3)."""
    for g, op in ctx.ops():
        if not op.untilize_output:
            continue
        if op.ublock_order != "r":
            yield _o(g, op, "ublock_order"), "untilize_output requires ublock_order r"
        allowed = {DF.Float16, DF.Float16_b, DF.Float32} | (set() if ctx.is_gs else {DF.Int8, DF.Int32})
        if op.out_df not in allowed:
            yield _o(g, op, "out_df"), f"untilize_output cannot write {op.out_df.name}"
        fed = ctx.netlist.queues_fed_by(op.name)
        if len(fed) != 1:
            yield _o(g, op, "untilize_output"), f"an untilizing op must feed exactly one queue, feeds {len(fed)}"
        for q in fed:
            if q.grid_size != (1, 1):
                yield _q(q.name, "grid_size"), f"queue fed by untilizing op {op.name!r} must have grid [1, 1]"
            for rg, reader, i in ctx.netlist.readers_of(q.name):
                yield f"{_o(rg, reader, 'inputs')}[{i}]", f"queue {q.name!r} holds untilized data; ops cannot read it"
        for rg, reader, i in ctx.netlist.readers_of(op.name):
            yield f"{_o(rg, reader, 'inputs')}[{i}]", f"op {op.name!r} untilizes its output; ops cannot read it"
        if op.type in MATMUL_OPS and op.m_k != 1:
            yield _a(g, op, "m_k"), "an untilizing matmul must have m_k == 1"
        if op.type == "reduce" and op.attr("dim") == "z":
            yield _o(g, op, "untilize_output"), "a reduce over z cannot untilize its output"


@rule
def gradient_op(ctx: Ctx):
    """gradient_op: intermed_df == out_df; on GS only matmul, multiply, nop, datacopy; never maximum or
    Int32 acc; a transposed input only on matmul and datacopy (§1.3)."""
    for g, op in ctx.ops():
        if not op.gradient_op:
            continue
        if op.intermed_df != op.out_df:
            yield _o(g, op, "intermed_df"), f"a gradient op needs intermed_df == out_df ({op.out_df.name})"
        if ctx.is_gs and op.type not in ("matmul", "multiply", "nop", "datacopy"):
            yield _o(g, op, "gradient_op"), f"Grayskull gradient ops may only be matmul, multiply or nop, not {op.type}"
        if op.type == "maximum":
            yield _o(g, op, "gradient_op"), "maximum cannot be a gradient op"
        if op.acc_df == DF.Int32:
            yield _o(g, op, "acc_df"), "gradient accumulation with Int32 acc_df is not supported"
        if op.type not in ("matmul", "nop", "datacopy"):
            for i in range(len(op.inputs)):
                if any(isinstance(tm, Transpose) for tm in op.tms_of(i)):
                    yield _tms_path(g, op, i), "a gradient op may transpose an input only if it is a matmul or nop"
        if op.attr("identity"):
            yield _o(g, op, "gradient_op"), "a sparse (identity) matmul cannot be a gradient op"
        if (ctx.is_gs or ctx.is_wh_a0) and op.acc_df == DF.Float32 and op.intermed_df != DF.Float32:
            yield _o(g, op, "intermed_df"), "on GS/WH A0 a Float32-accumulating gradient op needs Float32 intermed_df"


@rule
def accumulate_intermed_df(ctx: Ctx):
    """Accumulating ops (gradient_op, matmul with m_k > 1 or bias) may not spill to Bfp4/Bfp2 (§1.3)."""
    for g, op in ctx.ops():
        if op.is_accumulating and op.intermed_df in LOW_BFP:
            yield _o(g, op, "intermed_df"), f"accumulating op cannot use {op.intermed_df.name} intermediates (saturates)"


@rule
def fp32_acc_intermed(ctx: Ctx):
    """A matmul accumulating (l1_acc on WH B0/BH, m_k > 1 elsewhere) with Float32/Int32 acc_df spills in acc_df."""
    for g, op in ctx.ops():
        if op.type not in MATMUL_OPS or op.acc_df not in (DF.Float32, DF.Int32):
            continue
        accumulates = bool(op.attr("l1_acc")) if ctx.arch in ("wormhole_b0", "blackhole") else op.m_k > 1
        if accumulates and op.intermed_df != op.acc_df:
            yield _o(g, op, "intermed_df"), f"matmul accumulating in {op.acc_df.name} needs intermed_df {op.acc_df.name}"


@rule
def gs_acc_df(ctx: Ctx):
    """Grayskull has no Float32 or Int32 Dest (§1.3)."""
    if not ctx.is_gs:
        return
    for g, op in ctx.ops():
        if op.acc_df in (DF.Float32, DF.Int32):
            yield _o(g, op, "acc_df"), f"Grayskull does not support acc_df {op.acc_df.name}"


@rule
def gs_features(ctx: Ctx):
    """No stochastic rounding before WH B0; no l1_acc or pack-thread SFPU on Grayskull (§1.3)."""
    for g, op in ctx.ops():
        stoch = op.attr("stoch_rnd_mode", "none") != "none" or op.attr("srnd_fpu_en") is True
        if stoch and ctx.arch not in ("wormhole_b0", "blackhole"):
            key = "stoch_rnd_mode" if "stoch_rnd_mode" in op.attributes else "srnd_fpu_en"
            yield _a(g, op, key), f"stochastic rounding is not available on {ctx.arch}"
        if op.attr("l1_acc") and ctx.arch not in ("wormhole_b0", "blackhole"):
            yield _a(g, op, "l1_acc"), f"l1_acc is not available on {ctx.arch}"
        if ctx.is_gs and op.attr("sfpu_execution_thread") == "pack":
            yield _a(g, op, "sfpu_execution_thread"), "Grayskull runs SFPU on the math thread only"


@rule
def gs_exponent_width(ctx: Ctx):
    """Grayskull: an accumulating op with out_df != intermed_df keeps the exponent width (§1.3)."""
    if not ctx.is_gs:
        return
    for g, op in ctx.ops():
        if op.out_df == op.intermed_df or not (op.gradient_op or op.m_k > 1):
            continue
        out, mid = op.out_df, op.intermed_df
        if not ((out in EXP_A and mid in EXP_A) or (out in EXP_B and mid in EXP_B) or (out == DF.Float32 and mid in EXP_B)):
            yield _o(g, op, "intermed_df"), (f"Grayskull: out_df {out.name} and intermed_df {mid.name} must have the "
                                             "same exponent width")


@rule
def stoch_rnd(ctx: Ctx):
    """Stochastic FPU rounding cannot combine with Float32 Dest; Bfp8 outputs allow only none/fpu."""
    for g, op in ctx.ops():
        mode = op.attr("stoch_rnd_mode", "none")
        if op.acc_df == DF.Float32 and mode in ("fpu", "all"):
            yield _a(g, op, "stoch_rnd_mode"), "stochastic FPU rounding cannot be used with Float32 acc_df"
        if op.out_df in (DF.Bfp8, DF.Bfp8_b) and mode in ("pack", "all"):
            yield _a(g, op, "stoch_rnd_mode"), f"{op.out_df.name} output allows stoch_rnd_mode none or fpu only"


@rule
def l1_acc(ctx: Ctx):
    """l1_acc (WH matmul/depthwise) needs intermed_df Float32, Int32 or Float16_b (§1.3)."""
    for g, op in ctx.ops():
        if op.attr("l1_acc") and op.intermed_df not in (DF.Float32, DF.Int32, DF.Float16_b):
            yield _o(g, op, "intermed_df"), f"l1_acc needs intermed_df Float32, Int32 or Float16_b, not {op.intermed_df.name}"


@rule
def int_formats(ctx: Ctx):
    """Ops with integer inputs need HiFi4, Int32 acc_df, integer intermediates and (unless dequantizing)
    integer outputs; Int32 acc_df otherwise only on quantization and fused ops (§1.3)."""
    for g, op in ctx.ops():
        if op.type == "topk":
            continue
        int_input = any(df in INT_INPUT_FORMATS for df in op.in_df)
        if int_input:
            dequant = op.attr("dequant") or op.type == "dequantization" or op.type == "fused_op"
            if not dequant and op.out_df not in INT_INPUT_FORMATS:
                yield _o(g, op, "out_df"), f"an integer op must output Int8/UInt8/Int32, not {op.out_df.name}"
            if op.intermed_df not in INT_FORMATS:
                yield _o(g, op, "intermed_df"), f"an integer op needs integer intermed_df, not {op.intermed_df.name}"
            if op.math_fidelity != MathFidelity.HiFi4:
                yield _o(g, op, "math_fidelity"), "an integer op needs math_fidelity HiFi4"
            if op.acc_df != DF.Int32:
                yield _o(g, op, "acc_df"), "an integer op needs acc_df Int32"
            if op.attr("requant") and op.attr("dequant"):
                yield _a(g, op, "requant"), "requant and dequant cannot both be set"
        else:
            if op.acc_df == DF.Int32 and op.type not in ("quantization", "fused_op"):
                yield _o(g, op, "acc_df"), "acc_df Int32 needs integer inputs (or a quantization/fused op)"
            for key in ("requant", "dequant"):
                if op.attr(key):
                    yield _a(g, op, key), f"{key} needs integer inputs"


@rule
def quant_ops(ctx: Ctx):
    """quantization: Float32 in, Int8 out; (de/re)quantization: Int32/Int8 data + Float32 scalars; all Int32 acc."""
    for g, op in ctx.ops():
        if op.type not in ("quantization", "dequantization", "requantization") or len(op.in_df) < 2:
            continue
        if op.acc_df != DF.Int32:
            yield _o(g, op, "acc_df"), f"{op.type} needs acc_df Int32"
        if op.type == "quantization":
            if op.in_df[0] != DF.Float32 or op.in_df[1] != DF.Float32:
                yield _o(g, op, "in_df"), "quantization inputs must be Float32"
            if op.out_df != DF.Int8:
                yield _o(g, op, "out_df"), "quantization outputs Int8"
        else:
            if op.in_df[0] not in (DF.Int32, DF.Int8) or op.in_df[1] != DF.Float32:
                yield _o(g, op, "in_df"), f"{op.type} takes Int32/Int8 data and Float32 scalars"
            want = DF.Float32 if op.type == "dequantization" else DF.Int8
            if op.out_df != want:
                yield _o(g, op, "out_df"), f"{op.type} outputs {want.name}"


@rule
def format_conversions(ctx: Ctx):
    """Reduce over z and splice do no format conversion (in_df == intermed_df == out_df; equal splice inputs)."""
    for g, op in ctx.ops():
        if op.type == "reduce" and op.attr("dim") == "z" and op.in_df:
            if not op.in_df[0] == op.intermed_df == op.out_df:
                yield _o(g, op, "intermed_df"), "reduce over z needs in_df == intermed_df == out_df"
        if op.type == "splice" and len(set(op.in_df)) > 1:
            yield _o(g, op, "in_df"), "splice inputs must all have the same format"


@rule
def op_attributes(ctx: Ctx):
    """Every attribute is known, well-typed and valid on its op type (§3.2)."""
    for g, op in ctx.ops():
        for key, value in op.attributes.items():
            problem = check_attribute(key, value, op.type)
            if problem:
                yield _a(g, op, key), problem
    for fid, fused in ctx.netlist.fused_ops.items():
        for si, sched in enumerate(fused.schedules):
            for sub in sched:
                for key, value in sub.attributes.items():
                    path = f"fused_ops.{fid}.schedules[{si}].{sub.name}.attributes.{key}"
                    problem = None if key in FUSED_SUB_OP_ATTRIBUTES else "attribute not allowed in a fused op"
                    problem = problem or check_attribute(key, value, None)
                    if problem:
                        yield path, problem


@rule
def op_required_attributes(ctx: Ctx):
    """Attributes an op type needs or constrains: matmul m_k/u_kt, reduce dim/type/z, splice
    granularity/inputN, fused_op_id, embedding num_indices, topk k, num_nz_strips per core."""
    for g, op in ctx.ops():
        attrs = op.attributes
        need: List[str] = []
        if op.type in MATMUL_OPS and not op.attr("identity"):
            need += ["m_k", "u_kt"]
        if op.type == "reduce":
            need += ["dim", "type"] + (["z"] if op.attr("dim") == "z" else [])
        if op.type == "splice":
            need += ["granularity"] + [f"input{i}" for i in range(len(op.inputs))]
        need += {"fused_op": ["fused_op_id"], "embedding": ["num_indices"], "topk": ["k"]}.get(op.type, [])
        for key in need:
            if key not in attrs:
                yield _o(g, op, "attributes"), f"a {op.type} op needs attribute {key!r}"
        if op.type == "reduce" and "z" in attrs and op.attr("dim") != "z":
            yield _a(g, op, "z"), "z is only valid for reduce with dim z"
        if op.type in MATMUL_OPS:
            if "z" in attrs and not op.attr("accumulate"):
                yield _a(g, op, "z"), "z is only valid for a matmul with accumulate"
            if op.attr("accumulate") and op.attr("identity"):
                yield _a(g, op, "accumulate"), "accumulate and identity cannot both be set"
        if op.type == "splice":
            for key in attrs:
                if key.startswith("input") and key[5:].isdigit() and int(key[5:]) >= len(op.inputs):
                    yield _a(g, op, key), f"splice has {len(op.inputs)} input(s); there is no {key}"
        if op.type == "depthwise" and op.attr("min_buffer_input") == 1:
            yield _a(g, op, "min_buffer_input"), "depthwise allows min_buffer_input 0 only"
        strips = op.attr("num_nz_strips")
        if strips is not None and len(strips) != op.grid_size[0] * op.grid_size[1]:
            yield _a(g, op, "num_nz_strips"), f"needs one value per core ({op.grid_size[0] * op.grid_size[1]})"
        if op.attr("relu_en") and op.attr("relu_mode") not in (None, "min", "max"):
            yield _a(g, op, "relu_mode"), "relu_mode must be min or max"


@rule
def kernel_broadcast(ctx: Ctx):
    """kernel_broadcast / single_tile name an existing input that has a broadcast TM."""
    for g, op in ctx.ops():
        indices: List[Tuple[str, int]] = []
        for key in ("kernel_broadcast", "kernel_broadcast_per_t"):
            for name, tiles in (op.attr(key) or {}).items():
                if tiles:
                    indices.append((key, int(str(name).split("_")[1])))
        for index in op.attr("single_tile") or ():
            indices.append(("single_tile", index))
        for key, index in indices:
            if index >= len(op.inputs):
                yield _a(g, op, key), f"names input {index}, but the op has {len(op.inputs)} input(s)"
            elif not any(isinstance(tm, Broadcast) for tm in op.tms_of(index)):
                yield _a(g, op, key), f"input {index} has no broadcast TM to kernel-broadcast"


@rule
def op_tile_dim(ctx: Ctx):
    """An op's tile_dim is legal for its out_df and arch; tiny tiles carry no Int8/Int32 data."""
    for g, op in ctx.ops():
        problem = _tile_dim_problem(ctx, op.tile_dim, op.out_df)
        if problem:
            yield _o(g, op, "tile_dim"), problem
        tiny = op.effective_tile_dim != (32, 32) or any(
            ctx.input_tile_dim(op, i) != (32, 32) for i in range(len(op.inputs)) if i < len(op.in_df))
        if tiny and ({op.out_df, *op.in_df} & {DF.Int8, DF.Int32}):
            yield _o(g, op, "tile_dim"), "tiny tiles do not support Int8/Int32 data"


@rule
def binary_tile_dims(ctx: Ctx):
    """All inputs of a binary op have the same tile_dim (§2.3)."""
    for g, op in ctx.ops():
        if op.type in BINARY_OPS and len(op.inputs) >= 2:
            dims = {ctx.input_tile_dim(op, i) for i in range(len(op.inputs))}
            if len(dims) > 1:
                yield _o(g, op, "inputs"), f"binary op inputs have different tile dims {sorted(dims)}"


@rule
def embedding_op(ctx: Ctx):
    """Embedding: num_indices a multiple of 32, ublock_rt == 1, mblock_m == num_indices / 32."""
    for g, op in ctx.ops():
        if op.type != "embedding" or not isinstance(op.attr("num_indices"), int):
            continue
        n = op.attr("num_indices")
        if n % 32:
            yield _a(g, op, "num_indices"), f"num_indices {n} must be a multiple of 32"
        if op.ublock[0] != 1:
            yield _o(g, op, "ublock"), "an embedding op needs ublock_rt == 1"
        if n // 32 != op.mblock[0]:
            yield _o(g, op, "mblock"), f"an embedding op needs mblock_m == num_indices / 32 = {n // 32}"


@rule
def depthwise_op(ctx: Ctx):
    """Depthwise: u_kt == 1 and m_k >= 1."""
    for g, op in ctx.ops():
        if op.type == "depthwise" and op.u_kt != 1:
            yield _a(g, op, "u_kt"), "a depthwise op needs u_kt == 1"


@rule
def sparse_matmul(ctx: Ctx):
    """A sparse (identity) matmul takes at least 3 inputs, the third holding Raw encodings."""
    for g, op in ctx.ops():
        if op.type in MATMUL_OPS and op.attr("identity") and len(op.in_df) >= 3 and op.in_df[2] not in RAW_FORMATS:
            yield f"{_o(g, op, 'in_df')}[2]", "sparse matmul encodings must be RawUInt8/16/32"


@rule
def tm_allowed(ctx: Ctx):
    """transpose only on matmul input 1, unary input 0, binary input 0 (not GS; not Int32); tile_broadcast
    only in fused ops; no TMs on a tilizer (§2.3, §3.3)."""
    for g, op in ctx.ops():
        for index, tms in op.input_tms.items():
            if op.type == "tilizer" and tms:
                yield _tms_path(g, op, index), "a tilizer takes no TMs"
                continue
            for k, tm in enumerate(tms):
                path = f"{_tms_path(g, op, index)}[{k}]"
                if isinstance(tm, TileBroadcast):
                    yield path, "tile_broadcast is only allowed inside fused ops"
                if not isinstance(tm, Transpose):
                    continue
                int32 = index < len(op.in_df) and op.in_df[index] == DF.Int32
                if op.type in MATMUL_OPS:
                    if index != 1:
                        yield path, "transpose is only supported on matmul input 1"
                elif op.type in COPY_OPS or op.type in SFPU_OPS:
                    if int32:
                        yield path, "transpose of an Int32 input is not supported"
                elif op.type in BINARY_OPS and index == 0:
                    if ctx.is_gs:
                        yield path, "transpose on binary input 0 is not supported on Grayskull"
                    elif int32:
                        yield path, "transpose of an Int32 input is not supported"
                else:
                    yield path, "transpose is only allowed on matmul input 1, unary input 0 or binary input 0"


@rule
def op_input_shapes(ctx: Ctx):
    """Each input's (t, rt, ct) after unpad, TMs and pad equals what the op expects: eltwise = the output,
    matmul in0 (t, rt, K) / in1 (t, K, ct) with K = m_k·u_kt / bias = output, reduce along K or z (§2.3).
    TM divisibility (slice/stack factors, broadcast z of t == 1) is checked on the way."""
    for g, op in ctx.ops():
        for index, name in enumerate(op.inputs):
            if name not in ctx.netlist.queues and name not in g.ops:
                continue
            try:
                shape = input_shape_after_tms(ctx.netlist, op, index)
            except TMError as exc:
                key = f"input_{index}_unpad" if "unpad" in str(exc) else f"input_{index}_tms"
                yield _o(g, op, key), str(exc)
                continue
            expected = expected_input_shape(op, index)
            if expected is None or shape == expected:
                continue
            via = " after TMs" if op.tms_of(index) or index in op.input_pad or index in op.input_unpad else ""
            extra = ""
            if op.type in MATMUL_OPS and index in (0, 1):
                k_got = shape.ct if index == 0 else shape.rt
                k_want = expected.ct if index == 0 else expected.rt
                if k_got != k_want:
                    extra = f"; K = m_k·u_kt = {op.m_k}·{op.u_kt} = {op.m_k * op.u_kt} but input gives {k_got}"
            yield _tms_path(g, op, index) if via else f"{_o(g, op, 'inputs')}[{index}]", (
                f"input {index} ({name!r}) has shape (t, rt, ct) = {tuple(shape)}{via}, "
                f"but {op.type} {op.name!r} expects {tuple(expected)}{extra}")


@rule
def reduce_output(ctx: Ctx):
    """A reduce over r outputs one tile row; over c one tile column (§2.3)."""
    for g, op in ctx.ops():
        if op.type != "reduce":
            continue
        dim, shape = op.attr("dim"), op.shape
        if dim == "r" and shape.rt != 1:
            yield _o(g, op, "mblock"), f"reduce over r outputs rt == 1, got rt = {shape.rt}"
        if dim == "c" and shape.ct != 1:
            yield _o(g, op, "mblock"), f"reduce over c outputs ct == 1, got ct = {shape.ct}"


def _stack_block(op: NetlistOp, index: int, horizontal: bool) -> Optional[int]:
    """Consumer-side block length (tiles) along the stacked dimension of an input, if it is pinned."""
    if op.type in MATMUL_OPS and not op.attr("identity"):
        if index == 0:
            return op.u_kt if horizontal else op.ublock[0]
        if index == 1:
            return op.ublock[1] if horizontal else op.u_kt
        if index == 2 and op.attr("bias"):
            return op.ublock[1] if horizontal else op.ublock[0]
        return None
    if op.type in COPY_OPS or op.type in SFPU_OPS or op.type in BINARY_OPS:
        return op.ublock[1] if horizontal else op.ublock[0]
    return None


@rule
def stack_factors(ctx: Ctx):
    """hstack/vstack: each stacked slice must cover whole consumer blocks along that dimension, or a
    consumer block whole slices (one divides the other; §2.3 "in one direction or the other")."""
    for g, op in ctx.ops():
        for index, tms in op.input_tms.items():
            if index >= len(op.inputs) or not any(isinstance(tm, (HStack, VStack)) for tm in tms):
                continue
            try:
                shape = ctx.netlist.shape_of(op.inputs[index])
                if index in op.input_unpad:
                    shape = apply_tms(shape, (), op.input_unpad[index])
            except (KeyError, TMError):
                continue
            for k, tm in enumerate(tms):
                if isinstance(tm, (HStack, VStack)):
                    horizontal = isinstance(tm, HStack)
                    block = _stack_block(op, index, horizontal)
                    width = shape.ct if horizontal else shape.rt
                    if block and width and width % block and block % width:
                        yield f"{_tms_path(g, op, index)}[{k}]", (
                            f"{tm.name} {tm.factor} stacks slices of {width} tile(s), which neither divide nor are "
                            f"divided by the consumer block of {block} tile(s)")
                if isinstance(tm, Pad):
                    continue
                try:
                    shape = tm.apply(shape)
                except TMError:
                    break


@rule
def buf_size_mb_stack(ctx: Ctx):
    """When an op's output is stacked across t by a consumer, its buf_size_mb divides or is a multiple of
    its t (§2.3)."""
    for g, op in ctx.ops():
        for index, tms in op.input_tms.items():
            if index >= len(op.inputs) or not any(isinstance(tm, (HStack, VStack)) for tm in tms):
                continue
            producer = g.ops.get(op.inputs[index])
            if producer is None or producer.buf_size_mb <= 0:
                continue
            b, t = producer.buf_size_mb, producer.t
            if t % b and b % t:
                yield _o(g, producer, "buf_size_mb"), (f"buf_size_mb {b} must divide or be a multiple of t = {t}, "
                                                       f"since {op.name!r} stacks its output")


@rule
def forked_dram_inputs(ctx: Ctx):
    """forked_dram_inputs map an input queue of the op to an op of the same graph."""
    for g, op in ctx.ops():
        for i, (queue, other) in enumerate(op.forked_dram_inputs):
            path = f"{_o(g, op, 'forked_dram_inputs')}[{i}]"
            if queue not in ctx.netlist.queues:
                yield path, f"{queue!r} is not a queue"
            elif queue not in op.inputs:
                yield path, f"{queue!r} is not an input of {op.name!r}"
            if other not in g.ops:
                yield path, f"{other!r} is not an op of graph {g.name}"


@rule
def fused_op_reference(ctx: Ctx):
    """A fused_op names a defined fused op whose input count matches (§1.4); its output sub-op has the
    op's mblock/ublock and is not a matmul with m_k > 1."""
    for g, op in ctx.ops():
        if op.type not in FUSED_OPS or "fused_op_id" not in op.attributes:
            continue
        fused = ctx.netlist.fused_ops.get(op.attr("fused_op_id"))
        if fused is None:
            yield _a(g, op, "fused_op_id"), f"fused op {op.attr('fused_op_id')!r} is not defined in fused_ops"
            continue
        if fused.inputs != len(op.inputs):
            yield _o(g, op, "inputs"), f"fused op {fused.id} takes {fused.inputs} input(s), got {len(op.inputs)}"
        for si, sched in enumerate(fused.schedules):
            for sub in sched:
                if sub.output != "output":
                    continue
                path = f"fused_ops.{fused.id}.schedules[{si}].{sub.name}"
                if (sub.mblock, sub.ublock) != (op.mblock, op.ublock):
                    yield f"{path}.mblock", (f"writes the output of {op.name!r}, so needs mblock {list(op.mblock)} "
                                             f"and ublock {list(op.ublock)}")
                if sub.type in MATMUL_OPS and int(sub.attributes.get("m_k", 1)) > 1:
                    yield f"{path}.attributes.m_k", "a matmul with m_k > 1 cannot write a fused op's output"


def _fused_names(fused) -> str:
    names = [f"input{i}" for i in range(fused.inputs)] + [f"intermed{i}" for i in range(fused.intermediates)]
    return ", ".join(names)


def _fused_buffer(name: str, prefix: str, limit: int) -> bool:
    return name.startswith(prefix) and name[len(prefix):].isdigit() and int(name[len(prefix):]) < limit


@rule
def fused_op_schedule(ctx: Ctx):
    """Scheduled ops read inputK/intermedK/dest and write intermedK/dest/output; a dest write is read by the
    next op; no transpose or pad inside fused ops; names are unique (§1.4)."""
    for fid, fused in ctx.netlist.fused_ops.items():
        seen: Set[str] = set()
        for si, sched in enumerate(fused.schedules):
            previous = ""
            for sub in sched:
                path = f"fused_ops.{fid}.schedules[{si}].{sub.name}"
                if sub.name in seen:
                    yield path, "scheduled op names must be unique within a fused op"
                seen.add(sub.name)
                if sub.type not in OP_TYPES or sub.type in FUSED_OPS:
                    yield f"{path}.type", f"{sub.type!r} cannot be scheduled in a fused op"
                for i, name in enumerate(sub.inputs):
                    if not (name == "dest" or _fused_buffer(name, "input", fused.inputs)
                            or _fused_buffer(name, "intermed", fused.intermediates)):
                        yield f"{path}.inputs[{i}]", (f"{name!r} is not one of {_fused_names(fused)} or dest")
                if not (sub.output in ("dest", "output") or _fused_buffer(sub.output, "intermed", fused.intermediates)):
                    yield f"{path}.output", f"{sub.output!r} must be intermedK, dest or output"
                for key in ("pop", "pop_last"):
                    for name in getattr(sub, key):
                        ok = _fused_buffer(name, "intermed", fused.intermediates) or (
                            key == "pop" and _fused_buffer(name, "input", fused.inputs))
                        if not ok:
                            yield f"{path}.{key}", f"{name!r} is not a buffer this fused op can pop"
                for index, tms in sub.input_tms.items():
                    for k, tm in enumerate(tms):
                        if isinstance(tm, (Transpose, Pad)):
                            yield f"{path}.input_{index}_tms[{k}]", f"{tm.name} is not allowed inside fused ops"
                uses_dest = "dest" in sub.inputs
                if previous == "dest" and not uses_dest:
                    yield f"{path}.inputs", "the previous op wrote dest, so this op must read dest"
                if uses_dest and previous != "dest":
                    yield f"{path}.inputs", "reads dest, but the previous scheduled op did not write dest"
                previous = sub.output


@rule
def l1_fit(ctx: Ctx):
    """With a device, every op's per-core buffers fit the L1 op-buffer budget (§5.3): output
    buf_size_mb·mblock, intermediates, inputs (2 ublocks / matmul column-row strips / resident prologue)."""
    if ctx.device is None:
        return
    budget = ctx.device.l1_op_buffer_budget_bytes
    for g in ctx.netlist.graphs.values():
        prologue = prologue_inputs(ctx.netlist, g.name)
        for op in g.ops.values():
            if op.type in NON_TENSIX_OPS:
                continue
            try:
                usage = op_l1_usage(ctx.netlist, op, prologue.get(op.name, ()))
            except (KeyError, ValueError):
                continue
            if usage.total > budget:
                parts = ", ".join(f"{k} {v}" for k, v in usage.buffers.items())
                yield _o(g, op), (f"needs {usage.total} bytes of L1 per core ({parts}), more than the "
                                  f"{budget}-byte op-buffer budget of {ctx.device.name}")


# ===================================================================================================
# Programs
# ===================================================================================================


def _instructions(ctx: Ctx):
    """(program index, program, instruction index, instruction, path) for every instruction."""
    for pi, prog in enumerate(ctx.netlist.programs):
        for j, instr in enumerate(prog.instructions):
            yield pi, prog, j, instr, f"programs[{pi}].{prog.name}[{j}]"


def _opcode(instr) -> str:
    return {Param: "param", Var: "var", StaticVar: "staticvar", VarInst: "varinst", Loop: "loop",
            EndLoop: "endloop", Execute: "execute", AllocateQueue: "allocate_queue",
            DeallocateQueue: "deallocate_queue"}.get(type(instr), "?")


def _executes(ctx: Ctx):
    for pi, prog, j, instr, path in _instructions(ctx):
        if isinstance(instr, Execute):
            yield prog, instr, f"{path}.execute"


@rule
def program_names_unique(ctx: Ctx):
    """Program names are unique."""
    seen: Set[str] = set()
    for pi, prog in enumerate(ctx.netlist.programs):
        if prog.name in seen:
            yield f"programs[{pi}].{prog.name}", "duplicate program name"
        seen.add(prog.name)


@rule
def program_param_first(ctx: Ctx):
    """param, if present, is the first instruction (§1.5)."""
    for pi, prog, j, instr, path in _instructions(ctx):
        if isinstance(instr, Param) and j != 0:
            yield f"{path}.param", "param must be the first instruction of the program"


def _declared(prog) -> Dict[str, Tuple[str, Optional[int]]]:
    """name -> (kind, initial value) of every declared variable of a program."""
    out: Dict[str, Tuple[str, Optional[int]]] = {}
    for instr in prog.instructions:
        if isinstance(instr, Param):
            for name in instr.names:
                out.setdefault(name, ("param", None))
        elif isinstance(instr, (Var, StaticVar)):
            for name, value in instr.values.items():
                out.setdefault(name, (_opcode(instr), value))
    return out


@rule
def program_var_declared_once(ctx: Ctx):
    """A variable is declared once per program (param, var or staticvar) and is named $something (§1.5)."""
    for pi, prog in enumerate(ctx.netlist.programs):
        seen: Set[str] = set()
        for j, instr in enumerate(prog.instructions):
            names = instr.names if isinstance(instr, Param) else (
                list(instr.values) if isinstance(instr, (Var, StaticVar)) else [])
            for name in names:
                path = f"programs[{pi}].{prog.name}[{j}].{_opcode(instr)}"
                if not isinstance(name, str) or not name.startswith("$"):
                    yield path, f"variable names start with $, got {name!r}"
                elif name in seen:
                    yield path, f"variable {name} is declared twice"
                seen.add(name)


def _used_variables(instr) -> List[Tuple[str, object]]:
    """(sub-path, operand) of every operand an instruction reads or writes."""
    out: List[Tuple[str, object]] = []
    if isinstance(instr, Loop):
        out.append(("loop", instr.count))
    elif isinstance(instr, VarInst):
        out.append(("varinst[0]", instr.out))
        out += [(f"varinst[{k + 2}]", a) for k, a in enumerate(instr.args)]
    elif isinstance(instr, Execute):
        for q, s in instr.queue_settings.items():
            for key, value in vars(s).items():
                out.append((f"execute.queue_settings.{q}.{key}", value))
    return out


@rule
def program_undeclared_variable(ctx: Ctx):
    """Every $variable an instruction uses is declared in the program."""
    for pi, prog in enumerate(ctx.netlist.programs):
        declared = _declared(prog)
        for j, instr in enumerate(prog.instructions):
            for sub, value in _used_variables(instr):
                if isinstance(value, str) and value.startswith("$") and value not in declared:
                    yield f"programs[{pi}].{prog.name}[{j}].{sub}", f"variable {value} is not declared"


@rule
def program_loop_balance(ctx: Ctx):
    """Every loop has a matching endloop and vice versa."""
    for pi, prog in enumerate(ctx.netlist.programs):
        open_loops: List[int] = []
        for j, instr in enumerate(prog.instructions):
            if isinstance(instr, Loop):
                open_loops.append(j)
            elif isinstance(instr, EndLoop):
                if not open_loops:
                    yield f"programs[{pi}].{prog.name}[{j}]", "endloop without a loop"
                else:
                    open_loops.pop()
        for j in open_loops:
            yield f"programs[{pi}].{prog.name}[{j}].loop", "loop without an endloop"


@rule
def program_loop_count(ctx: Ctx):
    """A loop count is >= 1: an immediate, or a variable that starts >= 1 unless a param or varinst sets it."""
    for pi, prog in enumerate(ctx.netlist.programs):
        declared = _declared(prog)
        assigned = {i.out for i in prog.instructions if isinstance(i, VarInst)}
        for j, instr in enumerate(prog.instructions):
            if not isinstance(instr, Loop):
                continue
            path = f"programs[{pi}].{prog.name}[{j}].loop"
            count = instr.count
            if isinstance(count, bool) or (isinstance(count, int) and count < 1):
                yield path, f"loop count must be >= 1, got {count!r}"
            elif isinstance(count, str) and count in declared and count not in assigned:
                kind, value = declared[count]
                if kind != "param" and value is not None and value < 1:
                    yield path, f"loop count {count} is {value} and never set; it must be >= 1"


@rule
def program_varinst(ctx: Ctx):
    """varinst: a known opcode (set, add, mul, inc, incwrap) with its number of operands (§1.5)."""
    for pi, prog, j, instr, path in _instructions(ctx):
        if not isinstance(instr, VarInst):
            continue
        if instr.op not in VARINST_ARITY:
            yield f"{path}.varinst[1]", f"unknown varinst opcode {instr.op!r}; expected {list(VARINST_ARITY)}"
            continue
        if len(instr.args) != VARINST_ARITY[instr.op]:
            yield f"{path}.varinst", f"{instr.op} takes {VARINST_ARITY[instr.op]} operand(s), got {len(instr.args)}"
        if not isinstance(instr.out, str) or not instr.out.startswith("$"):
            yield f"{path}.varinst[0]", f"the output must be a $variable, got {instr.out!r}"
        for k, arg in enumerate(instr.args):
            if isinstance(arg, bool) or not (isinstance(arg, int) or (isinstance(arg, str) and arg.startswith("$"))):
                yield f"{path}.varinst[{k + 2}]", f"operand must be an integer or a $variable, got {arg!r}"


@rule
def execute_graph_exists(ctx: Ctx):
    """execute names a graph of the netlist."""
    for prog, instr, path in _executes(ctx):
        if instr.graph_name not in ctx.netlist.graphs:
            yield f"{path}.graph_name", f"graph {instr.graph_name!r} does not exist"


@rule
def queue_setting_names(ctx: Ctx):
    """Every queue_settings key is a queue, and an IO the executed graph reads or writes (§1.5)."""
    for prog, instr, path in _executes(ctx):
        if instr.graph_name not in ctx.netlist.graphs:
            continue
        reads, writes = ctx.netlist.graph_io(instr.graph_name)
        for q in instr.queue_settings:
            spath = f"{path}.queue_settings.{q}"
            if q not in ctx.netlist.queues:
                yield spath, f"{q!r} is not a queue"
            elif q not in reads and q not in writes:
                yield spath, f"queue {q!r} is not read or written by graph {instr.graph_name}"


@rule
def queue_setting_pointers(ctx: Ctx):
    """type queue sets rd_ptr_local and rd_ptr_global but not wr_ptr_global; a ram sets rd_ptr_global and
    wr_ptr_global but not rd_ptr_local (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            queue = ctx.netlist.queues.get(q)
            if queue is None:
                continue
            spath = f"{path}.queue_settings.{q}"
            if queue.type == "queue":
                if s.wr_ptr_global is not None:
                    yield f"{spath}.wr_ptr_global", "wr_ptr_global is for rams only"
                for key in ("rd_ptr_local", "rd_ptr_global"):
                    if getattr(s, key) is None:
                        yield f"{spath}.{key}", f"a type: queue must set {key}"
            elif queue.type == "ram":
                if s.rd_ptr_local is not None:
                    yield f"{spath}.rd_ptr_local", "rd_ptr_local is for type: queue only"
                for key in ("rd_ptr_global", "wr_ptr_global"):
                    if getattr(s, key) is None:
                        yield f"{spath}.{key}", f"a ram must set {key}"


@rule
def queue_setting_autoinc(ctx: Ctx):
    """If rd_ptr_autoinc and global_rdptr_autoinc are both non-zero they are equal (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            queue = ctx.netlist.queues.get(q)
            if queue is None:
                continue
            local, glob, _ = s.autoincs(queue.type)
            if local != 0 and glob != 0 and local != glob:
                yield (f"{path}.queue_settings.{q}.global_rdptr_autoinc",
                       f"rd_ptr_autoinc {local} and global_rdptr_autoinc {glob} must match when both are set")


@rule
def queue_setting_epilogue(ctx: Ctx):
    """epilogue is not allowed on an op-fed type: queue (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            queue = ctx.netlist.queues.get(q)
            if queue is not None and queue.type == "queue" and not queue.is_host_fed and s.epilogue is True:
                yield f"{path}.queue_settings.{q}.epilogue", "epilogue is not supported on an op-fed type: queue"


@rule
def queue_setting_zero(ctx: Ctx):
    """zero requires prologue (§1.5)."""
    for prog, instr, path in _executes(ctx):
        for q, s in instr.queue_settings.items():
            if s.zero is True and s.prologue is not True and not isinstance(s.prologue, str):
                yield f"{path}.queue_settings.{q}.zero", "zero requires prologue: true"


@rule
def execute_host_queues_listed(ctx: Ctx):
    """Every HOST-fed type: queue the graph reads appears in the execute's queue_settings (§1.5)."""
    for prog, instr, path in _executes(ctx):
        if instr.graph_name not in ctx.netlist.graphs:
            continue
        reads, _ = ctx.netlist.graph_io(instr.graph_name)
        for q in reads:
            queue = ctx.netlist.queues[q]
            if queue.type == "queue" and queue.input == "HOST" and q not in instr.queue_settings:
                yield f"{path}.queue_settings", f"host-fed queue {q!r} read by graph {instr.graph_name} has no settings"


@rule
def execute_gradient_queues_listed(ctx: Ctx):
    """A queue written by a gradient op of the graph appears in the execute's queue_settings."""
    for prog, instr, path in _executes(ctx):
        graph = ctx.netlist.graphs.get(instr.graph_name)
        if graph is None:
            continue
        for op in graph.ops.values():
            if not op.gradient_op:
                continue
            for q in ctx.netlist.queues_fed_by(op.name):
                if q.name not in instr.queue_settings:
                    yield f"{path}.queue_settings", f"gradient op {op.name!r} writes {q.name!r}, which needs settings"


@rule
def execute_streaming_entries(ctx: Ctx):
    """A streamed queue (no prologue/epilogue, rd_ptr_autoinc != 0, global_rdptr_autoinc == 0) has
    entries >= input_count and a multiple of it (golden execute, §1.5)."""
    for prog, instr, path in _executes(ctx):
        graph = ctx.netlist.graphs.get(instr.graph_name)
        if graph is None or not isinstance(graph.input_count, int) or graph.input_count < 1:
            continue
        reads, _ = ctx.netlist.graph_io(instr.graph_name)
        n = graph.input_count
        for q in reads:
            s = instr.queue_settings.get(q)
            queue = ctx.netlist.queues[q]
            if s is None or s.prologue is True or s.epilogue is True or not isinstance(queue.entries, int) \
                    or queue.entries < 1:
                continue
            local, glob, _ = s.autoincs(queue.type)
            if local == 0 or glob != 0 or isinstance(local, str) or isinstance(glob, str):
                continue
            if queue.entries < n or queue.entries % n:
                yield (f"{path}.queue_settings.{q}", f"streams {queue.entries} entries, which must be >= and a "
                                                     f"multiple of graph {graph.name}'s input_count {n}")


@rule
def allocate_queue_names(ctx: Ctx):
    """allocate_queue / deallocate_queue name existing queues (§1.5)."""
    for pi, prog, j, instr, path in _instructions(ctx):
        if isinstance(instr, (AllocateQueue, DeallocateQueue)):
            for k, name in enumerate(instr.names):
                if name not in ctx.netlist.queues:
                    yield f"{path}.{_opcode(instr)}[{k}]", f"queue {name!r} does not exist"


# ===================================================================================================
# Entry points
# ===================================================================================================


def _context(netlist: Netlist, device: Optional[DeviceDescriptor]) -> Ctx:
    arch = device.arch.value if device is not None else netlist.arch
    return Ctx(netlist=netlist, device=device, arch=arch)


def check(netlist: Netlist, device: Optional[DeviceDescriptor] = None,
          rules: Optional[Iterable[str]] = None) -> List[NetlistRuleError]:
    """Every rule violation of ``netlist`` (optionally only the named ``rules``), in rule order."""
    ctx = _context(netlist, device)
    wanted = set(rules) if rules is not None else None
    errors: List[NetlistRuleError] = []
    for name, fn in RULES:
        if wanted is not None and name not in wanted:
            continue
        try:
            for path, message in fn(ctx):
                errors.append(NetlistRuleError(name, path, message))
        except Exception:
            # A rule tripping over data an earlier rule already rejected is a consequence, not a bug.
            if not errors:
                raise
    return errors


def validate(netlist: Netlist, device: Optional[DeviceDescriptor] = None) -> None:
    """Raise :class:`NetlistRuleError` (a NetlistError naming the key path and rule) for the first rule
    the netlist breaks; return None if it is valid. Pass ``device`` to also check grid fit, DRAM
    channels and L1 fit against that card."""
    errors = check(netlist, device)
    if errors:
        raise errors[0]


def rule_names() -> List[str]:
    """Names of all validation rules, in the order they run."""
    return [name for name, _ in RULES]
