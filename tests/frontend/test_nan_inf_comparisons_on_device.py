"""Comparisons of two tensors (torch eq/ne/lt/le/gt/ge, ONNX Equal/Less/Greater/...OrEqual) run on the device and
give IEEE's answers at NaN, +-inf, signed zeros, float32's largest values and subnormals: NaN compares false
(true for !=), an infinity equals itself. And a NaN or infinity made anywhere upstream of a test or comparison
reaches it with a Float16 or block-format default (the values between are held in formats that keep them)."""

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import pybuda
from nan_inf_helpers import configure, run_on_device

FORMATS = {"default": None, "float32": pybuda.DataFormat.Float32, "bfp8_b": pybuda.DataFormat.Bfp8_b,
           "float16": pybuda.DataFormat.Float16}
F = torch.finfo(torch.float32)


def _special(df: str) -> torch.Tensor:
    """NaN, infinities, signed zeros, float32's largest and smallest normal values, a subnormal, and ordinary values.
    Below a Float32 default the data is pushed in the default format (Float16_b where that cannot hold NaN or
    infinity): there the values are ones Float16_b holds, a subnormal of 2**-130 among them (Float16_b's
    truncation of float32's largest value is still the largest of the values compared), since the rounding of the
    data is the format's, not the comparison's. With Float32, float32's smallest subnormal and 1 + 2**-23 too."""
    exact = df == "float32"
    sub = 1e-45 if exact else 2.0 ** -130
    return torch.tensor([float("nan"), float("inf"), -float("inf"), F.max, -F.max, F.tiny, -F.tiny, sub, -sub, 0.0,
                         -0.0, 1.0, -3.5, 1.0 + 2.0 ** -23 if exact else 1.5, 2.0 ** 100, 2.0 ** 125])


def _pairs(df: str):
    """Every pair of special values, as two [1, 32, 32] tensors (the rest ordinary numbers)."""
    v = _special(df)
    n = v.numel()
    g = torch.Generator().manual_seed(0)
    # ordinary values Float16_b holds, whatever the format they are pushed in
    a, b = (torch.randn(1, 32, 32, generator=g).to(torch.bfloat16).float() for _ in range(2))
    a[0, :n, :n] = v.reshape(n, 1).expand(n, n)
    b[0, :n, :n] = v.reshape(1, n).expand(n, n)
    a[0, n:, :] = b[0, n:, :]  # equal ordinary values too
    return a, b


def _configure(df):
    configure(FORMATS[df])


def _assert_same(got, want, names):
    for name, g, w in zip(names, got, want):
        w = torch.as_tensor(w)
        assert g.dtype == torch.bool and torch.equal(g, w), f"{name}: {int((g != w).sum())} wrong"


class Comparisons(torch.nn.Module):
    def forward(self, x, y):
        return x == y, x != y, x < y, x <= y, x > y, x >= y


NAMES = ("eq", "ne", "lt", "le", "gt", "ge")


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_torch_comparisons_of_two_tensors_are_exact(arch, df):
    """Was: ne(NaN, y) 0, eq/le/ge(inf, inf) 0 (inf - inf is NaN), eq(1e-45, 0) 1 (-|d| through the multiplier);
    in a block format or Float16 also every NaN (an infinity or a finite number there)."""
    _configure(df)
    a, b = _pairs(df)
    _assert_same(run_on_device(pybuda.PyTorchModule("cmp", Comparisons().eval()), (a, b), arch), Comparisons()(a, b), NAMES)


class AgainstNumbers(torch.nn.Module):
    def forward(self, x):
        return x != 0.5, x == 0.5, x >= -2.0, x < 2.0 ** 100, x != 0.0


@pytest.mark.parametrize("df", ["default", "bfp8_b"])
def test_comparisons_with_a_number_are_exact(df):
    """One operand finite: NaN != 0.5 was 0."""
    _configure(df)
    a, _ = _pairs(df)
    a[0, 20, :3] = 0.5
    _assert_same(run_on_device(pybuda.PyTorchModule("num", AgainstNumbers().eval()), (a,), "wh"), AgainstNumbers()(a),
                 ("ne", "eq", "ge", "lt", "ne0"))


