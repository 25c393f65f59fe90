"""perf/cost.py against the spec §6.1 formulas worked out by hand, and the data-movement bounds."""

import math

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.perf import cost
from pybuda.balancer.types import OpModel
from pybuda.ir.lowered import BudaOp, TileShape
from pybuda.dtypes import DataFormat as DF, MathFidelity as MF

GS = get_device_descriptor(device_config="gs_e150")
WH = get_device_descriptor(device_config="wh_n150")


def _op(type_, n_inputs=1, in_df=DF.Float16_b, attrs=None, fidelity=MF.HiFi2, acc_df=DF.Float16_b,
        out_df=DF.Float16_b, intermed_df=DF.Float16_b):
    return BudaOp(name="x", type=type_, inputs=[f"i{k}" for k in range(n_inputs)], shape=TileShape(1, 1, 1, 1),
                  attrs=dict(attrs or {}), in_df=[in_df] * n_inputs, out_df=out_df, intermed_df=intermed_df,
                  acc_df=acc_df, math_fidelity=fidelity)


def _model(t=1, mblock=(1, 1), ublock=(1, 1), m_k=1, u_kt=1, grid=(1, 1)):
    return OpModel(grid_shape=grid, t=t, mblock=mblock, ublock=ublock, m_k=m_k, u_kt=u_kt)


# --- matmul -------------------------------------------------------------------------------------------

def test_wh_matmul_v2_fp16_by_hand():
    # U = m_k·mb_m·mb_n = 4·2·3 = 24; HiFi2 -> F = 2
    m = _model(t=2, mblock=(2, 3), ublock=(2, 4), m_k=4, u_kt=2)
    math_ = 24 * 2 * 2 * 4 * 2 * 15.52          # U·u_kt·ur·uc·F·math_tiles
    spill = 3 * 2 * 3 * 2 * 4 * 47.70           # (m_k-1)·mb_m·mb_n·ur·uc·dest_spill
    unpack_ub = 24 * 93.20                       # U·unpack_ublocks
    unpack_tiles = 24 * 2 * 2 * (1 + 4) * 3.33   # U·u_kt·ur·(1+uc)·unpack_tiles
    expected = int(2 * (math_ + spill + unpack_ub + unpack_tiles))
    assert expected == 45246
    assert cost.kernel_cycles(_op("matmul", 2), m, WH) == expected


def test_wh_matmul_v2_bfp_set_and_lofi():
    m = _model(t=1, mblock=(1, 2), ublock=(2, 2), m_k=1, u_kt=4)
    expected = int(2 * 4 * 2 * 2 * 1 * 14.16 + 0 + 2 * 192.76 + 2 * 4 * 2 * 3 * 3.97)
    assert expected == 1029
    assert cost.kernel_cycles(_op("matmul", 2, in_df=DF.Bfp8_b, fidelity=MF.LoFi), m, WH) == expected


def test_wh_matmul_int32_and_l1_acc_sets():
    m = _model(t=1, mblock=(1, 1), ublock=(1, 1), m_k=2, u_kt=1)
    int32 = int(2 * 1 * 1 * 1 * 4 * 17.00 + 1 * 160.82 + 2 * 152.67 + 0)
    assert cost.kernel_cycles(_op("matmul", 2, in_df=DF.Int8, acc_df=DF.Int32, fidelity=MF.HiFi4), m, WH) == int32
    l1acc = int(2 * 1 * 1 * 1 * 2 * 15.74 + 1 * 0.0 + 2 * 20.92 + 2 * 1 * 1 * 2 * 3.39)
    assert cost.kernel_cycles(_op("matmul", 2, attrs={"l1_acc": True}), m, WH) == l1acc


def test_gs_matmul_v1_by_hand():
    # t·((m_k-1)·1321 + (m_k·ub)·56 + (m_k·ub·u_kt·ur·uc)·36·F), ub = 6 ublocks
    m = _model(t=2, mblock=(2, 3), ublock=(2, 4), m_k=4, u_kt=2)
    expected = 2 * (3 * 1321 + 24 * 56 + 24 * 2 * 8 * 36 * 2)
    assert expected == 65910
    assert cost.kernel_cycles(_op("matmul", 2), m, GS) == expected


