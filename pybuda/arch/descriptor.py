"""Device descriptors: what one Tenstorrent card looks like to the compiler and the simulator.

A :class:`DeviceDescriptor` holds the logical worker grid after harvesting, the mapping from logical
core coordinates to NoC coordinates, L1 and Dest sizes, DRAM channels and bandwidths, NoC/PCIe/Ethernet
bandwidths, the AI clock and the matrix-engine throughput. Numbers come from
``reference/netlist_backend_spec.md`` §5 and ``reference/perf_calibration.md`` §2; each field's
docstring says where, and Blackhole numbers that are assumptions say so.

Presets (``device_config``): ``gs_e75``, ``gs_e150``, ``wh_n150``, ``wh_n300``, ``bh_p150`` and
TT-Buda's ``galaxy``. Build one with :func:`get_device_descriptor`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from pybuda.arch.tiles import DEFAULT_TILE_DIM, LEGAL_TILE_DIMS
from pybuda.arch.types import BackendDevice
from pybuda.errors import ConfigError
from pybuda.dtypes import DataFormat, MathFidelity

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

XY = Tuple[int, int]

# ---------------------------------------------------------------------------------------------------
# Arch names as netlists spell them
# ---------------------------------------------------------------------------------------------------

#: Every ``devices.arch`` value a netlist may carry (matched case-insensitively). ``wormhole`` is the
#: pre-production A0 silicon; it parses, but there is no descriptor for it.
NETLIST_ARCH_NAMES: Tuple[str, ...] = ("grayskull", "wormhole", "wormhole_b0", "blackhole")


def netlist_arch_name(arch: Union[BackendDevice, str]) -> str:
    """The netlist ``devices.arch`` string of an arch (``grayskull``, ``wormhole_b0``, ``blackhole``)."""
    if isinstance(arch, str):
        arch = arch_from_netlist_name(arch)
    return arch.value


def arch_from_netlist_name(name: str) -> BackendDevice:
    """The :class:`BackendDevice` for a netlist arch string; ``wormhole`` (A0) maps to Wormhole_B0.

    Raises ConfigError for an unknown name."""
    if not isinstance(name, str) or name.lower() not in NETLIST_ARCH_NAMES:
        raise ConfigError(f"unknown arch {name!r}; expected one of {list(NETLIST_ARCH_NAMES)}")
    return BackendDevice.from_string(name)


# ---------------------------------------------------------------------------------------------------
# Per-arch silicon facts (before harvesting)
# ---------------------------------------------------------------------------------------------------

#: Logical harvest index -> NoC row (GS, WH) or NoC column (BH): bit i of a harvesting mask removes
#: this row/column. GS/WH from netlist_backend_spec §5.1; BH from tt-umd's blackhole implementation
#: (Blackhole harvests whole Tensix *columns*).
HARVEST_NOC_ROWS: Dict[BackendDevice, Tuple[int, ...]] = {
    BackendDevice.Grayskull: (5, 7, 4, 8, 3, 9, 2, 10, 1, 11),
    BackendDevice.Wormhole_B0: (11, 1, 10, 2, 9, 3, 8, 4, 7, 5),
}
HARVEST_NOC_COLS: Dict[BackendDevice, Tuple[int, ...]] = {
    BackendDevice.Blackhole: (1, 16, 2, 15, 3, 14, 4, 13, 5, 12, 6, 11, 7, 10),
}


@dataclass(frozen=True)
class DramChannel:
    """One DRAM channel: its index in netlist ``dram: [[channel, addr]]``, its NoC endpoints
    ("subchannels", the ``read_ports``/``write_ports`` index into them) and its capacity."""

    index: int
    noc_endpoints: Tuple[XY, ...]
    size_bytes: int


@dataclass(frozen=True)
class _ArchSilicon:
    """Unharvested die layout and the numbers shared by every card of an arch."""

    noc_grid: XY
    worker_xs: Tuple[int, ...]
    worker_ys: Tuple[int, ...]
    dram: Tuple[Tuple[XY, ...], ...]
    dram_channel_size: int
    eth: Tuple[XY, ...]
    pcie: Tuple[XY, ...]
    arc: Tuple[XY, ...]
    l1_size: int
    eth_l1_size: int
    dram_blocks_per_channel: int
    dram_bw_block_theoretical_gib: float
    dram_bw_block_measured_gib: float
    noc_bytes_per_cycle: int
    pcie_bytes_per_s: float
    eth_link_gib_per_s: float
    host_memory_channels: int
    fpu_flops_per_cycle: int


def _xy(text: str) -> XY:
    x, y = text.split("-")
    return (int(x), int(y))


def _xys(text: str) -> Tuple[XY, ...]:
    return tuple(_xy(t) for t in text.split())


_SILICON: Dict[BackendDevice, _ArchSilicon] = {
    # grayskull_120_arch.yaml (spec §5.1, §5.4); FPU rate from perf_calibration §2.2 (2304 FLOP/cycle).
    BackendDevice.Grayskull: _ArchSilicon(
        noc_grid=(13, 12),
        worker_xs=tuple(range(1, 13)),
        worker_ys=(1, 2, 3, 4, 5, 7, 8, 9, 10, 11),
        dram=tuple((xy,) for xy in _xys("1-0 1-6 4-0 4-6 7-0 7-6 10-0 10-6")),
        dram_channel_size=1 * GiB,
        eth=(),
        pcie=_xys("0-4"),
        arc=_xys("0-2"),
        l1_size=1 * MiB,
        eth_l1_size=0,
        dram_blocks_per_channel=1,
        dram_bw_block_theoretical_gib=12.8,
        dram_bw_block_measured_gib=10.5,
        noc_bytes_per_cycle=32,
        pcie_bytes_per_s=32e9,  # PCIe 4.0 x16, per direction
        eth_link_gib_per_s=0.0,
        host_memory_channels=1,
        fpu_flops_per_cycle=2304,
    ),
    # wormhole_b0_80_arch.yaml (spec §5.1, §5.4); ISA MatrixUnit.md: MVMUL = 4096 FLOP/cycle at LoFi.
    BackendDevice.Wormhole_B0: _ArchSilicon(
        noc_grid=(10, 12),
        worker_xs=(1, 2, 3, 4, 6, 7, 8, 9),
        worker_ys=(1, 2, 3, 4, 5, 7, 8, 9, 10, 11),
        dram=(
            _xys("0-0 0-1 0-11"), _xys("0-5 0-6 0-7"), _xys("5-0 5-1 5-11"),
            _xys("5-2 5-9 5-10"), _xys("5-3 5-4 5-8"), _xys("5-5 5-6 5-7"),
        ),
        dram_channel_size=2 * GiB,
        eth=_xys("9-0 1-0 8-0 2-0 7-0 3-0 6-0 4-0 9-6 1-6 8-6 2-6 7-6 3-6 6-6 4-6"),
        pcie=_xys("0-3"),
        arc=_xys("0-10"),
        l1_size=1_499_136,
        eth_l1_size=256 * KiB,
        dram_blocks_per_channel=2,
        dram_bw_block_theoretical_gib=24.0,
        dram_bw_block_measured_gib=19.0,
        noc_bytes_per_cycle=32,
        pcie_bytes_per_s=32e9,
        eth_link_gib_per_s=12.5,
        host_memory_channels=4,
        fpu_flops_per_cycle=4096,
    ),
    # Blackhole: tt-budabackend device/blackhole_10x14.yaml and tt-metal's blackhole_140_arch.yaml for the
    # layout; docs.tenstorrent.com p150a spec sheet for cores/clock/memory. ASSUMPTIONS (no BBE runtime
    # params exist for BH): FPU rate as WH (140 cores × 1.35 GHz × 4096 = 774 TF, the published 8-bit
    # peak); 2 GDDR6 blocks per channel at 32 GB/s (512 GB/s / 8 channels), measured = 92% as on WH;
    # NoC 64 B/cycle (tt-npe models 60.9 B/cycle per link); Ethernet 400 Gb/s per link; 4 host channels.
    BackendDevice.Blackhole: _ArchSilicon(
        noc_grid=(17, 12),
        worker_xs=(1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16),
        worker_ys=tuple(range(2, 12)),
        dram=(
            _xys("0-0 0-1 0-11"), _xys("0-2 0-10 0-3"), _xys("0-9 0-4 0-8"), _xys("0-5 0-7 0-6"),
            _xys("9-0 9-1 9-11"), _xys("9-2 9-10 9-3"), _xys("9-9 9-4 9-8"), _xys("9-5 9-7 9-6"),
        ),
        dram_channel_size=4_278_190_080,
        eth=_xys("1-1 16-1 2-1 15-1 3-1 14-1 4-1 13-1 5-1 12-1 6-1 11-1 7-1 10-1"),
        pcie=_xys("2-0 11-0"),
        arc=_xys("8-0"),
        l1_size=1536 * KiB,
        eth_l1_size=512 * KiB,
        dram_blocks_per_channel=2,
        dram_bw_block_theoretical_gib=32e9 / GiB,
        dram_bw_block_measured_gib=0.92 * 32e9 / GiB,
        noc_bytes_per_cycle=64,
        pcie_bytes_per_s=64e9,  # PCIe 5.0 x16
        eth_link_gib_per_s=400e9 / 8 / GiB,
        host_memory_channels=4,
        fpu_flops_per_cycle=4096,
    ),
}

# L1 map shared by all archs (spec §5.3): firmware + overlay end at DATA_BUFFER_SPACE_BASE = 204 KiB,
# net2pipe + pipegen blobs take another 256 KiB; PyBuda keeps a further 100 KiB for DRAM-IO buffers.
L1_DATA_BUFFER_BASE = 204 * KiB
L1_PIPEGEN_RESERVED = 256 * KiB
L1_DRAM_IO_RESERVED = 100 * KiB

# Dest holds 16 tiles of 16-bit data; with half-sync double buffering an op may use 8 (spec §5.1).
DEST_TILES_16BIT = 16


# ---------------------------------------------------------------------------------------------------
# The descriptor
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceDescriptor:
    """One card (one or more chips of the same arch) as the compiler and simulator see it.

    Coordinates: a *logical* worker core is ``(row, col)`` in the harvested worker grid, which is what a
    netlist's ``grid_loc`` indexes; its *NoC* coordinate is ``(x, y)`` on the chip's network grid, skipping
    DRAM, Ethernet, PCIe and ARC rows/columns and harvested rows (spec §5.1).
    """

    #: Preset name (``wh_n150`` …) or ``<arch>`` for a descriptor built from an arch alone.
    name: str
    arch: BackendDevice
    #: Chips on the card/system; all have the same harvesting here.
    chip_count: int
    #: AI (Tensix) clock in Hz: GS e150 1.2 GHz, e75/WH 1.0 GHz, BH p150 1.35 GHz.
    aiclk_hz: float
    #: NoC grid size (x, y).
    noc_grid: XY
    #: NoC columns (x) holding workers, in logical-column order (after column harvesting on BH).
    worker_noc_xs: Tuple[int, ...]
    #: NoC rows (y) holding workers, in logical-row order (after row harvesting on GS/WH).
    worker_noc_ys: Tuple[int, ...]
    #: The harvesting mask as given (bit i = logical harvest index i).
    harvesting_mask: int
    #: NoC rows removed by harvesting (GS/WH), sorted.
    harvested_noc_rows: Tuple[int, ...]
    #: NoC columns removed by harvesting (BH), sorted.
    harvested_noc_cols: Tuple[int, ...]
    dram_channels: Tuple[DramChannel, ...]
    eth_cores: Tuple[XY, ...]
    pcie_cores: Tuple[XY, ...]
    arc_cores: Tuple[XY, ...]
    #: Worker L1 bytes: GS 1 MiB, WH 1,499,136 (1464 KiB), BH 1536 KiB.
    l1_size_bytes: int
    #: Firmware/overlay region at the bottom of L1 (DATA_BUFFER_SPACE_BASE, 204 KiB).
    l1_data_buffer_base_bytes: int
    #: net2pipe + pipegen blobs (256 KiB).
    l1_pipegen_reserved_bytes: int
    #: PyBuda's extra reservation for DRAM-IO buffers (100 KiB).
    l1_dram_io_reserved_bytes: int
    eth_l1_size_bytes: int
    #: Dest register capacity in 16-bit tiles (half is usable per op with half-sync).
    dest_tiles_16bit: int
    #: GDDR6/LPDDR blocks behind one channel (GS 1, WH 2).
    dram_blocks_per_channel: int
    #: Per-block DRAM bandwidth in GiB/s as runtime_params.cpp states it (GS 12.8, WH 24).
    dram_bw_per_block_theoretical_gib_s: float
    #: Per-block DRAM bandwidth measured (GS 10.5, WH 19 GiB/s).
    dram_bw_per_block_measured_gib_s: float
    #: NoC link width in bytes per AI-clock cycle (32 on GS/WH).
    noc_bytes_per_cycle: int
    #: Host link, theoretical bytes/s per direction.
    pcie_bytes_per_s: float
    #: Observed PCIe bytes per cycle PyBuda's balancer used (policy_utils.cpp).
    pcie_bytes_per_cycle_observed: float
    #: Ethernet bandwidth per link in GiB/s (WH 12.5), before derating.
    eth_link_gib_per_s: float
    #: Derating the backend applied to Ethernet links (×0.9).
    eth_derate: float
    host_memory_channels: int
    #: Dense matmul FLOP per cycle per core at LoFi (WH 4096; GS 2304); divided by fidelity phases.
    fpu_flops_per_cycle: int
    #: Tile shapes this arch accepts in ``tile_dim`` (GS: 32×32 only).
    supported_tile_dims: Tuple[XY, ...]
    #: Backend limits from runtime_params.cpp.
    max_dram_in_queues: int = 39
    max_dram_out_queues: int = 8
    #: Board-spec TFLOPS (FP8 / FP16 / BLOCKFP8) for presets, for reference and tests.
    published_tflops: Tuple[Tuple[str, float], ...] = field(default=())

    # -- grid ------------------------------------------------------------------------------------
    @property
    def grid_rows(self) -> int:
        """Rows of the logical worker grid after harvesting."""
        return len(self.worker_noc_ys)

    @property
    def grid_cols(self) -> int:
        """Columns of the logical worker grid after harvesting."""
        return len(self.worker_noc_xs)

    @property
    def grid_size(self) -> Tuple[int, int]:
        """(rows, cols) of the logical worker grid of one chip."""
        return (self.grid_rows, self.grid_cols)

    @property
    def cores_per_chip(self) -> int:
        """Usable worker cores of one chip."""
        return self.grid_rows * self.grid_cols

    @property
    def total_cores(self) -> int:
        """Usable worker cores of all chips."""
        return self.cores_per_chip * self.chip_count

    @property
    def chip_link(self) -> str:
        """How data moves between chips: ``"ethernet"`` (Wormhole, Blackhole: chip-to-chip links) or
        ``"pcie"`` (Grayskull has no Ethernet: several chips are separate cards in one host, and data between
        them goes through host memory queues over PCIe)."""
        return "ethernet" if self.eth_cores else "pcie"

    def logical_to_noc(self, row: int, col: int) -> XY:
        """NoC (x, y) of logical worker core (row, col). Example: WH [7, 6] -> (8, 9)."""
        if not (0 <= row < self.grid_rows and 0 <= col < self.grid_cols):
            raise ConfigError(f"logical core [{row}, {col}] is outside the {self.grid_rows}x{self.grid_cols} grid")
        return (self.worker_noc_xs[col], self.worker_noc_ys[row])

    def noc_to_logical(self, x: int, y: int) -> Tuple[int, int]:
        """Logical (row, col) of the worker at NoC (x, y); ConfigError if it is not a (usable) worker."""
        if x not in self.worker_noc_xs or y not in self.worker_noc_ys:
            raise ConfigError(f"NoC core {x}-{y} is not a usable worker on {self.name}")
        return (self.worker_noc_ys.index(y), self.worker_noc_xs.index(x))

    def logical_to_translated(self, row: int, col: int) -> XY:
        """Wormhole NoC-translated coordinate (workers appear at 18-25 × 18-27 on harvested parts)."""
        if self.arch != BackendDevice.Wormhole_B0:
            raise ConfigError("NoC coordinate translation is modelled for Wormhole B0 only")
        self.logical_to_noc(row, col)  # range check
        return (18 + col, 18 + row)

    def worker_cores(self) -> List[Tuple[int, int]]:
        """All logical worker cores (row, col) of one chip, row-major."""
        return [(r, c) for r in range(self.grid_rows) for c in range(self.grid_cols)]

    # -- L1 / Dest -------------------------------------------------------------------------------
    @property
    def l1_op_buffer_budget_bytes(self) -> int:
        """L1 left for op buffers after firmware and pipegen (OP_BUF_SPACE_SIZE): GS 564 KiB, WH 1004 KiB."""
        return self.l1_size_bytes - self.l1_data_buffer_base_bytes - self.l1_pipegen_reserved_bytes

    @property
    def l1_pybuda_budget_bytes(self) -> int:
        """What PyBuda's balancer lets op buffers use: the op-buffer budget minus 100 KiB of DRAM-IO."""
        return self.l1_op_buffer_budget_bytes - self.l1_dram_io_reserved_bytes

    def max_ublock_tiles(self, acc_df: DataFormat = DataFormat.Float16_b) -> int:
        """Largest ublock (rt·ct tiles) an op may use: half of Dest, halved again for 32-bit accumulation."""
        half = self.dest_tiles_16bit // 2
        return half // 2 if DataFormat(acc_df) in (DataFormat.Float32, DataFormat.Int32) else half

    # -- DRAM / links ----------------------------------------------------------------------------
    @property
    def dram_channel_count(self) -> int:
        """DRAM channels per chip (netlist channel ids are 0..count-1)."""
        return len(self.dram_channels)

    @property
    def dram_bytes_per_chip(self) -> int:
        """DRAM capacity of one chip in bytes."""
        return sum(ch.size_bytes for ch in self.dram_channels)

    @property
    def dram_channel_bw_theoretical(self) -> float:
        """Bytes/s of one channel, theoretical (all its blocks)."""
        return self.dram_bw_per_block_theoretical_gib_s * GiB * self.dram_blocks_per_channel

    @property
    def dram_channel_bw_measured(self) -> float:
        """Bytes/s of one channel, as measured on silicon."""
        return self.dram_bw_per_block_measured_gib_s * GiB * self.dram_blocks_per_channel

    @property
    def dram_bytes_per_cycle_measured(self) -> float:
        """Measured bytes per AI-clock cycle of one channel."""
        return self.dram_channel_bw_measured / self.aiclk_hz

    @property
    def noc_bytes_per_s(self) -> float:
        """Bytes/s of one NoC link at the AI clock."""
        return self.noc_bytes_per_cycle * self.aiclk_hz

    @property
    def eth_link_bytes_per_s(self) -> float:
        """Usable Ethernet bytes/s per link (derated); 0 on Grayskull."""
        return self.eth_link_gib_per_s * GiB * self.eth_derate

    # -- compute ---------------------------------------------------------------------------------
    def flops_per_cycle_per_core(self, fidelity: Union[MathFidelity, str] = MathFidelity.LoFi) -> float:
        """Dense matmul FLOP per cycle per core: fpu rate / fidelity phases (LoFi 1 … HiFi4 4)."""
        return self.fpu_flops_per_cycle / MathFidelity.from_json(fidelity).phases

    def peak_tflops(self, fidelity: Union[MathFidelity, str] = MathFidelity.LoFi) -> float:
        """Theoretical matmul TFLOP/s of all chips at ``fidelity`` (n150 HiFi4 ≈ 73.7, HiFi2 ≈ 147.5)."""
        return self.total_cores * self.aiclk_hz * self.flops_per_cycle_per_core(fidelity) / 1e12

    @property
    def published(self) -> Dict[str, float]:
        """Board-spec TFLOPS as a dict (empty for non-preset descriptors)."""
        return dict(self.published_tflops)


