"""Modules: the unit of work placed on a device.

:class:`PyBudaModule` is the native module: parameters, constants and submodules are attributes, and
``forward`` calls ``pybuda.op.*``. Tracing (``trace``) runs forward on pybuda Tensors and builds an
``ir.Graph``. The framework wrappers (:class:`PyTorchModule`, ...) hold a framework model and hand it
to a frontend in ``pybuda.frontend`` when a graph is needed.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from pybuda.config import read_env
from pybuda.errors import InputError, ModuleError
from pybuda.tensor import Parameter, SomeTensor, Tensor, _as_torch, to_buda_tensors

log = logging.getLogger(__name__)


class Module:
    """A workload that can be assigned to a single device (native PyBuda or a framework model)."""

    #: A CPUDevice runs the module in its own framework (``forward``); False for modules made of pybuda ops,
    #: which run on the CPU reference of their graph.
    runs_natively_on_cpu = True

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ModuleError(f"a module needs a non-empty string name, got {name!r}")
        suffix = read_env().graph_name_suffix
        object.__setattr__(self, "name", name + suffix)
        object.__setattr__(self, "device", None)
        object.__setattr__(self, "input_names", [])

    def get_name(self) -> str:
        """The module's name."""
        return self.name

    def get_device(self):
        """The device this module is placed on, or None."""
        return self.device

    def _set_device(self, device) -> None:
        object.__setattr__(self, "device", device)

    def run(self, *args: SomeTensor) -> Tuple[Any, ...]:
        """Run inference on this module on a TT device (no other module may be placed manually)."""
        import pybuda

        return tuple(pybuda.run_inference(self, inputs=[args]).get())

    def __getstate__(self):
        state = self.__dict__.copy()
        state["device"] = None  # devices hold processes and queues; never pickle them
        return state


