"""Queue placement: host memory or DRAM channels, with addresses (spec §1.2, §4.5, §5.1).

Every queue of the lowered graph and every epoch-to-epoch queue gets a :class:`QueuePlacement`:

* **Location.** Inputs live on the host when ``input_queues_on_host`` (never on Grayskull, which cannot
  read host memory fast: TT-Buda's placer moves them to DRAM with a warning), outputs when
  ``output_queues_on_host``; parameters, constants, accumulators and e2e queues live in DRAM, except an
  e2e queue between two chips without Ethernet (Grayskull cards, ``DeviceDescriptor.chip_link == "pcie"``):
  it lives in host memory, written and read over PCIe. A manual placement (``override_dram_queue_placement``)
  with a channel forces DRAM.
* **Blocking.** A queue read by an op is split like that operand of its first reader (grid sides are
  the gcd of the queue's tile rows/columns and the reader's split of that operand; transposed edges
  swap them); a queue written by an op (outputs, e2e, accumulators) takes the producer's grid, t,
  mblock and ublock — an untilizing producer writes a 1x1 queue. Host queues are 1x1. A large
  streamed DRAM queue (device-side input, e2e, or a parameter/constant some reader streams instead
  of keeping it in L1) whose entry is ≥ ``SPREAD_MIN_ENTRY_BYTES`` gets a finer grid — up to one
  buffer per DRAM channel, refining the reader's/producer's split along the tensor's tile rows and
  columns — so that one channel does not serve the whole read (as TT-Buda spreads input queues).
* **Size.** Each buffer is ``32 + entries · entry_size`` bytes with ``entry_size = t · mblock · ublock
  tiles · tile_size(df)`` (spec §1.2). Entries: parameters, constants and accumulators 1; e2e queues
  the microbatch; inputs and outputs microbatch × ``io_queue_multiplier``.
* **Channels.** ``dram_placement_algorithm``: ROUND_ROBIN (next channel with room), ROUND_ROBIN_FLIP_FLOP
  (round robin within one half of the channels, the half alternating with the parity of the epoch
  that reads/writes the queue, so consecutive epochs use different channels), GREATEST_CAPACITY (the
  channel with the most free bytes), CLOSEST (the channel whose NoC endpoint is nearest, in Manhattan
  distance, to the core that reads — or writes — that buffer). A manual channel pins every buffer.
* **Addresses.** Per chip and channel, static queues (everything but e2e queues) are bump-allocated
  from ``dram_reserved_bytes`` up (the bottom is left to the backend's binaries and runtime
  structures); e2e queues are *dynamic*: each lives from its producer's temporal epoch to its last
  consumer's (``QueuePlacement.lifetime``) and is allocated first-fit above the static queues, reusing
  the space of e2e queues whose lifetime ended — the netlist program must ``allocate_queue`` them
  before the producer's epoch and ``deallocate_queue`` them after the last consumer's. Addresses are
  aligned to 32 bytes (64 on Blackhole); a buffer must end inside the channel, else CompileError. Host buffers are allocated the same way in the host
  memory channels (round robin), from address 0.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pybuda.perf.cost import tile_size_bytes
from pybuda.balancer.blocking import pick_ublock
from pybuda.balancer.legalizer import input_queue_loc
from pybuda.netlist.tms import tm_names
from pybuda.config import DRAMPlacementAlgorithm
from pybuda.errors import CompileError
from pybuda.placer.types import PlacerSolution, QueuePlacement
from pybuda.dtypes import DataFormat

log = logging.getLogger(__name__)

STAGE = "BALANCER_PASS"
QUEUE_HEADER_BYTES = 32  # spec §1.2: io_queue_header_size_bytes = NOC_ADDRESS_ALIGNMENT
#: Bottom of every DRAM channel left to the backend (binaries, epoch commands, runtime structures).
#: No source number: an assumption [D]; pass ``dram_reserved_bytes`` to change it.
DRAM_RESERVED_BYTES = 128 * 1024 * 1024

_MATMUL = frozenset({"matmul", "depthwise"})
_READ_KINDS = frozenset({"input", "parameter", "constant"})


@dataclass
class _QueueSpec:
    name: str
    kind: str
    chip: int
    loc: str
    grid: Tuple[int, int]
    t: int
    mblock: Tuple[int, int]
    ublock: Tuple[int, int]
    df: DataFormat
    entries: int
    anchor: Optional[Any]  # OpPlacement of the reader/writer used by CLOSEST
    parity: int
    channel: Optional[int] = None
    lifetime: Optional[Tuple[int, int]] = None  # temporal epochs (first, last) for dynamic queues

    @property
    def entry_size(self) -> int:
        tiles = self.t * self.mblock[0] * self.mblock[1] * self.ublock[0] * self.ublock[1]
        return tiles * tile_size_bytes(self.df)

    @property
    def buffer_size(self) -> int:
        return QUEUE_HEADER_BYTES + self.entries * self.entry_size


def _split(rt: int, ct: int, z: int, grid: Tuple[int, int]) -> Tuple[int, Tuple[int, int], Tuple[int, int]]:
    rows, cols = rt // grid[0], ct // grid[1]
    ub = pick_ublock(rows, cols, 8)
    return z, (rows // ub[0], cols // ub[1]), ub


def _read_grid(queue: Any, consumer: Any, index: int, model: Any) -> Tuple[int, int]:
    """Grid of a queue read by ``consumer`` as operand ``index``: split like that operand."""
    gr, gc = model.grid_shape
    if consumer.type in _MATMUL and index == 0:
        a, b = gr, 1
    elif consumer.type in _MATMUL and index == 1:
        a, b = 1, gc
    else:
        a, b = gr, gc
    if "transpose" in tm_names(consumer.input_tms.get(index, ())):
        a, b = b, a
    return math.gcd(queue.shape.rt, a), math.gcd(queue.shape.ct, b)


def _specs(graph: Any, solution: Any, result: PlacerSolution, config: Any, device: Any,
           io_queue_multiplier: int) -> List[_QueueSpec]:
    placements = result.op_placements
    microbatch = max(1, int(getattr(graph, "microbatch", 1) or 1))
    io_entries = microbatch * max(1, int(io_queue_multiplier))
    readers: Dict[str, List[Tuple[Any, int]]] = {}
    for op in graph.ops.values():
        for k, name in enumerate(op.inputs):
            if name in graph.queues:
                readers.setdefault(name, []).append((op, k))
    default_chip = result.chip_order[0] if result.chip_order else 0
    specs: List[_QueueSpec] = []
    for q in graph.queues.values():
        kind = str(q.kind)
        shape = q.shape
        reads = readers.get(q.name, [])
        producer = graph.ops.get(q.producer) if q.producer else None
        if producer is not None and kind not in _READ_KINDS:
            pm = solution.op_models[producer.name]
            pp = placements[producer.name]
            chip, anchor, parity = pp.chip_id, pp, pp.global_epoch % 2
            if producer.untilize_output:
                grid, t = (1, 1), pm.t
                mblock = (pm.grid_shape[0] * pm.mblock[0], pm.grid_shape[1] * pm.mblock[1])
                ublock = pm.ublock
            else:
                grid, t, mblock, ublock = pm.grid_shape, pm.t, pm.mblock, pm.ublock
        else:
            if reads:
                op, k = reads[0]
                cp = placements[op.name]
                chip, anchor, parity = cp.chip_id, cp, cp.global_epoch % 2
                grid = _read_grid(q, op, k, solution.op_models[op.name])
            else:
                chip, anchor, parity, grid = default_chip, None, 0, (1, 1)
            t, mblock, ublock = _split(shape.rt, shape.ct, shape.z, grid)
        if kind == "input":
            loc, entries = input_queue_loc(config, device), io_entries
        elif kind == "output":
            loc, entries = ("host" if config.output_queues_on_host else "dram"), io_entries
        elif kind == "epoch_to_epoch":
            loc, entries = "dram", microbatch
        else:
            loc, entries = "dram", 1
        manual = config.manual_dram_queue_placement.get(q.name)
        channel = None
        if manual is not None:
            if manual[0] is not None:
                chip = int(manual[0])
            if manual[1] is not None:
                channel, loc = int(manual[1]), "dram"
        if loc == "dram" and _streamed(kind, reads, solution):
            grid = _spread_grid(shape.rt, shape.ct, tuple(grid), len(device.dram_channels),
                                tile_size_bytes(q.df) * shape.z * shape.rt * shape.ct)
            t, mblock, ublock = _split(shape.rt, shape.ct, shape.z, grid)
        if loc == "host" and grid != (1, 1):
            t, mblock, ublock = _merge_to_single(t, mblock, ublock, grid)
            grid = (1, 1)
        specs.append(_QueueSpec(q.name, kind, chip, loc, tuple(grid), t, tuple(mblock), tuple(ublock), q.df, entries,
                                anchor, parity, channel))
    for name in result.epoch_to_epoch_queues:
        e2e = result.e2e_queues[name]
        pm = solution.op_models[e2e.producer]
        producer = graph.ops[e2e.producer]
        first = placements[e2e.consumers[0]]
        manual = config.manual_dram_queue_placement.get(name)
        chip, channel = e2e.chip_id, None
        if manual is not None:
            chip = int(manual[0]) if manual[0] is not None else chip
            channel = int(manual[1]) if manual[1] is not None else None
        epochs = result.epochs
        lifetime = (epochs[e2e.producer_epoch].temporal_epoch,
                    max(epochs[e].temporal_epoch for e in e2e.consumer_epochs))
        grid, t, mblock, ublock = tuple(pm.grid_shape), pm.t, tuple(pm.mblock), tuple(pm.ublock)
        if not producer.untilize_output:
            rt, ct = grid[0] * mblock[0] * ublock[0], grid[1] * mblock[1] * ublock[1]
            spread = _spread_grid(rt, ct, grid, len(device.dram_channels), tile_size_bytes(producer.out_df) * t * rt * ct)
            if spread != grid:
                grid = spread
                t, mblock, ublock = _split(rt, ct, t, grid)
        loc = "dram"
        if placements[e2e.producer].chip_id != chip and _chip_link(device) == "pcie" and manual is None:
            # No Ethernet (Grayskull cards): the producer's chip writes the queue into host memory over PCIe
            # and the consumer's chip reads it from there.
            loc = "host"
            if grid != (1, 1):
                t, mblock, ublock = _merge_to_single(t, mblock, ublock, grid)
                grid = (1, 1)
        specs.append(_QueueSpec(name, "epoch_to_epoch", chip, loc, grid, t, mblock, ublock,
                                producer.out_df, e2e.entries, first, e2e.producer_epoch % 2, channel, lifetime))
    return specs


#: A streamed DRAM queue whose entry is at least this large is split into more buffers, one per channel
#: where the tensor's tile grid allows, so that one channel does not serve a whole large read [D].
SPREAD_MIN_ENTRY_BYTES = 256 * 1024


def _chip_link(device: Any) -> str:
    """``"pcie"`` for chips without Ethernet (their chip-to-chip queues live in host memory)."""
    link = getattr(device, "chip_link", None)
    if link is not None:
        return str(link)
    return "ethernet" if getattr(device, "eth_cores", ()) else "pcie"


def _streamed(kind: str, reads: Sequence[Tuple[Any, int]], solution: Any) -> bool:
    """True for a queue read every input from DRAM: a device-side input, or a parameter/constant that
    some reader streams (not resident in L1 as a prologue), e.g. a sparse matmul's index table."""
    if kind == "input":
        return True
    if kind not in ("parameter", "constant"):
        return False
    for op, k in reads:
        model = solution.op_models.get(op.name)
        if model is not None and k not in tuple(getattr(model, "prologue_inputs", ())):
            return True
    return False


