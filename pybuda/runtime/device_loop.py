"""How a device runs: its command interpreter and worker loop (TT-Buda's per-device process main loop).

A device executes :class:`~pybuda.runtime.commands.Command` objects in ``run_next_command``: inline
in the caller (sequential mode) or in a worker thread/process that takes them from a command queue
(``get_next_command``). RUN_FORWARD pops one input per loop, runs the device's modules, and pushes
the outputs to the next device's input queue, or, on the last device, to the output queue as a list
of :class:`pybuda.Tensor`. In a worker, an :class:`~pybuda.runtime.transport.EndOfInputs` marker
(a graceful shutdown) ends the run early: the inputs it waits for were never pushed. A device
records which module it is running, so a failure names it (:meth:`Device.module_label`).
"""

from __future__ import annotations

import os
import queue
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from pybuda.errors import InputError, PybudaError
from pybuda.runtime.commands import Command, CommandType
from pybuda.runtime.push import (_TRAINING_DIRECTIONS, InputItem, Rejected, _check_direction, _check_loop_count,
                                 _check_write_index)
from pybuda.runtime.transport import EndOfInputs, ShutdownRequested, get_item, is_end_of_inputs, put_item

TRAINING_NOT_SUPPORTED = ("no training pipeline is running: call initialize_pipeline(training=True) or "
                          "run_training first")


class _InputsClosed(Exception):
    """Inside a device: the input a run waits for will never come (EndOfInputs was received)."""


class DeviceCommandLoop:
    """The command side of :class:`~pybuda.runtime.device.Device`: the run loop, the command interpreter and
    where a run's outputs go. It calls the hooks Device's subclasses implement (``forward_one``,
    ``_compile_sample``, ``_parameter_values``, ``_update_parameters``) and uses the queues and targets
    ``Device.__init__`` sets up (``command_queue``, ``_input_queue``, ``_output_target`` …)."""

    # --- the per-device run loop (TT-Buda's process main loop) -----------------------------------------
    def sync(self) -> None:
        """Block until commands sent to this device have completed."""
        from pybuda.runtime import context

        ctx = context.current()
        if ctx is not None and self in ctx.devices:
            ctx.request(self, Command.sync())

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
