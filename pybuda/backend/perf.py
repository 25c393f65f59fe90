"""The performance model: how fast a placed netlist would run on the real card.

:func:`estimate` reads a :class:`~pybuda.netlist.Netlist` (nothing else: the netlist is the contract,
as in TT-Buda) and a :class:`~pybuda.arch.DeviceDescriptor`, and returns a :class:`PerfReport` with
cycles per op, per epoch and per microbatch, samples per second, latency, the bottleneck of every epoch
and core/math utilisation.

The model is mechanistic: the same parameters (:class:`PerfConfig`) for every model and card.

1. **Per op** (cycles per core per input, i.e. per sample of the microbatch): kernel cycles and the
   op's own data-movement bounds come from :mod:`pybuda.backend.cost` (the single source of truth, the
   balancer uses the same numbers): NoC pipes from producer ops, DRAM queues, host queues over PCIe.
   Sparse matmuls are costed by their real tile products (``indices_len``), in cost.py too.
2. **Shared links, per epoch.** Every DRAM channel serves all readers and writers of the queues placed
   on it in that epoch, so in steady state a channel must move its bytes of one input within one input
   interval: ``bytes_on_channel / channel_bw`` bounds every op that touches it. A matmul fetches in0
   once per grid row and in1 once per grid column (NoC multicast); other operands once per core.
   PCIe is shared by all host-queue traffic of the card, Ethernet by all traffic between a pair of chips.
3. **Epoch** (one ``execute``; chips of one temporal epoch run concurrently as one pipeline): steady
   state = the slowest op (or link); one execution takes ``fill + (input_count − 1) · steady`` where
   ``fill`` is the pipeline latency of the first input along the longest producer→consumer path.
4. **Epoch switch**, paid before an execute whenever the chip ran a different graph just before:
   launch constant + every used core's kernel binaries and overlay blob + the prologue parameters of
   the epoch, all read from DRAM (per channel and per chip). Running the same graph again back to back
   reloads nothing, since L1 still holds it. When a chip runs more distinct epochs than the per-core
   binary cache has slots (32), the host re-sends every switch's binaries over PCIe each microbatch,
   ahead of the device (it may run up to 32 epochs ahead), so that is host work, not switch time.
5. **Program**: one iteration of the program's microbatch loop runs every execute in order. The host
   tilizes inputs and untilizes outputs, and moves the DRAM-resident ones over PCIe; it works ahead of
   the device when the input queue holds two microbatches (``entries ≥ 2·input_count``), otherwise
   its input and output work adds to the device time.

Every constant is a field of :class:`PerfConfig` with its source. Facts: netlist_backend_spec §5.4,
§6 and perf_calibration §2.

Calibration mechanisms (perf_calibration §1; the same parameters for every model and card):

* **Sparse matmuls cost their index, not K** (cost.py ``_sparse_matmul_cycles``): one tile product per
  ``indices_len`` entry and output column, split over the grid rows; the former stopgap module
  ``perf_kernels`` is gone, so the balancer and this model read one formula.
* **Shared sources are split among distinct fetches** (cost.py ``distinct_fetchers``): a matmul
  operand is fetched once per grid row/column and multicast, so the per-op DRAM/PCIe bound of a tall
  sparse-matmul grid no longer charges every core the whole activation. This was a balancer-visible
  error too: it kept ResNet-50's stem im2col on 4 cores (451k cycles/image, −42 % on n150).
* **Large streamed DRAM queues are spread over the channels** (placer/dram.py ``_spread_grid``; a
  compiler change, not a model constant). Evidence: the per-channel accounting below showed ResNet-50
  e150 epoch 0 bound at 946k cycles/image by one GS channel holding the 3.3 MB/image input queue
  (grid [1,1]) and the stem im2col's 805 KB index table re-read by each of its 8 core rows; TT-Buda's
  placer gives input queues a grid of buffers over the channels. Device-side inputs, e2e queues and
  streamed (non-prologue) constants with an entry ≥ 256 KiB now get up to one buffer per channel, and
  ``_spread`` charges each buffer's channel its share. ResNet-50 e150 652 → ~876 img/s (epoch 0 now
  kernel-bound on the stem sparse matmul); BERT-Large e150 111 → ~145 sen/s — its former +12 % match
  was an artefact of the single-channel 384×1024 input queue, so BERT-Large is now ~1.5–1.6× fast on
  *both* cards: the missing mechanism is BERT-specific.
* **Sparse matmul tables stay in L1** (legalizer + netlist validator, ``sparse_table_tiles_per_core``):
  a picker's unique tiles and its grid row's share of the index are prologue, as in TT-Buda. The
  validator used to size them as ``t`` output mblocks, so the ResNet stem's 161 KB index (49 taps) did
  not fit and was re-read from DRAM for every image (6.4 MB/image on GS). ResNet-50 n150 −21 % → −9 %.
* **Compiler changes TT-Buda had** (not model constants): host-side convolution *prestride*
  (``enable_conv_prestride``, passes/prestride.py: the stem's 49 taps become 16) and no −inf padding
  mask for a max-pool that reads a relu's output (zero padding is exact there).
* **Binary re-sends run at the host's write rate** (``host_binary_write_bytes_per_s``). A chip that
  runs more distinct epochs than the binary cache holds makes the host rewrite every epoch's binaries
  each microbatch; the runtime writes them core by core through PCIe TLB windows, ~1.2 GB/s, not at
  the 24 GB/s DMA rate. Both BERT-Large placements (49 epochs on e150, 74 on n150; the device alone
  would give 145 and 192 sen/s) become host-bound at 120 sen/s (+21 %, +2 %); ResNet-50 (3 epochs)
  is untouched. The rate is the one derived constant fitted here (see its field).
* Checked and small for BERT (model numbers, microbatch 64): epoch switches (launch + binaries +
  prologue at measured DRAM rates) are 3 % of device time, pipeline fill 4 %; host tilize/PCIe of the
  inputs/outputs overlaps the device; DRAM channels use the measured per-channel rate (spec §5.4).
* **Fork/join stalls and gather pipes** are implemented but *off by default* (``PerfConfig.fork_join_stalls``,
  ``PerfConfig.gather_pipes``), because neither, as the spec states it, moves all four calibration
  points the right way with one parameter set:

  - *Fork/join* (NBS §6.4: ops pipeline over macro-blocks, a consumer frees producer space only after
    math on the block): ``_fork_join`` treats each fork P → … → join J as a marked-graph loop whose
    tokens are the short path's buffers (P's ``buf_size_mb``, J's input buffer, intermediate ops'
    output buffers, in inputs: ``buf_size_mb / t``) and whose latency is every op on the loop at its
    per-mblock time ``cycles / t``; the interval per input is at least latency / tokens. With the
    netlists our compiler emits (no fork/join buffering nops or e2e queues, ``buf_size_mb`` 1–2)
    it bounds BERT's LayerNorm (sub_mean → square → var → sqrt → recip → scale) and softmax
    (exp → sum → recip → out) epochs: BERT-L n150 192 → 175 sen/s, but e150 145 → 53 (−47 %), and
    ResNet-50 residual blocks (t = 1, whole-tensor mblocks, ``buf_size_mb`` 1) collapse
    (e150 886 → 254, n150 2269 → 1115). Macro-block granularity is far too coarse for t = 1 ops whose
    consumers stream row strips, and TT-Buda's balancer buffered ResNet's fork/joins; modelling this
    properly needs the compiler's fork/join buffering pass (raise the short path's ``buf_size_mb`` /
    insert buffering nops while L1 allows, else an e2e queue) plus a row-strip granularity — not done.
  - *Gather pipes* (NBS §6.3: ~28 GB/s for a one-source pipe, ~16 down to ~10 GB/s when a consumer
    core gathers from many producer cores; ``_gather_sources`` counts the producer cores per consumer
    core from the two grids, matmul strips, reduces, broadcasts and transposes) instead of cost.py's
    flat 16 B/cycle: BERT-L e150 145 → 126 (+27 %), n150 192 → 184 (+55 %), but ResNet-50 n150
    2269 → 2062 (−29 %, fails) and e150 886 → 827, because the balancer (which still costs pipes at
    cost.py's flat rate) leaves ResNet's max-pool im2col on 2 cores gathering a 112×112×64 activation.
    Turning it on needs the producer grid in cost.py's ``BandwidthContext`` so the balancer sees the
    same rate (cost.py is the single source of per-op cycles).
* Not (yet) modelled: the balancer does not see the binary cache (a placement of ≤ 32 epochs per
  chip would avoid the re-sends) nor the epoch's shared DRAM channels (ResNet-50 e150 streams its
  stage-4 weights in one epoch); ``PYBUDA_EXP_APPROX``, which benchmarking set for BERT Bfp8_b, is
  not applied (exp is costed exact).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from pybuda.backend import cost
from pybuda.errors import ConfigError, NetlistError
from pybuda.netlist.model import (
    NON_TENSIX_OPS, EndLoop, Execute, GraphDef, Loop, Netlist, NetlistOp, Program, QueueDef, StaticVar, Var,
)
from pybuda.netlist.operands import _input_tiles as _input_buffer_tiles_raw, op_l1_usage
from pybuda.tensor import MathFidelity

__all__ = [
    "PerfConfig",
    "OpPerf",
    "EpochPerf",
    "PerfReport",
    "estimate",
    "estimate_compiled",
    "BOUNDS",
]

KiB = 1024

#: The names a ``bound`` field can take, in tie-break order (the kernel wins a tie).
BOUNDS = ("kernel", "noc", "dram", "pcie", "eth")


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PerfConfig:
    """The constants of the performance model beyond the per-op formulas of :mod:`pybuda.backend.cost`.

    Values marked [D] are derived or assumed here; the others cite netlist_backend_spec (NBS) or
    perf_calibration (PC).
    """

    #: Fixed cost of launching an epoch: epoch command to every core, stream/overlay setup. No source
    #: number exists (NBS §6.4, §8.3); shared with the balancer through ``cost.EPOCH_LAUNCH_CYCLES`` [D].
    epoch_launch_cycles: int = cost.EPOCH_LAUNCH_CYCLES
    #: Kernel binaries every core of an epoch loads: TRISC0/1/2 = 20/16/20 KiB (NBS §5.3 L1 map).
    kernel_binary_bytes_per_core: int = (20 + 16 + 20) * KiB
    #: Overlay (stream configuration) blob per core and epoch: 64 KiB − 128 B (NBS §5.3).
    overlay_blob_bytes_per_core: int = cost.OVERLAY_BLOB_BYTES
    #: Per-core binary cache slots (NBS §5.2): up to this many distinct epochs on a chip keep their
    #: binaries in device DRAM; beyond it the host re-sends them over PCIe at every switch.
    binary_cache_slots: int = 32
    #: Rate at which the host runtime re-writes epoch binaries into the device (binary cache overflow).
    #: The runtime writes every core's kernel binaries and overlay blob as separate programmed-I/O writes
    #: through remapped PCIe TLB windows, not as one DMA, so it runs far below the 24 GB/s PCIe DMA rate
    #: (NBS §5.4). [D] No published figure: inferred from the two calibration points whose placements
    #: overflow the cache (BERT-Large on e150, 49 epochs, implies 1.09 GB/s; on n150, 74 epochs, 1.18 GB/s —
    #: two chips with different binary sizes per epoch agreeing on one host rate); it does not touch a
    #: model that keeps at most ``binary_cache_slots`` epochs.
    host_binary_write_bytes_per_s: float = 1.2e9
    #: Op→op pipe bandwidth (NBS §6.3, docs/public/performance.md): a pipe from one producer core to
    #: one consumer core runs at ~28 GB/s after firmware overhead; a *gather* pipe, where one consumer
    #: core assembles its operand from several producer cores (different grids or blocking, reshaping
    #: TMs, a matmul row/column strip), at ~16 GB/s, "down to about 10" with many sources. The rate
    #: falls linearly in log2(sources) from the 2-source to the ``gather_many_sources`` figure [D: the
    #: spec gives the end points only].
    #: Off by default: see the module docstring ("Fork/join stalls and gather pipes") for why.
    gather_pipes: bool = False
    pipe_direct_bytes_per_s: float = 28.0e9
    pipe_gather_bytes_per_s: float = 16.0e9
    pipe_gather_many_bytes_per_s: float = 10.0e9
    gather_many_sources: int = 16
    #: Model fork/join stalls (``_Estimator._fork_join``, NBS §6.4). Off by default: see the module
    #: docstring ("Fork/join stalls and gather pipes").
    fork_join_stalls: bool = False
    #: NoC op→op pipe latency, tt-npe write model: 40 + 10 cycles per hop (NBS §6.3).
    noc_latency_base_cycles: int = 40
    noc_latency_per_hop_cycles: int = 10
    #: First-byte latency of a DRAM read on the far side of the chip (tt-npe, NBS §6.3).
    dram_latency_cycles: int = 270
    #: Host-memory (PCIe) round trip, ~1 µs for a PCIe 4.0 read [D].
    pcie_latency_s: float = 1.0e-6
    #: Ethernet hop between chips, ~1 µs including the ethernet-core firmware [D].
    eth_latency_s: float = 1.0e-6
    #: Ethernet links between two chips of a card (n300 joins its two chips with 2 links on the board) [D].
    eth_links_per_chip_pair: int = 2
    #: Inputs the host pre-loads into an input queue overlap the device only when the queue holds
    #: this many microbatches (a second buffer to fill while the first is consumed) [D].
    host_overlap_microbatches: int = 2
    #: Bytes of tiles per second one host thread produces when it converts inputs (fp32) to the
    #: queue's tiled format, or turns tiles back into tensors. A tilize reads 4 bytes and writes 2 per
    #: 2 tile bytes, i.e. 3x the tile bytes of memory traffic; at the ~20 GB/s read+write memcpy
    #: bandwidth of one host core (perf_calibration §6) that is ~6 GB/s [D].
    host_tilize_bytes_per_s: float = 6.0e9

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


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


# --------------------------------------------------------------------------------------------------
# Views that make netlist ops look like what cost.py reads (BudaOp / OpModel fields)
# --------------------------------------------------------------------------------------------------

class _CostOp:
    """A NetlistOp seen through the fields :mod:`pybuda.backend.cost` reads from a lowered op."""

    __slots__ = ("name", "type", "attrs", "inputs", "in_df", "out_df", "intermed_df", "acc_df",
                 "math_fidelity", "tags")

    def __init__(self, op: NetlistOp):
        self.name = op.name
        self.type = op.type
        self.attrs = op.attributes
        self.inputs = list(op.inputs)
        self.in_df = list(op.in_df)
        self.out_df = op.out_df
        self.intermed_df = op.intermed_df
        self.acc_df = op.acc_df
        self.math_fidelity = op.math_fidelity
        self.tags: Dict[str, Any] = {}


class _CostModel:
    """A NetlistOp's blocking seen as an OpModel."""

    __slots__ = ("grid_shape", "t", "mblock", "ublock", "m_k", "u_kt")

    def __init__(self, op: NetlistOp):
        self.grid_shape = op.grid_size
        self.t = op.t
        self.mblock = op.mblock
        self.ublock = op.ublock
        self.m_k = op.m_k
        self.u_kt = op.u_kt


