"""CPU fallback stages of an imported ONNX model: ONNX subgraphs run by ONNX Runtime.

An :class:`OnnxStage` holds a small ``onnx.ModelProto`` built with ``onnx.helper`` from the host nodes
(in model order), the constants and initializers they read, and typed inputs/outputs. Called with torch
tensors it returns a tuple of torch tensors, as the torch frontend's FX stages do. It holds no Python
code of the model: the serialized model is the whole stage (a device image stores exactly those bytes).

Which runtime runs a stage: ONNX Runtime (CPU), unless it cannot (an op or an opset it has no kernel
for, an ONNX domain it lacks, a failure while running); then ONNX's own reference implementation
(``onnx.reference``) runs the stage. Stages whose nodes draw random numbers with a given ``seed``
(training-mode Dropout, RandomNormal, Bernoulli ...) also go to the reference implementation: it draws
from numpy's generator seeded by the node, so the values are ONNX's own, where ONNX Runtime's generator
would give other (equally valid) masks. So do stages with a Fourier transform (:data:`PRECISE_IN_REFERENCE`):
the reference sums in float64 where ONNX Runtime sums in float32. And so do stages with an op whose ONNX
Runtime kernel reads the ONNX definition otherwise than ONNX's reference implementation and node cases
(:data:`DEFINED_BY_REFERENCE`).
"""

from __future__ import annotations

import logging
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import InputError, RuntimeFailure
from pybuda.frontend.onnx import model as onnx_model
from pybuda.frontend.onnx.model import helper, numpy_helper, onnx

log = logging.getLogger(__name__)


#: Ops that draw random numbers: a stage holding one with a ``seed`` runs in the ONNX reference runtime.
RANDOM_OPS = frozenset({"Dropout", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                        "Bernoulli", "Multinomial"})

#: Ops whose ONNX Runtime kernels lose precision the reference runtime keeps: the Fourier transforms sum in
#: float32 there (errors of ~1e-4 of the signal where the exact value is 0), in float64 in ``onnx.reference``.
PRECISE_IN_REFERENCE = frozenset({"DFT", "STFT"})

#: Ops whose ONNX Runtime kernel disagrees with ONNX's reference implementation (and ONNX's node cases) on what
#: the op computes: MaxUnpool with an ``output_shape`` scatters its indices over the default unpooled shape
#: and pads that to ``output_shape`` in the reference, where ONNX Runtime reads them as positions in
#: ``output_shape``. pybuda follows ONNX's own reading.
DEFINED_BY_REFERENCE = frozenset({"MaxUnpool"})

ORT, REFERENCE = "onnxruntime", "onnx-reference"


