"""Placer results: where each op sits (chip, epoch, cores) and where each queue lives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from pybuda.dtypes import DataFormat


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

    def cores(self) -> List[Tuple[int, int]]:
        """Every logical core (row, col) the op occupies."""
        h, w = self.footprint
        r0, c0 = self.grid_loc
        return [(r, c) for r in range(r0, r0 + h) for c in range(c0, c0 + w)]


@dataclass
class EpochInfo:
    """One epoch: a set of ops resident on a chip at once. Epochs with the same ``temporal_epoch``
    run at the same time on different chips (``spatial_epoch`` is the chip's position in the chip
    order, always 0 on one chip)."""

    global_epoch: int
    temporal_epoch: int
    chip_id: int
    epoch_type: str = "fwd"  # fwd | bwd | opt
    ops: List[str] = field(default_factory=list)
    spatial_epoch: int = 0


@dataclass(frozen=True)
class QueuePlacement:
    """Where a queue's buffers live: on the host or in DRAM channels (one (channel, addr) per buffer).

    The queue holds ``grid_size[0]·grid_size[1]`` buffers, listed row-major in ``dram``/``host``; each
    buffer is ``32 + entries·entry_size_bytes`` bytes (32-byte header; spec §1.2) and holds, per entry,
    ``t`` macro-blocks of ``mblock × ublock`` tiles in ``df``. The blocking fields are the layout the
    placer sized the buffers with; the netlist emitter writes them as the queue's
    ``grid_size``/``t``/``mblock``/``ublock``/``ublock_order``/``df``/``entries``.
    """

    queue_name: str
    chip_id: int
    loc: str  # "dram" | "host"
    grid_size: Tuple[int, int] = (1, 1)
    dram: Tuple[Tuple[int, int], ...] = ()  # ((channel, address), ...), row-major over the grid
    host: Tuple[Tuple[int, int], ...] = ()  # ((channel, address), ...)
    entries: int = 1
    t: int = 1
    mblock: Tuple[int, int] = (1, 1)
    ublock: Tuple[int, int] = (1, 1)
    ublock_order: str = "r"
    df: DataFormat = DataFormat.Float16_b
    entry_size_bytes: int = 0
    buffer_size_bytes: int = 0  # 32-byte header + entries · entry_size_bytes
    #: Temporal epochs (first, last) a dynamic queue (e2e) is live; it may share DRAM with queues whose
    #: lifetimes do not overlap. None = static, live for the whole program.
    lifetime: Optional[Tuple[int, int]] = None

    @property
    def buffers(self) -> int:
        return self.grid_size[0] * self.grid_size[1]


@dataclass(frozen=True)
class EpochToEpochQueue:
    """A DRAM queue carrying an op's output to consumers placed in later epochs (or on other chips).

    Named ``e2e_<producer>_<k>`` (k = 0, 1, … per producer, one queue per consumer chip). The netlist
    emitter declares it with ``input: <producer>``, ``type: queue`` and the blocking of its
    :class:`QueuePlacement` (the producer's grid, t, mblock, ublock and out_df — a t-streamed producer
    writes its streamed layout), and in each listed consumer replaces the input named ``producer``
    by this queue (:meth:`PlacerSolution.input_source`). ``entries`` is the microbatch size: the
    producer's epoch runs the whole microbatch before the consumers' epoch reads it.
    """

    name: str
    producer: str
    consumers: Tuple[str, ...]
    chip_id: int
    producer_epoch: int
    consumer_epochs: Tuple[int, ...]
    entries: int = 1


@dataclass
class PlacerSolution:
    """All op placements, epochs in execution order, and queue placements.

    ``epoch_to_epoch_queues`` lists the names of the e2e queues in creation order; ``e2e_queues``
    describes each (producer, consumers, chip, epochs); both are also in ``queue_placements``.
    """

    op_placements: Dict[str, OpPlacement] = field(default_factory=dict)
    epochs: List[EpochInfo] = field(default_factory=list)
    queue_placements: Dict[str, QueuePlacement] = field(default_factory=dict)
    epoch_to_epoch_queues: List[str] = field(default_factory=list)
    e2e_queues: Dict[str, EpochToEpochQueue] = field(default_factory=dict)
    chip_order: Tuple[int, ...] = (0,)
    # (consumer, producer) -> e2e queue name; filled by the placer for input_source().
    _e2e_inputs: Dict[Tuple[str, str], str] = field(default_factory=dict, repr=False)

    def epoch_of(self, op_name: str) -> int:
        return self.op_placements[op_name].global_epoch

    def ops_in_epoch(self, global_epoch: int) -> List[str]:
        return self.epochs[global_epoch].ops

    def input_source(self, consumer: str, producer: str) -> str:
        """What ``consumer`` reads in place of its input ``producer``: the e2e queue name when they
        sit in different epochs, else ``producer`` itself."""
        return self._e2e_inputs.get((consumer, producer), producer)

    @property
    def num_temporal_epochs(self) -> int:
        return (max(e.temporal_epoch for e in self.epochs) + 1) if self.epochs else 0

    def chip_of(self, op_name: str) -> Optional[int]:
        p = self.op_placements.get(op_name)
        return p.chip_id if p is not None else None
