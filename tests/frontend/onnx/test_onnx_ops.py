"""Per-op mapping tests: one-node ONNX models on the golden device (Float32) against ONNX Runtime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_helpers import assert_close, ort_run, single_node_model
from pybuda.frontend.onnx import mapped_op_types
from pybuda.frontend.onnx.backend import PybudaBackend

rng = np.random.default_rng(0)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


# (id, op type, inputs, initializers (constants), attributes)
CASES = [
    ("add_broadcast", "Add", {"a": f32(2, 3, 4), "b": f32(4)}, {}, {}),
    ("sub", "Sub", {"a": f32(2, 3), "b": f32(2, 3)}, {}, {}),
    ("mul", "Mul", {"a": f32(2, 3), "b": f32(1, 3)}, {}, {}),
    ("div", "Div", {"a": f32(2, 3), "b": f32(2, 3, lo=0.5)}, {}, {}),
    ("pow_const", "Pow", {"a": f32(3, 4, lo=0.1)}, {"e": np.array(3.0, np.float32)}, {}),
    ("max3", "Max", {"a": f32(3, 4), "b": f32(3, 4), "c": f32(3, 4)}, {}, {}),
    ("relu", "Relu", {"x": f32(2, 8)}, {}, {}),
    ("sigmoid", "Sigmoid", {"x": f32(2, 8)}, {}, {}),
    ("tanh", "Tanh", {"x": f32(2, 8)}, {}, {}),
    ("erf", "Erf", {"x": f32(2, 8)}, {}, {}),
    ("exp", "Exp", {"x": f32(2, 8)}, {}, {}),
    ("sqrt", "Sqrt", {"x": f32(2, 8, lo=0.1)}, {}, {}),
    ("gelu_tanh", "Gelu", {"x": f32(2, 8)}, {}, {"approximate": "tanh", "opset": 20}),
    ("leaky_relu", "LeakyRelu", {"x": f32(2, 8)}, {}, {"alpha": 0.2}),
    ("hard_sigmoid", "HardSigmoid", {"x": f32(2, 8)}, {}, {}),
    ("clip", "Clip", {"x": f32(2, 8)}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)}, {}),
    ("matmul_batched", "MatMul", {"a": f32(2, 4, 8), "b": f32(2, 8, 3)}, {}, {}),
    ("gemm_trans", "Gemm", {"a": f32(8, 4)}, {"w": f32(5, 8), "c": f32(5)}, {"transA": 1, "transB": 1, "alpha": 0.5}),
    ("conv_pad_stride", "Conv", {"x": f32(1, 3, 8, 8)}, {"w": f32(4, 3, 3, 3), "b": f32(4)},
     {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("conv_groups", "Conv", {"x": f32(1, 4, 6, 6)}, {"w": f32(4, 2, 3, 3)}, {"group": 2}),
    ("maxpool", "MaxPool", {"x": f32(1, 2, 8, 8)}, {}, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("avgpool", "AveragePool", {"x": f32(1, 2, 8, 8)}, {}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("global_avgpool", "GlobalAveragePool", {"x": f32(1, 3, 4, 4)}, {}, {}),
    ("global_maxpool", "GlobalMaxPool", {"x": f32(1, 3, 4, 4)}, {}, {}),
    ("batchnorm", "BatchNormalization", {"x": f32(1, 3, 4, 4)},
     {"s": f32(3), "b": f32(3), "m": f32(3), "v": f32(3, lo=0.5)}, {"epsilon": 1e-5}),
    ("layernorm", "LayerNormalization", {"x": f32(2, 3, 16)}, {"s": f32(16), "b": f32(16)}, {"axis": -1}),
    ("softmax", "Softmax", {"x": f32(2, 3, 8)}, {}, {"axis": 1}),
    ("log_softmax", "LogSoftmax", {"x": f32(2, 8)}, {}, {}),
    ("reshape", "Reshape", {"x": f32(2, 3, 4)}, {"s": i64([0, -1])}, {}),
    ("transpose", "Transpose", {"x": f32(2, 3, 4)}, {}, {"perm": [2, 0, 1]}),
    ("flatten", "Flatten", {"x": f32(2, 3, 4)}, {}, {"axis": 1}),
    ("squeeze", "Squeeze", {"x": f32(2, 1, 4)}, {"axes": i64([1])}, {}),
    ("unsqueeze", "Unsqueeze", {"x": f32(2, 4)}, {"axes": i64([0, 3])}, {}),
    ("concat", "Concat", {"a": f32(2, 3), "b": f32(2, 5)}, {}, {"axis": 1}),
    ("slice", "Slice", {"x": f32(4, 10)}, {"st": i64([1, 2]), "en": i64([3, -1]), "ax": i64([0, 1]),
                                           "sp": i64([1, 2])}, {}),
    ("gather_const", "Gather", {"x": f32(5, 4)}, {"i": i64([4, 0, -1])}, {"axis": 0}),
    ("expand", "Expand", {"x": f32(3, 1)}, {"s": i64([2, 3, 4])}, {}),
    ("tile", "Tile", {"x": f32(2, 3)}, {"r": i64([2, 1])}, {}),
    ("pad", "Pad", {"x": f32(1, 2, 3, 3)}, {"p": i64([0, 0, 1, 2, 0, 0, 1, 0])}, {"mode": "constant"}),
    ("reduce_mean", "ReduceMean", {"x": f32(2, 3, 4)}, {}, {"axes": [1, 2], "keepdims": 1}),
    ("reduce_sum", "ReduceSum", {"x": f32(2, 3, 4)}, {"axes": i64([-1])}, {"keepdims": 0}),
    ("reduce_max", "ReduceMax", {"x": f32(2, 3, 4)}, {}, {"axes": [1], "keepdims": 0}),
    ("where", "Where", {"c": rng.uniform(size=(2, 3)) > 0.5, "a": f32(2, 3), "b": f32(2, 3)}, {}, {}),
    ("equal_to_float", "Equal", {"a": np.round(f32(2, 3)), "b": np.round(f32(2, 3))}, {}, {}),
    ("resize_nearest", "Resize", {"x": f32(1, 2, 3, 4)},
     {"roi": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)}, {"mode": "nearest"}),
    ("dropout", "Dropout", {"x": f32(2, 8)}, {}, {}),
    ("identity", "Identity", {"x": f32(2, 8)}, {}, {}),
]


#: Cases expected to need the CPU (none today: Erf has a device form, Gather lowers to the chip).
ON_HOST: set = set()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_on_device_matches_onnxruntime(case):
    name, op_type, inputs, inits, attrs = case
    attrs = dict(attrs)
    opset = attrs.pop("opset", 17)
    model = single_node_model(op_type, inputs, initializers=inits, opset=opset, **attrs)
    want = ort_run(model, list(inputs.values()))
    rep = PybudaBackend.prepare(model)
    got = rep.run(list(inputs.values()))
    # Mapped, but the chip has no kernel for the registry op (capability check): correct through the CPU.
    assert rep.report.has_fallback == (name in ON_HOST), str(rep.report)
    for g, w in zip(got, want):
        assert_close(g, w)


def test_op_table_covers_the_common_ops():
    mapped = set(mapped_op_types())
    for op in ["Add", "MatMul", "Gemm", "Conv", "MaxPool", "GlobalAveragePool", "BatchNormalization",
               "LayerNormalization", "Softmax", "LogSoftmax", "Relu", "Gelu", "Erf", "Reshape", "Transpose",
               "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Expand", "Tile", "Pad",
               "Shape", "Cast", "ConstantOfShape", "Range", "Where", "Equal", "ReduceMean", "ReduceSum",
               "ReduceMax", "ArgMax", "Resize", "Dropout", "Identity"]:
        assert op in mapped, op


def test_shape_chains_fold_at_import():
    from pybuda.frontend.onnx import import_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 3])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "tail"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]), helper.make_tensor("ax0", TensorProto.INT64, [1], [0]),
             helper.make_tensor("tail", TensorProto.INT64, [2], [2, 3])]
    model = helper.make_model(helper.make_graph(nodes, "fold", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    cap = import_model(model, f32(5, 6))
    assert [n.op_type for n in cap.graph.ops] == ["reshape"]
    assert not cap.report.has_fallback
    assert cap.graph.inputs[0].shape == (5, 6)  # the dynamic dim is bound from the sample


def test_argmax_integer_output_is_exact_on_the_device():
    x = f32(3, 5)
    model = single_node_model("ArgMax", {"x": x}, axis=1, keepdims=0)
    rep = PybudaBackend.prepare(model)
    got = rep.run([x])[0]
    np.testing.assert_array_equal(got, ort_run(model, [x])[0])
    assert not rep.report.has_fallback