class PyBudaModule(Module):
    """Base class of native PyBuda modules: implement ``forward`` with ``pybuda.op`` calls.

    Attributes that are :class:`Parameter`, ``PyBudaModule``, or lists/dicts of them are registered
    automatically: a parameter assigned as ``self.w`` is named ``<module>.w``; a submodule assigned as
    ``self.sub`` is renamed ``<module>.sub``.
    """

    runs_natively_on_cpu = False

    def __init__(self, name: str):
        super().__init__(name)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_constants", {})
        object.__setattr__(self, "_submodules", {})
        object.__setattr__(self, "_submodulelists", [])
        object.__setattr__(self, "_user_inserted_tapout_queues", [])
        object.__setattr__(self, "subgraph_idx", 0)

    # --- registration ----------------------------------------------------------------------------
    def __setattr__(self, key: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise ModuleError(f"{type(self).__name__}.__init__ must call super().__init__(name) before setting attributes")
        if isinstance(value, Parameter):
            if value._forced_name is None:
                value._set_auto_name(f"{self.name}.{key}")
            self._parameters[value.get_name()] = value
        elif isinstance(value, PyBudaModule):
            object.__setattr__(value, "name", f"{self.name}.{key}")
            value._rename_parameters()
            self._submodules[key] = value
            value.initialize_parameters()
        elif isinstance(value, dict) and value and all(isinstance(v, Parameter) for v in value.values()):
            for k, p in value.items():
                if p._forced_name is None:
                    p._set_auto_name(f"{self.name}.{key}.{k}")
                self._parameters[p.get_name()] = p
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Parameter) for v in value):
            for i, p in enumerate(value):
                if p._forced_name is None:
                    p._set_auto_name(f"{self.name}.{key}_{i}")
                self._parameters[p.get_name()] = p
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, PyBudaModule) for v in value):
            for i, m in enumerate(value):
                object.__setattr__(m, "name", f"{self.name}.{key}_{i}")
                m._rename_parameters()
                m.initialize_parameters()
            self._submodulelists.append(list(value))
        object.__setattr__(self, key, value)

    def _rename_parameters(self) -> None:
        """After a rename, re-derive auto names of parameters (attribute name is after the last dot)."""
        renamed = {}
        for pname, p in self._parameters.items():
            if p._forced_name is None:
                p._set_auto_name(f"{self.name}.{pname.rsplit('.', 1)[-1]}")
            renamed[p.get_name()] = p
        object.__setattr__(self, "_parameters", renamed)
        for m in self.get_submodules():
            object.__setattr__(m, "name", f"{self.name}.{m.name.rsplit('.', 1)[-1]}")
            m._rename_parameters()

    def initialize_parameters(self) -> None:
        """Hook called when this module is attached to a parent; override to initialise weights."""

    def pre_forward(self, *args: Any, **kwargs: Any) -> None:
        """Called before forward. Override this function to add custom logic."""

    def forward(self, *args: Tensor) -> Any:  # pragma: no cover - user code
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.pre_forward(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def get_submodules(self) -> List["PyBudaModule"]:
        subs = list(self._submodules.values())
        for lst in self._submodulelists:
            subs.extend(lst)
        return subs

    # --- parameters ---------------------------------------------------------------------------
    def add_parameter(self, name: str, parameter: Parameter, prepend_name: bool = False) -> None:
        """Add a parameter under ``name`` (``<module>.name`` with ``prepend_name``)."""
        if not isinstance(parameter, Parameter):
            raise ModuleError(f"add_parameter('{name}') expects a pybuda.Parameter, got {type(parameter).__name__}")
        full = f"{self.name}.{name}" if prepend_name else name
        if full in self._parameters:
            raise ModuleError(f"module '{self.name}' already has a parameter named '{full}'")
        parameter._forced_name = full
        self._parameters[full] = parameter

    def get_parameter(self, name: str) -> Parameter:
        """A parameter of this module or its submodules, by full name."""
        for p in self.get_parameters(submodules=True):
            if p.get_name() == name:
                return p
        raise ModuleError(f"module '{self.name}' has no parameter '{name}'; it has {[p.get_name() for p in self.get_parameters()]}")

    def get_parameters(self, submodules: bool = True) -> List[Parameter]:
        """Parameters of this module and, optionally, of all submodules."""
        params = list(self._parameters.values())
        if submodules:
            for m in self.get_submodules():
                params.extend(m.get_parameters(submodules=True))
        return params

    def set_parameter(self, name: str, data: SomeTensor) -> None:
        """Set the value of a parameter (shape must match)."""
        self.get_parameter(name).set_value(data)

    def load_parameter_dict(self, data: Dict[str, SomeTensor]) -> None:
        """Set many parameters at once; unknown names are an error."""
        for name, value in data.items():
            self.set_parameter(name, value)

    # --- constants ------------------------------------------------------------------------------
    def add_constant(self, name: str, prepend_name: bool = False, shape: Optional[Tuple[int, ...]] = None) -> None:
        """Declare a constant; its value is set with :meth:`set_constant`."""
        full = f"{self.name}.{name}" if prepend_name else name
        if full in self._constants:
            raise ModuleError(f"module '{self.name}' already has a constant named '{full}'")
        value = torch.zeros(shape) if shape is not None else None
        self._constants[full] = Tensor(shape or (1,), value=value, constant=True) if value is not None else None

    def set_constant(self, name: str, data: Union[SomeTensor, float]) -> None:
        """Set the value of a constant declared with :meth:`add_constant`."""
        if name not in self._constants:
            raise ModuleError(f"module '{self.name}' has no constant '{name}'; declare it with add_constant first")
        t = torch.tensor(data) if isinstance(data, (int, float)) else _as_torch(data)
        self._constants[name] = Tensor.create_from_torch(t, constant=True)

    def get_constant(self, name: str) -> Tensor:
        """A constant by name (as a pybuda Tensor usable in forward)."""
        if name not in self._constants:
            raise ModuleError(f"module '{self.name}' has no constant '{name}'")
        value = self._constants[name]
        if value is None:
            raise ModuleError(f"constant '{name}' of module '{self.name}' has no value; call set_constant first")
        return value

    # --- debug queues ---------------------------------------------------------------------------
    def insert_tapout_queue_for_op(self, op_name: str, output_index: int) -> "IntQueueHandle":
        """Save output ``output_index`` of op ``op_name`` on every inference (for checking/debugging).

        When this module is compiled for a TTDevice the op's output becomes an extra output queue of the
        netlist, and each input run adds its value to ``pybuda.get_intermediates_queue()`` (one
        :class:`~pybuda.runtime.transport.Intermediates` per input, indexable by this handle). The next run
        recompiles. An op name the module's graph lacks is a ModuleError at compile, naming the nearest ops.
        Returns the handle of the tap-out queue."""
        if not isinstance(op_name, str) or not op_name:
            raise ModuleError(f"insert_tapout_queue_for_op: op_name must be a non-empty string, got {op_name!r}")
        if not isinstance(output_index, int) or isinstance(output_index, bool) or output_index < 0:
            raise ModuleError(f"insert_tapout_queue_for_op: output_index must be a non-negative int, "
                              f"got {output_index!r}")
        handle = IntQueueHandle(self, op_name, output_index)
        self._user_inserted_tapout_queues.append(handle)
        from pybuda.runtime import state

        state.mark_changed()  # a running pipeline was compiled without this tap: the next run recompiles
        return handle

    # --- tracing --------------------------------------------------------------------------------
    def trace(self, *inputs: SomeTensor, graph_name: Optional[str] = None):
        """Run forward on pybuda Tensors and return ``(graph, outputs)``.

        Values flow eagerly, so ``outputs`` hold the forward result computed by the ops' torch
        references whenever all inputs and parameters have values.
        """
        from pybuda.ir.builder import build_graph
        from pybuda.op.record import trace_scope

        tensors = to_buda_tensors(inputs)
        names = self._input_names(len(tensors))
        with trace_scope(self.name):
            outputs = self(*tensors)
        outs = _flatten_outputs(outputs, self.name)
        graph = build_graph(graph_name or self.name, list(zip(names, tensors)), outs, output_prefix=f"{self.name}.")
        return graph, outs

    def _input_names(self, count: int) -> List[str]:
        if self.input_names:
            return list(self.input_names)[:count]
        params = [p for p in inspect.signature(self.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params[:count]]
        if len(names) < count:  # *args forward
            names += [f"input_{i}" for i in range(len(names), count)]
        return names


def _flatten_outputs(outputs: Any, module_name: str) -> List[Tensor]:
    if isinstance(outputs, Tensor):
        return [outputs]
    if isinstance(outputs, (list, tuple)) and all(isinstance(o, Tensor) for o in outputs):
        return list(outputs)
    raise ModuleError(f"module '{module_name}': forward must return a pybuda Tensor or a tuple/list of them, "
                      f"got {type(outputs).__name__}")


class IntQueueHandle:
    """Handle of an intermediate (tap-out) queue inserted with ``insert_tapout_queue_for_op``: index an item
    of ``pybuda.get_intermediates_queue()`` with it to get the op's value."""

    def __init__(self, module: Module, op_name: str, output_index: int):
        self.module = module
        self.op_name = op_name
        self.output_index = output_index

    def __repr__(self) -> str:
        return f"IntQueueHandle({self.module.name}.{self.op_name}[{self.output_index}])"


class PyTorchModule(Module):
    """A wrapper around a PyTorch module.

    On a CPU device it runs as is; on a TT device it is captured with ``torch.export`` and compiled
    (see :mod:`pybuda.frontend.torch`).
    """

    def __init__(self, name: str, module: torch.nn.Module, redirect_forward: bool = True):
        super().__init__(name)
        if not isinstance(module, torch.nn.Module):
            raise ModuleError(f"PyTorchModule '{name}' expects a torch.nn.Module, got {type(module).__name__}")
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "redirect_forward", redirect_forward)
        object.__setattr__(self, "original_forward", module.forward)

    def forward(self, *args: Any, **kwargs: Any) -> Tuple[torch.Tensor, ...]:
        """Run the PyTorch module forward on torch tensors; returns a tuple of output tensors."""
        args = tuple(_as_torch(a) if isinstance(a, (Tensor, np.ndarray)) else a for a in args)
        with torch.no_grad():
            out = self.module(*args, **kwargs)
        return flatten_torch_outputs(out)

    cpu_eval_forward = forward

    def backward(self, *args: Tuple[torch.Tensor, torch.Tensor]) -> None:
        """Backward from (output, incoming-gradient) pairs; gradients land in the torch parameters."""
        outputs, grads = zip(*args)
        torch.autograd.backward(outputs, grads)

    def add_parameter(self, name: str, parameter: Parameter) -> None:
        """Adds a new parameter (registered on the wrapped torch module)."""
        self.module.register_parameter(name, torch.nn.Parameter(parameter.value(), requires_grad=parameter.requires_grad))

    def set_parameters(self, **kwargs: SomeTensor) -> None:
        """Set parameters (weights) in this module, by name."""
        state = dict(self.module.named_parameters())
        for name, value in kwargs.items():
            if name not in state:
                raise ModuleError(f"PyTorchModule '{self.name}' has no parameter '{name}'")
            with torch.no_grad():
                state[name].copy_(_as_torch(value))

    def get_parameters(self) -> List[Parameter]:
        """Return the list of parameters defined in this module (as pybuda Parameters)."""
        return [Parameter(p.detach(), requires_grad=p.requires_grad, name=n) for n, p in self.module.named_parameters()]

    def to_graph(self, *sample_inputs: SomeTensor, graph_name: Optional[str] = None, **kwargs: Any):
        """Capture the module into an ``ir.Graph`` (torch.export frontend)."""
        from pybuda.frontend.torch import capture

        return capture(self, sample_inputs, graph_name=graph_name or self.name, **kwargs)


def flatten_torch_outputs(out: Any) -> Tuple[torch.Tensor, ...]:
    """Flatten a model's output (tensor, tuple, list, dict or HF ModelOutput) into a tuple of tensors."""
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        values = out.to_tuple() if hasattr(out, "to_tuple") else tuple(out.values())
        return tuple(t for v in values for t in flatten_torch_outputs(v))
    if isinstance(out, (list, tuple)):
        return tuple(t for v in out for t in flatten_torch_outputs(v))
    if out is None:
        return ()
    raise InputError(f"model output of type {type(out).__name__} is not a tensor or a container of tensors")


class _TFConvertedModule(Module):
    """The TensorFlow family's common path onto the device: a subclass's ``onnx_model(*samples)`` converts
    the model with tf2onnx, and ``to_graph`` imports that through the one ONNX importer."""

    def onnx_model(self, *sample_inputs: SomeTensor):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def to_graph(self, *sample_inputs: SomeTensor, graph_name: Optional[str] = None, config: Any = None,
                 for_device: bool = True, **kwargs: Any):
        """Convert (tf2onnx) and import the model for the sample inputs: an
        :class:`~pybuda.frontend.onnx.OnnxCapture` (device graph, fallback report, CPU stages)."""
        from pybuda.frontend.tensorflow.support import import_converted

        return import_converted(self.onnx_model(*sample_inputs), sample_inputs, graph_name or self.name,
                                config=config, for_device=for_device, **kwargs)


class TFModule(_TFConvertedModule):
    """A wrapper around a TensorFlow model: a ``keras.Model`` (or layer) or a ``tf.Module`` with a traceable
    ``__call__``.

    ``to_graph`` converts it to ONNX with tf2onnx, traced for the sample inputs' shapes and dtypes (one
    conversion per signature), and imports that onto pybuda ops (:mod:`pybuda.frontend.tensorflow`, then the
    ONNX importer with its CPU fallback per node); ``forward`` runs it in TensorFlow (Keras with
    ``training=False``; several inputs go to a Keras model as a list), which is what a CPUDevice runs.
    Inputs are laid out as the framework expects (NHWC for Keras convolutions); outputs are torch tensors.
    TensorFlow is imported only when the module is used (``pip install -e ".[tf]"``).
    """

    framework = "TensorFlow"

    def __init__(self, name: str, module: Any):
        super().__init__(name)
        if not callable(module):
            raise ModuleError(f"TFModule '{name}' expects a keras.Model or a tf.Module with __call__, "
                              f"got {type(module).__name__}")
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "_onnx", {})

    def onnx_model(self, *sample_inputs: SomeTensor):
        """The model converted to an ``onnx.ModelProto`` for the samples' shapes and dtypes (cached)."""
        from pybuda.frontend.tensorflow.convert import keras_to_onnx
        from pybuda.frontend.tensorflow.support import cached_onnx

        who = f"TFModule '{self.name}'"
        return cached_onnx(self._onnx, sample_inputs, lambda: keras_to_onnx(self.module, sample_inputs, who=who))

    def forward(self, *args: SomeTensor, **kwargs: Any) -> Tuple[torch.Tensor, ...]:
        """Run the model in TensorFlow (keyword arguments go to the model's call; Keras gets
        ``training=False`` unless given); returns its flattened outputs as torch tensors."""
        from pybuda.frontend.tensorflow.run import run_model

        return run_model(self.module, args, who=f"TFModule '{self.name}'", **kwargs)

    cpu_eval_forward = forward
    call = forward  # TT-Buda's name (Keras's)

    def __call__(self, *args: SomeTensor, **kwargs: Any) -> Tuple[torch.Tensor, ...]:
        return self.forward(*args, **kwargs)

    def get_parameters(self) -> List[Parameter]:
        """The model's variables (Keras ``weights`` / ``tf.Module.variables``) as Parameters named by path."""
        from pybuda.frontend.tensorflow.convert import is_keras
        from pybuda.frontend.tensorflow.support import variable_parameters

        variables = self.module.weights if is_keras(self.module) else getattr(self.module, "variables", ())
        return variable_parameters(variables)

    def __getstate__(self):
        state = super().__getstate__()
        state["_onnx"] = {}
        return state


