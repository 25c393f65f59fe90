"""The im2col gather of convolutions and max-pools stacks kernel positions along rows (issue #16): the sparse
matmul reads its activation once per output t slice, so one slice per kernel position re-read the whole
activation kk times (ResNet-50's max-pool: 9 reads of 112x112x64 per image, NoC-bound on one core).
Positions are now stacked ``per`` to a slice (as many as one sparse matmul's L1 holds) and read back with
``vslice``. Numerics must not change: every case is compared with the framework (torch) reference."""

import pytest
import torch
from torch import nn

import pybuda
from pass_helpers import check_lowering
from pybuda.compile import pybuda_compile
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.golden.executor import create_executor
from pybuda.ir.graph import Graph
from pybuda.passes.lower import conv as conv_lowering
from pybuda.passes.lower.common import TILE
from pybuda.verify import calculate_pcc

#: Float32 evaluation of the lowered graph (pass_helpers.check_lowering) differs from torch only by the order
#: of float32 sums.
ATOL_F32 = 1e-4
#: Chip numerics (golden device): PCC and an absolute tolerance relative to the largest output, per format
#: (three layers of Bfp8_b at LoFi lose about 5 % of the peak value, the same before and after stacking).
PCC_MIN = 0.99
ATOL_REL = {DataFormat.Bfp8_b: 0.08, DataFormat.Float16_b: 0.03}


def _pickers(bg):
    return [op for op in bg.ops.values() if op.type == "matmul" and op.attrs.get("identity")]


