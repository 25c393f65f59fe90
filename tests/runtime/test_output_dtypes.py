"""Outputs come back in the dtype the framework returns: a float16/bfloat16 model's float outputs in its dtype
(not the device's float32), integer and boolean outputs in theirs, through the device, the CPU-fallback
stages, outputs that copy an input and a CPUDevice."""

import numpy as np
import pytest
import torch
from torch import nn

import pybuda
from pybuda.verify import calculate_pcc

LOW_PRECISION = [torch.bfloat16, torch.float16]
#: Against the framework in its own low-precision dtype: one rounding to bfloat16 (8 bits of mantissa) on
#: either side of a 32-term dot product.
PCC_MIN = 0.99
ATOL = 0.1
RTOL = 0.05


class MixedOutputs(nn.Module):
    """A float, a boolean and an integer output, and the input passed straight through."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x):
        y = self.lin(x)
        return y, y > 0, torch.argmax(y, -1), x


class CpuOnBothSides(nn.Module):
    """Ops without a mapping at both ends: a CPU pre stage (a Bessel function) and a CPU post stage holding weights of the
    model's dtype (another Bessel function, then a linear layer)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 32)
        self.b = nn.Linear(32, 32)

    def forward(self, x):
        y = torch.relu(self.a(torch.special.i0(x)))
        return self.b(torch.special.i1(y.softmax(-1))), y, torch.argmax(y, -1)


def _run(device_cls, name, module, x):
    device_cls("d0", module=module)
    out = pybuda.run_inference(inputs=[(x,)]).get(timeout=120)
    return [o.value() if hasattr(o, "value") else o for o in out]


def _assert_like(got, want):
    assert [g.dtype for g in got] == [w.dtype for w in want]
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if w.is_floating_point():
            assert torch.allclose(g.float(), w.float(), atol=ATOL, rtol=RTOL)
            assert calculate_pcc(g.float(), w.float()) >= PCC_MIN
        elif w.dtype == torch.bool:
            # A value near 0 may land on either side after the framework's own rounding.
            assert (g == w).float().mean() >= 0.95
        else:
            assert (g == w).float().mean() >= 0.9


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_torch_model_returns_its_dtype(dtype):
    model = MixedOutputs().to(dtype).eval()
    x = torch.randn(2, 32, 32, generator=torch.Generator().manual_seed(0)).to(dtype)
    got = _run(pybuda.TTDevice, "mixed", pybuda.PyTorchModule("mixed", model), x)
    _assert_like(got, list(model(x)))
    assert torch.equal(got[3], x)  # the copied input is what was pushed


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_cpu_fallback_stages_keep_the_model_dtype(dtype):
    model = CpuOnBothSides().to(dtype).eval()
    x = torch.randn(2, 32, 32, generator=torch.Generator().manual_seed(1)).to(dtype)
    got = _run(pybuda.TTDevice, "both", pybuda.PyTorchModule("both", model), x)
    _assert_like(got, list(model(x)))


def test_float32_model_still_returns_float32():
    model = MixedOutputs().eval()
    x = torch.randn(2, 32, 32, generator=torch.Generator().manual_seed(2))
    got = _run(pybuda.TTDevice, "f32", pybuda.PyTorchModule("f32", model), x)
    assert [g.dtype for g in got] == [torch.float32, torch.bool, torch.int64, torch.float32]


