"""The Device base class: modules placed on it, its input buffer, and the command interpreter.

Pushing inputs
--------------
``push_to_inputs`` takes ``*tensors``, one tuple/list, or one dict (its keys name the first module's
forward arguments). Every push is checked in the caller before it is queued, so a bad push raises
:class:`pybuda.errors.InputError` at once instead of hanging a device later (tt-buda#56):

* the first push is checked against the first module's ``forward`` signature (argument count, dict
  keys) and becomes the **compile sample** (``_first_inputs``), as in TT-Buda;
* every later push must match it: same count (same keys for dicts), same shapes, same dtypes.
  Dim 0 is the microbatch size, so it must match too (a TT device is compiled for that microbatch).

Pushes go to ``cpu_fallback_device_pre`` when the frontend moved the start of the model to a CPU
device. Values are detached, made contiguous and stored as torch tensors.

Running
-------
A device executes :class:`~pybuda.runtime.commands.Command` objects in ``run_next_command``: inline
in the caller (sequential mode) or in a worker thread/process that takes them from a command queue
(``get_next_command``). RUN_FORWARD pops one input per loop, runs the device's modules, and pushes
the outputs to the next device's input queue, or, on the last device, to the output queue as a list
of :class:`pybuda.Tensor`. In a worker, an :class:`~pybuda.runtime.transport.EndOfInputs` marker
(a graceful shutdown) ends the run early: the inputs it waits for were never pushed. A device
records which module it is running, so a failure names it (:meth:`Device.module_label`).
"""

from __future__ import annotations

import logging
import os
import queue
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from pybuda.errors import InputError, ModuleError, PybudaError
from pybuda.runtime import state
from pybuda.runtime.commands import Command, CommandType
from pybuda.runtime.push import (_TRAINING_DIRECTIONS, InputItem, Rejected, _check_direction,
                                 _check_loop_count, _check_write_index, check_against_signature, normalize_push)
from pybuda.runtime.transport import EndOfInputs, ShutdownRequested, get_item, is_end_of_inputs, put_item

log = logging.getLogger(__name__)

TRAINING_NOT_SUPPORTED = ("no training pipeline is running: call initialize_pipeline(training=True) or "
                          "run_training first")


class _InputsClosed(Exception):
    """Inside a device: the input a run waits for will never come (EndOfInputs was received)."""


