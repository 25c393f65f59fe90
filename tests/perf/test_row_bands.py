"""Convolutions and row pickers too large for one sparse matmul's L1 are sliced into output row bands
(issue #16, item 2b): a sparse matmul cannot t-stream, so only the grid rows split its output, and a prime
or very large row-tile count left no layout on Grayskull (Inception-v4's stem, U-Net at 256x256)."""

import pytest
import torch
from torch import nn

import pybuda
from pybuda.arch import get_device_descriptor
from pybuda.compile import pybuda_compile
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.golden.executor import create_executor
from pybuda.passes.lower.common import TILE
from pybuda.passes.lower.conv import MAX_BANDS, band_limit_tiles, row_bands
from pybuda.verify import calculate_pcc

#: Float16_b storage with HiFi3 products through one convolution (Grayskull's benchmark format).
PCC_MIN = 0.99
ATOL_REL = 0.05


def _fits(n, grid_rows, limit):
    return any(n % d == 0 and n // d <= limit for d in range(1, grid_rows + 1))


@pytest.mark.parametrize("rt,grid_rows,limit", [(386, 10, 57), (2048, 8, 57), (2048, 9, 111), (61, 10, 57),
                                                (694, 10, 57)])
def test_row_bands_cover_the_rows_in_bands_that_fit(rt, grid_rows, limit):
    rows = rt * TILE - 5
    bands = row_bands(rt, grid_rows, limit, rows)
    assert bands is not None and 1 < len(bands) <= MAX_BANDS
    assert bands[0][0] == 0 and bands[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(bands, bands[1:]))
    for r0, r1 in bands[:-1]:
        assert r0 % TILE == 0 and (r1 - r0) % (grid_rows * TILE) == 0
    assert all(_fits(-(-(r1 - r0) // TILE), grid_rows, limit) for r0, r1 in bands)


@pytest.mark.parametrize("rt", [392, 98, 57, 1])
def test_row_bands_leave_what_fits_alone(rt):
    assert row_bands(rt, 10, 57, rt * TILE) is None


def test_band_limit_follows_the_l1_budget():
    gs, wh = (get_device_descriptor(device_config=c) for c in ("gs_e150", "wh_n150"))
    assert band_limit_tiles(gs.l1_pybuda_budget_bytes) < band_limit_tiles(wh.l1_pybuda_budget_bytes)


def _conv_on_grayskull(name, conv, x):
    """Compile ``conv`` + relu for Grayskull at Float16_b/HiFi3; (results, torch output, netlist ops)."""
    model = nn.Sequential(conv, nn.ReLU()).eval()
    with torch.no_grad():
        want = model(x)
    cfg = CompilerConfig(default_df_override=DataFormat.Float16_b, default_math_fidelity=MathFidelity.HiFi3,
                         device_config="gs_e150")
    results = pybuda_compile(pybuda.PyTorchModule(name, model), name, x, compiler_cfg=cfg, microbatch_size=1)
    return results, want, [op for graph in results.netlist.graphs.values() for op in graph.ops.values()]


def test_banded_convolution_on_the_golden_grayskull():
    # 61 x 32 output pixels = 61 row tiles (a prime above one core's limit): two row bands joined by a splice
    torch.manual_seed(0)
    x = torch.randn(1, 8, 61, 32)
    results, want, ops = _conv_on_grayskull("band", nn.Conv2d(8, 32, 3, padding=1), x)
    assert len([op for op in ops if "im2col_band" in op.name]) == 2
    assert len([op for op in ops if op.type == "splice"]) == 1
    got = create_executor(results).run([x])[0]
    assert got.shape == want.shape
    assert calculate_pcc(want, got) >= PCC_MIN
    assert torch.allclose(got, want, rtol=0, atol=ATOL_REL * float(want.abs().max()))


def test_the_netlist_records_each_sparse_matmuls_non_zero_strips_per_core():
    # num_nz_strips (one value per core, as TT-Buda's netlists had) is what the performance model prices a
    # sparse matmul's decode with; it must match what the balancer priced for the chosen layout.
    import numpy as np

    from pybuda.perf import cost, sparse
    from pybuda.perf.model import _CostModel, _CostOp, estimate_compiled

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)).eval()
    x = torch.randn(1, 16, 40, 40)
    cfg = CompilerConfig(default_df_override=DataFormat.Bfp8_b, default_math_fidelity=MathFidelity.LoFi,
                         device_config="wh_n150")
    results = pybuda_compile(pybuda.PyTorchModule("strips", model), "strips", x, compiler_cfg=cfg, microbatch_size=1)
    report = estimate_compiled(results)
    sparse_ops = [op for graph in results.netlist.graphs.values() for op in graph.ops.values() if op.attr("identity")]
    assert sparse_ops
    for op in sparse_ops:
        strips = op.attr("num_nz_strips")
        assert len(strips) == op.grid_size[0] * op.grid_size[1] and min(strips) > 0
        lowered = results.lowered_graph.ops[op.name]
        rows = op.mblock[0] * op.ublock[0]
        expected = sparse.nz_strips_per_core(lowered.tags[sparse.ENTRIES_TAG], op.grid_size[0], rows,
                                             int(op.attr("u_kt")))
        assert list(strips) == [n for n in expected for _ in range(op.grid_size[1])]
        assert report.op(op.name).kernel_cycles == cost.kernel_cycles(_CostOp(op), _CostModel(op), results.device)
        assert report.op(op.name).kernel_cycles == results.balancer_solution.op_models[op.name].kernel_cycles
    assert np.isfinite(report.samples_per_sec)


def test_sparse_u_kt_options_pad_k_only_when_no_divisor_gives_few_strips():
    from pybuda.balancer.blocking import SPARSE_MAX_K_BLOCKS, sparse_u_kts

    # 386 = 2 x 193: the divisors give 1, 2 or 193 blocks of K; the padded options cover 2..16 blocks first
    opts = sparse_u_kts(386, (386, 193, 2, 1))
    assert opts[:2] == (386, 193)
    assert opts[2:2 + 3] == (129, 97, 78)  # 3, 4 and 5 blocks (387, 388, 390 rows: padded by 1, 2, 4)
    assert opts[-2:] == (2, 1)
    assert all(-(-386 // u) <= SPARSE_MAX_K_BLOCKS for u in opts[:-2])
    # 384 has divisors for every small block count: nothing padded is added before them
    assert sparse_u_kts(384, (384, 192, 128, 96, 64, 48, 32, 24))[:8] == (384, 192, 128, 96, 64, 48, 32, 24)


def test_a_sparse_matmul_with_a_padded_k_is_exact_on_the_golden_grayskull():
    # 53 x 64 pixels x 64 channels: 106 row tiles (2 x 53) of activation. On Grayskull's L1 the im2col cannot
    # take K in one or two blocks, and 53 blocks of 2 would be many strips: K is padded to a few blocks instead,
    # and the zero rows must not change the result.
    torch.manual_seed(0)
    x = torch.randn(1, 64, 53, 64)
    results, want, ops = _conv_on_grayskull("kpad", nn.Conv2d(64, 32, 3), x)
    padded = [op for op in ops if op.attr("identity") and any(getattr(tm, "name", "") == "pad" for tm in op.tms_of(1))]
    got = create_executor(results).run([x])[0]
    assert calculate_pcc(want, got) >= PCC_MIN
    assert torch.allclose(got, want, rtol=0, atol=ATOL_REL * float(want.abs().max()))
    for op in padded:  # K blocks cover the padded activation
        assert int(op.attr("m_k")) * int(op.attr("u_kt")) > 106 and int(op.attr("m_k")) <= 16
    assert padded, "expected the im2col to pad its K"
