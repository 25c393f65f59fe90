"""Loading and preparing ONNX models: parse, check, upgrade to opset 13+, bind dynamic dims, infer shapes.

Every problem with the model itself (bad protobuf, failed checker, missing input shape, unknown opset)
becomes a :class:`~pybuda.errors.ModuleError` or :class:`~pybuda.errors.InputError` naming the model.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import InputError, ModuleError

try:  # the frontend needs the `onnx` package; say which extra provides it
    import onnx
    from onnx import helper, numpy_helper, shape_inference
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ModuleError("the ONNX frontend needs the 'onnx' package: pip install 'pybuda[onnx]'") from e

#: Oldest default-domain opset the importer reads natively; older models go through the version converter.
MIN_OPSET = 13


def load(model_or_path: Any, name: str = "model") -> "onnx.ModelProto":
    """A ModelProto from a ModelProto, a path, or serialized bytes; raises ModuleError when it is not one."""
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model_or_path))
        except Exception as e:  # protobuf's DecodeError and friends
            raise ModuleError(f"ONNX model '{name}': the bytes are not a valid ONNX model ({e})") from None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if not os.path.isfile(path):
            raise ModuleError(f"ONNX model '{name}': no such file {path!r}")
        try:
            return onnx.load(path)
        except Exception as e:
            raise ModuleError(f"ONNX model '{name}': {path!r} is not a valid ONNX model ({e})") from None
    raise ModuleError(f"ONNX model '{name}': expected an onnx.ModelProto or a path, got {type(model_or_path).__name__}")


def default_opset(model: "onnx.ModelProto") -> int:
    """The model's default-domain (ai.onnx) opset version."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    raise ModuleError(f"ONNX model '{model.graph.name}' imports no default-domain (ai.onnx) opset")


def check_and_upgrade(model: "onnx.ModelProto", name: str) -> "onnx.ModelProto":
    """Run the ONNX checker and convert models older than opset 13 with onnx.version_converter."""
    if len(model.graph.node) == 0 and len(model.graph.output) == 0:
        raise ModuleError(f"ONNX model '{name}' has an empty graph (no nodes, no outputs)")
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModuleError(f"ONNX model '{name}' fails the ONNX checker: {str(e).strip().splitlines()[0]}") from None
    converted, why = _converted(model)
    if why is not None:
        raise ModuleError(f"ONNX model '{name}' uses opset {default_opset(model)}; converting it to opset {MIN_OPSET} "
                          f"{why}; re-export it with opset >= {MIN_OPSET}")
    return converted


def conversion_problem(model: "onnx.ModelProto") -> Optional[str]:
    """Why ``model`` (older than opset 13) cannot be converted to opset 13 as the same function (None when it
    can, or needs no conversion): the converter fails, or it rewrites the model's interface (opset 8's Scan
    loses its batch axis, for one) so that the result is another function."""
    return _converted(model)[1]


def _converted(model: "onnx.ModelProto") -> Tuple["onnx.ModelProto", Optional[str]]:
    if default_opset(model) >= MIN_OPSET:
        return model, None
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:
        return model, f"failed ({str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__})"
    for what, old, new in (("input", model.graph.input, converted.graph.input),
                           ("output", model.graph.output, converted.graph.output)):
        new_by_name = {v.name: v for v in new}
        for v in old:
            if v.name not in new_by_name or not _same_type(v.type, new_by_name[v.name].type):
                return model, f"changes graph {what} '{v.name}'"
    return converted, None


def _same_type(a: "onnx.TypeProto", b: "onnx.TypeProto") -> bool:
    """Same kind, element type and (where ``a`` declares one) shape."""
    if a.WhichOneof("value") != b.WhichOneof("value"):
        return False
    if not a.HasField("tensor_type"):
        return a == b
    ta, tb = a.tensor_type, b.tensor_type
    if ta.elem_type != tb.elem_type:
        return False
    return not ta.HasField("shape") or (tb.HasField("shape") and list(ta.shape.dim) == list(tb.shape.dim))


