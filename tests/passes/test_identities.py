"""drop_identity_ops: ``x * 1``, ``1 * x``, ``x / 1``, ``x + 0``, ``0 + x`` and ``x - 0`` give ``x`` back; on the
chip each was an op whose multiply truncated ``x`` to the source registers' 19 bits (at Float32)."""

import pytest
import torch

from pybuda.compile import compile_graph, module_to_graph
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF
from pybuda.golden.executor import create_executor
from pybuda.ir.graph import Graph
from pybuda.module import PyTorchModule
from pybuda.passes.graph.identities import drop_identity_ops


def _graph(op_type, const, const_first=False, shape=(4, 32)):
    g = Graph("g")
    g.add_input("x", shape)
    g.add_constant("c", const)
    operands = ["c", "x"] if const_first else ["x", "c"]
    g.add_op("y", op_type, operands)
    g.add_output("out", "y")
    return g


@pytest.mark.parametrize("op_type,value,const_first", [
    ("multiply", 1.0, False), ("multiply", 1.0, True), ("divide", 1.0, False),
    ("add", 0.0, False), ("add", 0.0, True), ("subtract", 0.0, False),
])
def test_an_identity_op_is_dropped(op_type, value, const_first):
    g = drop_identity_ops(_graph(op_type, torch.full((1, 32), value), const_first))
    assert not g.ops and g.outputs[0].operands == ["x"]


@pytest.mark.parametrize("op_type,const,const_first", [
    ("multiply", torch.full((1, 32), 2.0), False),  # not the identity
    ("multiply", torch.tensor([[1.0] * 31 + [0.5]]), False),  # one element is not
    ("subtract", torch.zeros(1, 32), True),  # 0 - x negates
    ("divide", torch.ones(1, 32), True),  # 1 / x
    ("add", torch.zeros(3, 4, 32), False),  # broadcasts x to a wider result
])
def test_anything_else_is_kept(op_type, const, const_first):
    g = _graph(op_type, const, const_first)
    assert drop_identity_ops(g) is g


class _Scaled(torch.nn.Module):
    def forward(self, x):
        return (x * 1.0 + 0.0) / 1.0


def test_x_times_one_is_bit_exact_at_float32():
    x = torch.randn(1, 8, 40, generator=torch.Generator().manual_seed(0))
    graph = module_to_graph(PyTorchModule("scaled", _Scaled().eval()), [x]).graph
    cfg = CompilerConfig(default_df_override=DF.Float32, default_math_fidelity=MF.HiFi4)
    got = create_executor(compile_graph(graph, "wh_n150", cfg)).run([x])[0]
    assert torch.equal(got.reshape(x.shape), x)
