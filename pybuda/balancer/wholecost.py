"""The whole cost of a placement, as the performance model counts it, for the balancer to compare
candidate solutions (issue #16: the balancer sees epoch switches, the binary cache, DRAM sharing and the
pipeline fill from the same numbers as :mod:`pybuda.perf`).

Per epoch (cycles per microbatch, as :class:`pybuda.perf.estimator._Estimator` charges them):

* **run**: ``fill + (microbatch - 1) · steady``; ``steady`` is the slowest op or the epoch's DRAM traffic
  over the chip's channels (all ops share them; an edge between epochs adds its queue's write and
  reads), ``fill`` the first input's way through the epoch (:mod:`pybuda.perf.fill`; what a
  microbatch of 1 pays instead of the slowest op);
* **switch**: the launch constant, every used core's kernel binaries and overlay blob, and the epoch's
  prologue parameters, read from DRAM at the chip's total bandwidth.

A program with more distinct epochs than the binary cache holds (``PerfConfig.binary_cache_slots``)
also makes the host re-write each epoch's binaries at every switch, at
``PerfConfig.host_binary_write_bytes_per_s``. One host thread also converts every microbatch's inputs
to tiles and its outputs back (``PerfConfig.host_tilize_bytes_per_s``, plus PCIe for a queue in device
DRAM: :func:`host_io_cycles`). The host works while the device runs, so the microbatch takes
``max(device, host)``; :func:`placement_cycles` returns that per input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

from pybuda.perf import cost
from pybuda.perf.config import PerfConfig
from pybuda.perf.fill import op_fill

_PERF = PerfConfig()


@dataclass(frozen=True)
class SwitchCosts:
    """The per-epoch constants of one device (cycles and bytes per cycle)."""

    launch: float  #: cycles to launch an epoch
    binary_bytes_per_core: float  #: kernel binaries + overlay blob each used core loads
    dram_total: float  #: the chip's DRAM bytes per cycle (binaries and prologue)
    host_binary_rate: float  #: bytes per AI-clock cycle the host re-writes binaries at (cache overflow)
    cache_slots: int  #: distinct epochs whose binaries stay in device DRAM
    noc_latency: float  #: cycles an op→op edge adds to the fill
    dram_latency: float  #: cycles a DRAM read adds to the fill
    dram_per_channel: float = 0.0  #: one DRAM channel's bytes per cycle
    dram_channels: int = 1  #: the chip's DRAM channels

    def queue_cycles(self, nbytes: float, buffers: int) -> float:
        """Cycles per input to move ``nbytes`` through a DRAM queue of ``buffers`` buffers: the placer
        puts them on the channels round robin, so the queue has at most that many channels."""
        channels = max(1, min(int(buffers), self.dram_channels))
        per_channel = self.dram_per_channel or self.dram_total / self.dram_channels
        return nbytes / (channels * per_channel)

    def switch_cycles(self, cores: int, prologue_bytes: float) -> float:
        """Cycles to switch to an epoch using ``cores`` cores with ``prologue_bytes`` of parameters."""
        return self.launch + (cores * self.binary_bytes_per_core + prologue_bytes) / self.dram_total

    def host_binary_cycles(self, cores: int) -> float:
        """Host cycles to re-write one epoch's binaries when the cache overflows."""
        return cores * self.binary_bytes_per_core / self.host_binary_rate


def switch_costs(device: Any, bandwidth: Optional[cost.DeviceBandwidth] = None) -> SwitchCosts:
    """The epoch-switch constants of ``device`` from the performance model's defaults."""
    bw = bandwidth or cost.device_bandwidth(device)
    clock = float(getattr(device, "aiclk_hz", 0) or 1.0e9)
    return SwitchCosts(
        launch=float(_PERF.epoch_launch_cycles),
        binary_bytes_per_core=float(_PERF.kernel_binary_bytes_per_core + _PERF.overlay_blob_bytes_per_core),
        dram_total=bw.dram_total, host_binary_rate=_PERF.host_binary_write_bytes_per_s / clock,
        cache_slots=int(_PERF.binary_cache_slots), noc_latency=float(_PERF.noc_latency_base_cycles),
        dram_latency=float(_PERF.dram_latency_cycles), dram_per_channel=bw.dram_per_channel,
        dram_channels=int(bw.dram_channels))


