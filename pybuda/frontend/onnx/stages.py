"""CPU fallback stages of an imported ONNX model: ONNX subgraphs run by ONNX Runtime.

An :class:`OnnxStage` holds a small ``onnx.ModelProto`` built with ``onnx.helper`` from the host nodes
(in model order), the constants and initializers they read, and typed inputs/outputs. Called with torch
tensors it returns a tuple of torch tensors, as the torch frontend's FX stages do. It holds no Python
code of the model: the serialized model is the whole stage.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import InputError
from pybuda.frontend.onnx import model as onnx_model
from pybuda.frontend.onnx.model import helper, numpy_helper, onnx


class OnnxStage:
    """``stage(*tensors) -> tuple`` of tensors, computed by ONNX Runtime on the CPU."""

    def __init__(self, name: str, model: "onnx.ModelProto", input_dtypes: Sequence[np.dtype],
                 initializers: Sequence[str]):
        self.name = name
        self.model_bytes = model.SerializeToString()
        self.input_names = [i.name for i in model.graph.input]
        self.output_names = [o.name for o in model.graph.output]
        self.input_dtypes = list(input_dtypes)
        self.initializers = list(initializers)  # original initializer/constant names the stage holds
        self.node_count = len(model.graph.node)
        self._session = None

    @property
    def model(self) -> "onnx.ModelProto":
        """The stage as an ONNX model."""
        return onnx.load_from_string(self.model_bytes)

    def __call__(self, *tensors: Any) -> Tuple[torch.Tensor, ...]:
        if len(tensors) != len(self.input_names):
            raise InputError(f"CPU stage '{self.name}' takes {len(self.input_names)} input(s), got {len(tensors)}")
        if self._session is None:
            self._session = onnx_model.session(self.model)
        feeds = {}
        for n, t, dt in zip(self.input_names, tensors, self.input_dtypes):
            a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
            feeds[n] = a.astype(dt, copy=False) if a.dtype != dt else a
        outs = self._session.run(self.output_names, feeds)
        return tuple(_from_numpy(o) for o in outs)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_session"] = None
        return state

    def __repr__(self) -> str:
        return f"OnnxStage({self.name!r}, {self.node_count} node(s), inputs {self.input_names}, outputs {self.output_names})"


def build_stage(imp: Any, node_idx: Sequence[int], inputs: Sequence[str], outputs: Sequence[str],
                consts: Mapping[str, Any], name: str) -> OnnxStage:
    """An OnnxStage running nodes ``node_idx`` of the importer's model: ``inputs`` -> ``outputs``."""
    nodes = [imp.nodes[i] for i in node_idx]
    produced = {o for n in nodes for o in n.output if o}
    in_set = set(inputs)
    inits: Dict[str, np.ndarray] = {}

    def need(v: str) -> None:
        if not v or v in produced or v in in_set or v in inits:
            return
        if v in imp.inits:
            inits[v] = imp.inits[v]
        elif v in consts:
            inits[v] = consts[v].value.numpy()
        elif v in imp.bind:
            inits[v] = imp.feeds[v]

    for n in nodes:
        for v in n.input:
            need(v)
        for a in n.attribute:  # outer-scope values read by subgraphs (If/Loop/Scan bodies)
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                for sub in g.node:
                    for v in sub.input:
                        need(v)
    vis_in = []
    dtypes = []
    for v in inputs:
        shape, dtype = imp.info[v]
        et = _elem_type(dtype)
        vis_in.append(helper.make_tensor_value_info(v, et, list(shape)))
        dtypes.append(helper.tensor_dtype_to_np_dtype(et))
    extra: List["onnx.NodeProto"] = []
    vis_out = []
    seen_out = set()
    for k, v in enumerate(outputs):
        out_name = v
        if v in in_set or v in inits or v in seen_out or v not in produced:
            out_name = f"{v}__stage_out_{k}"
            if v not in produced and v not in in_set:
                need(v)
            extra.append(helper.make_node("Identity", [v], [out_name]))
        seen_out.add(v)
        info = imp.info.get(v)
        et = _elem_type(info[1]) if info and info[1] is not None else onnx.TensorProto.FLOAT
        vis_out.append(helper.make_tensor_value_info(out_name, et, list(info[0]) if info and info[0] else None))
    graph = helper.make_graph(list(nodes) + extra, name, vis_in, vis_out,
                              [numpy_helper.from_array(np.asarray(a), k) for k, a in inits.items()])
    model = helper.make_model(graph, opset_imports=list(imp.model.opset_import), ir_version=imp.model.ir_version)
    return OnnxStage(name, model, dtypes, list(inits))


def _elem_type(dtype: torch.dtype) -> int:
    np_dt = torch.empty((), dtype=dtype).numpy().dtype
    return helper.np_dtype_to_tensor_dtype(np_dt)


def _from_numpy(a: np.ndarray) -> Any:
    """A torch tensor, or the array itself for element types torch lacks (bfloat16 from ml_dtypes, float8 ...)."""
    try:
        return torch.from_numpy(np.array(a, copy=True))
    except TypeError:
        return a