class TFGraphDefModule(_TFConvertedModule):
    """A wrapper around a frozen TensorFlow GraphDef (a ``GraphDef``, its bytes, or a ``.pb``/``.pbtxt`` path)
    with the names of its input and output tensors (``"x"`` or ``"x:0"``).

    ``to_graph`` converts it with tf2onnx (the samples' shapes fill the placeholders' unknown dims) and imports
    it onto pybuda ops; ``forward`` runs the GraphDef in TensorFlow (``tf.compat.v1.wrap_function``, pruned to
    the named tensors); ``get_parameters`` lists its float constants.
    """

    framework = "TensorFlow GraphDef"

    def __init__(self, name: str, graph_def: Any, input_names: List[str], output_names: List[str]):
        super().__init__(name)
        from pybuda.frontend.tensorflow.convert import load_graph_def

        if isinstance(input_names, str):
            input_names = [input_names]
        if isinstance(output_names, str):
            output_names = [output_names]
        if not input_names or not output_names:
            raise ModuleError(f"TFGraphDefModule '{name}' needs the names of its input and output tensors")
        object.__setattr__(self, "module", load_graph_def(graph_def, who=f"TFGraphDefModule '{name}'"))
        object.__setattr__(self, "graph_input_names", list(input_names))
        object.__setattr__(self, "graph_output_names", list(output_names))
        object.__setattr__(self, "_onnx", {})
        object.__setattr__(self, "_runner", None)

    def onnx_model(self, *sample_inputs: SomeTensor):
        """The GraphDef converted to an ``onnx.ModelProto`` for the samples' shapes (cached)."""
        from pybuda.frontend.tensorflow.convert import graph_def_to_onnx
        from pybuda.frontend.tensorflow.support import cached_onnx

        who = f"TFGraphDefModule '{self.name}'"
        return cached_onnx(self._onnx, sample_inputs, lambda: graph_def_to_onnx(
            self.module, self.graph_input_names, self.graph_output_names, sample_inputs, who=who))

    def forward(self, *inputs: SomeTensor) -> Tuple[torch.Tensor, ...]:
        """Run the GraphDef in TensorFlow; returns the named outputs as torch tensors."""
        from pybuda.frontend.tensorflow.run import GraphDefRunner

        if self._runner is None:
            object.__setattr__(self, "_runner", GraphDefRunner(self.module, self.graph_input_names,
                                                               self.graph_output_names,
                                                               who=f"TFGraphDefModule '{self.name}'"))
        return self._runner(*inputs)

    cpu_eval_forward = forward

    def __call__(self, *inputs: SomeTensor) -> Tuple[torch.Tensor, ...]:
        return self.forward(*inputs)

    def get_parameters(self) -> List[Parameter]:
        """The GraphDef's float constants (the frozen weights) as Parameters (``requires_grad=False``)."""
        from pybuda.frontend.tensorflow.support import graph_def_parameters

        return graph_def_parameters(self.module, who=f"TFGraphDefModule '{self.name}'")

    def __getstate__(self):
        state = super().__getstate__()
        state["_onnx"] = {}
        state["_runner"] = None
        return state


