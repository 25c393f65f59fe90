"""Mechanisms found by ``tools/onnx_model_sweep.py`` (models exported with ``torch.onnx.export``), each as a
small ONNX graph built with onnx.helper."""

import numpy as np
import pytest
import torch
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnx_helpers import assert_close, load_node_cases, ort_run, run_node_case
import pybuda
from pybuda.frontend.onnx import import_model
from pybuda.frontend.onnx.backend import PybudaBackend


def _on_device(model, *feeds):
    """``(outputs, fallback report)`` of ``model`` compiled for and run on the golden device (ONNX backend)."""
    rep = PybudaBackend.prepare(model)
    got = rep.run(list(feeds))
    return [np.asarray(g) for g in got], rep.report


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def test_gather_elements_of_constants_folds_where_onnx_reference_fails():
    # HF embeddings gather their constant token-type buffer (64 wide) by constant position ids. onnx.reference's
    # GatherElements fails past 32 entries along the axis (np.choose); the fold must not depend on it, else the
    # node and the embedding it feeds ran on the host.
    buf = np.zeros((1, 64), np.int64)
    pos = np.arange(16, dtype=np.int64)[None]
    table = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    nodes = [helper.make_node("GatherElements", ["buf", "pos"], ["tt"], axis=1),
             helper.make_node("Gather", ["table", "tt"], ["emb"]),
             helper.make_node("Add", ["x", "emb"], ["y"])]
    inits = [onnx.numpy_helper.from_array(buf, "buf"), onnx.numpy_helper.from_array(pos, "pos"),
             onnx.numpy_helper.from_array(table, "table")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8])], inits)
    x = np.random.default_rng(1).standard_normal((1, 16, 8)).astype(np.float32)
    cap = import_model(model, x)
    assert not cap.report.has_fallback, str(cap.report)
    assert_close(cap.run(x)[0].numpy(), ort_run(model, [x])[0])


#: Integer indices (the float-index cases stay on the host: ONNX truncates float indices).
ONE_HOT_CASES = ["test_onehot_without_axis", "test_onehot_negative_indices", "test_onehot_out_of_range_indices"]
TRILU_CASES = ["test_triu", "test_triu_neg", "test_triu_out_neg_out", "test_triu_pos", "test_triu_out_pos",
               "test_triu_square", "test_triu_square_neg", "test_triu_one_row", "test_tril", "test_tril_neg",
               "test_tril_out_neg", "test_tril_pos", "test_tril_out_pos", "test_tril_square", "test_tril_square_neg",
               "test_tril_one_row_neg"]


#: Not test_asin_example: asin(0) is pi/2 - acos(0) there, 1.2e-7 (one ulp of pi/2) where the case allows 1e-7
#: absolute, as in the torch frontend.
INVERSE_TRIG_CASES = ["test_acos", "test_acos_example", "test_asin", "test_atan", "test_atan_example"]


@pytest.mark.parametrize("name", ONE_HOT_CASES + TRILU_CASES + INVERSE_TRIG_CASES)
def test_ops_the_torch_frontend_runs_on_the_device_do_so_from_onnx(name):
    # F.one_hot, torch.triu/tril and torch.acos/asin/atan export as OneHot, Trilu, Acos/Asin/Atan, which ran on
    # the host; the torch frontend runs them on the device (comparisons with a constant ramp; a where with a
    # constant mask; polynomials).
    run_node_case(load_node_cases([name])[name], on_device=True)


def test_trilu_keeps_infinities_and_one_hot_takes_off_on_values():
    x = np.array([[[1.0, -np.inf, 2.0], [np.inf, 3.0, -1.0]]], np.float32)
    ids = np.array([[0, 2, -1, 5]], np.int64)
    nodes = [helper.make_node("Trilu", ["x"], ["t"], upper=0),
             helper.make_node("OneHot", ["ids", "depth", "vals"], ["h"], axis=1)]
    inits = [onnx.numpy_helper.from_array(np.array(3, np.int64), "depth"),
             onnx.numpy_helper.from_array(np.array([-2.0, 5.0], np.float32), "vals")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3]),
                           helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                   [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 2, 3]),
                    helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 3, 4])], inits)
    cap = import_model(model, x, ids)
    assert not cap.report.has_fallback, str(cap.report)
    got = [np.asarray(g) for g in cap.run(x, ids)]
    for g, w in zip(got, ort_run(model, [x, ids])):
        np.testing.assert_array_equal(g, w)


