"""Autograd on whole graphs: build_training_graphs' interface, gradient accumulation, recompute, and
parameter gradients of traced PyBuda modules and captured torch models against torch autograd."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

import pybuda
from pybuda import op
from pybuda.errors import CompileError
from pybuda.frontend.torch import capture
from pybuda.ir.graph import Graph
from pybuda.ops import registry
from pybuda.passes.graph.autograd import TrainingGraphs, build_training_graphs, run_training_graphs_on_cpu
from pybuda.verify import calculate_pcc

RTOL = 1e-4
# Whole graphs chain many sums (matmuls, layernorm/softmax statistics) whose float32 rounding differs from
# torch's fused kernels; absolute differences stay around 1e-6 of values of order 1.
ATOL = 1e-5
PCC = 0.99


def close(got: torch.Tensor, want: torch.Tensor, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    assert got.shape == want.shape, f"{what}: {list(got.shape)} vs {list(want.shape)}"
    if want.numel() > 1 and want.std() > 0:
        assert calculate_pcc(got, want) >= PCC, what
    assert torch.allclose(got, want, rtol=rtol, atol=atol), f"{what}: max diff {(got - want).abs().max():.3g}"


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- PyBuda modules ------------------------------------------------------------------------------------


class MLP(pybuda.PyBudaModule):
    def __init__(self, frozen_bias: bool = False):
        super().__init__("mlp")
        g = gen(1)
        self.w1 = pybuda.Parameter(torch.randn(20, 33, generator=g) * 0.3)
        self.b1 = pybuda.Parameter(torch.randn(33, generator=g) * 0.1, requires_grad=not frozen_bias)
        self.w2 = pybuda.Parameter(torch.randn(33, 7, generator=g) * 0.3)
        self.b2 = pybuda.Parameter(torch.randn(7, generator=g) * 0.1)

    def forward(self, x):
        h = op.Relu("relu", op.Add("add1", op.Matmul("mm1", x, self.w1), self.b1))
        return op.Add("add2", op.Matmul("mm2", h, self.w2), self.b2)


def mlp_torch(p, x):
    return torch.relu(x @ p["mlp.w1"] + p["mlp.b1"]) @ p["mlp.w2"] + p["mlp.b2"]


class Block(pybuda.PyBudaModule):
    """A pre-norm transformer block: 2-head attention and a GeLU MLP, both with residuals."""

    D, H, T = 24, 2, 13

    def __init__(self):
        super().__init__("block")
        g = gen(2)
        d = self.D

        def p(*shape, scale=0.2):
            return pybuda.Parameter(torch.randn(*shape, generator=g) * scale)

        self.ln1_w, self.ln1_b = p(d, scale=1.0), p(d, scale=0.1)
        self.wq, self.wk, self.wv, self.wo = p(d, d), p(d, d), p(d, d), p(d, d)
        self.bq = p(d, scale=0.1)
        self.ln2_w, self.ln2_b = p(d, scale=1.0), p(d, scale=0.1)
        self.w_up, self.b_up, self.w_down = p(d, 2 * d), p(2 * d, scale=0.1), p(2 * d, d)

    def heads(self, name, t):
        t = op.Reshape(f"{name}.split", t, (1, self.T, self.H, self.D // self.H))
        return op.Transpose(f"{name}.heads", t, 1, 2)

    def forward(self, x):
        h = op.Layernorm("ln1", x, self.ln1_w, self.ln1_b)
        q = self.heads("q", op.Matmul("q", h, self.wq, self.bq))
        k = self.heads("k", op.Matmul("k", h, self.wk))
        v = self.heads("v", op.Matmul("v", h, self.wv))
        scores = op.Multiply("scale", op.Matmul("qk", q, op.Transpose("kt", k, -2, -1)),
                             pybuda.op.Constant("c", constant=1.0 / math.sqrt(self.D // self.H)))
        attn = op.Matmul("av", op.Softmax("softmax", scores, dim=-1), v)
        attn = op.Reshape("merge", op.Transpose("unheads", attn, 1, 2), (1, self.T, self.D))
        x = op.Add("res1", x, op.Matmul("o", attn, self.wo))
        h = op.Layernorm("ln2", x, self.ln2_w, self.ln2_b)
        up = op.Gelu("gelu", op.Matmul("up", h, self.w_up, self.b_up), approximate="tanh")
        return op.Add("res2", x, op.Matmul("down", up, self.w_down))


def block_torch(p, x):
    T, H, D = Block.T, Block.H, Block.D

    def heads(t):
        return t.reshape(1, T, H, D // H).transpose(1, 2)

    h = torch.layer_norm(x, (D,), p["block.ln1_w"], p["block.ln1_b"])
    q, k, v = heads(h @ p["block.wq"] + p["block.bq"]), heads(h @ p["block.wk"]), heads(h @ p["block.wv"])
    attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D // H), -1) @ v
    x = x + attn.transpose(1, 2).reshape(1, T, D) @ p["block.wo"]
    h = torch.layer_norm(x, (D,), p["block.ln2_w"], p["block.ln2_b"])
    up = torch.nn.functional.gelu(h @ p["block.w_up"] + p["block.b_up"], approximate="tanh")
    return x + up @ p["block.w_down"]


def torch_param_grads(graph: Graph, fn, inputs, grad_out, names=None):
    """Gradients of fn(params, *inputs) for the graph's trainable parameters (by torch autograd)."""
    params = {n.name: graph.tensors[n.name].clone().requires_grad_(n.requires_grad) for n in graph.parameters}
    out = fn(params, *inputs)
    out.backward(grad_out)
    return {k: v.grad for k, v in params.items() if v.requires_grad}