class OnnxModule(Module):
    """A wrapper around an ONNX model: an ``onnx.ModelProto`` or a path to a ``.onnx`` file.

    ``to_graph`` imports it onto pybuda ops (:func:`pybuda.frontend.onnx.import_model`, CPU fallback per
    ONNX node); ``forward`` runs it in ONNX Runtime (what a CPUDevice runs); ``get_parameters`` lists its
    float initializers. ``onnx_path`` (TT-Buda's argument) names the file when ``module`` is a ModelProto.
    """

    framework = "ONNX"

    def __init__(self, name: str, module: Any, onnx_path: Optional[str] = None):
        super().__init__(name)
        from pybuda.frontend.onnx import model as onnx_model

        source = module if module is not None else onnx_path
        if source is None:
            raise ModuleError(f"OnnxModule '{name}': pass an onnx.ModelProto or a path to an .onnx file")
        proto = onnx_model.load(source, name)
        object.__setattr__(self, "module", proto)
        if onnx_path is None and hasattr(source, "__fspath__"):
            onnx_path = source.__fspath__()
        elif onnx_path is None and isinstance(source, str):
            onnx_path = source
        object.__setattr__(self, "onnx_path", onnx_path)
        object.__setattr__(self, "_session", None)

    @property
    def static_batch(self) -> Optional[int]:
        """The batch (dim 0) the model's first input declares, when it is a fixed size above 1 (an export with a
        static batch): a push of that many samples is one run of the model, not that many runs of one."""
        from pybuda.frontend.onnx import model as onnx_model

        inputs = onnx_model.graph_inputs(self.module)
        t = inputs[0].type if inputs else None
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        dims = t.tensor_type.shape.dim
        return int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 1 else None

    def to_graph(self, *sample_inputs: SomeTensor, graph_name: Optional[str] = None, config: Any = None,
                 for_device: bool = True, **kwargs: Any):
        """Import the model for the sample inputs: an :class:`~pybuda.frontend.onnx.OnnxCapture` (device
        graph, fallback report, CPU stages run by ONNX Runtime)."""
        from pybuda.frontend.onnx import import_model

        return import_model(self.module, *[_as_torch(s) for s in sample_inputs], name=graph_name or self.name,
                            config=config, for_device=for_device, **kwargs)

    def forward(self, *inputs: SomeTensor) -> Tuple[torch.Tensor, ...]:
        """Run the model in ONNX Runtime on the CPU; returns torch tensors."""
        from pybuda.frontend.onnx import model as onnx_model

        names = [vi.name for vi in onnx_model.graph_inputs(self.module)]
        if len(inputs) != len(names):
            raise InputError(f"OnnxModule '{self.name}' takes {len(names)} input(s) {names}, got {len(inputs)}")
        if self._session is None:
            object.__setattr__(self, "_session", onnx_model.session(self.module))
        feeds = {n: _as_torch(x).detach().cpu().numpy() for n, x in zip(names, inputs)}
        outs = self._session.run(None, feeds)
        return tuple(torch.from_numpy(np.array(o, copy=True)) for o in outs)

    def __call__(self, *inputs: SomeTensor) -> Tuple[torch.Tensor, ...]:
        return self.forward(*inputs)

    def get_parameters(self) -> List[Parameter]:
        """The model's float initializers as pybuda Parameters (``requires_grad=False``)."""
        from pybuda.frontend.onnx.model import numpy_helper

        params = []
        for t in self.module.graph.initializer:
            value = torch.from_numpy(numpy_helper.to_array(t).copy())
            if value.dtype.is_floating_point:
                params.append(Parameter(value, requires_grad=False, name=t.name))
        return params

    def __getstate__(self):
        state = super().__getstate__()
        state["_session"] = None
        return state


