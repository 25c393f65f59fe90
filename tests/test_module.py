"""PyBudaModule: parameters, constants, submodules, tracing into an ir.Graph, and bad input."""

import pytest
import torch

import pybuda
from pybuda.errors import ModuleError, OpError
from pybuda.verify import calculate_pcc, run_graph_on_cpu
from seed_modules import BudaMatmul


def test_seed_buda_matmul_traces_prints_and_matches_torch():
    module = BudaMatmul("matmul0")
    w = torch.rand(1, 1, 32, 32)
    module.set_parameter("matmul0.weights", w)
    act = torch.rand(1, 1, 32, 32)
    graph, outputs = module.trace(act)
    text = str(graph)
    assert "%matmul = matmul(%act, %matmul0.weights) : [1, 1, 32, 32] float32" in text
    assert "output %matmul0.output_matmul = %matmul" in text
    expected = act @ w
    assert torch.allclose(outputs[0].value(), expected)  # eager values flow along the trace
    (result,) = run_graph_on_cpu(graph, [act])
    assert calculate_pcc(expected, result) >= 0.999 and torch.allclose(result, expected, atol=1e-6)


class Block(pybuda.PyBudaModule):
    def __init__(self, name, width):
        super().__init__(name)
        self.w = pybuda.Parameter(torch.randn(width, width))
        self.b = pybuda.Parameter(torch.randn(1, width))

    def forward(self, x):
        return pybuda.op.Relu("", pybuda.op.Matmul("", x, self.w, self.b))


class TwoBlocks(pybuda.PyBudaModule):
    def __init__(self, name):
        super().__init__(name)
        self.first = Block("ignored", 16)
        self.rest = [Block("ignored", 16), Block("ignored", 16)]

    def forward(self, x):
        y = self.first(x)
        for block in self.rest:
            y = block(y)
        return y


def test_submodules_and_lists_are_named_after_their_attribute():
    m = TwoBlocks("net")
    names = [p.get_name() for p in m.get_parameters()]
    assert names == ["net.first.w", "net.first.b", "net.rest_0.w", "net.rest_0.b", "net.rest_1.w", "net.rest_1.b"]
    assert [p.get_name() for p in m.get_parameters(submodules=False)] == []
    assert m.get_parameter("net.rest_1.b").shape == (1, 16)


def test_nested_modules_trace_and_execute_like_torch():
    torch.manual_seed(0)
    m = TwoBlocks("net")
    x = torch.randn(4, 16)
    graph, _ = m.trace(x)
    y = x
    for blk in [m.first] + m.rest:
        y = torch.relu(y @ blk.w.value() + blk.b.value())
    (out,) = run_graph_on_cpu(graph, [x])
    assert torch.allclose(out, y, atol=1e-5)
    assert len(graph.parameters) == 6 and len(graph.ops) == 6


def test_load_parameter_dict_and_unknown_names():
    m = TwoBlocks("net")
    m.load_parameter_dict({"net.first.w": torch.zeros(16, 16)})
    assert m.get_parameter("net.first.w").value().abs().sum() == 0
    with pytest.raises(ModuleError, match="no parameter 'net.nope'"):
        m.load_parameter_dict({"net.nope": torch.zeros(1)})


def test_constants():
    class WithConstant(pybuda.PyBudaModule):
        def __init__(self, name):
            super().__init__(name)
            self.add_constant("c")
            self.set_constant("c", torch.full((1, 8), 2.0))

        def forward(self, x):
            return pybuda.op.Multiply("scale", x, self.get_constant("c"))

    m = WithConstant("k")
    x = torch.randn(3, 8)
    graph, outs = m.trace(x)
    assert len(graph.constants) == 1
    assert torch.allclose(run_graph_on_cpu(graph, [x])[0], x * 2)
    with pytest.raises(ModuleError, match="no constant"):
        m.get_constant("d")


def test_two_ops_with_one_name_is_a_clear_error():
    class Clash(pybuda.PyBudaModule):
        def forward(self, x):
            a = pybuda.op.Exp("same", x)
            return pybuda.op.Relu("same", a)

    with pytest.raises(ModuleError, match="two ops are named 'same'"):
        Clash("clash").trace(torch.randn(2, 2))


def test_wrong_operand_shape_names_op_and_shapes():
    class Bad(pybuda.PyBudaModule):
        def __init__(self, name):
            super().__init__(name)
            self.w = pybuda.Parameter(torch.randn(5, 7))

        def forward(self, x):
            return pybuda.op.Matmul("mm", x, self.w)

    with pytest.raises(OpError) as info:
        Bad("bad").trace(torch.randn(3, 4))
    msg = str(info.value)
    assert "matmul 'mm'" in msg and "[3, 4]" in msg and "[5, 7]" in msg


def test_wrong_operand_count_and_type():
    x = pybuda.Tensor.create_from_torch(torch.randn(2, 2))
    with pytest.raises(OpError, match="expects 2 to 3 operand"):
        pybuda.op.record.record("matmul", "m", [x])
    with pytest.raises(OpError, match="torch.Tensor"):
        pybuda.op.Add("a", x, torch.randn(2, 2))
    with pytest.raises(OpError, match="op name"):
        pybuda.op.Add(x, x, x)  # forgot the name: the first argument must be a str


def test_forward_must_return_tensors():
    class ReturnsNumber(pybuda.PyBudaModule):
        def forward(self, x):
            return 3

    with pytest.raises(ModuleError, match="must return"):
        ReturnsNumber("n").trace(torch.randn(1))


def test_module_needs_super_init_and_a_name():
    class Forgot(pybuda.PyBudaModule):
        def __init__(self, name):
            self.w = pybuda.Parameter(2, 2)

    with pytest.raises(ModuleError, match="super"):
        Forgot("f")
    with pytest.raises(ModuleError, match="name"):
        pybuda.PyBudaModule("")