def host_io_cycles(graph: Any, device: Any, config: Any, microbatch: int) -> float:
    """Host cycles per microbatch to tilize ``graph``'s input queues and untilize its output queues,
    with a PCIe transfer for a queue placed in device DRAM (where the placer will put it:
    ``input_queues_on_host``/``output_queues_on_host``; Grayskull's inputs are always in DRAM)."""
    from pybuda.balancer.legalizer import input_queue_loc

    clock = float(getattr(device, "aiclk_hz", 0) or 1.0e9)
    tilize = _PERF.host_tilize_bytes_per_s / clock
    pcie = cost.device_bandwidth(device).pcie
    in_dram = input_queue_loc(config, device) == "dram"
    out_dram = not getattr(config, "output_queues_on_host", True)
    total = 0.0
    for q in getattr(graph, "queues", {}).values():
        if q.kind not in ("input", "output"):
            continue
        nbytes = q.shape.tiles * cost.tile_size_bytes(q.df) * microbatch
        dram = in_dram if q.kind == "input" else out_dram
        total += nbytes / tilize + (nbytes / pcie if dram else 0.0)
    return total


def prologue_bytes(op: Any, model: Any) -> float:
    """Bytes of ``op``'s prologue (L1-resident) parameters over all its cores: each core's slice of
    every prologue operand (a matmul's weights are held once per grid row)."""
    if not model.prologue_inputs:
        return 0.0
    fetches = cost.operand_fetches(op, model)
    return float(sum(fetches[i][0] for i in model.prologue_inputs if i < len(fetches))) * model.cores


class EpochAccumulator:
    """Running totals of one epoch as ops join it in schedule order (the fill needs producers)."""

    __slots__ = ("costs", "steady", "dram", "queues", "cores", "prologue", "fill", "_path")

    def __init__(self, costs: SwitchCosts):
        self.costs = costs
        self.steady = 0.0
        self.dram = 0.0
        self.queues = 0.0  #: cycles per input of the busiest epoch-to-epoch queue (its own channels)
        self.cores = 0
        self.prologue = 0.0
        self.fill = 0.0
        self._path: dict = {}

    def add(self, index: int, model: Any, producers: Sequence[Tuple[int, int]], prologue: float) -> None:
        """Op ``index`` joins with ``model``; ``producers`` are its producer op indices (any epoch), each
        with how many of that producer's slices its first slice reads (:func:`pybuda.perf.fill.slices_needed`)."""
        if model.cycles > self.steady:
            self.steady = float(model.cycles)
        self.dram += model.dram_bytes
        self.cores += model.cores
        self.prologue += prologue
        path = self._path
        costs = self.costs
        start = costs.dram_latency if model.dram_inputs else 0.0
        span = 0.0
        for p, needed in producers:
            at = path.get(p)
            if at is None:  # a queue written by an earlier epoch
                ready = costs.dram_latency
            else:
                ready = costs.noc_latency + (at[0] if needed == 1 else at.ready(needed))
                if at[4] > span:  # its span
                    span = at[4]
            if ready > start:
                start = ready
        times = path[index] = op_fill(start, span, model.cycles, model.t or 1)
        if times[3] > self.fill:  # its last slice
            self.fill = times[3]

    def totals(self) -> Tuple[float, float, float, int, float, float]:
        """The running totals (everything but the per-op slice times), for :meth:`restore`."""
        return (self.steady, self.dram, self.queues, self.cores, self.prologue, self.fill)

    def slice_times(self, index: int) -> Any:
        """The slice times op ``index`` got when it joined (:func:`pybuda.perf.fill.op_fill`)."""
        return self._path[index]

    def restore(self, totals: Tuple[float, float, float, int, float, float], path: dict) -> None:
        """Set the state to one :meth:`totals` returned, with ``path`` (op index → slice times) the ops
        that had joined by then: the accumulator then goes on exactly as the one those came from."""
        self.steady, self.dram, self.queues, self.cores, self.prologue, self.fill = totals
        self._path = path

    def device_cycles(self, microbatch: int) -> float:
        """Cycles of this epoch per microbatch: switch, fill and the steady state."""
        steady = self.dram / self.costs.dram_total  # conditionals, not max(): ~10^5 calls per compile
        if self.steady > steady:
            steady = self.steady
        if self.queues > steady:
            steady = self.queues
        run = (self.fill if self.fill > steady else steady) + (microbatch - 1) * steady
        return run + self.costs.switch_cycles(self.cores, self.prologue)


