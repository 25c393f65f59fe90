"""Channel concatenation as a splice (issue #16, item 2a): a join of tile-aligned column bands is one
``splice`` op (TT-Buda's lowering) instead of dense column-picker matmuls summed by adds, it computes what
PyTorch computes on the golden chip, and the performance model charges each input its share of the tiles."""

import numpy as np
import pytest
import torch
from torch import nn

import pybuda
from pybuda.arch import get_device_descriptor
from pybuda.balancer.types import OpModel
from pybuda.compile import pybuda_compile
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.golden.executor import create_executor
from pybuda.ir.lowered import BudaOp, TileShape
from pybuda.passes.lower.gather_plan import splice_order
from pybuda.perf import cost
from pybuda.verify import calculate_pcc

#: Float32 storage with HiFi4 products (TF32-like mantissas) through three convolutions.
PCC_MIN = 0.999
ATOL_REL = 0.02


def _join_map(srcs, order):
    """The flat source map of joining ``srcs`` ((z, r, c) each, in input order) along columns in ``order``."""
    offsets = np.cumsum([0] + [z * r * c for z, r, c in srcs])
    parts = [offsets[k] + np.arange(np.prod(srcs[k])).reshape(srcs[k]) for k in order]
    return np.concatenate(parts, axis=2)


@pytest.mark.parametrize("srcs,order", [
    ([(2, 40, 64), (2, 40, 50)], [0, 1]),            # the last band may end inside a tile
    ([(1, 9, 32), (1, 9, 96), (1, 9, 32)], [0, 1, 2]),
    ([(1, 9, 32), (1, 9, 64)], [1, 0]),               # bands in another order than the inputs
])
def test_splice_order_finds_tile_aligned_joins(srcs, order):
    assert splice_order(srcs, _join_map(srcs, order)) == order


@pytest.mark.parametrize("srcs,order", [
    ([(2, 40, 50), (2, 40, 64)], [0, 1]),             # the second band starts inside a tile
    ([(1, 9, 32)] * 9, list(range(9))),               # a splice takes at most 8 inputs
])
def test_splice_order_refuses_what_a_splice_cannot_do(srcs, order):
    assert splice_order(srcs, _join_map(srcs, order)) is None


def test_splice_order_refuses_a_moved_element():
    srcs = [(1, 9, 32), (1, 9, 64)]
    emap = _join_map(srcs, [0, 1])
    emap[0, 3, 40], emap[0, 4, 40] = emap[0, 4, 40], emap[0, 3, 40]  # two rows of one band swapped
    assert splice_order(srcs, emap) is None


class _Osa(nn.Module):
    """A small One-Shot-Aggregation block: two chained 3x3 convs, their input and outputs concatenated on
    channels (tile-aligned widths), a 1x1 projection."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(8, 32, 3, padding=1)
        self.b = nn.Conv2d(32, 64, 3, padding=1)
        self.c = nn.Conv2d(32, 32, 3, padding=1)
        self.proj = nn.Conv2d(32 + 64 + 32, 16, 1)

    def forward(self, x):
        x = torch.relu(self.a(x))
        y = torch.relu(self.b(x))
        z = torch.relu(self.c(x))
        return self.proj(torch.cat([x, y, z], dim=1))


@pytest.mark.parametrize("size", [(12, 14), (4, 32)], ids=["w14", "w32"])
def test_channel_concat_is_one_splice_on_the_golden_chip(size):
    torch.manual_seed(0)
    model = _Osa().eval()
    x = torch.randn(1, 8, *size)
    with torch.no_grad():
        want = model(x)
    cfg = CompilerConfig(default_df_override=DataFormat.Float32, default_math_fidelity=MathFidelity.HiFi4,
                         device_config="wh_n150")
    results = pybuda_compile(pybuda.PyTorchModule("osa", model), "osa", x, compiler_cfg=cfg, microbatch_size=1)
    ops = [op for graph in results.netlist.graphs.values() for op in graph.ops.values()]
    splices = [op for op in ops if op.type == "splice"]
    assert len(splices) == 1 and len(splices[0].inputs) == 3
    # no picker matmuls or adds join the concatenated bands
    assert not [op for op in ops if op.type in ("matmul", "add") and ".cols" in op.name]
    got = create_executor(results).run([x])[0]
    assert got.shape == want.shape
    assert calculate_pcc(want, got) >= PCC_MIN
    assert torch.allclose(got, want, rtol=0, atol=ATOL_REL * float(want.abs().max()))


def test_splice_inputs_are_charged_their_share_of_the_tiles():
    op = BudaOp(name="s", type="splice", inputs=["a", "b"], shape=TileShape(1, 4, 2, 1),
                attrs={"granularity": "t", "input0": [0, 1, 1], "input1": [0, 3, 3]})
    model = OpModel(grid_shape=(1, 1), t=4, mblock=(2, 1), ublock=(1, 1))
    assert cost.input_tiles_per_core(op, model) == (2, 6)
    wh = get_device_descriptor(device_config="wh_n150")
    # t·(ublocks·132 + tiles·69) per core (spec §6.1, n-ary)
    assert cost.kernel_cycles(op, model, wh) == 4 * (2 * 132 + 2 * 69)
