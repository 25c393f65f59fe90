"""isnan / isinf / isfinite (torch) and IsNaN / IsInf (ONNX) run on the device and are exact for NaN, +-inf and
finite values of every magnitude (float32's largest, subnormals, zeros), in chip numerics at Float16_b, Float32
and block-format defaults, on Grayskull and Wormhole; torch's exported attention (Softmax -> IsNaN -> Where) stays
on the device and matches ONNX Runtime, fully masked rows included."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import pybuda
from nan_inf_helpers import configure, run_on_device
from pybuda.verify import calculate_pcc

FORMATS = {"default": None, "float32": pybuda.DataFormat.Float32, "bfp8_b": pybuda.DataFormat.Bfp8_b}


def _special_values(shape=(1, 32, 64), seed=0):
    """Random data with NaN, +-inf, float32's largest and smallest values, subnormals and signed zeros."""
    f = torch.finfo(torch.float32)
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), f.max, -f.max, f.tiny, -f.tiny, 1e-45, -1e-45,
                            0.0, -0.0, 1.0, -3.5, 1e30, -1e-30, 2.0 ** 125, 65504.0, 3.3895313892515355e38])
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    n = special.numel() * 20
    x.view(-1)[:n] = special.repeat(20)[torch.randperm(n, generator=g)]
    return x


def _configure(df):
    configure(FORMATS[df])


class NanInfChecks(torch.nn.Module):
    def forward(self, x):
        return (torch.isnan(x), torch.isinf(x), torch.isfinite(x), torch.isposinf(x), torch.isneginf(x), x != x,
                x == x, x == float("inf"), x != -float("inf"), x >= float("inf"), x < float("inf"),
                torch.nan_to_num(x, nan=7.0, posinf=5.0, neginf=-5.0))


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_torch_nan_inf_tests_are_exact(arch, df):
    _configure(df)
    x = _special_values()
    want = NanInfChecks()(x)
    got = run_on_device(pybuda.PyTorchModule("tests", NanInfChecks().eval()), (x,), arch)
    for i, (g, w) in enumerate(zip(got[:-1], want[:-1])):
        assert g.dtype == torch.bool and torch.equal(g, w), f"output {i}: {int((g != w).sum())} wrong"
    # nan_to_num: the replaced places exactly, the rest as the format rounds it (a block format also rounds the
    # replacements beside float32's largest values in their block: only the masks are compared there)
    if df == "bfp8_b":
        return
    g, w = got[-1], want[-1]
    for v in (7.0, 5.0, -5.0):
        assert torch.equal(g == v, w == v)
    assert torch.isfinite(g).all()


class NanMadeOnDevice(torch.nn.Module):
    def forward(self, x, y):
        r = torch.sqrt(x)  # NaN where x < 0
        s = x * y  # +-inf where y is
        return torch.isnan(r), torch.isfinite(r), torch.isinf(s), torch.isnan(s)


@pytest.mark.parametrize("df", ["default", "bfp8_b"])
def test_a_nan_made_by_the_producer_survives_a_block_format_default(df):
    """The op making the tested value keeps a format that holds NaN and inf (a block format would turn the NaN
    into inf), and so does every op upstream of it (tests/frontend/test_nan_inf_comparisons_on_device.py)."""
    _configure(df)
    g = torch.Generator().manual_seed(1)
    # magnitudes a block format keeps: its rounding of the inputs is not what is tested here
    x = (torch.rand(1, 64, 64, generator=g) + 0.5) * torch.where(torch.rand(1, 64, 64, generator=g) > 0.5, 1.0, -1.0)
    y = torch.ones(1, 64, 64)
    y[0, ::7, ::3] = float("inf")
    want = NanMadeOnDevice()(x, y)
    got = run_on_device(pybuda.PyTorchModule("made", NanMadeOnDevice().eval()), (x, y), "wh")
    for g_, w in zip(got, want):
        assert torch.equal(g_, w), int((g_ != w).sum())