class Device:
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

    # --- inputs -----------------------------------------------------------------------------------
    def push_to_inputs(self, *tensors: Any) -> None:
        """Push one input (``*tensors``, a tuple, or a dict of named tensors) onto this device.

        Validated at once against the first push (the compile sample): a wrong count, key, shape or
        dtype raises InputError here. If the pipeline has failed, raises RuntimeFailure.
        """
        if self.cpu_fallback_device_pre is not None:
            return self.cpu_fallback_device_pre.push_to_inputs(*tensors)
        from pybuda.runtime import context

        ctx = context.current()
        if ctx is not None:
            ctx.check_health()
            if self in ctx.devices and ctx.devices[0] is not self:
                raise InputError(f"device '{self.name}' is not the first device of the running pipeline; push "
                                 f"inputs to '{ctx.devices[0].name}'")
        item = self.validate_push(normalize_push(tensors, self.name))
        if self._first_inputs is None:
            self._first_inputs = item
        put_item(self._input_queue, item)
        if ctx is not None and ctx.devices and ctx.devices[0] is self:
            ctx.note_push()  # the pipeline counts the outputs it owes (OutputQueue.get never hangs)

    def validate_push(self, item: InputItem) -> InputItem:
        """Check ``item`` against the first push (or, for the first push, the module signature).

        Returns the item as it will be queued (dict inputs in the first push's order)."""
        first = self._first_inputs
        if first is None:
            if self.modules:
                item = check_against_signature(self.modules[0], item, self.name)
            self._check_first_push(item)
            return item
        expected = first.describe()
        if first.names is not None and item.names is not None:
            if set(item.names) != set(first.names) or len(item.names) != len(first.names):
                raise InputError(f"device '{self.name}': pushed keys {list(item.names)}, but the first push "
                                 f"(the compile sample) had {list(first.names)}")
            lookup = dict(zip(item.names, item.tensors))
            item = InputItem(tuple(lookup[k] for k in first.names), first.names)
        elif first.names is None and item.names is not None:
            raise InputError(f"device '{self.name}': pushed a dict {list(item.names)}, but the first push was "
                             f"positional ({expected}); push tensors in the same form")
        if len(item.tensors) != len(first.tensors):
            raise InputError(f"device '{self.name}': pushed {len(item.tensors)} tensor(s), but every push must "
                             f"have {len(first.tensors)} like the first push ({expected})")
        labels = first.names or tuple(str(i) for i in range(len(first.tensors)))
        for label, got, want in zip(labels, item.tensors, first.tensors):
            if tuple(got.shape) != tuple(want.shape):
                hint = ""
                if got.dim() == want.dim() and got.dim() and tuple(got.shape[1:]) == tuple(want.shape[1:]):
                    hint = (f"; dim 0 is the microbatch size, and this pipeline was compiled for microbatch "
                            f"{want.shape[0]}")
                raise InputError(f"device '{self.name}': input {label} has shape {list(got.shape)}, expected "
                                 f"{list(want.shape)} (from the first push){hint}")
            if got.dtype != want.dtype:
                raise InputError(f"device '{self.name}': input {label} has dtype {got.dtype}, expected "
                                 f"{want.dtype} (from the first push)")
        return InputItem(item.tensors, first.names)

    def _check_first_push(self, item: InputItem) -> None:
        """Extra rules for the compile sample (TTDevice: a common microbatch dim)."""

    def set_sample_inputs(self, sample: Any) -> None:
        """Use ``sample`` (as for push_to_inputs) as the compile sample without queueing it.

        If inputs were already pushed, the sample must match them."""
        if self.cpu_fallback_device_pre is not None:
            return self.cpu_fallback_device_pre.set_sample_inputs(sample)
        args = (sample,) if isinstance(sample, (Mapping, torch.Tensor, np.ndarray)) else tuple(sample)
        item = self.validate_push(normalize_push(args, self.name))
        if self._first_inputs is None:
            self._first_inputs = item

    def reset_inputs(self) -> None:
        """Forget the compile sample and drop queued inputs (the next push becomes the sample).

        CPU-fallback devices from the last initialization are detached: the next pipeline splits the
        model again for the new sample."""
        self._first_inputs = None
        _drain(self._staging)
        _drain(self._targets)
        self._first_targets = None
        self.cpu_fallback_device_pre = None
        self.cpu_fallback_device_post = None
        self._translated_modules = None

    def first_input_item(self) -> Optional[InputItem]:
        """The compile sample: the first push (or the sample given to initialize_pipeline), or None."""
        if self.cpu_fallback_device_pre is not None:
            return self.cpu_fallback_device_pre.first_input_item()
        return self._first_inputs

    def get_first_inputs(self, peek: bool = False) -> Optional[Tuple[int, Tuple[torch.Tensor, ...]]]:
        """TT-Buda's form of the compile sample: ``(microbatch size, first input)``, or None before the first
        push. The first input stays the compile sample either way (``peek`` is accepted for TT-Buda's
        signature: nothing here consumes it)."""
        item = self.first_input_item()
        if item is None:
            return None
        return self.microbatch_size or 1, tuple(item.tensors)

    def get_first_targets(self) -> Optional[Tuple[torch.Tensor, ...]]:
        """The first targets pushed (the compile sample of the loss module), or None."""
        return tuple(self._first_targets.tensors) if self._first_targets is not None else None

    @property
    def microbatch_size(self) -> Optional[int]:
        """Dim 0 of the compile sample (TT-Buda's microbatch), or None before the first push."""
        first = self.first_input_item()
        if first is None or not first.tensors or first.tensors[0].dim() == 0:
            return None
        return int(first.tensors[0].shape[0])

    def push_to_target_inputs(self, *tensors: Any) -> None:
        """Push the targets of one input (``*tensors`` or a tuple) for this device's loss module.

        Validated at once against the first targets pushed: a wrong count, shape or dtype raises InputError
        here, and a device without a loss module refuses targets."""
        if self.loss_module is None:
            raise InputError(f"device '{self.name}' has no loss module: place one with place_loss_module on the last "
                             f"device and push targets there")
        item = normalize_push(tensors, self.name)
        first = self._first_targets
        if first is not None:
            want = [(tuple(t.shape), t.dtype) for t in first.tensors]
            got = [(tuple(t.shape), t.dtype) for t in item.tensors]
            if want != got:
                raise InputError(f"device '{self.name}': targets {item.describe()} do not match the first targets "
                                 f"pushed ({first.describe()}); every push must have the same shapes and dtypes")
        else:
            self._first_targets = item
        self._targets.put(item)

    # --- pipeline API on one device ---------------------------------------------------------------------
    def sync(self) -> None:
        """Block until commands sent to this device have completed."""
        from pybuda.runtime import context

        ctx = context.current()
        if ctx is not None and self in ctx.devices:
            ctx.request(self, Command.sync())

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
        mb = int(item.tensors[0].shape[0]) if item.tensors and item.tensors[0].dim() else 1
        Device.compile_for(self, False, microbatch_size or mb, microbatch_count)
        outputs = self._compile_sample(item, compiler_cfg or _get_global_compiler_config(), verify_cfg,
                                       want_outputs=True)
        return tuple(Tensor.create_from_torch(t) for t in (outputs.tensors if outputs is not None else ()))

    # --- the per-device run loop (TT-Buda's process main loop) -----------------------------------------
    def forward(self, loop_count: int) -> None:
        """Run the forward pass of each module on this device, in order, for ``loop_count`` queued inputs
        (micro-batches): each is taken from this device's input queue and its outputs go to the next device,
        or from the last device to the output queue. The device must be in a running pipeline
        (``initialize_pipeline``); calling it on every device in pipeline order is ``run_forward``."""
        from pybuda.runtime import context

        _check_loop_count(self.name, "forward", loop_count)
        context.require_pipeline(self, "forward").run_device(self, Command.run_forward(loop_count))

    def generate(self, loop_count: int, write_index: int) -> None:
        """Run the generative forward pass of each module on this device, in order, for ``loop_count`` queued
        inputs; ``write_index`` (>= 0) is where past-cache buffers are written.

        Compiled graphs here keep no past cache on the device (a decoder takes its cache as inputs and returns
        it as outputs), so after the check the inputs run as :meth:`forward`."""
        _check_write_index(self.name, write_index)
        self.forward(loop_count)

    def run(self, output_dir: str = "") -> bool:
        """Main loop of this device's worker in concurrent mode: take commands from ``command_queue`` and run
        them (answers go to ``command_queue_resp``) until a QUIT command (returns True). Shutting the
        pipeline down ends the wait for the next command (:class:`~pybuda.runtime.transport.ShutdownRequested`).

        ``output_dir`` is where this device writes its files (created if missing; TT-Buda's perf-trace dir)."""
        if output_dir:
            try:
                os.makedirs(output_dir, exist_ok=True)
            except OSError as e:
                raise InputError(f"device '{self.name}': cannot create output_dir '{output_dir}': {e}") from None
            self.output_dir = output_dir
        while True:
            cmd = self.get_next_command(self.command_queue)
            if cmd.command_type == CommandType.QUIT:
                self.close_outputs()  # the next device may wait for inputs this one will never send
                return True
            if self._adopt_compile_config and cmd.command_type == CommandType.COMPILE and \
                    cmd.params.get("config") is not None:
                from pybuda.config import _set_global_compiler_config

                _set_global_compiler_config(cmd.params["config"])  # a spawned child starts with defaults
            result = self.run_next_command(cmd)
            if cmd.needs_response:
                put_item(self.command_queue_resp, result)

    def dc_transfer_thread(self, direction: str, direction_queue: Any) -> int:
        """Keep transferring data in ``direction`` (one thread per direction): every request taken from
        ``direction_queue`` is one :meth:`dc_transfer`; ``None`` (or a shutdown) ends the loop. Returns the
        number of transfers made."""
        _check_direction(self.name, direction)
        done = 0
        while True:
            try:
                request = get_item(direction_queue, stop=self._stop_fn)
            except ShutdownRequested:
                return done
            if request is None or is_end_of_inputs(request):
                return done
            self.dc_transfer(direction)
            done += 1

    def push_to_command_queue(self, cmd: Command) -> None:
        """Send ``cmd`` to this device in the running pipeline (its worker, or inline in sequential mode); a
        command with a response is answered at once and kept for :meth:`get_command_queue_response`."""
        from pybuda.runtime import context

        if not isinstance(cmd, Command):
            raise InputError(f"device '{self.name}': push_to_command_queue takes a pybuda Command, got "
                             f"{type(cmd).__name__}")
        ctx = context.current()
        if ctx is None or self not in ctx.devices:
            raise PybudaError(f"device '{self.name}' is not part of a running pipeline; call "
                              f"initialize_pipeline first")
        if cmd.needs_response:
            self._responses.append(ctx.request(self, cmd))
        elif ctx.mode == "sequential":
            self.run_next_command(cmd)
        else:
            ctx.send(self, cmd)

    def get_command_queue_response(self) -> Optional[Any]:
        """The response to the oldest command pushed with :meth:`push_to_command_queue` that has one, or None
        when there is none (TT-Buda blocked here; every response here is ready when its push returns)."""
        return self._responses.pop(0) if self._responses else None

    def dc_transfer(self, direction: str) -> None:
        """Make sure everything this device has produced in ``direction`` has reached its neighbour.

        Data moves between devices inside each device's run here (no separate transfer threads), so this
        waits for the device's queued commands (``sync``). ``backward``/``target`` directions are training."""
        _check_direction(self.name, direction)
        if direction in _TRAINING_DIRECTIONS:
            from pybuda.runtime import training

            if training.current() is None:
                raise PybudaError(TRAINING_NOT_SUPPORTED)
            return  # training runs in the caller's thread: every transfer has completed when a call returns
        self.sync()

    # --- CPU reference of the device's modules (verification) -------------------------------------------
    def cpueval_forward(self, inputs: Sequence[Any], parameters: Mapping[str, Any], save_for_backward: bool,
                        targets: Sequence[Any] = ()) -> List[torch.Tensor]:
        """Evaluate the forward pass of this device's modules on the CPU for verification: PyTorch modules
        natively, PyBuda modules with the op registry's torch references.

        ``inputs``: one input (one tensor per ordered input). ``parameters``: ``{name: tensor}`` values used in
        place of the modules' own for this evaluation only (unknown names raise InputError). With a loss module
        and ``targets``, the loss is evaluated on the outputs and returned instead. ``save_for_backward`` keeps
        the inputs and outputs (``saved_for_backward``) and records the evaluation for :meth:`cpueval_backward`."""
        from pybuda.tensor import _as_torch

        values = [_as_torch(t).detach() for t in inputs]
        params = {k: _as_torch(v).detach() for k, v in (parameters or {}).items()}
        modules = self._translated_modules if self._translated_modules is not None else self.modules
        if not modules:
            raise PybudaError(f"device '{self.name}' has no modules; place one with place_module")
        everything = list(modules) + ([self.loss_module] if self.loss_module is not None else [])
        known: Dict[str, torch.Tensor] = {}
        for module in everything:
            known.update(_module_parameters(module))
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise InputError(f"device '{self.name}': cpueval_forward got unknown parameter(s) {unknown}; the "
                             f"modules have {sorted(known)}")
        if targets and self.loss_module is None:
            raise InputError(f"device '{self.name}' has no loss module: cpueval_forward got targets")
        if save_for_backward:
            # Leaves autograd differentiates against: the inputs (floating point) and every parameter.
            values = [v.clone().requires_grad_(v.is_floating_point()) for v in values]
            params = {k: params.get(k, v).detach().clone().float().requires_grad_(True) for k, v in known.items()}
        inputs_used = list(values)
        with torch.set_grad_enabled(save_for_backward):
            outputs = list(values)
            for module in modules:
                self._active_module = module.name
                outputs = _eval_module_on_cpu(module, outputs, params)
            if targets:
                self._active_module = self.loss_module.name
                outputs = _eval_module_on_cpu(self.loss_module,
                                              outputs + [_as_torch(t).detach() for t in targets], params)
        self._active_module = None
        if save_for_backward:
            self._cpueval_graph = (inputs_used, params, outputs)
            self.saved_for_backward = ([v.detach() for v in inputs_used], [o.detach() for o in outputs])
        return [o.detach() for o in outputs]

    def cpueval_backward(self, bw_inputs: Sequence[Any], parameters: Mapping[str, Any]
                         ) -> Tuple[List[Optional[torch.Tensor]], Dict[str, torch.Tensor]]:
        """Evaluate the backward pass of the last :meth:`cpueval_forward` (which needs
        ``save_for_backward=True``) for verification, with torch autograd.

        ``bw_inputs``: the gradient of each forward output (for a loss, its gradient: usually 1). Returns the
        gradients of the ordered inputs (None for an input that is not floating point) and ``{name:
        gradient}`` of every parameter (zeros for one the outputs do not depend on). ``parameters`` must name
        the values the forward used, if given: the forward decided them."""
        from pybuda.tensor import _as_torch

        saved = getattr(self, "_cpueval_graph", None)
        if saved is None:
            raise PybudaError(f"device '{self.name}': cpueval_backward needs a cpueval_forward with "
                              f"save_for_backward=True first")
        inputs, params, outputs = saved
        unknown = sorted(set(parameters or {}) - set(params))
        if unknown:
            raise InputError(f"device '{self.name}': cpueval_backward got unknown parameter(s) {unknown}")
        grads_out = [_as_torch(g).detach().to(o.dtype) for g, o in zip(bw_inputs, outputs)]
        if len(grads_out) != len(outputs):
            raise InputError(f"device '{self.name}': cpueval_backward takes one gradient per forward output "
                             f"({len(outputs)}), got {len(list(bw_inputs))}")
        grads_out = [g.expand_as(o) if g.shape != o.shape else g for g, o in zip(grads_out, outputs)]
        leaves = [t for t in inputs if t.requires_grad] + list(params.values())
        found = torch.autograd.grad(outputs, leaves, grads_out, allow_unused=True)
        it = iter(found)
        input_grads = [next(it) if t.requires_grad else None for t in inputs]
        input_grads = [torch.zeros_like(t) if g is None and t.requires_grad else g for t, g in zip(inputs, input_grads)]
        param_grads = {k: (g if g is not None else torch.zeros_like(v)).detach()
                       for (k, v), g in zip(params.items(), it)}
        self._cpueval_graph = None  # the graph is freed: one backward per saved forward, as in torch
        return [g.detach() if g is not None else None for g in input_grads], param_grads

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

    # --- command interpreter -------------------------------------------------------------------------
    def get_next_command(self, command_queue: Any) -> Command:
        """Wait for the next command (polling, so a shutdown ends the wait)."""
        return get_item(command_queue, stop=self._stop_fn)

    def run_next_command(self, cmd: Command) -> Any:
        """Execute one command; returns the response of commands that have one."""
        t = cmd.command_type
        self._active_module = None
        if t == CommandType.RUN_FORWARD:
            self._run_forward(int(cmd.params.get("loop_count", 1)))
            return None
        if t == CommandType.COMPILE:
            self._compile_count += 1
            return self._compile_sample(cmd.params["sample"], cmd.params.get("config"), cmd.params.get("verify_cfg"),
                                        want_outputs=cmd.params.get("want_outputs", True))
        if t == CommandType.SYNC:
            return True
        if t == CommandType.GET_QUEUES:
            return self.tap_info()
        if t == CommandType.GET_PARAMETER_CHECKPOINT:
            return self._parameter_values()
        if t == CommandType.UPDATE_DEVICE_PARAMETERS:
            try:
                self._update_parameters(cmd.params["parameters"])
            except InputError as e:  # bad names/shapes: nothing was changed, the device keeps running
                return Rejected(e)
            return True
        if t in (CommandType.RUN_BACKWARD, CommandType.RUN_OPTIMIZER, CommandType.RUN_SCHEDULERS,
                 CommandType.GET_PARAMETER_GRADIENTS):
            raise PybudaError(TRAINING_NOT_SUPPORTED)
        if t == CommandType.QUIT:
            return None
        raise PybudaError(f"device '{self.name}': unknown command {cmd!r}")

    def module_label(self) -> Optional[str]:
        """The module that was running when this device last failed (all its modules' names, comma
        separated, when the device does not say which); None for a device without modules."""
        if self._active_module is not None:
            return self._active_module
        modules = self._translated_modules if self._translated_modules is not None else self.modules
        return ", ".join(m.name for m in modules) or None

    def _pop_input(self) -> InputItem:
        if self._stop_fn is None:  # sequential: inputs were counted before the run started
            try:
                return self._input_queue.get_nowait()
            except queue.Empty:
                raise InputError(f"device '{self.name}' has no queued input to run; push inputs first") from None
        if self._inputs_closed:
            raise _InputsClosed()
        item = get_item(self._input_queue, stop=self._stop_fn)
        if is_end_of_inputs(item):
            self._inputs_closed = True
            raise _InputsClosed()
        return item

    def _run_forward(self, loop_count: int) -> None:
        i = 0
        try:
            while loop_count == 0 or i < loop_count:
                item = self._pop_input()
                outputs = self.forward_one(item)
                self._emit_intermediates()
                self._emit(outputs)
                i += 1
        except _InputsClosed:
            # The pipeline is shutting down and the inputs this run waits for were never pushed: end the
            # run (its outputs were never owed) and let the next device end its run the same way.
            self.close_outputs()

    def take_intermediates(self) -> List[Tuple[str, torch.Tensor]]:
        """``(op name, value)`` of the ops tapped in the last run (TTDevice; other devices save none)."""
        return []

    def tap_info(self) -> Dict[str, List[str]]:
        """``{"tapped": ops saved to the intermediates queue, "ops": every op of the compiled graphs}``."""
        return {"tapped": [], "ops": []}

    def _emit_intermediates(self) -> None:
        taps = self.take_intermediates()
        if not taps or getattr(self, "_intermediates_target", None) is None:
            return
        from pybuda.runtime.transport import Intermediates
        from pybuda.tensor import Tensor

        put_item(self._intermediates_target,
                 Intermediates([n for n, _ in taps], [Tensor.create_from_torch(v.detach()) for _, v in taps]))

    def close_outputs(self) -> None:
        """Tell the next device that no more inputs will come from this one (once per pipeline)."""
        if self._is_last or self._end_sent or self._output_target is None:
            return
        self._end_sent = True
        put_item(self._output_target, EndOfInputs())

    def _emit(self, outputs: Sequence[torch.Tensor]) -> None:
        if self._output_target is None:
            raise PybudaError(f"device '{self.name}' is not connected to a pipeline")
        outputs = tuple(o.detach() for o in outputs)
        if self._is_last:
            from pybuda.tensor import Tensor

            put_item(self._output_target, [Tensor.create_from_torch(o) for o in outputs])
        else:
            put_item(self._output_target, InputItem(outputs))
            if self._mirror_queue is not None:
                from pybuda.tensor import Tensor

                put_item(self._mirror_queue, [Tensor.create_from_torch(o) for o in outputs])

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