def graph_inputs(model: "onnx.ModelProto") -> List["onnx.ValueInfoProto"]:
    """The real inputs (graph inputs that are not initializers, which old exporters also list)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def np_dtype(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX TensorProto element type."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def torch_dtype(elem_type: int) -> Optional[torch.dtype]:
    """torch dtype of an ONNX element type (None when torch has none, e.g. strings)."""
    try:
        dt = np_dtype(elem_type)
        return torch.from_numpy(np.zeros((), dtype=dt)).dtype
    except Exception:
        return None


def bind_inputs(model: "onnx.ModelProto", samples: Sequence[np.ndarray], name: str) -> "onnx.ModelProto":
    """A copy of ``model`` whose inputs have the samples' static shapes (dynamic dims bound), checked
    against the declared shapes and element types; raises InputError naming the input."""
    inputs = graph_inputs(model)
    if len(samples) != len(inputs):
        raise InputError(f"ONNX model '{name}' takes {len(inputs)} input(s) {[i.name for i in inputs]}, "
                         f"got {len(samples)}")
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    by_name = {i.name: i for i in bound.graph.input}
    for vi, sample in zip(inputs, samples):
        t = vi.type
        if not t.HasField("tensor_type"):
            raise InputError(f"ONNX model '{name}': input '{vi.name}' is not a tensor (sequences, maps and optionals "
                             f"are not supported)")
        want = np_dtype(t.tensor_type.elem_type) if t.tensor_type.elem_type else None
        if want is not None and sample.dtype != want:
            raise InputError(f"ONNX model '{name}': input '{vi.name}' has element type {want}, got {sample.dtype}")
        if t.tensor_type.HasField("shape"):
            dims = t.tensor_type.shape.dim
            if len(dims) != sample.ndim:
                raise InputError(f"ONNX model '{name}': input '{vi.name}' has rank {len(dims)}, got a sample of shape "
                                 f"{list(sample.shape)}")
            for k, (d, s) in enumerate(zip(dims, sample.shape)):
                if d.HasField("dim_value") and d.dim_value != s:
                    raise InputError(f"ONNX model '{name}': input '{vi.name}' dim {k} is {d.dim_value}, got a "
                                     f"sample of shape {list(sample.shape)}")
        target = by_name[vi.name].type.tensor_type
        if not target.elem_type:
            target.elem_type = helper.np_dtype_to_tensor_dtype(sample.dtype)
        target.ClearField("shape")
        target.shape.SetInParent()
        for s in sample.shape:
            target.shape.dim.add().dim_value = int(s)
    return bound


def require_input_shapes(model: "onnx.ModelProto", name: str) -> None:
    """Raise ModuleError when an input declares no shape and no element type (nothing to bind it from)."""
    for vi in graph_inputs(model):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape"):
            raise ModuleError(f"ONNX model '{name}': input '{vi.name}' declares no shape; give every input a "
                              f"shape (symbolic dims are fine) when exporting")


def infer_shapes(model: "onnx.ModelProto", name: str) -> Dict[str, Tuple[Tuple[int, ...], int]]:
    """ONNX shape inference (with data propagation): ``{value name: (static shape, elem type)}`` for the
    values whose shape is fully known."""
    try:
        inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=False, data_prop=True)
    except Exception as e:
        raise ModuleError(f"ONNX model '{name}': shape inference failed: {str(e).strip().splitlines()[0]}") from None
    out: Dict[str, Tuple[Tuple[int, ...], int]] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if any(d is None for d in dims):
            continue
        out[vi.name] = (tuple(int(d) for d in dims), int(tt.elem_type))
    for t in g.initializer:
        out[t.name] = (tuple(int(d) for d in t.dims), int(t.data_type))
    return out


def value_types(model: "onnx.ModelProto") -> Dict[str, int]:
    """Element type of every tensor value shape inference could type (shape may be unknown)."""
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        inferred = model
    g = inferred.graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = int(vi.type.tensor_type.elem_type)
    return out


def probe(model: "onnx.ModelProto", feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Run the model in ONNX Runtime with every typed intermediate value as an extra output: the concrete
    value of each for the sample. Returns {} when ONNX Runtime cannot run the model."""
    import onnxruntime as ort

    types = value_types(model)
    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    have = {o.name for o in probed.graph.output}
    for node in probed.graph.node:
        for out in node.output:
            if out and out not in have and out in types:
                probed.graph.output.append(helper.make_tensor_value_info(out, types[out], None))
                have.add(out)
    try:
        sess = ort.InferenceSession(probed.SerializeToString(), _session_options(),
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(names, dict(feeds))
    except Exception:
        return {}
    out = dict(feeds)
    out.update({n: v for n, v in zip(names, values) if isinstance(v, np.ndarray)})
    return out


def _session_options():
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return opts


def session(model: "onnx.ModelProto"):
    """An ONNX Runtime CPU session for ``model`` (quiet, single-threaded per op)."""
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), _session_options(), providers=["CPUExecutionProvider"])


def initializer_values(model: "onnx.ModelProto") -> Dict[str, np.ndarray]:
    """The model's initializers as numpy arrays (external data must have been loaded)."""
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
