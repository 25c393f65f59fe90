"""RunContext: one initialized pipeline of devices, how it runs, and how it stops.

Execution modes
---------------
* **sequential**: every command runs inline in the caller through ``Device.run_next_command``; no
  threads, no processes. Chosen by ``_sequential=True``, ``PYBUDA_FORCE_SEQUENTIAL=1``, or, as in
  TT-Buda, whenever a TTDevice is Golden (the simulated chip; always the case here) unless
  ``PYBUDA_FORCE_CONCURRENT=1``. An exception raised by a device's module reaches the caller as
  :class:`pybuda.errors.RuntimeFailure` naming the device and the module, with the original exception
  as its ``__cause__`` (as in concurrent mode); pybuda's own errors pass through unchanged.
* **concurrent**: one worker per device, a ``torch.multiprocessing`` *spawn* process (the default;
  scripts need an ``if __name__ == "__main__":`` guard) or a thread (``PYBUDA_FORCE_THREADS=1``). The
  worker loops get command → run command. ``run_forward`` returns at once; devices block on their
  input queues. Outputs of the last device reach the output queue (in process mode through a host
  thread that drains an internal queue, so no child ever blocks on a full pipe).

Failure and shutdown (concurrent)
---------------------------------
A worker that raises reports ``(device, type, message, traceback text, exception)`` on the error
queue and sets the shared shutdown event. Every host-side wait (responses, ``output_queue.get``,
``sync``, pushes) polls the error queue and the workers' liveness between short slices, so the
failure surfaces in the caller as :class:`pybuda.errors.RuntimeFailure` carrying the device's
traceback text; then every worker is stopped: processes get ~2 s and are terminated, then killed.
A normal ``shutdown`` puts :class:`~pybuda.runtime.transport.EndOfInputs` behind the last pushed
input, so a device waiting for an input that was never pushed ends that run, and sends QUIT device
by device in pipeline order: queued work that has its inputs finishes first, within
:data:`GRACEFUL_QUIT_S` in all; then stragglers are stopped the same way. Ctrl-C during that wait
stops them at once. ``shutdown`` is idempotent; at interpreter exit (``atexit``, e.g. after Ctrl-C)
it skips the graceful phase, since nobody is left to read outputs. The public ``pybuda.shutdown()``
also drops inputs that were pushed and not run, so none is consumed by a later pipeline.

Outputs owed
------------
The context counts inputs pushed to the first device, inputs asked for by ``run_forward`` and
outputs put on the :class:`~pybuda.runtime.transport.OutputQueue`. ``output_queue.get()`` waits only
while an output is owed (an input both pushed and asked for, not yet delivered); otherwise it raises
:class:`pybuda.errors.NoMoreOutputs` at once, in every mode and whatever other threads exist. The
same count makes ``sync`` and other device requests raise instead of queueing behind a run that
waits for inputs nobody pushed.

Host death
----------
A device process exits the moment the host dies (see :mod:`pybuda.runtime.worker`, which holds what
runs inside a worker). In process mode the host installs a SIGTERM handler (only over the default
action, never over the user's own) that stops the device processes and then terminates the host as
the default action would.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pybuda.errors import InputError, NoMoreOutputs, PybudaError, RuntimeFailure
from pybuda.runtime.commands import Command, CommandType
from pybuda.runtime.transport import (POLL_S, EndOfInputs, Intermediates, OutputQueue, close_mp_queue, get_item,
                                      is_end_of_inputs, is_mp_queue, put_item)
from pybuda.runtime.worker import describe_process_exit, device_failure, process_main, worker_main

log = logging.getLogger(__name__)

SEQUENTIAL, THREADS, PROCESSES = "sequential", "threads", "processes"

#: How long a normal shutdown lets the workers finish queued work that has its inputs (all together).
GRACEFUL_QUIT_S = 60.0
#: After the shutdown event is set: how long the workers get before they are terminated (then killed).
STOP_GRACE_S = 2.0

_lock = threading.RLock()
_current: Optional["RunContext"] = None
_last_error: Optional[BaseException] = None


def current() -> Optional["RunContext"]:
    """The current pipeline (also after it failed, until shutdown or the next initialize)."""
    return _current


def set_current(ctx: Optional["RunContext"]) -> None:
    global _current
    with _lock:
        _current = ctx


def last_error() -> Optional[BaseException]:
    """The error that stopped the last pipeline, if any (``pybuda.error_raised``)."""
    return _last_error


def clear_error() -> None:
    global _last_error
    _last_error = None


def _record_error(err: BaseException) -> None:
    global _last_error
    _last_error = err


def require_pipeline(device: Any, what: str) -> "RunContext":
    """The running pipeline ``device`` belongs to; PybudaError naming ``what`` otherwise."""
    ctx = _current
    if ctx is None or ctx.closed or device not in ctx.devices:
        raise PybudaError(f"device '{device.name}'.{what}: the device is not part of a running pipeline; call "
                          f"initialize_pipeline (or run_inference) first")
    return ctx


def shutdown_current(*, clear_inputs: bool = False, fast: bool = False) -> None:
    """Stop the current pipeline (if any) and forget it. Safe to call any number of times.

    ``clear_inputs``: drop inputs pushed and not run (the user's ``shutdown``); otherwise they stay
    queued for the pipeline that replaces this one. ``fast``: no graceful phase (exit, SIGTERM)."""
    global _current
    with _lock:
        ctx, _current = _current, None
    if ctx is not None:
        ctx.shutdown(clear_inputs=clear_inputs, fast=fast)


def _atexit_shutdown() -> None:
    # Nobody can read outputs once the interpreter exits (normally, or after Ctrl-C): stop the devices
    # at once instead of letting busy ones finish their queued work.
    try:
        shutdown_current(clear_inputs=True, fast=True)
    except Exception:  # pragma: no cover - never let interpreter exit fail
        log.exception("pybuda shutdown at exit failed")


atexit.register(_atexit_shutdown)

_sigterm_previous: Any = None


def _on_sigterm(signum: int, frame: Any) -> None:
    """The host's SIGTERM handler (process mode): stop the device processes, then act as the handler
    this one replaced would have (the default action: terminate)."""
    try:
        shutdown_current(clear_inputs=True, fast=True)
    finally:
        previous = _sigterm_previous if _sigterm_previous is not None else signal.SIG_DFL
        signal.signal(signum, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            os.kill(os.getpid(), signum)  # the default action, with the exit status a caller expects


def _install_sigterm_handler() -> bool:
    """Install :func:`_on_sigterm` unless the user set a SIGTERM handler (or this is not the main
    thread, where handlers cannot be set). Device processes notice the host's death without it; the
    handler stops them before the host goes."""
    global _sigterm_previous
    if threading.current_thread() is not threading.main_thread():
        return False
    current_handler = signal.getsignal(signal.SIGTERM)
    if current_handler is _on_sigterm:
        return True
    if current_handler not in (signal.SIG_DFL, None):
        return False
    _sigterm_previous = current_handler
    signal.signal(signal.SIGTERM, _on_sigterm)
    return True


def _restore_sigterm_handler() -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, _sigterm_previous if _sigterm_previous is not None else signal.SIG_DFL)


@dataclass
class _Worker:
    device: Any
    handle: Any  # threading.Thread | multiprocessing.Process
    cmd_q: Any
    resp_q: Any
    answered: bool = False  # has answered a request: the process got past its start-up


class RunContext:
    """One initialized pipeline: devices (including automatic CPU-fallback devices) in order, the
    execution mode, the output queue, and the workers of concurrent mode."""

    def __init__(self, devices: Sequence[Any], mode: str, output_queue: Any, *, serial: int, config_key: Any,
                 compile_only: bool = False):
        self.devices: List[Any] = list(devices)
        self.mode = mode
        self.output_queue = output_queue
        self.serial = serial
        self.config_key = config_key
        self.compile_only = compile_only
        self.error: Optional[BaseException] = None
        self.closed = False
        self.forever = False
        self._closing = False
        self._lock = threading.RLock()
        self._workers: Dict[int, _Worker] = {}
        self._parent_fed: List[Any] = []  # mp queues the host writes to (closed at the end)
        self._internal_out: Any = None
        #: Values of tapped ops (``op_intermediates_to_save`` / ``insert_tapout_queue_for_op``): one
        #: :class:`~pybuda.runtime.transport.Intermediates` per input per device that saves some.
        self.intermediates_queue: "queue.Queue[Any]" = queue.Queue()
        self._forwarder: Optional[threading.Thread] = None
        self._fwd_stop = threading.Event()
        # Outputs owed = min(pushed, requested) - delivered (see "Outputs owed" in the module doc).
        self._pushed = 0
        self._requested = 0
        self._delivered_base = output_queue.put_count if isinstance(output_queue, OutputQueue) else 0
        self._sigterm_handler = False
        if mode == PROCESSES:
            import torch.multiprocessing as tmp

            self._mp = tmp.get_context("spawn")
            self._shutdown_event = self._mp.Event()
            self._error_q = self._mp.Queue()
        else:
            self._mp = None
            self._shutdown_event = threading.Event()
            self._error_q = queue.Queue()
        if isinstance(output_queue, OutputQueue):
            output_queue._attach(self.outputs_exhausted)

    # --- setup --------------------------------------------------------------------------------------
    def _new_queue(self) -> Any:
        return self._mp.Queue() if self.mode == PROCESSES else queue.Queue()

    def connect(self, d2d_fwd_queues: Sequence[Any] = ()) -> None:
        """Give every device its input queue and output target (next device, or the output queue)."""
        n = len(self.devices)
        for i, d in enumerate(self.devices):
            d._inputs_closed = d._end_sent = False
            if i == 0 and self.mode == PROCESSES:
                q = self._new_queue()
                self._parent_fed.append(q)
                while True:
                    try:
                        put_item(q, d._staging.get_nowait())
                    except queue.Empty:
                        break
                    self._pushed += 1
            elif i == 0:
                q = d._staging
                self._pushed = q.qsize()
            else:
                q = self._new_queue()
            d._input_queue = q
        if self.mode == PROCESSES:
            self._internal_out = self._new_queue()
        for i, d in enumerate(self.devices):
            d._is_last = i == n - 1
            d._output_target = (self.devices[i + 1]._input_queue if i + 1 < n else
                                (self._internal_out if self.mode == PROCESSES else self.output_queue))
            mirror = d2d_fwd_queues[i] if i < len(d2d_fwd_queues) and i + 1 < n else None
            if mirror is not None and self.mode == PROCESSES and not is_mp_queue(mirror):
                raise PybudaError("d2d_fwd_queues must be multiprocessing queues when devices run in processes")
            d._mirror_queue = mirror
            # In process mode intermediates share the pipe of the last device's outputs; the host's forwarder
            # tells them apart by type.
            d._intermediates_target = self._internal_out if self.mode == PROCESSES else self.intermediates_queue

    def start(self) -> None:
        """Start one worker per device (concurrent modes)."""
        if self.mode == SEQUENTIAL:
            return
        for d in self.devices:
            cmd_q, resp_q = self._new_queue(), self._new_queue()
            if self.mode == THREADS:
                handle = threading.Thread(target=worker_main, name=f"pybuda-device-{d.name}", daemon=True,
                                          args=(d, cmd_q, resp_q, self._shutdown_event, self._error_q, False))
            else:
                self._parent_fed.append(cmd_q)
                handle = self._mp.Process(target=process_main, name=f"pybuda-device-{d.name}", daemon=True,
                                          args=(d, cmd_q, resp_q, self._shutdown_event, self._error_q,
                                                logging.getLogger("pybuda").getEffectiveLevel(), os.getpid()))
            try:
                handle.start()
            except Exception as e:
                if self.mode != PROCESSES:
                    raise
                raise PybudaError(f"could not start the process of device '{d.name}': {type(e).__name__}: {e}. "
                                  f"Devices run in spawned processes, so their modules must be picklable (classes "
                                  f"defined at module level); PYBUDA_FORCE_THREADS=1 runs them in threads "
                                  f"instead") from e
            self._workers[id(d)] = _Worker(d, handle, cmd_q, resp_q)
        if self.mode == PROCESSES:
            self._forwarder = threading.Thread(target=self._forward_outputs, name="pybuda-output-forwarder",
                                               daemon=True)
            self._forwarder.start()
            self._sigterm_handler = _install_sigterm_handler()

    def _forward_outputs(self) -> None:
        while not self._fwd_stop.is_set():
            try:
                item = get_item(self._internal_out, timeout=POLL_S)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError):
                break
            self._route(item)

    def _route(self, item: Any) -> None:
        """An item from the device processes' output pipe: intermediates or outputs of the last device."""
        (self.intermediates_queue if isinstance(item, Intermediates) else self.output_queue).put(item)

    def compile(self, sample: Any, config: Any, verify_cfg: Any = None) -> None:
        """COMPILE each device in pipeline order; each device's sample outputs are the next one's sample
        (the last device's are not asked for: nothing consumes them)."""
        item = sample
        for i, d in enumerate(self.devices):
            item = self.request(d, Command(CommandType.COMPILE, {"sample": item, "config": config,
                                                                 "verify_cfg": verify_cfg,
                                                                 "want_outputs": i < len(self.devices) - 1}))
        if getattr(config, "op_intermediates_to_save", None):
            from pybuda.runtime.backend_api import check_intermediates_found

            # asked of the devices: in process mode their compiled graphs live in their processes
            check_intermediates_found([self.request(d, Command(CommandType.GET_QUEUES)) for d in self.devices],
                                      config)

    # --- running --------------------------------------------------------------------------------------
    def run_forward(self, input_count: int) -> None:
        """Run ``input_count`` pushes through the pipeline (0 = until shutdown).

        In sequential mode nothing runs in the background, so ``input_count=0`` runs what is queued now and
        then every later push as it is made (inside ``push_to_inputs``): a TT-Buda loop of pushes and
        ``output_queue.get()`` after ``run_inference(input_count=0)`` works unchanged."""
        self.check_health()
        if self.compile_only:
            raise PybudaError("this pipeline was compiled with DeviceMode.CompileOnly; it cannot run inputs")
        if not isinstance(input_count, int) or isinstance(input_count, bool) or input_count < 0:
            raise InputError(f"input_count must be a non-negative int, got {input_count!r}")
        if self.mode == SEQUENTIAL:
            first = self.devices[0]
            available = first._input_queue.qsize()
            if input_count == 0:
                self.forever = True
                self._run_sequential(available)
                return
            if available < input_count:
                raise InputError(f"asked to run {input_count} input(s), but only {available} are queued on device "
                                 f"'{first.name}'; push them with push_to_inputs (or pass inputs=[...]) first")
            with self._lock:
                self._requested += input_count  # owed from now: a get() in another thread waits for them
            self._run_sequential(input_count)
            return
        if input_count == 0:
            self.forever = True
        with self._lock:
            self._requested += input_count
        for d in self.devices:
            self.send(d, Command.run_forward(input_count))

    def _run_sequential(self, count: int) -> None:
        """Run ``count`` queued inputs through every device in turn, in the caller."""
        device = None
        try:
            for _ in range(count):
                for device in self.devices:
                    device.run_next_command(Command.run_forward(1))
        except BaseException as e:
            err = self._sequential_failure(device, e)
            if err is e:
                raise
            raise err from e

    def run_device(self, device: Any, cmd: Command) -> None:
        """Run one RUN_FORWARD on one device (``Device.forward``): inline in sequential mode, else queued
        to its worker. Inputs run on the last device are owed on the output queue from now on."""
        self.check_health()
        if self.compile_only:
            raise PybudaError("this pipeline was compiled with DeviceMode.CompileOnly; it cannot run inputs")
        loop_count = int(cmd.params.get("loop_count", 1))
        if self.mode == SEQUENTIAL:
            available = device._input_queue.qsize()
            if available < loop_count:
                raise InputError(f"device '{device.name}': asked to run {loop_count} input(s), but only {available} "
                                 f"are queued on it; push inputs (or run the devices before it) first")
        if device is self.devices[-1]:
            with self._lock:
                self._requested += loop_count
        if self.mode != SEQUENTIAL:
            self.send(device, cmd)
            return
        try:
            device.run_next_command(cmd)
        except BaseException as e:
            err = self._sequential_failure(device, e)
            if err is e:
                raise
            raise err from e

    def note_push(self) -> None:
        """An input was pushed to the first device (``Device.push_to_inputs``); a sequential pipeline that
        runs until shutdown runs it now."""
        with self._lock:
            self._pushed += 1
        if self.forever and self.mode == SEQUENTIAL:
            self._run_sequential(1)

    def unclaimed_inputs(self) -> int:
        """Inputs pushed to the first device that no ``run_forward`` has asked for yet."""
        if self.forever:
            return 0
        return max(0, self._pushed - self._requested)

    def outputs_owed(self) -> int:
        """Outputs still to come: inputs both pushed and asked for, not yet put on the output queue."""
        runnable = self._pushed if self.forever else min(self._pushed, self._requested)
        delivered = (self.output_queue.put_count - self._delivered_base
                     if isinstance(self.output_queue, OutputQueue) else 0)
        return runnable - delivered

    def send(self, device: Any, cmd: Command) -> None:
        """Queue a command that has no response (concurrent mode)."""
        self.check_health()
        put_item(self._workers[id(device)].cmd_q, cmd)

    def request(self, device: Any, cmd: Command) -> Any:
        """Run a command on ``device`` and return its response (waits, surfacing device failures)."""
        from pybuda.runtime.push import Rejected

        self.check_health()
        if self.mode == SEQUENTIAL:
            try:
                result = device.run_next_command(cmd)
            except BaseException as e:
                err = self._sequential_failure(device, e)
                if err is e:
                    raise
                raise err from e
        else:
            if self.forever:
                # The devices loop on RUN_FORWARD until shutdown; a queued command would never run.
                raise PybudaError(f"{cmd.command_type.name} cannot run while the pipeline runs until shutdown "
                                  f"(input_count=0); call pybuda.shutdown() first")
            if self._requested > self._pushed:
                # Every device would first finish a run that waits for inputs nobody pushed.
                raise PybudaError(f"{cmd.command_type.name} would wait forever: run_forward asked for "
                                  f"{self._requested} input(s), but only {self._pushed} were pushed to "
                                  f"'{self.devices[0].name}'; push the missing input(s) first")
            worker = self._workers[id(device)]
            put_item(worker.cmd_q, cmd)
            result = get_item(worker.resp_q, on_idle=self._check_while_waiting)
            worker.answered = True
        if isinstance(result, Rejected):
            raise result.error
        return result

    def sync(self) -> None:
        """Wait until every device has finished the commands sent so far."""
        self.check_health()
        if self.mode == SEQUENTIAL:
            return
        for d in self.devices:
            self.request(d, Command.sync())

    # --- health ---------------------------------------------------------------------------------------
    def _raise_stored_error(self) -> None:
        err = self.error
        if isinstance(err, RuntimeFailure):
            raise err
        raise RuntimeFailure(f"the pipeline stopped after an error in an earlier call: {type(err).__name__}: "
                             f"{err}") from err

    def check_health(self) -> None:
        """Raise the pipeline's error if a device failed; raise if the pipeline was shut down."""
        if self.error is not None:
            self._raise_stored_error()
        if self.closed:
            raise PybudaError("the pipeline has been shut down; call run_inference or initialize_pipeline again")
        self._poll_error()

    def _check_while_waiting(self) -> None:
        if self.error is not None:
            self._raise_stored_error()
        if self.closed or self._closing:
            raise RuntimeFailure("the pipeline shut down while waiting for a device")
        self._poll_error()

    def outputs_exhausted(self) -> Optional[str]:
        """For OutputQueue: raise the pipeline's error; None while an output is owed, else why none is.

        Only owed outputs count, not other threads: one that pushes or runs inputs later makes them
        owed then, and an empty queue with nothing owed could otherwise only ever block forever."""
        if self.error is not None:
            self._raise_stored_error()
        if self.closed:
            return ("the output queue is empty and the pipeline that feeds it has shut down; no more outputs "
                    "will arrive")
        if self._closing:
            return None  # a graceful shutdown may still deliver owed outputs; closed comes next
        self._poll_error()
        if self.outputs_owed() > 0:
            return None
        head = "the output queue is empty and nothing can fill it: "
        if self.mode == SEQUENTIAL:
            return head + (f"in sequential mode outputs are produced inside run_inference/run_forward, and the "
                           f"outputs of all {self._requested} input(s) run so far have been read; run more "
                           f"inputs before asking for more outputs")
        if not self.forever and self._requested > self._pushed:
            return head + (f"run_forward asked for {self._requested} input(s), but only {self._pushed} were "
                           f"pushed to '{self.devices[0].name}' and their outputs have been read; push the "
                           f"missing input(s) first")
        if self.forever:
            return head + (f"the pipeline runs until shutdown, and the outputs of all {self._pushed} input(s) "
                           f"pushed so far have been read; push more inputs first")
        return head + (f"the outputs of all {self._requested} input(s) run so far have been read; push inputs "
                       f"and call run_forward for more")

    def watch(self, forever: bool = True) -> bool:
        """Raise the pipeline's error; True while an output is owed. Without one: False, or with
        ``forever`` (the caller would wait without a timeout) raise NoMoreOutputs."""
        reason = self.outputs_exhausted()
        if reason is None:
            return True
        if forever:
            raise NoMoreOutputs(reason)
        return False

    def _take_error(self, wait: float = 0.0) -> Optional[Tuple]:
        try:
            return get_item(self._error_q, timeout=wait)
        except queue.Empty:
            return None
        except Exception as e:  # an unreadable report still means a device failed
            return ("?", type(e).__name__, f"a device failed, and its error report could not be read: {e}", "", None)

    def _poll_error(self) -> None:
        if self.mode == SEQUENTIAL or self.closed or self._closing:
            return
        info = self._take_error()
        if info is None and self.mode == PROCESSES:
            for w in self._workers.values():
                if not w.handle.is_alive():
                    info = self._take_error(wait=1.0) or (
                        w.device.name, "ProcessExit", describe_process_exit(w.handle.exitcode, w.answered), "", None)
                    break
        if info is None and self._shutdown_event.is_set():
            info = self._take_error(wait=1.0) or ("?", "Shutdown", "a device stopped the pipeline", "", None)
        if info is not None:
            self._fail(info)

    def _fail(self, info: Tuple) -> None:
        with self._lock:
            if self.error is None:
                name, etype, message, tb, exc, module = (tuple(info) + (None,) * 6)[:6]
                where = "process" if self.mode == PROCESSES else "thread"
                err = device_failure(name, module, etype, message, tb, exc, f" in its {where}")
                self.error = err
                _record_error(err)
                log.error("%s", str(err).splitlines()[0])
                self.shutdown(error=True)
            raise self.error

    def _sequential_failure(self, device: Any, exc: BaseException) -> BaseException:
        """Stop the pipeline after ``device`` raised ``exc`` inline; returns the error to raise.

        A module's exception becomes RuntimeFailure, as in concurrent mode; pybuda's own errors, and
        KeyboardInterrupt and the like, are raised unchanged."""
        err = exc
        if device is not None and isinstance(exc, Exception) and not isinstance(exc, PybudaError):
            err = device_failure(device.name, device.module_label(), type(exc).__name__, str(exc),
                                 traceback.format_exc(), exc, "")
        with self._lock:
            if self.error is None:
                self.error = err
                _record_error(err)
                self.shutdown(error=True)
        return err

    # --- shutdown -------------------------------------------------------------------------------------
    def shutdown(self, error: bool = False, *, fast: bool = False, clear_inputs: bool = False) -> None:
        """Stop the workers and release the queues; idempotent.

        ``error`` (a device failed) and ``fast`` (interpreter exit, SIGTERM) skip the graceful phase.
        ``clear_inputs`` drops inputs pushed and not run; otherwise they go back to the first device's
        buffer for the next pipeline (one that replaces this one after a change)."""
        with self._lock:
            if self.closed or self._closing:
                return
            self._closing = True
        interrupted = True
        try:
            if self.mode != SEQUENTIAL:
                self._stop_workers(graceful=not error and not fast and self.error is None)
                late = self._take_error()
                if late is not None and self.error is None:
                    # A device failed while finishing its work: nobody is waiting to be told, so log it
                    # and let error_raised() say so.
                    name, etype, message = (tuple(late) + ("?",) * 3)[:3]
                    log.error("device '%s' failed during shutdown: %s: %s", name, etype, message)
                    _record_error(RuntimeFailure(f"device '{name}' failed during shutdown: {etype}: {message}"))
            if self.mode != THREADS:  # thread workers release their device themselves
                for d in self.devices:
                    if self.mode == SEQUENTIAL:
                        try:
                            d.shutdown_device()
                        except Exception:  # pragma: no cover
                            log.exception("device '%s' failed to shut down cleanly", d.name)
            interrupted = False
        finally:
            try:
                # Also after Ctrl-C above: the forwarder thread stops, and no device keeps this pipeline's
                # queues (a later push would go to a queue nobody reads).
                self._drain_outputs()
                self._release_queues(graceful=not error and not interrupted,
                                     keep_inputs=not clear_inputs and not error and not interrupted)
            finally:
                self._finish_close()

    def _finish_close(self) -> None:
        self.closed = True
        self._closing = False
        if self._sigterm_handler:
            _restore_sigterm_handler()

    def _stop_workers(self, graceful: bool) -> None:
        workers = list(self._workers.values())
        try:
            if graceful:
                self._finish_queued_work(workers)
        finally:
            # Also after Ctrl-C in the graceful phase: no worker is left behind.
            self._shutdown_event.set()
            self._join_or_terminate(workers)

    def _finish_queued_work(self, workers: List[_Worker]) -> None:
        # No input can be pushed any more: runs waiting for one end instead of waiting out the limit.
        try:
            put_item(self.devices[0]._input_queue, EndOfInputs())
        except (OSError, ValueError):
            pass
        deadline = time.monotonic() + GRACEFUL_QUIT_S
        # Pipeline order: a device quits after its queued work, so its last outputs reach the next
        # device while that one is still running.
        for w in workers:
            try:
                put_item(w.cmd_q, Command.quit())
            except (OSError, ValueError):
                pass
            while w.handle.is_alive() and time.monotonic() < deadline and not self._shutdown_event.is_set():
                w.handle.join(POLL_S)
            if w.handle.is_alive():
                if not self._shutdown_event.is_set():
                    log.warning("device '%s' did not finish its queued work within %.0f s; stopping it",
                                w.device.name, GRACEFUL_QUIT_S)
                return

    def _join_or_terminate(self, workers: List[_Worker]) -> None:
        """Join the workers within one shared :data:`STOP_GRACE_S`; terminate (then kill) processes that
        are still busy."""
        def join_all(ws: List[_Worker]) -> List[_Worker]:
            deadline = time.monotonic() + STOP_GRACE_S
            for w in ws:
                w.handle.join(max(0.0, deadline - time.monotonic()))
            return [w for w in ws if w.handle.is_alive()]

        busy = join_all(workers)
        if self.mode != PROCESSES:
            for w in busy:
                log.warning("the thread of device '%s' is still busy; it stops at its next wait", w.device.name)
            return
        for w in busy:
            log.warning("terminating the process of device '%s'", w.device.name)
            w.handle.terminate()
        for w in join_all(busy):
            w.handle.kill()
        join_all(busy)

    def _drain_outputs(self) -> None:
        if self._forwarder is None:
            return
        # Children have exited: whatever they wrote is in the pipe. Move it to the output queue.
        empty_polls = 0
        while empty_polls < 2:
            try:
                self._route(get_item(self._internal_out, timeout=POLL_S))
                empty_polls = 0
            except queue.Empty:
                empty_polls += 1
            except (EOFError, OSError, ValueError):
                break
        self._fwd_stop.set()
        self._forwarder.join(1.0)

    def _release_queues(self, graceful: bool, keep_inputs: bool) -> None:
        all_exited = all(not w.handle.is_alive() and getattr(w.handle, "exitcode", 0) == 0
                         for w in self._workers.values())
        for i, d in enumerate(self.devices):
            q = d._input_queue
            if i == 0 and q is not None:
                left: List[Any] = []
                if q is d._staging:
                    while True:
                        try:
                            left.append(q.get_nowait())
                        except queue.Empty:
                            break
                elif self.mode == PROCESSES and graceful and all_exited:
                    while True:
                        try:
                            left.append(get_item(q, timeout=POLL_S))
                        except (queue.Empty, EOFError, OSError, ValueError):
                            break
                left = [item for item in left if not is_end_of_inputs(item)]
                if keep_inputs:
                    # Inputs pushed but not run go back to the host buffer, for the pipeline that replaces
                    # this one.
                    for item in left:
                        d._staging.put(item)
                elif left:
                    log.info("shutdown dropped %d input(s) pushed to '%s' and not run", len(left), d.name)
            d._input_queue = d._staging
            d._output_target = None
            d._mirror_queue = None
            d._intermediates_target = None
            d._stop_fn = None
        if self.mode == PROCESSES:
            queues = list(self._parent_fed) + [self._internal_out, self._error_q]
            for w in self._workers.values():
                queues.append(w.resp_q)
            for q in queues:
                if q is not None:
                    close_mp_queue(q)
