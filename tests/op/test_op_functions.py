"""pybuda.op.* functions from the user's side: trace a small PyBudaModule that calls each function, run the
graph with the CPU reference, and compare to torch (PCC >= 0.99 and allclose at the tolerance named in
the row). Every public function of pybuda.op must have a row."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pybuda
from tests.fn_module import FnModule
from pybuda import op
from pybuda.errors import ModuleError, OpError
from pybuda.ir.graph import OP
from pybuda.verify import calculate_pcc, run_graph_on_cpu

_GEN = torch.Generator().manual_seed(99)


def rn(*shape):
    return torch.randn(shape, generator=_GEN)


def pos(*shape):
    return torch.rand(shape, generator=_GEN) + 0.5


# (function name, fn(module, *inputs), inputs, torch reference(*inputs, **params), params, atol)
_x, _y = rn(2, 3, 5, 7), rn(2, 3, 5, 7)
_p = pos(2, 3, 5, 7)
_w2 = rn(4, 3, 3, 3)
_bias4 = rn(4)
_eq = torch.randint(0, 3, (3, 33), generator=_GEN).float()
_eq2 = torch.randint(0, 3, (3, 33), generator=_GEN).float()

ROWS = [
    ("Matmul", lambda m, a: op.Matmul("mm", a, m.w, bias=m.b), [rn(2, 5, 6)], lambda a, w, b: a @ w + b,
     {"w": rn(6, 3), "b": rn(3)}, 1e-5),
    ("Add", lambda m, a, b: op.Add(m, "add", a, b), [_x, _y], lambda a, b: a + b, None, 0),  # legacy form
    ("Subtract", lambda m, a, b: op.Subtract("", a, b), [_x, _y], lambda a, b: a - b, None, 0),
    ("Multiply", lambda m, a: op.Multiply("", a, 2.5), [_x], lambda a: a * 2.5, None, 0),
    ("Divide", lambda m, a, b: op.Divide("", a, b), [_x, _p], lambda a, b: a / b, None, 1e-6),
    ("Max", lambda m, a, b: op.Max("", a, b), [_x, _y], torch.maximum, None, 0),
    ("Min", lambda m, a, b: op.Min("", a, b), [_x, _y], torch.minimum, None, 0),
    ("Heaviside", lambda m, a: op.Heaviside("", a, 0.5), [torch.tensor([[-1.0, 0.0, 2.0]])],
     lambda a: torch.heaviside(a, torch.tensor(0.5)), None, 0),
    ("Power", lambda m, a, b: op.Power("", a, b), [_p, _x], torch.pow, None, 1e-5),
    ("Equal", lambda m, a, b: op.Equal("", a, b), [_eq, _eq2], lambda a, b: (a == b).float(), None, 0),
    ("NotEqual", lambda m, a, b: op.NotEqual("", a, b), [_eq, _eq2], lambda a, b: (a != b).float(), None, 0),
    ("Greater", lambda m, a, b: op.Greater("", a, b), [_eq, _eq2], lambda a, b: (a > b).float(), None, 0),
    ("Less", lambda m, a, b: op.Less("", a, b), [_eq, _eq2], lambda a, b: (a < b).float(), None, 0),
    ("GreaterEqual", lambda m, a, b: op.GreaterEqual("", a, b), [_eq, _eq2], lambda a, b: (a >= b).float(), None, 0),
    ("LessEqual", lambda m, a, b: op.LessEqual("", a, b), [_eq, _eq2], lambda a, b: (a <= b).float(), None, 0),
    ("LogicalAnd", lambda m, a, b: op.LogicalAnd("", a, b), [_eq, _eq2],
     lambda a, b: torch.logical_and(a, b).float(), None, 0),
    ("LogicalNot", lambda m, a: op.LogicalNot("", a), [_eq], lambda a: torch.logical_not(a).float(), None, 0),
    ("BinaryStack", lambda m, a, b: op.BinaryStack("", a, b, -1), [rn(2, 3), rn(2, 3)],
     lambda a, b: torch.stack([a, b], -1).reshape(2, 6), None, 0),
    ("Where", lambda m, c, a, b: op.Where("", c, a, b), [(_eq > 0).float(), _eq, _eq2],
     lambda c, a, b: torch.where(c > 0, a, b), None, 0),
    ("Abs", lambda m, a: op.Abs("", a), [_x], torch.abs, None, 0),
    ("Exp", lambda m, a: op.Exp("", a), [_x], torch.exp, None, 1e-5),
    ("Log", lambda m, a: op.Log("", a), [_p], torch.log, None, 1e-6),
    ("Reciprocal", lambda m, a: op.Reciprocal("", a), [_p], torch.reciprocal, None, 1e-6),
    ("Sqrt", lambda m, a: op.Sqrt("", a), [_p], torch.sqrt, None, 1e-6),
    ("Sigmoid", lambda m, a: op.Sigmoid("", a), [_x], torch.sigmoid, None, 1e-6),
    ("Sine", lambda m, a: op.Sine("", a), [_x], torch.sin, None, 1e-6),
    ("Cosine", lambda m, a: op.Cosine("", a), [_x], torch.cos, None, 1e-6),
    ("Tanh", lambda m, a: op.Tanh("", a), [_x], torch.tanh, None, 1e-6),
    ("Erf", lambda m, a: op.Erf("", a), [_x], torch.erf, None, 1e-6),
    ("Square", lambda m, a: op.Square("", a), [_x], torch.square, None, 1e-6),
    ("Nop", lambda m, a: op.Nop("", a), [_x], lambda a: a, None, 0),
    ("Buffer", lambda m, a: op.Buffer("", a), [_x], lambda a: a, None, 0),
    ("Tilize", lambda m, a: op.Tilize("", a), [_x], lambda a: a, None, 0),
    ("Identity", lambda m, a: op.Identity("", a, unsqueeze="unsqueeze", unsqueeze_dim=1), [_x],
     lambda a: a.unsqueeze(1), None, 0),
    ("Cast", lambda m, a: op.Cast("", a, torch.int32), [_x * 4], lambda a: a.to(torch.int32), None, 0),
    ("Pow", lambda m, a: op.Pow("", a, 3), [_x], lambda a: a ** 3, None, 1e-5),
    ("Relu", lambda m, a: op.Relu("", a), [_x], torch.relu, None, 0),
    ("LeakyRelu", lambda m, a: op.LeakyRelu("", a, 0.2), [_x], lambda a: F.leaky_relu(a, 0.2), None, 0),
    ("Gelu", lambda m, a: op.Gelu("", a, approximate="tanh"), [_x], lambda a: F.gelu(a, approximate="tanh"), None, 1e-6),
    ("Argmax", lambda m, a: op.Argmax("", a, dim=-1), [_x], lambda a: a.argmax(-1).float(), None, 0),
    ("Clip", lambda m, a: op.Clip("", a, -0.5, 0.5), [_x], lambda a: a.clamp(-0.5, 0.5), None, 0),
    ("CumSum", lambda m, a: op.CumSum("", a, axis=-2), [_x], lambda a: a.cumsum(-2), None, 1e-5),
    ("Dropout", lambda m, a: op.Dropout("", a, p=0.2, training=False), [_x], lambda a: a, None, 0),
    ("ReduceSum", lambda m, a: op.ReduceSum("", a, -1), [_x], lambda a: a.sum(-1, keepdim=True), None, 1e-5),
    ("ReduceAvg", lambda m, a: op.ReduceAvg("", a, 1), [_x], lambda a: a.mean(1, keepdim=True), None, 1e-6),
    ("ReduceMax", lambda m, a: op.ReduceMax("", a, -2), [_x], lambda a: a.amax(-2, keepdim=True), None, 0),
    ("GroupedReduceAvg", lambda m, a: op.GroupedReduceAvg("", a, -1, 2), [rn(3, 8)],
     lambda a: a.reshape(3, 2, 4).mean(-1), None, 1e-6),
    ("HSlice", lambda m, a: op.HSlice("", a, 2), [rn(1, 3, 5, 8)],
     lambda a: a.reshape(1, 3, 5, 2, 4).transpose(2, 3).reshape(1, 6, 5, 4), None, 0),
    ("HStack", lambda m, a: op.HStack("", a), [rn(1, 3, 5, 4)],
     lambda a: a.permute(0, 2, 1, 3).reshape(1, 1, 5, 12), None, 0),
    ("VSlice", lambda m, a: op.VSlice("", a, 5), [_x], lambda a: a.reshape(2, 15, 1, 7), None, 0),
    ("VStack", lambda m, a: op.VStack("", a, 3), [_x], lambda a: a.reshape(2, 1, 15, 7), None, 0),
    ("Transpose", lambda m, a: op.Transpose("", a, -3, -1), [_x], lambda a: a.transpose(-3, -1), None, 0),
    ("Reshape", lambda m, a: op.Reshape("", a, (6, -1)), [_x], lambda a: a.reshape(6, 35), None, 0),
    ("Index", lambda m, a: op.Index("", a, -1, 1, 6, 2), [_x], lambda a: a[..., 1:6:2], None, 0),
    ("AdvIndex", lambda m, a, i: op.AdvIndex("", a, i), [rn(6, 4), torch.tensor([5, 0, 2])],
     lambda a, i: a[i], None, 0),
    ("Select", lambda m, a: op.Select("", a, -2, (1, 3)), [_x], lambda a: a[..., 1:4, :], None, 0),
    ("Pad", lambda m, a: op.Pad("", a, (1, 2, 0, 1), mode="replicate"), [_x],
     lambda a: F.pad(a, (1, 2, 0, 1), mode="replicate"), None, 0),
    ("PadTile", lambda m, a: op.PadTile("", a, -1, 7), [_x], lambda a: F.pad(a, (0, 25)), None, 0),
    ("Broadcast", lambda m, a: op.Broadcast("", a, -2, 6), [rn(2, 1, 3)], lambda a: a.expand(2, 6, 3), None, 0),
    ("Repeat", lambda m, a: op.Repeat("", a, [1, 2, 1, 3]), [_x], lambda a: a.repeat(1, 2, 1, 3), None, 0),
    ("Unsqueeze", lambda m, a: op.Unsqueeze("", a, 0), [_x], lambda a: a.unsqueeze(0), None, 0),
    ("Squeeze", lambda m, a: op.Squeeze("", a, 1), [rn(3, 1, 4)], lambda a: a.squeeze(1), None, 0),
    ("Narrow", lambda m, a: op.Narrow("", a, 2, 1, 3, 5), [_x], lambda a: a.narrow(2, 1, 3), None, 0),
    ("PixelShuffle", lambda m, a: op.PixelShuffle("", a, 3), [rn(1, 18, 2, 3)], lambda a: F.pixel_shuffle(a, 3), None, 0),
    ("BudaPad", lambda m, a: op.BudaPad("", a, (0, 1), 0.0), [rn(1, 5, 7)], lambda a: F.pad(a, (0, 57)), None, 0),
    ("BudaUnpad", lambda m, a: op.BudaUnpad("", a, (5, 7), (0, 1)), [rn(1, 5, 64)], lambda a: a[..., :7], None, 0),
    ("Concatenate", lambda m, a, b, c: op.Concatenate("", a, b, c, axis=-2), [rn(2, 3), rn(4, 3), rn(1, 3)],
     lambda a, b, c: torch.cat([a, b, c], -2), None, 0),
    ("Stack", lambda m, a, b: op.Stack("", a, b, axis=-1), [rn(2, 3), rn(2, 3)], lambda a, b: torch.stack([a, b], -1),
     None, 0),
    ("Interleave", lambda m, a, b: op.Interleave("", a, b, axis=-3, stride=1), [rn(1, 2, 3, 4), rn(1, 2, 3, 4)],
     lambda a, b: torch.stack([a, b], 2).reshape(1, 4, 3, 4), None, 0),
    ("IndexCopy", lambda m, a, i, v: op.IndexCopy("", a, i, v, 0), [rn(4, 3), torch.tensor([2]), rn(1, 3)],
     lambda a, i, v: a.index_copy(0, i, v), None, 0),
    ("Softmax", lambda m, a: op.Softmax("", a, dim=-1), [_x], lambda a: torch.softmax(a, -1), None, 1e-6),
    ("LogSoftmax", lambda m, a: op.LogSoftmax("", a, dim=1), [_x], lambda a: torch.log_softmax(a, 1), None, 1e-5),
    ("Layernorm", lambda m, a: op.Layernorm("", a, m.w, m.b), [_x],
     lambda a, w, b: F.layer_norm(a, (7,), w, b), {"w": rn(7), "b": rn(7)}, 1e-5),
    ("Batchnorm", lambda m, a: op.Batchnorm("", a, m.w, m.b, m.mean, m.var), [_x],
     lambda a, w, b, mean, var: F.batch_norm(a, mean, var, w, b, False),
     {"w": rn(3), "b": rn(3), "mean": rn(3), "var": pos(3)}, 1e-5),
    ("Conv2d", lambda m, a: op.Conv2d("", a, m.w, m.b, stride=2, padding=1), [_x],
     lambda a, w, b: F.conv2d(a, w, b, 2, 1), {"w": _w2, "b": _bias4}, 1e-5),
    ("Conv2dTranspose", lambda m, a: op.Conv2dTranspose("", a, m.w, stride=2, padding=1), [_x],
     lambda a, w: F.conv_transpose2d(a, w, None, 2, 1), {"w": rn(3, 2, 3, 3)}, 1e-5),
    ("Conv3d", lambda m, a: op.Conv3d("", a, m.w, padding="same"), [rn(1, 2, 4, 5, 6)],
     lambda a, w: F.conv3d(a, w, None, 1, "same"), {"w": rn(3, 2, 3, 3, 3)}, 1e-5),
    ("MaxPool1d", lambda m, a: op.MaxPool1d("", a, 3, stride=2, padding=1), [rn(2, 3, 11)],
     lambda a: F.max_pool1d(a, 3, 2, 1), None, 0),
    ("MaxPool2d", lambda m, a: op.MaxPool2d("", a, 3, stride=2), [_x], lambda a: F.max_pool2d(a, 3, 2, 1), None, 0),
    ("MaxPool3d", lambda m, a: op.MaxPool3d("", a, 2, stride=2, padding=0), [rn(1, 2, 4, 5, 6)],
     lambda a: F.max_pool3d(a, 2, 2), None, 0),
    ("AvgPool1d", lambda m, a: op.AvgPool1d("", a, 3, stride=1), [rn(2, 3, 11)], lambda a: F.avg_pool1d(a, 3, 1, 1),
     None, 1e-6),
    ("AvgPool2d", lambda m, a: op.AvgPool2d("", a, 2, stride=2, padding=0), [_x], lambda a: F.avg_pool2d(a, 2, 2),
     None, 1e-6),
    ("AvgPool3d", lambda m, a: op.AvgPool3d("", a, 3, stride=2), [rn(1, 2, 5, 5, 6)],
     lambda a: F.avg_pool3d(a, 3, 2, 1), None, 1e-6),
    ("Embedding", lambda m, i: op.Embedding("", m.table, i), [torch.tensor([[3, 1, 0, 3]])],
     lambda i, table: F.embedding(i, table), {"table": rn(5, 8)}, 0),
    ("Constant", lambda m, a: op.Add("", a, op.Constant("c", constant=1.5)), [_x], lambda a: a + 1.5, None, 0),
    ("Resize2d", lambda m, a: op.Resize2d("", a, (10, 14)), [_x],
     lambda a: F.interpolate(a, size=(10, 14), mode="nearest"), None, 0),
    ("Resize3d", lambda m, a: op.Resize3d("", a, (4, 6, 8), method="linear", align_corners=True), [rn(1, 2, 2, 3, 4)],
     lambda a: F.interpolate(a, size=(4, 6, 8), mode="trilinear", align_corners=True), None, 1e-5),
    ("Quantize", lambda m, a: op.Quantize("", a, 0.1, 0, -1, torch.int8), [_x],
     lambda a: torch.clamp(torch.round(a / 0.1), -127, 127).to(torch.int8), None, 0),
    ("Dequantize", lambda m, q: op.Dequantize("", q, m.s, zero_point=1), [torch.randint(-100, 100, (3, 4), generator=_GEN)
                                                                        .to(torch.int8)],
     lambda q, s: (q.float() - 1) * s, {"s": pos(4)}, 1e-6),
    ("Requantize", lambda m, q: op.Requantize("", q, 0.05, 0.5, 0, 2, torch.int8), [torch.randint(-900, 900, (3, 4),
                                                                                                  generator=_GEN)
                                                                                    .to(torch.int32)],
     lambda q: torch.clamp(torch.round(q * 0.1 + 2), -127, 127).to(torch.int8), None, 0),
    ("BudaRequantize", lambda m, q: op.BudaRequantize("", q, 0.1, zero_point=2.0),
     [torch.randint(-900, 900, (3, 4), generator=_GEN).to(torch.int32)],
     lambda q: torch.clamp(torch.round(q * 0.1) + 2, -127, 127).to(torch.int8), None, 0),
    ("SparseMatmul", lambda m, b: op.SparseMatmul("", torch.eye(3, 5).to_sparse(), b), [rn(5, 4)],
     lambda b: torch.eye(3, 5) @ b, None, 1e-6),
    ("DRAMQueue", lambda m, a: op.DRAMQueue("", a, num_entries=2), [_x], lambda a: a, None, 0),
]


@pytest.mark.parametrize("fn_name,build,inputs,ref,params,atol", ROWS, ids=[r[0] for r in ROWS])
def test_traced_op_function_runs_on_cpu_like_torch(fn_name, build, inputs, ref, params, atol):
    module = FnModule(build, params)
    graph, traced = module.trace(*inputs)
    assert any(node.kind == OP for node in graph), "the graph has no op"
    out = run_graph_on_cpu(graph, list(inputs))[0]
    expected = ref(*inputs, *(params or {}).values())
    assert out.dtype == expected.dtype, f"{fn_name}: {out.dtype} vs {expected.dtype}"
    assert tuple(out.shape) == tuple(expected.shape), f"{fn_name}: {list(out.shape)} vs {list(expected.shape)}"
    assert tuple(traced[0].shape.dims) == tuple(out.shape) and traced[0].dtype == out.dtype
    if out.dtype.is_floating_point:
        torch.testing.assert_close(out, expected, atol=atol, rtol=atol)  # tolerance named in the row
        assert calculate_pcc(expected, out) >= 0.99
        torch.testing.assert_close(traced[0].value(), out, atol=0, rtol=0)  # eager trace value == graph run
    else:
        assert torch.equal(out, expected)


def test_every_public_op_function_has_a_row():
    public = {name for name in dir(op) if name[:1].isupper() and callable(getattr(op, name))
              and getattr(getattr(op, name), "__module__", "").startswith("pybuda.op.")
              and not isinstance(getattr(op, name), type)}
    covered = {row[0] for row in ROWS}
    assert public - covered == set(), f"op functions without a trace test: {sorted(public - covered)}"


def test_reference_function_names_exist():
    names = """Matmul Add Subtract Multiply Divide Max Min Heaviside Power Equal NotEqual Greater Less GreaterEqual
        LessEqual LogicalAnd LogicalNot BinaryStack Where Abs Exp Log Reciprocal Sqrt Sigmoid Sine Cosine Tanh Buffer
        Tilize Identity Pow Relu LeakyRelu Gelu Argmax Clip CumSum Dropout ReduceSum ReduceAvg ReduceMax
        GroupedReduceAvg HSlice HStack VSlice VStack Transpose Reshape Index AdvIndex Select Pad Broadcast Repeat
        Unsqueeze Squeeze Narrow PixelShuffle Concatenate Stack Interleave Softmax LogSoftmax Layernorm Batchnorm
        Conv2d Conv2dTranspose Conv3d MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d Embedding Constant
        Resize2d Resize3d Quantize Dequantize Requantize BudaRequantize SparseMatmul DRAMQueue""".split()
    missing = [n for n in names if not callable(getattr(op, n, None))]
    assert not missing, missing
    for n in names:
        assert getattr(op, n).__doc__, f"pybuda.op.{n} has no docstring"


def test_graph_stores_canonical_attrs():
    graph, _ = FnModule(lambda m, a: op.Conv2d("conv", a, m.w, padding="same", stride=2), {"w": _w2}).trace(_x)
    assert graph["conv"].attrs["padding"] == (1, 1, 1, 1) and graph["conv"].attrs["stride"] == (2, 2)
    graph, _ = FnModule(lambda m, a: op.Select("sel", a, -1, 2)).trace(_x)
    assert graph["sel"].attrs["index"] == (2, 1) and graph["sel"].attrs["stride"] == 7


def test_same_padding_follows_tt_buda():
    """'same' splits an even kernel's extra pixel before (left/top) for conv, symmetric k//2 for pools."""
    w = rn(2, 3, 4, 2)
    graph, _ = FnModule(lambda m, a: op.Conv2d("conv", a, m.w), {"w": w}).trace(_x)
    assert graph["conv"].attrs["padding"] == (1, 0, 2, 1)
    assert tuple(graph["conv"].shape) == (2, 2, 5, 7)
    graph, _ = FnModule(lambda m, a: op.MaxPool2d("pool", a, 2)).trace(_x)
    assert graph["pool"].attrs["padding"] == (1, 1, 1, 1) and tuple(graph["pool"].shape) == (2, 3, 6, 8)