def test_a_model_of_host_only_ops_runs_with_its_fallback_report():
    # A TopK of k = 20 alone (the device finds at most TOPK_MAX values) has no device form. The torch frontend runs such a model
    # (its device graph passes the CPU stage's values through); the ONNX import refused it with a CompileError
    # ("no part for the device").
    x = np.random.default_rng(2).standard_normal((5, 37)).astype(np.float32)
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 37])],
                   [helper.make_tensor_value_info("v", TensorProto.FLOAT, [5, 20]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [5, 20])],
                   [onnx.numpy_helper.from_array(np.array([20], np.int64), "k")])
    got = pybuda.run_inference(pybuda.OnnxModule("topk", model), inputs=[(torch.from_numpy(x),)]).get()
    pybuda.shutdown()
    want = ort_run(model, [x])
    np.testing.assert_array_equal(got[0].value().numpy(), want[0])
    np.testing.assert_array_equal(got[1].value().numpy().astype(np.int64), want[1])


def _branch(name, nodes, out, inits=()):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                             list(inits))


@pytest.mark.parametrize("rank_check", [1, 5])
def test_an_if_on_a_shape_check_is_the_branch_it_takes(rank_check):
    # The TorchScript exporter wraps Tile (x.repeat) and diagonal in If nodes on rank and size checks, which are
    # known at import. The If ran on the host with everything after it; now its branch is mapped in place.
    then_b = _branch("then", [helper.make_node("Tile", ["x", "reps"], ["t"]),
                              helper.make_node("Mul", ["t", "two"], ["t2"])], "t2",
                     [onnx.numpy_helper.from_array(np.array([2.0], np.float32), "two")])
    else_b = _branch("else", [helper.make_node("Neg", ["x"], ["n"]),
                              helper.make_node("Tile", ["n", "reps"], ["e"])], "e")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["s"], ["r"]),
             helper.make_node("Greater", ["r", "lim"], ["c"]),
             helper.make_node("If", ["c"], ["y0"], then_branch=then_b, else_branch=else_b),
             helper.make_node("Relu", ["y0"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(rank_check, np.int64), "lim"),
             onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "reps")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 24])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 72])], inits)
    x = np.random.default_rng(3).standard_normal((3, 24)).astype(np.float32)
    got, report = _on_device(model, x)
    assert not report.has_fallback, str(report)
    assert_close(got[0], ort_run(model, [x])[0])


@pytest.mark.parametrize("indices", [[[0, 0], [1, 1], [2, 2], [-1, 3]], [[1], [0], [-1]]])
def test_gather_nd_by_constant_indices_runs_on_the_device(indices):
    # torch.diagonal exports as a GatherND by constant index pairs (inside an If).
    idx = np.array(indices, np.int64)
    x = np.random.default_rng(4).standard_normal((4, 5, 3)).astype(np.float32)
    out_shape = list(idx.shape[:-1]) + list(x.shape[idx.shape[-1]:])
    model = _model([helper.make_node("GatherND", ["x", "i"], ["g"]), helper.make_node("Abs", ["g"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                   [onnx.numpy_helper.from_array(idx, "i")])
    got, report = _on_device(model, x)
    assert not report.has_fallback, str(report)
    assert_close(got[0], ort_run(model, [x])[0])


@pytest.mark.parametrize("direction,layout", [("bidirectional", 0), ("reverse", 1), ("forward", 0)])
def test_lstm_is_unrolled_on_the_device(direction, layout):
    # nn.LSTM exports as one LSTM node, which ran on the host (75% of lstm_2layer's ops); the torch frontend
    # runs the same model on the device (torch.export unrolls it). Initial states are run-time inputs here.
    _recurrent_node_on_the_device("LSTM", 4, ["h0", "c0"], direction=direction, layout=layout)


@pytest.mark.parametrize("dtype,indices", [(np.float32, [[0, 1], [2, 3], [-1, 0]]), (np.int64, [[1], [0]])])
def test_scatter_nd_by_constant_indices_runs_on_the_device(dtype, indices):
    # `x[..., 1:] = y` (T5's shift right of the labels) exports as ScatterND by constant indices, which had no
    # mapping: the rows each index writes are known at import, the output is a where with the gathered updates.
    idx = np.array(indices, np.int64)
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 4, 5)) * 10).astype(dtype)
    upd_shape = list(idx.shape[:-1]) + list(x.shape[idx.shape[-1]:])
    upd = (rng.standard_normal(upd_shape) * 10).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
                   [helper.make_tensor_value_info("x", elem, list(x.shape)),
                    helper.make_tensor_value_info("u", elem, upd_shape)],
                   [helper.make_tensor_value_info("y", elem, list(x.shape))],
                   [onnx.numpy_helper.from_array(idx, "i")])
    got, report = _on_device(model, x, upd)
    assert not report.has_fallback, str(report)
    np.testing.assert_array_equal(got[0], ort_run(model, [x, upd])[0])  # data movement only: exact


