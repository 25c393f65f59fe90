"""What the TF-family module wrappers (``pybuda.module.TFModule`` / ``TFGraphDefModule`` / ``TFLiteModule``)
share: one ONNX conversion per input signature, then the ONNX importer."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

import numpy as np
import torch

from pybuda.frontend.tensorflow.convert import signature_key, to_numpy
from pybuda.tensor import Parameter


def cached_onnx(cache: Dict[tuple, Any], samples: Sequence[Any], convert: Callable[[], Any], keyed: bool = True):
    """The converted ``onnx.ModelProto`` for the samples' signature (``keyed=False``: one for all)."""
    key = signature_key(samples) if keyed else ()
    if key not in cache:
        cache[key] = convert()
    return cache[key]


def import_converted(proto: Any, samples: Sequence[Any], graph_name: str, config: Any = None,
                     for_device: bool = True, **kwargs: Any):
    """Import a converted model onto the registry: an :class:`~pybuda.frontend.onnx.OnnxCapture`."""
    from pybuda.frontend.onnx import import_model

    arrays = [to_numpy(s) for s in samples]
    return import_model(proto, *arrays, name=graph_name, config=config, for_device=for_device, **kwargs)


def onnx_parameters(proto: Any) -> List[Parameter]:
    """The float initializers of a converted model as Parameters (``requires_grad=False``)."""
    from onnx import numpy_helper

    out = []
    for t in proto.graph.initializer:
        value = torch.from_numpy(np.array(numpy_helper.to_array(t), copy=True))
        if value.dtype.is_floating_point:
            out.append(Parameter(value, requires_grad=False, name=t.name))
    return out


def variable_parameters(variables: Sequence[Any]) -> List[Parameter]:
    """Keras / TF variables as Parameters, named by their path (``dense/kernel``), trainable as declared."""
    out = []
    seen = set()
    for v in variables:
        name = getattr(v, "path", None) or v.name
        name = name[:-2] if name.endswith(":0") else name
        if name in seen:
            continue
        seen.add(name)
        value = torch.from_numpy(np.array(v.numpy(), copy=True))
        trainable = bool(getattr(v, "trainable", False)) and value.dtype.is_floating_point
        out.append(Parameter(value, requires_grad=trainable, name=name))
    return out


def graph_def_parameters(graph_def: Any, who: str = "TFGraphDefModule") -> List[Parameter]:
    """The float constants of a frozen GraphDef (its folded weights) as Parameters (``requires_grad=False``)."""
    from pybuda.frontend.tensorflow.convert import require_tensorflow

    tf = require_tensorflow(who)
    out = []
    for node in graph_def.node:
        if node.op != "Const" or "value" not in node.attr:
            continue
        arr = tf.make_ndarray(node.attr["value"].tensor)
        if arr.dtype.kind == "f" and arr.ndim > 0:
            out.append(Parameter(torch.from_numpy(np.array(arr, copy=True)), requires_grad=False, name=node.name))
    return out