def test_matmul_fidelity_scales_math_only():
    m = _model(mblock=(2, 2), ublock=(2, 2), u_kt=8)
    lofi = cost.kernel_cycles(_op("matmul", 2, fidelity=MF.LoFi), m, GS)
    hifi4 = cost.kernel_cycles(_op("matmul", 2, fidelity=MF.HiFi4), m, GS)
    assert hifi4 - lofi == 3 * (4 * 8 * 4 * 36)


def test_depthwise_uses_matmul_formula():
    m = _model(mblock=(1, 2), ublock=(2, 2), u_kt=2)
    assert cost.kernel_cycles(_op("depthwise", 2), m, WH) == cost.kernel_cycles(_op("matmul", 2), m, WH)


# --- eltwise ------------------------------------------------------------------------------------------

def test_wh_binary_df_weight():
    m = _model(t=3, mblock=(2, 2), ublock=(1, 2))  # 4 ublocks, 8 tiles
    assert cost.kernel_cycles(_op("add", 2, in_df=DF.Float16_b), m, WH) == int(3 * (4 * 234.3 + 8 * 49.6 * 2))
    assert cost.kernel_cycles(_op("add", 2, in_df=DF.Bfp8_b), m, WH) == int(3 * (4 * 234.3 + 8 * 49.6 * 1))
    assert cost.kernel_cycles(_op("add", 2, in_df=DF.Float32), m, WH) == int(3 * (4 * 234.3 + 8 * 49.6 * 4))
    # maximum always uses df_w = 1
    assert cost.kernel_cycles(_op("maximum", 2, in_df=DF.Float16_b), m, WH) == int(3 * (4 * 9.9 + 8 * 333.8))
    assert cost.kernel_cycles(_op("multiply", 2, in_df=DF.Bfp8_b), m, WH) == int(3 * (4 * 222.0 + 8 * 54.6))


def test_gs_binary_and_fallbacks():
    m = _model(mblock=(1, 1), ublock=(2, 2))
    assert cost.kernel_cycles(_op("add", 2), m, GS) == int(294.0 + 4 * 50.4 * 2)
    assert cost.kernel_cycles(_op("multiply", 2), m, GS) == int(261.2 + 4 * 54.8 * 2)
    # GS v2 has no maximum row: the WH B0 v3 value is used
    assert cost.kernel_cycles(_op("maximum", 2), m, GS) == int(9.9 + 4 * 333.8)


def test_unary_sfpu_exact_approx_and_vector():
    m = _model(mblock=(2, 1), ublock=(1, 4))  # 2 ublocks, 8 tiles
    assert cost.kernel_cycles(_op("exp"), m, WH) == int(2 * 9 + 8 * 1771)
    assert cost.kernel_cycles(_op("exp", attrs={"approximate_mode": True}), m, WH) == int(2 * 9 + 8 * 812.8)
    assert cost.kernel_cycles(_op("exp", attrs={"vector": "r"}), m, WH) == int(2 * 9 + 8 * 255)
    assert cost.kernel_cycles(_op("exp"), m, GS) == 8 * 2666
    assert cost.kernel_cycles(_op("exp", attrs={"approximate_mode": True}), m, GS) == 8 * 668
    assert cost.kernel_cycles(_op("gelu"), m, GS) == int(2 * 64 + 8 * 286)
    assert cost.kernel_cycles(_op("reciprocal", attrs={"approximate_mode": True}), m, WH) == int(2 * 7.9 + 8 * 780.8)
    # tanh is not in the GS table: WH value
    assert cost.kernel_cycles(_op("tanh"), m, GS) == int(2 * 20.2 + 8 * 204.1)