class _UnitMatmul:
    """One LoFi tile product: what :func:`cost.matmul_ideal_cycles` charges per tile product per phase."""

    type = "matmul"
    math_fidelity = MathFidelity.LoFi
    attrs: Dict[str, Any] = {}


_UNIT_MATMUL = _UnitMatmul()


class _UnitModel:
    """A one-core, one-tile blocking (the fields cost.py reads)."""

    grid_shape = (1, 1)
    t = 1
    mblock = (1, 1)
    ublock = (1, 1)
    m_k = 1
    u_kt = 1


_UNIT_MODEL = _UnitModel()


def _input_buffer_tiles(op: NetlistOp, index: int) -> int:
    """Tiles of op's streaming input buffer ``index`` on one core (NBS §5.3, at least
    ``input_buf_min_size_tiles``)."""
    tiles = _input_buffer_tiles_raw(op, index, False)
    if op.input_buf_min_size_tiles and index < len(op.input_buf_min_size_tiles):
        tiles = max(tiles, int(op.input_buf_min_size_tiles[index]))
    return tiles


def _fused_table(netlist: Netlist) -> Dict[Any, Dict[str, Any]]:
    """The netlist's fused ops in the dict form cost.py costs a ``fused_op`` from."""
    table: Dict[Any, Dict[str, Any]] = {}
    for fid, fdef in netlist.fused_ops.items():
        schedules = []
        for sched in fdef.schedules:
            entries = []
            for sub in sched:
                entries.append({sub.name: {"type": sub.type, "inputs": list(sub.inputs), "output": sub.output,
                                           "mblock": list(sub.mblock), "ublock": list(sub.ublock),
                                           "attributes": dict(sub.attributes)}})
            schedules.append(entries)
        table[fid] = {"inputs": fdef.inputs, "intermediates": fdef.intermediates, "schedules": schedules}
    return table


