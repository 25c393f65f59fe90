"""The performance model's parameters: :class:`PerfConfig` (every constant beyond cost.py's per-op
formulas, with its source) and :data:`BOUNDS`, the names of what can bound an op. Re-exported by
:mod:`pybuda.perf.model`, which documents the model."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict

from pybuda.perf import cost

KiB = 1024

#: The names a ``bound`` field can take, in tie-break order (the kernel wins a tie).
BOUNDS = ("kernel", "noc", "dram", "pcie", "eth")


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PerfConfig:
    """The constants of the performance model beyond the per-op formulas of :mod:`pybuda.perf.cost`.

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
    #: Every DRAM queue buffer is read and written through one NoC endpoint ("subchannel") of its channel: its
    #: ``read_ports`` / ``write_ports`` entry picks it (NBS §1.2); a Wormhole channel has 3 (NBS §5.1;
    #: perf_calibration §2.3: 18 endpoints in 6 controllers). tt-npe's Wormhole B0 model gives a DRAM
    #: endpoint 23.2 B/cycle of NoC injection (read data) and 24.0 B/cycle of absorption (write data)
    #: (NBS §6.3, perf_calibration §2.3), below the 2 × 19 GiB/s ≈ 40.8 B/cycle of the controller behind it
    #: (NBS §5.4, measured), and PyBuda's balancer capped a Wormhole DRAM reader at an observed 20.4 B/cycle
    #: (NBS §5.4). So an epoch's streamed bytes per input on one endpoint bound every op that reads or writes
    #: through it (``_Estimator._endpoint_cycles``), besides its channel's controller rate. NoC and AI clock
    #: are one clock, so the limits are per AI cycle; a Grayskull channel has one endpoint and its 9.4
    #: B/cycle controller is slower than it (no change there).
    dram_read_endpoint_bytes_per_cycle: float = 23.2
    dram_write_endpoint_bytes_per_cycle: float = 24.0
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