def check_training(graph: Graph, fn, inputs, recompute=False):
    tg = build_training_graphs(graph, recompute=recompute)
    grad_out = torch.randn(graph.outputs[0].shape, generator=gen(9))
    outs, grads = run_training_graphs_on_cpu(tg, inputs, [grad_out])
    want = torch_param_grads(graph, fn, inputs, grad_out)
    assert set(grads) == set(want)
    for name, value in want.items():
        close(grads[name], value, name)
    with torch.no_grad():
        close(outs[0], fn({k: graph.tensors[k] for k in graph.tensors}, *inputs), "forward output")
    return tg, grads


@pytest.mark.parametrize("recompute", [False, True])
def test_mlp_parameter_gradients(recompute):
    x = torch.randn(4, 20, generator=gen(3))
    graph, _ = MLP().trace(x)
    tg, _ = check_training(graph, mlp_torch, [x], recompute=recompute)
    assert list(tg.param_grads) == ["mlp.w1", "mlp.b1", "mlp.w2", "mlp.b2"]


@pytest.mark.parametrize("recompute", [False, True])
def test_transformer_block_parameter_gradients(recompute):
    x = torch.randn(1, Block.T, Block.D, generator=gen(4))
    graph, _ = Block().trace(x)
    tg, _ = check_training(graph, block_torch, [x], recompute=recompute)
    assert len(tg.param_grads) == len(graph.parameters)


def test_recompute_gives_the_same_gradients_and_saves_only_inputs():
    x = torch.randn(1, Block.T, Block.D, generator=gen(4))
    graph, _ = Block().trace(x)
    grad_out = torch.randn(graph.outputs[0].shape, generator=gen(5))
    plain = build_training_graphs(graph)
    again = build_training_graphs(graph, recompute=True)
    assert plain.saved_outputs and set(plain.saved) - {n.name for n in graph.inputs}
    assert again.saved == [n.name for n in graph.inputs] and again.saved_outputs == []
    assert len(again.forward.outputs) == len(graph.outputs)
    assert len(plain.forward.outputs) == len(graph.outputs) + len(plain.saved_outputs)
    _, g1 = run_training_graphs_on_cpu(plain, [x], [grad_out])
    _, g2 = run_training_graphs_on_cpu(again, [x], [grad_out])
    for name in g1:
        close(g2[name], g1[name], name, atol=1e-6)


# --- captured torch model ------------------------------------------------------------------------------


class TorchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        h = self.norm(torch.nn.functional.gelu(self.fc1(x)))
        return torch.softmax(self.fc2(h) + h[..., :5], dim=-1)


