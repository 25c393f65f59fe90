"""Op placement: ops in schedule order onto chips, epochs and worker-grid rectangles (spec §4.5).

Each op is placed on the current epoch's grid with the first-fit row-major packer of
:mod:`pybuda.balancer.packing` (left to right, wrapping rows; rectangles never overlap; the harvested
grid's rows and columns). A new epoch opens when

* the op does not fit (capacity): on a multi-chip system the next chip of the same temporal epoch
  (pipelining), after the last chip a new temporal epoch on the first chip;
* the op is in ``op_names_to_epoch_break`` (``set_epoch_break``), has a ``temporal_epoch_break``
  placer override, or its epoch type (fwd/bwd/opt) differs from the previous op's: a new temporal
  epoch on the first chip;
* the op is in ``op_names_to_chip_break`` (``set_chip_break``) or has a ``spatial_epoch_break``
  override: the next chip (a new temporal epoch after the last);
* the op has a ``chip_id`` placer override for a chip that is not current: that chip, later in the
  same temporal epoch if it comes after the current chip in the chip order, else in a new one;
* the balancer asks for it (``BalancerSolution.epoch_breaks``: Ribbon's committed epochs,
  SingleOpPerEpoch): like a capacity break.

Chip order (``chip_placement_policy``): ``MMIO_LAST`` lists the chips without a host link first and
chip 0 (the MMIO chip) last; ``SNAKE`` (and anything else) takes chip ids in order.
Placer overrides ``start`` (pin the top-left core) and ``transpose_op`` are honoured; with
``enable_auto_transposing_placement`` an op is placed transposed when that fits earlier.

Epoch-to-epoch queues are then created for every op→op edge whose ends are in different epochs, and
:func:`pybuda.placer.dram.place_queues` places every queue.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from pybuda.errors import CompileError
from pybuda.placer.dram import DRAM_RESERVED_BYTES, place_queues
from pybuda.balancer.packing import GridPacker, fits_empty
from pybuda.placer.types import EpochInfo, EpochToEpochQueue, OpPlacement, PlacerSolution

log = logging.getLogger(__name__)

STAGE = "BALANCER_PASS"


def break_names(graph: Any, entries: Any) -> set:
    """The ops a config's break list (``op_names_to_epoch_break`` / ``op_names_to_chip_break``) breaks at: a name
    breaks at itself, a list at the first of its ops in schedule order, a ``pybuda.query`` predicate at every
    op it matches. (A compile has already resolved them to lowered op names: ``passes.lowered.overrides``.)"""
    from pybuda.query import NodePredicateBuilder

    order = {n: i for i, n in enumerate(graph.ops)}
    out: set = set()
    for entry in entries or ():
        if isinstance(entry, str):
            out.add(entry)
        elif isinstance(entry, NodePredicateBuilder):
            out.update(o.name for o in graph.ops.values()
                       if entry.matches(o.name, o.type, o.tags.get("ir_node"), o.tags.get("ir_op_type")))
        else:
            members = set(break_names(graph, list(entry))) & set(order)
            if members:
                out.add(min(members, key=lambda n: order[n]))
    return out


def chip_order(num_chips: int, policy: str) -> Tuple[int, ...]:
    """The order chips are filled in: MMIO_LAST puts chip 0 (the host-attached chip) last."""
    chips = tuple(range(max(1, num_chips)))
    if str(policy).upper() == "MMIO_LAST" and len(chips) > 1:
        return chips[1:] + chips[:1]
    return chips


class _EpochCursor:
    """The (temporal epoch, chip position) being filled, its packer and the epochs created so far."""

    def __init__(self, rows: int, cols: int, order: Tuple[int, ...]):
        self.rows, self.cols = rows, cols
        self.order = order
        self.temporal = 0
        self.pos = 0
        self.packer = GridPacker(rows, cols)
        self.epochs: List[EpochInfo] = []
        self.current: Optional[EpochInfo] = None
        self.temporal_used = False

    @property
    def chip(self) -> int:
        return self.order[self.pos]

    def _fresh(self) -> None:
        self.packer = GridPacker(self.rows, self.cols)
        self.current = None

    def new_temporal(self, pos: int = 0) -> None:
        """Start the next temporal epoch (unless the current one is still empty) on chip ``pos``."""
        if self.temporal_used:
            self.temporal += 1
            self.temporal_used = False
        self.pos = pos
        self._fresh()

    def next_chip(self) -> None:
        if self.pos + 1 < len(self.order):
            self.pos += 1
            self._fresh()
        else:
            self.new_temporal(0)

    def goto_chip(self, pos: int) -> None:
        if pos == self.pos:
            return
        if pos > self.pos:
            self.pos = pos
            self._fresh()
        else:
            self.new_temporal(pos)

    def epoch_for(self, epoch_type: str) -> EpochInfo:
        if self.current is None:
            self.current = EpochInfo(global_epoch=len(self.epochs), temporal_epoch=self.temporal, chip_id=self.chip,
                                     epoch_type=epoch_type, spatial_epoch=self.pos)
            self.epochs.append(self.current)
            self.temporal_used = True
        return self.current


def place(graph: Any, solution: Any, device: Any, config: Any, *, io_queue_multiplier: int = 2,
          dram_reserved_bytes: int = DRAM_RESERVED_BYTES, reuse_e2e_dram: bool = True) -> PlacerSolution:
    """Place every op of ``graph`` (schedule order) with the grids of ``solution`` (a
    BalancerSolution) on ``device``, create epoch-to-epoch queues and place all queues.

    ``io_queue_multiplier``: input/output queue entries = microbatch × this (TT-Buda uses 2 on silicon).
    ``dram_reserved_bytes``: bytes at the bottom of every DRAM channel left to the backend.
    ``reuse_e2e_dram``: let e2e queues with disjoint lifetimes share DRAM (the program must then
    allocate/deallocate them; see :mod:`pybuda.placer.dram`).
    Raises CompileError (stage BALANCER_PASS) when an op cannot be placed or queues do not fit DRAM."""
    rows, cols = device.grid_rows, device.grid_cols
    num_chips = max(1, int(getattr(config, "num_chips", 1) or 1))
    if num_chips > getattr(device, "chip_count", num_chips):
        log.warning("config.num_chips=%d exceeds the device's %d chip(s)", num_chips, device.chip_count)
    order = chip_order(num_chips, getattr(config, "chip_placement_policy", "MMIO_LAST"))
    cursor = _EpochCursor(rows, cols, order)
    result = PlacerSolution(chip_order=order)
    epoch_breaks = break_names(graph, config.op_names_to_epoch_break)
    chip_breaks = break_names(graph, config.op_names_to_chip_break)
    balancer_breaks = set(getattr(solution, "epoch_breaks", ()) or ())
    overrides = config.placer_op_overrides
    auto_transpose = bool(config.enable_auto_transposing_placement)
    prev_type: Optional[str] = None

    for op in graph.ops.values():
        model = solution.op_models.get(op.name)
        if model is None:
            raise CompileError("the balancer chose no op model for this op", stage=STAGE, op=op.name)
        h, w = model.grid_shape
        ov = overrides.get(op.name)
        start = tuple(ov.start) if ov is not None and ov.start else None
        transpose: Optional[bool] = True if ov is not None and ov.transpose_op else (None if auto_transpose else False)
        if not fits_empty(rows, cols, h, w, transpose):
            raise CompileError(f"grid {h}x{w}{' transposed' if transpose else ''} does not fit the device's "
                               f"{rows}x{cols} worker grid", stage=STAGE, op=op.name)
        if start is not None:
            fh, fw = (w, h) if transpose else (h, w)
            if start[0] < 0 or start[1] < 0 or start[0] + fh > rows or start[1] + fw > cols:
                raise CompileError(f"placer override start={start} puts the {fh}x{fw} op outside the {rows}x{cols} "
                                   f"worker grid", stage=STAGE, op=op.name)
        started = cursor.current is not None
        # Breaks, strongest first.
        if ov is not None and ov.chip_id is not None:
            if ov.chip_id not in order:
                raise CompileError(f"placer override chip_id={ov.chip_id}: there are only {num_chips} chip(s)",
                                   stage=STAGE, op=op.name)
        if started and (op.name in epoch_breaks or (ov is not None and ov.temporal_epoch_break)
                        or (prev_type is not None and op.epoch_type != prev_type)):
            cursor.new_temporal(0)
        elif started and (op.name in chip_breaks or (ov is not None and ov.spatial_epoch_break)):
            cursor.next_chip()
        elif started and op.name in balancer_breaks:
            _capacity_break(cursor)
        if ov is not None and ov.chip_id is not None:
            cursor.goto_chip(order.index(ov.chip_id))
        spot = cursor.packer.place(h, w, start=start, transpose=transpose)
        if spot is None:
            if ov is not None and ov.chip_id is not None:
                cursor.new_temporal(order.index(ov.chip_id))
            else:
                _capacity_break(cursor)
            spot = cursor.packer.place(h, w, start=start, transpose=transpose)
            if spot is None:  # fits_empty and the start check make this unreachable
                raise CompileError(f"cannot place the {h}x{w} op on an empty grid", stage=STAGE, op=op.name)
        epoch = cursor.epoch_for(op.epoch_type)
        epoch.ops.append(op.name)
        result.op_placements[op.name] = OpPlacement(op.name, epoch.chip_id, epoch.global_epoch, (spot[0], spot[1]),
                                                    (h, w), spot[2])
        prev_type = op.epoch_type

    result.epochs = cursor.epochs
    _make_e2e_queues(graph, result)
    _check_manual_queue_names(graph, result, config)
    place_queues(graph, solution, result, device, config, io_queue_multiplier=io_queue_multiplier,
                 dram_reserved_bytes=dram_reserved_bytes, reuse_e2e_dram=reuse_e2e_dram)
    return result


def _check_manual_queue_names(graph: Any, result: PlacerSolution, config: Any) -> None:
    """``override_dram_queue_placement`` on a queue the placed graph does not have is a ConfigError."""
    import difflib

    from pybuda.errors import ConfigError

    known = set(graph.queues) | set(result.e2e_queues)
    for name in getattr(config, "manual_dram_queue_placement", {}) or {}:
        if name not in known:
            close = difflib.get_close_matches(str(name), sorted(known), n=5, cutoff=0.6)
            raise ConfigError(f"override_dram_queue_placement: graph '{getattr(graph, 'name', '')}' has no queue "
                              f"named '{name}'" + (f"; close matches: {close}" if close else
                                                  f"; its queues: {sorted(known)[:12]}"))


def _capacity_break(cursor: _EpochCursor) -> None:
    if len(cursor.order) > 1:
        cursor.next_chip()
    else:
        cursor.new_temporal(0)


def _make_e2e_queues(graph: Any, result: PlacerSolution) -> None:
    """One DRAM queue per (producer, consumer chip) for op→op edges that cross epochs."""
    placements = result.op_placements
    crossing: Dict[str, Dict[int, List[str]]] = {}
    for consumer in graph.ops.values():
        cp = placements[consumer.name]
        for name in dict.fromkeys(consumer.inputs):  # an op read twice still needs one queue
            pp = placements.get(name)
            if pp is None or pp.global_epoch == cp.global_epoch:
                continue
            if cp.global_epoch < pp.global_epoch:
                raise CompileError(f"consumer placed in epoch {cp.global_epoch} before its producer '{name}' "
                                   f"(epoch {pp.global_epoch})", stage=STAGE, op=consumer.name)
            crossing.setdefault(name, {}).setdefault(cp.chip_id, []).append(consumer.name)
    microbatch = max(1, int(getattr(graph, "microbatch", 1) or 1))
    for producer in graph.ops:
        groups = crossing.get(producer)
        if not groups:
            continue
        for k, (chip, consumers) in enumerate(groups.items()):
            name = _unique(graph, f"e2e_{producer}_{k}", result)
            q = EpochToEpochQueue(name=name, producer=producer, consumers=tuple(consumers), chip_id=chip,
                                  producer_epoch=placements[producer].global_epoch,
                                  consumer_epochs=tuple(sorted({placements[c].global_epoch for c in consumers})),
                                  entries=microbatch)
            result.e2e_queues[name] = q
            result.epoch_to_epoch_queues.append(name)
            for c in consumers:
                result._e2e_inputs[(c, producer)] = name


def _unique(graph: Any, name: str, result: PlacerSolution) -> str:
    base, n = name, 0
    while name in graph.ops or name in graph.queues or name in result.e2e_queues:
        n += 1
        name = f"{base}_{n}"
    return name
