"""The performance model's results: :class:`OpPerf` (one op), :class:`EpochPerf` (one temporal epoch)
and :class:`PerfReport` (a whole netlist on a device), with their summaries and plain-data forms."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from pybuda.perf.config import PerfConfig
from pybuda.errors import ConfigError

__all__ = ["OpPerf", "EpochPerf", "PerfReport"]


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------

@dataclass
class OpPerf:
    """One op's modelled cycles per input (one sample of the microbatch) and where it sits.

    ``cycles`` is the largest of the kernel and the data-movement bounds; ``bound`` names which.
    ``core_utilization`` is the fraction of the epoch's steady-state interval its cores are busy
    (1.0 for the bottleneck op); ``math_utilization`` is ideal matmul cycles / ``cycles``.
    """

    name: str
    type: str
    op_class: str
    graph: str
    epoch: int
    chip: int
    grid_loc: Optional[Tuple[int, int]]
    grid_size: Tuple[int, int]
    grid_transpose: bool
    cores: int
    t: int
    mblock: Tuple[int, int]
    ublock: Tuple[int, int]
    m_k: int
    u_kt: int
    math_fidelity: str
    out_df: str
    kernel_cycles: int
    noc_cycles: int
    dram_cycles: int
    pcie_cycles: int
    eth_cycles: int
    cycles: int
    bound: str
    ideal_math_cycles: int
    flops_per_input: float
    latency_cycles: int = 0
    core_utilization: float = 0.0
    math_utilization: float = 0.0
    bottleneck: bool = False
    #: Interval (cycles per input) the worst fork/join loop starting at this op imposes when it bounds
    #: the epoch (see ``_Estimator._fork_join``), and the join op of that loop.
    fork_join_cycles: int = 0
    fork_join_with: Optional[str] = None

    @property
    def footprint(self) -> Tuple[int, int]:
        """(rows, cols) of cores occupied on the chip (grid_size swapped under grid_transpose)."""
        r, c = self.grid_size
        return (c, r) if self.grid_transpose else (r, c)

    def core_list(self) -> List[Tuple[int, int]]:
        """Logical (row, col) of every core the op occupies."""
        if self.grid_loc is None:
            return []
        h, w = self.footprint
        r0, c0 = self.grid_loc
        return [(r, c) for r in range(r0, r0 + h) for c in range(c0, c0 + w)]

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["grid_loc"] = list(self.grid_loc) if self.grid_loc is not None else None
        for key in ("grid_size", "mblock", "ublock"):
            d[key] = list(d[key])
        return d


@dataclass
class EpochPerf:
    """One temporal epoch as executed once per program iteration (one microbatch).

    ``steady_cycles`` is the per-input interval (the slowest op or shared link); ``fill_cycles`` the
    latency of the first input; ``switch_cycles`` the cost of loading the epoch (only the launch when
    the chips already hold it); ``total_cycles`` = switch + fill + (input_count − 1) · steady. An epoch
    that a program iteration executes several times appears once per execution.
    """

    index: int
    graphs: List[str]
    chips: List[int]
    input_count: int
    ops: List[str]
    steady_cycles: int
    fill_cycles: int
    switch_cycles: int
    total_cycles: int
    bottleneck_op: Optional[str]
    bottleneck_bound: str
    cores_used: int
    cores_available: int
    core_utilization: float
    math_utilization: float
    switch_breakdown: Dict[str, float] = field(default_factory=dict)
    dram_channel_cycles: Dict[str, int] = field(default_factory=dict)
    #: Cycles per input each DRAM NoC endpoint spends on the epoch's reads or writes (Wormhole: 3 endpoints
    #: per channel), keyed ``chip:channel.port:r`` / ``…:w`` (see ``PerfConfig.dram_read_endpoint_bytes_per_cycle``).
    dram_endpoint_cycles: Dict[str, int] = field(default_factory=dict)
    pcie_cycles_per_input: int = 0
    prologue_bytes: int = 0
    #: Kernel binaries and overlay blobs the switch loaded from DRAM (0 when nothing was reloaded).
    binary_bytes: int = 0
    #: Of those, the bytes the host must re-send over PCIe each microbatch (binary cache overflow).
    host_binary_bytes: int = 0

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class PerfReport:
    """Modelled performance of one netlist on one device.

    Throughput is the steady state over many microbatches: ``samples_per_sec`` = microbatch /
    ``seconds_per_microbatch``. ``latency_s`` is one microbatch from its first input pushed by the host
    to its last output back on the host (device time plus the host work that does not overlap it), with
    the chips warm (cold-start loading of the first epoch's binaries is not included).
    :meth:`samples_per_sec_for` gives what a host-timed run of N microbatches would see.
    """

    device: str
    arch: str
    clock_hz: float
    chips: int
    cores_per_chip: int
    microbatch: int
    program: str
    ops: List[OpPerf]
    epochs: List[EpochPerf]
    device_cycles_per_microbatch: int
    host_input_cycles_per_microbatch: int
    host_output_cycles_per_microbatch: int
    host_overlapped: bool
    #: Host PCIe time re-sending kernel binaries per microbatch (binary cache overflow; overlaps the device).
    host_binary_cycles_per_microbatch: int
    cycles_per_microbatch: int
    seconds_per_microbatch: float
    samples_per_sec: float
    latency_s: float
    math_utilization: float
    core_utilization: float
    flops_per_sample: float
    #: (rows, cols) of one chip's logical worker grid, for drawing placements.
    grid_size: Tuple[int, int] = (0, 0)
    config: PerfConfig = field(default_factory=PerfConfig)

    # -- summaries ------------------------------------------------------------------------------
    @property
    def num_epochs(self) -> int:
        """Temporal epochs per microbatch."""
        return len(self.epochs)

    @property
    def tflops(self) -> float:
        """Achieved matmul TFLOP/s at the modelled throughput."""
        return self.flops_per_sample * self.samples_per_sec / 1e12

    @property
    def bottleneck(self) -> Optional[OpPerf]:
        """The bottleneck op of the epoch that takes the most time."""
        if not self.epochs:
            return None
        worst = max(self.epochs, key=lambda e: e.total_cycles)
        return self.op(worst.bottleneck_op) if worst.bottleneck_op else None

    @property
    def limited_by(self) -> str:
        """What sets the time per microbatch: ``device`` (the epochs), ``host binaries`` (re-sending
        kernel binaries when the epochs overflow the binary cache) or ``host io`` (tilizing and moving
        inputs and outputs)."""
        host_io = self.host_input_cycles_per_microbatch + self.host_output_cycles_per_microbatch
        host = host_io + self.host_binary_cycles_per_microbatch
        if not self.host_overlapped or host <= self.device_cycles_per_microbatch:
            return "device"
        return "host binaries" if self.host_binary_cycles_per_microbatch >= host_io else "host io"

    def op(self, name: str) -> OpPerf:
        """The row of op ``name`` (KeyError if absent)."""
        for row in self.ops:
            if row.name == name:
                return row
        raise KeyError(name)

    def samples_per_sec_for(self, loop_count: int) -> float:
        """Throughput a host-timed run of ``loop_count`` microbatches would see, as TT-Buda's
        benchmark.py measured it: the first microbatch's full latency, then the steady state."""
        if loop_count < 1:
            raise ConfigError(f"loop_count must be >= 1, got {loop_count}")
        seconds = self.latency_s + (loop_count - 1) * self.seconds_per_microbatch
        return loop_count * self.microbatch / seconds if seconds > 0 else float("inf")

    def to_dict(self) -> Dict[str, Any]:
        """Everything as JSON-ready plain data."""
        return {
            "device": self.device, "arch": self.arch, "clock_hz": self.clock_hz, "chips": self.chips,
            "cores_per_chip": self.cores_per_chip, "grid_size": list(self.grid_size),
            "microbatch": self.microbatch, "program": self.program,
            "epochs": len(self.epochs),
            "device_cycles_per_microbatch": self.device_cycles_per_microbatch,
            "host_input_cycles_per_microbatch": self.host_input_cycles_per_microbatch,
            "host_output_cycles_per_microbatch": self.host_output_cycles_per_microbatch,
            "host_overlapped": self.host_overlapped,
            "host_binary_cycles_per_microbatch": self.host_binary_cycles_per_microbatch,
            "cycles_per_microbatch": self.cycles_per_microbatch,
            "seconds_per_microbatch": self.seconds_per_microbatch,
            "samples_per_sec": self.samples_per_sec, "latency_s": self.latency_s,
            "math_utilization": self.math_utilization, "core_utilization": self.core_utilization,
            "flops_per_sample": self.flops_per_sample, "tflops": self.tflops, "limited_by": self.limited_by,
            "config": self.config.to_dict(),
            "epoch_table": [e.to_dict() for e in self.epochs],
            "op_table": [o.to_dict() for o in self.ops],
        }

    def summary(self, max_epochs: int = 12) -> str:
        """A few human-readable lines: throughput, latency, and the (at most ``max_epochs`` slowest)
        epochs with their bottlenecks."""
        lines = [
            f"{self.device} ({self.arch}, {self.chips} chip(s) x {self.cores_per_chip} cores at "
            f"{self.clock_hz / 1e9:.2f} GHz), microbatch {self.microbatch}:",
            f"  {self.samples_per_sec:,.1f} samples/s, latency {self.latency_s * 1e3:.2f} ms per microbatch, "
            f"{len(self.epochs)} epoch(s), math utilisation {self.math_utilization:.1%}, "
            f"{self.tflops:.1f} TFLOP/s, limited by the {self.limited_by}",
        ]
        shown = self.epochs
        if len(shown) > max_epochs:
            # the slowest epochs are the ones worth reading
            shown = sorted(sorted(self.epochs, key=lambda e: -e.total_cycles)[:max_epochs], key=lambda e: e.index)
            lines.append(f"  (the {max_epochs} slowest of {len(self.epochs)} epochs)")
        for e in shown:
            lines.append(
                f"  epoch {e.index}: {e.total_cycles:,} cycles (steady {e.steady_cycles:,}/input, fill "
                f"{e.fill_cycles:,}, switch {e.switch_cycles:,}), bottleneck {e.bottleneck_op} "
                f"({e.bottleneck_bound}), {e.cores_used}/{e.cores_available} cores")
        return "\n".join(lines)
