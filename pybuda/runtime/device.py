"""The Device base class: a device's name, the modules placed on it, its parameters, the run shape it is
compiled for, and how it is pickled into a device process.

Device is assembled from one mixin per job, each in its own module:

* :class:`~pybuda.runtime.device_inputs.DeviceInputs`: pushes and targets, checked in the caller
  (the compile sample, InputError at push time);
* :class:`~pybuda.runtime.device_loop.DeviceCommandLoop`: the command interpreter and the worker loop
  (``run``, ``run_next_command``, RUN_FORWARD and where its outputs go);
* :class:`~pybuda.runtime.cpueval.DeviceCpuEval`: the CPU reference of the modules (``cpueval_forward``,
  ``cpueval_backward``).

Subclasses (:class:`TTDevice`, :class:`CPUDevice`) implement the hooks at the end of the class.
"""

from __future__ import annotations

import logging
import queue
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from pybuda.errors import InputError, ModuleError, PybudaError
from pybuda.runtime import state
from pybuda.runtime.commands import Command, CommandType
from pybuda.runtime.cpueval import DeviceCpuEval
from pybuda.runtime.device_inputs import DeviceInputs
from pybuda.runtime.device_loop import TRAINING_NOT_SUPPORTED, DeviceCommandLoop
# InputItem and normalize_push are imported from here too (training.py, the trainers, tests).
from pybuda.runtime.push import InputItem, normalize_push

log = logging.getLogger(__name__)