class OnnxStage:
    """``stage(*tensors) -> tuple`` of tensors, computed on the CPU by ONNX Runtime (or, for what it
    cannot run, by ONNX's reference implementation).

    ``input_dtypes`` holds one numpy dtype per stage input (inputs are converted to it), or None for an
    input passed as given (sequences, optionals)."""

    def __init__(self, name: str, model: "onnx.ModelProto", input_dtypes: Sequence[Optional[np.dtype]],
                 initializers: Sequence[str] = ()):
        self.name = name
        self.model_bytes = model.SerializeToString()
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self.output_dtypes = [helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)
                              if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type else None
                              for o in model.graph.output]
        self.input_dtypes = list(input_dtypes)
        self.output_shapes = [_static_shape(o) for o in model.graph.output]
        self.initializers = list(initializers)  # original initializer/constant names the stage holds
        self.node_count = len(model.graph.node)
        self.op_types = sorted({n.op_type for n in model.graph.node})
        in_reference = PRECISE_IN_REFERENCE | DEFINED_BY_REFERENCE
        self.runtime: Optional[str] = (REFERENCE if _draws_seeded_random(model) or
                                       in_reference.intersection(self.op_types) else None)
        self._session = None  # ONNX Runtime's
        self._reference = None  # onnx.reference's

    @classmethod
    def from_model(cls, name: str, model: "onnx.ModelProto") -> "OnnxStage":
        """A stage running all of ``model`` (inputs converted to their declared element types)."""
        inits = {t.name for t in model.graph.initializer}
        dtypes = []
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            dtypes.append(helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt is not None and tt.elem_type else None)
        return cls(name, model, dtypes, sorted(inits))

    @classmethod
    def from_bytes(cls, name: str, model_bytes: bytes) -> "OnnxStage":
        """A stage from its serialized ONNX model (e.g. read from a device image). ValueError when the bytes
        are not a valid, self-contained ONNX model: it must pass the ONNX checker and hold its initializers
        inline (external-data references would read files outside the image)."""
        try:
            model = onnx.load_from_string(bytes(model_bytes))
        except Exception as e:
            raise ValueError(f"not an ONNX model ({_first_line(e)})") from None
        for t in model.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
                raise ValueError(f"initializer '{t.name}' refers to external data")
        try:
            onnx.checker.check_model(model)
        except Exception as e:
            raise ValueError(f"fails the ONNX checker ({_first_line(e)})") from None
        return cls.from_model(name, model)

    @property
    def model(self) -> "onnx.ModelProto":
        """The stage as an ONNX model."""
        return onnx.load_from_string(self.model_bytes)

    def __call__(self, *tensors: Any) -> Tuple[torch.Tensor, ...]:
        if len(tensors) != len(self.input_names):
            raise InputError(f"CPU stage '{self.name}' takes {len(self.input_names)} input(s), got {len(tensors)}")
        feeds = {}
        for n, t, dt in zip(self.input_names, tensors, self.input_dtypes):
            if isinstance(t, torch.Tensor):
                t = t.detach().cpu().numpy()
            if dt is None or isinstance(t, (list, tuple)) or t is None:
                feeds[n] = t  # a sequence or optional value, passed as given
                continue
            a = np.asarray(t)
            feeds[n] = a.astype(dt, copy=False) if a.dtype != dt else a
        outs = self._run(feeds)
        return tuple(_from_numpy(o) if isinstance(o, np.ndarray) else o for o in outs)

    def _run(self, feeds: Dict[str, Any]) -> List[Any]:
        if self.runtime != REFERENCE:
            try:
                if self._session is None:
                    self._session = onnx_model.session(self.model)
                outs = self._session.run(self.output_names, feeds)
                self.runtime = ORT
                return [_typed(o, dt) for o, dt in zip(outs, self.output_dtypes)]
            except Exception as e:  # no kernel for an op/opset, an unknown domain, a failing kernel
                if self.runtime == ORT:  # it ran before: a failure on these inputs
                    raise RuntimeFailure(f"CPU stage '{self.name}' failed in ONNX Runtime: {_first_line(e)}") from None
                log.debug("ONNX Runtime cannot run CPU stage '%s' (%s); using the ONNX reference runtime",
                          self.name, _first_line(e))
                self.runtime = REFERENCE
        from onnx.reference import ReferenceEvaluator

        try:
            if self._reference is None:
                self._reference = ReferenceEvaluator(self.model)
            outs = list(self._reference.run(self.output_names, feeds))
        except Exception as e:
            raise RuntimeFailure(f"CPU stage '{self.name}' ({', '.join(self.op_types)}) runs neither in ONNX Runtime "
                                 f"nor in the ONNX reference runtime: {_first_line(e)}") from None
        # onnx.reference's Loop stacks scalar scan outputs as [n, 1] where ONNX (and the model) declare [n]: an
        # output holding exactly its declared static shape's elements takes that shape.
        return [o.reshape(shape) if isinstance(o, np.ndarray) and shape is not None and o.shape != shape
                and o.size == int(np.prod(shape)) else o for o, shape in zip(outs, self.output_shapes)]

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_session"] = state["_reference"] = None
        return state

    def __repr__(self) -> str:
        return f"OnnxStage({self.name!r}, {self.node_count} node(s), inputs {self.input_names}, outputs {self.output_names})"