def placement_cycles(epochs: Sequence[EpochAccumulator], microbatch: int, host_io: float = 0.0) -> float:
    """Cycles per input of a whole placement: ``max(device, host)`` over one microbatch, the host doing
    ``host_io`` cycles of input/output conversion and, when the binary cache overflows, the binaries."""
    device = sum(e.device_cycles(microbatch) for e in epochs)
    host = host_io
    if epochs and len(epochs) > epochs[0].costs.cache_slots:
        host += sum(e.costs.host_binary_cycles(e.cores) for e in epochs)
    return max(device, host) / max(1, microbatch)


def score_solution(ops: Sequence[Any], models: Sequence[Any], epoch_of: Sequence[int],
                   producers: Sequence[Sequence[Tuple[int, int]]], costs: SwitchCosts, microbatch: int,
                   prologue: Optional[List[float]] = None, host_io: float = 0.0,
                   inputs: Optional[Sequence[Sequence[Tuple[int, int]]]] = None,
                   read_bytes: Optional[Callable[[int, int], float]] = None) -> Tuple[float, int]:
    """(cycles per input, epochs) of ``models`` (one per op, schedule order) placed in ``epoch_of``, the
    host spending ``host_io`` cycles per microbatch on inputs and outputs; ``producers`` as
    :meth:`EpochAccumulator.add` takes them.

    An edge between two epochs goes through an epoch-to-epoch queue in DRAM, on the channels the
    epochs' other DRAM traffic shares: the producer's epoch writes it once (:func:`e2e_bytes`) and
    the consumer's epoch reads it as the consumer's cores fetch that operand. The queue's own
    channels bound each epoch too (:meth:`SwitchCosts.queue_cycles`): many readers of a queue on few
    channels (a small producer grid) wait on those channels, whatever the others do. ``inputs`` lists each
    op's (producer, input index) edges and ``read_bytes(op, input index)`` the bytes one input makes
    the op read there (default: the queue once)."""
    n_epochs = (max(epoch_of) + 1) if epoch_of else 0
    epochs = [EpochAccumulator(costs) for _ in range(n_epochs)]
    traffic: dict = {}  # (epoch, producer) -> bytes per input through that producer's queue
    edges = inputs if inputs is not None else [[(p, -1) for p, _ in ps] for ps in producers]
    for i, (op, m, e) in enumerate(zip(ops, models, epoch_of)):
        pro = prologue[i] if prologue is not None else prologue_bytes(op, m)
        epochs[e].add(i, m, producers[i], pro)
        for p, k in edges[i]:
            if epoch_of[p] == e:
                continue
            nbytes = e2e_bytes(ops[p], models[p])
            read = read_bytes(i, k) if (read_bytes is not None and k >= 0) else nbytes
            traffic[(e, p)] = traffic.get((e, p), 0.0) + read
            traffic.setdefault((epoch_of[p], p), nbytes)  # written once, by the producer's epoch
    for (e, p), nbytes in traffic.items():
        acc = epochs[e]
        acc.dram += nbytes
        acc.queues = max(acc.queues, costs.queue_cycles(nbytes, models[p].cores))
    return placement_cycles(epochs, microbatch, host_io), n_epochs


def e2e_bytes(op: Any, model: Any) -> float:
    """Bytes per input of ``op``'s output in an epoch-to-epoch queue."""
    return float(model.t * model.out_rt * model.out_ct * cost.tile_size_bytes(op.out_df))


__all__ = ["SwitchCosts", "switch_costs", "host_io_cycles", "prologue_bytes", "EpochAccumulator", "placement_cycles",
           "e2e_bytes",
           "score_solution"]