class Made(torch.nn.Module):
    """NaNs and infinities made on the device, several ops before the test reads them."""

    def forward(self, x, y):
        q = x / y  # reciprocal and multiply: inf where y is 0, NaN where x is too
        r = torch.log(x) * 2.0 + 1.0  # NaN where x < 0, -inf where x is 0
        s = torch.exp(x * 1000.0) * y  # inf where x > 0 (and NaN where y is 0 then)
        # comparisons of values that are far apart where finite (no rounding decides them), equal where infinite
        return (torch.isnan(q), torch.isinf(q), torch.isfinite(r), torch.isnan(r), torch.isinf(s), torch.isnan(s),
                q != s, q == s, r <= s, r > s, s == s * 2.0, q >= q * 3.0, q != q * 3.0)


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", ["bfp8_b", "float16", "default"])
def test_a_nan_made_upstream_reaches_the_test(arch, df):
    """Was: with Bfp8_b, every NaN of ``isnan(x / y)`` missed (78 of 78) and every infinity of ``isinf(x / y)``
    wrong; Float16 saturated them. Only the op making the tested value was held."""
    _configure(df)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 32, 64, generator=g) + 0.5
    y = torch.rand(1, 32, 64, generator=g) + 0.5
    x[0, ::3, ::5] = 0.0
    y[0, ::2, ::5] = 0.0
    x[0, 1::4, 2::7] = -1.0
    want = Made()(x, y)
    got = run_on_device(pybuda.PyTorchModule("made", Made().eval()), (x, y), arch)
    _assert_same(got, want, [f"output {i}" for i in range(len(want))])


class ArgMax(torch.nn.Module):
    def forward(self, x):
        return torch.argmax(x, dim=-1), torch.argmax(x, dim=1)


@pytest.mark.parametrize("df", ["default", "float32"])
def test_argmax_picks_infinities_and_nans_as_torch(df):
    """A row whose maximum is +inf picks the (first) infinity, a row with a NaN the first NaN (torch's rule). Was:
    no element equal to an infinite maximum (inf - inf is NaN), and the index came out as the row's length."""
    _configure(df)
    g = torch.Generator().manual_seed(3)
    # distinct values every format holds, so that no rounding ties the ordinary rows
    x = torch.stack([torch.randperm(48, generator=g) * 0.5 for _ in range(32)]).reshape(1, 32, 48)
    x[0, 0, 7] = x[0, 0, 30] = float("inf")
    x[0, 1, 5] = float("nan")
    x[0, 2, :] = -float("inf")
    x[0, 3, 9] = x[0, 3, 40] = float("nan")
    x[0, 4, 3] = float("inf")
    x[0, 4, 11] = float("nan")
    x[0, 5, 2] = F.max
    got = run_on_device(pybuda.PyTorchModule("argmax", ArgMax().eval()), (x,), "wh")
    for g_, w in zip(got, ArgMax()(x)):
        assert torch.equal(g_.long(), w)


# --- ONNX ---------------------------------------------------------------------------------------------------------


def _onnx_comparisons():
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 32, 32]) for n in ("x", "y")]
    nodes, outs = [], []
    for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        nodes.append(helper.make_node(op, ["x", "y"], [op.lower()]))
        outs.append(op.lower())
    nodes.append(helper.make_node("Not", ["equal"], ["not_equal"]))
    outs.append("not_equal")
    graph = helper.make_graph(nodes, "cmp", ins, [helper.make_tensor_value_info(o, TensorProto.BOOL, [1, 32, 32])
                                                  for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), outs


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feeds)))


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", ["default", "float32", "bfp8_b"])
def test_onnx_comparisons_of_two_tensors_are_exact(arch, df):
    _configure(df)
    model, names = _onnx_comparisons()
    a, b = _pairs(df)
    want = _ort(model, [a.numpy(), b.numpy()])
    _assert_same(run_on_device(pybuda.OnnxModule("cmp", model), (a, b), arch), want, names)


