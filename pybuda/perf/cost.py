"""Per-op cycle estimates: the single source of truth for kernel cycles and data-movement bounds.

The balancer (legal op models, the NLP and Ribbon policies and their epoch estimates) and the performance model call
this module, so a change to a parameter changes every consumer at once.

Two parts:

* **Kernel cycles** (:func:`kernel_cycles`): the linear models BBE fitted to silicon sweeps
  (netlist_backend_spec §6.1; current versions Grayskull v2 and Wormhole B0 v3). The formulas live
  here; each op type's formula family and coefficients per arch live in its row of the device-op table
  (:mod:`pybuda.netlist.device_ops`), where every number names its source and values marked **[D]** are
  derived because the spec gives none (e.g. Grayskull ops missing from the GS v2 table use the WH B0 v3
  value; Blackhole, which has no BBE parameters, uses the WH B0 v3 rows).
* **Data-movement bounds** (:func:`op_cycle_breakdown`): per-core input and output bytes divided by the
  bandwidth of where they come from (NoC op-to-op pipe, DRAM channel, PCIe), spec §5.4 and §6.3/§6.4.
  ``op_cycles = max(kernel, input bytes / bandwidth, output bytes / bandwidth)``, as PyBuda's
  ``get_op_cycles_estimates`` does.

All estimates are cycles per core per *input* (one entry of the op's input queue, i.e. one sample of
the microbatch), clamped to ``[0, 2**30]`` (spec §6.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pybuda.arch.tiles import tile_size_bytes as _arch_tile_size_bytes
from pybuda.errors import NetlistError
from pybuda.netlist.model import fused_spec, fused_sub_ops
from pybuda.netlist.device_ops import CycleModel, find_device_op, ops_of_class
from pybuda.netlist.operands import sparse_table_tiles_per_core
from pybuda.perf import sparse
from pybuda.dtypes import DataFormat, MathFidelity

__all__ = [
    "CYCLES_CLAMP",
    "BandwidthContext",
    "CycleBreakdown",
    "DeviceBandwidth",
    "device_bandwidth",
    "tile_size_bytes",
    "fidelity_phases",
    "kernel_cycles",
    "input_tiles_per_core",
    "output_tiles_per_core",
    "op_cycle_breakdown",
    "op_cycles",
    "matmul_ideal_cycles",
    "epoch_overhead_cycles",
    "distinct_fetchers",
    "multicast_axis",
    "sparse_table_tiles_per_core",
    "operand_fetches",
    "dram_bytes_per_input",
    "op_costs",
]

CYCLES_CLAMP = 1 << 30  # spec §6.1: "The result is clamped to [0, 2^30]".

_TILE_BYTES: Dict[DataFormat, int] = {}


def tile_size_bytes(df: DataFormat) -> int:
    """Bytes of one packed 32x32 tile in ``df`` (header + exponents + data + padding; spec §2.1), from
    :func:`pybuda.arch.tiles.tile_size_bytes`, cached because the balancer asks millions of times.
    Formats without a tile size (Invalid) count as 16-bit."""
    size = _TILE_BYTES.get(df)
    if size is None:
        try:
            size = _arch_tile_size_bytes(df)
        except ValueError:
            size = _arch_tile_size_bytes(DataFormat.Float16_b)
        _TILE_BYTES[df] = size
    return size


def fidelity_phases(fidelity: MathFidelity) -> int:
    """The 1/2/3/4 fidelity factor F of the matmul formulas (LoFi, HiFi2, HiFi3, HiFi4; spec §4.6/§6.1)."""
    return MathFidelity(fidelity).phases


# --------------------------------------------------------------------------------------------------
# Parameters. Every op's coefficients (spec §6.1 GS v2 / WH B0 v3, or marked [D]) live in its row of the
# device-op table (pybuda.netlist.device_ops); this module holds the formulas and the arch-level numbers.
# --------------------------------------------------------------------------------------------------

# Ideal cycles of one 32x32x32 tile product per fidelity phase: 16 MVMULs on WH (spec §6.2); on GS
# 65536 FLOP / 2304 FLOP per cycle per core (perf_calibration §2.2) [D].
_IDEAL_TILE_MAC_CYCLES = {"grayskull": 65536.0 / 2304.0, "wormhole_b0": 16.0, "blackhole": 16.0}

_MATMUL_OPS = ops_of_class("matmul", "depthwise")


def _cycle_model(arch: str, op_type: str) -> CycleModel:
    """The op type's cycle model on ``arch``, from its device-op row. A type without a row is no netlist
    op (the validator rejects it); it is named in the error instead of being costed as something else."""
    row = find_device_op(op_type)
    if row is None:
        raise NetlistError("type", f"no cycle model for op type {op_type!r}: it has no row in "
                                   f"pybuda.netlist.device_ops")
    return row.cycles[arch]


def _arch_key(arch: Any) -> str:
    """Normalise an arch (BackendDevice, str, or a device descriptor) to grayskull|wormhole_b0|blackhole."""
    value = getattr(arch, "arch", arch)
    value = getattr(value, "value", value)
    key = str(value).lower()
    if key.startswith("grayskull") or key.startswith("gs"):
        return "grayskull"
    if key.startswith("blackhole") or key.startswith("bh"):
        return "blackhole"
    return "wormhole_b0"


def _binary_df_weight(dfs: Sequence[DataFormat]) -> float:
    """df_w of the binary formula: 2 for Float16/Float16_b, 4 for Float32, 1 otherwise (spec §6.1; ops
    whose row says ``df_scaled: False``, such as ``maximum``, always use 1). With mixed inputs the slowest
    (largest) weight is used [D]."""
    weight = 1.0
    for df in dfs:
        if df in (DataFormat.Float16, DataFormat.Float16_b):
            weight = max(weight, 2.0)
        elif df in (DataFormat.Float32,):
            weight = max(weight, 4.0)
    return weight


def _clamp(cycles: float) -> int:
    return int(min(max(cycles, 0.0), float(CYCLES_CLAMP)))


# --------------------------------------------------------------------------------------------------
# Kernel formulas
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Blocking:
    """The per-core blocking numbers every formula reads."""

    t: int
    mblock_m: int
    mblock_n: int
    ublock_rt: int
    ublock_ct: int
    m_k: int
    u_kt: int
    grid_r: int
    grid_c: int

    @property
    def ublocks(self) -> int:
        return self.mblock_m * self.mblock_n

    @property
    def tiles(self) -> int:
        return self.ublocks * self.ublock_rt * self.ublock_ct


def _blocking(op_model: Any) -> _Blocking:
    return _Blocking(
        t=max(1, int(op_model.t)), mblock_m=int(op_model.mblock[0]), mblock_n=int(op_model.mblock[1]),
        ublock_rt=int(op_model.ublock[0]), ublock_ct=int(op_model.ublock[1]),
        m_k=max(1, int(getattr(op_model, "m_k", 1))), u_kt=max(1, int(getattr(op_model, "u_kt", 1))),
        grid_r=int(op_model.grid_shape[0]), grid_c=int(op_model.grid_shape[1]))


def _unary_params(coefficients: Mapping[str, Any], attrs: Mapping[str, Any]) -> Tuple[float, float]:
    ub, tile = coefficients["ublock"], coefficients["tile"]
    if attrs.get("approximate_mode") and "approx_tile" in coefficients:
        tile = coefficients["approx_tile"]
    vector = attrs.get("vector")
    if vector in ("r", "c") and vector in coefficients.get("vector_tile", {}):
        tile = min(tile, coefficients["vector_tile"][vector])
    return ub, tile


def _unary_cycles(coefficients: Mapping[str, Any], attrs: Mapping[str, Any], b: _Blocking) -> float:
    """``t·(ub·ublock_weight + tiles·tile_weight)`` (spec §6.1, unary/SFPU; z=1, z_weight=0)."""
    ub_w, tile_w = _unary_params(coefficients, attrs)
    return b.t * (b.ublocks * ub_w + b.tiles * tile_w)


def _binary_cycles(coefficients: Mapping[str, Any], dfs: Sequence[DataFormat], b: _Blocking) -> float:
    """``t·(ub·ublock_weight + tiles·tile_weight·df_w)`` (spec §6.1, binary)."""
    df_w = _binary_df_weight(dfs) if coefficients["df_scaled"] else 1.0
    return b.t * (b.ublocks * coefficients["ublock"] + b.tiles * coefficients["tile"] * df_w)


def _reduce_cycles(coefficients: Mapping[str, Any], attrs: Mapping[str, Any], b: _Blocking) -> float:
    """Reduce r/c/z with the unary form ``t·z·(ub·ublock_weight + tiles·tile_weight + z_weight)``.

    The per-core work of a reduce is its *input*: the reduced dimension is K = m_k·u_kt tiles, so the
    output's ublocks and tiles are scaled by m_k and K [D]. For dim z the input has ``z`` slices per
    output slice (spec §6.1: z and z_weight apply to reduce-z only).
    """
    dim = str(attrs.get("dim", "r")).lower()
    if dim == "z":
        ub_w, tile_w, z_w = coefficients["z"]
        z = max(1, int(attrs.get("z", 1)))
        return b.t * z * (b.ublocks * ub_w + b.tiles * tile_w + z_w)
    ub_w, tile_w = coefficients[dim] if dim in ("r", "c") else coefficients["r"]
    k = b.m_k * b.u_kt
    return b.t * (b.ublocks * b.m_k * ub_w + b.tiles * k * tile_w)


def _splice_cycles(coefficients: Mapping[str, Any], b: _Blocking) -> float:
    """``t·(ub·ublock_weight + tiles·tile_weight)`` (spec §6.1, n-ary)."""
    return b.t * (b.ublocks * coefficients["ublock"] + b.tiles * coefficients["tile"])


def _wh_matmul_set(in_dfs: Sequence[DataFormat], acc_df: DataFormat, attrs: Mapping[str, Any]) -> str:
    """Which WH B0 v3 matmul parameter set applies: Int32 for integer math, BFP when input 0 is a
    block-float format (the unpacker's format), else FP16; ``l1_acc`` picks the L1-accumulate sets."""
    in0 = in_dfs[0] if in_dfs else DataFormat.Float16_b
    if acc_df == DataFormat.Int32 or in0.is_integer:
        return "int32"
    family = "bfp" if in0.is_bfp else "fp16"
    return f"l1_acc_{family}" if attrs.get("l1_acc") else family


def _matmul_cycles(model: CycleModel, in_dfs: Sequence[DataFormat], acc_df: DataFormat, fidelity: MathFidelity,
                   attrs: Mapping[str, Any], b: _Blocking) -> float:
    """Dense matmul: GS V1 or WH V2 (spec §6.1)."""
    f = fidelity_phases(fidelity)
    c = model.coefficients
    if model.formula == "matmul_v1":
        m_k_w, ub_w, tile_w = c["m_k"], c["ublock"], c["tile"]
        ub = b.ublocks
        return b.t * ((b.m_k - 1) * m_k_w + (b.m_k * ub) * ub_w
                      + (b.m_k * ub * b.u_kt * b.ublock_rt * b.ublock_ct) * tile_w * f)
    math_w, spill_w, unpack_ub_w, unpack_tile_w = c[_wh_matmul_set(in_dfs, acc_df, attrs)]
    big_u = b.m_k * b.mblock_m * b.mblock_n
    return b.t * (big_u * b.u_kt * b.ublock_rt * b.ublock_ct * f * math_w
                  + (b.m_k - 1) * b.mblock_m * b.mblock_n * b.ublock_rt * b.ublock_ct * spill_w
                  + big_u * unpack_ub_w
                  + big_u * b.u_kt * b.ublock_rt * (1 + b.ublock_ct) * unpack_tile_w)


def _sparse_products_per_core(attrs: Mapping[str, Any], b: _Blocking) -> int:
    """Index entries one core of a sparse matmul multiplies per input, for each of its output tile columns
    (``nz_tiles`` of :func:`pybuda.perf.sparse.sparse_work`). Zero blocks of ``m_k`` cost nothing: the
    kernel walks the index, not K (a convolution's im2col picker has ``m_k`` = the whole activation height
    while each output row touches only kernel-size rows)."""
    return sparse.sparse_work(attrs, b.t, b.mblock_m, b.m_k, b.grid_r).nz_tiles


def _sparse_matmul_cycles(model: CycleModel, fidelity: MathFidelity, attrs: Mapping[str, Any],
                          b: _Blocking) -> float:
    """Sparse ("identity") matmul: BBE's own sparse formulas (perf_lib/op_model), with its parameters
    (the op row's ``sparse`` coefficients) and the busiest core's counts (:mod:`pybuda.perf.sparse`).

    - **GS (V1)**: math per non-zero tile and output tile column (``tile·F``); reload of in1 per strip
      ublock and per non-zero ublock (plus once per output ublock with ``m_k > 1``); pack of every output
      tile twice and a wait per empty ublock; decode per non-zero tile, per strip ublock and per non-zero
      ublock. The strip ublocks are every (t, K block, output ublock).
    - **WH / BH (V2)**: decode per strip ublock (non-zero strips × ``mblock_m``), per non-zero ublock and per
      non-zero strip; math with tile decode per non-zero tile and output tile column, reload per
      non-zero ublock's output tiles when ``m_k > 1``, pack per output tile — the three measured per output
      ublock shape and ``u_kt`` (LoFi, or HiFi2 scaled 1.2 / 1.7 for HiFi3 / HiFi4).

    Small, narrow ublocks are expensive (one column: 335 cycles per product at ublock 1x1, against 26 for
    four or more columns), and so is a long K split into many strips."""
    w = sparse.sparse_work(attrs, b.t, b.mblock_m, b.m_k, b.grid_r)
    t, mm, mn, ur, uc = b.t, b.mblock_m, b.mblock_n, b.ublock_rt, b.ublock_ct
    c = model.coefficients["sparse"]
    if model.formula == "matmul_v1":
        strip_ublocks = t * b.m_k * mm
        nz_ublocks = w.nz_tiles // (t * ur * uc)  # BBE's V1 count: non-zero tiles in whole ublocks
        strip_ublocks = max(strip_ublocks, nz_ublocks)
        reload_ub = c["reload_config"] + c["reload"] * uc * ur
        math_c = w.nz_tiles * mn * uc * c["tile"] * fidelity_phases(fidelity)
        reload = (strip_ublocks * c["reload_wait_pop"] + nz_ublocks * reload_ub) * mn
        if b.m_k > 1:
            reload += mm * t * reload_ub * mn
        pack = c["pack_wait_push"] * (strip_ublocks - nz_ublocks) * mn + c["pack"] * 2 * t * mn * mm * uc * ur
        decode = (w.nz_tiles * c["nz_tile_decode"] * (2 + mn) + strip_ublocks * c["ublock_decode"]
                  + nz_ublocks * c["nz_ublock_decode"])
        return math_c + reload + pack + decode
    phases = fidelity_phases(fidelity)
    math_w, reload_w, pack_w = _sparse_stage_cycles(c["lofi" if phases == 1 else "hifi2"], ur, uc, b.u_kt)
    decode = (w.nz_strips * mm * c["ublock_decode"] + w.nz_ublocks * c["nz_ublock_decode"]
              + w.nz_strips * c["nz_strip_decode"])
    math_c = w.nz_tiles * mn * uc * math_w * c["fidelity"].get(phases, 1.0)
    reload = w.nz_ublocks * mn * uc * ur * reload_w if b.m_k > 1 else 0.0
    pack = t * mn * mm * uc * ur * pack_w
    return decode + math_c + reload + pack


def _sparse_stage_cycles(table: Mapping[Tuple[int, int, int], Tuple[int, int, int]], ur: int, uc: int,
                         u_kt: int) -> Tuple[int, int, int]:
    """The measured (math, reload, pack) cycles of the largest measured shape not above (ur, uc, u_kt),
    axis by axis (BBE's fallback: a shape between measurements is charged as the next smaller one)."""
    r = max(k[0] for k in table if k[0] <= ur)
    col = max(k[1] for k in table if k[0] == r and k[1] <= uc)
    kt = max(k[2] for k in table if k[:2] == (r, col) and k[2] <= u_kt)
    return table[(r, col, kt)]


def _fused_cycles(arch: str, op: Any, b: _Blocking, fused_ops: Optional[Mapping[Any, Any]]) -> float:
    """A fused op costs the sum of its sub-ops, each on the parent's per-core blocking (sub-ops inherit
    t and the output block from the parent op; spec §1.4). Sub-op m_k/u_kt attributes are honoured."""
    spec = fused_spec(op, fused_ops)
    if not spec:
        # Unknown schedule: charge one nop pass per input [D].
        return max(1, len(op.inputs)) * _unary_cycles(_cycle_model(arch, "nop").coefficients, {}, b)
    total = 0.0
    for sub in fused_sub_ops(spec):
        sub_type = str(sub.get("type", "nop"))
        sub_attrs = dict(sub.get("attributes", {}) or {})
        for key in ("m_k", "u_kt", "vector", "dim", "type_reduce", "approximate_mode", "z"):
            if key in sub and key not in sub_attrs:
                sub_attrs[key] = sub[key]
        if op.attrs.get("approximate_mode"):  # the fused op's flag holds for its SFPU sub-ops
            sub_attrs.setdefault("approximate_mode", True)
        sb = b
        if sub_type in _MATMUL_OPS or sub_type == "reduce":
            sb = _Blocking(b.t, b.mblock_m, b.mblock_n, b.ublock_rt, b.ublock_ct,
                           int(sub_attrs.get("m_k", 1)), int(sub_attrs.get("u_kt", 1)), b.grid_r, b.grid_c)
        total += _kernel(arch, sub_type, sub_attrs, [op.intermed_df] * 2, op.acc_df, op.math_fidelity, sb, op, None)
    return total


def _kernel(arch: str, op_type: str, attrs: Mapping[str, Any], in_dfs: Sequence[DataFormat], acc_df: DataFormat,
            fidelity: MathFidelity, b: _Blocking, op: Any, fused_ops: Optional[Mapping[Any, Any]]) -> float:
    """Kernel cycles of one op (or fused sub-op) with the formula and coefficients of its device-op row."""
    model = _cycle_model(arch, op_type)
    formula, c = model.formula, model.coefficients
    if formula in ("matmul_v1", "matmul_v2"):
        if attrs.get("identity"):
            return _sparse_matmul_cycles(model, fidelity, attrs, b)
        return _matmul_cycles(model, in_dfs, acc_df, fidelity, attrs, b)
    if formula == "binary":
        return _binary_cycles(c, in_dfs, b)
    if formula == "reduce":
        return _reduce_cycles(c, attrs, b)
    if formula == "nary":
        return _splice_cycles(c, b)
    if formula == "fused":
        if op is not None:
            return _fused_cycles(arch, op, b, fused_ops)
        c = _cycle_model(arch, "nop").coefficients  # no schedule to sum: one nop pass [D]
    # Unary and SFPU ops, and the data-movement types whose rows carry nop's coefficients (spec §6.1: the
    # unary form is "also the fallback for reduce, tilizer, embedding and others").
    return _unary_cycles(c, attrs, b)


def kernel_cycles(op: Any, op_model: Any, arch: Any, fused_ops: Optional[Mapping[Any, Any]] = None) -> int:
    """Kernel cycles per core per input of ``op`` (a BudaOp) laid out as ``op_model`` (an OpModel) on
    ``arch`` (BackendDevice, its name, or a device descriptor). ``fused_ops`` is the lowered graph's
    fused-op table, needed to cost ``fused_op`` ops. Clamped to [0, 2^30]."""
    return _kernel_of(op, _blocking(op_model), _arch_key(arch), fused_ops)


def _kernel_of(op: Any, b: _Blocking, arch_key: str, fused_ops: Optional[Mapping[Any, Any]]) -> int:
    in_dfs = list(op.in_df) if op.in_df else [op.out_df]
    return _clamp(_kernel(arch_key, op.type, _with_sparse_strips(op, b), in_dfs, op.acc_df, op.math_fidelity, b,
                          op, fused_ops))


def _with_sparse_strips(op: Any, b: _Blocking) -> Mapping[str, Any]:
    """``op``'s attributes, with the ``num_nz_strips`` of this layout for a lowered sparse matmul that does
    not carry them yet (the balancer prices layouts before the netlist records the chosen one)."""
    attrs = op.attrs
    if not attrs.get("identity") or attrs.get("num_nz_strips"):
        return attrs
    strips = sparse.strips_for_layout(getattr(op, "tags", {}), b.grid_r, b.grid_c, b.mblock_m * b.ublock_rt, b.u_kt)
    return {**attrs, "num_nz_strips": strips} if strips else attrs


def matmul_ideal_cycles(op: Any, op_model: Any, arch: Any) -> int:
    """Theoretical math cycles per core per input of a matmul (tile products × ideal cycles per
    product × fidelity phases; spec §6.2), 0 for other ops. A sparse matmul's products are its index
    entries (``indices_len``), not its dense ``m_k·u_kt`` blocks. Ribbon's utilisation metric uses it."""
    if op.type not in _MATMUL_OPS:
        return 0
    b = _blocking(op_model)
    if op.attrs.get("identity"):
        # sparse: only the index's non-zero products are work (see _sparse_products_per_core)
        tile_macs = _sparse_products_per_core(op.attrs, b) * b.mblock_n * b.ublock_ct
    else:
        tile_macs = b.t * b.tiles * b.m_k * b.u_kt
    return _clamp(tile_macs * _IDEAL_TILE_MAC_CYCLES[_arch_key(arch)] * fidelity_phases(op.math_fidelity))


# --------------------------------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceBandwidth:
    """Bandwidths in bytes per AI-clock cycle, as the cost model uses them.

    ``noc`` is the NoC link width divided by PyBuda's inefficiency factor of 2 ("half of theoretical",
    spec §5.4), i.e. 16 B/cycle, close to the 28 GB/s op-to-op pipe of spec §6.3 halved for gathers.
    ``dram_per_channel`` is one channel's *measured* bandwidth (spec §5.4: GS 10.5 GiB/s per block,
    WH 19 GiB/s per block × 2 blocks) and ``dram_channels`` the channel count; ``pcie`` is the observed
    host-link maximum PyBuda's balancer used (24 B/cycle, spec §5.4).
    """

    noc: float
    dram_per_channel: float
    dram_channels: int
    pcie: float

    @property
    def dram_total(self) -> float:
        """All channels together (bytes/cycle)."""
        return self.dram_per_channel * self.dram_channels


_BANDWIDTH_CACHE: Dict[int, Tuple[Any, DeviceBandwidth]] = {}


def device_bandwidth(device: Any) -> DeviceBandwidth:
    """Bandwidths of ``device`` (a :class:`pybuda.arch.DeviceDescriptor`), cached per descriptor."""
    hit = _BANDWIDTH_CACHE.get(id(device))
    if hit is not None and hit[0] is device:
        return hit[1]
    arch = _arch_key(device)
    clock = float(getattr(device, "aiclk_hz", 0) or (1.2e9 if arch == "grayskull" else 1.0e9))
    dram = getattr(device, "dram_bytes_per_cycle_measured", None)
    if dram is None:  # spec §5.4 measured per-channel numbers
        dram = (10.5 if arch == "grayskull" else 38.0) * (1 << 30) / clock
    channels = getattr(device, "dram_channel_count", None) or (8 if arch == "grayskull" else 6)
    bw = DeviceBandwidth(noc=float(getattr(device, "noc_bytes_per_cycle", 32)) / 2.0, dram_per_channel=float(dram),
                         dram_channels=int(channels),
                         pcie=float(getattr(device, "pcie_bytes_per_cycle_observed", 24.0)))
    _BANDWIDTH_CACHE[id(device)] = (device, bw)
    return bw


@dataclass(frozen=True)
class BandwidthContext:
    """Where an op's operands come from and where its output goes.

    ``input_sources[i]`` is ``"op"`` (an op in the same epoch, over the NoC), ``"dram"`` (a DRAM queue:
    streamed parameters, epoch-to-epoch queues, device-side inputs), ``"host"`` (a host queue over
    PCIe) or ``"prologue"`` (resident in L1 for the epoch: no per-input traffic). ``output_dest`` is
    ``"op"``, ``"dram"`` or ``"host"``. Missing entries count as ``"op"``. ``input_tile_caps[i]``, when
    set, bounds the tiles one core reads from queue input ``i`` per input (the queue's own size: a
    broadcast operand is read once, not once per broadcast copy).
    """

    input_sources: Tuple[str, ...] = ()
    output_dest: str = "op"
    input_tile_caps: Tuple[Optional[int], ...] = ()

    def source(self, index: int) -> str:
        return self.input_sources[index] if index < len(self.input_sources) else "op"


@dataclass(frozen=True)
class CycleBreakdown:
    """Kernel cycles and the data-movement bounds; ``cycles`` is the largest of the three."""

    kernel: int
    input_bw: int
    output_bw: int

    @property
    def cycles(self) -> int:
        return max(self.kernel, self.input_bw, self.output_bw)

    @property
    def bound(self) -> str:
        """Which limit dominates: ``kernel``, ``input`` or ``output``."""
        if self.cycles == self.kernel:
            return "kernel"
        return "input" if self.cycles == self.input_bw else "output"


def output_tiles_per_core(op_model: Any) -> int:
    """Output tiles one core produces per input: t · mblock · ublock."""
    b = _blocking(op_model)
    return b.t * b.tiles


def input_tiles_per_core(op: Any, op_model: Any) -> Tuple[int, ...]:
    """Tiles of each operand one core reads per input, derived from the op model (spec §2.3 operand
    shapes): matmul in0 = t·rows·K, in1 = t·K·cols, bias = output block; reduce r/c reads K tiles
    along the reduced dimension, reduce z reads z slices; eltwise/n-ary operands are output-sized
    (splice splits its output among its inputs)."""
    return _input_tiles(op, _blocking(op_model))


def _input_tiles(op: Any, b: _Blocking) -> Tuple[int, ...]:
    rows, cols = b.mblock_m * b.ublock_rt, b.mblock_n * b.ublock_ct
    k = b.m_k * b.u_kt
    n = max(1, len(op.inputs))
    out = b.t * rows * cols
    if op.type in _MATMUL_OPS:
        sizes = [b.t * rows * k, _activation_slices(op, b) * k * cols] + [out] * (n - 2)
        return tuple(sizes[:n])
    if op.type == "reduce":
        dim = str(op.attrs.get("dim", "r")).lower()
        if dim == "z":
            return (out * max(1, int(op.attrs.get("z", 1))),)
        return ((b.t * k * cols) if dim == "r" else (b.t * rows * k),) * n
    if op.type == "splice":
        return _splice_input_tiles(op.attrs, out, n)
    return (out,) * n


def _activation_slices(op: Any, b: _Blocking) -> int:
    """How many times a matmul's in1 crosses the NoC per input: once per output t slice, except for a sparse
    matmul, whose activation has ``act_t`` slices (1 for a convolution's im2col, whose kernel taps all read
    the same activation). Its kernel walks the entries of every output t slice that read an in1 strip while
    the strip is in its input buffer, so the activation streams ``act_t`` times [D]: TT-Buda's convolutions
    read it once (its lowering stacked the taps along rows, and its t-streamed sparse matmul kept ``act_t``
    1). Costing a re-read per tap instead left the Grayskull CNN points 0.52-0.80x of the published figures;
    with one read 12 of the 18 calibration points land within 15 % (tests/perf/test_calibration.py)."""
    if op.attrs.get("identity"):
        act_t = int(op.attrs.get("act_t", 0) or 0)
        if 0 < act_t < b.t:
            return act_t
    return b.t


def _splice_input_tiles(attrs: Mapping[str, Any], out: int, n: int) -> Tuple[int, ...]:
    """Each splice input's share of the output tiles: its ``inputN`` ``[index, length, stride]`` length
    over the sum of the lengths (an even split when the attributes do not say)."""
    lengths = []
    for i in range(n):
        spec = attrs.get(f"input{i}")
        lengths.append(int(spec[1]) if isinstance(spec, (list, tuple)) and len(spec) == 3 else 0)
    total = sum(lengths)
    if total <= 0 or min(lengths) <= 0:
        return (max(1, out // n),) * n
    return tuple(max(1, out * length // total) for length in lengths)


def op_cycle_breakdown(op: Any, op_model: Any, device: Any, input_bandwidth_context: Optional[BandwidthContext] = None,
                       *, fused_ops: Optional[Mapping[Any, Any]] = None,
                       bandwidth: Optional[DeviceBandwidth] = None) -> CycleBreakdown:
    """Kernel cycles and the input/output data-movement bounds of one op (cycles per core per input).

    Bandwidths (spec §5.4, §6.4): NoC op-to-op pipes at ``noc`` B/cycle per core; a DRAM queue read by
    ``R`` cores gets a channel each while ``R`` ≤ channels, else ``1/R`` of the chip total; host queues
    share the PCIe link among the reading cores (see :func:`_rate`). Inputs from several sources are read in parallel, so the input
    bound is the slowest source's time. Prologue operands cost nothing per input.
    """
    ctx = input_bandwidth_context or BandwidthContext()
    b = _blocking(op_model)
    return _breakdown(op, b, device, ctx, fused_ops, bandwidth, _operand_fetches(op, b, ctx.input_tile_caps))


def op_costs(op: Any, op_model: Any, device: Any, input_bandwidth_context: BandwidthContext, *,
             fused_ops: Optional[Mapping[Any, Any]] = None, bandwidth: Optional[DeviceBandwidth] = None
             ) -> Tuple[CycleBreakdown, float]:
    """(:func:`op_cycle_breakdown`, :func:`dram_bytes_per_input`) of one op model, the same numbers, with
    the blocking and operand fetches both read worked out once (the legalizer prices every layout it
    keeps with both)."""
    ctx = input_bandwidth_context
    b = _blocking(op_model)
    fetches = _operand_fetches(op, b, ctx.input_tile_caps)
    return _breakdown(op, b, device, ctx, fused_ops, bandwidth, fetches), _dram_bytes(op, b, ctx, fetches)


def _breakdown(op: Any, b: _Blocking, device: Any, ctx: BandwidthContext, fused_ops: Optional[Mapping[Any, Any]],
               bandwidth: Optional[DeviceBandwidth], fetches: Sequence[Tuple[float, int]]) -> CycleBreakdown:
    """:func:`op_cycle_breakdown` of blocking ``b`` whose operand fetches are ``fetches``."""
    bw = bandwidth or device_bandwidth(device)
    kernel = _kernel_of(op, b, _arch_key(device), fused_ops)
    cores = max(1, b.grid_r * b.grid_c)
    per_source: Dict[str, float] = {}
    for i, (nbytes, fetchers) in enumerate(fetches):
        src = ctx.source(i)
        if src == "prologue":
            continue
        # Shared sources (DRAM, PCIe) are split among the *distinct fetches*, not the cores: a matmul
        # operand is fetched once per grid row (in0) or column (in1) and multicast along it, so a
        # taller sparse-matmul grid does not multiply the activation's DRAM/PCIe traffic.
        per_source[src] = per_source.get(src, 0.0) + nbytes / _rate(src, bw, fetchers)
    input_bw = max(per_source.values(), default=0.0)
    out_bytes = b.t * b.tiles * tile_size_bytes(op.out_df)
    output_bw = out_bytes / _rate(ctx.output_dest, bw, cores)
    return CycleBreakdown(kernel=kernel, input_bw=_clamp(math.ceil(input_bw)), output_bw=_clamp(math.ceil(output_bw)))


def operand_fetches(op: Any, op_model: Any, input_tile_caps: Sequence[Optional[int]] = ()
                    ) -> List[Tuple[float, int]]:
    """For every operand: (bytes of the per-core slice one core reads per input, how many distinct
    fetches of it there are per input). A queue operand reads at most what its queue holds
    (``input_tile_caps[i]``: a broadcast operand is read once), a sparse matmul's index only its grid
    row's share; see :func:`distinct_fetchers` for the fetch count."""
    return _operand_fetches(op, _blocking(op_model), input_tile_caps)


def _operand_fetches(op: Any, b: _Blocking, caps: Sequence[Optional[int]]) -> List[Tuple[float, int]]:
    dfs = list(op.in_df) if op.in_df else []
    out = []
    for i, tiles in enumerate(_input_tiles(op, b)):
        cap = caps[i] if i < len(caps) else None
        if cap is not None:
            if op.type in _MATMUL_OPS and op.attrs.get("identity") and i in (0, 2):
                cap = sparse_table_tiles_per_core(i, cap, b.grid_r)
            tiles = min(tiles, cap)
        df = dfs[i] if i < len(dfs) else op.out_df
        out.append((float(tiles * tile_size_bytes(df)), distinct_fetchers(op, b, i)))
    return out


def dram_bytes_per_input(op: Any, op_model: Any, input_bandwidth_context: BandwidthContext) -> float:
    """Bytes one input makes the op move over the chip's DRAM channels, summed over its cores: every
    operand streamed from a DRAM queue (each distinct fetch of its per-core slice, capped by the
    queue's size) and the output when it goes to a DRAM queue. The balancer adds these up per epoch,
    because all ops of an epoch share the channels."""
    ctx = input_bandwidth_context
    b = _blocking(op_model)
    return _dram_bytes(op, b, ctx, _operand_fetches(op, b, ctx.input_tile_caps))


def _dram_bytes(op: Any, b: _Blocking, ctx: BandwidthContext, fetches: Sequence[Tuple[float, int]]) -> float:
    """:func:`dram_bytes_per_input` of blocking ``b`` whose operand fetches are ``fetches``."""
    total = sum(nbytes * fetchers for i, (nbytes, fetchers) in enumerate(fetches) if ctx.source(i) == "dram")
    if ctx.output_dest == "dram":
        total += b.t * b.tiles * tile_size_bytes(op.out_df) * max(1, b.grid_r * b.grid_c)
    return total


def multicast_axis(op: Any, index: int) -> Optional[str]:
    """Along which of the op's grid dimensions operand ``index`` is multicast: ``"row"`` (every core of a
    grid row receives the same slice: a dense matmul's in0), ``"col"`` (every core of a grid column: a
    matmul's in1, dense or sparse — the sparse activation), or None (each core fetches its own slice).
    The one rule both :func:`distinct_fetchers` and the backend build's pipes
    (:mod:`pybuda.backend_build.routing`) group destination cores by."""
    if op.type in _MATMUL_OPS:
        sparse = bool(op.attrs.get("identity"))
        if index == 0 and not sparse:
            return "row"
        if index == 1:
            return "col"
    return None


def distinct_fetchers(op: Any, b: Any, index: int) -> int:
    """How many times operand ``index``'s per-core slice is fetched from its source per input: a dense
    matmul's in0 once per grid row and in1 once per grid column (NoC multicast along the row/column,
    :func:`multicast_axis`); a sparse matmul's in1 (the activation) once per grid column, its picker
    tiles and index per core; every operand of every other op once per core. ``b`` is a blocking or an
    OpModel-like object."""
    grid = getattr(b, "grid_shape", None)
    grid_r, grid_c = (int(grid[0]), int(grid[1])) if grid is not None else (b.grid_r, b.grid_c)
    axis = multicast_axis(op, index)
    if axis == "row":
        return max(1, grid_r)
    if axis == "col":
        return max(1, grid_c)
    return max(1, grid_r * grid_c)


def _rate(source: str, bw: DeviceBandwidth, cores: int) -> float:
    """Bytes per cycle one core of an op on ``cores`` cores gets from ``source``.

    DRAM: while there are no more reading cores than channels each core streams from its own channel;
    beyond that the cores share all channels (the chip total, spec §5.4 / perf_calibration §5 "never
    exceed … per channel, … per chip"). A single core is further limited by its NoC link. Host queues
    share the PCIe link among the reading cores."""
    if source == "dram":
        share = bw.dram_per_channel if cores <= bw.dram_channels else bw.dram_total / cores
        return min(bw.noc, share)
    if source == "host":
        return min(bw.noc, bw.pcie / cores)
    return bw.noc


def op_cycles(op: Any, op_model: Any, device: Any, input_bandwidth_context: Optional[BandwidthContext] = None,
              *, fused_ops: Optional[Mapping[Any, Any]] = None, bandwidth: Optional[DeviceBandwidth] = None) -> int:
    """Estimated cycles per core per input: ``max(kernel, input bytes / bandwidth, output bytes /
    bandwidth)`` (spec §6.4). See :func:`op_cycle_breakdown` for the parts."""
    return op_cycle_breakdown(op, op_model, device, input_bandwidth_context, fused_ops=fused_ops,
                              bandwidth=bandwidth).cycles


# --------------------------------------------------------------------------------------------------
# Epoch overhead
# --------------------------------------------------------------------------------------------------

#: Fixed cost of launching an epoch (epoch command to every core, stream/overlay setup). No source
#: number exists (spec §6.4: BBE/PyBuda have no epoch-reconfiguration constant; §8.3: "has to be a
#: parameter") — an assumption [D].
EPOCH_LAUNCH_CYCLES = 20_000
#: Overlay blob each core loads per epoch (spec §5.3: 64 KiB − 128 B).
OVERLAY_BLOB_BYTES = 64 * 1024 - 128


def epoch_overhead_cycles(prologue_bytes: int, cores_used: int, device: Any,
                          bandwidth: Optional[DeviceBandwidth] = None) -> int:
    """Cycles to switch to an epoch, paid once per epoch per program run (not per input): the launch
    constant, plus each used core's overlay blob and the epoch's prologue parameters read from DRAM at
    the chip's total DRAM bandwidth (spec §6.4: "binary load plus prologue DRAM reads")."""
    bw = bandwidth or device_bandwidth(device)
    return _clamp(EPOCH_LAUNCH_CYCLES + (cores_used * OVERLAY_BLOB_BYTES + prologue_bytes) / bw.dram_total)