# --------------------------------------------------------------------------------------------------
# Program walk: which graphs run, in what order, per microbatch
# --------------------------------------------------------------------------------------------------

@dataclass
class _Exec:
    graph: GraphDef
    execute: Execute


_MAX_UNROLL = 4096  # guard against absurd constant loop counts


def _pick_program(netlist: Netlist, program: Optional[str]) -> Program:
    if program is not None:
        try:
            return netlist.program(program)
        except KeyError:
            raise ConfigError(f"netlist has no program '{program}'; programs are "
                              f"{[p.name for p in netlist.programs]}") from None
    for prog in netlist.programs:
        if any(isinstance(i, Execute) for i in prog.instructions):
            return prog
    raise NetlistError("programs", "no program executes a graph; nothing to model")


def _flatten(netlist: Netlist, prog: Program) -> List[_Exec]:
    """The executes of one call of ``prog`` with every ``$p_`` (parameter) loop run once — one
    microbatch — and constant-count loops unrolled."""
    env: Dict[str, int] = {}
    for instr in prog.instructions:
        if isinstance(instr, (Var, StaticVar)):
            env.update({k: int(v) for k, v in instr.values.items()})

    def count_of(operand: Any) -> int:
        if isinstance(operand, bool):
            return int(operand)
        if isinstance(operand, int):
            return operand
        if isinstance(operand, str) and operand in env:
            return env[operand]
        return 1  # a $p_ parameter: the microbatch loop, one iteration per microbatch

    def walk(instrs: Sequence[Any], start: int) -> Tuple[List[_Exec], int]:
        out: List[_Exec] = []
        i = start
        while i < len(instrs):
            ins = instrs[i]
            if isinstance(ins, EndLoop):
                return out, i
            if isinstance(ins, Loop):
                body, end = walk(instrs, i + 1)
                out.extend(body * max(1, min(count_of(ins.count), _MAX_UNROLL)))
                i = end + 1
                continue
            if isinstance(ins, Execute):
                graph = netlist.graphs.get(ins.graph_name)
                if graph is None:
                    raise NetlistError(f"programs.{prog.name}.execute", f"unknown graph '{ins.graph_name}'")
                out.append(_Exec(graph, ins))
            i += 1
        return out, i

    execs, _ = walk(prog.instructions, 0)
    return execs


def _chip_of(target: Union[int, Tuple[int, ...]]) -> int:
    return target if isinstance(target, int) else (target[0] if target else 0)


def _group_temporal(execs: List[_Exec], temporal_epochs: Optional[Mapping[str, int]]) -> List[List[_Exec]]:
    """Group consecutive executes into temporal epochs: graphs on different chips that follow each
    other run concurrently (one temporal epoch); a graph on a chip already in the group starts the next.
    An explicit ``temporal_epochs`` map (graph name → index) overrides the grouping."""
    groups: List[List[_Exec]] = []
    keys: List[Optional[int]] = []
    for ex in execs:
        chip = _chip_of(ex.graph.target_device)
        key = temporal_epochs.get(ex.graph.name) if temporal_epochs else None
        joins = bool(groups) and chip not in {_chip_of(e.graph.target_device) for e in groups[-1]}
        if temporal_epochs:
            joins = joins and key is not None and key == keys[-1]
        if joins:
            groups[-1].append(ex)
        else:
            groups.append([ex])
            keys.append(key)
    return groups


# --------------------------------------------------------------------------------------------------
# The estimator
# --------------------------------------------------------------------------------------------------

def _resolve_device(netlist: Netlist, device: Any) -> Any:
    from pybuda.arch import get_device_descriptor

    if device is None:
        if netlist.arch is None:
            raise ConfigError("the netlist names several archs; pass a device (descriptor or preset name)")
        chips = 1 + max((_chip_of(g.target_device) for g in netlist.graphs.values()), default=0)
        return get_device_descriptor(netlist.arch, num_chips=chips)
    if isinstance(device, str):
        return get_device_descriptor(device_config=device)
    return device


def _arch_matches(netlist_arch: Optional[str], device: Any) -> bool:
    if netlist_arch is None:
        return True
    dev = str(getattr(getattr(device, "arch", ""), "value", getattr(device, "arch", ""))).lower()
    na = netlist_arch.lower()
    return dev.startswith(na[:4]) or na.startswith(dev[:4])