@pytest.mark.parametrize("op,attrs,indices,shapes", [
    # reduction="add" had no mapping: rows indexed twice get both updates, summed by a 0/1 matmul on the device.
    ("ScatterND", {"reduction": "add"}, [[1], [3], [1], [0]], ((5, 6), (4, 6))),
    # torch's scatter / scatter_add export as ScatterElements, which had no mapping; negative indices count from
    # the end in ONNX.
    ("ScatterElements", {"axis": 1}, [[0, -1, 2], [1, 1, 0]], ((2, 4), (2, 3))),
    ("ScatterElements", {"axis": 1, "reduction": "add"}, [[0, -1, 2], [1, 1, 0]], ((2, 4), (2, 3))),
], ids=["scatter_nd_add", "scatter_elements", "scatter_elements_add"])
def test_scatters_by_constant_indices_run_on_the_device(op, attrs, indices, shapes):
    rng = np.random.default_rng(7)
    x, upd = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    model = _model([helper.make_node(op, ["x", "i", "u"], ["y"], **attrs)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shapes[0])),
                    helper.make_tensor_value_info("u", TensorProto.FLOAT, list(shapes[1]))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shapes[0]))],
                   [onnx.numpy_helper.from_array(np.array(indices, np.int64), "i")])
    got, report = _on_device(model, x, upd)
    assert not report.has_fallback, str(report)
    assert_close(got[0], ort_run(model, [x, upd])[0], rtol=1e-5, atol=1e-5)


def test_a_dynamic_batch_model_that_mixes_its_samples_runs_the_whole_push():
    # Exported with dynamic_axes on dim 0, torch.tile(x, (2, 3)) reads across that dim. The device imported it for
    # one sample and refused the push ("mixes the samples of a microbatch"); the torch frontend traces the whole
    # push and keeps the batch in the graph, and so does the ONNX import now.
    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 24])
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 72])
    model = _model([helper.make_node("Tile", ["x", "reps"], ["y"])], [x_vi], [y_vi],
                   [onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "reps")])
    x = np.random.default_rng(8).standard_normal((3, 24)).astype(np.float32)
    got = pybuda.run_inference(pybuda.OnnxModule("tile", model), inputs=[(torch.from_numpy(x),)]).get()
    pybuda.shutdown()
    # Default formats: the tile's picker matmul accumulates in Float16_b (bf16's 2**-8 relative step).
    np.testing.assert_allclose(got[0].value().numpy(), ort_run(model, [x])[0], rtol=1e-2, atol=1e-2)


def test_an_empty_slice_joined_by_a_concat_stays_on_the_device():
    # Phi-3 with its whole head dim rotary: q[..., 16:] of a 16-wide q is empty and concatenated back. The empty
    # Slice went to the host ("zero-size tensors"), taking half the model with it; a zero-size value is now a
    # constant of its shape, which the Concat drops.
    x = np.random.default_rng(9).standard_normal((2, 3, 16)).astype(np.float32)
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["empty"]), helper.make_node("Neg", ["x"], ["n"]),
             helper.make_node("Concat", ["n", "empty"], ["y"], axis=-1)]
    inits = [onnx.numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("s", 16), ("e", 2 ** 62), ("a", -1))]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 16])], inits)
    cap = import_model(model, x)
    assert not cap.report.has_fallback, str(cap.report)
    np.testing.assert_array_equal(cap.run(x)[0].numpy(), -x)


