"""Shared helpers of the ONNX frontend tests: single-node models, ONNX Runtime references, PCC checks."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper

from pybuda.verify import calculate_pcc

#: Tolerances of the Float32 golden device against ONNX Runtime.
PCC_MIN = 0.99
RTOL = 1e-4
ATOL = 1e-4


def single_node_model(op_type: str, inputs: Dict[str, np.ndarray], outputs: Sequence[str] = ("y",),
                      opset: int = 17, initializers: Optional[Dict[str, np.ndarray]] = None,
                      **attrs) -> onnx.ModelProto:
    """A one-node model: graph inputs typed and shaped from ``inputs``; initializers are constants."""
    initializers = initializers or {}
    vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in inputs.items()]
    names = list(inputs) + list(initializers)
    node = helper.make_node(op_type, names, list(outputs), **attrs)
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in initializers.items()]
    graph = helper.make_graph([node], f"{op_type.lower()}_test", vis,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    model.graph.output.extend(known[o] for o in outputs)
    return model


def ort_run(model: onnx.ModelProto, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
    """The model's outputs in ONNX Runtime."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, arrays)))


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> None:
    """Shape and dtype equal, PCC >= PCC_MIN (for float data with spread) and allclose."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind == "f" and want.size > 1 and float(np.std(want)) > 0:
        pcc = calculate_pcc(torch.from_numpy(got.astype(np.float32)), torch.from_numpy(want.astype(np.float32)))
        assert pcc >= PCC_MIN, f"PCC {pcc:.5f} < {PCC_MIN}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def load_node_cases(names: Sequence[str]) -> Dict[str, object]:
    """ONNX's own backend node test cases (``onnx.backend.test.case.node``) named ``names``, built in memory."""
    import warnings

    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in load_model_tests(kind="node") if c.name in set(names)}


def run_node_case(case, on_device: bool) -> None:
    """Run node case ``case`` through pybuda's ONNX backend and compare with its expected outputs (ONNX's runner,
    the case's own tolerances); ``on_device``: it must also be registry-mappable and have no host node."""
    import warnings

    from onnx.backend.test.runner import Runner, _normalize_tensor

    from pybuda.frontend.onnx.backend import PybudaBackend
    from pybuda.frontend.onnx.coverage import device_mappable

    inputs, outputs = case.data_sets[0]
    inputs = [_normalize_tensor(i) for i in inputs]
    if on_device:
        assert device_mappable(case.model, inputs) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = PybudaBackend.prepare(case.model)
        got = rep.run(inputs)
    if on_device:
        assert not rep.report.has_fallback, [(f.aten_op, f.reason) for f in rep.report.fallback_ops]
    Runner.assert_similar_outputs([_normalize_tensor(o) for o in outputs], list(got), rtol=case.rtol, atol=case.atol)
