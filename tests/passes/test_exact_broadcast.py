"""Activation broadcasts copy every bit, whatever the data format: a tile broadcast the matrix unit would
round becomes a fused copy (passes/lowered/exact_broadcast.py), and slices repeated over some leading dims
are TMs, not a row picker. (Argmax compares values with their broadcast maximum for equality: a rounded
maximum matched no element, and the index came back one past the end.)"""

import pytest
import torch

from pass_helpers import check_lowering
from pybuda.compile import compile_graph
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat as DF
from pybuda.golden.executor import create_executor
from pybuda.ir.graph import Graph
from pybuda.netlist.tms import apply_tms
from pybuda.passes.lower.gather_plan import leading_repeat_tms
from pybuda.passes.lowered.exact_broadcast import EXACT_TILE_BROADCAST


def _minus_maximum(dim: int) -> Graph:
    """``a - max(x, dim)``: the maximum, an activation, is broadcast over columns (dim -1) or rows (-2)."""
    g = Graph("g")
    g.add_input("a", (1, 64, 64))
    g.add_input("x", (1, 64, 64))
    g.add_op("m", "reduce_max", ["x"], {"dim": dim})
    g.add_op("y", "subtract", ["a", "m"])
    g.add_output("out", "y")
    return g


def _compile(dim: int, device: str, df=None, fusing: bool = True):
    cfg = CompilerConfig(default_df_override=df, enable_auto_fusing=fusing)
    return compile_graph(_minus_maximum(dim), device, cfg)


@pytest.mark.parametrize("device", ["wh_n150", "bh_p150"])
@pytest.mark.parametrize("dim, kind", [(-1, "c"), (-2, "r")], ids=["columns", "rows"])
def test_a_float32_tile_broadcast_is_a_fused_copy_and_exact(device, dim, kind):
    results = _compile(dim, device, DF.Float32, fusing=False)
    g = torch.Generator().manual_seed(0)
    a, x = torch.randn(1, 64, 64, generator=g), torch.randn(1, 64, 64, generator=g)
    got = create_executor(results).run([a, x])[0]
    # Float32 data and Dest, a subtract: bit for bit (a picker matmul read the maximum with 9 or 10 mantissa bits).
    assert torch.equal(got, a - x.amax(dim, keepdim=True))
    bg = results.lowered_graph
    op = bg.ops[f"m.tile_bcast_{kind}"]
    assert op.type == "fused_op" and op.inputs == ["m"] and op.tags[EXACT_TILE_BROADCAST] == kind
    (sub,) = [s for entry in bg.fused_ops[op.attrs["fused_op_id"]]["schedules"][0] for s in entry.values()]
    assert sub["type"] == "nop" and sub["input_tms"] == {0: [{"tile_broadcast": kind}]}
    assert f"tile_bcast_{kind}" not in bg.queues  # the picker constant went with its matmul


@pytest.mark.parametrize("dim, kind", [(-1, "c"), (-2, "r")], ids=["columns", "rows"])
def test_tile_broadcasts_that_are_exact_already_stay_matmuls(dim, kind):
    # Float16_b data (the default) fits the source registers: the netlists of such models do not change.
    op = _compile(dim, "wh_n150", fusing=False).lowered_graph.ops[f"m.tile_bcast_{kind}"]
    assert op.type == "matmul" and op.tags["picker"] == "tile_broadcast"
    # With fusion on, the broadcast's only reader takes it as a tile_broadcast TM: nothing left to replace.
    results = _compile(dim, "wh_n150", DF.Float32)
    assert f"m.tile_bcast_{kind}" not in results.lowered_graph.ops
    assert results.notes["exact_tile_broadcasts"] == 0


@pytest.mark.parametrize("lead, target", [((2, 1), (2, 3)), ((1, 3), (2, 3)), ((1, 2, 1), (3, 2, 5)),
                                          ((2, 1, 1), (2, 3, 4)), ((3, 1), (2, 3, 2)), ((4,), (4,))])
def test_leading_repeat_tms_copy_each_slice_where_it_broadcasts(lead, target):
    z = torch.Size(lead).numel()
    slices = torch.arange(z, dtype=torch.float32).reshape(1, z, 1, 1).expand(1, z, 64, 32).contiguous()
    got = apply_tms(slices, leading_repeat_tms(lead, target))[0, :, 0, 0]
    assert torch.equal(got, torch.arange(z, dtype=torch.float32).reshape(lead).expand(target).reshape(-1))


def test_an_activation_repeated_over_some_leading_dims_uses_tms_not_a_picker():
    g = Graph("g")
    g.add_input("x", (2, 3, 40, 50))
    g.add_op("m", "reduce_max", ["x"], {"dim": 1})  # [2, 1, 40, 50] against [2, 3, 40, 50]
    g.add_op("y", "subtract", ["x", "m"])
    g.add_output("out", "y")
    bg = check_lowering(g, [torch.randn(2, 3, 40, 50)])
    assert not any(op.tags.get("picker") for op in bg.ops.values())
    assert bg.ops["y"].input_tms[1] == [{"broadcast": {"r": 3}}, {"vslice": 3}]