def _beam_step_model():
    """A beam search step as torch.onnx.export writes it: TopK over the flat beam x vocab scores, the beam by torch's
    floor division (integer Div, truncating, with Mod / Less / Xor / Not / And / Where fixing negative quotients),
    the token by Mod, the surviving beams' states by GatherElements along axis 1."""
    beams, vocab, d = 3, 11, 8
    i64 = lambda name, v: onnx.numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Flatten", ["scores"], ["flat"], axis=1),
        helper.make_node("TopK", ["flat", "k"], ["top", "idx"], axis=-1),
        helper.make_node("Div", ["idx", "vocab"], ["q"]),
        helper.make_node("Less", ["idx", "zero"], ["neg_x"]),
        helper.make_node("Xor", ["neg_x", "neg_d"], ["signs"]),
        helper.make_node("Mod", ["idx", "vocab"], ["rest"], fmod=0),
        helper.make_node("Equal", ["rest", "zero"], ["exact"]),
        helper.make_node("Not", ["exact"], ["inexact"]),
        helper.make_node("And", ["signs", "inexact"], ["fix"]),
        helper.make_node("Sub", ["q", "one"], ["q1"]),
        helper.make_node("Where", ["fix", "q1", "q"], ["beam"]),
        helper.make_node("Mod", ["idx", "vocab"], ["token"], fmod=0),
        helper.make_node("Unsqueeze", ["beam", "last"], ["beam3"]),
        helper.make_node("Expand", ["beam3", "state_shape"], ["beam_idx"]),
        helper.make_node("GatherElements", ["h", "beam_idx"], ["states"], axis=1),
        helper.make_node("Cast", ["token"], ["token_f"], to=TensorProto.FLOAT),
    ]
    inits = [i64("k", [beams]), i64("vocab", vocab), i64("zero", 0), i64("one", 1), i64("last", [2]),
             i64("state_shape", [2, beams, d]),
             onnx.numpy_helper.from_array(np.array(False), "neg_d")]
    model = _model(nodes, [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, beams, vocab]),
                           helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, beams, d])],
                   [helper.make_tensor_value_info("top", TensorProto.FLOAT, [2, beams]),
                    helper.make_tensor_value_info("token_f", TensorProto.FLOAT, [2, beams]),
                    helper.make_tensor_value_info("states", TensorProto.FLOAT, [2, beams, d])], inits)
    return model


def test_a_beam_search_step_runs_on_the_device():
    # The integer Div and Mod by constants are counts of reached multiples, the Where's condition is decided by the
    # ranges (a TopK index is never negative), so GatherElements along axis 1 reads indices proven in range.
    model = _beam_step_model()
    g = np.random.default_rng(3)
    scores, h = g.standard_normal((2, 3, 11)).astype(np.float32), g.standard_normal((2, 3, 8)).astype(np.float32)
    cap = import_model(model, scores, h)
    assert not cap.report.has_fallback, str(cap.report)
    for got, want in zip(cap.run(scores, h), ort_run(model, [scores, h])):
        assert_close(got.numpy(), want)


@pytest.mark.parametrize("direction,layout,before", [("bidirectional", 0, 1), ("reverse", 1, 0), ("forward", 0, 0)])
def test_gru_is_unrolled_on_the_device(direction, layout, before):
    # nn.GRU exports as one GRU node (linear_before_reset 1), which ran on the host, as LSTM did.
    _recurrent_node_on_the_device("GRU", 3, ["h0"], direction=direction, layout=layout, linear_before_reset=before)


def _recurrent_node_on_the_device(op, gates, states, **attrs):
    """One ``op`` node (LSTM / GRU, ``gates`` per direction) with constant weights and run-time initial ``states``
    runs wholly on the device and matches ONNX Runtime (onnx.reference for batch-first, which ORT lacks)."""
    rng = np.random.default_rng(5)
    seq, batch, feat, hid = 4, 2, 6, 5
    dirs, layout = (2 if attrs["direction"] == "bidirectional" else 1), attrs["layout"]
    x_shape = [batch, seq, feat] if layout else [seq, batch, feat]
    s_shape = [batch, dirs, hid] if layout else [dirs, batch, hid]
    y_shape = [batch, seq, dirs, hid] if layout else [seq, dirs, batch, hid]
    inits = [onnx.numpy_helper.from_array((0.4 * rng.standard_normal(s)).astype(np.float32), n)
             for n, s in (("W", (dirs, gates * hid, feat)), ("R", (dirs, gates * hid, hid)), ("B", (dirs, 2 * gates * hid)))]
    outs = ["y"] + [f"y{s[0]}" for s in states]
    node = helper.make_node(op, ["x", "W", "R", "B", ""] + states, outs, hidden_size=hid, **attrs)
    model = _model([node], [helper.make_tensor_value_info(n, TensorProto.FLOAT, x_shape if n == "x" else s_shape)
                            for n in ["x"] + states],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, y_shape if n == "y" else s_shape) for n in outs],
                   inits)
    feeds = [rng.standard_normal(x_shape).astype(np.float32)] + [rng.standard_normal(s_shape).astype(np.float32)
                                                                 for _ in states]
    gots, report = _on_device(model, *feeds)
    assert not report.has_fallback, str(report)
    wants = (ReferenceEvaluator(model).run(None, dict(zip(["x"] + states, feeds))) if layout
             else ort_run(model, feeds))
    for got, want in zip(gots, wants):
        assert_close(got, want, rtol=1e-3, atol=1e-3)