# ---------------------------------------------------------------------------------------------------
# Harvesting
# ---------------------------------------------------------------------------------------------------


def harvested_noc_rows(arch: Union[BackendDevice, str], harvesting_mask: int) -> Tuple[int, ...]:
    """NoC rows removed by ``harvesting_mask`` (bit i = logical harvest index i); () for Blackhole."""
    arch = _as_arch(arch)
    _check_mask(arch, harvesting_mask)
    table = HARVEST_NOC_ROWS.get(arch, ())
    return tuple(sorted(table[i] for i in range(len(table)) if harvesting_mask >> i & 1))


def harvested_noc_cols(arch: Union[BackendDevice, str], harvesting_mask: int) -> Tuple[int, ...]:
    """NoC columns removed by ``harvesting_mask`` on Blackhole; () for GS/WH."""
    arch = _as_arch(arch)
    _check_mask(arch, harvesting_mask)
    table = HARVEST_NOC_COLS.get(arch, ())
    return tuple(sorted(table[i] for i in range(len(table)) if harvesting_mask >> i & 1))


def harvesting_mask_from_noc_rows(arch: Union[BackendDevice, str], noc_rows: Sequence[int]) -> int:
    """The mask that harvests the given NoC rows (GS/WH). Rows holding DRAM/ETH (0, 6) or outside the
    worker area cannot be harvested: ConfigError."""
    arch = _as_arch(arch)
    table = HARVEST_NOC_ROWS.get(arch)
    if table is None:
        raise ConfigError(f"{arch.value} harvests columns, not rows")
    mask = 0
    for row in noc_rows:
        if row not in table:
            raise ConfigError(
                f"NoC row {row} cannot be harvested on {arch.value}; legal rows are {sorted(table)}")
        mask |= 1 << table.index(row)
    return mask


