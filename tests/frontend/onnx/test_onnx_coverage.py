"""Registry-mappable models run wholly on the device: the rule (coverage.device_mappable), function ops expanded
into their ONNX bodies, -inf masks as ONNX Runtime computes them, and node cases of ONNX's suite that used to
need the host."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_helpers import assert_close, load_node_cases, ort_run, run_node_case, single_node_model
from pybuda.frontend.onnx.backend import PybudaBackend
from pybuda.frontend.onnx.coverage import device_mappable
from pybuda.frontend.onnx.functions import expand_functions
from pybuda.frontend.onnx.converter import CONVERTERS, mapped_op_types


def _rng():
    return np.random.default_rng(11)


def _model(nodes, inputs, outputs, opset=17):
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", opset)])


def _on_device(model, arrays, rtol=1e-4, atol=1e-4):
    rep = PybudaBackend.prepare(model)
    got = rep.run(arrays)
    assert not rep.report.has_fallback, [(f.aten_op, f.reason) for f in rep.report.fallback_ops]
    for g, w in zip(got, ort_run(model, arrays)):
        assert_close(g, w, rtol=rtol, atol=atol)


# --- the rule -------------------------------------------------------------------------------------
def test_a_model_of_mapped_ops_on_device_data_is_mappable():
    x = _rng().standard_normal((3, 5)).astype(np.float32)
    assert device_mappable(single_node_model("Relu", {"x": x}), [x]) is None


def test_an_op_without_a_converter_or_function_body_is_not_mappable():
    x = _rng().standard_normal((3, 5)).astype(np.float32)
    assert "Tan" not in mapped_op_types()
    why = device_mappable(single_node_model("Tan", {"x": x}), [x])
    assert why is not None and "Tan" in why and "no converter" in why


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.BFLOAT16, TensorProto.STRING])
def test_values_the_device_cannot_hold_are_not_mappable(to):
    x = _rng().standard_normal((3, 5)).astype(np.float32)
    why = device_mappable(single_node_model("Cast", {"x": x}, opset=21, to=to), [x])
    assert why is not None and "cannot hold" in why


def test_an_empty_tensor_is_not_mappable():
    x = np.zeros((0, 4), np.float32)
    why = device_mappable(single_node_model("Relu", {"x": x}), [x])
    assert why is not None and "empty" in why


def test_values_folded_at_import_need_not_be_device_data():
    # Shape -> Cast(int64 -> float) is computed at import: its int64 value never reaches the device.
    x = _rng().standard_normal((3, 5)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["sf"], ["n"], keepdims=0), helper.make_node("Mul", ["x", "n"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])])
    assert device_mappable(model, [x]) is None


# --- function ops ---------------------------------------------------------------------------------
def test_function_ops_without_a_converter_become_their_bodies():
    x = _rng().standard_normal((2, 4, 8)).astype(np.float32)
    scale = np.ones(8, np.float32)
    model = single_node_model("RMSNormalization", {"x": x, "scale": scale}, opset=23)
    assert "RMSNormalization" not in CONVERTERS
    expanded = expand_functions(model, CONVERTERS)
    assert "RMSNormalization" not in {n.op_type for n in expanded.graph.node}
    assert expand_functions(single_node_model("Relu", {"x": x}), CONVERTERS).graph.node[0].op_type == "Relu"
    _on_device(model, [x, scale])


def test_attention_with_a_causal_and_a_padding_mask_runs_on_the_device():
    # Two -inf masks add up (causal + the padding of the last key): still -inf, exp 0, no NaN; a fully masked
    # row would be NaN in ONNX Runtime too, so every query keeps one key.
    rng = _rng()
    q, k, v = (rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    mask = np.zeros((4, 4), np.float32)
    mask[:, 3] = -np.inf
    model = single_node_model("Attention", {"Q": q, "K": k, "V": v, "attn_mask": mask}, opset=23, is_causal=1)
    _on_device(model, [q, k, v, mask])


# --- infinities -----------------------------------------------------------------------------------
def test_minus_inf_fills_compare_and_come_back_as_in_onnx_runtime():
    rng = _rng()
    x = rng.standard_normal((2, 6)).astype(np.float32)
    keep = np.array([[1, 1, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0]], bool)  # the second row fully masked
    ninf = helper.make_tensor("ninf", TensorProto.FLOAT, [1], [-np.inf])
    nodes = [helper.make_node("Constant", [], ["c"], value=ninf),
             helper.make_node("Where", ["keep", "x", "c"], ["masked"]),
             helper.make_node("ReduceMax", ["masked"], ["rowmax"], keepdims=1),
             helper.make_node("Equal", ["rowmax", "c"], ["empty_row"]),
             helper.make_node("Identity", ["masked"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                           helper.make_tensor_value_info("keep", TensorProto.BOOL, [2, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6]),
                    helper.make_tensor_value_info("empty_row", TensorProto.BOOL, [2, 1])])
    rep = PybudaBackend.prepare(model)
    y, empty = rep.run([x, keep])
    want_y, want_empty = ort_run(model, [x, keep])
    assert not rep.report.has_fallback
    np.testing.assert_array_equal(empty, want_empty)
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(want_y))
    np.testing.assert_allclose(y[keep], want_y[keep], rtol=1e-5)


# --- node cases of ONNX's suite that now run wholly on the device ---------------------------------
ON_DEVICE = [
    "test_attention_4d_attn_mask_3d_causal", "test_attention_4d_diff_heads_mask4d_padded_kv",
    "test_rms_normalization_2d_axis0", "test_layer_normalization_2d_axis0", "test_nllloss_NC",
    "test_sce_mean_weight_ii_4d", "test_gather_elements_negative_indices", "test_einsum_batch_diagonal",
    "test_einsum_inner_prod", "test_constant_pad_negative_axes", "test_clip_default_min",
    "test_averagepool_2d_same_upper", "test_maxpool_1d_default", "test_cumsum_1d_reverse_exclusive",
    "test_matmul_bcast", "test_xor3d", "test_range_float_type_positive_delta", "test_causal_conv_with_state_basic",
    "test_convtranspose_1d", "test_reduce_max_bool_inputs", "test_top_k_same_values_2d", "test_top_k_smallest",
    "test_gridsample_zeros_padding", "test_gridsample_border_padding", "test_reduce_prod_keepdims_random",
    "test_reduce_prod_default_axes_keepdims_random", "test_cumprod_1d_reverse_exclusive", "test_cumprod_2d_axis_0",
]


@pytest.fixture(scope="module")
def node_cases():
    return load_node_cases(ON_DEVICE)


@pytest.mark.parametrize("name", ON_DEVICE)
def test_mappable_node_case_runs_wholly_on_the_device(node_cases, name):
    run_node_case(node_cases[name], on_device=True)


def test_model_local_functions_are_inlined():
    fn = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="local")], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("local", 1)])
    onnx.checker.check_model(model)
    assert [n.op_type for n in expand_functions(model, CONVERTERS).graph.node] == ["Add"]
    x = _rng().standard_normal((2, 3)).astype(np.float32)
    _on_device(model, [x])


def test_a_3d_convolution_with_uneven_pads_runs_on_the_device():
    rng = _rng()
    x = rng.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 2, 3, 3], rng.standard_normal(4 * 3 * 18).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [4], rng.standard_normal(4).tolist())
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 2])]
    graph = helper.make_graph(nodes, "conv3d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 6, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3, 5, 4])], initializer=[w, b])
    _on_device(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), [x])
