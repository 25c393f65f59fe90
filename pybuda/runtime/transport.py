"""Moving data between the host and devices: queue items, bounded waits, and the output queue.

Two rules keep the runtime from hanging (the failure users reported most with TT-Buda, tt-buda#12):

* every blocking wait polls in short slices (:data:`POLL_S`) and checks a shutdown event between
  slices, so an error anywhere ends every wait;
* anything crossing a process boundary is pickled *by value* (:func:`wire`). torch would otherwise
  send tensors through shared-memory file descriptors, which fail when the sending process exits
  before the receiver reads them, and which keep the sender's memory alive.
"""

from __future__ import annotations

import logging
import multiprocessing.queues
import pickle
import queue
import threading
import time
from typing import Any, Callable, Optional

log = logging.getLogger(__name__)

#: Length of one wait slice, in seconds: the worst-case delay before a wait notices a shutdown.
POLL_S = 0.05

#: After this many seconds blocked on an empty output queue, say why it may never fill.
SLOW_GET_NOTICE_S = 30.0


class ShutdownRequested(Exception):
    """Raised inside a device worker when the pipeline is shutting down; ends the worker quietly."""


class _Wire:
    """A queue item that pickles its payload by value (plain pickle, no shared memory).

    The payload is serialised when the item is made, in the caller: an unpicklable item raises there,
    instead of dying silently in the queue's feeder thread."""

    __slots__ = ("data",)

    def __init__(self, obj: Any):
        self.data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    def __reduce__(self):
        return (pickle.loads, (self.data,))


def is_mp_queue(q: Any) -> bool:
    """True for a multiprocessing queue (items are pickled on the way through)."""
    return isinstance(q, multiprocessing.queues.Queue)


def put_item(q: Any, obj: Any) -> None:
    """Put ``obj`` on ``q``; on a multiprocessing queue it travels by value (see module doc)."""
    q.put(_Wire(obj) if is_mp_queue(q) else obj)


def _unwrap(item: Any) -> Any:
    # An mp queue returns the payload itself (unpickling calls pickle.loads); a _Wire can only be seen
    # here if it went through a thread queue, which never pickles.
    return pickle.loads(item.data) if isinstance(item, _Wire) else item


def get_item(q: Any, *, stop: Optional[Callable[[], bool]] = None, timeout: Optional[float] = None,
             on_idle: Optional[Callable[[], None]] = None) -> Any:
    """Take one item from ``q``, waiting in :data:`POLL_S` slices.

    ``stop()`` is checked between slices and raises :class:`ShutdownRequested` when true; ``on_idle``
    runs between slices too (used to surface errors from other devices). With ``timeout`` the wait
    ends with ``queue.Empty``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if stop is not None and stop():
            raise ShutdownRequested()
        slice_s = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
        try:
            return _unwrap(q.get(timeout=slice_s) if slice_s > 0 else q.get_nowait())
        except queue.Empty:
            pass
        if on_idle is not None:
            on_idle()
        if deadline is not None and time.monotonic() >= deadline:
            raise queue.Empty()


def close_mp_queue(q: Any) -> None:
    """Release an mp queue without waiting for its feeder thread.

    A process that put items nobody will read would otherwise block at exit, joining the feeder
    thread that is stuck on a full pipe.
    """
    if is_mp_queue(q):
        try:
            q.cancel_join_thread()
            q.close()
        except (OSError, ValueError):  # already closed
            pass


class OutputQueue(queue.Queue):
    """The queue ``run_inference`` / ``initialize_pipeline`` return: a ``queue.Queue`` whose ``get``
    cannot hang on a dead pipeline.

    While it waits, ``get`` asks the run context that feeds it for errors: an exception in any device
    surfaces here as :class:`pybuda.errors.RuntimeFailure` (with the device's traceback text), and an
    empty queue whose pipeline has shut down raises instead of blocking forever. Items are lists of
    :class:`pybuda.Tensor`, one per output of the last device.
    """

    def __init__(self, maxsize: int = 0):
        super().__init__(maxsize)
        self._watcher: Optional[Callable[[], bool]] = None
        self._notice_lock = threading.Lock()

    def _attach(self, watcher: Optional[Callable[[bool], bool]]) -> None:
        """``watcher(forever)`` raises RuntimeFailure on a pipeline error and returns False once nothing
        can put more items here; ``forever`` says the caller would otherwise block without a timeout."""
        self._watcher = watcher

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        if not block:
            return super().get(block=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        started = time.monotonic()
        noticed = False
        while True:
            slice_s = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            try:
                return super().get(timeout=slice_s) if slice_s > 0 else super().get(block=False)
            except queue.Empty:
                pass
            watcher = self._watcher
            alive = watcher(deadline is None) if watcher is not None else True
            if not alive:
                try:  # the pipeline may have put its last item just before it stopped
                    return super().get(block=False)
                except queue.Empty:
                    if deadline is not None:
                        raise  # nothing can arrive: no point waiting out the timeout
                    from pybuda.errors import RuntimeFailure

                    raise RuntimeFailure("the output queue is empty and the pipeline that feeds it has shut "
                                         "down; no more outputs will arrive") from None
            if deadline is not None and time.monotonic() >= deadline:
                raise queue.Empty()
            if not noticed and time.monotonic() - started > SLOW_GET_NOTICE_S:
                noticed = True
                log.warning("output_queue.get() has waited %.0f s: have enough inputs been pushed, and has "
                            "run_forward/run_inference been called for them?", SLOW_GET_NOTICE_S)