def _graph(op, cin, h, w, k, stride, padding, cout=16, groups=1, act="tanh"):
    torch.manual_seed(0)
    g = Graph(op)
    g.add_input("img", (1, cin, h, w))
    g.add_op("a", act, ["img"])
    if op == "conv2d":
        g.add_parameter("w", torch.randn(cout, cin // groups, k, k) * 0.2)
        g.add_parameter("b", torch.randn(cout) * 0.2)
        g.add_op("y", "conv2d", ["a", "w", "b"], {"stride": stride, "padding": padding, "groups": groups})
    else:
        g.add_op("y", "max_pool2d", ["a"], {"kernel_size": k, "stride": stride, "padding": padding})
    g.add_output("out", "y")
    return g


CASES = [  # op, cin, h, w, kernel, stride, padding, groups
    ("max_pool2d", 16, 20, 20, 3, 2, 1, 1),   # ResNet's max-pool, small
    ("max_pool2d", 40, 17, 23, 3, 2, 1, 1),   # odd sizes, channels not a tile multiple
    ("max_pool2d", 8, 15, 15, 2, 2, 0, 1),    # 2x2 window, odd input, no padding
    ("max_pool2d", 16, 19, 13, 3, 1, 1, 1),   # stride 1
    ("conv2d", 8, 14, 14, 3, 1, 1, 1),
    ("conv2d", 8, 21, 17, 3, 2, 1, 1),        # stride 2, odd sizes
    ("conv2d", 12, 16, 18, 5, 2, 2, 1),       # 5x5 (25 positions, prime-squared)
    ("conv2d", 8, 15, 15, 3, 2, 1, 8),        # depthwise, stride 2
    ("conv2d", 8, 14, 14, 3, 1, 1, 2),        # grouped
]


@pytest.mark.parametrize("per_cap", [None, 1, 3])
@pytest.mark.parametrize("op,cin,h,w,k,stride,padding,groups", CASES)
def test_stacked_taps_give_the_framework_values(op, cin, h, w, k, stride, padding, groups, per_cap, monkeypatch):
    """Every stacking (all positions in one slice, one per slice, and a divisor in between) is exact."""
    if per_cap is not None:
        real = conv_lowering.taps_per_slice

        def capped(kk, rt, grid_rows, limit):
            return max(p for p in range(1, min(per_cap, kk) + 1) if kk % p == 0 and p <= real(kk, rt, grid_rows,
                                                                                                limit))
        monkeypatch.setattr(conv_lowering, "taps_per_slice", capped)
    g = _graph(op, cin, h, w, k, stride, padding, cout=cin if groups == cin else 16, groups=groups)
    bg = check_lowering(g, [torch.randn(1, cin, h, w)], atol=ATOL_F32)
    kk = k * k
    ho = (h + 2 * padding - k) // stride + 1
    wo = (w + 2 * padding - k) // stride + 1
    out_rt = -(-ho * wo // TILE)
    per = kk if per_cap is None else max(p for p in range(1, min(per_cap, kk) + 1) if kk % p == 0)
    im2col = [p for p in _pickers(bg) if p.name.endswith(".im2col")]
    assert len(im2col) == 1
    shape = im2col[0].shape
    assert (shape.z, shape.rt) == (kk // per, per * out_rt), "positions stacked along rows, per to a slice"


def test_max_pool_reads_its_activation_once_per_input():
    """The max-pool picker has one t slice, so the cost model charges its activation once, not per position."""
    g = _graph("max_pool2d", 64, 56, 56, 3, 2, 1, act="relu")
    bg = check_lowering(g, [torch.randn(1, 64, 56, 56)], atol=ATOL_F32)
    (picker,) = [p for p in _pickers(bg) if p.name.endswith(".im2col")]
    assert picker.shape.z == 1 and picker.attrs["act_t"] == 1
    assert picker.shape.rt == 9 * (28 * 28 // TILE + 1)


@pytest.mark.parametrize("kk,rt,grid_rows,limit,want", [
    (9, 98, 10, 150, 9),      # ResNet-50's max-pool on Wormhole: 882 row tiles over 9 grid rows
    (16, 392, 8, 150, 2),     # its prestrided stem: 2 positions per slice (784 tiles over 8 rows)
    (9, 392, 8, 57, 1),       # nothing beyond one position fits
    (25, 7, 10, 57, 25),
    (49, 8, 10, 57, 49),      # 392 tiles over 7 rows
    (49, 61, 10, 57, 1),      # 7 x 61 = 427 tiles: no row count up to 10 gives blocks of <= 57
])
def test_taps_per_slice_takes_the_most_positions_that_fit(kk, rt, grid_rows, limit, want):
    per = conv_lowering.taps_per_slice(kk, rt, grid_rows, limit)
    assert per == want
    assert kk % per == 0
    assert per == 1 or any((per * rt) % d == 0 and per * rt // d <= limit for d in range(1, grid_rows + 1))


@pytest.mark.parametrize("device_config,df,mf", [("wh_n150", DataFormat.Bfp8_b, MathFidelity.LoFi),
                                                 ("gs_e150", DataFormat.Float16_b, MathFidelity.HiFi3)])
def test_resnet_stem_on_the_golden_chip(device_config, df, mf):
    """A ResNet stem (7x7/2 conv, batchnorm, relu, 3x3/2 max-pool) at an odd size, run on the simulated chip."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 7, stride=2, padding=3), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.MaxPool2d(3, stride=2, padding=1), nn.Conv2d(32, 32, 3, padding=1)).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 45, 51)
    with torch.no_grad():
        want = model(x)
    cfg = CompilerConfig(default_df_override=df, default_math_fidelity=mf, device_config=device_config)
    results = pybuda_compile(pybuda.PyTorchModule("stem", model), "stem", x, compiler_cfg=cfg, microbatch_size=1)
    ops = [op for graph in results.netlist.graphs.values() for op in graph.ops.values()]
    pool = next(op for op in ops if op.name.endswith("im2col") and "max_pool" in op.name)
    assert pool.t == 1, "the 9 positions are stacked in one t slice"
    got = create_executor(results).run([x])[0]
    assert got.shape == want.shape
    assert calculate_pcc(want, got) >= PCC_MIN
    assert torch.allclose(got, want, rtol=0, atol=ATOL_REL[df] * float(want.abs().max()))



def _band_slices_on_grayskull(cin, h, w, policy="NLP"):
    """Compile a 1x1 then 3x3 convolution of an ``[1, cin, h, w]`` image for gs_e150 (Float16_b, HiFi3) under
    ``policy``, check its values against torch, and return the t of each im2col band op, sorted."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(cin, 16, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)).eval()
    x = torch.randn(1, cin, h, w)
    with torch.no_grad():
        want = model(x)
    df = DataFormat.Float16_b
    cfg = CompilerConfig(default_df_override=df, default_math_fidelity=MathFidelity.HiFi3, device_config="gs_e150",
                         balancer_policy=policy)
    results = pybuda_compile(pybuda.PyTorchModule("bands", model), "bands", x, compiler_cfg=cfg, microbatch_size=1)
    got = create_executor(results).run([x])[0]
    assert calculate_pcc(want, got) >= PCC_MIN
    assert torch.allclose(got, want, rtol=0, atol=ATOL_REL[df] * float(want.abs().max()))
    ops = [op for graph in results.netlist.graphs.values() for op in graph.ops.values()]
    return sorted(op.t for op in ops if "im2col_band" in op.name)


def test_bands_that_stack_more_positions_on_the_golden_grayskull():
    """A 3x3 convolution of 128 output row tiles stacks only 3 positions per slice in one sparse matmul on
    Grayskull (57 tiles per core, 10 grid rows); in 3 output row bands each stacks all 9 (one t slice, one
    activation read per band). The bands are joined by a splice; values match torch."""
    assert conv_lowering.taps_per_slice(9, 128, 10, 57) == 3
    assert _band_slices_on_grayskull(8, 64, 64) == [1, 1, 1]


def test_a_convolution_banded_for_l1_takes_more_bands_when_they_stack_more():
    """640 output row tiles need 2 bands on Grayskull (at most 570 per sparse matmul), each re-reading its input
    once per kernel position (t = 9); 4 bands stack 3 positions each (t = 3). Ribbon, which reproduces
    TT-Buda, keeps the fewest bands; our policy takes the stacking ones. Values match torch either way."""
    assert _band_slices_on_grayskull(4, 160, 128, "Ribbon") == [9, 9]
    ours = _band_slices_on_grayskull(4, 160, 128)
    assert len(ours) > 2 and max(ours) < 9