def build_stage(imp: Any, node_idx: Sequence[int], inputs: Sequence[str], outputs: Sequence[str],
                consts: Mapping[str, Any], name: str, lead: Collection[str] = ()) -> OnnxStage:
    """An OnnxStage running nodes ``node_idx`` of the importer's model: ``inputs`` -> ``outputs``; outputs in
    ``lead`` get a leading dim of 1 (the importer's ``_not_batch_first``)."""
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
        shape, dtype = imp.info.get(v, (None, None))
        et = imp.elem.get(v) or _elem_type(dtype)
        vis_in.append(helper.make_tensor_value_info(v, et, list(shape) if shape is not None else None))
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
        et = imp.elem.get(v) or (_elem_type(info[1]) if info and info[1] is not None else onnx.TensorProto.FLOAT)
        shape = list(info[0]) if info and info[0] is not None else None
        if v in lead:
            src, out_name = out_name, f"{v}__stage_lead_{k}"  # the value, or the Identity that renamed it
            opset = next((o.version for o in imp.model.opset_import if o.domain in ("", "ai.onnx")), 13)
            if opset >= 13:  # axes became an input in opset 13
                axes = f"{out_name}__axes"
                inits[axes] = np.array([0], dtype=np.int64)
                extra.append(helper.make_node("Unsqueeze", [src, axes], [out_name]))
            else:
                extra.append(helper.make_node("Unsqueeze", [src], [out_name], axes=[0]))
            shape = [1] + (shape or [])
        vis_out.append(helper.make_tensor_value_info(out_name, et, shape or None))
    graph = helper.make_graph(list(nodes) + extra, name, vis_in, vis_out,
                              [numpy_helper.from_array(np.asarray(a), k) for k, a in inits.items()])
    model = helper.make_model(graph, opset_imports=list(imp.model.opset_import), ir_version=imp.model.ir_version)
    return OnnxStage(name, model, dtypes, list(inits))


def _static_shape(vi: "onnx.ValueInfoProto") -> Optional[Tuple[int, ...]]:
    """A graph value's declared shape when every dim is a number (None otherwise)."""
    t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if t is None or not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim):
        return None
    return tuple(int(d.dim_value) for d in t.shape.dim)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _draws_seeded_random(model: "onnx.ModelProto") -> bool:
    """True when a node draws random numbers from a given seed (Dropout: in training mode, whose values
    the reference runtime and ONNX Runtime draw differently)."""
    for node in model.graph.node:
        if node.op_type not in RANDOM_OPS:
            continue
        if node.op_type == "Dropout" and len(node.input) < 3:
            continue  # inference mode: an identity everywhere
        if any(a.name == "seed" for a in node.attribute):
            return True
    return False


def _elem_type(dtype: torch.dtype) -> int:
    np_dt = torch.empty((), dtype=dtype).numpy().dtype
    return helper.np_dtype_to_tensor_dtype(np_dt)


def _typed(a: Any, dtype: Optional[np.dtype]) -> Any:
    """ONNX Runtime hands float8/int4 results over as their raw bytes (uint8): view them as the declared
    ml_dtypes type, so the values are the numbers they encode."""
    if (isinstance(a, np.ndarray) and dtype is not None and a.dtype != dtype and np.dtype(dtype).isbuiltin != 1
            and a.dtype.kind == "u" and a.dtype.itemsize == np.dtype(dtype).itemsize):
        return a.view(dtype)
    return a


def _from_numpy(a: np.ndarray) -> Any:
    """A torch tensor, or the array itself for element types torch lacks or would misread: ml_dtypes'
    bfloat16/float8/int4 (numpy 'V' kinds, which torch.from_numpy takes as raw bytes), strings, objects."""
    if a.dtype.kind not in "biuf" or a.dtype.isbuiltin != 1:
        return a
    try:
        return torch.from_numpy(np.array(a, copy=True))
    except TypeError:
        return a