def test_nop_and_unknown_types_use_nop_params():
    m = _model(mblock=(3, 1))
    assert cost.kernel_cycles(_op("nop"), m, WH) == 3 * 305 + 3 * 56
    assert cost.kernel_cycles(_op("tilizer"), m, WH) == 3 * 305 + 3 * 56
    assert cost.kernel_cycles(_op("datacopy"), m, GS) == 3 * 305 + 3 * 56


def test_reduce_r_c_z():
    # reduce r: K = m_k·u_kt = 6 input tile rows per output tile
    m = _model(mblock=(1, 2), ublock=(1, 4), m_k=2, u_kt=3)
    assert cost.kernel_cycles(_op("reduce", attrs={"dim": "r"}), m, WH) == int(2 * 2 * 76 + 8 * 6 * 59)
    assert cost.kernel_cycles(_op("reduce", attrs={"dim": "c"}), m, WH) == int(2 * 2 * 0 + 8 * 6 * 91)
    mz = _model(t=2)
    assert cost.kernel_cycles(_op("reduce", attrs={"dim": "z", "z": 4}), mz, WH) == 2 * 4 * (0 + 287 + 268)


def test_splice_gs_typo_is_corrected():
    m = _model(ublock=(1, 2))
    assert cost.kernel_cycles(_op("splice", 3), m, GS) == 132 + 2 * 69
    assert cost.kernel_cycles(_op("splice", 3), m, WH) == 132 + 2 * 69


def test_fused_op_is_sum_of_sub_ops():
    fused = {7: {"inputs": 2, "intermediates": 1, "schedules": [[
        {"e": {"type": "exp", "inputs": ["input0"], "output": "intermed0"}},
        {"m": {"type": "multiply", "inputs": ["intermed0", "input1"], "output": "output"}},
    ]]}}
    op = _op("fused_op", 2, attrs={"fused_op_id": 7})
    m = _model()
    expected = int((9 + 1771) + (222.0 + 54.6 * 2))  # multiply on Float16_b intermediates: df_w 2
    assert cost.kernel_cycles(op, m, WH, fused_ops=fused) == expected
    # A fused matmul sub-op uses its own m_k/u_kt
    fused[8] = {"inputs": 2, "schedules": [[{"mm": {"type": "matmul", "inputs": ["input0", "input1"],
                                                     "attributes": {"m_k": 1, "u_kt": 4}}}]]}
    op8 = _op("fused_op", 2, attrs={"fused_op_id": 8})
    assert cost.kernel_cycles(op8, m, GS, fused_ops=fused) == 1 * 56 + 4 * 36 * 2


def test_clamped_to_2_pow_30():
    m = _model(t=4096, mblock=(64, 64), ublock=(2, 4), m_k=64, u_kt=16)
    assert cost.kernel_cycles(_op("matmul", 2, fidelity=MF.HiFi4), m, GS) == 1 << 30


def test_ideal_matmul_cycles():
    m = _model(t=2, mblock=(1, 2), ublock=(2, 2), m_k=2, u_kt=3)
    assert cost.matmul_ideal_cycles(_op("matmul", 2, fidelity=MF.HiFi2), m, WH) == 2 * 8 * 6 * 16 * 2
    assert cost.matmul_ideal_cycles(_op("add", 2), m, WH) == 0


# --- data movement ---------------------------------------------------------------------------------

def test_device_bandwidth_from_descriptor():
    bw = cost.device_bandwidth(GS)
    assert bw.noc == 16.0
    assert bw.dram_per_channel == pytest.approx(10.5 * (1 << 30) / 1.2e9)
    assert bw.dram_channels == 8
    assert bw.pcie == 24.0
    wh = cost.device_bandwidth(WH)
    assert wh.dram_per_channel == pytest.approx(2 * 19 * (1 << 30) / 1e9)
    assert wh.dram_channels == 6