def test_two_ops_with_one_name_raise_module_error():
    def build(m, a):
        b = op.Exp("same_name", a)
        return op.Log("same_name", b)

    with pytest.raises(ModuleError, match="same_name"):
        FnModule(build).trace(_x)


def test_auto_names_are_unique_and_prefixed_by_op_type():
    graph, _ = FnModule(lambda m, a: op.Exp("", op.Exp("", a))).trace(_x)
    names = [n.name for n in graph if n.kind == OP]
    assert len(names) == len(set(names)) == 2 and all(n.startswith("exp_") for n in names)


def test_bad_call_raises_op_error_with_shapes_at_the_call_site():
    with pytest.raises(OpError) as info:
        FnModule(lambda m, a, b: op.Add("bad_add", a, b)).trace(rn(2, 3), rn(4, 3))
    assert "add 'bad_add'" in str(info.value) and "[2, 3]" in str(info.value) and "[4, 3]" in str(info.value)
    with pytest.raises(OpError, match="return_indices"):
        FnModule(lambda m, a: op.MaxPool2d("p", a, 2, return_indices=True)).trace(_x)
    with pytest.raises(OpError, match="padding"):
        FnModule(lambda m, a: op.Conv2d("c", a, m.w, padding="full"), {"w": _w2}).trace(_x)
    with pytest.raises(OpError, match="op name"):
        op.Exp(pybuda.Tensor.create_from_torch(_x))  # forgot the name


def test_python_numbers_become_constants():
    graph, outs = FnModule(lambda m, a: 2.0 * op.Add("", a, 1)).trace(_x)
    assert len(graph.constants) == 2
    torch.testing.assert_close(run_graph_on_cpu(graph, [_x])[0], 2.0 * (_x + 1))


def test_dropout_in_training_is_deterministic_per_seed():
    graph, _ = FnModule(lambda m, a: op.Dropout("d", a, p=0.5, seed=3)).trace(_x)
    first, second = run_graph_on_cpu(graph, [_x])[0], run_graph_on_cpu(graph, [_x])[0]
    assert torch.equal(first, second)
    assert math.isclose((first == 0).float().mean().item(), 0.5, abs_tol=0.1)