# --- ONNX ------------------------------------------------------------------------------------------------


def _onnx_tests_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 64])
    outs, nodes = [], [helper.make_node("IsNaN", ["x"], ["nan"])]
    for name, attrs in (("inf", {}), ("posinf", {"detect_negative": 0}), ("neginf", {"detect_positive": 0})):
        nodes.append(helper.make_node("IsInf", ["x"], [name], **attrs))
    for name in ("nan", "inf", "posinf", "neginf"):
        outs.append(helper.make_tensor_value_info(name, TensorProto.BOOL, [1, 32, 64]))
    graph = helper.make_graph(nodes, "nan_inf", [x], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto) else model,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feeds)))


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_onnx_isnan_isinf_are_exact(arch, df):
    _configure(df)
    model = _onnx_tests_model()
    x = _special_values()
    # The ONNX frontend's convention: infinities cross the device as a finite stand-in (2**125; the ONNX backend
    # pushes an input's infinities so), and IsInf counts magnitudes at or beyond it as infinite. Finite values
    # that large are left out here; the torch tests above keep them.
    x = torch.where(torch.isfinite(x) & (x.abs() >= 2.0 ** 125), torch.full_like(x, 3.0), x)
    want = _ort(model, [x.numpy()])
    got = run_on_device(pybuda.OnnxModule("nan_inf", model), (x,), arch)
    for g, w in zip(got, want):
        assert torch.equal(g, torch.from_numpy(w)), int((g != torch.from_numpy(w)).sum())


def test_onnx_isnan_maps_to_the_device():
    from pybuda.ops.integer import target_arch

    x = _special_values()
    with target_arch(pybuda.BackendDevice.Wormhole_B0):
        report = pybuda.OnnxModule("nan_inf", _onnx_tests_model()).to_graph(x).report
    assert not report.has_fallback, str(report)


# --- torch's exported attention: Softmax -> IsNaN -> Where(isnan, 0, softmax) -----------------------------------