def test_dram_bound_op_by_hand():
    # a nop of 64 Float16_b tiles per core reading a DRAM queue on one core: one channel's bandwidth
    op = _op("nop")
    m = _model(mblock=(8, 8))
    ctx = cost.BandwidthContext(("dram",), "op")
    br = cost.op_cycle_breakdown(op, m, GS, ctx)
    chan = 10.5 * (1 << 30) / 1.2e9
    assert br.kernel == 64 * 305 + 64 * 56
    assert br.input_bw == math.ceil(64 * 2080 / chan)
    assert br.output_bw == math.ceil(64 * 2080 / 16.0)
    assert br.cycles == max(br.kernel, br.input_bw, br.output_bw)
    # 16 cores share the 8 channels: each gets half a channel
    m16 = _model(mblock=(8, 8), grid=(4, 4))
    assert cost.op_cycle_breakdown(op, m16, GS, ctx).input_bw == math.ceil(64 * 2080 / (8 * chan / 16))


def test_host_and_prologue_sources_and_caps():
    op = _op("add", 2)
    m = _model(mblock=(4, 4), grid=(2, 2))
    host = cost.op_cycle_breakdown(op, m, GS, cost.BandwidthContext(("op", "host"), "host"))
    assert host.input_bw == math.ceil(16 * 2080 / (24.0 / 4))
    assert host.output_bw == math.ceil(16 * 2080 / (24.0 / 4))
    pro = cost.op_cycle_breakdown(op, m, GS, cost.BandwidthContext(("op", "prologue"), "op"))
    assert pro.input_bw == math.ceil(16 * 2080 / 16.0)  # only the NoC input remains
    capped = cost.op_cycle_breakdown(op, m, GS, cost.BandwidthContext(("op", "dram"), "op", (None, 2)))
    assert capped.input_bw == math.ceil(16 * 2080 / 16.0)  # 2 DRAM tiles are cheaper than the NoC input
    assert cost.op_cycles(op, m, GS, cost.BandwidthContext(("op", "host"), "host")) == host.cycles


def test_matmul_operand_traffic():
    op = _op("matmul", 2)
    m = _model(t=2, mblock=(2, 3), ublock=(2, 4), m_k=4, u_kt=2)
    assert cost.input_tiles_per_core(op, m) == (2 * 4 * 8, 2 * 8 * 12)
    assert cost.output_tiles_per_core(m) == 2 * 4 * 12


def test_a_sparse_matmul_streams_its_activation_act_t_times():
    # a 3x3 convolution's im2col: 9 output t slices (one per kernel tap), one activation slice (act_t 1);
    # the picker tiles and index are per output t, the activation crosses the NoC once per input
    m = _model(t=9, mblock=(4, 1), ublock=(2, 2), m_k=3, u_kt=5)
    im2col = _op("matmul", 3, attrs={"identity": True, "indices_len": 90, "act_t": 1})
    assert cost.input_tiles_per_core(im2col, m)[:2] == (9 * 8 * 15, 1 * 15 * 2)
    streamed = _op("matmul", 3, attrs={"identity": True, "indices_len": 90, "act_t": 9})
    assert cost.input_tiles_per_core(streamed, m)[1] == 9 * 15 * 2
    assert cost.input_tiles_per_core(_op("matmul", 2), m)[1] == 9 * 15 * 2  # a dense in1 has t slices


def test_epoch_overhead():
    bw = cost.device_bandwidth(GS)
    expected = int(cost.EPOCH_LAUNCH_CYCLES + (10 * cost.OVERLAY_BLOB_BYTES + 1_000_000) / bw.dram_total)
    assert cost.epoch_overhead_cycles(1_000_000, 10, GS) == expected


def test_tile_sizes_follow_arch():
    assert cost.tile_size_bytes(DF.Bfp8_b) == 1120
    assert cost.tile_size_bytes(DF.Float32) == 4128
    assert cost.tile_size_bytes(DF.Invalid) == 2080


# --- sparse matmul -----------------------------------------------------------------------------------

def _sparse(indices_len, m_k, fidelity=MF.LoFi, in_df=DF.Bfp8_b):
    return _op("matmul", 3, in_df=in_df, fidelity=fidelity,
               attrs={"identity": True, "num_sparse_tiles": 9, "num_index_tiles": 1, "indices_len": indices_len,
                      "m_k": m_k})


