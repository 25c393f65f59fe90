"""Placer results: where each op sits (chip, epoch, cores) and where each queue lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class OpPlacement:
    """An op's rectangle of worker cores in one epoch. ``grid_loc`` is the top-left logical core;
    ``grid_size`` is the op's grid (rows, cols); with ``transposed`` the rectangle occupies
    (cols, rows) cores on the chip while the tensor blocking is unchanged."""

    op_name: str
    chip_id: int
    global_epoch: int
    grid_loc: Tuple[int, int]
    grid_size: Tuple[int, int]
    transposed: bool = False

    @property
    def footprint(self) -> Tuple[int, int]:
        """(rows, cols) of cores actually occupied on the chip."""
        r, c = self.grid_size
        return (c, r) if self.transposed else (r, c)


@dataclass
class EpochInfo:
    """One epoch: a set of ops resident on a chip at once."""

    global_epoch: int
    temporal_epoch: int
    chip_id: int
    epoch_type: str = "fwd"  # fwd | bwd | opt
    ops: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class QueuePlacement:
    """Where a queue's buffers live: on the host or in DRAM channels (one (channel, addr) per buffer)."""

    queue_name: str
    chip_id: int
    loc: str  # "dram" | "host"
    grid_size: Tuple[int, int] = (1, 1)
    dram: Tuple[Tuple[int, int], ...] = ()  # ((channel, address), ...), row-major over the grid
    host: Tuple[Tuple[int, int], ...] = ()  # ((channel, address), ...)


@dataclass
class PlacerSolution:
    """All op placements, epochs in execution order, and queue placements."""

    op_placements: Dict[str, OpPlacement] = field(default_factory=dict)
    epochs: List[EpochInfo] = field(default_factory=list)
    queue_placements: Dict[str, QueuePlacement] = field(default_factory=dict)
    epoch_to_epoch_queues: List[str] = field(default_factory=list)

    def epoch_of(self, op_name: str) -> int:
        return self.op_placements[op_name].global_epoch

    def ops_in_epoch(self, global_epoch: int) -> List[str]:
        return self.epochs[global_epoch].ops