@pytest.mark.parametrize("df", ["bfp8_b", "float16"])
def test_onnx_isnan_of_a_division(df):
    """IsNaN(Div(x, y)): the NaN of 0 / 0 made by the reciprocal and multiply reaches the test."""
    _configure(df)
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 32, 32]) for n in ("x", "y")]
    nodes = [helper.make_node("Div", ["x", "y"], ["q"]), helper.make_node("IsNaN", ["q"], ["nan"])]
    model = helper.make_model(helper.make_graph(nodes, "div", ins,
                                                [helper.make_tensor_value_info("nan", TensorProto.BOOL, [1, 32, 32])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    g = torch.Generator().manual_seed(4)
    x, y = torch.rand(1, 32, 32, generator=g) + 0.5, torch.rand(1, 32, 32, generator=g) + 0.5
    x[0, ::2, ::3] = 0.0
    y[0, ::3, ::2] = 0.0
    want = _ort(model, [x.numpy(), y.numpy()])
    assert np.asarray(want[0]).any()
    _assert_same(run_on_device(pybuda.OnnxModule("div", model), (x, y), "wh"), want, ["nan"])


# --- what stays cheap ------------------------------------------------------------------------------------------------


def _decomposed(module, *inputs):
    from pybuda.compile import compile_graph
    from pybuda.config import CompilerConfig
    from pybuda.ops.integer import target_arch

    with target_arch(pybuda.BackendDevice.Wormhole_B0):
        graph = module.to_graph(*inputs).graph
    cfg = CompilerConfig()
    cfg.compile_depth = pybuda.CompileDepth.PRE_LOWERING_PASS
    return compile_graph(graph, pybuda.BackendDevice.Wormhole_B0, cfg).graph


class IntegerAndNumberComparisons(torch.nn.Module):
    def forward(self, ids, x):
        return ids != 3, ids == ids.flip(-1), x > 0.25, x >= -1.0


def test_comparisons_that_cannot_meet_nan_or_infinity_keep_their_plain_form():
    """Integer data and finite numbers hold no NaN or infinity: no NaN terms, and no operand held in Float32."""
    ids = torch.randint(0, 9, (1, 32, 32))
    x = torch.randn(1, 32, 32)
    graph = _decomposed(pybuda.PyTorchModule("plain", IntegerAndNumberComparisons().eval()), ids, x)
    types = [n.op_type for n in graph.ops]
    # per comparison one difference and one step (== and != add |d| and a negation); no |a| + |b|
    assert types.count("add") == 0 and types.count("heaviside") == 4, types
    assert len(types) <= 4 * 2 + 2 * 2 + 2, types


class CompareOrTest(torch.nn.Module):
    def __init__(self, test_nan: bool):
        super().__init__()
        self.first, self.second, self.test_nan = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32), test_nan

    def forward(self, x):
        y = self.second(torch.relu(self.first(x)))
        return torch.isnan(y) if self.test_nan else torch.where(y > 0, y, 0.1 * y)


@pytest.mark.parametrize("test_nan", [False, True], ids=["comparison", "isnan"])
def test_a_comparison_holds_its_operand_and_a_nan_test_everything_above(test_nan):
    """``y > 0`` keeps ``y``'s NaNs and infinities (the op making it is held) and leaves the layers above in the
    user's formats (a Bfp8_b network stays Bfp8_b), where ``isnan(y)`` holds every op between a possible NaN and
    the test."""
    from pybuda.ir.graph import NONFINITE_SAFE

    module = pybuda.PyTorchModule("cmp_or_test", CompareOrTest(test_nan).eval())
    graph = _decomposed(module, torch.randn(1, 32, 32))
    held = {n.name for n in graph.ops if n.tags.get(NONFINITE_SAFE)}
    first = {n.name for n in graph.ops if n.tags.get("layer", "").startswith("first")}
    second = {n.name for n in graph.ops if n.tags.get("layer", "").startswith("second")}
    assert first and second and (second & held)
    assert bool(first & held) == test_nan
