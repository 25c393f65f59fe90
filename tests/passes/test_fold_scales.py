"""Attention's constant score scale moves into the weights of the query (or key) projection."""

import pytest
import torch

from pass_helpers import make_ctx
from pybuda.config import CompilerConfig
from pybuda.ir.graph import Graph
from pybuda.passes.graph.fold_scales import fold_scales
from pybuda.verify import run_graph_on_cpu

HEADS, SEQ, DIM = 2, 8, 6


def _attention(scale_op="multiply", scale=0.125, scale_first=False, extra_reader=False, uniform=True):
    """x [1, SEQ, HEADS*DIM] -> q, k projections -> per-head scores -> (scaled) -> softmax."""
    torch.manual_seed(0)
    g = Graph("attn")
    g.add_input("x", (1, SEQ, HEADS * DIM))
    heads = []
    for name in ("q", "k"):
        g.add_parameter(f"{name}_w", torch.randn(HEADS * DIM, HEADS * DIM))
        g.add_parameter(f"{name}_b", torch.randn(HEADS * DIM))
        g.add_op(name, "matmul", ["x", f"{name}_w", f"{name}_b"])
        g.add_op(f"{name}_heads", "reshape", [name], {"shape": (1, SEQ, HEADS, DIM)})
        g.add_op(f"{name}_t", "transpose", [f"{name}_heads"], {"dim0": 1, "dim1": 2})
        heads.append(f"{name}_t")
    g.add_op("k_tt", "transpose", [heads[1]], {"dim0": 2, "dim1": 3})
    g.add_op("scores", "matmul", [heads[0], "k_tt"])
    value = torch.full((1,), scale) if uniform else torch.tensor([scale, 2 * scale]).reshape(1, 2, 1, 1)
    g.add_constant("s", value)
    g.add_op("scaled", scale_op, ["s", "scores"] if scale_first else ["scores", "s"])
    g.add_op("probs", "softmax", ["scaled"], {"dim": -1})
    g.add_output("out", "probs")
    if extra_reader:
        g.add_output("raw", "scores")
    return g


@pytest.mark.parametrize("scale_op,scale,scale_first", [
    ("multiply", 0.125, False), ("multiply", 0.37, True), ("divide", 2.449, False)])
def test_scale_moves_into_a_projection(scale_op, scale, scale_first):
    g = _attention(scale_op, scale, scale_first)
    ctx = make_ctx()
    folded = fold_scales(g, ctx)
    assert ctx.notes["folded_scales"] == 1
    assert not any(n.op_type == scale_op and "scores" in n.operands for n in folded.ops)
    x = torch.randn(1, SEQ, HEADS * DIM)
    torch.testing.assert_close(run_graph_on_cpu(folded, [x])[0], run_graph_on_cpu(g, [x])[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kwargs", [
    {"extra_reader": True},              # the unscaled scores are read elsewhere
    {"uniform": False},                  # a per-head factor is not one scalar
    {"scale_op": "divide", "scale_first": True},  # s / scores is not a scale
    {"scale": float("inf")},             # inf * (q . k) and (inf * q) . k differ where q . k == 0
])
def test_scale_stays_where_it_is_not_a_plain_factor(kwargs):
    g = _attention(**kwargs)
    assert fold_scales(g, make_ctx()) is g


@pytest.mark.parametrize("config", [CompilerConfig(enable_training=True), CompilerConfig(balancer_policy="Ribbon")])
def test_training_and_ribbon_keep_the_scale(config):
    # Training updates the weights after compile; Ribbon reproduces TT-Buda's compile for calibration.
    g = _attention()
    assert fold_scales(g, make_ctx(config)) is g
