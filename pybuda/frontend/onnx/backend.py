"""ONNX's backend interface (``onnx.backend.base.Backend``) on pybuda's golden device at Float32.

``prepare(model)`` checks the model and returns a :class:`PybudaBackendRep`; its ``run(inputs)`` imports
the model for the inputs' shapes (:func:`pybuda.frontend.onnx.import_model`), compiles the device graph
for the golden device with every data format forced to Float32, and runs CPU pre -> device -> CPU post
(host nodes by ONNX Runtime, as the importer's fallback decides). Compiled models are cached per input
signature. Integer inputs are specialised: their values become constants of the compiled model (shapes,
axes and indices are static on the chip), so a new value means a new compile.

A node the compiler cannot compile for the device (its CompileError names the node's op) goes to the host
and the model is imported again; an error no node owns, or more than :data:`MAX_COMPILE_RETRIES` of them,
sends the whole model to the host. Models the importer cannot take at all (sequence/optional inputs or
outputs, no ai.onnx opset) run whole on the host (:func:`host_only_reason`). Host stages run in ONNX Runtime,
or in ONNX's reference runtime for what ONNX Runtime lacks (:mod:`.stages`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import CompileError
from pybuda.frontend.onnx import model as onnx_model
from pybuda.frontend.onnx.converter import finite_standins, restore_infinities
from pybuda.frontend.onnx.importer import OnnxCapture, import_model
from pybuda.frontend.fallback import FallbackOp, FallbackReport
from pybuda.frontend.onnx.model import helper, onnx
from pybuda.frontend.onnx.stages import OnnxStage

from onnx.backend.base import Backend, BackendRep, namedtupledict

log = logging.getLogger(__name__)

#: Nodes sent to the host one by one after compile errors before the whole model goes there (each costs
#: one more import and compile).
MAX_COMPILE_RETRIES = 8

#: The card the backend compiles for.
DEFAULT_DEVICE = "wh_n150"


def float32_config(base: Any = None) -> Any:
    """A copy of the compiler config (default: the global one) that keeps every tensor in Float32 with HiFi4."""
    from pybuda.config import _get_global_compiler_config
    from pybuda.dtypes import DataFormat, MathFidelity

    cfg = copy.deepcopy(base if base is not None else _get_global_compiler_config())
    cfg.default_df_override = DataFormat.Float32
    cfg.default_math_fidelity = MathFidelity.HiFi4
    cfg.fp32_fallback = DataFormat.Float32
    # TT-Buda golden default: plain float32 math (data-movement pickers and SFPU approximations aside).
    cfg.golden_ignore_df_precision = True
    if hasattr(cfg, "default_accumulate_df"):
        cfg.default_accumulate_df = DataFormat.Float32
    return cfg


@dataclass
class _Compiled:
    capture: OnnxCapture
    executor: Any


class PybudaBackendRep(BackendRep):
    """A prepared ONNX model: compiled (per input signature) on first run."""

    def __init__(self, model: "onnx.ModelProto", device: str = DEFAULT_DEVICE, config: Any = None):
        self.model = model
        self.device = device
        self.config = float32_config(config)
        self._cache: Dict[Tuple[Any, ...], _Compiled] = {}
        self.last_capture: Optional[OnnxCapture] = None
        self.host_reason = host_only_reason(model)
        self._host_stage: Optional[OnnxStage] = None
        self._host_report: Optional[FallbackReport] = None

    @property
    def report(self):
        """The fallback report of the last compiled signature (None before the first run)."""
        if self._host_report is not None:
            return self._host_report
        return self.last_capture.report if self.last_capture is not None else None

    def _run_on_host(self, inputs: Sequence[Any], reason: Optional[str] = None) -> Tuple[Any, ...]:
        """The whole model in ONNX Runtime (or ONNX's reference runtime): for models the importer cannot
        take at all (see :func:`host_only_reason`), or inputs the device cannot hold (``reason``)."""
        if self._host_stage is None:
            name = self.model.graph.name or "onnx_model"
            self._host_stage = OnnxStage.from_model(f"{name}_cpu", self.model)
            ops = [FallbackOp(n.name or f"{n.op_type.lower()}_{i}", n.op_type, f"onnx node #{i}", reason or self.host_reason, "pre")
                   for i, n in enumerate(self.model.graph.node)]
            self._host_report = FallbackReport(name, True, ops, [f"{o.name} ({o.aten_op})" for o in ops], [], 0)
        values = self._host_stage(*inputs)
        names = [o.name for o in self.model.graph.output]
        dtypes = [onnx_model.np_dtype(o.type.tensor_type.elem_type)
                  if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type else None
                  for o in self.model.graph.output]
        return self._outputs(values, names, dtypes)

    def _key(self, arrays: Sequence[np.ndarray], bound: Sequence[str], names: Sequence[str]) -> Tuple[Any, ...]:
        key: List[Any] = []
        for n, a in zip(names, arrays):
            key.append((a.shape, str(a.dtype), a.tobytes() if n in bound else None))
        return tuple(key)

    def compile(self, arrays: Sequence[np.ndarray]) -> _Compiled:
        """Import and compile for the signature of ``arrays`` (cached)."""
        names = [vi.name for vi in onnx_model.graph_inputs(self.model)]
        bound = specialised_inputs(self.model, arrays)
        key = self._key(arrays, bound, names)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        compiled = self._compile(arrays, bound)
        self._cache[key] = compiled
        return compiled

    def _compile(self, arrays: Sequence[np.ndarray], bound: Sequence[str]) -> _Compiled:
        from pybuda.arch.types import BackendType
        from pybuda.compile import compile_graph
        from pybuda.runtime.backend_api import create_executor

        host_nodes: Dict[str, str] = {}
        while True:
            capture = import_model(self.model, *arrays, config=self.config, for_device=True, bind_inputs=bound,
                                   host_nodes=host_nodes)
            if capture.host is not None:  # nothing for the device: the whole model runs on the host
                return _Compiled(capture, None)
            try:
                results = compile_graph(capture.graph, self.device, self.config)
            except CompileError as e:
                # A node the compiler cannot place or lower goes to the host (ONNX Runtime), and the model is
                # imported again; an error no node owns sends the whole model to the host.
                if not capture.report.enabled:
                    raise
                label = capture.node_of_op(e.op) if e.op else None
                reason = f"the compiler cannot compile it for the device ({_first_line(e)})"
                if label is None or label in host_nodes or len(host_nodes) >= MAX_COMPILE_RETRIES:
                    if len(host_nodes) == len(capture.node_labels):
                        raise
                    host_nodes = {lb: reason for lb in capture.node_labels}
                else:
                    host_nodes[label] = reason
                log.info("ONNX model '%s': node %s goes to the host: %s", capture.graph.name, label or "(all)", reason)
                continue
            executor = create_executor(BackendType.Golden, results, graph=capture.graph)
            return _Compiled(capture, executor)

    def run(self, inputs: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """Run the model on ``inputs`` (a list of arrays in graph-input order, a dict by name, or one array)."""
        names = [vi.name for vi in onnx_model.graph_inputs(self.model)]
        if isinstance(inputs, dict):
            inputs = [inputs[n] for n in names]
        elif isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if self.host_reason is not None:
            return self._run_on_host(list(inputs))
        arrays = [np.asarray(a) for a in inputs]
        if any(a.dtype == np.float16 and np.isinf(a).any() for a in arrays):
            # float16's stand-in for infinity (converter.INF_STANDIN_FP16) is a value float16 data can hold, so
            # an infinite float16 input would come back as a finite number: ONNX Runtime runs this call.
            return self._run_on_host(list(inputs), "a float16 input holds an infinity")
        compiled = self.compile(arrays)
        self.last_capture = compiled.capture
        cap = compiled.capture
        flat = cap.flatten_inputs(*[np.array(a, copy=True) for a in arrays])
        with torch.no_grad():
            if cap.host is not None:
                values = list(cap.host(*flat))
            else:
                values = list(cap.pre(*flat)) if cap.pre is not None else flat
                # infinities cross into the device as its stand-in, as infinite constants do (converter.INF_STANDIN)
                finite = [finite_standins(v) if isinstance(v, torch.Tensor) else v for v in values]
                # Large outputs are infinities again only where a stand-in entered the device: a model without
                # infinities keeps its genuine large values.
                restore = getattr(cap.graph, "inf_standins", False) or any(
                    f is not v for f, v in zip(finite, values))
                values = [_as_shape(v, out.shape) for v, out in zip(compiled.executor.run(finite), cap.graph.outputs)]
                if restore:
                    values = [restore_infinities(v) for v in values]
                if cap.post is not None:
                    values = list(cap.post(*values))
        return self._outputs(values, cap.output_names, cap.output_dtypes)

    @staticmethod
    def _outputs(values: Sequence[Any], names: Sequence[str], dtypes: Sequence[Optional[np.dtype]]) -> Tuple[Any, ...]:
        outs = []
        for v, dt in zip(values, dtypes):
            if isinstance(v, (list, tuple)) or v is None:  # sequences and optionals come back as they are
                outs.append(v)
                continue
            a = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            outs.append(a.astype(dt, copy=False) if dt is not None and a.dtype != dt else a)
        return namedtupledict("Outputs", [_field(n) for n in names])(*outs)


#: Operands the chip needs as constants, whatever their element type: (op type, input index). Dropout's ratio
#: and training_mode decide whether the node is an identity or a mask (a different graph), like Resize's scales.
STATIC_OPERANDS = frozenset({("Resize", 1), ("Resize", 2), ("Upsample", 1), ("Dropout", 1), ("Dropout", 2)})


def specialised_inputs(model: "onnx.ModelProto", arrays: Sequence[np.ndarray]) -> List[str]:
    """Names of the graph inputs whose values the backend compiles in as constants: integer inputs (shapes,
    axes and indices are static on the chip) and the operands :data:`STATIC_OPERANDS` needs static."""
    names = [vi.name for vi in onnx_model.graph_inputs(model)]
    static = _static_operands(model)
    return [n for n, a in zip(names, arrays) if np.asarray(a).dtype.kind in "iu" or n in static]


def _static_operands(model: "onnx.ModelProto") -> set:
    """Graph inputs read only as operands that must be static (Resize's roi and scales): the backend
    specialises them like integer inputs (their values become constants; a new value, a new compile)."""
    uses: Dict[str, List[Tuple[str, int]]] = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name:
                uses.setdefault(name, []).append((node.op_type, k))
    outputs = {o.name for o in model.graph.output}
    return {n for n, u in uses.items() if n not in outputs and all(x in STATIC_OPERANDS for x in u)}


def host_only_reason(model: "onnx.ModelProto") -> Optional[str]:
    """Why no part of ``model`` can be imported for the device (None when it can): a graph input or output
    that is not a tensor (a sequence, map or optional), or no default-domain (ai.onnx) opset at all (only
    ai.onnx.ml / ai.onnx.preview.training ops), or an opset older than 13 that does not convert to opset 13 as
    the same function (:func:`pybuda.frontend.onnx.model.conversion_problem`)."""
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            return f"'{vi.name}' is a {vi.type.WhichOneof('value')}, not a tensor"
    if not any(imp.domain in ("", "ai.onnx") for imp in model.opset_import):
        domains = ", ".join(sorted({imp.domain for imp in model.opset_import}))
        return f"it uses only the {domains} domain(s)"
    why = onnx_model.conversion_problem(model)
    if why is not None:
        return f"converting opset {onnx_model.default_opset(model)} to {onnx_model.MIN_OPSET} {why}"
    return None


def _as_shape(value: Any, shape: Sequence[int]) -> Any:
    """A device output in its graph output's shape (the device hands a 0-d value back with one dim)."""
    if isinstance(value, torch.Tensor) and tuple(value.shape) != tuple(shape) and value.numel() == int(np.prod(shape)):
        return value.reshape(tuple(shape))
    return value


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _field(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"o_{cleaned}"


class PybudaBackend(Backend):
    """pybuda as an ONNX backend: the golden (simulated) Tenstorrent device, Float32, CPU fallback by node."""

    @classmethod
    def is_compatible(cls, model: "onnx.ModelProto", device: str = "CPU", **kwargs: Any) -> bool:
        return True

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """The ONNX runner asks for "CPU" (and "CUDA"): pybuda runs the simulated chip on the CPU."""
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: "onnx.ModelProto", device: str = "CPU", **kwargs: Any) -> PybudaBackendRep:
        """Check (and, below opset 13, upgrade) the model; compiling waits for the first run's shapes."""
        super().prepare(model, device, **kwargs)
        name = model.graph.name or "onnx_model"
        if host_only_reason(model) is None:
            onnx_model.require_input_shapes(model, name)
            model = onnx_model.check_and_upgrade(model, name)
        return PybudaBackendRep(model, kwargs.get("pybuda_device", DEFAULT_DEVICE), kwargs.get("config"))

    @classmethod
    def run_model(cls, model: "onnx.ModelProto", inputs: Any, device: str = "CPU", **kwargs: Any) -> Tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: "onnx.NodeProto", inputs: Any, device: str = "CPU",
                 outputs_info: Optional[Sequence[Tuple[np.dtype, Tuple[int, ...]]]] = None,
                 **kwargs: Any) -> Tuple[Any, ...]:
        """Run one node: wrap it into a model (inputs typed from ``inputs``) and run that."""
        super().run_node(node, inputs, device, outputs_info, **kwargs)
        arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, dict) else inputs)]
        names = [n for n in node.input if n]
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
               for n, a in zip(names, arrays)]
        if outputs_info:
            outs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), list(shape))
                    for n, (dt, shape) in zip(node.output, outputs_info)]
        else:
            probe = helper.make_model(helper.make_graph([node], "run_node", vis, []),
                                      opset_imports=[helper.make_opsetid("", kwargs.get("opset_version",
                                                                                         onnx.defs.onnx_opset_version()))])
            inferred = onnx.shape_inference.infer_shapes(probe)
            known = {v.name: v for v in inferred.graph.value_info}
            outs = [known.get(n) or helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in node.output]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(helper.make_graph([node], "run_node", vis, outs),
                                  opset_imports=[helper.make_opsetid("", opset)])
        return cls.run_model(model, arrays, device)


prepare = PybudaBackend.prepare
run_model = PybudaBackend.run_model
run_node = PybudaBackend.run_node
supports_device = PybudaBackend.supports_device
