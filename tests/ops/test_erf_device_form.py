"""erf's device form (an erfc fit built from ops the chip runs) against torch.erf: on the CPU reference, and
through ONNX Erf (and ONNX's expanded exact GELU) compiled for the golden device at Float32."""

import numpy as np
import pytest
import torch

from pybuda.ops import registry
from pybuda.ops.eltwise import erf_device_form

#: Largest |device form - torch.erf| accepted: the erfc fit is within 1.2e-7; Float32 rounding adds a few ulps.
ERF_ATOL = 1e-6


def _cpu_form(x: torch.Tensor) -> torch.Tensor:
    return erf_device_form(lambda t, ops: registry.evaluate(t, list(ops), {}),
                           lambda v: torch.tensor([v], dtype=x.dtype), x)


@pytest.mark.parametrize("shape", [(7,), (3, 33), (2, 5, 17), (1, 1, 31, 65)])
def test_device_form_matches_torch_erf_on_the_cpu(shape):
    x = torch.empty(shape).uniform_(-6, 6, generator=torch.Generator().manual_seed(sum(shape)))
    got = _cpu_form(x)
    assert got.shape == x.shape and got.dtype == torch.float32
    assert float((got - torch.erf(x)).abs().max()) <= ERF_ATOL


def test_device_form_is_odd_and_exact_at_zero_and_saturates():
    x = torch.tensor([0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 3.0, -3.0, 10.0, -10.0, 40.0, -40.0])
    got = _cpu_form(x)
    assert got[0] == 0.0 and got[1] == 0.0
    torch.testing.assert_close(got[2::2], -got[3::2], rtol=0, atol=0)
    torch.testing.assert_close(got, torch.erf(x), rtol=0, atol=ERF_ATOL)


def _onnx_model(nodes, shape):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    return helper.make_model(helper.make_graph(nodes, "erf", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape", [(5, 37), (2, 3, 19)])
def test_onnx_erf_runs_on_the_golden_device(shape):
    from onnx import helper

    from pybuda.frontend.onnx.backend import PybudaBackend

    x = np.random.default_rng(3).uniform(-4, 4, shape).astype(np.float32)
    rep = PybudaBackend.prepare(_onnx_model([helper.make_node("Erf", ["x"], ["y"])], shape))
    got = rep.run([x])[0]
    assert not rep.report.has_fallback
    np.testing.assert_allclose(got, torch.erf(torch.from_numpy(x)).numpy(), rtol=0, atol=ERF_ATOL)


def test_onnx_exact_gelu_expansion_runs_on_the_golden_device():
    # x * 0.5 * (1 + erf(x / sqrt(2))): the exact GELU as exporters without a Gelu op write it.
    import onnx
    from onnx import helper

    from pybuda.frontend.onnx.backend import PybudaBackend

    shape = (3, 45)
    consts = {"r2": np.array(np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
              "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Div", ["x", "r2"], ["s"]), helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["x", "p"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    model = _onnx_model(nodes, shape)
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in consts.items())
    x = np.random.default_rng(4).uniform(-5, 5, shape).astype(np.float32)
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    assert not rep.report.has_fallback
    want = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=5 * ERF_ATOL)


def test_erfc_form_keeps_relative_precision_in_the_tail():
    from pybuda.ops.eltwise import erfc_abs_device_form

    x = torch.tensor([0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 9.0], dtype=torch.float64)
    got = erfc_abs_device_form(lambda t, ops: registry.evaluate(t, list(ops), {}),
                               lambda v: torch.tensor([v], dtype=x.dtype), -x)
    torch.testing.assert_close(got, torch.erfc(x), rtol=2e-7, atol=0)


#: torch.erf compiled for the golden chip at Float32: the SFPU's exp and reciprocal approximations add to
#: the fit's error (measured max about 5e-3 on [-4, 4]).
DEVICE_ERF_ATOL = 2e-2


def test_torch_erf_runs_on_the_golden_device_without_fallback():
    import pybuda

    class Erf(torch.nn.Module):
        def forward(self, x):
            return torch.erf(x)

    pybuda.set_configuration_options(enable_tvm_cpu_fallback=False, default_df_override=pybuda.DataFormat.Float32)
    x = torch.empty(2, 37, 45).uniform_(-4, 4)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("erf", Erf().eval()), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[x]).get()[0].value()
    want = torch.erf(x)
    assert torch.corrcoef(torch.stack([got.flatten(), want.flatten()]))[0, 1] > 0.99
    assert torch.allclose(got, want, rtol=0, atol=DEVICE_ERF_ATOL)