class Attention(torch.nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.causal = causal
        self.qkv = torch.nn.Linear(64, 192)
        self.o = torch.nn.Linear(64, 64)

    def forward(self, x, mask):
        batch = x.shape[0]
        q, k, v = self.qkv(x).view(batch, 32, 3, 4, 16).permute(2, 0, 3, 1, 4)
        m = mask[:, None, None, :]
        if self.causal:
            m = m & torch.ones(32, 32, dtype=torch.bool).tril()
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return self.o(a.transpose(1, 2).reshape(batch, 32, 64))


def _export(tmp_path, causal):
    torch.manual_seed(0)
    x = torch.randn(2, 32, 64)
    mask = torch.ones(2, 32, dtype=torch.bool)
    mask[0, 25:] = False
    mask[1, :] = False  # a fully masked sample: ONNX Runtime's softmax is NaN there, IsNaN -> Where makes it 0
    path = str(tmp_path / "sdpa.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Attention(causal).eval(), (x, mask), path, dynamo=False, opset_version=17)
    assert "IsNaN" in {n.op_type for n in onnx.load(path).graph.node}
    return path, x, mask


@pytest.mark.parametrize("causal", [False, True], ids=["padding_mask", "causal"])
def test_exported_sdpa_runs_on_the_device(tmp_path, causal):
    from pybuda.ops.integer import target_arch

    path, x, mask = _export(tmp_path, causal)
    with target_arch(pybuda.BackendDevice.Wormhole_B0):
        report = pybuda.OnnxModule("attn", path).to_graph(x, mask).report
    assert not report.has_fallback, str(report)  # was 29 % of the ops on the CPU (IsNaN and all after it)


@pytest.mark.parametrize("arch, df, pcc, atol", [("wh", "float32", 0.999, 5e-3), ("wh", "default", 0.99, 5e-2),
                                                 ("gs", "default", 0.99, 5e-2)])
def test_exported_sdpa_matches_onnxruntime(tmp_path, arch, df, pcc, atol):
    _configure(df)
    path, x, mask = _export(tmp_path, causal=True)
    want = torch.from_numpy(_ort(path, [x.numpy(), mask.numpy()])[0])
    assert torch.isfinite(want).all()
    got = run_on_device(pybuda.OnnxModule("attn", path), (x, mask), arch)[0]
    assert calculate_pcc(got[0], want[0]) >= pcc
    assert torch.allclose(got[0], want[0], atol=atol, rtol=1e-2)
    # The fully masked sample: attention probabilities 0 (not uniform), so the output is the projection's bias.
    assert torch.allclose(got[1], want[1], atol=2e-3, rtol=1e-2)


def test_exported_sdpa_masked_rows_are_exactly_zero(tmp_path):
    """The probabilities themselves: an ONNX graph ending at Where(IsNaN(softmax), 0, softmax)."""
    _configure("default")
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 32, 32])
    m = helper.make_tensor_value_info("m", TensorProto.BOOL, [2, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32, 32])
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    ninf = helper.make_tensor("ninf", TensorProto.FLOAT, [], [-np.inf])
    nodes = [helper.make_node("Where", ["m", "zero", "ninf"], ["bias"]),
             helper.make_node("Add", ["s", "bias"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"]),
             helper.make_node("Where", ["nan", "zero", "p"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "masked", [s, m], [y], [zero, ninf]),
                              opset_imports=[helper.make_opsetid("", 17)])
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 32, 32, generator=g)
    mask = torch.rand(2, 32, 32, generator=g) > 0.3
    mask[0, 5] = False
    mask[1, 17:] = False
    want = torch.from_numpy(_ort(model, [scores.numpy(), mask.numpy()])[0])
    got = run_on_device(pybuda.OnnxModule("masked", model), (scores, mask), "wh")[0]
    assert torch.equal(got == 0, want == 0)  # masked places and fully masked rows: exactly 0
    assert torch.all(got[0, 5] == 0) and torch.all(got[1, 17:] == 0)
    assert calculate_pcc(got, want) >= 0.99
    assert torch.allclose(got, want, atol=2e-2)


def test_onnx_isinf_of_a_masked_value_in_a_graph_with_infinite_constants():
    """A -inf constant enters the device as a finite stand-in; IsInf of what it masks is still true there."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 32])
    m = helper.make_tensor_value_info("m", TensorProto.BOOL, [1, 32, 32])
    outs = [helper.make_tensor_value_info(n, TensorProto.BOOL, [1, 32, 32]) for n in ("inf", "neginf", "posinf", "nan")]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    ninf = helper.make_tensor("ninf", TensorProto.FLOAT, [], [-np.inf])
    nodes = [helper.make_node("Where", ["m", "zero", "ninf"], ["bias"]), helper.make_node("Add", ["x", "bias"], ["s"]),
             helper.make_node("IsInf", ["s"], ["inf"]), helper.make_node("IsInf", ["s"], ["neginf"], detect_positive=0),
             helper.make_node("IsInf", ["s"], ["posinf"], detect_negative=0), helper.make_node("IsNaN", ["s"], ["nan"])]
    model = helper.make_model(helper.make_graph(nodes, "masked_inf", [x, m], outs, [zero, ninf]),
                              opset_imports=[helper.make_opsetid("", 17)])
    g = torch.Generator().manual_seed(3)
    xv = torch.randn(1, 32, 32, generator=g)
    xv[0, 0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.0e38])
    mask = torch.rand(1, 32, 32, generator=g) > 0.3
    want = _ort(model, [xv.numpy(), mask.numpy()])
    got = run_on_device(pybuda.OnnxModule("masked_inf", model), (xv, mask), "wh")
    for g_, w in zip(got, want):
        w = torch.from_numpy(w)
        w[0, 0, 3] = g_[0, 0, 3]  # 3e38 is beyond the stand-in: infinite by the device's convention, finite in ORT
        assert torch.equal(g_, w), int((g_ != w).sum())
