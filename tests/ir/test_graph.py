"""ir.Graph: building, validation through the registry, printing, and (de)serialisation."""

import pytest
import torch

from pybuda.errors import ModuleError, OpError
from pybuda.ir import Graph
from pybuda.verify import run_graph_on_cpu


def _small_graph() -> Graph:
    g = Graph("g")
    g.add_input("x", (2, 3))
    g.add_parameter("w", torch.randn(3, 4))
    g.add_constant("c", torch.tensor([0.5]))
    g.add_op("mm", "matmul", ["x", "w"])
    g.add_op("scaled", "multiply", ["mm", "c"])
    g.add_output("out", "scaled")
    return g


def test_shapes_come_from_the_registry():
    g = _small_graph()
    assert g["mm"].shape == (2, 4) and g["scaled"].shape == (2, 4)
    assert [n.name for n in g.inputs] == ["x"] and [n.name for n in g.outputs] == ["out"]
    assert g.users("mm") == ["scaled"]
    with pytest.raises(OpError, match="inner dimensions"):
        g.add_op("bad", "matmul", ["x", "x"])


def test_builder_rejects_unknown_operands_and_duplicate_names():
    g = _small_graph()
    with pytest.raises(ModuleError, match="not in graph"):
        g.add_op("e", "exp", ["nope"])
    with pytest.raises(ModuleError, match="already has"):
        g.add_op("mm", "exp", ["x"])
    with pytest.raises(OpError, match="unknown op"):
        g.add_op("q", "no_such_op", ["x"])


def test_printer_is_deterministic_and_readable():
    text = str(_small_graph())
    assert text.splitlines()[0] == "graph g (microbatch=1) {"
    assert "  %mm = matmul(%x, %w) : [2, 4] float32" in text
    assert str(_small_graph()) == text


def test_json_round_trip_preserves_structure(tmp_path):
    g = _small_graph()
    g2 = Graph.from_json(g.to_json(), g.tensors)
    assert g2.to_json() == g.to_json()
    x = torch.randn(2, 3)
    assert torch.equal(run_graph_on_cpu(g, [x])[0], run_graph_on_cpu(g2, [x])[0])
    g.save(str(tmp_path / "graph"))
    g3 = Graph.load(str(tmp_path / "graph"))
    assert torch.equal(run_graph_on_cpu(g3, [x])[0], run_graph_on_cpu(g, [x])[0])


def test_attributes_survive_json(tmp_path):
    g = Graph("attrs")
    g.add_input("x", (2, 8))
    g.add_op("r", "relu", ["x"], {"threshold": 0.25, "mode": "max"})
    g.add_output("o", "r")
    g2 = Graph.from_json(g.to_json())
    assert g2["r"].attrs == {"threshold": 0.25, "mode": "max"}


def test_cpu_execution_checks_inputs():
    from pybuda.errors import InputError

    g = _small_graph()
    with pytest.raises(InputError, match="takes 1 input"):
        run_graph_on_cpu(g, [])
    with pytest.raises(InputError, match=r"expects shape \[2, 3\]"):
        run_graph_on_cpu(g, [torch.randn(3, 3)])


def test_an_operand_used_twice_by_one_op_stays_alive():
    g = Graph("sq")
    g.add_input("x", (2, 2))
    g.add_op("e", "exp", ["x"])
    g.add_op("sq", "multiply", ["e", "e"])
    g.add_op("out", "add", ["sq", "e"])
    g.add_output("o", "out")
    x = torch.randn(2, 2)
    assert torch.allclose(run_graph_on_cpu(g, [x])[0], x.exp() ** 2 + x.exp())
