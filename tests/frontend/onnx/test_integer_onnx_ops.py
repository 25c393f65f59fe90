"""Integer-valued ONNX data on the device (pybuda.ops.integer): ArgMax/ArgMin (select_last_index too), Where
on int64, Pow of integers, integer Casts — exact against ONNX Runtime; a Cast that truncates arbitrary floats
and a Pow with a float exponent on an integer base run on the host, and are exact too."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import ort_run, single_node_model

from pybuda.frontend.onnx.backend import PybudaBackend


def _ties(shape, seed):
    """Values with many ties, and neighbours 2**-12 apart (a multiplier's 19-bit registers would merge them)."""
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 5, shape) + rng.integers(0, 3, shape) * 2.0 ** -12).astype(np.float32)


def _run(model, arrays):
    rep = PybudaBackend.prepare(model)
    return rep.run(list(arrays)), rep.report


def _assert_exact(got, want):
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims", [(0, 1), (1, 0), (-1, 1), (-1, 0)])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_argmin_run_on_the_device_exactly(op, axis, keepdims, last):
    x = _ties((3, 7, 9), seed=axis + 2 + 3 * keepdims + 7 * last)
    model = single_node_model(op, {"x": x}, axis=axis, keepdims=keepdims, select_last_index=last)
    got, report = _run(model, [x])
    assert not report.has_fallback, str(report)
    _assert_exact(got, ort_run(model, [x]))


def test_argmax_over_more_elements_than_the_multiplier_holds():
    """Indices beyond 2**11 (where a multiplier register would round them) stay exact: scores are selected by heaviside, never multiplied."""
    x = _ties((2, 5000), seed=5)
    model = single_node_model("ArgMax", {"x": x}, axis=1, keepdims=1, select_last_index=1)
    got, report = _run(model, [x])
    assert not report.has_fallback, str(report)
    _assert_exact(got, ort_run(model, [x]))


def test_where_on_int64_runs_on_the_device():
    cond = np.array([[True, False, True], [False, False, True]])
    x = np.array([[1, -2000, 3], [40000, 5, -6]], dtype=np.int64)
    y = np.array([[9, 8, 7], [6, 5000, 4]], dtype=np.int64)
    ins = [helper.make_tensor_value_info("c", TensorProto.BOOL, [2, 3]),
           helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3]),
           helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])]
    graph = helper.make_graph([helper.make_node("Where", ["c", "x", "y"], ["z"])], "where_long", ins,
                              [helper.make_tensor_value_info("z", TensorProto.INT64, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got, report = _run(model, [cond, x, y])
    assert not report.has_fallback, str(report)
    _assert_exact(got, ort_run(model, [cond, x, y]))


def _chain_model():
    """ArgMax -> Cast(int32) -> Add(int32 constant), and a Greater mask counted by ReduceSum over int64."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 30])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 30])
    nodes = [
        helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=1),
        helper.make_node("Cast", ["am"], ["am32"], to=TensorProto.INT32),
        helper.make_node("Constant", [], ["k"], value=helper.make_tensor("k", TensorProto.INT32, [1], [100])),
        helper.make_node("Add", ["am32", "k"], ["shifted"]),
        helper.make_node("Greater", ["x", "y"], ["gt"]),
        helper.make_node("Cast", ["gt"], ["gt64"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["gt64"], ["count"], keepdims=1),
    ]
    outs = [helper.make_tensor_value_info("shifted", TensorProto.INT32, [4, 1]),
            helper.make_tensor_value_info("count", TensorProto.INT64, [1, 1])]
    graph = helper.make_graph(nodes, "int_chain", [x, y], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_integer_chain_and_casts_run_on_the_device():
    model = _chain_model()
    x, y = _ties((4, 30), 1), _ties((4, 30), 2)
    got, report = _run(model, [x, y])
    assert not report.has_fallback, str(report)
    _assert_exact(got, ort_run(model, [x, y]))


def test_cast_that_truncates_floats_runs_on_the_host():
    x = (np.random.default_rng(3).standard_normal((3, 8)) * 10).astype(np.float32)
    model = single_node_model("Cast", {"x": x}, to=TensorProto.INT64)
    got, report = _run(model, [x])
    assert report.has_fallback  # a truncation: never a device identity on non-integers
    _assert_exact(got, ort_run(model, [x]))


def test_pow_of_integers():
    base = np.array([[1, 2, 3], [-4, 5, 6]], dtype=np.int64)
    # a constant integer exponent: the power of integers is an integer, exact on the device
    model = single_node_model("Pow", {"x": base}, initializers={"e": np.array(3, dtype=np.int64)})
    got, report = _run(model, [base])
    assert not report.has_fallback, str(report)
    _assert_exact(got, ort_run(model, [base]))
    # a float exponent from the user: ONNX truncates a float power, which the device cannot compute exactly
    e = np.array([[4, 5, 6], [2, 3, 1.5]], dtype=np.float32)
    model = single_node_model("Pow", {"x": base, "e": e})
    got, report = _run(model, [base, e])
    assert report.has_fallback
    _assert_exact(got, ort_run(model, [base, e]))