def _module_parameters(module: Any) -> Dict[str, torch.Tensor]:
    from pybuda.module import PyBudaModule, PyTorchModule

    if isinstance(module, PyTorchModule):
        return {n: p.detach() for n, p in module.module.named_parameters()}
    if isinstance(module, PyBudaModule):
        return {p.get_name(): p.value() for p in module.get_parameters() if p.has_value()}
    return {}


def _eval_module_on_cpu(module: Any, values: List[torch.Tensor], params: Mapping[str, torch.Tensor]
                        ) -> List[torch.Tensor]:
    """One module's CPU reference on ``values``, with ``params`` overriding its parameters by name (autograd
    follows when grad mode is on)."""
    from pybuda.module import PyBudaModule, PyTorchModule

    if isinstance(module, PyTorchModule):
        own = dict(module.module.named_parameters())
        out = torch.func.functional_call(module.module, {k: v for k, v in params.items() if k in own},
                                         tuple(values))
        return _flat_outputs(out)
    if isinstance(module, PyBudaModule) or hasattr(module, "to_graph") or hasattr(module, "graph"):
        from pybuda.compile import module_to_graph

        with torch.no_grad():
            captured = module_to_graph(module, [v.detach() for v in values])
        return _eval_graph(captured.graph, values, params)
    return _flat_outputs(module.forward(*values))


