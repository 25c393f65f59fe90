"""Pipes and streams of a temporal epoch: what net2pipe/pipegen computed, as data (spec §5.2, §6.3).

A :class:`Pipe` carries one operand slice per input from its sources (producer op cores, or the DRAM
or host buffers of a queue) to its destinations (consumer op cores, or for an output the buffers of
the queue it writes):

* **Grouping**: destinations that receive the same slice share one pipe — a dense matmul's in0 is
  multicast along each grid row, in1 down each grid column (:func:`pybuda.perf.cost.multicast_axis`, the
  rule the cost model's :func:`~pybuda.perf.cost.distinct_fetchers` uses); every other operand has one
  pipe per consumer core. An op's output has one write pipe per producer core and queue.
* **Sources**: producer and consumer grids split the same tensor evenly, so a consumer block needs the
  producer blocks whose share of the rows (columns) overlaps its own: with ``p`` producer and ``c``
  consumer rows, consumer row ``r`` covers ``[r/c, (r+1)/c)`` of the rows and reads producer rows ``j``
  with ``[j/p, (j+1)/p)`` overlapping it. A matmul's in0 needs its whole K strip (every producer column)
  and in1 every producer row, a reduce its whole reduced dimension, a broadcast dimension one producer
  block; a transpose TM swaps the producer's grid dimensions; slice/stack TMs keep each slice's row and
  column partition, so they count as an untouched edge [D: pipegen maps single tiles through the TMs;
  this is the grid-level view].
* **Bytes**: the per-core slice of the operand (:func:`pybuda.perf.cost.operand_fetches`, capped by the
  queue's size), once per pipe per input — the performance model sums exactly these.
* **Routes**: one polyline per source through every destination on NoC0 coordinates, dimension-ordered
  (X first, then Y) without the torus wrap-around [D: NoC0 really moves only towards +x/+y and wraps;
  the direct Manhattan path is what we draw and count hops on]. A DRAM buffer sits at the NoC endpoint
  ("subchannel") of its channel nearest the pipe's first destination (source, for writes) [D]. A pipe
  from another chip (``ethernet``) starts at the destination chip's first Ethernet core.

:class:`CoreStreams` lists, for each worker core, its buffers with stream ids in the spec §5.2 ranges
(inputs 0-7, outputs 16-23, intermediates 24-31, relays 32-63) and sizes from the op's blocking and
formats (:func:`pybuda.netlist.operands.op_l1_usage`, spec §5.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

from pybuda.arch import DeviceDescriptor
from pybuda.errors import ConfigError, NetlistError
from pybuda.netlist.device_ops import ops_of_class
from pybuda.netlist.model import NON_TENSIX_OPS, GraphDef, Netlist, NetlistOp, QueueDef
from pybuda.netlist.operands import op_l1_usage, prologue_inputs
from pybuda.perf import cost
from pybuda.perf.program import _chip_of, _CostModel, _CostOp

__all__ = ["XY", "Endpoint", "Pipe", "StreamBuffer", "CoreStreams", "PIPE_KINDS", "STREAM_RANGES",
           "epoch_pipes", "graph_pipes", "core_streams", "noc_path", "input_tile_caps", "operand_pipes"]

XY = Tuple[int, int]

#: What a pipe moves: op→op on the NoC, a queue read from DRAM or host memory, an op's output written
#: to a DRAM or host queue, or an op→op edge between chips.
PIPE_KINDS = ("op", "dram_read", "host_read", "dram_write", "host_write", "ethernet")

#: Stream id ranges per buffer role (spec §5.2, constants.hpp), inclusive.
STREAM_RANGES: Dict[str, Tuple[int, int]] = {"input": (0, 7), "output": (16, 23), "intermediate": (24, 31),
                                             "relay": (32, 63)}

#: Tiles a relay (gather) stream buffers: two ublocks of the operand [D: pipegen sizes relays per phase].
_RELAY_UBLOCKS = 2

#: Op types whose in0 needs a whole K row strip and in1 a whole K column strip (as in the cost model).
_MATMUL_OPS = ops_of_class("matmul", "depthwise")


@dataclass(frozen=True)
class Endpoint:
    """One end of a pipe: a worker core of an op (``kind`` ``core``) or one buffer of a queue (``dram``
    or ``host``). ``noc`` is None when the core is not on the device (an unplaced op, or a netlist
    placed for a larger grid; only when pipes are built with ``strict=False``)."""

    kind: str
    name: str
    chip: int
    noc: Optional[XY]
    core: Optional[XY] = None
    buffer: Optional[int] = None
    channel: Optional[int] = None
    subchannel: Optional[int] = None
    address: Optional[int] = None


@dataclass(frozen=True)
class Pipe:
    """One pipe: ``sources`` → ``destinations``, moving ``tiles_per_input`` tiles (``bytes_per_input``
    bytes in ``df``) per input once (multicast to every destination).

    ``operand`` is the consumer's input index (-1 for an output write). ``gather`` is set when more
    than one source feeds it, ``multicast`` when more than one destination receives the same data.
    ``prologue`` marks a queue some execute of the graph loads into L1 once (no per-input traffic).
    ``routes[k]`` is the NoC hop list of source ``k`` through the destinations (see the module doc)."""

    id: str
    kind: str
    producer: str
    consumer: str
    operand: int
    sources: Tuple[Endpoint, ...]
    destinations: Tuple[Endpoint, ...]
    tiles_per_input: int
    bytes_per_input: int
    df: str
    prologue: bool
    gather: bool
    multicast: bool
    routes: Tuple[Tuple[XY, ...], ...] = ()

    @property
    def source_count(self) -> int:
        """Sources one destination gathers from."""
        return len(self.sources)


@dataclass(frozen=True)
class StreamBuffer:
    """One buffer of a core and the stream that serves it. ``operand`` is the input index for inputs
    and relays, 0 for the output and intermediates; ``pipes`` the ids of the pipes it terminates."""

    stream_id: int
    role: str
    operand: int
    size_bytes: int
    tiles: int
    df: str
    pipes: Tuple[str, ...] = ()


@dataclass(frozen=True)
class CoreStreams:
    """The stream/buffer configuration of one worker core of an epoch."""

    op: str
    chip: int
    core: XY
    noc: Optional[XY]
    buffers: Tuple[StreamBuffer, ...]


# --------------------------------------------------------------------------------------------------
# Geometry
# --------------------------------------------------------------------------------------------------

def noc_path(a: XY, b: XY) -> List[XY]:
    """NoC hops from ``a`` to ``b`` inclusive, X first then Y, one hop per step."""
    path = [tuple(a)]
    x, y = a
    while x != b[0]:
        x += 1 if b[0] > x else -1
        path.append((x, y))
    while y != b[1]:
        y += 1 if b[1] > y else -1
        path.append((x, y))
    return path  # type: ignore[return-value]


def _through(start: XY, stops: Sequence[Optional[XY]]) -> Tuple[XY, ...]:
    """One polyline from ``start`` through every stop in order."""
    path: List[XY] = [start]
    for stop in stops:
        if stop is None:
            continue
        path.extend(noc_path(path[-1], stop)[1:])
    return tuple(path)


def _overlap(index: int, consumer: int, producer: int) -> range:
    """Producer blocks (of ``producer`` equal blocks) overlapping block ``index`` of ``consumer`` equal
    blocks of the same extent: ``j`` with ``[j/p, (j+1)/p)`` ∩ ``[i/c, (i+1)/c)`` non-empty."""
    lo = index * producer // consumer
    hi = -(-(index + 1) * producer // consumer)  # ceil
    return range(max(0, lo), min(producer, max(hi, lo + 1)))


def _grid_core(op: NetlistOp, r: int, c: int) -> Optional[XY]:
    """Logical (row, col) of op-grid core (r, c): grid_loc + (r, c), or + (c, r) under grid_transpose."""
    if op.grid_loc is None:
        return None
    r0, c0 = op.grid_loc
    return (r0 + c, c0 + r) if op.grid_transpose else (r0 + r, c0 + c)


class _Places:
    """Logical core → NoC coordinate, strict (ConfigError) or lenient (None)."""

    def __init__(self, device: DeviceDescriptor, strict: bool):
        self.device = device
        self.strict = strict

    def noc(self, op: NetlistOp, core: Optional[XY]) -> Optional[XY]:
        if core is None:
            if self.strict:
                raise NetlistError(f"graphs.{op.name}.grid_loc", "the op is not placed (no grid_loc)")
            return None
        try:
            return self.device.logical_to_noc(core[0], core[1])
        except ConfigError as exc:
            if self.strict:
                raise NetlistError(f"{op.name}.grid_loc", f"{exc} of {self.device.name}") from None
            return None


def _nearest(endpoints: Sequence[XY], to: Optional[XY]) -> int:
    if to is None or len(endpoints) <= 1:
        return 0
    return min(range(len(endpoints)), key=lambda k: (abs(endpoints[k][0] - to[0]) + abs(endpoints[k][1] - to[1]), k))


def _queue_endpoint(q: QueueDef, buffer: int, device: DeviceDescriptor, near: Optional[XY]) -> Endpoint:
    allocs = q.allocations
    channel, address = (int(allocs[buffer][0]), int(allocs[buffer][1])) if buffer < len(allocs) else (0, 0)
    chip = _chip_of(q.target_device)
    if q.loc == "host":
        noc = device.pcie_cores[0] if device.pcie_cores else None
        return Endpoint("host", q.name, chip, noc, buffer=buffer, channel=channel, address=address)
    if 0 <= channel < len(device.dram_channels):
        eps = device.dram_channels[channel].noc_endpoints
        sub = _nearest(eps, near)
        return Endpoint("dram", q.name, chip, eps[sub], buffer=buffer, channel=channel, subchannel=sub,
                        address=address)
    return Endpoint("dram", q.name, chip, None, buffer=buffer, channel=channel, address=address)


def input_tile_caps(netlist: Netlist, op: NetlistOp) -> Tuple[Optional[int], ...]:
    """Per input: the tiles of the queue it reads (a core never reads more than the queue holds, e.g. a
    broadcast operand), None for an op input (spec §2.3; :class:`pybuda.perf.cost.BandwidthContext`)."""
    caps: List[Optional[int]] = []
    for name in op.inputs:
        q = netlist.queues.get(name)
        caps.append(None if q is None else q.shape.t * q.shape.rt * q.shape.ct)
    return tuple(caps)


def _source_blocks(op: NetlistOp, index: int, group: Sequence[XY], pr: int, pc: int) -> List[XY]:
    """Producer grid blocks (row, col) one pipe of ``op`` input ``index`` reads, for the consumer
    op-grid cores ``group`` (see the module docstring)."""
    tms = op.tms_of(index)
    transposed = any(tm.name == "transpose" for tm in tms)
    fr, fc = (pc, pr) if transposed else (pr, pc)  # the producer grid as the consumer sees it
    cr, cc = op.grid_size
    rows: Set[int] = set()
    cols: Set[int] = set()
    for r, c in group:
        rows.update(_overlap(r, cr, fr))
        cols.update(_overlap(c, cc, fc))
    if op.type in _MATMUL_OPS and not op.attr("identity"):
        if index == 0:
            cols = set(range(fc))
        elif index == 1:
            rows = set(range(fr))
    elif op.type == "reduce":
        dim = str(op.attr("dim") or "r").lower()
        if dim == "r":
            rows = set(range(fr))
        elif dim == "c":
            cols = set(range(fc))
    bcast = {str(getattr(tm, "dim", "")) for tm in tms if tm.name == "broadcast"}
    if "r" in bcast:
        rows = {0}
    if "c" in bcast:
        cols = {0}
    blocks = [(j, k) for j in sorted(rows) for k in sorted(cols)]
    return [(k, j) for j, k in blocks] if transposed else blocks


def _groups(op: NetlistOp, index: int) -> List[List[XY]]:
    """Consumer op-grid cores that share one pipe of input ``index`` (multicast groups)."""
    cr, cc = op.grid_size
    axis = cost.multicast_axis(_CostOp(op), index)
    if axis == "row":
        return [[(r, c) for c in range(cc)] for r in range(cr)]
    if axis == "col":
        return [[(r, c) for r in range(cr)] for c in range(cc)]
    return [[(r, c)] for r in range(cr) for c in range(cc)]


# --------------------------------------------------------------------------------------------------
# Pipes
# --------------------------------------------------------------------------------------------------

def operand_pipes(netlist: Netlist, op: NetlistOp, index: int, device: DeviceDescriptor, *,
                  prologue: bool = False, routes: bool = True, strict: bool = True) -> List[Pipe]:
    """The pipes that deliver input ``index`` of ``op`` to its cores (empty if the input names neither
    a queue nor an op)."""
    places = _Places(device, strict)
    name = op.inputs[index]
    q = netlist.queues.get(name)
    found = None if q is not None else _ops_by_name(netlist).get(name)
    if q is None and found is None:
        return []
    chip = _chip_of(_graph_of(netlist, op.name))
    fetches = cost.operand_fetches(_CostOp(op), _CostModel(op), input_tile_caps(netlist, op))
    nbytes = int(fetches[index][0]) if index < len(fetches) else 0
    df = op.in_df[index] if index < len(op.in_df) else op.out_df
    tile = cost.tile_size_bytes(df)
    tiles = nbytes // tile if tile else 0
    if q is not None:
        pr, pc = q.grid_size
        kind = "host_read" if q.loc == "host" else "dram_read"
    else:
        pgraph, prod = found  # type: ignore[misc]
        pr, pc = prod.grid_size
        kind = "op" if _chip_of(pgraph.target_device) == chip else "ethernet"
    pipes: List[Pipe] = []
    for g, group in enumerate(_groups(op, index)):
        dests = []
        for r, c in group:
            core = _grid_core(op, r, c)
            dests.append(Endpoint("core", op.name, chip, places.noc(op, core), core=core))
        first = dests[0].noc
        blocks = _source_blocks(op, index, group, pr, pc)
        sources: List[Endpoint] = []
        for j, k in blocks:
            if q is not None:
                sources.append(_queue_endpoint(q, j * pc + k, device, first))
            else:
                pcore = _grid_core(prod, j, k)
                sources.append(Endpoint("core", prod.name, _chip_of(pgraph.target_device),
                                        places.noc(prod, pcore), core=pcore))
        hops: Tuple[Tuple[XY, ...], ...] = ()
        if routes:
            if kind == "ethernet":
                start = device.eth_cores[0] if device.eth_cores else None
                hops = (_through(start, [d.noc for d in dests]),) if start is not None else ()
            else:
                hops = tuple(_through(s.noc, [d.noc for d in dests]) for s in sources if s.noc is not None)
        pipes.append(Pipe(
            id=f"{op.name}.in{index}.{g}", kind=kind, producer=name, consumer=op.name, operand=index,
            sources=tuple(sources), destinations=tuple(dests), tiles_per_input=tiles, bytes_per_input=nbytes,
            df=df.name, prologue=bool(prologue and q is not None), gather=len(sources) > 1,
            multicast=len(dests) > 1, routes=hops))
    return pipes


def _output_pipes(netlist: Netlist, op: NetlistOp, device: DeviceDescriptor, routes: bool,
                  strict: bool) -> List[Pipe]:
    """One write pipe per producer core and queue fed by ``op``."""
    places = _Places(device, strict)
    chip = _chip_of(_graph_of(netlist, op.name))
    tiles = cost.output_tiles_per_core(_CostModel(op))
    nbytes = tiles * cost.tile_size_bytes(op.out_df)
    pr, pc = op.grid_size
    pipes: List[Pipe] = []
    for q in netlist.queues_fed_by(op.name):
        qr, qc = q.grid_size
        kind = "host_write" if q.loc == "host" else "dram_write"
        for r in range(pr):
            for c in range(pc):
                core = _grid_core(op, r, c)
                src = Endpoint("core", op.name, chip, places.noc(op, core), core=core)
                dests = tuple(_queue_endpoint(q, j * qc + k, device, src.noc)
                              for j in _overlap(r, pr, qr) for k in _overlap(c, pc, qc))
                hops = (_through(src.noc, [d.noc for d in dests]),) if routes and src.noc is not None else ()
                pipes.append(Pipe(
                    id=f"{op.name}.out.{q.name}.{r * pc + c}", kind=kind, producer=op.name, consumer=q.name,
                    operand=-1, sources=(src,), destinations=dests, tiles_per_input=tiles, bytes_per_input=nbytes,
                    df=op.out_df.name, prologue=False, gather=False, multicast=False, routes=hops))
    return pipes


_INDEX: Dict[int, Tuple[Netlist, Dict[str, Tuple[GraphDef, NetlistOp]]]] = {}


def _ops_by_name(netlist: Netlist) -> Dict[str, Tuple[GraphDef, NetlistOp]]:
    """op name → (graph, op), built once per netlist (``Netlist.find_op`` scans every graph: too slow
    for one lookup per op input of a 70-epoch model)."""
    hit = _INDEX.get(id(netlist))
    if hit is None or hit[0] is not netlist:
        hit = (netlist, {o.name: (g, o) for g, o in netlist.iter_ops()})
        _INDEX.clear()  # one netlist at a time: never keep old netlists alive
        _INDEX[id(netlist)] = hit
    return hit[1]


def _graph_of(netlist: Netlist, op_name: str):
    """The target device of the graph holding ``op_name``."""
    found = _ops_by_name(netlist).get(op_name)
    return found[0].target_device if found is not None else 0


def graph_pipes(netlist: Netlist, graph_name: str, device: DeviceDescriptor, *, routes: bool = True,
                strict: bool = True) -> List[Pipe]:
    """Every pipe of one graph: each op input's pipes, then its output writes, in op order.
    ``strict=False`` (the performance model) tolerates ops the device cannot hold (``noc`` None)."""
    graph = netlist.graphs.get(graph_name)
    if graph is None:
        raise NetlistError("graphs", f"unknown graph {graph_name[:80]!r}")
    prologue = prologue_inputs(netlist, graph_name)
    pipes: List[Pipe] = []
    for op in graph.ops.values():
        for i in range(len(op.inputs)):
            pipes.extend(operand_pipes(netlist, op, i, device, prologue=i in prologue.get(op.name, ()),
                                       routes=routes, strict=strict))
        pipes.extend(_output_pipes(netlist, op, device, routes, strict))
    return pipes


def epoch_pipes(netlist: Netlist, graph_name: str, device: DeviceDescriptor) -> List[Pipe]:
    """The pipes of ``graph_name`` with routes, every core checked against ``device`` (NetlistError
    for an unplaced op or one outside the grid)."""
    return graph_pipes(netlist, graph_name, device, routes=True, strict=True)


# --------------------------------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------------------------------

def core_streams(netlist: Netlist, graph_name: str, device: DeviceDescriptor,
                 pipes: Optional[Sequence[Pipe]] = None) -> List[CoreStreams]:
    """Each worker core of the graph with its buffers: input ``i`` on stream ``i``, the output on 16,
    intermediates on 24, and a relay stream (32 up) on the first destination of each gather pipe.
    Sizes are the per-core L1 buffers (spec §5.3; prologue inputs resident for the epoch)."""
    graph = netlist.graphs[graph_name]
    pipes = list(pipes) if pipes is not None else epoch_pipes(netlist, graph_name, device)
    prologue = prologue_inputs(netlist, graph_name)
    into: Dict[Tuple[str, XY, int], List[Pipe]] = {}
    for p in pipes:
        if p.operand < 0:
            continue
        for d in p.destinations:
            if d.core is not None:
                into.setdefault((p.consumer, d.core, p.operand), []).append(p)
    out: List[CoreStreams] = []
    lo_in, hi_in = STREAM_RANGES["input"]
    for op in graph.ops.values():
        if op.type in NON_TENSIX_OPS:
            continue
        n_in = len(op.inputs)
        if n_in > hi_in - lo_in + 1:
            raise NetlistError(f"graphs.{graph_name}.{op.name}.inputs",
                               f"{n_in} inputs; a core has input streams {lo_in}-{hi_in} only (spec §5.2)")
        usage = op_l1_usage(netlist, op, sorted(prologue.get(op.name, ())))
        chip = _chip_of(graph.target_device)
        for r in range(op.grid_size[0]):
            for c in range(op.grid_size[1]):
                core = _grid_core(op, r, c)
                if core is None:
                    raise NetlistError(f"graphs.{graph_name}.{op.name}.grid_loc", "the op is not placed")
                bufs: List[StreamBuffer] = []
                relay = STREAM_RANGES["relay"][0]
                for i in range(n_in):
                    df = op.in_df[i] if i < len(op.in_df) else op.out_df
                    size = usage.buffers.get(f"input_{i}", 0)
                    feeding = into.get((op.name, core, i), [])
                    bufs.append(StreamBuffer(lo_in + i, "input", i, size, size // cost.tile_size_bytes(df), df.name,
                                             tuple(p.id for p in feeding)))
                    for p in feeding:
                        if p.gather and p.destinations[0].core == core:
                            if relay > STREAM_RANGES["relay"][1]:
                                raise NetlistError(f"{op.name}", "more gather relays than relay streams 32-63")
                            tiles = _RELAY_UBLOCKS * op.ublock_tiles
                            bufs.append(StreamBuffer(relay, "relay", i, tiles * cost.tile_size_bytes(df), tiles,
                                                     df.name, (p.id,)))
                            relay += 1
                size = usage.buffers.get("output", 0)
                bufs.append(StreamBuffer(STREAM_RANGES["output"][0], "output", 0, size,
                                         size // cost.tile_size_bytes(op.out_df), op.out_df.name,
                                         tuple(p.id for p in pipes if p.operand < 0 and p.producer == op.name
                                               and p.sources[0].core == core)))
                if "intermed" in usage.buffers:
                    size = usage.buffers["intermed"]
                    bufs.append(StreamBuffer(STREAM_RANGES["intermediate"][0], "intermediate", 0, size,
                                             size // cost.tile_size_bytes(op.intermed_df), op.intermed_df.name))
                bufs.sort(key=lambda b: b.stream_id)
                out.append(CoreStreams(op.name, chip, core, _Places(device, False).noc(op, core), tuple(bufs)))
    return out