class JaxModule(Module):
    """A wrapper around a JAX model: a function ``fn(params, *inputs)`` with its ``params`` pytree, a
    function ``fn(*inputs)`` (``params=None``), or a Flax linen module with its variables
    (``{'params': ..., 'batch_stats': ...}``).

    On a TT device it is captured from its jaxpr (:mod:`pybuda.frontend.jax`); ``forward`` runs it in JAX.
    Inputs may be torch tensors, pybuda Tensors, numpy or JAX arrays; outputs are torch tensors.
    """

    framework = "JAX"

    def __init__(self, name: str, module: Any, params: Any = None):
        super().__init__(name)
        if not callable(module):
            raise ModuleError(f"JaxModule '{name}' expects a function fn(params, *inputs) or a Flax module, "
                              f"got {type(module).__name__}")
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "params", params)

    def forward(self, *args: Any) -> Tuple[torch.Tensor, ...]:
        """Run the model in JAX; returns a tuple of torch tensors (the flattened output pytree)."""
        import jax

        from pybuda.frontend.jax.capture import as_apply_fn, to_jax_array, to_torch

        fn = as_apply_fn(self.module)
        xs = [to_jax_array(a) for a in args]
        out = fn(*xs) if self.params is None else fn(self.params, *xs)
        return tuple(to_torch(leaf) for leaf in jax.tree_util.tree_leaves(out))

    cpu_eval_forward = forward

    def __call__(self, *args: Any) -> Tuple[torch.Tensor, ...]:
        return self.forward(*args)

    def get_parameters(self) -> List[Parameter]:
        """The arrays of ``params`` as pybuda Parameters, named by their pytree path (``Dense_0.kernel``)."""
        if self.params is None:
            return []
        from pybuda.frontend.jax.capture import _trainable, parameter_names, to_torch

        out = []
        for (pname, leaf), trainable in zip(parameter_names(self.params), _trainable(self.params)):
            value = to_torch(leaf)
            out.append(Parameter(value, requires_grad=bool(trainable and value.dtype.is_floating_point),
                                 name=pname))
        return out

    def to_graph(self, *sample_inputs: SomeTensor, graph_name: Optional[str] = None, config: Any = None,
                 for_device: bool = False, **kwargs: Any):
        """Capture the model into an ``ir.Graph`` from its jaxpr (:func:`pybuda.frontend.jax.capture`).

        With ``for_device`` a primitive the chip cannot run goes to a JAX stage on the host when ``config``
        enables CPU fallback (:mod:`pybuda.frontend.jax.fallback`), else it is an UnsupportedOpError."""
        from pybuda.frontend.jax import capture

        return capture(self.module, sample_inputs, params=self.params, graph_name=graph_name or self.name,
                       for_device=for_device, config=config, **kwargs)