def test_captured_torch_model_gradients_match_torch():
    torch.manual_seed(0)
    model = TorchNet().eval()
    x = torch.randn(3, 12, generator=gen(6))
    graph = capture(model, (x,)).graph
    tg = build_training_graphs(graph)
    grad_out = torch.randn(graph.outputs[0].shape, generator=gen(7))
    outs, grads = run_training_graphs_on_cpu(tg, [x], [grad_out])
    model.zero_grad()
    y = model(x)
    y.backward(grad_out)
    close(outs[0], y.detach(), "output")
    named = dict(model.named_parameters())
    assert set(tg.param_grads) == set(named)
    for name, p in named.items():
        close(grads[name], p.grad, name)


def test_input_gradients_match_torch():
    torch.manual_seed(0)
    model = TorchNet().eval()
    x = torch.randn(3, 12, generator=gen(6))
    graph = capture(model, (x,)).graph
    name = graph.inputs[0].name
    tg = build_training_graphs(graph, input_grads=[name])
    assert [o.name for o in tg.backward.outputs][-1] == f"grad.{name}" == tg.input_grads[name]
    grad_out = torch.randn(graph.outputs[0].shape, generator=gen(7))
    _, grads = run_training_graphs_on_cpu(tg, [x], [grad_out])
    leaf = x.clone().requires_grad_(True)
    model(leaf).backward(grad_out)
    close(grads[name], leaf.grad, "input gradient")


# --- accumulation, interface, errors -------------------------------------------------------------------


def _graph_with(shape=(5, 9)):
    g = Graph("g")
    g.add_input("x", shape)
    return g


def test_tied_weights_and_residual_accumulate():
    """w is used by two matmuls (tied: once transposed) and x reaches the output on two paths."""
    g = _graph_with((5, 9))
    w = torch.randn(9, 9, generator=gen(1)) * 0.3
    g.add_parameter("w", w)
    g.add_op("h", "matmul", ["x", "w"])
    g.add_op("wt", "transpose", ["w"], {"dim0": 0, "dim1": 1})
    g.add_op("h2", "matmul", ["h", "wt"])
    g.add_op("t", "tanh", ["h2"])
    g.add_op("res", "add", ["t", "x"])  # residual
    g.add_op("out", "multiply", ["res", "h"])  # h used twice
    g.add_output("y", "out")
    x = torch.randn(5, 9, generator=gen(2))
    tg = build_training_graphs(g, input_grads=["x"])
    grad_out = torch.randn(5, 9, generator=gen(3))
    _, grads = run_training_graphs_on_cpu(tg, [x], [grad_out])
    wl, xl = w.clone().requires_grad_(True), x.clone().requires_grad_(True)
    h = xl @ wl
    ((torch.tanh(h @ wl.t()) + xl) * h).backward(grad_out)
    close(grads["w"], wl.grad, "tied weight")
    close(grads["x"], xl.grad, "input on several paths")
    # The accumulation is an add in the backward graph, not a special node.
    assert any(n.op_type == "add" for n in tg.backward.ops)


def test_interface_order_saved_values_and_outputs():
    g = _graph_with((4, 6))
    g.add_parameter("w", torch.randn(6, 3))
    g.add_parameter("frozen", torch.randn(4, 3), requires_grad=False)
    g.add_constant("k", torch.tensor([2.0]))
    g.add_op("mm", "matmul", ["x", "w"])
    g.add_op("e", "exp", ["mm"])  # exp's backward reads its output: saved
    g.add_op("s", "multiply", ["e", "frozen"])
    g.add_op("sk", "multiply", ["s", "k"])
    g.add_op("am", "argmax", ["x"], {"dim": -1})  # no gradient path
    g.add_output("y", "sk")
    g.add_output("idx", "am")
    tg = build_training_graphs(g)
    assert isinstance(tg, TrainingGraphs)
    bw = tg.backward
    assert [n.name for n in bw.inputs] == ["grad.y", "grad.idx"] + tg.saved
    assert tg.output_grads == ["grad.y", "grad.idx"]
    assert set(tg.saved) == {"x", "e"}
    assert tg.saved_outputs == ["saved.e"] and tg.saved_outputs_sources() == ["e"]
    fwd_outs = [n.name for n in tg.forward.outputs]
    assert fwd_outs == ["y", "idx", "saved.e"]  # inputs are fed again, not returned
    assert [n.name for n in bw.outputs] == ["grad.w"] and tg.param_grads == {"w": "grad.w"}
    # Parameters are shared by name with the same value and requires_grad; constants are copied.
    assert bw["frozen"].kind == "parameter" and not bw["frozen"].requires_grad
    assert torch.equal(bw.tensors["frozen"], g.tensors["frozen"])
    assert bw["k"].kind == "constant"
    assert "w" not in bw  # the matmul gradient wrt w needs x and the incoming gradient, not w
    # The gradient input of the argmax output is there but unused.
    assert not bw.users("grad.idx")
    x = torch.randn(4, 6)
    gy = torch.randn(4, 3)
    _, grads = run_training_graphs_on_cpu(tg, [x, ], [gy, torch.zeros(4, 1)])
    wl = g.tensors["w"].clone().requires_grad_(True)
    (torch.exp(x @ wl) * g.tensors["frozen"] * 2.0).backward(gy)
    close(grads["w"], wl.grad, "w")


