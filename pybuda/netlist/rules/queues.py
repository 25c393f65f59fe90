"""Netlist rules: queues (blocking, DRAM/host placement, ports, aliases, tile dims).

Each ``@rule`` function yields ``(key path, message)`` pairs; :mod:`pybuda.netlist.validate` runs them in
registration order (this module is imported in its place in that order).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from pybuda.arch.tiles import is_legal_tile_dim
from pybuda.netlist.model import AllocateQueue, DeallocateQueue, Netlist
from pybuda.netlist.tms import Pad, TMError, TileBroadcast, Transpose, tms_shape
from pybuda.netlist.rules.framework import Ctx, INT_FORMATS, rule, _o, _q, _targets


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
            shape = tms_shape(producer.shape, q.input_tms)
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
