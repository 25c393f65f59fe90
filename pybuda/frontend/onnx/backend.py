"""ONNX's backend interface (``onnx.backend.base.Backend``) on pybuda's golden device at Float32.

``prepare(model)`` checks the model and returns a :class:`PybudaBackendRep`; its ``run(inputs)`` imports
the model for the inputs' shapes (:func:`pybuda.frontend.onnx.import_model`), compiles the device graph
for the golden device with every data format forced to Float32, and runs CPU pre -> device -> CPU post
(host nodes by ONNX Runtime, as the importer's fallback decides). Compiled models are cached per input
signature. Integer inputs are specialised: their values become constants of the compiled model (shapes,
axes and indices are static on the chip), so a new value means a new compile.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.frontend.onnx import model as onnx_model
from pybuda.frontend.onnx.importer import OnnxCapture, import_model
from pybuda.frontend.onnx.model import helper, onnx

from onnx.backend.base import Backend, BackendRep, namedtupledict

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

    @property
    def report(self):
        """The fallback report of the last compiled signature (None before the first run)."""
        return self.last_capture.report if self.last_capture is not None else None

    def _key(self, arrays: Sequence[np.ndarray], bound: Sequence[str], names: Sequence[str]) -> Tuple[Any, ...]:
        key: List[Any] = []
        for n, a in zip(names, arrays):
            key.append((a.shape, str(a.dtype), a.tobytes() if n in bound else None))
        return tuple(key)

    def compile(self, arrays: Sequence[np.ndarray]) -> _Compiled:
        """Import and compile for the signature of ``arrays`` (cached)."""
        names = [vi.name for vi in onnx_model.graph_inputs(self.model)]
        bound = [n for n, a in zip(names, arrays) if a.dtype.kind in "iu"]
        key = self._key(arrays, bound, names)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        capture = import_model(self.model, *arrays, config=self.config, for_device=True, bind_inputs=bound)
        from pybuda.arch.types import BackendType
        from pybuda.compile import compile_graph
        from pybuda.runtime.backend_api import create_executor

        results = compile_graph(capture.graph, self.device, self.config)
        executor = create_executor(BackendType.Golden, results, graph=capture.graph)
        compiled = _Compiled(capture, executor)
        self._cache[key] = compiled
        return compiled

    def run(self, inputs: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """Run the model on ``inputs`` (a list of arrays in graph-input order, a dict by name, or one array)."""
        names = [vi.name for vi in onnx_model.graph_inputs(self.model)]
        if isinstance(inputs, dict):
            inputs = [inputs[n] for n in names]
        elif isinstance(inputs, np.ndarray):
            inputs = [inputs]
        arrays = [np.asarray(a) for a in inputs]
        compiled = self.compile(arrays)
        self.last_capture = compiled.capture
        cap = compiled.capture
        flat = cap.flatten_inputs(*[np.array(a, copy=True) for a in arrays])
        with torch.no_grad():
            values = list(cap.pre(*flat)) if cap.pre is not None else flat
            values = list(compiled.executor.run(values))
            if cap.post is not None:
                values = list(cap.post(*values))
        outs = []
        for v, dt in zip(values, cap.output_dtypes):
            a = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            outs.append(a.astype(dt, copy=False) if a.dtype != dt else a)
        return namedtupledict("Outputs", [_field(n) for n in cap.output_names])(*outs)


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