def test_frozen_parameters_get_no_gradient_output():
    x = torch.randn(4, 20, generator=gen(3))
    graph, _ = MLP(frozen_bias=True).trace(x)
    tg = build_training_graphs(graph)
    assert "mlp.b1" not in tg.param_grads
    assert "grad.mlp.b1" not in [n.name for n in tg.backward.outputs]
    check_training(graph, mlp_torch, [x])


def test_unreachable_trainable_parameter_gets_zero_gradient():
    g = _graph_with((3, 4))
    g.add_parameter("w", torch.randn(3, 4))
    g.add_parameter("unused", torch.randn(2, 2))
    g.add_op("y", "multiply", ["x", "w"])
    g.add_output("out", "y")
    tg = build_training_graphs(g)
    assert list(tg.param_grads) == ["w", "unused"]
    src = tg.backward[tg.backward["grad.unused"].operands[0]]
    assert src.kind == "constant"
    _, grads = run_training_graphs_on_cpu(tg, [torch.randn(3, 4)])
    assert torch.equal(grads["unused"], torch.zeros(2, 2))


def test_non_differentiable_op_stops_the_gradient():
    """greater() is marked NO_GRADIENT: w only gets the gradient through the multiply."""
    g = _graph_with((3, 4))
    w = torch.randn(3, 4)
    g.add_parameter("w", w)
    g.add_op("mask", "greater", ["w", "x"])
    g.add_op("y", "multiply", ["mask", "w"])
    g.add_output("out", "y")
    x = torch.randn(3, 4)
    tg = build_training_graphs(g)
    _, grads = run_training_graphs_on_cpu(tg, [x])
    assert torch.equal(grads["w"], (w > x).float())


def test_integer_values_carry_no_gradient():
    g = Graph("emb")
    g.add_input("ids", (2, 5), dtype=torch.int64)
    table = torch.randn(11, 6)
    g.add_parameter("table", table)
    g.add_op("e", "embedding", ["table", "ids"])
    g.add_op("r", "reduce_sum", ["e"], {"dim": -1})
    g.add_output("out", "r")
    with pytest.raises(CompileError, match="integer"):
        build_training_graphs(g, input_grads=["ids"])
    tg = build_training_graphs(g)
    ids = torch.tensor([[1, 3, 3, 10, 0], [2, 2, 2, 9, 1]])
    _, grads = run_training_graphs_on_cpu(tg, [ids])
    want = torch.zeros(11, 6).index_add_(0, ids.reshape(-1), torch.ones(10, 6))
    close(grads["table"], want, "table")


def test_op_without_backward_on_the_path_raises_naming_it(monkeypatch):
    opdef = registry.get("gelu")
    monkeypatch.setitem(registry._REGISTRY, "gelu", dataclasses.replace(opdef, backward=None))
    g = _graph_with((3, 4))
    g.add_parameter("w", torch.randn(3, 4))
    g.add_op("my_gelu", "gelu", ["w"])
    g.add_op("y", "add", ["my_gelu", "x"])
    g.add_output("out", "y")
    with pytest.raises(CompileError) as info:
        build_training_graphs(g)
    assert info.value.stage == "AUTOGRAD" and info.value.op == "my_gelu"
    assert "gelu" in str(info.value)
    # Off the gradient path the same op is fine.
    g2 = _graph_with((3, 4))
    g2.add_parameter("w", torch.randn(3, 4))
    g2.add_op("my_gelu", "gelu", ["x"])
    g2.add_op("y", "add", ["my_gelu", "w"])
    g2.add_output("out", "y")
    build_training_graphs(g2)


