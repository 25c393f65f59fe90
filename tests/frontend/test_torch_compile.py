"""``torch.compile(model, backend="pybuda")``: graphs run through the ATen mapping and a swappable executor."""

import pytest
import torch
from torch import nn

from pybuda.frontend import torch_compile
from pybuda.frontend.torch_compile import make_backend, pybuda_backend, set_executor


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        h = self.norm(torch.nn.functional.gelu(self.lin(x)))
        return {"probs": h.softmax(-1), "total": h.abs().sum(-1)}


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    set_executor(None)
    torch._dynamo.reset()


class Spy:
    """An executor that records the graphs it runs and delegates to the CPU reference."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph, inputs, parameters=None):
        self.graphs.append(graph)
        return torch_compile._default_executor(graph, inputs, parameters)


def test_backend_is_registered_by_name():
    torch_compile.register()
    assert "pybuda" in torch._dynamo.list_backends()


def test_compiled_model_matches_eager_and_uses_the_executor(fe):
    torch.manual_seed(0)
    model = Small().eval()
    x = torch.randn(2, 5, 8)
    spy = Spy()
    set_executor(spy)
    compiled = torch.compile(model, backend="pybuda")
    with torch.no_grad():
        got = compiled(x)
        want = model(x)
    assert set(got) == {"probs", "total"}
    fe.matches([got["probs"], got["total"]], [want["probs"], want["total"]])
    assert len(spy.graphs) == 1
    graph = spy.graphs[0]
    assert {"matmul", "gelu", "layernorm", "softmax", "reduce_sum"} <= {n.op_type for n in graph.ops}
    # Weights dynamo passes as inputs are graph parameters, with their state-dict names.
    assert {"lin.weight", "lin.bias", "norm.weight", "norm.bias"} <= {n.name for n in graph.parameters}


def test_weight_updates_between_calls_are_seen():
    model = Small().eval()
    x = torch.randn(2, 5, 8)
    compiled = torch.compile(model, backend="pybuda")
    with torch.no_grad():
        first = compiled(x)["total"].clone()
        model.lin.bias.add_(1.0)
        second = compiled(x)["total"]
        assert torch.allclose(second, model(x)["total"], atol=1e-5)
    assert not torch.allclose(first, second)


def test_unsupported_graph_runs_on_torch_and_says_why(caplog):
    class Bessel(nn.Module):
        def forward(self, x):
            return torch.special.i0(x) * 2

    x = torch.randn(3, 6)
    spy = Spy()
    compiled = torch.compile(Bessel(), backend=make_backend(executor=spy))
    with caplog.at_level("WARNING", logger="pybuda.frontend.torch_compile"):
        out = compiled(x)
    assert torch.equal(out, torch.special.i0(x) * 2)
    assert spy.graphs == []
    assert any("aten.i0.default" in r.getMessage() for r in caplog.records)


def test_backend_function_directly():
    model = Small().eval()
    x = torch.randn(1, 2, 8)
    gm = torch.fx.symbolic_trace(lambda t: torch.relu(t) * 2 + 1)
    run = pybuda_backend(gm, [x])
    (out,) = run(x)
    assert torch.allclose(out, torch.relu(x) * 2 + 1)
    assert run.pybuda_capture.graph.ops  # it really was mapped
    del model