def _spread_grid(rt: int, ct: int, grid: Tuple[int, int], channels: int, entry_bytes: int) -> Tuple[int, int]:
    """A finer buffer grid for a large streamed DRAM queue, as TT-Buda's placer gives input queues a
    grid of buffers spread over the channels: the largest (a, b) with the reader's split (grid) dividing
    it, a | rt, b | ct and a·b ≤ channels. Each buffer then goes to its own channel (round robin)."""
    a0, b0 = grid
    if entry_bytes < SPREAD_MIN_ENTRY_BYTES or a0 * b0 >= channels:
        return grid
    best = grid
    for a in range(a0, min(rt, channels) + 1, a0):
        if rt % a:
            continue
        for b in range(b0, min(ct, channels // a) + 1, b0):
            if ct % b == 0 and a * b > best[0] * best[1]:
                best = (a, b)
    return best


def _merge_to_single(t: int, mblock: Tuple[int, int], ublock: Tuple[int, int], grid: Tuple[int, int]
                     ) -> Tuple[int, Tuple[int, int], Tuple[int, int]]:
    return t, (grid[0] * mblock[0], grid[1] * mblock[1]), ublock


class _Channel:
    """One DRAM channel of one chip: static buffers bump-allocated from the bottom, dynamic (e2e)
    buffers first-fit above them, freed once their last temporal epoch has passed."""

    __slots__ = ("size", "align", "static_top", "live")

    def __init__(self, base: int, size: int, align: int):
        self.size = size
        self.align = align
        self.static_top = base
        self.live: List[Tuple[int, int, int]] = []  # (addr, end, last temporal epoch), sorted by addr

    def _up(self, addr: int) -> int:
        return -(-addr // self.align) * self.align

    def release(self, before_epoch: int) -> None:
        self.live = [b for b in self.live if b[2] >= before_epoch]

    def find(self, size: int, dynamic: bool) -> Optional[int]:
        if not dynamic:
            addr = self._up(self.static_top)
            if self.live:  # statics are placed before any dynamic buffer; keep the invariant anyway
                return None if addr + size > self.live[0][0] else addr
            return addr if addr + size <= self.size else None
        cursor = self._up(self.static_top)
        for start, end, _ in self.live:
            if cursor + size <= start:
                return cursor
            cursor = max(cursor, self._up(end))
        return cursor if cursor + size <= self.size else None

    def free_bytes(self) -> int:
        return self.size - self._up(self.static_top) - sum(end - start for start, end, _ in self.live)

    def take(self, addr: int, size: int, last_epoch: Optional[int]) -> None:
        if last_epoch is None:
            self.static_top = addr + size
        else:
            self.live.append((addr, addr + size, last_epoch))
            self.live.sort()


class _Allocator:
    """DRAM channels of every chip, host channels, and the channel-choice algorithms."""

    def __init__(self, device: Any, config: Any, reserved: int):
        self.device = device
        self.algorithm = DRAMPlacementAlgorithm(config.dram_placement_algorithm)
        self.channels = list(device.dram_channels)
        self.n = len(self.channels)
        self.reserved = reserved
        arch = str(getattr(getattr(device, "arch", None), "value", getattr(device, "arch", ""))).lower()
        self.align = 64 if arch.startswith("blackhole") else 32
        self.chips: Dict[int, List[_Channel]] = {}
        self.rr: Dict[Tuple[int, int], int] = {}
        self.host_next: List[int] = [0] * max(1, int(getattr(device, "host_memory_channels", 1) or 1))
        self.host_rr = 0

    def chip(self, chip: int) -> List[_Channel]:
        chans = self.chips.get(chip)
        if chans is None:
            chans = self.chips[chip] = [_Channel(self.reserved, ch.size_bytes, self.align) for ch in self.channels]
        return chans

    def release(self, before_epoch: int) -> None:
        for chans in self.chips.values():
            for ch in chans:
                ch.release(before_epoch)

    def free(self, chip: int, ch: int) -> int:
        return self.chip(chip)[ch].free_bytes()

    def _fits(self, spec: _QueueSpec, ch: int, size: int) -> bool:
        return self.chip(spec.chip)[ch].find(size, spec.lifetime is not None) is not None

    def take(self, spec: _QueueSpec, ch: int, size: int) -> int:
        chan = self.chip(spec.chip)[ch]
        addr = chan.find(size, spec.lifetime is not None)
        assert addr is not None
        chan.take(addr, size, spec.lifetime[1] if spec.lifetime is not None else None)
        return addr

    def choose(self, spec: _QueueSpec, buffer_index: int, size: int) -> Optional[int]:
        chip = spec.chip
        if spec.channel is not None:
            return spec.channel if self._fits(spec, spec.channel, size) else None
        algo = self.algorithm
        if algo == DRAMPlacementAlgorithm.GREATEST_CAPACITY:
            order = sorted(range(self.n), key=lambda c: (-self.free(chip, c), c))
            return next((c for c in order if self._fits(spec, c, size)), None)
        if algo == DRAMPlacementAlgorithm.CLOSEST and spec.anchor is not None:
            core = self._core(spec, buffer_index)
            order = sorted(range(self.n), key=lambda c: (self._distance(core, c), -self.free(chip, c), c))
            return next((c for c in order if self._fits(spec, c, size)), None)
        if algo == DRAMPlacementAlgorithm.ROUND_ROBIN_FLIP_FLOP and self.n > 1:
            half = self.n // 2
            groups = [list(range(half)), list(range(half, self.n))]
            g = spec.parity % 2
            found = self._round_robin(spec, groups[g], (chip, g), size)
            if found is None:
                found = self._round_robin(spec, groups[1 - g], (chip, 1 - g), size)
            return found
        return self._round_robin(spec, list(range(self.n)), (chip, -1), size)

    def _round_robin(self, spec: _QueueSpec, group: Sequence[int], key: Tuple[int, int], size: int) -> Optional[int]:
        start = self.rr.get(key, 0)
        for step in range(len(group)):
            pos = (start + step) % len(group)
            ch = group[pos]
            if self._fits(spec, ch, size):
                self.rr[key] = (pos + 1) % len(group)
                return ch
        return None

    def _core(self, spec: _QueueSpec, i: int) -> Tuple[int, int]:
        """The logical core that reads/writes buffer ``i`` of the queue (spread over the op's rectangle)."""
        gr, gc = spec.grid
        r, c = divmod(i, gc)
        h, w = spec.anchor.footprint
        r0, c0 = spec.anchor.grid_loc
        return (r0 + (r * h) // gr, c0 + (c * w) // gc)

    def _distance(self, core: Tuple[int, int], ch: int) -> int:
        x, y = self.device.logical_to_noc(*core)
        return min(abs(x - ex) + abs(y - ey) for ex, ey in self.channels[ch].noc_endpoints)

    def host(self, size: int) -> Tuple[int, int]:
        ch = self.host_rr % len(self.host_next)
        self.host_rr += 1
        addr = -(-self.host_next[ch] // 32) * 32
        self.host_next[ch] = addr + size
        return ch, addr


def place_queues(graph: Any, solution: Any, result: PlacerSolution, device: Any, config: Any, *,
                 io_queue_multiplier: int = 2, dram_reserved_bytes: int = DRAM_RESERVED_BYTES,
                 reuse_e2e_dram: bool = True) -> None:
    """Fill ``result.queue_placements`` for every graph queue and every e2e queue (see module doc).
    With ``reuse_e2e_dram=False`` e2e queues are allocated statically (no address sharing; their
    ``lifetime`` is still reported)."""
    alloc = _Allocator(device, config, dram_reserved_bytes)
    num_chips = len(result.chip_order)
    specs = _specs(graph, solution, result, config, device, io_queue_multiplier)
    if any(sp.kind == "input" and sp.loc == "dram" for sp in specs) and config.input_queues_on_host:
        # input_queues_on_host is on by default, and a Grayskull compile cannot honour it: that is the
        # card, not a mistake of the user's, so it is said at info level (TT-Buda's placer did the same move).
        log.info("Grayskull cannot read host memory fast: input queues are placed in device DRAM")
    lifetimes = {sp.name: sp.lifetime for sp in specs}
    if not reuse_e2e_dram:
        for sp in specs:
            sp.lifetime = None
    # Static queues first (they live for the whole program), then dynamic e2e queues in the order their
    # lifetimes start, freeing those whose last epoch has passed.
    specs.sort(key=lambda sp: (sp.lifetime is not None, sp.lifetime[0] if sp.lifetime else 0))
    for spec in specs:
        if spec.lifetime is not None:
            alloc.release(spec.lifetime[0])
        if spec.chip not in result.chip_order:
            raise CompileError(f"queue '{spec.name}': chip {spec.chip} does not exist ({num_chips} chip(s))",
                               stage=STAGE)
        if spec.channel is not None and not 0 <= spec.channel < alloc.n:
            raise CompileError(f"queue '{spec.name}': DRAM channel {spec.channel} does not exist "
                               f"({alloc.n} channels)", stage=STAGE)
        size = spec.buffer_size
        buffers = spec.grid[0] * spec.grid[1]
        dram: List[Tuple[int, int]] = []
        host: List[Tuple[int, int]] = []
        for i in range(buffers):
            if spec.loc == "host":
                host.append(alloc.host(size))
                continue
            ch = alloc.choose(spec, i, size)
            if ch is None:
                where = f"channel {spec.channel}" if spec.channel is not None else "any DRAM channel"
                raise CompileError(f"queue '{spec.name}': a {size}-byte buffer does not fit {where} of chip "
                                   f"{spec.chip} (free per channel: "
                                   f"{[alloc.free(spec.chip, c) for c in range(alloc.n)]} bytes)", stage=STAGE)
            dram.append((ch, alloc.take(spec, ch, size)))
        result.queue_placements[spec.name] = QueuePlacement(
            queue_name=spec.name, chip_id=spec.chip, loc=spec.loc, grid_size=spec.grid, dram=tuple(dram),
            host=tuple(host), entries=spec.entries, t=spec.t, mblock=spec.mblock, ublock=spec.ublock,
            ublock_order="r", df=spec.df, entry_size_bytes=spec.entry_size, buffer_size_bytes=size,
            lifetime=lifetimes[spec.name])
    # Report queues in a stable order: graph queues as declared, then e2e queues.
    order = list(graph.queues) + list(result.epoch_to_epoch_queues)
    result.queue_placements = {name: result.queue_placements[name] for name in order}