def test_bad_input_grads_name_raises():
    g = _graph_with()
    g.add_op("y", "exp", ["x"])
    g.add_output("out", "y")
    with pytest.raises(CompileError, match="nope"):
        build_training_graphs(g, input_grads=["nope"])


def test_backward_graph_is_valid_and_round_trips():
    """The backward graph is an ordinary Graph of registry ops: it serialises and re-validates."""
    x = torch.randn(1, Block.T, Block.D, generator=gen(4))
    graph, _ = Block().trace(x)
    tg = build_training_graphs(graph)
    ops = {n.op_type for n in tg.backward.ops}
    assert ops <= {o.name for o in registry.all_ops()}
    again = Graph.from_json(tg.backward.to_json(), tg.backward.tensors)
    assert [n.name for n in again] == [n.name for n in tg.backward]


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 6, 3, stride=2, groups=3)
        self.fc = nn.Linear(6 * 2 * 5, 4)

    def forward(self, x):
        h = nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2, ceil_mode=True)
        h = nn.functional.avg_pool2d(self.conv2(h), 2)
        return self.fc(h.flatten(1))


@pytest.mark.parametrize("recompute", [False, True])
def test_captured_conv_net_gradients_match_torch(recompute):
    torch.manual_seed(0)
    model = ConvNet().eval()
    with torch.no_grad():  # non-trivial running statistics
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 17, 45, generator=gen(8))
    graph = capture(model, (x,)).graph
    tg = build_training_graphs(graph, recompute=recompute)
    grad_out = torch.randn(graph.outputs[0].shape, generator=gen(7))
    _, grads = run_training_graphs_on_cpu(tg, [x], [grad_out])
    model.zero_grad()
    model(x).backward(grad_out)
    named = dict(model.named_parameters())
    assert set(tg.param_grads) == set(named)
    for name, p in named.items():
        close(grads[name], p.grad, name, atol=1e-4)  # convolutions sum hundreds of products (see ATOL)


class TiedLM(pybuda.PyBudaModule):
    """An embedding table reused (transposed) as the output projection, plus a residual."""

    def __init__(self):
        super().__init__("lm")
        g = gen(3)
        self.emb = pybuda.Parameter(torch.randn(19, 8, generator=g))
        self.proj = pybuda.Parameter(torch.randn(8, 8, generator=g) * 0.3)

    def forward(self, ids):
        h = op.Embedding("embed", self.emb, ids)
        h = op.Add("res", h, op.Tanh("tanh", op.Matmul("proj", h, self.proj)))
        return op.Matmul("logits", h, op.Transpose("tied", self.emb, 0, 1))


def lm_torch(p, ids):
    h = p["lm.emb"][ids]
    h = h + torch.tanh(h @ p["lm.proj"])
    return h @ p["lm.emb"].t()


def test_tied_embedding_accumulates_both_uses():
    ids = torch.tensor([[3, 1, 18, 3, 0, 7]])
    graph, _ = TiedLM().trace(ids)
    assert graph.inputs[0].dtype == torch.int64
    tg, _ = check_training(graph, lm_torch, [ids])
    assert list(tg.param_grads) == ["lm.emb", "lm.proj"]
    assert "ids" in tg.saved  # integer inputs are fed again, never differentiated


class WideBlock(Block):
    """The transformer block at tile-friendly sizes (head dim 32), as the chip's lowering wants them."""

    D, H, T = 64, 2, 32

    def __init__(self):
        super().__init__()
        self.name = "block"


@pytest.mark.parametrize("recompute", [False, True])
def test_backward_graph_compiles_through_the_pipeline(recompute):
    """Backwards are made of registry ops, so the backward graph lowers to the chip like a forward."""
    from pybuda.compile import compile_graph

    graph, _ = WideBlock().trace(torch.randn(1, WideBlock.T, WideBlock.D, generator=gen(4)))
    tg = build_training_graphs(graph, recompute=recompute)
    result = compile_graph(tg.backward, "wh_n150", epoch_type="bwd")
    assert result.netlist is not None and result.lowered_graph is not None