def test_wh_sparse_matmul_v2_by_hand():
    """A conv im2col picker on WH: BBE's sparse V2 formula (decode per strip ublock, non-zero ublock and
    non-zero strip; math, reload and pack at the measured cycles of the output ublock shape)."""
    m = _model(mblock=(8, 2), ublock=(1, 2), m_k=1568, u_kt=1, grid=(4, 1))
    op = _sparse(400, 1568)
    op.attrs["num_nz_strips"] = [30, 40, 40, 30]  # one per core; the busiest core bounds the op
    # per core: 100 non-zero tiles; 40 strips; ublocks min(40 + 8, 40·8, 100) = 48; LoFi (1, 2, 1) = 125/110/100
    decode = 40 * 8 * 80 + 48 * 80 + 40 * 100
    math_ = 100 * 2 * 2 * 125
    reload = 48 * 2 * 2 * 1 * 110  # m_k > 1: every non-zero ublock reloads its output tiles
    pack = 1 * 2 * 8 * 2 * 1 * 100
    assert cost.kernel_cycles(op, m, WH) == int(decode + math_ + reload + pack)
    # the work follows the index: twice the entries, about twice the math (strips as given)
    op2 = _sparse(800, 1568)
    op2.attrs["num_nz_strips"] = [30, 40, 40, 30]
    assert cost.kernel_cycles(op2, m, WH) - cost.kernel_cycles(op, m, WH) == 100 * 2 * 2 * 125 + (
        48 * 2 * 2 * 110 - 48 * 2 * 2 * 110)
    # ideal: 100 products x 4 output columns x 16 cycles (LoFi)
    assert cost.matmul_ideal_cycles(op, m, WH) == int(100 * 4 * 16)


def test_gs_sparse_matmul_v1_by_hand():
    """Grayskull: BBE's sparse V1 formula with its params_v2 weights (math 36·F per non-zero tile and output
    column, reload/pack/decode per strip ublock and non-zero ublock)."""
    m = _model(t=2, mblock=(4, 1), ublock=(2, 2), m_k=3, u_kt=5, grid=(2, 1))
    op = _sparse(160, 3, fidelity=MF.HiFi3, in_df=DF.Float16_b)
    nz = 80  # per core
    strips_ub = 2 * 3 * 4  # t·m_k·mblock_m
    nz_ub = nz // (2 * 2 * 2)  # non-zero tiles in whole ublocks (t·ur·uc)
    math_ = nz * 1 * 2 * 36 * 3
    reload = (strips_ub * 20 + nz_ub * (20 + 20 * 4)) * 1 + 4 * 2 * (20 + 20 * 4) * 1
    pack = 25 * (strips_ub - nz_ub) * 1 + 25 * 2 * 2 * 1 * 4 * 2 * 2
    decode = nz * 12 * (2 + 1) + strips_ub * 8 + nz_ub * 8
    assert cost.kernel_cycles(op, m, GS) == int(math_ + reload + pack + decode)


def test_sparse_matmul_fidelity_and_ublock_shape():
    m = _model(mblock=(1, 1), ublock=(1, 4), grid=(1, 1))
    lo, hi2, hi3, hi4 = (cost.kernel_cycles(_sparse(1000, 1, f), m, WH) for f in (MF.LoFi, MF.HiFi2, MF.HiFi3, MF.HiFi4))
    # LoFi and HiFi2 have their own measured math (26 and 38 cycles at ublock 1x4); HiFi3/4 scale HiFi2's
    assert hi2 - lo == 1000 * 4 * (38 - 26)
    assert math.isclose(hi3 - hi2, 0.2 * 1000 * 4 * 38, abs_tol=1)
    assert math.isclose(hi4 - hi2, 0.7 * 1000 * 4 * 38, abs_tol=1)
    # a one-column ublock is far slower per product than a four-column one (335 against 26 cycles)
    narrow = cost.kernel_cycles(_sparse(1000, 1), _model(mblock=(1, 4), ublock=(1, 1)), WH)
    assert narrow > 3 * lo


