"""RunContext: one initialized pipeline of devices, how it runs, and how it stops.

Execution modes
---------------
* **sequential**: every command runs inline in the caller through ``Device.run_next_command``; no
  threads, no processes. Chosen by ``_sequential=True``, ``PYBUDA_FORCE_SEQUENTIAL=1``, or, as in
  TT-Buda, whenever a TTDevice is Golden (the simulated chip; always the case here) unless
  ``PYBUDA_FORCE_CONCURRENT=1``. Exceptions propagate to the caller unchanged.
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
A normal ``shutdown`` sends QUIT device by device in pipeline order (queued work finishes first, up
to :data:`GRACEFUL_QUIT_S`), then stops any straggler the same way. ``shutdown`` is idempotent and
registered with ``atexit``.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pybuda.errors import InputError, PybudaError, RuntimeFailure
from pybuda.runtime.commands import Command, CommandType
from pybuda.runtime.transport import (POLL_S, OutputQueue, ShutdownRequested, close_mp_queue, get_item,
                                      is_mp_queue, put_item)

log = logging.getLogger(__name__)

SEQUENTIAL, THREADS, PROCESSES = "sequential", "threads", "processes"

#: How long a normal shutdown lets each worker finish queued commands after QUIT.
GRACEFUL_QUIT_S = 60.0
#: After the shutdown event is set: how long a worker gets before it is terminated (then killed).
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


def shutdown_current() -> None:
    """Stop the current pipeline (if any) and forget it. Safe to call any number of times."""
    global _current
    with _lock:
        ctx, _current = _current, None
    if ctx is not None:
        ctx.shutdown()


def _atexit_shutdown() -> None:
    try:
        shutdown_current()
    except Exception:  # pragma: no cover - never let interpreter exit fail
        log.exception("pybuda shutdown at exit failed")


atexit.register(_atexit_shutdown)


@dataclass
class _Worker:
    device: Any
    handle: Any  # threading.Thread | multiprocessing.Process
    cmd_q: Any
    resp_q: Any


def _worker_main(device, cmd_q, resp_q, shutdown_event, error_q, in_child: bool,
                 parent_pid: Optional[int] = None) -> bool:
    """A device worker: run commands until QUIT (returns True) or shutdown/error (returns False).

    In a child process, ``parent_pid`` is the host's pid: if the host dies without shutting down
    (killed), the child notices at its next wait and exits instead of lingering as an orphan."""
    if parent_pid is None:
        device._stop_fn = shutdown_event.is_set
    else:
        device._stop_fn = lambda: shutdown_event.is_set() or os.getppid() != parent_pid
    graceful = False
    try:
        while True:
            cmd = device.get_next_command(cmd_q)
            if cmd.command_type == CommandType.QUIT:
                graceful = True
                break
            if in_child and cmd.command_type == CommandType.COMPILE and cmd.params.get("config") is not None:
                from pybuda.config import _set_global_compiler_config

                _set_global_compiler_config(cmd.params["config"])  # a spawned child starts with defaults
            result = device.run_next_command(cmd)
            if cmd.needs_response:
                put_item(resp_q, result)
    except ShutdownRequested:
        pass
    except BaseException as e:  # noqa: BLE001 - everything must reach the host
        tb = traceback.format_exc()
        try:  # the host must be able to rebuild it (custom __init__ signatures may not round-trip)
            pickle.loads(pickle.dumps(e))
            exc: Optional[BaseException] = e
        except Exception:
            exc = None
        report = (device.name, type(e).__name__, str(e), tb, exc)
        try:
            put_item(error_q, report)
        except Exception:
            put_item(error_q, report[:4] + (None,))
        shutdown_event.set()
    finally:
        try:
            device.shutdown_device()
        except Exception:  # pragma: no cover
            log.exception("device '%s' failed to shut down cleanly", device.name)
        if not in_child:
            device._stop_fn = None
    return graceful


def _process_main(device, cmd_q, resp_q, shutdown_event, error_q, log_level: int, parent_pid: int) -> None:
    """Entry point of a device process (spawned)."""
    logging.getLogger("pybuda").setLevel(log_level)
    graceful = _worker_main(device, cmd_q, resp_q, shutdown_event, error_q, in_child=True, parent_pid=parent_pid)
    if not graceful:
        # Nobody may read what is left in these pipes: do not block exit on their feeder threads.
        for q in (cmd_q, resp_q, device._output_target, device._mirror_queue, device._input_queue):
            if q is not None:
                close_mp_queue(q)


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
        self._forwarder: Optional[threading.Thread] = None
        self._fwd_stop = threading.Event()
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
            output_queue._attach(self.watch)

    # --- setup --------------------------------------------------------------------------------------
    def _new_queue(self) -> Any:
        return self._mp.Queue() if self.mode == PROCESSES else queue.Queue()

    def connect(self, d2d_fwd_queues: Sequence[Any] = ()) -> None:
        """Give every device its input queue and output target (next device, or the output queue)."""
        n = len(self.devices)
        for i, d in enumerate(self.devices):
            if i == 0 and self.mode == PROCESSES:
                q = self._new_queue()
                self._parent_fed.append(q)
                while True:
                    try:
                        put_item(q, d._staging.get_nowait())
                    except queue.Empty:
                        break
            elif i == 0:
                q = d._staging
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

    def start(self) -> None:
        """Start one worker per device (concurrent modes)."""
        if self.mode == SEQUENTIAL:
            return
        for d in self.devices:
            cmd_q, resp_q = self._new_queue(), self._new_queue()
            if self.mode == THREADS:
                handle = threading.Thread(target=_worker_main, name=f"pybuda-device-{d.name}", daemon=True,
                                          args=(d, cmd_q, resp_q, self._shutdown_event, self._error_q, False))
            else:
                self._parent_fed.append(cmd_q)
                handle = self._mp.Process(target=_process_main, name=f"pybuda-device-{d.name}", daemon=True,
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

    def _forward_outputs(self) -> None:
        while not self._fwd_stop.is_set():
            try:
                item = get_item(self._internal_out, timeout=POLL_S)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError):
                break
            self.output_queue.put(item)

    def compile(self, sample: Any, config: Any, verify_cfg: Any = None) -> None:
        """COMPILE each device in pipeline order; each device's sample outputs are the next one's sample."""
        item = sample
        for d in self.devices:
            item = self.request(d, Command(CommandType.COMPILE, {"sample": item, "config": config,
                                                                 "verify_cfg": verify_cfg}))

    # --- running --------------------------------------------------------------------------------------
    def run_forward(self, input_count: int) -> None:
        """Run ``input_count`` pushes through the pipeline (0 = until shutdown; concurrent mode only)."""
        self.check_health()
        if self.compile_only:
            raise PybudaError("this pipeline was compiled with DeviceMode.CompileOnly; it cannot run inputs")
        if not isinstance(input_count, int) or isinstance(input_count, bool) or input_count < 0:
            raise InputError(f"input_count must be a non-negative int, got {input_count!r}")
        if self.mode == SEQUENTIAL:
            if input_count == 0:
                raise InputError("input_count=0 (run until shutdown) needs concurrent mode; in sequential mode "
                                 "give the number of inputs to run")
            first = self.devices[0]
            available = first._input_queue.qsize()
            if available < input_count:
                raise InputError(f"asked to run {input_count} input(s), but only {available} are queued on device "
                                 f"'{first.name}'; push them with push_to_inputs (or pass inputs=[...]) first")
            try:
                for _ in range(input_count):
                    for d in self.devices:
                        d.run_next_command(Command.run_forward(1))
            except BaseException as e:
                self._sequential_failure(e)
                raise
            return
        if input_count == 0:
            self.forever = True
        for d in self.devices:
            self.send(d, Command.run_forward(input_count))

    def send(self, device: Any, cmd: Command) -> None:
        """Queue a command that has no response (concurrent mode)."""
        self.check_health()
        put_item(self._workers[id(device)].cmd_q, cmd)

    def request(self, device: Any, cmd: Command) -> Any:
        """Run a command on ``device`` and return its response (waits, surfacing device failures)."""
        from pybuda.runtime.device import Rejected

        self.check_health()
        if self.mode == SEQUENTIAL:
            try:
                result = device.run_next_command(cmd)
            except BaseException as e:
                self._sequential_failure(e)
                raise
        else:
            if self.forever:
                # The devices loop on RUN_FORWARD until shutdown; a queued command would never run.
                raise PybudaError(f"{cmd.command_type.name} cannot run while the pipeline runs until shutdown "
                                  f"(input_count=0); call pybuda.shutdown() first")
            worker = self._workers[id(device)]
            put_item(worker.cmd_q, cmd)
            result = get_item(worker.resp_q, on_idle=self._check_while_waiting)
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

    def watch(self, forever: bool = True) -> bool:
        """For OutputQueue: raise the pipeline's error; False once nothing can produce more outputs.

        ``forever``: the caller waits without a timeout, so a wait that can never end is an error."""
        if self.error is not None:
            self._raise_stored_error()
        if self.closed:
            return False
        if self.mode == SEQUENTIAL and threading.active_count() == 1:
            if not forever:
                return False
            # Sequential runs happen inline in the caller, and there is no other thread that could call
            # run_forward: this get() could only ever block forever.
            raise PybudaError("the output queue is empty and nothing can fill it: in sequential mode outputs are "
                              "produced inside run_inference/run_forward, which have already returned; run more "
                              "inputs before asking for more outputs")
        self._poll_error()
        return True

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
                        w.device.name, "ProcessExit",
                        f"the device process exited unexpectedly (exit code {w.handle.exitcode}). Devices run in "
                        f"spawned processes: the script needs an `if __name__ == \"__main__\":` guard and module "
                        f"classes must be importable (defined at module level); PYBUDA_FORCE_THREADS=1 runs "
                        f"devices in threads instead", "", None)
                    break
        if info is None and self._shutdown_event.is_set():
            info = self._take_error(wait=1.0) or ("?", "Shutdown", "a device stopped the pipeline", "", None)
        if info is not None:
            self._fail(info)

    def _fail(self, info: Tuple) -> None:
        with self._lock:
            if self.error is None:
                name, etype, message, tb, exc = (tuple(info) + (None,) * 5)[:5]
                where = "process" if self.mode == PROCESSES else "thread"
                text = f"device '{name}' failed in its {where}: {etype}: {message}"
                if tb:
                    text += f"\n--- traceback in the device {where} ---\n{tb.rstrip()}"
                err = RuntimeFailure(text)
                err.device_name = name
                err.original_type = etype
                err.traceback_text = tb or ""
                if isinstance(exc, BaseException):
                    err.__cause__ = exc
                self.error = err
                _record_error(err)
                log.error("%s", text.splitlines()[0])
                self.shutdown(error=True)
            raise self.error

    def _sequential_failure(self, exc: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = exc
                _record_error(exc)
                self.shutdown(error=True)

    # --- shutdown -------------------------------------------------------------------------------------
    def shutdown(self, error: bool = False) -> None:
        """Stop the workers and release the queues; idempotent. ``error``: skip the graceful phase."""
        with self._lock:
            if self.closed or self._closing:
                return
            self._closing = True
        try:
            if self.mode != SEQUENTIAL:
                self._stop_workers(graceful=not error and not self.forever and self.error is None)
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
            self._drain_outputs()
            self._release_queues(graceful=not error)
        finally:
            self.closed = True
            self._closing = False

    def _stop_workers(self, graceful: bool) -> None:
        workers = list(self._workers.values())
        if graceful:
            # Pipeline order: a device quits after its queued work, so its last outputs reach the next
            # device while that one is still running.
            for w in workers:
                try:
                    put_item(w.cmd_q, Command.quit())
                except (OSError, ValueError):
                    pass
                deadline = time.monotonic() + GRACEFUL_QUIT_S
                while w.handle.is_alive() and time.monotonic() < deadline and not self._shutdown_event.is_set():
                    w.handle.join(POLL_S)
                if w.handle.is_alive():
                    if not self._shutdown_event.is_set():
                        log.warning("device '%s' did not finish its queued work within %.0f s; stopping it",
                                    w.device.name, GRACEFUL_QUIT_S)
                    break
        self._shutdown_event.set()
        for w in workers:
            w.handle.join(STOP_GRACE_S)
        for w in workers:
            if not w.handle.is_alive():
                continue
            if self.mode == PROCESSES:
                log.warning("terminating the process of device '%s'", w.device.name)
                w.handle.terminate()
                w.handle.join(STOP_GRACE_S)
                if w.handle.is_alive():
                    w.handle.kill()
                    w.handle.join(STOP_GRACE_S)
            else:
                log.warning("the thread of device '%s' is still busy; it stops at its next wait", w.device.name)

    def _drain_outputs(self) -> None:
        if self._forwarder is None:
            return
        # Children have exited: whatever they wrote is in the pipe. Move it to the output queue.
        empty_polls = 0
        while empty_polls < 2:
            try:
                self.output_queue.put(get_item(self._internal_out, timeout=POLL_S))
                empty_polls = 0
            except queue.Empty:
                empty_polls += 1
            except (EOFError, OSError, ValueError):
                break
        self._fwd_stop.set()
        self._forwarder.join(1.0)

    def _release_queues(self, graceful: bool) -> None:
        all_exited = all(not w.handle.is_alive() and getattr(w.handle, "exitcode", 0) == 0
                         for w in self._workers.values())
        for i, d in enumerate(self.devices):
            q = d._input_queue
            if i == 0 and self.mode == PROCESSES and q is not None and graceful and all_exited:
                # Inputs pushed but not run go back to the host buffer, for the next pipeline.
                while True:
                    try:
                        d._staging.put(get_item(q, timeout=POLL_S))
                    except (queue.Empty, EOFError, OSError, ValueError):
                        break
            d._input_queue = d._staging
            d._output_target = None
            d._mirror_queue = None
            d._stop_fn = None
        if self.mode == PROCESSES:
            queues = list(self._parent_fed) + [self._internal_out, self._error_q]
            for w in self._workers.values():
                queues.append(w.resp_q)
            for q in queues:
                if q is not None:
                    close_mp_queue(q)
