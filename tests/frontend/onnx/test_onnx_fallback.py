"""CPU fallback per ONNX node, UnsupportedOpError with fallback off, and malformed models."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from onnx_helpers import assert_close, ort_run
import pybuda
from pybuda.config import CompilerConfig
from pybuda.errors import InputError, ModuleError, PybudaError, UnsupportedOpError
from pybuda.frontend.onnx import OnnxStage, import_model
from pybuda.frontend.onnx.backend import PybudaBackend
from pybuda.verify import calculate_pcc


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _floor_model():
    """x -> Relu -> Floor (no mapping) -> Sigmoid; Ceil (no mapping) on a second branch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Exp", ["r"], ["e"], name="exp"),
             helper.make_node("Floor", ["e"], ["f"], name="floor"),
             helper.make_node("Sigmoid", ["f"], ["y"], name="sig"),
             helper.make_node("Ceil", ["x"], ["c"], name="ceil"),
             helper.make_node("Tanh", ["c"], ["z"], name="tanh")]
    return _model(nodes, [x], [y, z])


def test_unmapped_op_goes_to_cpu_with_a_report():
    model = _floor_model()
    x = np.random.default_rng(0).uniform(-2, 2, (2, 8)).astype(np.float32)
    cap = import_model(model, x)
    report = cap.report
    assert report.has_fallback
    assert sorted(report.op_names()) == ["Ceil", "Floor"]
    assert isinstance(cap.pre, OnnxStage) and isinstance(cap.post, OnnxStage)
    assert "floor" in str(report) and "Floor" in str(report)
    got = cap.run(torch.from_numpy(x))
    for g, w in zip(got, ort_run(model, [x])):
        assert_close(g.numpy(), w)


def test_fallback_model_on_the_golden_backend():
    model = _floor_model()
    x = np.random.default_rng(1).uniform(-2, 2, (2, 8)).astype(np.float32)
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])
    assert rep.report.has_fallback and rep.report.device_ops > 0
    for g, w in zip(got, ort_run(model, [x])):
        assert_close(g, w)


def test_fallback_off_lists_every_unsupported_node():
    cfg = CompilerConfig()
    cfg.enable_tvm_cpu_fallback = False
    with pytest.raises(UnsupportedOpError) as e:
        import_model(_floor_model(), np.zeros((2, 8), np.float32), config=cfg)
    msg = str(e.value)
    assert "Floor (node 'floor')" in msg and "Ceil (node 'ceil')" in msg
    assert len(e.value.ops) == 2


def test_cpu_fallback_ops_by_onnx_op_type():
    cfg = CompilerConfig()
    cfg.cpu_fallback_ops = ["Tanh"]
    x = np.ones((2, 8), np.float32)
    cap = import_model(_floor_model(), x, config=cfg)
    assert "Tanh" in cap.report.op_names()


def test_bad_proto_is_a_module_error():
    with pytest.raises(ModuleError, match="not a valid ONNX model"):
        pybuda.OnnxModule("bad", b"this is not a protobuf")


def test_missing_file_is_a_module_error(tmp_path):
    with pytest.raises(ModuleError, match="no such file"):
        pybuda.OnnxModule("missing", str(tmp_path / "nope.onnx"))


def test_input_without_shape_is_a_module_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    with pytest.raises(PybudaError, match="input 'x' declares no shape"):
        import_model(model, np.zeros((2, 2), np.float32))


def test_bad_attribute_is_a_clear_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    model = _model([helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[0, 0])], [x], [y])
    with pytest.raises(PybudaError, match="perm|Transpose"):
        import_model(model, np.zeros((2, 3), np.float32))


def test_wrong_sample_is_an_input_error():
    model = _floor_model()
    with pytest.raises(InputError, match="dim 1"):
        import_model(model, np.zeros((2, 7), np.float32))
    with pytest.raises(InputError, match="takes 1 input"):
        import_model(model, np.zeros((2, 8), np.float32), np.zeros((2, 8), np.float32))


def test_onnx_module_api(tmp_path):
    model = _floor_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    mod = pybuda.OnnxModule("m", str(path))
    assert mod.onnx_path == str(path)
    x = torch.randn(2, 8)
    outs = mod.forward(x)
    for g, w in zip(outs, ort_run(model, [x.numpy()])):
        assert_close(g.numpy(), w)
    cap = mod.to_graph(x)
    assert cap.report.has_fallback
    assert mod.get_parameters() == []


class _GruThenLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(16, 24, batch_first=True)
        self.fc = torch.nn.Linear(24, 8)

    def forward(self, x):
        return self.fc(self.rnn(x)[0])


@pytest.mark.parametrize("samples", [1, 2])
def test_a_sequence_first_rnn_output_from_the_cpu_feeds_the_device(samples, tmp_path):
    # The exported GRU runs in ONNX Runtime and hands the device its [seq, dirs, batch, hidden] output; the device
    # took its dim 0 (12) for the microbatch: "reshape mixes the samples of a microbatch". Every ONNX or Keras
    # (tf2onnx) model with an LSTM, GRU or SimpleRNN feeding device ops failed so.
    torch.manual_seed(0)
    m = _GruThenLinear().eval()
    path = str(tmp_path / "gru.onnx")
    torch.onnx.export(m, (torch.randn(1, 12, 16),), path, dynamo=False, opset_version=17,
                      dynamic_axes={"x": {0: "b"}}, input_names=["x"])
    x = torch.randn(samples, 12, 16, generator=torch.Generator().manual_seed(1))
    pybuda.TTDevice("tt0", module=pybuda.OnnxModule("gru", path), arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        got = pybuda.run_inference(inputs=[(x,)]).get(timeout=600)[0].value()
    finally:
        pybuda.shutdown()
    want = torch.as_tensor(ort_run(onnx.load(path), [x.numpy()])[0])
    assert got.shape == want.shape and calculate_pcc(got, want) >= 0.999