def test_sparse_strips_are_counted_from_the_index_for_each_layout():
    """The balancer prices a lowered picker's layouts with the non-zero strips of its index, and the netlist
    records them per core (num_nz_strips) for the performance model."""
    import numpy as np

    from pybuda.perf import sparse

    # 2 t slices, 8 output row tiles: rows 0-3 read K tile r, rows 4-7 K tiles r and r + 1 (a banded picker)
    entries = np.array([(t, r, k) for t in range(2) for r in range(8) for k in ((r,) if r < 4 else (r, r + 1))],
                       dtype=np.int32)
    assert sparse.nz_strips_per_core(entries, 1, 8, 9) == (2,)  # one strip of 9 K tiles per t
    assert sparse.nz_strips_per_core(entries, 2, 4, 1) == (8, 10)  # rows 0-3 read K 0-3, rows 4-7 K 4-8
    assert sparse.nz_strips_per_core(entries, 2, 4, 2) == (4, 6)  # K blocks {0, 1} and {2, 3, 4}, per t
    tags = {sparse.ENTRIES_TAG: entries}
    assert sparse.strips_for_layout(tags, 2, 3, 4, 2) == (4, 4, 4, 6, 6, 6)  # one value per core, row-major
    op = _sparse(len(entries), 5)
    op.tags = tags
    layout = _model(t=2, mblock=(4, 1), ublock=(1, 1), m_k=5, u_kt=2, grid=(2, 1))
    priced = cost.kernel_cycles(op, layout, WH)
    op.attrs["num_nz_strips"] = [4, 6]  # what the netlist records for this layout: the same price
    assert cost.kernel_cycles(op, layout, WH) == priced
    op.attrs["num_nz_strips"] = [4, 4]
    assert cost.kernel_cycles(op, layout, WH) < priced


def test_perf_and_cost_share_one_sparse_formula():
    """The stopgap perf_kernels module is gone: perf.py costs sparse matmuls through cost.py."""
    import importlib.util

    assert importlib.util.find_spec("pybuda.perf.kernels") is None


def test_dram_bytes_per_input_counts_distinct_fetches_and_dram_outputs():
    """Bytes over the DRAM channels per input: a streamed matmul weight once per grid column (multicast
    down the column), the activation from another op not at all, and the output when it goes to DRAM."""
    op = _op("matmul", 2)
    m = _model(mblock=(2, 3), ublock=(2, 4), m_k=4, u_kt=2, grid=(2, 3))
    tile = cost.tile_size_bytes(DF.Float16_b)
    weights = cost.BandwidthContext(("op", "dram"), "op")
    assert cost.dram_bytes_per_input(op, m, weights) == 8 * 12 * tile * 3
    to_dram = cost.BandwidthContext(("op", "prologue"), "dram")
    assert cost.dram_bytes_per_input(op, m, to_dram) == 4 * 12 * tile * 6
    assert cost.dram_bytes_per_input(op, m, cost.BandwidthContext(("op", "prologue"), "op")) == 0


def test_sparse_matmul_reads_only_its_rows_share_of_the_index():
    op = _op("matmul", 3, attrs={"identity": True, "indices_len": 100})
    op.in_df = [DF.Float16_b, DF.Float16_b, DF.RawUInt32]
    m = _model(t=9, mblock=(7, 1), ublock=(7, 1), m_k=8, u_kt=4, grid=(4, 1))
    ctx = cost.BandwidthContext(("dram", "op", "dram"), "op", (24, None, 40))
    idx_tile = cost.tile_size_bytes(DF.RawUInt32)
    # picker tiles whole on each of the 4 cores, index 40/4 tiles on each
    assert cost.dram_bytes_per_input(op, m, ctx) == 4 * (24 * cost.tile_size_bytes(DF.Float16_b) + 10 * idx_tile)