class TFLiteModule(_TFConvertedModule):
    """A wrapper around a TFLite model: a path to a ``.tflite`` file or the flatbuffer's bytes.

    ``to_graph`` converts it with tf2onnx and imports it onto pybuda ops; ``forward`` runs it in
    ``tf.lite.Interpreter`` (resized to the inputs' shapes); ``get_parameters`` lists the float weights of the
    converted model.
    """

    framework = "TFLite"

    def __init__(self, name: str, module: Any):
        import os

        super().__init__(name)
        path = None
        if isinstance(module, (bytes, bytearray)):
            content = bytes(module)
        elif isinstance(module, (str, os.PathLike)):
            path = os.fspath(module)
            if not os.path.exists(path):
                raise ModuleError(f"TFLiteModule '{name}': TFLite file '{path}' does not exist")
            with open(path, "rb") as f:
                content = f.read()
        else:
            raise ModuleError(f"TFLiteModule '{name}' expects a path to a .tflite file or its bytes, "
                              f"got {type(module).__name__}")
        object.__setattr__(self, "module", content)
        object.__setattr__(self, "tflite_path", path)
        object.__setattr__(self, "_onnx", {})
        object.__setattr__(self, "_runner", None)

    def onnx_model(self, *sample_inputs: SomeTensor):
        """The model converted to an ``onnx.ModelProto`` (TFLite shapes are static: converted once)."""
        from pybuda.frontend.tensorflow.convert import tflite_to_onnx
        from pybuda.frontend.tensorflow.support import cached_onnx

        who = f"TFLiteModule '{self.name}'"
        return cached_onnx(self._onnx, sample_inputs, lambda: tflite_to_onnx(self.module, who=who), keyed=False)

    def forward(self, *inputs: SomeTensor) -> Tuple[torch.Tensor, ...]:
        """Run the model in ``tf.lite.Interpreter``; returns its outputs as torch tensors."""
        from pybuda.frontend.tensorflow.run import TFLiteRunner

        if self._runner is None:
            object.__setattr__(self, "_runner", TFLiteRunner(self.module, who=f"TFLiteModule '{self.name}'"))
        return self._runner(*inputs)

    cpu_eval_forward = forward

    def __call__(self, *inputs: SomeTensor) -> Tuple[torch.Tensor, ...]:
        return self.forward(*inputs)

    def get_parameters(self) -> List[Parameter]:
        """The float weights of the converted model as Parameters (``requires_grad=False``)."""
        from pybuda.frontend.tensorflow.support import onnx_parameters

        return onnx_parameters(self.onnx_model())

    def __getstate__(self):
        state = super().__getstate__()
        state["_onnx"] = {}
        state["_runner"] = None
        return state
