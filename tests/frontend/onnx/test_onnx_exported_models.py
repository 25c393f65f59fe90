"""Mechanisms found by ``tools/onnx_model_sweep.py`` (models exported with ``torch.onnx.export``), each as a
small ONNX graph built with onnx.helper."""

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnx_helpers import assert_close, ort_run
from pybuda.frontend.onnx import import_model


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