def _check_mask(arch: BackendDevice, mask: int) -> None:
    table = HARVEST_NOC_ROWS.get(arch) or HARVEST_NOC_COLS.get(arch) or ()
    if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
        raise ConfigError(f"harvesting_mask must be a non-negative int, got {mask!r}")
    if mask >> len(table):
        bad = [i for i in range(len(table), mask.bit_length()) if mask >> i & 1]
        raise ConfigError(
            f"harvesting_mask 0x{mask:x} sets bit(s) {bad}; {arch.value} has harvest indices 0..{len(table) - 1} "
            f"(NoC {'columns' if arch in HARVEST_NOC_COLS else 'rows'} {list(table)})")
    if table and mask == (1 << len(table)) - 1:
        raise ConfigError(f"harvesting_mask 0x{mask:x} would harvest every worker row/column")


def _as_arch(arch: Union[BackendDevice, str]) -> BackendDevice:
    if isinstance(arch, BackendDevice):
        return arch
    if isinstance(arch, str):
        return BackendDevice.from_string(arch)
    raise ConfigError(f"arch must be a BackendDevice or a string, got {arch!r}")


# ---------------------------------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Preset:
    arch: BackendDevice
    aiclk_hz: float
    harvesting_mask: int
    chip_count: int
    published_tflops: Tuple[Tuple[str, float], ...]
    doc: str