class _Estimator:
    def __init__(self, netlist: Netlist, device: Any, microbatch: Optional[int], config: PerfConfig,
                 program: Optional[str], temporal_epochs: Optional[Mapping[str, int]]):
        self.netlist = netlist
        self.device = device
        self.cfg = config
        self.bw = cost.device_bandwidth(device)
        self.clock = float(device.aiclk_hz)
        self.fused = _fused_table(netlist)
        self.prog = _pick_program(netlist, program)
        self.execs = _flatten(netlist, self.prog)
        if not self.execs:
            raise NetlistError(f"programs.{self.prog.name}", "the program executes no graph")
        self.groups = _group_temporal(self.execs, temporal_epochs)
        base = self._samples_per_iteration()
        self.microbatch = int(microbatch) if microbatch else base
        if self.microbatch < 1:
            raise ConfigError(f"microbatch must be >= 1, got {microbatch}")
        self.scale = self.microbatch / base
        self.pcie_latency = self.cfg.pcie_latency_s * self.clock
        self.eth_latency = self.cfg.eth_latency_s * self.clock
        eth_bps = float(getattr(device, "eth_link_bytes_per_s", 0.0) or 0.0)
        self.eth_rate = eth_bps * max(1, self.cfg.eth_links_per_chip_pair) / self.clock if eth_bps else 0.0
        self.op_rows: Dict[str, OpPerf] = {}
        self.op_graph: Dict[str, GraphDef] = {g_op.name: g for g, g_op in netlist.iter_ops()}

    # -- program-level facts ----------------------------------------------------------------------
    def _samples_per_iteration(self) -> int:
        """Inputs one program iteration consumes: the input_count of the first graph that reads a
        host-fed queue (else of the first execute)."""
        for ex in self.execs:
            for op in ex.graph.ops.values():
                for name in op.inputs:
                    q = self.netlist.queues.get(name)
                    if q is not None and self._is_host_stream(ex, q):
                        return max(1, ex.graph.input_count)
        return max(1, self.execs[0].graph.input_count)

    def _input_count(self, graph: GraphDef) -> int:
        return max(1, int(round(graph.input_count * self.scale)))

    def _is_host_stream(self, ex: _Exec, q: QueueDef) -> bool:
        """True for a queue the host fills with new entries every microbatch: host-fed, a FIFO
        (``type: queue``; parameters and constants are ``ram``, written once) and not loaded as a
        prologue."""
        return q.is_host_fed and q.type == "queue" and not self._is_prologue(ex, q.name)

    @staticmethod
    def _is_prologue(ex: _Exec, queue: str) -> bool:
        s = ex.execute.queue_settings.get(queue)
        return bool(s is not None and s.prologue is True)

    # -- per op ----------------------------------------------------------------------------------
    def _sources(self, ex: _Exec, op: NetlistOp) -> List[str]:
        out = []
        for name in op.inputs:
            q = self.netlist.queues.get(name)
            if q is None:
                out.append("op")
            elif self._is_prologue(ex, name):
                out.append("prologue")
            else:
                out.append("host" if q.loc == "host" else "dram")
        return out

    def _output_dest(self, op: NetlistOp) -> str:
        dests = [q.loc for q in self.netlist.queues_fed_by(op.name)]
        if "host" in dests:
            return "host"
        if "dram" in dests:
            return "dram"
        return "op"

    def _op_bounds(self, ex: _Exec, op: NetlistOp) -> Dict[str, Any]:
        """Kernel and the op's own bounds (cost.py), plus its DRAM/host/ethernet bytes for the shared
        links of the epoch."""
        cop, cmod = _CostOp(op), _CostModel(op)
        sources = self._sources(ex, op)
        n = len(op.inputs)
        caps: List[Optional[int]] = []
        for name in op.inputs:
            q = self.netlist.queues.get(name)
            caps.append(None if q is None else q.shape.t * q.shape.rt * q.shape.ct)
        caps_t = tuple(caps)

        def breakdown(srcs: Sequence[str], dest: str) -> cost.CycleBreakdown:
            ctx = cost.BandwidthContext(tuple(srcs), dest, caps_t)
            return cost.op_cycle_breakdown(cop, cmod, self.device, ctx, fused_ops=self.fused, bandwidth=self.bw)

        quiet = ["prologue"] * n
        base = breakdown(quiet, "op")
        kernel, ideal = base.kernel, None
        bounds = {"kernel": kernel, "noc": base.output_bw, "dram": 0, "pcie": 0, "eth": 0}
        label = {"op": "noc", "dram": "dram", "host": "pcie"}
        for kind in sorted(set(sources) - {"prologue"}):
            br = breakdown([s if s == kind else "prologue" for s in sources], "op")
            key = label[kind]
            bounds[key] = max(bounds[key], br.input_bw)
        # Op→op pipes at their direct/gather rates (NBS §6.3) instead of cost.py's flat NoC rate.
        noc_in = 0.0
        in_tiles = cost.input_tiles_per_core(cop, cmod)
        for i, name in enumerate(op.inputs):
            if sources[i] != "op" or i >= len(in_tiles):
                continue
            df = op.in_df[i] if i < len(op.in_df) else op.out_df
            noc_in += in_tiles[i] * cost.tile_size_bytes(df) / self._pipe_rate(self._gather_sources(op, i))
        out_noc = cost.output_tiles_per_core(cmod) * cost.tile_size_bytes(op.out_df) / self._pipe_rate(1)
        if self.cfg.gather_pipes:
            bounds["noc"] = int(math.ceil(max(noc_in, out_noc)))
        dest = self._output_dest(op)
        if dest != "op":
            bounds[label[dest]] = max(bounds[label[dest]], breakdown(quiet, dest).output_bw)

        # Bytes per input moved over shared links, summed over the op's cores.
        cores = max(1, op.grid_size[0] * op.grid_size[1])
        tiles = cost.input_tiles_per_core(cop, cmod)
        dram_bytes: Dict[Tuple[int, int], float] = {}
        host_bytes = 0.0
        eth_bytes: Dict[Tuple[int, int], float] = {}
        chip = _chip_of(ex.graph.target_device)

        def cross(other: int, nbytes: float) -> None:
            # traffic between two chips shares the Ethernet links of that pair
            if other != chip:
                pair = (min(chip, other), max(chip, other))
                eth_bytes[pair] = eth_bytes.get(pair, 0.0) + nbytes
        for i, name in enumerate(op.inputs):
            q = self.netlist.queues.get(name)
            if i >= len(tiles):
                break
            per_core = cost.capped_input_tiles(cop, cmod, i, tiles[i], caps_t[i])
            df = op.in_df[i] if i < len(op.in_df) else op.out_df
            nbytes = per_core * cost.tile_size_bytes(df) * self._distinct_readers(op, i)
            if q is None:
                producer_graph = self.op_graph.get(name)
                if producer_graph is not None:
                    cross(_chip_of(producer_graph.target_device), nbytes)  # queueless multichip
                continue
            if sources[i] == "prologue":
                continue
            if q.loc == "host":
                host_bytes += nbytes
            else:
                self._spread(dram_bytes, q, nbytes)
                cross(_chip_of(q.target_device), nbytes)
        out_bytes = cost.output_tiles_per_core(cmod) * cost.tile_size_bytes(op.out_df) * cores
        for q in self.netlist.queues_fed_by(op.name):
            if q.loc == "host":
                host_bytes += out_bytes
            else:
                self._spread(dram_bytes, q, out_bytes)
                cross(_chip_of(q.target_device), out_bytes)
        if op.type == "ethernet_datacopy" and op.attr("dest_device") is not None:
            cross(int(op.attr("dest_device")), out_bytes)
        if ideal is None:
            ideal = cost.matmul_ideal_cycles(cop, cmod, self.device)
        return {"bounds": bounds, "dram_bytes": dram_bytes, "host_bytes": host_bytes, "eth_bytes": eth_bytes,
                "ideal": ideal, "sources": sources}

    def _pipe_rate(self, sources: int) -> float:
        """Bytes per cycle of an op→op pipe into one consumer core fed by ``sources`` producer cores."""
        c = self.cfg
        if sources <= 1:
            gbps = c.pipe_direct_bytes_per_s
        else:
            span = max(1.0, math.log2(max(2, c.gather_many_sources)) - 1.0)
            frac = min(1.0, (math.log2(sources) - 1.0) / span)
            gbps = c.pipe_gather_bytes_per_s + frac * (c.pipe_gather_many_bytes_per_s - c.pipe_gather_bytes_per_s)
        return gbps / self.clock

    def _gather_sources(self, op: NetlistOp, index: int) -> int:
        """Producer cores one core of ``op`` gathers input ``index`` from (an op in the same epoch).

        Without reshaping TMs the producer's and consumer's row (column) partitions of the tensor
        overlap: a consumer block spans ``p/c`` producer blocks when the producer grid dimension ``p``
        is a multiple of the consumer's ``c``, one when ``c`` is a multiple of ``p``, else
        ``ceil(p/c) + 1``. A broadcast dimension comes from one producer block; a matmul's in0 needs
        its whole row strip (every producer column), in1 its whole column strip (every producer row),
        and a reduce the whole reduced dimension. A transpose swaps the producer's grid dimensions;
        slice/stack TMs (t-streaming, attention heads) keep the row/column partition of each slice, so
        they are counted like an untouched edge [D]."""
        graph = self.op_graph.get(op.inputs[index])
        if graph is None:
            return 1
        prod = graph.ops[op.inputs[index]]
        pr, pc = prod.grid_size
        cr, cc = op.grid_size
        tms = op.tms_of(index)
        if any(tm.name == "transpose" for tm in tms):
            pr, pc = pc, pr
        bcast = {str(getattr(tm, "dim", "")) for tm in tms if tm.name == "broadcast"}

        def overlap(p: int, c: int) -> int:
            if p % c == 0:
                return p // c
            if c % p == 0:
                return 1
            return math.ceil(p / c) + 1

        sr, sc = overlap(pr, cr), overlap(pc, cc)
        if op.type in ("matmul", "depthwise") and not op.attr("identity"):
            if index == 0:
                sc = pc
            elif index == 1:
                sr = pr
        elif op.type == "reduce":
            dim = str(op.attr("dim") or "r").lower()
            if dim == "r":
                sr = pr
            elif dim == "c":
                sc = pc
        if "r" in bcast:
            sr = 1
        if "c" in bcast:
            sc = 1
        return max(1, sr * sc)

    @staticmethod
    def _distinct_readers(op: NetlistOp, index: int) -> int:
        """How many times one input's per-core slice is fetched from its queue. A matmul's operands are
        multicast on the NoC (net2pipe's row/column multicast pipes): in0 is fetched once per grid row and
        sent along the row, in1 once per grid column and sent down the column. A sparse matmul's in0 and
        index are per-core data (each core its own picker tiles and indices); its in1, the activation,
        is multicast like a dense in1. Every other operand, of every other op, is fetched by each core."""
        return cost.distinct_fetchers(_CostOp(op), _CostModel(op), index)

    @staticmethod
    def _spread(acc: Dict[Tuple[int, int], float], q: QueueDef, nbytes: float) -> None:
        """Add ``nbytes`` to the (chip, channel) of each of the queue's buffers, evenly."""
        allocs = q.dram or ()
        chip = _chip_of(q.target_device)
        if not allocs:
            acc[(chip, -1)] = acc.get((chip, -1), 0.0) + nbytes
            return
        share = nbytes / len(allocs)
        for channel, _addr in allocs:
            key = (chip, int(channel))
            acc[key] = acc.get(key, 0.0) + share

    # -- one temporal epoch -------------------------------------------------------------------------
    def _epoch(self, index: int, group: List[_Exec], prev_graph_on_chip: Dict[int, str],
               cache_overflow: Dict[int, bool]) -> EpochPerf:
        rows: Dict[str, OpPerf] = {}
        info: Dict[str, Dict[str, Any]] = {}
        channel_bytes: Dict[Tuple[int, int], float] = {}
        host_bytes_total = 0.0
        eth_bytes_pair: Dict[Tuple[int, int], float] = {}
        for ex in group:
            for op in ex.graph.ops.values():
                b = self._op_bounds(ex, op)
                info[op.name] = {"ex": ex, "op": op, **b}
                for key, nbytes in b["dram_bytes"].items():
                    channel_bytes[key] = channel_bytes.get(key, 0.0) + nbytes
                host_bytes_total += b["host_bytes"]
                for pair, nbytes in b["eth_bytes"].items():
                    eth_bytes_pair[pair] = eth_bytes_pair.get(pair, 0.0) + nbytes

        # Shared links: cycles per input each must spend.
        channel_cycles = {key: nbytes / (self.bw.dram_total if key[1] < 0 else self.bw.dram_per_channel)
                          for key, nbytes in channel_bytes.items()}
        pcie_cycles = host_bytes_total / self.bw.pcie if host_bytes_total else 0.0
        eth_cycles = {pair: (nbytes / self.eth_rate if self.eth_rate else 0.0)
                      for pair, nbytes in eth_bytes_pair.items()}

        steady = 0
        bottleneck: Optional[str] = None
        for name, d in info.items():
            op: NetlistOp = d["op"]
            ex: _Exec = d["ex"]
            bounds = dict(d["bounds"])
            touched = [channel_cycles[k] for k in d["dram_bytes"]]
            if touched:
                bounds["dram"] = max(bounds["dram"], int(math.ceil(max(touched))))
            if d["host_bytes"]:
                bounds["pcie"] = max(bounds["pcie"], int(math.ceil(pcie_cycles)))
            if d["eth_bytes"]:
                bounds["eth"] = max(bounds["eth"], int(math.ceil(max(eth_cycles[p] for p in d["eth_bytes"]))))
            cycles = max(bounds.values())
            bound = next(k for k in BOUNDS if bounds[k] == cycles)
            cores = 0 if op.type in NON_TENSIX_OPS else op.grid_size[0] * op.grid_size[1]
            ideal = d["ideal"]
            arch = self.device
            # FLOPs follow the ideal cycles: one 32x32x32 tile product per ideal-tile-cycles × F
            flops = 0.0
            if ideal:
                tile_macs = ideal / (cost.matmul_ideal_cycles(_UNIT_MATMUL, _UNIT_MODEL, arch) *
                                     op.math_fidelity.phases)
                flops = 2.0 * 32 ** 3 * tile_macs * max(1, cores)
            row = OpPerf(
                name=op.name, type=op.type, op_class=op.op_class, graph=ex.graph.name, epoch=index,
                chip=_chip_of(ex.graph.target_device), grid_loc=op.grid_loc, grid_size=op.grid_size,
                grid_transpose=op.grid_transpose, cores=cores, t=op.t, mblock=op.mblock, ublock=op.ublock,
                m_k=op.m_k, u_kt=op.u_kt, math_fidelity=op.math_fidelity.name, out_df=op.out_df.name,
                kernel_cycles=int(bounds["kernel"]), noc_cycles=int(bounds["noc"]), dram_cycles=int(bounds["dram"]),
                pcie_cycles=int(bounds["pcie"]), eth_cycles=int(bounds["eth"]), cycles=int(cycles), bound=bound,
                ideal_math_cycles=int(ideal), flops_per_input=flops,
                math_utilization=(ideal / cycles) if (ideal and cycles) else 0.0)
            rows[name] = row
            if cycles > steady:
                steady, bottleneck = int(cycles), name
        # A shared link busier than every op bounds the epoch by itself (e.g. PCIe for host queues).
        link_bound = "kernel"
        for label, cyc in (("dram", max(channel_cycles.values(), default=0.0)), ("pcie", pcie_cycles),
                           ("eth", max(eth_cycles.values(), default=0.0))):
            if cyc > steady:
                steady, link_bound, bottleneck = int(math.ceil(cyc)), label, None
        # Fork/join: a join whose short input path cannot buffer the long path's mblocks in flight
        # stalls the fork (and with it the whole pipeline) — NBS §6.4.
        fj_cycles, fj_fork, fj_join = self._fork_join(info, rows) if self.cfg.fork_join_stalls else (0.0, None, None)
        if fj_cycles > steady:
            steady, bottleneck, link_bound = int(math.ceil(fj_cycles)), fj_fork, "fork_join"
            if fj_fork is not None:
                rows[fj_fork].fork_join_cycles = int(math.ceil(fj_cycles))
                rows[fj_fork].fork_join_with = fj_join
        steady = max(steady, 1)
        for row in rows.values():
            row.core_utilization = min(1.0, row.cycles / steady)
        if bottleneck is not None:
            rows[bottleneck].bottleneck = True
            bneck_bound = "fork_join" if link_bound == "fork_join" else rows[bottleneck].bound
        else:
            bneck_bound = link_bound

        fill = self._fill(info, rows)
        fill = max(fill, steady)
        input_count = max(self._input_count(ex.graph) for ex in group)
        run_cycles = fill + (input_count - 1) * steady

        # Epoch switch: per chip, concurrently; nothing to reload if the chip just ran this graph.
        switch = 0.0
        breakdown: Dict[str, float] = {"launch": 0.0, "binaries": 0.0, "prologue": 0.0}
        prologue_total = binary_total = host_binary_total = 0
        for ex in group:
            chip = _chip_of(ex.graph.target_device)
            parts, pbytes, bbytes = self._switch_parts(ex, rows)
            if prev_graph_on_chip.get(chip) == ex.graph.name:
                parts = {"launch": float(self.cfg.epoch_launch_cycles), "binaries": 0.0, "prologue": 0.0}
            else:
                prologue_total += pbytes
                binary_total += bbytes
                if cache_overflow.get(chip, False):
                    host_binary_total += bbytes
            prev_graph_on_chip[chip] = ex.graph.name
            chip_total = sum(parts.values())
            if chip_total > switch:
                switch, breakdown = chip_total, parts
        total = int(math.ceil(switch)) + run_cycles

        chips = sorted({_chip_of(ex.graph.target_device) for ex in group})
        cores_available = self.device.cores_per_chip * len(chips)
        cores_used = sum(r.cores for r in rows.values())
        busy = sum(r.cores * r.cycles for r in rows.values())
        ideal_core_cycles = sum(r.ideal_math_cycles * r.cores for r in rows.values())
        for name, row in rows.items():
            self.op_rows[name] = row
        return EpochPerf(
            index=index, graphs=[ex.graph.name for ex in group], chips=chips, input_count=input_count,
            ops=list(rows), steady_cycles=steady, fill_cycles=int(fill),
            switch_cycles=int(math.ceil(switch)), total_cycles=int(total), bottleneck_op=bottleneck,
            bottleneck_bound=bneck_bound, cores_used=cores_used, cores_available=cores_available,
            core_utilization=busy / (cores_available * steady) if cores_available else 0.0,
            math_utilization=(ideal_core_cycles * input_count) / (cores_available * total) if total else 0.0,
            switch_breakdown={k: float(v) for k, v in breakdown.items()},
            dram_channel_cycles={f"{c}:{ch}": int(math.ceil(v)) for (c, ch), v in sorted(channel_cycles.items())},
            pcie_cycles_per_input=int(math.ceil(pcie_cycles)), prologue_bytes=int(prologue_total),
            binary_bytes=int(binary_total), host_binary_bytes=int(host_binary_total))

    def _fork_join(self, info: Dict[str, Dict[str, Any]], rows: Dict[str, OpPerf]
                   ) -> Tuple[float, Optional[str], Optional[str]]:
        """The per-input interval fork/join loops impose, with the fork and join op of the worst one.

        NBS §6.4: ops pipeline over macro-blocks; an op starts math when its input buffers hold a block
        and pushes when its output buffer has space, and a consumer frees producer space only after math
        on that block. A fork ``P`` whose outputs reconverge at a join ``J`` forms a loop: ``J`` frees the
        short path's buffers only after the long path delivered the same block, so at most the short
        path's buffer capacity ``B`` (P's ``buf_size_mb`` output mblocks, J's input buffer, and the
        output buffers of ops on the short path) is in flight around the loop. A loop with ``B`` blocks
        of tokens and ``L`` cycles of per-block latency (every op on it, each taking its per-mblock time
        ``cycles / t``) completes at most ``B`` blocks per ``L`` (the cycle ratio of a marked graph), so
        the interval per input is at least ``L / B`` (blocks counted in inputs: a buffer of ``b``
        mblocks of a t-sliced op holds ``b / t`` inputs). Unlimited buffering — a DRAM e2e queue on the
        short path, which the netlist expresses by routing it through a queue — puts the join outside
        this loop (queue inputs are not op edges here). Paths are taken inside one epoch and chip.
        """
        succ: Dict[str, List[Tuple[str, int]]] = {n: [] for n in info}
        for name, d in info.items():
            for i, inp in enumerate(d["op"].inputs):
                if inp in info and inp != name:
                    succ[inp].append((name, i))
        forks = [n for n, s in succ.items() if len({c for c, _ in s}) >= 2]
        if not forks:
            return 0.0, None, None
        delay = {n: rows[n].cycles / max(1, info[n]["op"].t) for n in info}

        def edge_cap(u: str, v: str, i: int) -> float:
            """Inputs of u's output buffered on edge u→v (u's output buffer + v's input buffer ``i``)."""
            pu, pv = info[u]["op"], info[v]["op"]
            cap = pu.buf_size_mb / max(1, pu.t)
            per_input = cost.input_tiles_per_core(_CostOp(pv), _CostModel(pv))
            if i < len(per_input) and per_input[i] > 0:
                cap += _input_buffer_tiles(pv, i) / per_input[i]
            return cap

        order = self._topo(info, succ)
        pos = {n: k for k, n in enumerate(order)}
        worst, worst_p, worst_j = 0.0, None, None
        for p in forks:
            outs: Dict[str, float] = {}
            for c, i in succ[p]:  # parallel edges to one consumer (e.g. x*x): the larger buffer
                outs[c] = max(outs.get(c, 0.0), edge_cap(p, c, i))
            for b, cap_pb in outs.items():
                # short path from b: fewest buffered inputs to every reachable node (DAG, topo order)
                tok: Dict[str, float] = {b: cap_pb}
                dly: Dict[str, float] = {b: 0.0}
                via: Dict[str, Optional[str]] = {b: None}
                for n in order[pos[b]:]:
                    if n not in tok:
                        continue
                    for c, i in succ[n]:
                        t_new, d_new = tok[n] + edge_cap(n, c, i), dly[n] + delay[n]
                        if c not in tok or t_new < tok[c] - 1e-12 or (abs(t_new - tok[c]) < 1e-12 and d_new > dly[c]):
                            tok[c], dly[c], via[c] = t_new, d_new, n
                for a in outs:
                    if a == b:
                        continue
                    # longest path a ⇝ J avoiding the short path's interior nodes
                    for j in tok:
                        if j == b and a == j:
                            continue
                        blocked = set()
                        n = via.get(j)
                        while n is not None:
                            blocked.add(n)
                            n = via.get(n)
                        if a in blocked or a == j:
                            continue
                        longest: Dict[str, float] = {a: delay[a]}
                        for n in order[pos[a]:pos[j]]:
                            if n not in longest:
                                continue
                            for c, _i in succ[n]:
                                if c == j or (c not in blocked and pos[c] < pos[j]):
                                    v = longest[n] + (delay[c] if c != j else 0.0)
                                    if v > longest.get(c, -1.0):
                                        longest[c] = v
                        if j not in longest:
                            continue
                        loop = delay[p] + longest[j] + dly[j] + delay[j]
                        ratio = loop / max(tok[j], 1e-9)
                        if ratio > worst:
                            worst, worst_p, worst_j = ratio, p, j
        return worst, worst_p, worst_j

    @staticmethod
    def _topo(info: Dict[str, Dict[str, Any]], succ: Dict[str, List[Tuple[str, int]]]) -> List[str]:
        indeg = {n: 0 for n in info}
        for n, s in succ.items():
            for c, _ in s:
                indeg[c] += 1
        ready = [n for n in info if indeg[n] == 0]
        out: List[str] = []
        while ready:
            n = ready.pop()
            out.append(n)
            for c, _ in succ[n]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
        out.extend(n for n in info if n not in set(out))  # a cycle cannot happen in a valid netlist
        return out

    def _fill(self, info: Dict[str, Dict[str, Any]], rows: Dict[str, OpPerf]) -> int:
        """Latency of the first input through the epoch's pipeline: the longest producer→consumer path,
        each op adding the time to produce its first t-slice (one macro-block per core) and each edge
        its transport latency (NoC hops, DRAM read, PCIe, Ethernet)."""
        memo: Dict[str, float] = {}
        visiting: set = set()

        def hops(a: Optional[Tuple[int, int]], b: Optional[Tuple[int, int]]) -> int:
            if a is None or b is None:
                return 0
            return abs(a[0] - b[0]) + abs(a[1] - b[1])

        def latency(name: str) -> float:
            if name in memo:
                return memo[name]
            if name in visiting:  # a cycle cannot happen in a valid netlist; do not recurse forever
                return 0.0
            visiting.add(name)
            d = info[name]
            op: NetlistOp = d["op"]
            start = 0.0
            for i, inp in enumerate(op.inputs):
                src = d["sources"][i] if i < len(d["sources"]) else "op"
                if inp in info:
                    p = info[inp]["op"]
                    edge = self.cfg.noc_latency_base_cycles + self.cfg.noc_latency_per_hop_cycles * hops(
                        p.grid_loc, op.grid_loc)
                    if _chip_of(info[inp]["ex"].graph.target_device) != _chip_of(d["ex"].graph.target_device):
                        edge += self.eth_latency
                    start = max(start, latency(inp) + edge)
                elif src == "dram":
                    start = max(start, float(self.cfg.dram_latency_cycles))
                elif src == "host":
                    start = max(start, self.pcie_latency)
            row = rows[name]
            own = row.cycles / max(1, op.t)
            visiting.discard(name)
            memo[name] = start + own
            row.latency_cycles = int(math.ceil(start + own))
            return memo[name]

        return int(math.ceil(max((latency(n) for n in info), default=0.0)))

    def _switch_parts(self, ex: _Exec, rows: Dict[str, OpPerf]) -> Tuple[Dict[str, float], int, int]:
        """Cycles to load one graph on its chip (launch, binaries, prologue parameters), the prologue
        bytes and the binary bytes."""
        cores = sum(rows[name].cores for name in ex.graph.ops if name in rows)
        bin_bytes = cores * (self.cfg.kernel_binary_bytes_per_core + self.cfg.overlay_blob_bytes_per_core)
        binaries = bin_bytes / self.bw.dram_total
        per_channel: Dict[int, float] = {}
        total = 0
        for op in ex.graph.ops.values():
            prologue_idx = [i for i, name in enumerate(op.inputs) if self._is_prologue(ex, name)]
            if not prologue_idx:
                continue
            usage = op_l1_usage(self.netlist, op, prologue_idx)
            op_cores = max(1, op.grid_size[0] * op.grid_size[1])
            for i in prologue_idx:
                nbytes = usage.buffers.get(f"input_{i}", 0) * op_cores
                total += nbytes
                q = self.netlist.queues[op.inputs[i]]
                allocs = q.dram or ()
                if allocs:
                    for channel, _addr in allocs:
                        per_channel[int(channel)] = per_channel.get(int(channel), 0.0) + nbytes / len(allocs)
                else:
                    per_channel[-1] = per_channel.get(-1, 0.0) + nbytes
        prologue = 0.0
        if total:
            host = per_channel.pop(-1, 0.0)
            chan = max((v / self.bw.dram_per_channel for v in per_channel.values()), default=0.0)
            prologue = max(chan, sum(per_channel.values()) / self.bw.dram_total) + (host / self.bw.pcie if host else 0)
        return {"launch": float(self.cfg.epoch_launch_cycles), "binaries": binaries, "prologue": prologue}, total, \
            int(bin_bytes)

    # -- host transfers -----------------------------------------------------------------------------
    def _host_transfers(self) -> Tuple[float, float, bool]:
        """(input cycles, output cycles, overlapped) of the host's work per microbatch.

        Inputs: the host converts every host-fed streamed queue's entries to tiles
        (``host_tilize_bytes_per_s``) and, for a queue in device DRAM, writes them over PCIe (a queue in
        host memory is read by the device during the epoch, which the epoch's PCIe bound covers).
        Outputs: queues the host reads back (host-memory queues, and DRAM queues no op reads) are
        untilized at the same rate, DRAM ones after a PCIe read. The host works ahead of the device
        only when each input queue holds ``host_overlap_microbatches`` microbatches."""
        tilize = self.cfg.host_tilize_bytes_per_s / self.clock  # bytes per AI-clock cycle
        in_cycles = 0.0
        overlapped = True
        seen: set = set()
        for ex in self.execs:
            n = self._input_count(ex.graph)
            for op in ex.graph.ops.values():
                for name in op.inputs:
                    q = self.netlist.queues.get(name)
                    if q is None or name in seen or not self._is_host_stream(ex, q):
                        continue
                    seen.add(name)
                    nbytes = q.buffers * q.entry_size_bytes() * n
                    in_cycles += nbytes / tilize + (nbytes / self.bw.pcie if q.loc == "dram" else 0.0)
                    if q.entries < self.cfg.host_overlap_microbatches * ex.graph.input_count:
                        overlapped = False
        out_cycles = 0.0
        executed_ops = {name for ex in self.execs for name in ex.graph.ops}
        for q in self.netlist.queues.values():
            if q.is_host_fed or q.input not in executed_ops or self.netlist.readers_of(q.name):
                continue  # not an output of this program, or read on the device (e2e)
            nbytes = q.buffers * q.entry_size_bytes() * self.microbatch
            out_cycles += nbytes / tilize + (nbytes / self.bw.pcie if q.loc == "dram" else 0.0)
        return in_cycles, out_cycles, overlapped

    # -- everything ---------------------------------------------------------------------------------
    def run(self) -> PerfReport:
        prev: Dict[int, str] = {}
        distinct: Dict[int, set] = {}
        for ex in self.execs:
            distinct.setdefault(_chip_of(ex.graph.target_device), set()).add(ex.graph.name)
        overflow = {chip: len(names) > self.cfg.binary_cache_slots for chip, names in distinct.items()}
        # Steady state over microbatches: the chip's previous graph is the last one of the previous
        # iteration, so walk the program once to seed it.
        for group in self.groups:
            for ex in group:
                prev[_chip_of(ex.graph.target_device)] = ex.graph.name
        epochs = [self._epoch(i, group, prev, overflow) for i, group in enumerate(self.groups)]
        device_cycles = sum(e.total_cycles for e in epochs)
        in_cycles, out_cycles, overlapped = self._host_transfers()
        bin_rate = self.cfg.host_binary_write_bytes_per_s / self.clock  # bytes per AI-clock cycle
        bin_cycles = sum(e.host_binary_bytes for e in epochs) / bin_rate
        host = in_cycles + out_cycles + bin_cycles  # one host thread does all of it
        if overlapped:
            cycles = max(device_cycles, host)
        else:
            # inputs and outputs wait for the device; binary pushes still run ahead of it
            cycles = max(device_cycles + in_cycles + out_cycles, host)
        seconds = cycles / self.clock
        first_in = in_cycles / max(1, self.microbatch)  # the first input must arrive before anything runs
        latency = (device_cycles + in_cycles + out_cycles if not overlapped else device_cycles + first_in + out_cycles)
        cores_per_chip = self.device.cores_per_chip
        total_core_cycles = sum(e.total_cycles * e.cores_available for e in epochs)
        ideal = sum(r.ideal_math_cycles * r.cores * next(e.input_count for e in epochs if e.index == r.epoch)
                    for r in self.op_rows.values())
        busy = sum(r.cores * r.cycles * next(e.input_count for e in epochs if e.index == r.epoch)
                   for r in self.op_rows.values())
        flops_per_sample = sum(r.flops_per_input * next(e.input_count for e in epochs if e.index == r.epoch)
                               for r in self.op_rows.values()) / self.microbatch
        ops = [self.op_rows[name] for e in epochs for name in e.ops]
        return PerfReport(
            device=str(getattr(self.device, "name", "device")),
            arch=str(getattr(self.device.arch, "value", self.device.arch)), clock_hz=self.clock,
            chips=int(getattr(self.device, "chip_count", 1)), cores_per_chip=cores_per_chip,
            microbatch=self.microbatch, program=self.prog.name, ops=ops, epochs=epochs,
            device_cycles_per_microbatch=int(device_cycles),
            host_input_cycles_per_microbatch=int(math.ceil(in_cycles)),
            host_output_cycles_per_microbatch=int(math.ceil(out_cycles)), host_overlapped=overlapped,
            host_binary_cycles_per_microbatch=int(math.ceil(bin_cycles)),
            cycles_per_microbatch=int(math.ceil(cycles)), seconds_per_microbatch=seconds,
            samples_per_sec=self.microbatch / seconds if seconds > 0 else float("inf"),
            latency_s=latency / self.clock,
            math_utilization=ideal / total_core_cycles if total_core_cycles else 0.0,
            core_utilization=busy / total_core_cycles if total_core_cycles else 0.0,
            flops_per_sample=flops_per_sample,
            grid_size=(int(self.device.grid_rows), int(self.device.grid_cols)), config=self.cfg)