def _eval_graph(graph: Any, inputs: Sequence[torch.Tensor], params: Mapping[str, torch.Tensor]
                ) -> List[torch.Tensor]:
    """``graph`` on the op registry's torch references, differentiable (``verify.run_graph_on_cpu`` is not)."""
    from pybuda.ir.graph import CONSTANT, INPUT, OP, OUTPUT, PARAMETER
    from pybuda.ops import registry

    values: Dict[str, torch.Tensor] = dict(zip((n.name for n in graph.inputs), inputs))
    outputs: List[torch.Tensor] = []
    for node in graph:
        if node.kind in (PARAMETER, CONSTANT):
            values[node.name] = params.get(node.name, graph.tensors.get(node.name))
        elif node.kind == OP:
            values[node.name] = registry.evaluate(node.op_type, [values[o] for o in node.operands], node.attrs)
        elif node.kind == OUTPUT:
            outputs.append(values[node.operands[0]])
        elif node.kind != INPUT:
            raise PybudaError(f"graph '{graph.name}': cannot evaluate node '{node.name}' of kind {node.kind}")
    return outputs


def _flat_outputs(out: Any) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [v for v in out.values() if isinstance(v, torch.Tensor)]
    if isinstance(out, (list, tuple)):
        flat: List[torch.Tensor] = []
        for o in out:
            flat.extend(_flat_outputs(o))
        return flat
    from pybuda.tensor import Tensor

    if isinstance(out, Tensor):
        return [out.value()]
    raise PybudaError(f"a module returned {type(out).__name__}; expected tensors")


def _drain(q: Any) -> List[Any]:
    items = []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items