#: Card presets. The harvested rows of a real card vary chip by chip; the masks below are
#: representative choices (e75: NoC rows 5 and 7; n150: row 11, as in wormhole_b0_9x8_harvested.yaml;
#: n300: rows 11 and 1), which is what a golden/offline compile can know.
PRESETS: Dict[str, _Preset] = {
    "gs_e75": _Preset(BackendDevice.Grayskull, 1.0e9, 0b11, 1,
                      (("FP8", 221.0), ("FP16", 55.0), ("BLOCKFP8", 55.0)),
                      "Grayskull e75: 96 usable cores (2 rows harvested) at 1.0 GHz"),
    "gs_e150": _Preset(BackendDevice.Grayskull, 1.2e9, 0, 1,
                       (("FP8", 332.0), ("FP16", 83.0), ("BLOCKFP8", 83.0)),
                       "Grayskull e150: 120 cores (10x12) at 1.2 GHz"),
    "wh_n150": _Preset(BackendDevice.Wormhole_B0, 1.0e9, 0b1, 1,
                       (("FP8", 262.0), ("FP16", 74.0), ("BLOCKFP8", 148.0)),
                       "Wormhole B0 n150: 72 cores (9x8, NoC row 11 harvested) at 1.0 GHz"),
    "wh_n300": _Preset(BackendDevice.Wormhole_B0, 1.0e9, 0b11, 2,
                       (("FP8", 466.0), ("FP16", 131.0), ("BLOCKFP8", 262.0)),
                       "Wormhole B0 n300: 2 chips x 64 cores (8x8, NoC rows 11 and 1 harvested), Ethernet-linked"),
    # 140 Tensix at up to 1.35 GHz per the p150a spec sheet (later firmware enables 120; use
    # harvesting_mask=0b11 for that). 774 TF = 140 x 1.35 GHz x 4096: the published 8-bit peak.
    "bh_p150": _Preset(BackendDevice.Blackhole, 1.35e9, 0, 1,
                       (("BLOCKFP8", 774.0),),
                       "Blackhole p150: 140 cores (10x14) at 1.35 GHz, 32 GB GDDR6 (assumptions noted)"),
    # TT-Buda's Galaxy: 32 unharvested Wormhole B0 chips (4x8) — an assumption (2,560 Tensix).
    "galaxy": _Preset(BackendDevice.Wormhole_B0, 1.0e9, 0, 32, (),
                      "Wormhole B0 Galaxy: 32 chips x 80 cores (assumed unharvested)"),
}