def estimate(netlist: Netlist, device: Any = None, microbatch: Optional[int] = None,
             config: Optional[PerfConfig] = None, *, program: Optional[str] = None,
             temporal_epochs: Optional[Mapping[str, int]] = None) -> PerfReport:
    """Model how fast ``netlist`` runs on ``device``.

    ``device`` is a :class:`~pybuda.arch.DeviceDescriptor`, a preset name (``wh_n150`` …) or None for
    the unharvested die of the netlist's arch. ``microbatch`` is the number of samples one iteration of
    the program's microbatch loop processes; by default the ``input_count`` of the first graph fed by the
    host (passing another value scales every ``input_count``: a what-if that keeps the placement).
    ``config`` holds the model's constants (:class:`PerfConfig`). ``program`` picks a program (default:
    the first that executes a graph); ``temporal_epochs`` maps graph names to temporal epoch indices when
    the default grouping (consecutive graphs on distinct chips run concurrently) is not wanted.

    Raises :class:`~pybuda.errors.ConfigError` for a device whose arch differs from the netlist's, and
    :class:`~pybuda.errors.NetlistError` for a netlist with nothing to run.
    """
    if not isinstance(netlist, Netlist):
        raise ConfigError(f"estimate() needs a pybuda.netlist.Netlist, got {type(netlist).__name__}")
    cfg = config if config is not None else PerfConfig()
    if not isinstance(cfg, PerfConfig):
        raise ConfigError(f"config must be a PerfConfig, got {type(cfg).__name__}")
    dev = _resolve_device(netlist, device)
    if not _arch_matches(netlist.arch, dev):
        raise ConfigError(f"netlist targets {netlist.arch}, device {getattr(dev, 'name', dev)} is "
                          f"{getattr(dev.arch, 'value', dev.arch)}")
    max_chip = max((_chip_of(g.target_device) for g in netlist.graphs.values()), default=0)
    if max_chip >= int(getattr(dev, "chip_count", 1)):
        raise ConfigError(f"netlist uses chip {max_chip} but {getattr(dev, 'name', 'the device')} has "
                          f"{getattr(dev, 'chip_count', 1)} chip(s)")
    return _Estimator(netlist, dev, microbatch, cfg, program, temporal_epochs).run()


def estimate_compiled(results: Any, microbatch: Optional[int] = None, config: Optional[PerfConfig] = None) -> PerfReport:
    """:func:`estimate` for a compile's results (:class:`pybuda.passes.pipeline.CompileResults`): its netlist
    on its device, with the placer's temporal epochs when the netlist's graphs are the placer's epochs
    (graphs named ``<epoch_type>_<global_epoch>``, as the netlist generator names them)."""
    netlist = getattr(results, "netlist", None)
    if netlist is None:
        raise ConfigError("the compile results hold no netlist (compile to GENERATE_NETLIST or further)")
    temporal: Optional[Dict[str, int]] = None
    placement = getattr(results, "placer_solution", None)
    if placement is not None and getattr(placement, "epochs", None):
        names = {f"{e.epoch_type}_{e.global_epoch}": int(e.temporal_epoch) for e in placement.epochs}
        if set(names) == set(netlist.graphs):
            temporal = names
    return estimate(netlist, getattr(results, "device", None), microbatch=microbatch, config=config,
                    temporal_epochs=temporal)