class Device(DeviceInputs, DeviceCommandLoop, DeviceCpuEval):
    """A device a module can be placed on: a Tenstorrent chip (:class:`TTDevice`) or the host CPU
    (:class:`CPUDevice`). Devices join the pipeline in creation order (see ``set_device_pipeline``)."""

    def __init__(self, name: str, mp_context: Any = None):
        if not isinstance(name, str) or not name:
            raise PybudaError(f"a device needs a non-empty string name, got {name!r}")
        self.name = name
        self.mp_context = mp_context
        self.modules: List[Any] = []
        self.loss_module: Any = None
        self.cpu_fallback_device_pre: Optional["Device"] = None
        self.cpu_fallback_device_post: Optional["Device"] = None
        self._staging: "queue.Queue[InputItem]" = queue.Queue()
        self._input_queue: Any = self._staging
        self._output_target: Any = None
        self._mirror_queue: Any = None
        self._intermediates_target: Any = None  # where saved intermediates go (the pipeline's queue)
        self._is_last = True
        self._first_inputs: Optional[InputItem] = None
        self._targets: "queue.Queue[InputItem]" = queue.Queue()  # training targets for the loss module
        self._first_targets: Optional[InputItem] = None
        self._stop_fn: Optional[Callable[[], bool]] = None
        self._inputs_closed = False  # got EndOfInputs: no input will come until the next pipeline
        self._end_sent = False  # passed EndOfInputs on to the next device
        self._active_module: Optional[str] = None  # the module running now (named when it fails)
        self._compile_count = 0
        self._fallback_of: Optional["Device"] = None  # set on automatic CPU-fallback devices
        self._translated_modules: Optional[List[Any]] = None  # what runs, when a frontend split the modules
        self._responses: List[Any] = []  # answers to push_to_command_queue, oldest first
        # What run() reads commands from and answers on; a concurrent pipeline gives each worker its own.
        self.command_queue: Any = queue.Queue()
        self.command_queue_resp: Any = queue.Queue()
        self._adopt_compile_config = False  # a spawned device process takes the compile's config as global
        self.output_dir = ""
        self.training = False
        self.microbatch_count = 1
        self._compiled_microbatch_size = 0
        state.register_device(self)

    # --- modules ------------------------------------------------------------------------------------
    def place_module(self, module: Union[Any, Sequence[Any]]) -> None:
        """Place a module, or a list of modules run one after the other, on this device."""
        from pybuda.module import Module

        modules = list(module) if isinstance(module, (list, tuple)) else [module]
        for m in modules:
            if not isinstance(m, Module):
                raise ModuleError(f"device '{self.name}': place_module expects pybuda Modules (wrap torch models "
                                  f"in pybuda.PyTorchModule), got {type(m).__name__}")
            self._check_module_kind(m)
            if any(other.name == m.name for other in self.modules) or \
                    sum(1 for x in modules if x.name == m.name) > 1:
                raise ModuleError(f"device '{self.name}' already has a module named '{m.name}'; names must be unique")
        for m in modules:
            previous = m.get_device()
            if previous is not None and previous is not self:
                log.info("module '%s' moves from device '%s' to '%s'", m.name, previous.name, self.name)
                previous.modules = [x for x in previous.modules if x is not m]
            m._set_device(self)
            self.modules.append(m)
        state.mark_changed()

    def _check_module_kind(self, module: Any) -> None:
        """Subclasses reject module types they cannot run."""

    def remove_modules(self) -> None:
        """Remove every module placed on this device."""
        for m in self.modules:
            if m.get_device() is self:
                m._set_device(None)
        self.modules = []
        state.mark_changed()

    def place_loss_module(self, module: Any) -> None:
        """Place a loss module: training computes it on this device, which must be the last of the pipeline,
        from the device's outputs and the targets pushed with :meth:`push_to_target_inputs`."""
        from pybuda.module import Module

        if not isinstance(module, Module):
            raise ModuleError(f"device '{self.name}': the loss module must be a pybuda Module, got {type(module).__name__}")
        self.loss_module = module
        state.mark_changed()

    def remove_loss_module(self) -> None:
        """Remove the loss module."""
        self.loss_module = None
        state.mark_changed()

    # --- pipeline API on one device ---------------------------------------------------------------------
    def get_parameter_checkpoint(self) -> Dict[str, Any]:
        """Current parameter values of the modules on this device, as pybuda Tensors by name."""
        from pybuda.runtime import context
        from pybuda.tensor import Tensor

        from pybuda.runtime import training

        ctx = context.current()
        session = training.current()
        if session is not None and self in session.devices:
            values = session.parameters_of(self)
        elif ctx is not None and self in ctx.devices:
            values = ctx.request(self, Command(CommandType.GET_PARAMETER_CHECKPOINT))
        else:
            values = self._parameter_values()
        return {k: Tensor.create_from_torch(v) for k, v in values.items()}

    def get_parameter_gradients(self) -> Dict[str, Any]:
        """The gradients accumulated since the last ``run_backward(zero_grad=True)``, as pybuda Tensors by
        parameter name (training only)."""
        from pybuda.runtime import training
        from pybuda.tensor import Tensor

        session = training.current()
        if session is None:
            raise PybudaError(TRAINING_NOT_SUPPORTED)
        return {k: Tensor.create_from_torch(v) for k, v in session.grads_of(self).items()}

    def update_device_parameters(self, parameters: Mapping[str, Any]) -> None:
        """Replace parameter values on this device (by name; shapes must match)."""
        from pybuda.runtime import context
        from pybuda.tensor import _as_torch

        if not isinstance(parameters, Mapping):
            raise InputError(f"device '{self.name}': parameters must be a dict of name -> tensor, "
                             f"got {type(parameters).__name__}")
        values = {}
        for k, v in parameters.items():
            try:
                values[k] = _as_torch(v).detach().clone()
            except InputError as e:
                raise InputError(f"device '{self.name}', parameter '{k}': {e}") from None
        from pybuda.runtime import training

        ctx = context.current()
        session = training.current()
        if session is not None and self in session.devices:
            session.set_parameters_of(self, values)
        elif ctx is not None and self in ctx.devices:
            ctx.request(self, Command(CommandType.UPDATE_DEVICE_PARAMETERS, {"parameters": values}))
        else:
            self._update_parameters(values)

    def compile_for(self, training: bool, microbatch_size: int = 0, microbatch_count: int = 1) -> None:
        """Save the microbatch size and count this device is compiled for (TT-Buda's base ``compile_for``).

        :class:`CPUDevice` and :class:`TTDevice` override it with ``compile_for(inputs, compiler_cfg, ...)``,
        which compiles; they call this to record the run shape. ``training`` is kept for the training loop."""
        for label, value, least in (("microbatch_size", microbatch_size, 0), ("microbatch_count", microbatch_count, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InputError(f"device '{self.name}': {label} must be an int >= {least}, got {value!r}")
        self.training = bool(training)
        self.microbatch_count = microbatch_count
        self._compiled_microbatch_size = microbatch_size

    def _compile_for_inputs(self, inputs: Sequence[Any], compiler_cfg: Any = None, targets: Sequence[Any] = (),
                            microbatch_size: int = 0, microbatch_count: int = 1,
                            verify_cfg: Any = None) -> Tuple[Any, ...]:
        """Compile the modules on this device for ``inputs`` (dim 0 is the microbatch) and return the output
        tensors for them (pybuda Tensors: shapes and formats for the next device), as in TT-Buda.

        ``compiler_cfg`` defaults to the global config. ``microbatch_size``, when given, must equal dim 0 of
        the inputs. ``targets`` are for training pipelines (``initialize_pipeline(training=True)``).
        """
        from pybuda.config import _get_global_compiler_config
        from pybuda.tensor import Tensor

        if targets:
            raise PybudaError(TRAINING_NOT_SUPPORTED)
        item = self.validate_push(normalize_push(tuple(inputs), self.name)) if self._first_inputs is None else \
            normalize_push(tuple(inputs), self.name)
        if microbatch_size and item.tensors and item.tensors[0].dim() and \
                int(item.tensors[0].shape[0]) != int(microbatch_size):
            raise InputError(f"device '{self.name}': microbatch_size={microbatch_size}, but dim 0 of the inputs "
                             f"(the microbatch) is {int(item.tensors[0].shape[0])}")
        mb = item.microbatch
        Device.compile_for(self, False, microbatch_size or mb, microbatch_count)
        outputs = self._compile_sample(item, compiler_cfg or _get_global_compiler_config(), verify_cfg,
                                       want_outputs=True)
        return tuple(Tensor.create_from_torch(t) for t in (outputs.tensors if outputs is not None else ()))

    # --- what subclasses implement -------------------------------------------------------------------
    def _compile_sample(self, sample: InputItem, config: Any, verify_cfg: Any = None,
                        want_outputs: bool = True) -> Optional[InputItem]:
        """Prepare to run pushes shaped like ``sample``; return sample outputs for the next device.

        ``want_outputs=False`` (the last device of a pipeline) lets a device skip computing them and
        return None."""
        raise NotImplementedError

    def forward_one(self, item: InputItem) -> Tuple[torch.Tensor, ...]:
        """Run one push through the modules on this device."""
        raise NotImplementedError

    def _parameter_values(self) -> Dict[str, torch.Tensor]:
        raise NotImplementedError

    def _update_parameters(self, values: Mapping[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def shutdown_device(self) -> None:
        """Release what the device holds after the pipeline stops (executors)."""

    # --- pickling into a device process -----------------------------------------------------------------
    _TRANSIENT = ("_staging", "_targets", "cpu_fallback_device_pre", "cpu_fallback_device_post", "_fallback_of", "_stop_fn",
                  "_artifact", "_runners", "command_queue", "command_queue_resp")

    def __getstate__(self) -> Dict[str, Any]:
        st = self.__dict__.copy()
        for key in self._TRANSIENT:
            if key in st:
                st[key] = None
        return st

    def __setstate__(self, st: Dict[str, Any]) -> None:
        self.__dict__.update(st)
        self._staging = queue.Queue()
        self._targets = queue.Queue()

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self.name}', modules={[m.name for m in self.modules]})"
