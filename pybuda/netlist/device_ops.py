"""Netlist op types: one row per ``type`` a netlist op may have, the one table every stage reads.

Each :class:`DeviceOp` row says, for one op type of netlist_backend_spec §3.1 (or a pybuda extension
type, marked ``extension``):

- its **class** (matmul, depthwise, binary, copy, sfpu, reduce, splice, fused, other), from which the
  validator derives input counts, TM and attribute rules, and the golden device its dispatch;
- its **golden** semantics: for elementwise classes the float math on unpacked float32 values
  (unary ``(x, attrs) -> y``; binary ``(a, b, attrs, mul) -> y``, where ``mul`` is the golden device's
  fidelity-aware multiplier); for structural classes the name of the golden routine that implements it
  (an attribute path under ``pybuda.golden``); or :class:`NoGolden` with the reason the golden device
  has no kernel;
- its **cycle model** on every arch (:class:`CycleModel`): the formula family of spec §6.1, implemented in
  :mod:`pybuda.perf.cost`, and this op's fitted coefficients;
- flags the compiler reads: ``fusible`` (auto-fusion may schedule it in a fused op), ``zero_preserving``
  (f(0, …, 0) == 0: zero tile padding stays zero), ``zero_absorbing`` (binary: a zero in either input
  gives 0), ``non_negative`` (every output >= 0), ``commutative`` (binary inputs may be swapped),
  ``amp_sensitive`` (mixed precision keeps its output in Float16_b), ``tensix`` (runs on Tensix cores) and
  ``random`` (draws a number per datum: equal inputs need not give equal outputs).

Lowering (through the op registry's ``lower`` slot), fusion, the validator, the attribute schema, the
legalizer, the golden device and the cost model read these rows; :func:`coverage_problems` reports a row
that lacks a field. This module is the bottom of that stack: it imports neither the golden device, nor
the performance model, nor the compiler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Callable, Collection, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple, Union

import torch

from pybuda.netlist.sfpu_approx import approximate_exp, approximate_reciprocal

#: Op classes, in the order of spec §3.1. ``copy`` and ``sfpu`` together are the unary ops.
CLASSES = ("matmul", "depthwise", "binary", "copy", "sfpu", "reduce", "splice", "fused", "other")
#: Classes whose golden semantics is a float kernel on whole tensors (and that fused ops may schedule).
ELTWISE_CLASSES = frozenset({"binary", "copy", "sfpu"})
#: Archs every row must carry a cycle model for.
ARCHS = ("grayskull", "wormhole_b0", "blackhole")

#: Golden float math of a unary op: ``(x, attrs) -> y`` on unpacked float32 values.
UnaryKernel = Callable[[torch.Tensor, Mapping[str, Any]], torch.Tensor]
#: The golden device's multiplier (math fidelity applied when it emulates formats).
Multiply = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: Golden float math of a binary op: ``(a, b, attrs, mul) -> y``; ``multiply`` goes through ``mul``.
BinaryKernel = Callable[[torch.Tensor, torch.Tensor, Mapping[str, Any], Multiply], torch.Tensor]


@dataclass(frozen=True)
class NoGolden:
    """The golden device has no kernel for this op type; it raises a NetlistError naming the op."""

    reason: str


@dataclass(frozen=True)
class CycleModel:
    """One op's kernel-cycle model on one arch: a formula family of spec §6.1 (see :data:`FORMULAS`;
    :mod:`pybuda.perf.cost` implements each) and this op's coefficients for it. ``source`` names where
    the numbers come from; **[D]** marks values derived here because the spec gives none."""

    formula: str
    coefficients: Mapping[str, Any]
    source: str


#: Formula families: (required coefficient keys, optional ones). Notation of spec §6.1: t = output t,
#: ub = ublocks per core, tiles = tiles per core.
#:
#: - ``unary``: ``t·(ub·ublock + tiles·tile)``; ``approx_tile`` replaces ``tile`` with
#:   ``approximate_mode``, ``vector_tile[r|c]`` bounds it with ``vector: r|c``.
#: - ``binary``: ``t·(ub·ublock + tiles·tile·df_w)``, df_w = 2 for Float16/Float16_b and 4 for Float32
#:   when ``df_scaled``, else 1.
#: - ``reduce``: ``r``/``c`` (ublock, tile) over the reduced K blocks; ``z`` (ublock, tile, z_weight).
#: - ``nary``: ``t·(ub·ublock + tiles·tile)`` (splice).
#: - ``matmul_v1``: the GS dense formula with ``m_k``/``ublock``/``tile`` weights; ``sparse``: the weights of
#:   BBE's sparse V1 formula (math, reload, pack and decode terms; see ``pybuda.perf.cost``).
#: - ``matmul_v2``: the WH dense formula; one (math_tiles, dest_spill, unpack_ublocks, unpack_tiles) set
#:   per input family; ``sparse``: BBE's sparse V2 decode weights and its measured per-stage cycles.
#: - ``fused``: the sum of the scheduled sub-ops' cycles.
FORMULAS: Mapping[str, Tuple[FrozenSet[str], FrozenSet[str]]] = MappingProxyType({
    "unary": (frozenset({"ublock", "tile"}), frozenset({"approx_tile", "vector_tile"})),
    "binary": (frozenset({"ublock", "tile", "df_scaled"}), frozenset()),
    "reduce": (frozenset({"r", "c", "z"}), frozenset()),
    "nary": (frozenset({"ublock", "tile"}), frozenset()),
    "matmul_v1": (frozenset({"m_k", "ublock", "tile", "sparse"}), frozenset()),
    "matmul_v2": (frozenset({"fp16", "bfp", "int32", "l1_acc_fp16", "l1_acc_bfp", "sparse"}), frozenset()),
    "fused": (frozenset(), frozenset()),
})

#: Flags every row must set (None = not given, which :func:`coverage_problems` reports).
FLAGS = ("fusible", "zero_preserving", "zero_absorbing", "non_negative", "commutative", "amp_sensitive", "tensix",
         "extension", "random")


@dataclass(frozen=True)
class DeviceOp:
    """One netlist op type (see the module docstring for every field)."""

    name: str
    cls: str
    golden: Union[UnaryKernel, BinaryKernel, str, NoGolden, None]
    cycles: Mapping[str, CycleModel]
    fusible: Optional[bool] = None
    zero_preserving: Optional[bool] = None
    zero_absorbing: Optional[bool] = None
    non_negative: Optional[bool] = None
    commutative: Optional[bool] = None
    amp_sensitive: Optional[bool] = None
    tensix: Optional[bool] = None
    #: Not a type of spec §3.1: the simulated chip (golden device, cost model) implements it; BBE does not.
    extension: Optional[bool] = None
    random: Optional[bool] = None
    doc: str = ""

    @property
    def is_sfpu(self) -> bool:
        """Runs on the vector engine (spec §3.1 "SFPU unary")."""
        return self.cls == "sfpu"

    @property
    def is_unary(self) -> bool:
        """A one-input elementwise op (copy or SFPU)."""
        return self.cls in ("copy", "sfpu")

    @property
    def is_eltwise(self) -> bool:
        """Binary, copy or SFPU: a float kernel on whole tensors."""
        return self.cls in ELTWISE_CLASSES


# --------------------------------------------------------------------------------------------------
# Golden float math of the elementwise ops (unpacked float32 in, math result out; formats are the
# golden device's business)
# --------------------------------------------------------------------------------------------------

def _gelu(x: torch.Tensor, approximate: bool = False) -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate="tanh" if approximate else "none")


def _gelu_derivative(x: torch.Tensor) -> torch.Tensor:
    cdf = 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return cdf + x * pdf


def _dropout(x: torch.Tensor, attrs: Mapping[str, Any]) -> torch.Tensor:
    p = float(attrs.get("p", 0.0))
    if p <= 0.0:
        return x
    gen = torch.Generator().manual_seed(int(attrs.get("seed", 0)))
    keep = torch.rand(x.shape, generator=gen) >= p
    return torch.where(keep, x / (1.0 - p), torch.zeros_like(x))


# --------------------------------------------------------------------------------------------------
# Cycle models (spec §6.1). Blackhole has no BBE parameters: it uses the WH B0 v3 rows [D].
# --------------------------------------------------------------------------------------------------

_WH = "spec §6.1 WH B0 v3"
_GS = "spec §6.1 GS v2"
_GS_FROM_WH = "[D] GS v2 has no row: WH B0 v3"
_BH_FROM_WH = "[D] Blackhole has no BBE parameters: WH B0 v3"


def _unary(ublock: float, tile: float, source: str, approx: Optional[float] = None,
           vector: Optional[Mapping[str, float]] = None) -> CycleModel:
    coefficients: Dict[str, Any] = {"ublock": ublock, "tile": tile}
    if approx is not None:
        coefficients["approx_tile"] = approx
    if vector:
        coefficients["vector_tile"] = MappingProxyType(dict(vector))
    return CycleModel("unary", MappingProxyType(coefficients), source)


def _binary(ublock: float, tile: float, source: str, df_scaled: bool = True) -> CycleModel:
    return CycleModel("binary", MappingProxyType({"ublock": ublock, "tile": tile, "df_scaled": df_scaled}), source)


def _archs(gs: CycleModel, wh: CycleModel) -> Mapping[str, CycleModel]:
    bh = CycleModel(wh.formula, wh.coefficients, f"{_BH_FROM_WH} ({wh.source})")
    return MappingProxyType({"grayskull": gs, "wormhole_b0": wh, "blackhole": bh})


def _wh_unary(ublock: float, tile: float, approx: Optional[float] = None,
              vector: Optional[Mapping[str, float]] = None) -> Mapping[str, CycleModel]:
    """A unary op with no GS v2 row: every arch uses the WH B0 v3 row."""
    return _archs(_unary(ublock, tile, _GS_FROM_WH, approx, vector), _unary(ublock, tile, _WH, approx, vector))


# nop's row, which copies and the other data-movement ops use (spec §6.1: the unary form "is also the
# fallback for reduce, tilizer, embedding and others").
_NOP_CYCLES = _archs(_unary(305.0, 56.0, _GS), _unary(305.0, 56.0, _WH))
_AS_NOP = _archs(_unary(305.0, 56.0, "[D] nop's row (spec §6.1 unary fallback)"),
                 _unary(305.0, 56.0, "[D] nop's row (spec §6.1 unary fallback)"))
# The quantisation ops run add's unpack/pack path [D].
_AS_ADD = _archs(_binary(294.0, 50.4, "[D] add's GS v2 row"), _binary(234.3, 49.6, "[D] add's WH B0 v3 row"))
# BBE's sparse matmul V2 stage cycles on WH B0 (perf_lib/op_model/params/wormhole_b0_sparse_v2_formula_params,
# measured per output ublock shape): {(ublock_rt, ublock_ct, u_kt): (math with tile decode, reload, pack)},
# one table for LoFi and one for HiFi2 (HiFi3/HiFi4 scale its math by 1.2/1.7). A shape between the measured
# ones uses the next smaller measured value on each axis, as BBE does.
_SPARSE_V2_LOFI = MappingProxyType({
    (1, 1, 1): (335, 140, 150), (1, 1, 4): (100, 136, 117), (1, 1, 8): (55, 140, 115),
    (1, 2, 1): (125, 110, 100), (1, 2, 4): (50, 110, 90), (1, 2, 8): (26, 110, 80),
    (1, 4, 1): (26, 50, 50), (1, 4, 4): (26, 50, 50), (1, 4, 8): (26, 50, 50),
    (1, 8, 1): (26, 45, 40), (1, 8, 4): (26, 45, 36), (1, 8, 8): (26, 45, 35),
    (2, 1, 1): (125, 110, 100), (2, 1, 4): (55, 110, 90), (2, 1, 8): (55, 110, 80),
    (2, 2, 1): (26, 50, 50), (2, 2, 4): (26, 50, 50), (2, 2, 8): (26, 50, 50),
    (2, 4, 1): (26, 45, 40), (2, 4, 4): (26, 45, 36), (2, 4, 8): (26, 45, 35),
    (4, 1, 1): (55, 45, 35), (4, 1, 4): (55, 45, 35), (4, 1, 8): (55, 45, 35),
    (4, 2, 1): (26, 45, 40), (4, 2, 4): (26, 45, 36), (4, 2, 8): (26, 45, 35),
    (8, 1, 1): (55, 45, 35), (8, 1, 4): (55, 45, 35), (8, 1, 8): (55, 45, 35),
})
_SPARSE_V2_HIFI2 = MappingProxyType({
    (1, 1, 1): (335, 142, 150), (1, 1, 4): (100, 140, 123), (1, 1, 8): (55, 140, 120),
    (1, 2, 1): (125, 110, 100), (1, 2, 4): (50, 110, 90), (1, 2, 8): (38, 110, 80),
    (1, 4, 1): (38, 50, 50), (1, 4, 4): (38, 50, 50), (1, 4, 8): (38, 50, 50),
    (1, 8, 1): (38, 45, 42), (1, 8, 4): (37, 45, 40), (1, 8, 8): (38, 45, 40),
    (2, 1, 1): (125, 110, 100), (2, 1, 4): (55, 110, 90), (2, 1, 8): (55, 110, 80),
    (2, 2, 1): (38, 50, 50), (2, 2, 4): (38, 50, 50), (2, 2, 8): (38, 50, 50),
    (2, 4, 1): (38, 45, 42), (2, 4, 4): (37, 45, 40), (2, 4, 8): (38, 45, 40),
    (4, 1, 1): (55, 45, 40), (4, 1, 4): (55, 45, 40), (4, 1, 8): (55, 45, 40),
    (4, 2, 1): (38, 45, 42), (4, 2, 4): (37, 45, 40), (4, 2, 8): (38, 45, 40),
    (8, 1, 1): (55, 45, 35), (8, 1, 4): (55, 45, 35), (8, 1, 8): (55, 45, 35),
})
_MATMUL_CYCLES = _archs(
    CycleModel("matmul_v1", MappingProxyType({
        "m_k": 1321.0, "ublock": 56.0, "tile": 36.0,
        # BBE perf_lib/op_model/params/grayskull/params_v2.yaml, matmul_sparse
        "sparse": MappingProxyType({"tile": 36.0, "reload": 20.0, "reload_config": 20.0, "reload_wait_pop": 20.0,
                                    "pack_wait_push": 25.0, "pack": 25.0, "ublock_decode": 8.0,
                                    "nz_ublock_decode": 8.0, "nz_tile_decode": 12.0}),
    }), "spec §6.1 GS dense V1; sparse V1: BBE params_v2.yaml"),
    CycleModel("matmul_v2", MappingProxyType({
        "fp16": (15.52, 47.70, 93.20, 3.33),
        "bfp": (14.16, 22.11, 192.76, 3.97),
        "int32": (17.00, 160.82, 152.67, 0.0),
        "l1_acc_fp16": (15.74, 0.0, 20.92, 3.39),
        "l1_acc_bfp": (14.04, 26.62, 70.01, 4.66),
        # BBE params_v3.yaml matmul_sparse (V2 decode weights) and the V2 stage tables above
        "sparse": MappingProxyType({"ublock_decode": 80.0, "nz_ublock_decode": 80.0, "nz_strip_decode": 100.0,
                                    "lofi": _SPARSE_V2_LOFI, "hifi2": _SPARSE_V2_HIFI2,
                                    "fidelity": MappingProxyType({1: 1.0, 2: 1.0, 3: 1.2, 4: 1.7})}),
    }), "spec §6.1 WH B0 v3 params_v3.yaml; sparse V2: BBE params_v3.yaml and sparse_v2_formula_params"))
_REDUCE_CYCLES = _archs(
    # one GS row for r and c
    CycleModel("reduce", MappingProxyType({"r": (76.0, 59.0), "c": (76.0, 59.0), "z": (0.0, 287.0, 268.0)}), _GS),
    CycleModel("reduce", MappingProxyType({"r": (76.0, 59.0), "c": (0.0, 91.0), "z": (0.0, 287.0, 268.0)}), _WH))
# The stored GS splice tile weight is 69139, "almost certainly a typo for 69" (spec §6.1, §8.4); use 69.
_SPLICE_CYCLES = _archs(
    CycleModel("nary", MappingProxyType({"ublock": 132.0, "tile": 69.0}), _GS + " (69139 read as 69)"),
    CycleModel("nary", MappingProxyType({"ublock": 132.0, "tile": 69.0}), _WH))
_FUSED_CYCLES = _archs(CycleModel("fused", MappingProxyType({}), "sum of the scheduled sub-ops"),
                       CycleModel("fused", MappingProxyType({}), "sum of the scheduled sub-ops"))


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

def _structural(name: str, cls: str, golden: Union[str, NoGolden], cycles: Mapping[str, CycleModel],
                tensix: bool = True, amp_sensitive: bool = False, doc: str = "") -> DeviceOp:
    """A row of a non-elementwise class: its elementwise flags (fusible, padding, sign, commutative) are False."""
    return DeviceOp(name, cls, golden, cycles, fusible=False, zero_preserving=False, zero_absorbing=False,
                    non_negative=False, commutative=False, amp_sensitive=amp_sensitive, tensix=tensix,
                    extension=False, random=False, doc=doc)


def _eltwise(name: str, cls: str, golden: Union[UnaryKernel, BinaryKernel, NoGolden],
             cycles: Mapping[str, CycleModel], *, fusible: bool, zero_preserving: bool,
             zero_absorbing: bool = False, non_negative: bool = False, commutative: bool = False,
             amp_sensitive: bool = False, tensix: bool = True, extension: bool = False, random: bool = False,
             doc: str = "") -> DeviceOp:
    return DeviceOp(name, cls, golden, cycles, fusible=fusible, zero_preserving=zero_preserving,
                    zero_absorbing=zero_absorbing, non_negative=non_negative, commutative=commutative,
                    amp_sensitive=amp_sensitive, tensix=tensix, extension=extension, random=random, doc=doc)


_QUANT_GOLDEN = NoGolden("the golden device does not emulate Int8/Int32 quantisation")

_ROWS: Tuple[DeviceOp, ...] = (
    # --- matmul, depthwise ---------------------------------------------------------------------------
    _structural("matmul", "matmul", "kernels.matmul", _MATMUL_CYCLES,
                doc="Tile-blocked matmul (+bias, accumulate z, fused gelu); identity: the sparse matmul."),
    _structural("depthwise", "depthwise", NoGolden("the golden device implements no depthwise kernel"),
                _MATMUL_CYCLES, doc="A matmul variant (spec §3.1); costed with the matmul formulas."),
    # --- binary ----------------------------------------------------------------------------------------
    _eltwise("add", "binary", lambda a, b, attrs, mul: a + b,
             _archs(_binary(294.0, 50.4, _GS), _binary(234.3, 49.6, _WH)),
             fusible=True, zero_preserving=True, commutative=True, doc="a + b (ELWADD)."),
    _eltwise("subtract", "binary", lambda a, b, attrs, mul: a - b,
             # GS: subtract runs on the same ELWSUB path as add; GS v2 has no separate row [D].
             _archs(_binary(294.0, 50.4, "[D] add's GS v2 row (same ELWSUB path)"), _binary(234.1, 49.7, _WH)),
             fusible=True, zero_preserving=True, doc="a - b (ELWSUB)."),
    _eltwise("multiply", "binary", lambda a, b, attrs, mul: mul(a, b),
             _archs(_binary(261.2, 54.8, _GS), _binary(222.0, 54.6, _WH)),
             fusible=True, zero_preserving=True, zero_absorbing=True, commutative=True,
             doc="a * b (ELWMUL, through the golden device's fidelity model)."),
    _eltwise("maximum", "binary", lambda a, b, attrs, mul: torch.maximum(a, b),
             # spec §6.1: maximum always uses df_w = 1
             _archs(_binary(9.9, 333.8, _GS_FROM_WH, df_scaled=False), _binary(9.9, 333.8, _WH, df_scaled=False)),
             fusible=True, zero_preserving=True, commutative=True, doc="max(a, b)."),
    _eltwise("quantization", "binary", _QUANT_GOLDEN, _AS_ADD, fusible=False, zero_preserving=False,
             doc="Float32 data -> Int8 with Float32 scalars (spec §3.1)."),
    _eltwise("dequantization", "binary", _QUANT_GOLDEN, _AS_ADD, fusible=False, zero_preserving=False,
             doc="Int32 data -> Float32 with Float32 scalars (spec §3.1)."),
    _eltwise("requantization", "binary", _QUANT_GOLDEN, _AS_ADD, fusible=False, zero_preserving=False,
             doc="Int32 data -> Int8 with Float32 scalars (spec §3.1)."),
    _eltwise("heaviside", "binary", lambda a, b, attrs, mul: torch.heaviside(a, b),
             # compare-and-select like maximum: maximum's coefficients, df_w = 1 [D]
             _archs(_binary(9.9, 333.8, "[D] maximum's row (WH B0 v3)", df_scaled=False),
                    _binary(9.9, 333.8, "[D] maximum's row (WH B0 v3)", df_scaled=False)),
             fusible=True, zero_preserving=True, extension=True,
             doc="Heaviside step of a: 0 where a < 0, 1 where a > 0, b where a == 0 (torch.heaviside)."),
    # --- copy ------------------------------------------------------------------------------------------
    _eltwise("nop", "copy", lambda x, a: x, _NOP_CYCLES, fusible=True, zero_preserving=True,
             doc="Copy (carries TMs, relu attributes)."),
    _eltwise("datacopy", "copy", lambda x, a: x, _AS_NOP, fusible=False, zero_preserving=True, doc="Copy."),
    _eltwise("ethernet_datacopy", "copy", lambda x, a: x, _AS_NOP, fusible=False, zero_preserving=True,
             tensix=False, doc="Chip-to-chip copy over ethernet cores (no Tensix grid)."),
    # --- SFPU ------------------------------------------------------------------------------------------
    _eltwise("exp", "sfpu", lambda x, a: approximate_exp(x) if a.get("approximate_mode") else torch.exp(x),
             # vector r: 255 cycles per tile (spec §6.1), applied on every arch
             _archs(_unary(0.0, 2666.0, _GS, approx=668.0, vector={"r": 255.0}),
                    _unary(9.0, 1771.0, _WH, approx=812.8, vector={"r": 255.0})),
             fusible=True, zero_preserving=False, non_negative=True, amp_sensitive=True,
             doc="e^x; approximate_mode: the SFPU's Schraudolph approximation (pybuda.netlist.sfpu_approx)."),
    _eltwise("log", "sfpu", lambda x, a: torch.log(x),
             _archs(_unary(0.0, 1413.0, _GS), _unary(8.0, 718.1, _WH)),
             fusible=True, zero_preserving=False, amp_sensitive=True, doc="Natural logarithm."),
    _eltwise("sqrt", "sfpu", lambda x, a: torch.sqrt(x),
             _archs(_unary(195.0, 159.0, _GS), _unary(7.9, 910.1, _WH)),
             fusible=True, zero_preserving=True, non_negative=True, amp_sensitive=True, doc="Square root."),
    _eltwise("gelu", "sfpu", lambda x, a: _gelu(x, bool(a.get("approximate_mode", False))),
             _archs(_unary(64.0, 286.0, _GS), _unary(7.9, 270.4, _WH)),
             fusible=True, zero_preserving=True, doc="GeLU; approximate_mode: the tanh form."),
    _eltwise("gelu_derivative", "sfpu", lambda x, a: _gelu_derivative(x), _wh_unary(19.5, 2219.6, approx=383.8),
             fusible=False, zero_preserving=False, doc="d/dx GeLU (training)."),
    _eltwise("reciprocal", "sfpu",
             lambda x, a: approximate_reciprocal(x) if a.get("approximate_mode") else torch.reciprocal(x),
             # GS v2 has no approximate row for reciprocal
             _archs(_unary(29.0, 915.0, _GS), _unary(7.9, 910.1, _WH, approx=780.8)),
             fusible=True, zero_preserving=False, amp_sensitive=True,
             doc="1 / x; approximate_mode: one Newton step fewer (pybuda.netlist.sfpu_approx)."),
    _eltwise("sigmoid", "sfpu", lambda x, a: torch.sigmoid(x),
             _archs(_unary(84.2, 174.8, _GS), _unary(25.0, 266.5, _WH)),
             fusible=True, zero_preserving=False, non_negative=True, doc="1 / (1 + e^-x)."),
    _eltwise("dropout", "sfpu", _dropout, _wh_unary(19.5, 574.2),
             fusible=False, zero_preserving=True, random=True,
             doc="Zero with probability p (seeded), scale the rest by 1/(1-p)."),
    _eltwise("tanh", "sfpu", lambda x, a: torch.tanh(x), _wh_unary(20.2, 204.1),
             fusible=True, zero_preserving=True, doc="tanh(x)."),
    _eltwise("square", "sfpu", lambda x, a: x * x, _wh_unary(20.1, 204.2),
             fusible=True, zero_preserving=True, non_negative=True, doc="x * x."),
    _eltwise("power", "sfpu", lambda x, a: torch.pow(x, int(a.get("exp", 1))), _wh_unary(54.4, 200.4),
             # zero-preserving for the exponents lowering emits (>= 1; pow 0 folds to a constant)
             fusible=True, zero_preserving=True, doc="x ** exp (an integer)."),
    _eltwise("sine", "sfpu", lambda x, a: torch.sin(x), _wh_unary(7.9, 910.1),
             fusible=True, zero_preserving=True, doc="sin(x)."),
    _eltwise("cosine", "sfpu", lambda x, a: torch.cos(x), _wh_unary(13.3, 1547.5),
             fusible=True, zero_preserving=False, doc="cos(x)."),
    _eltwise("lrelu", "sfpu", lambda x, a: torch.where(x >= 0, x, x * float(a.get("slope", 0.01))),
             _wh_unary(19.5, 322.0), fusible=True, zero_preserving=True, doc="x where x >= 0, else slope * x."),
    _eltwise("abs", "sfpu", lambda x, a: torch.abs(x), _wh_unary(31.2, 171.5),
             fusible=True, zero_preserving=True, non_negative=True, doc="|x|."),
    # --- reduce, splice, fused --------------------------------------------------------------------------
    _structural("reduce", "reduce", "kernels.reduce", _REDUCE_CYCLES, amp_sensitive=True,
                doc="Max over r, c or z (sum/avg lower to matmuls)."),
    _structural("splice", "splice", "kernels.splice", _SPLICE_CYCLES, doc="Pick and join slices of 1..8 inputs."),
    _structural("fused_op", "fused", "device._run_fused", _FUSED_CYCLES,
                doc="A schedule of elementwise sub-ops (fused_ops section)."),
    # --- other -----------------------------------------------------------------------------------------
    _structural("embedding", "other", NoGolden("the golden device implements no embedding kernel"), _AS_NOP,
                doc="Table lookup of num_indices rows."),
    _structural("tilizer", "other", NoGolden("the golden device implements no tilizer kernel"), _AS_NOP,
                doc="Row-major to tile layout on the device."),
    _structural("topk", "other", NoGolden("the golden device implements no topk kernel"), _AS_NOP,
                doc="Top k values (sort max) or their indices (argmax)."),
)

#: Every netlist op type by name. ``drainer`` (needs a backend env flag) and ``buffer`` (no kernel) are
#: deliberately absent: the validator rejects them.
DEVICE_OPS: Mapping[str, DeviceOp] = MappingProxyType({row.name: row for row in _ROWS})


class UnknownDeviceOpError(KeyError):
    """An op type with no row in the device-op table."""


def device_op(name: str) -> DeviceOp:
    """The row of netlist op type ``name``; raises :class:`UnknownDeviceOpError` when there is none."""
    row = DEVICE_OPS.get(name)
    if row is None:
        raise UnknownDeviceOpError(f"no netlist op type {name!r} (known: {', '.join(sorted(DEVICE_OPS))})")
    return row


def find_device_op(name: str) -> Optional[DeviceOp]:
    """The row of netlist op type ``name``, or None."""
    return DEVICE_OPS.get(name)


def ops_of_class(*classes: str) -> FrozenSet[str]:
    """Names of the op types whose class is one of ``classes``."""
    unknown = set(classes) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown op class(es) {sorted(unknown)}; classes are {list(CLASSES)}")
    return frozenset(row.name for row in _ROWS if row.cls in classes)


def ops_where(flag: str) -> FrozenSet[str]:
    """Names of the op types whose flag (a name in :data:`FLAGS`) is true."""
    if flag not in FLAGS:
        raise ValueError(f"unknown flag {flag!r}; flags are {list(FLAGS)}")
    return frozenset(row.name for row in _ROWS if getattr(row, flag))


def cycle_model(name: str, arch: str) -> CycleModel:
    """The cycle model of op type ``name`` on ``arch`` (grayskull, wormhole_b0 or blackhole)."""
    return device_op(name).cycles[arch]


# --------------------------------------------------------------------------------------------------
# Coverage
# --------------------------------------------------------------------------------------------------

def coverage_problems(table: Union[Mapping[str, DeviceOp], Iterable[DeviceOp]] = DEVICE_OPS, *,
                      golden_routine_exists: Optional[Callable[[str], bool]] = None,
                      lowerings: Optional[Mapping[str, str]] = None,
                      accepted_types: Optional[Collection[str]] = None) -> List[str]:
    """Every way ``table`` (rows, or a name -> row map) falls short, one line each; empty when complete.

    Checked on every row: a known class; a golden entry of the right kind (a callable for elementwise
    classes, a routine name for structural ones — which must exist when ``golden_routine_exists`` is
    given — or a :class:`NoGolden` with a reason); a cycle model for every arch in :data:`ARCHS` with a
    known formula and its required coefficients; every flag of :data:`FLAGS` set. With ``lowerings``
    (registry op -> the device op its ``lower`` slot names) every target must be an elementwise row; with
    ``accepted_types`` (the op types the validator accepts) every one must have a row.
    """
    rows = list(table.values()) if isinstance(table, Mapping) else list(table)
    by_name = {row.name: row for row in rows}
    problems: List[str] = []
    for row in rows:
        where = f"device op {row.name!r}"
        missing = [f.name for f in fields(row) if f.name not in ("doc",) and getattr(row, f.name) is None]
        if missing:
            problems.append(f"{where}: fields not set: {', '.join(missing)}")
        if row.cls not in CLASSES:
            problems.append(f"{where}: unknown class {row.cls!r} (classes: {', '.join(CLASSES)})")
        problems.extend(f"{where}: {p}" for p in _golden_problems(row, golden_routine_exists))
        problems.extend(f"{where}: {p}" for p in _cycle_problems(row))
    for op, target in sorted((lowerings or {}).items()):
        row = by_name.get(target)
        if row is None:
            problems.append(f"registry op {op!r} lowers to {target!r}, which has no device-op row")
        elif not row.is_eltwise:
            problems.append(f"registry op {op!r} lowers to {target!r} of class {row.cls}; the lower slot names "
                            f"elementwise ops (binary, copy, sfpu)")
    for op_type in sorted(accepted_types or ()):
        if op_type not in by_name:
            problems.append(f"op type {op_type!r} is accepted by the validator but has no device-op row")
    return problems


def _golden_problems(row: DeviceOp, routine_exists: Optional[Callable[[str], bool]]) -> List[str]:
    golden = row.golden
    if golden is None:
        return []  # reported with the other unset fields
    if isinstance(golden, NoGolden):
        return [] if golden.reason.strip() else ["NoGolden without a reason"]
    if row.cls in ELTWISE_CLASSES:
        return [] if callable(golden) else [f"golden must be a float kernel for class {row.cls}, got {golden!r}"]
    if not isinstance(golden, str):
        return [f"golden must name a golden routine for class {row.cls}, got {golden!r}"]
    if routine_exists is not None and not routine_exists(golden):
        return [f"golden routine {golden!r} does not exist in pybuda.golden"]
    return []


def _cycle_problems(row: DeviceOp) -> List[str]:
    if row.cycles is None:
        return []  # reported with the other unset fields
    problems = []
    for arch in ARCHS:
        model = row.cycles.get(arch)
        if model is None:
            problems.append(f"no cycle model for {arch}")
            continue
        if model.formula not in FORMULAS:
            problems.append(f"{arch}: unknown cycle formula {model.formula!r} (formulas: {', '.join(FORMULAS)})")
            continue
        required, optional = FORMULAS[model.formula]
        keys = set(model.coefficients or {})
        if required - keys:
            problems.append(f"{arch}: formula {model.formula} needs coefficients {sorted(required - keys)}")
        if keys - required - optional:
            extra = sorted(keys - required - optional)
            problems.append(f"{arch}: formula {model.formula} takes no coefficients {extra}")
        if not model.source:
            problems.append(f"{arch}: cycle model without a source")
    unexpected = set(row.cycles) - set(ARCHS)
    if unexpected:
        problems.append(f"cycle models for unknown archs {sorted(unexpected)}")
    return problems
