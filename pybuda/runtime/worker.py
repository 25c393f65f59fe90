"""What runs inside a device worker (a thread or a spawned process), and how its failure reads on the host.

:func:`worker_main` runs a device's commands until QUIT, shutdown or an exception, which it reports on
the error queue as ``(device, type, message, traceback text, exception, module)``; :func:`process_main`
is a device process's entry point. A device process runs a watchdog thread that waits on the host's
process sentinel (and polls ``os.getppid``) and exits the moment the host dies, even while its device is
busy; it ignores SIGINT so that Ctrl-C is the host's to handle. :func:`device_failure` and
:func:`describe_process_exit` turn a report or a dead process into the host's
:class:`pybuda.errors.RuntimeFailure` text. The host side is :class:`pybuda.runtime.context.RunContext`.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from typing import Any, Optional

from pybuda.errors import RuntimeFailure
from pybuda.runtime.transport import ShutdownRequested, close_mp_queue, put_item

log = logging.getLogger(__name__)

#: How often a device process checks that the host is still alive (when its sentinel is unavailable).
PARENT_POLL_S = 0.5
#: Exit status of a device process that ended because the host died.
EXIT_HOST_DIED = 3


def worker_main(device, cmd_q, resp_q, shutdown_event, error_q, in_child: bool,
                 parent_pid: Optional[int] = None) -> bool:
    """A device worker: run commands until QUIT (returns True) or shutdown/error (returns False).

    In a child process, ``parent_pid`` is the host's pid: if the host dies without shutting down
    (killed), the child notices at its next wait and exits instead of lingering as an orphan."""
    if parent_pid is None:
        device._stop_fn = shutdown_event.is_set
    else:
        device._stop_fn = lambda: shutdown_event.is_set() or os.getppid() != parent_pid
    graceful = False
    device.command_queue, device.command_queue_resp = cmd_q, resp_q
    device._adopt_compile_config = in_child
    try:
        graceful = device.run(getattr(device, "output_dir", "") or "")
    except ShutdownRequested:
        pass
    except BaseException as e:  # noqa: BLE001 - everything must reach the host
        tb = traceback.format_exc()
        try:  # the host must be able to rebuild it (custom __init__ signatures may not round-trip)
            pickle.loads(pickle.dumps(e))
            exc: Optional[BaseException] = e
        except Exception:
            exc = None
        report = (device.name, type(e).__name__, str(e), tb, exc, device.module_label())
        try:
            put_item(error_q, report)
        except Exception:
            put_item(error_q, report[:4] + (None, report[5]))
        shutdown_event.set()
    finally:
        try:
            device.shutdown_device()
        except Exception:  # pragma: no cover
            log.exception("device '%s' failed to shut down cleanly", device.name)
        if not in_child:
            device._stop_fn = None
            device.command_queue, device.command_queue_resp = queue.Queue(), queue.Queue()
    return graceful


def _watch_host(parent_pid: int) -> None:
    """Device-process thread: end the process as soon as the host dies, even while the device is busy
    in a module (its own waits only check between commands and inputs)."""
    import multiprocessing
    from multiprocessing.connection import wait

    try:  # readable (EOF) once the host is gone: no polling delay
        sentinel = multiprocessing.parent_process().sentinel
    except (AttributeError, ValueError):
        sentinel = None
    while True:
        try:
            host_gone = bool(wait([sentinel], timeout=PARENT_POLL_S)) if sentinel is not None else False
        except (OSError, ValueError):
            host_gone = False
            sentinel = None
        if sentinel is None:
            time.sleep(PARENT_POLL_S)
        # getppid: the sentinel's pipe could be held open by another process the host started.
        if host_gone or os.getppid() != parent_pid:
            os._exit(EXIT_HOST_DIED)  # no cleanup: whoever could use it is gone, and the device may be stuck


def process_main(device, cmd_q, resp_q, shutdown_event, error_q, log_level: int, parent_pid: int) -> None:
    """Entry point of a device process (spawned)."""
    # Ctrl-C in a terminal reaches the whole process group; the host decides how its devices stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_host, args=(parent_pid,), name="pybuda-host-watchdog", daemon=True).start()
    logging.getLogger("pybuda").setLevel(log_level)
    graceful = worker_main(device, cmd_q, resp_q, shutdown_event, error_q, in_child=True, parent_pid=parent_pid)
    if not graceful:
        # Nobody may read what is left in these pipes: do not block exit on their feeder threads.
        for q in (cmd_q, resp_q, device._output_target, device._mirror_queue, device._input_queue):
            if q is not None:
                close_mp_queue(q)


def device_failure(name: Any, module: Optional[str], etype: str, message: str, tb: Optional[str],
                   exc: Optional[BaseException], where: str) -> RuntimeFailure:
    """The RuntimeFailure for an exception raised in device ``name`` while running ``module``.

    ``where`` completes "failed" (e.g. " in its process"); the original exception, when the caller
    has it, becomes ``__cause__``."""
    site = f"device '{name}'"
    if module:
        site += f" (module{'s' if ', ' in module else ''} '{module}')"
    text = f"{site} failed{where}: {etype}: {message}"
    if tb:
        text += f"\n--- traceback in the device ---\n{tb.rstrip()}"
    err = RuntimeFailure(text)
    err.device_name = name
    err.module_name = module
    err.original_type = etype
    err.traceback_text = tb or ""
    if isinstance(exc, BaseException):
        err.__cause__ = exc
    return err


def describe_process_exit(exitcode: Optional[int], started: bool) -> str:
    """Why a device process is gone, from its exit code (negative: the signal that killed it).

    The advice about a ``__main__`` guard and importable classes applies only to a process that died
    during start-up (it never answered a request) with an ordinary exit code."""
    if exitcode is not None and exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        return (f"the device process died: it exited unexpectedly, killed by {sig} (exit code {exitcode}); "
                f"something outside pybuda stopped it (the OOM killer, a kill command)")
    if exitcode == EXIT_HOST_DIED:
        return f"the device process died: it exited unexpectedly (exit code {exitcode}: it lost its host process)"
    text = f"the device process died: it exited unexpectedly with exit code {exitcode}"
    if not started:
        text += (" before it answered its first command. Devices run in spawned processes: the script needs an "
                 "`if __name__ == \"__main__\":` guard and module classes must be importable (defined at module "
                 "level); PYBUDA_FORCE_THREADS=1 runs devices in threads instead")
    return text