def device_config_names() -> List[str]:
    """The accepted ``device_config`` preset names."""
    return list(PRESETS)


def get_device_descriptor(arch: Union[BackendDevice, str, None] = None, device_config: Optional[str] = None,
                          harvesting_mask: int = 0, num_chips: int = 1) -> DeviceDescriptor:
    """Build the descriptor of a device.

    ``device_config`` picks a preset (``gs_e75``, ``gs_e150``, ``wh_n150``, ``wh_n300``, ``bh_p150``,
    ``galaxy``); ``arch`` may then be omitted, and must match if given. Without a preset, ``arch`` alone
    gives the unharvested die (GS 10x12 at 1.2 GHz, WH 10x8 at 1.0 GHz, BH 10x14 at 1.35 GHz).
    A non-zero ``harvesting_mask`` replaces the preset's mask (0 keeps it, so a config default of 0 never
    un-harvests a card); ``num_chips`` other than 1 replaces the preset's chip count (several Grayskull
    chips are that many cards in one host, linked over PCIe: :attr:`DeviceDescriptor.chip_link`).
    Raises ConfigError for an unknown preset, a mismatched arch, an illegal mask or chip count.
    """
    preset: Optional[_Preset] = None
    if device_config is not None:
        preset = PRESETS.get(str(device_config).lower())
        if preset is None:
            raise ConfigError(f"unknown device_config {device_config!r}; expected one of {device_config_names()}")
        if arch is not None and _as_arch(arch) != preset.arch:
            raise ConfigError(f"device_config {device_config!r} is {preset.arch.value}, not {_as_arch(arch).value}")
        arch_e = preset.arch
    elif arch is None:
        raise ConfigError("get_device_descriptor needs an arch or a device_config")
    else:
        arch_e = _as_arch(arch)
    if isinstance(num_chips, bool) or not isinstance(num_chips, int) or num_chips < 1:
        raise ConfigError(f"num_chips must be an int >= 1, got {num_chips!r}")

    si = _SILICON[arch_e]
    mask = harvesting_mask if harvesting_mask else (preset.harvesting_mask if preset else 0)
    chips = num_chips if num_chips != 1 else (preset.chip_count if preset else 1)
    rows_out = harvested_noc_rows(arch_e, mask)
    cols_out = harvested_noc_cols(arch_e, mask)
    clock = preset.aiclk_hz if preset else {BackendDevice.Grayskull: 1.2e9, BackendDevice.Wormhole_B0: 1.0e9,
                                            BackendDevice.Blackhole: 1.35e9}[arch_e]
    return DeviceDescriptor(
        name=str(device_config).lower() if preset else arch_e.value,
        arch=arch_e,
        chip_count=chips,
        aiclk_hz=clock,
        noc_grid=si.noc_grid,
        worker_noc_xs=tuple(x for x in si.worker_xs if x not in cols_out),
        worker_noc_ys=tuple(y for y in si.worker_ys if y not in rows_out),
        harvesting_mask=mask,
        harvested_noc_rows=rows_out,
        harvested_noc_cols=cols_out,
        dram_channels=tuple(DramChannel(i, eps, si.dram_channel_size) for i, eps in enumerate(si.dram)),
        eth_cores=si.eth,
        pcie_cores=si.pcie,
        arc_cores=si.arc,
        l1_size_bytes=si.l1_size,
        l1_data_buffer_base_bytes=L1_DATA_BUFFER_BASE,
        l1_pipegen_reserved_bytes=L1_PIPEGEN_RESERVED,
        l1_dram_io_reserved_bytes=L1_DRAM_IO_RESERVED,
        eth_l1_size_bytes=si.eth_l1_size,
        dest_tiles_16bit=DEST_TILES_16BIT,
        dram_blocks_per_channel=si.dram_blocks_per_channel,
        dram_bw_per_block_theoretical_gib_s=si.dram_bw_block_theoretical_gib,
        dram_bw_per_block_measured_gib_s=si.dram_bw_block_measured_gib,
        noc_bytes_per_cycle=si.noc_bytes_per_cycle,
        pcie_bytes_per_s=si.pcie_bytes_per_s,
        pcie_bytes_per_cycle_observed=24.0,
        eth_link_gib_per_s=si.eth_link_gib_per_s,
        eth_derate=0.9,
        host_memory_channels=si.host_memory_channels,
        fpu_flops_per_cycle=si.fpu_flops_per_cycle,
        supported_tile_dims=(DEFAULT_TILE_DIM,) if arch_e == BackendDevice.Grayskull else LEGAL_TILE_DIMS,
        published_tflops=preset.published_tflops if preset else (),
    )


def with_chips(desc: DeviceDescriptor, num_chips: int) -> DeviceDescriptor:
    """A copy of ``desc`` with another chip count (same per-chip layout). Chips without Ethernet
    (Grayskull) are separate cards in one host: :attr:`DeviceDescriptor.chip_link` is then ``"pcie"``."""
    if num_chips < 1:
        raise ConfigError(f"num_chips must be >= 1, got {num_chips}")
    return dataclasses.replace(desc, chip_count=num_chips)
