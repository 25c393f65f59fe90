"""What runs on the host and how: values the device cannot hold, ops ONNX Runtime lacks, seeded random ops,
compile failures that send a node to the host, and the device forms of Gemm biases and uneven conv pads."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnx_helpers import assert_close, ort_run, single_node_model
from pybuda.errors import CompileError
from pybuda.frontend.onnx import OnnxStage, import_model
from pybuda.frontend.onnx.backend import PybudaBackend
from pybuda.frontend.onnx.stages import ORT, REFERENCE


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v)
                                                                                for d, v in domains])


def _rng():
    return np.random.default_rng(7)


def test_bfloat16_output_runs_the_model_on_the_host():
    # Relu could run on the device, but its bfloat16 result would have to cross the device to reach the output.
    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y_vi = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3, 5])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=TensorProto.BFLOAT16)]
    model = _model(nodes, [x_vi], [y_vi])
    x = _rng().standard_normal((3, 5)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]  # ONNX Runtime hands no bfloat16 to numpy
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    assert rep.report.has_fallback
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    # Relu goes to the device; the cast to bfloat16 runs on the host after it (the post stage).
    cap = rep.last_capture
    assert cap.host is None and cap.post is not None and cap.pre is None


def test_float8_values_are_cast_on_the_host_around_the_device():
    import ml_dtypes

    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [4])
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [4])
    model = _model([helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT),
                    helper.make_node("Neg", ["c"], ["n"]),
                    helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT8E4M3FN)], [x_vi], [y_vi], opset=19)
    x = np.array([1.5, -2.0, 0.25, 3.0], np.float32)
    xb = x.astype(ml_dtypes.float8_e4m3fn)
    cap = import_model(model, xb)
    assert cap.host is None and cap.report.device_ops == 1 and cap.pre is not None and cap.post is not None
    np.testing.assert_array_equal(np.asarray(cap.run(xb)[0]).astype(np.float32), -x)


def test_a_float8_value_that_would_cross_the_device_keeps_the_model_on_the_host():
    import ml_dtypes

    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, [4])
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    z_vi = helper.make_tensor_value_info("z", TensorProto.FLOAT8E4M3FN, [4])
    model = _model([helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT),
                    helper.make_node("Neg", ["c"], ["y"]),
                    helper.make_node("Identity", ["x"], ["z"])], [x_vi], [y_vi, z_vi], opset=19)
    x = np.array([1.5, -2.0, 0.25, 3.0], np.float32)
    xb = x.astype(ml_dtypes.float8_e4m3fn)
    cap = import_model(model, xb)
    assert cap.host is not None and "float8" in cap.host_reason
    with pytest.raises(CompileError, match="no part for the device"):
        cap.split_for_devices()
    y, z = cap.run(xb)
    np.testing.assert_array_equal(y.numpy(), -x)
    np.testing.assert_array_equal(np.asarray(z).astype(np.float32), x)


def test_empty_tensors_stay_on_the_host():
    x = np.zeros((3, 0, 5), np.float32)
    model = single_node_model("Trilu", {"x": x}, opset=14)
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    assert got.shape == (3, 0, 5) and rep.last_capture.host is not None


def test_integers_beyond_the_exact_range_do_not_cross_the_device():
    # A uint32 input whose values Float32 cannot hold exactly is read only by host nodes.
    x_vi = helper.make_tensor_value_info("x", TensorProto.UINT32, [4])
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = _model([helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
                    helper.make_node("Relu", ["f"], ["y"])], [x_vi], [y_vi])
    x = np.array([1, 70000000, 3, 2 ** 31], np.uint32)
    got = PybudaBackend.prepare(model).run([x])[0]
    np.testing.assert_array_equal(got, x.astype(np.float32))


def test_seeded_dropout_in_training_mode_applies_onnx_reference_masks_on_the_device():
    """A seeded Dropout draws the same mask on every run in ONNX's reference runtime: the mask is a constant of
    the node, so the device multiplies by it (no host stage)."""
    x = _rng().standard_normal((3, 4, 5)).astype(np.float32)
    ratio, training = np.array(0.3, np.float32), np.array(True)
    model = single_node_model("Dropout", {"x": x}, outputs=("y", "mask"), opset=13, seed=5,
                              initializers={"r": ratio, "t": training})
    rep = PybudaBackend.prepare(model)
    y, mask = rep.run([x])
    keep = np.random.RandomState(5).uniform(0, 1.0, x.shape) >= 0.3
    np.testing.assert_array_equal(mask, keep)
    np.testing.assert_allclose(y, keep * x / 0.7, rtol=1e-6)
    assert not rep.report.has_fallback
    y2, mask2 = rep.run([x])
    np.testing.assert_array_equal(mask2, keep)


def test_dropout_with_ratio_zero_in_training_mode_is_an_identity_on_the_device():
    x = _rng().standard_normal((2, 8)).astype(np.float32)
    model = single_node_model("Dropout", {"x": x}, outputs=("y", "mask"), opset=13, seed=1,
                              initializers={"r": np.array(0.0, np.float32), "t": np.array(True)})
    rep = PybudaBackend.prepare(model)
    y, mask = rep.run([x])
    assert not rep.report.has_fallback
    assert_close(y, x)
    assert mask.dtype == bool and mask.all()


def test_an_op_onnx_runtime_lacks_runs_in_the_onnx_reference_runtime():
    # BitCast (opset 26) of booleans has no ONNX Runtime kernel here; ONNX's reference implementation runs it.
    x_vi = helper.make_tensor_value_info("x", TensorProto.BOOL, [4])
    y_vi = helper.make_tensor_value_info("y", TensorProto.UINT8, [4])
    model = _model([helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.UINT8)], [x_vi], [y_vi], opset=26)
    x = np.array([True, False, False, True])
    stage = OnnxStage.from_model("bitcast", model)
    got = stage(x)[0]
    assert stage.runtime == REFERENCE
    np.testing.assert_array_equal(got.numpy(), x.view(np.uint8))


def test_a_plain_stage_runs_in_onnx_runtime():
    x = _rng().standard_normal((2, 3)).astype(np.float32)
    stage = OnnxStage.from_model("floor", single_node_model("Floor", {"x": x}))
    np.testing.assert_array_equal(stage(x)[0].numpy(), np.floor(x))
    assert stage.runtime == ORT


def test_sequence_inputs_run_the_whole_model_on_the_host():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    n_vi = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    model = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq], [n_vi])
    rep = PybudaBackend.prepare(model)
    got = rep.run([[np.zeros(2, np.float32), np.ones(3, np.float32)]])[0]
    assert int(got) == 2
    assert rep.report.has_fallback and "sequence" in rep.report.fallback_ops[0].reason


def test_a_node_the_compiler_rejects_goes_to_the_host_and_the_rest_stays_on_the_device(monkeypatch):
    # A compiler that cannot place the convolution (a CompileError naming its op): the conv runs in ONNX
    # Runtime, the Relu after it on the device.
    import pybuda.compile

    real = pybuda.compile.compile_graph

    def rejects_conv(graph, *args, **kwargs):
        conv = next((n.name for n in graph.nodes.values() if n.kind == "op" and n.op_type == "conv2d"), None)
        if conv is not None:
            raise CompileError("no op model fits L1", stage="BALANCER_PASS", op=conv)
        return real(graph, *args, **kwargs)

    monkeypatch.setattr(pybuda.compile, "compile_graph", rejects_conv)
    rng = _rng()
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"])],
                   [x_vi], [y_vi], [onnx.numpy_helper.from_array(w, "w")])
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    assert_close(got, ort_run(model, [x])[0])
    [op] = rep.report.fallback_ops
    assert op.name == "conv" and "compiler" in op.reason
    assert rep.report.device_ops == 1


def test_a_convolution_of_several_samples_runs_on_the_device_one_sample_at_a_time():
    # The chip convolves one sample per device run: a batch of two is two convolutions and a concatenation.
    rng = _rng()
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    model = single_node_model("Conv", {"x": x}, initializers={"w": w}, pads=[1, 1, 1, 1])
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    assert not rep.report.has_fallback
    assert_close(got, ort_run(model, [x])[0])


@pytest.mark.parametrize("bias_shape", [(3, 4), (1, 1), (3, 1), (4,)])
def test_gemm_bias_of_any_broadcastable_shape_runs_on_the_device(bias_shape):
    rng = _rng()
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    c = rng.standard_normal(bias_shape).astype(np.float32)
    model = single_node_model("Gemm", {"a": a, "b": b, "c": c}, beta=0.5)
    rep = PybudaBackend.prepare(model)
    got = rep.run([a, b, c])[0]
    assert not rep.report.has_fallback
    assert_close(got, ort_run(model, [a, b, c])[0])


@pytest.mark.parametrize("pads,strides", [([0, 0, 1, 1], [2, 2]), ([1, 0, 2, 1], [1, 1]), ([0, 2, 0, 1], [1, 2])])
def test_conv_with_uneven_pads_runs_on_the_device(pads, strides):
    rng = _rng()
    x = rng.standard_normal((1, 3, 9, 10)).astype(np.float32)
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    model = single_node_model("Conv", {"x": x}, initializers={"w": w}, pads=pads, strides=strides)
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    assert not rep.report.has_fallback
    assert_close(got, ort_run(model, [x])[0])


@pytest.mark.parametrize("half_first", [False, True])
def test_exact_gelu_chain_of_an_export_becomes_the_chips_gelu(half_first):
    # x * 0.5 * (1 + erf(x / sqrt(2))), as exporters without a Gelu op write it: one gelu op on the device.
    x = _rng().uniform(-4, 4, (3, 40)).astype(np.float32)
    consts = {"r2": np.array(np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
              "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Div", ["x", "r2"], ["s"]), helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"])]
    if half_first:
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "p"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "p"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))
    model = _model(nodes, [x_vi], [y_vi], [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()])
    cap = import_model(model, x)
    assert [n.op_type for n in cap.graph.ops] == ["gelu"] and cap.pre is None and cap.post is None
    assert_close(cap.run(x)[0].numpy(), ort_run(model, [x])[0], atol=1e-5)


def test_a_gelu_chain_whose_inner_value_is_also_an_output_is_left_alone():
    x = _rng().uniform(-4, 4, (3, 40)).astype(np.float32)
    consts = {"r2": np.array(np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
              "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Div", ["x", "r2"], ["s"]), helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["x", "p"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(x.shape)) for n in ("x", "y", "e")]
    model = _model(nodes, vis[:1], vis[1:], [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()])
    cap = import_model(model, x)
    assert "gelu" not in {n.op_type for n in cap.graph.ops}
    for got, want in zip(cap.run(x), ort_run(model, [x])):
        assert_close(got.numpy(), want, atol=1e-5)


@pytest.mark.parametrize("mode,ctm,scales", [
    ("linear", "half_pixel", [1, 1, 2.0, 1.5]),
    ("linear", "align_corners", [1, 1, 0.6, 0.6]),
    ("cubic", "asymmetric", [1, 1, 1.75, 2.0]),
    ("nearest", "half_pixel", [1, 1, 0.5, 3.0]),
])
def test_resize_of_any_mode_is_matmuls_on_the_device(mode, ctm, scales):
    # Each resized axis is a matmul with the node's own interpolation matrix (ONNX's reference on a basis).
    x = _rng().standard_normal((1, 3, 6, 8)).astype(np.float32)
    model = single_node_model("Resize", {"x": x}, opset=19, mode=mode, coordinate_transformation_mode=ctm,
                              initializers={"roi": np.zeros(0, np.float32), "s": np.array(scales, np.float32)})
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    assert not rep.report.has_fallback, str(rep.report)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert_close(got, want, atol=1e-5)
