"""Pipeline fill: when the first input of a microbatch has passed through every op of an epoch.

The performance model (:class:`~pybuda.perf.estimator._Estimator`) and the balancer's whole cost
(:class:`~pybuda.balancer.wholecost.EpochAccumulator`) both charge an epoch ``fill + (inputs - 1) ·
steady``; this module is the one rule they share for the fill.

Ops pipeline over t-slices (NBS §6.4: an op starts math once its input buffers hold data). An op of
``cycles`` per input in ``t`` slices puts out one slice every ``cycles / t``. Its first slice can start
once every input holds the producer slices that slice reads: :func:`slices_needed` follows the edge's
TMs back to the producer (one slice when both stream alike, all of them when the consumer stacks the
producer's slices into one, two when a 12-way stream feeds a 6-way one). The op cannot finish before
``start + cycles``, and it cannot put out its slices faster than its producers deliver theirs
(:func:`op_fill`).
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, NamedTuple, Optional, Sequence, Tuple

import torch

from pybuda.netlist.tms import InputUnpad, TMError, apply_tile_tms, as_tms

__all__ = ["SliceTimes", "slices_needed", "op_fill"]


class SliceTimes(NamedTuple):
    """When an op's slices of the first input are out."""

    first: float  #: the first slice
    period: float  #: cycles between slices: the op's own time per slice, or its inputs' pace if slower
    t: int  #: slices per input
    last: float  #: the last slice: ``first + (t - 1) · period``
    span: float  #: cycles the op takes to put out all its slices at its pace: ``t · period``

    def ready(self, n: int) -> float:
        """When the first ``n`` slices are out."""
        return self.first + (min(max(1, n), self.t) - 1) * self.period


def slices_needed(producer_shape: Sequence[int], tms: Iterable[Any] = (), unpad: Optional[InputUnpad] = None) -> int:
    """How many of its producer's first t-slices a consumer's first slice reads, the producer's output
    being ``producer_shape`` (t, rt, ct) tiles and the edge's TMs ``tms`` (all of them when the TMs do
    not apply to that shape)."""
    t = int(producer_shape[0])
    if t <= 1:
        return 1
    return _slices_needed((t, int(producer_shape[1]), int(producer_shape[2])), as_tms(tms),
                          None if unpad is None else (unpad.rt, unpad.ct))


@functools.lru_cache(maxsize=4096)
def _slices_needed(shape: Tuple[int, int, int], tms: Tuple[Any, ...], unpad: Optional[Tuple[int, int]]) -> int:
    t, rt, ct = shape
    source = torch.arange(t, dtype=torch.int32).view(t, 1, 1).expand(t, rt, ct)
    try:
        seen = apply_tile_tms(source, tms, InputUnpad(rt=unpad[0], ct=unpad[1]) if unpad else None)
    except TMError:
        return t
    if seen.numel() == 0:
        return t
    return max(1, int(seen[0].max()) + 1)


def op_fill(start: float, input_span: float, cycles: float, t: int) -> SliceTimes:
    """The slice times of an op whose first slice can start at ``start``, whose producers take
    ``input_span`` cycles to put out a whole input (their slowest :attr:`SliceTimes.span`; 0 for
    queues) and which takes ``cycles`` per input in ``t`` slices."""
    if t < 1:
        t = 1
    first = start + cycles / t
    span = cycles if cycles > input_span else input_span
    period = span / t
    return _new_times(SliceTimes, (first, period, t, first + (t - 1) * period, span))


_new_times = tuple.__new__  # SliceTimes without the NamedTuple constructor: the balancer calls op_fill ~10^5 times
