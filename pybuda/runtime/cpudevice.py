"""CPUDevice: runs modules on the host.

PyTorch modules run natively in torch (several modules are chained: each gets the previous one's
outputs). PyBuda modules are traced for the compile sample and run on the CPU reference (the op
registry's torch implementations). Graph parts that the torch frontend moved off the chip (CPU
fallback) arrive as modules with a ``to_graph`` and run on the CPU reference too.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from pybuda.errors import InputError, ModuleError, PybudaError
from pybuda.runtime.backend_api import CPUReferenceExecutor
from pybuda.runtime.device import Device
from pybuda.runtime.push import InputItem

log = logging.getLogger(__name__)

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class CPUDevice(Device):
    """CPUDevice represents a CPU processor: it runs PyTorch modules natively and PyBuda modules on the
    CPU reference.

    ``optimizer_f(module) -> torch.optim.Optimizer`` and ``scheduler_f(optimizer)`` are used in
    training pipelines. Inputs in float16/bfloat16 are cast to float32 before the
    forward pass, unless ``input_dtypes`` gives a dtype per input or the (first) model holds float16/bfloat16
    weights itself (it then runs in its dtype, as in torch). ``mp_context`` and
    ``retain_backward_graph`` are accepted for API compatibility.
    """

    def __init__(self, name: str, optimizer_f: Optional[Callable] = None, scheduler_f: Optional[Callable] = None,
                 mp_context: Any = None, retain_backward_graph: bool = False,
                 module: Union[Any, List[Any], None] = None, input_dtypes: Optional[List[torch.dtype]] = None):
        super().__init__(name, mp_context=mp_context)
        self.optimizer_f = optimizer_f
        self.scheduler_f = scheduler_f
        self.retain_backward_graph = retain_backward_graph
        if input_dtypes is not None and not all(d is None or isinstance(d, torch.dtype) for d in input_dtypes):
            raise PybudaError(f"CPUDevice '{name}': input_dtypes must be a list of torch dtypes, got {input_dtypes!r}")
        self.input_dtypes = list(input_dtypes) if input_dtypes is not None else None
        self._runners: Optional[List[Tuple[Any, Any]]] = None  # (module, CPUReferenceExecutor | None)
        #: Whether the first model holds float16/bfloat16 weights (:func:`_low_precision_model`), read once per
        #: compile by :meth:`_compile_sample` rather than on every run.
        self._model_is_low_precision = False
        if module is not None:
            self.place_module(module)

    #: fp16/bf16 inputs become float32 unless ``input_dtypes`` says otherwise: torch CPU kernels for them are
    #: slow or missing (a GPUDevice runs them natively).
    upcast_low_precision = True

    def _cast_inputs(self, tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        # A model whose own weights are float16/bfloat16 runs in that dtype, as in torch: float32 inputs
        # would not even multiply its weights, and its outputs must come back in its dtype.
        upcast = self.upcast_low_precision and not self._model_is_low_precision
        out = []
        for i, t in enumerate(tensors):
            if self.input_dtypes is not None and i < len(self.input_dtypes) and self.input_dtypes[i] is not None:
                t = t.to(self.input_dtypes[i])
            elif self.input_dtypes is None and upcast and t.dtype in _LOW_PRECISION:
                t = t.float()
            out.append(t)
        return out

    def compile_for(self, inputs: Sequence[Any], compiler_cfg: Any = None, targets: Sequence[Any] = (),
                    microbatch_size: int = 0, microbatch_count: int = 1, verify_cfg: Any = None) -> Tuple[Any, ...]:
        """For a CPU device there is no compilation: propagate the input shapes through the modules (running
        them once on ``inputs``) and return the output tensors (pybuda Tensors: shapes and formats).

        ``microbatch_size``, when given, must equal dim 0 of the inputs; ``targets`` are for training
        pipelines (``initialize_pipeline(training=True)``)."""
        return self._compile_for_inputs(inputs, compiler_cfg, targets, microbatch_size, microbatch_count, verify_cfg)

    def compile_for_pt(self, inputs: Sequence[Any], compiler_cfg: Any = None, targets: Sequence[Any] = (),
                       microbatch_size: int = 0, microbatch_count: int = 1,
                       verify_cfg: Any = None) -> Tuple[Any, ...]:
        """:meth:`compile_for` for a device holding PyTorch modules only (ModuleError otherwise)."""
        self._require_pytorch("compile_for_pt")
        return self.compile_for(inputs, compiler_cfg, targets, microbatch_size, microbatch_count, verify_cfg)

    def forward_pt(self, loop_count: int) -> None:
        """:meth:`Device.forward` for a device holding PyTorch modules only (ModuleError otherwise)."""
        self._require_pytorch("forward_pt")
        self.forward(loop_count)

    def cpueval_forward_pt(self, inputs: Sequence[Any], parameters: Mapping[str, Any], save_for_backward: bool,
                           targets: Sequence[Any] = ()) -> List[torch.Tensor]:
        """:meth:`Device.cpueval_forward` for a device holding PyTorch modules only (ModuleError otherwise)."""
        self._require_pytorch("cpueval_forward_pt")
        return self.cpueval_forward(inputs, parameters, save_for_backward, targets)

    def pop_parameter_checkpoint(self) -> Dict[str, Any]:
        """A dictionary of the current parameter values of the modules on this device (pybuda Tensors by
        name): after training steps, the trained values."""
        return self.get_parameter_checkpoint()

    def _require_pytorch(self, what: str) -> None:
        from pybuda.module import PyTorchModule

        others = [m.name for m in self.modules if not isinstance(m, PyTorchModule)]
        if not self.modules or others:
            raise ModuleError(f"CPUDevice '{self.name}'.{what} runs PyTorch modules; "
                              + (f"module(s) {others} are not PyTorchModules (use the method without '_pt')"
                                 if others else "the device has no modules"))

    def _compile_sample(self, sample: InputItem, config: Any = None, verify_cfg: Any = None,
                        want_outputs: bool = True) -> InputItem:
        """No compilation on a CPU: build runners (tracing PyBuda modules) and run the sample once to
        learn the output shapes and dtypes; the outputs are the next device's sample. The sample runs
        even without ``want_outputs``: a model that fails on the CPU fails at initialization."""
        if not self.modules:
            raise PybudaError(f"CPUDevice '{self.name}' has no modules; place one with place_module")
        runners: List[Tuple[Any, Any]] = []
        # Once per compile, not per run: the runners built here are what runs until the next compile, and
        # placing or removing a module marks the runtime state changed, so the next run compiles again.
        self._model_is_low_precision = _low_precision_model(self.modules[0])
        values = self._cast_inputs(sample.tensors)
        names = sample.names
        for module in self.modules:
            self._active_module = module.name  # a failure names the module it happened in
            if _runs_natively(module):
                runners.append((module, None))
                values = list(self._run_module(module, values, names))
            else:
                # Lazy, and only here: importing the compiler is not free, and a device running a loaded
                # image (CPU-fallback stages that run natively) never needs it.
                from pybuda.compile import module_to_graph

                captured = module_to_graph(module, values, names)
                runners.append((module, CPUReferenceExecutor(captured.graph, 1)))
                values = list(captured.outputs)
            names = None
        self._runners = runners
        return InputItem(tuple(v.detach() for v in values))

    def forward_one(self, item: InputItem) -> Tuple[torch.Tensor, ...]:
        if self._runners is None:
            raise PybudaError(f"CPUDevice '{self.name}' was not compiled; run initialize_pipeline first")
        values = self._cast_inputs(item.tensors)
        names = item.names
        for module, executor in self._runners:
            self._active_module = module.name  # a failure names the module it happened in
            if executor is None:
                values = list(self._run_module(module, values, names))
            else:
                values = executor.run([v.cpu() for v in values])
            names = None
        return tuple(values)

    def _run_module(self, module: Any, values: Sequence[torch.Tensor],
                    names: Optional[Sequence[str]]) -> Tuple[torch.Tensor, ...]:
        """Run a module that runs natively in torch (GPUDevice moves the values to its GPU here)."""
        return _call_torch(module, values, names)

    def _parameter_values(self) -> Dict[str, torch.Tensor]:
        from pybuda.module import PyBudaModule, PyTorchModule

        out: Dict[str, torch.Tensor] = {}
        if self._runners is not None:
            for module, executor in self._runners:
                if isinstance(module, PyTorchModule):
                    out.update({n: p.detach().clone() for n, p in module.module.named_parameters()})
                elif executor is not None:
                    out.update(executor.get_parameters())
            return out
        for module in self.modules:
            if isinstance(module, PyTorchModule):
                out.update({n: p.detach().clone() for n, p in module.module.named_parameters()})
            elif isinstance(module, PyBudaModule):
                out.update({p.get_name(): p.value() for p in module.get_parameters() if p.has_value()})
        return out

    def _update_parameters(self, values: Mapping[str, torch.Tensor]) -> None:
        from pybuda.module import PyBudaModule, PyTorchModule

        # Find every parameter's owner and check shapes first, so a bad update changes nothing.
        pairs = self._runners if self._runners is not None else [(m, None) for m in self.modules]
        owners: Dict[str, Tuple[Any, Any, Tuple[int, ...]]] = {}
        for module, executor in pairs:
            if executor is not None:
                current = {k: tuple(v.shape) for k, v in executor.get_parameters().items()}
            elif isinstance(module, PyTorchModule):
                current = {k: tuple(p.shape) for k, p in module.module.named_parameters()}
            elif isinstance(module, PyBudaModule):
                current = {p.get_name(): tuple(p.shape.dims) for p in module.get_parameters()}
            else:
                current = {}
            for k, shape in current.items():
                owners.setdefault(k, (module, executor, shape))
        unknown = sorted(set(values) - set(owners))
        if unknown:
            raise InputError(f"CPUDevice '{self.name}' has no parameter(s) {unknown}; it has {sorted(owners)}")
        for k, v in values.items():
            if tuple(v.shape) != owners[k][2]:
                raise InputError(f"CPUDevice '{self.name}': parameter '{k}' has shape {list(owners[k][2])}, "
                                 f"got {list(v.shape)}")
        for k, v in values.items():
            module, executor, _ = owners[k]
            if executor is not None:
                executor.update_parameters({k: v})
            elif isinstance(module, PyTorchModule):
                with torch.no_grad():
                    dict(module.module.named_parameters())[k].copy_(v)
            else:
                module.set_parameter(k, v)


def _low_precision_model(module: Any) -> bool:
    """Whether ``module`` is a PyTorch model holding float16/bfloat16 weights or buffers."""
    from pybuda.module import PyTorchModule

    if not isinstance(module, PyTorchModule):
        return False
    tensors = list(module.module.parameters()) + list(module.module.buffers())
    return any(t.dtype in _LOW_PRECISION for t in tensors)


def _runs_natively(module: Any) -> bool:
    """Framework modules (PyTorch, ONNX, JAX) and CPU-fallback stages run in their own framework; PyBuda
    modules and captured graphs run on the CPU reference."""
    return bool(getattr(module, "runs_natively_on_cpu", True))


def _call_torch(module: Any, values: Sequence[torch.Tensor], names: Optional[Sequence[str]]) -> Tuple[torch.Tensor, ...]:
    from pybuda.module import PyTorchModule

    # Named (dict) pushes become keyword arguments of a PyTorch model; fallback stages take the flat
    # inputs in that same order.
    if names and isinstance(module, PyTorchModule):
        return module.forward(**dict(zip(names, values)))
    return module.forward(*values)
