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
import time
from typing import Any, Callable, Optional

log = logging.getLogger(__name__)

#: Length of one wait slice, in seconds: the worst-case delay before a wait notices a shutdown.
POLL_S = 0.05

#: After this many seconds blocked on an empty output queue, say why it may never fill.
SLOW_GET_NOTICE_S = 30.0


class ShutdownRequested(Exception):
    """Raised inside a device worker when the pipeline is shutting down; ends the worker quietly."""


class EndOfInputs:
    """Queue marker: no more inputs will follow (see :func:`is_end_of_inputs`).

    A graceful shutdown puts one behind the last input pushed to the first device; each device passes
    it on to the next one when it quits. A device waiting for an input that can no longer come (a
    ``run_forward`` asked for more inputs than were pushed) then ends that run instead of waiting out
    the shutdown's time limit."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EndOfInputs()"


def is_end_of_inputs(item: Any) -> bool:
    """True for the :class:`EndOfInputs` marker (a fresh instance after crossing a process boundary)."""
    return isinstance(item, EndOfInputs)


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
    cannot hang.

    The run context that feeds it knows how many outputs it still owes (inputs pushed and asked for by
    ``run_forward``, minus outputs already put here). While ``get`` waits it asks that context: an
    exception in any device surfaces as :class:`pybuda.errors.RuntimeFailure` (with the device's
    traceback text), and when the queue is empty and no output is owed (every output was read, the
    runs asked for have no pushed inputs, the pipeline shut down) ``get`` raises
    :class:`pybuda.errors.NoMoreOutputs` at once, with or without a timeout (it is a ``queue.Empty``
    too). While an output is owed ``get`` blocks as a ``queue.Queue`` does. Items are lists of
    :class:`pybuda.Tensor`, one per output of the last device.
    """

    def __init__(self, maxsize: int = 0):
        super().__init__(maxsize)
        self._watcher: Optional[Callable[[], Optional[str]]] = None
        self._put_count = 0

    def _put(self, item: Any) -> None:
        # Runs under the queue's lock: the count and the item become visible together, so a reader that
        # sees no output owed and then an empty queue cannot miss an item.
        self._put_count += 1
        super()._put(item)

    @property
    def put_count(self) -> int:
        """How many items were ever put on this queue (the run context counts its outputs from it)."""
        return self._put_count

    def _attach(self, watcher: Optional[Callable[[], Optional[str]]]) -> None:
        """``watcher()`` raises RuntimeFailure on a pipeline error; it returns None while more items can
        arrive, else the reason none can."""
        self._watcher = watcher

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Any:
        """Remove and return an item, waiting while the pipeline still owes one (see the class doc).

        Raises :class:`pybuda.errors.NoMoreOutputs` when none can come, ``queue.Empty`` when ``timeout``
        runs out, RuntimeFailure when a device failed."""
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
            reason = watcher() if watcher is not None else None
            if reason is not None:
                try:  # the last owed item may have been put between the wait above and the check
                    return super().get(block=False)
                except queue.Empty:
                    from pybuda.errors import NoMoreOutputs

                    raise NoMoreOutputs(reason) from None
            if deadline is not None and time.monotonic() >= deadline:
                raise queue.Empty()
            if not noticed and time.monotonic() - started > SLOW_GET_NOTICE_S:
                noticed = True
                log.warning("output_queue.get() has waited %.0f s: have enough inputs been pushed, and has "
                            "run_forward/run_inference been called for them?", SLOW_GET_NOTICE_S)


class Intermediates(list):
    """The saved intermediates of one input on one device: a list of pybuda Tensors, one per tapped op
    (module by module: its ``insert_tapout_queue_for_op`` handles, then the ``op_intermediates_to_save``
    names it has; ``names`` lists them), that can also be indexed by op name or by the handle
    ``insert_tapout_queue_for_op`` returned."""

    def __init__(self, names: Any = (), tensors: Any = ()):
        super().__init__(tensors)
        self.names = list(names)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, slice)):
            return super().__getitem__(key)
        name = getattr(key, "op_name", key)
        if name not in self.names:
            from pybuda.errors import InputError

            raise InputError(f"no intermediate of op {name!r} in this item; it holds {self.names}")
        return super().__getitem__(self.names.index(name))