def test_cpu_device_runs_a_bfloat16_model_in_its_dtype():
    # Upcasting the pushed input to float32 would not even multiply the model's bfloat16 weights.
    model = MixedOutputs().to(torch.bfloat16).eval()
    x = torch.randn(2, 32, 32, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    got = _run(pybuda.CPUDevice, "cpu", pybuda.PyTorchModule("cpu", model), x)
    want = list(model(x))
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_cpu_device_reads_the_model_dtype_once_per_compile(monkeypatch):
    # The weights are scanned when the pipeline compiles, not on every push; placing another model makes the
    # next run compile again, which reads the new model's dtype.
    from pybuda.runtime import cpudevice

    scans = []
    real = cpudevice._low_precision_model
    monkeypatch.setattr(cpudevice, "_low_precision_model", lambda m: scans.append(m.name) or real(m))
    g = torch.Generator().manual_seed(4)
    model = MixedOutputs().to(torch.bfloat16).eval()
    dev = pybuda.CPUDevice("d0", module=pybuda.PyTorchModule("bf16", model))
    xs = [torch.randn(2, 32, 32, generator=g).to(torch.bfloat16) for _ in range(3)]
    got = pybuda.run_inference(inputs=[(x,) for x in xs]).get(timeout=120)
    assert got[0].value().dtype == torch.bfloat16 and scans == ["bf16"]

    dev.remove_modules()
    dev.place_module(pybuda.PyTorchModule("f32", MixedOutputs().eval()))
    got = pybuda.run_inference(inputs=[(xs[0],)]).get(timeout=120)  # bfloat16 input, upcast for a float32 model
    assert got[0].value().dtype == torch.float32 and scans == ["bf16", "f32"]

def test_framework_output_casts_floats_and_checks_integers():
    from pybuda.golden.executor import framework_output

    value = torch.tensor([1.0, 2.0, 3.0])
    assert framework_output("o", value, torch.bfloat16).dtype == torch.bfloat16
    assert framework_output("o", value, torch.float32) is value
    assert framework_output("o", value, torch.int64).dtype == torch.int64
    with pytest.raises(pybuda.errors.RuntimeFailure, match="non-integer"):
        framework_output("o", value + 0.5, torch.int32)


def test_float16_onnx_model_returns_float16():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    weight = numpy_helper.from_array((rng.standard_normal((32, 32)) / 6).astype(np.float16), "W")
    zero = numpy_helper.from_array(np.zeros((1,), np.float16), "zero")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("ArgMax", ["y"], ["am"], axis=-1, keepdims=0),
             helper.make_node("Greater", ["y", "zero"], ["gt"])]
    f16 = TensorProto.FLOAT16
    graph = helper.make_graph(nodes, "f16", [helper.make_tensor_value_info("x", f16, [1, 32, 32])],
                              [helper.make_tensor_value_info("r", f16, [1, 32, 32]),
                               helper.make_tensor_value_info("am", TensorProto.INT64, [1, 32]),
                               helper.make_tensor_value_info("gt", TensorProto.BOOL, [1, 32, 32])], [weight, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = rng.standard_normal((1, 32, 32)).astype(np.float16)
    want = [torch.from_numpy(o) for o in ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})]
    got = _run(pybuda.TTDevice, "f16", pybuda.OnnxModule("f16", onnx.load_from_string(model.SerializeToString())),
               torch.from_numpy(x))
    _assert_like(got, want)


def test_bfloat16_jax_function_returns_bfloat16():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    rng = np.random.default_rng(5)
    weight = jnp.asarray(rng.standard_normal((32, 32)) / 6, dtype=jnp.bfloat16)

    def fn(x):
        y = x @ weight
        return jax.nn.relu(y), jnp.argmax(y, -1), y > 0

    x = torch.randn(1, 32, 32, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    outs = fn(jnp.asarray(x.float().numpy(), jnp.bfloat16))
    want = [torch.tensor(np.asarray(o, np.float32)).to(torch.bfloat16) if o.dtype == jnp.bfloat16
            else torch.tensor(np.asarray(o)) for o in outs]
    got = _run(pybuda.TTDevice, "jaxbf16", pybuda.JaxModule("jaxbf16", fn), x)
    _assert_like(got, want)


def test_float16_keras_model_returns_float16():
    tf = pytest.importorskip("tensorflow")

    class ReluArgmax(tf.keras.layers.Layer):
        def call(self, y):
            return tf.nn.relu(y), tf.argmax(y, -1)

    inp = tf.keras.Input((32, 32), batch_size=1, dtype="float16")
    dense = tf.keras.layers.Dense(32, dtype="float16")(inp)
    model = tf.keras.Model(inp, list(ReluArgmax(dtype="float16")(dense)))
    x = np.random.default_rng(6).standard_normal((1, 32, 32)).astype(np.float16)
    want = [torch.from_numpy(o.numpy()) for o in model(x)]
    got = _run(pybuda.TTDevice, "tf16", pybuda.TFModule("tf16", model), torch.from_numpy(x))
    _assert_like(got, want)
