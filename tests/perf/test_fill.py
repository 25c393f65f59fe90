"""Pipeline fill (pybuda.perf.fill): which producer slices a consumer's first slice reads, the slice times
of an op, and the performance model's fill of t-streamed chains."""

import pytest

from perf_netlists import graph, netlist, op, program, queue, stream
from pybuda.arch import get_device_descriptor
from pybuda.netlist.tms import Broadcast, HSlice, HStack, InputUnpad, Transpose, VSlice, VStack
from pybuda.perf.fill import SliceTimes, op_fill, slices_needed
from pybuda.perf.model import PerfConfig, estimate

N150 = get_device_descriptor(device_config="wh_n150")


@pytest.mark.parametrize("shape,tms,needed", [
    ((12, 1, 4), (), 1),                                         # streams alike
    ((1, 12, 4), (VSlice(12),), 1),                              # an unstreamed producer is one slice
    ((12, 1, 4), (VStack(12),), 12),                             # stacked into one slice: all of them
    ((12, 1, 1), (VStack(12), Broadcast("c", 32), VSlice(12)), 1),  # restacked around a broadcast
    ((12, 1, 4), (VStack(12), VSlice(6)), 2),                    # 12-way into 6-way
    ((16, 12, 2), (HStack(16),), 16),                            # heads merged back
    ((16, 12, 2), (Transpose(),), 1),                            # per-slice transpose
    ((4, 2, 8), (HSlice(2),), 1),                                # each producer slice cut in two
    ((12, 1, 4), (HStack(5),), 12),                              # does not apply: read whole
])
def test_slices_needed_follows_the_tms_back(shape, tms, needed):
    assert slices_needed(shape, tms) == needed


def test_slices_needed_drops_unpadded_tiles_first():
    # 2 slices of 4 rows, each losing its last row, stacked to 6 rows and sliced in 3: slice 0 is rows 0-1
    assert slices_needed((2, 4, 2), (VStack(2), VSlice(3)), InputUnpad(rt=1, ct=0)) == 1
    assert slices_needed((2, 4, 2), (VStack(2), VSlice(3))) == 2  # 8 rows do not slice in 3: read whole


def test_op_fill_paces_slices_by_the_slowest_of_op_and_inputs():
    alone = op_fill(100.0, 0.0, 800.0, 8)
    assert alone == SliceTimes(200.0, 100.0, 8, 900.0, 800.0)
    assert alone.ready(3) == 400.0 and alone.ready(99) == alone.last
    fed_slowly = op_fill(100.0, 1600.0, 800.0, 8)  # its producer needs 1600 cycles for the input
    assert fed_slowly.first == 200.0 and fed_slowly.period == 200.0 and fed_slowly.last == 1600.0
    whole = op_fill(100.0, 5000.0, 800.0, 1)  # one slice: out when the op is done
    assert whole.first == whole.last == 900.0


def _chain(t: int, stack_last: bool):
    """queue -> n0 -> n1 -> n2 (-> out), every op t-streamed in ``t`` slices of 1x2 tiles; with
    ``stack_last`` n2 is unstreamed and stacks n1's slices back."""
    rows = t if stack_last else 1
    qs = [queue("a", t=t, mblock=(1, 2), ublock=(1, 1), entries=8),
          queue("o", input="n2", t=1 if stack_last else t, mblock=(rows, 2), ublock=(1, 1), entries=8, channels=(1,))]
    n0 = op("n0", "exp", ["a"], t=t, mblock=(1, 2))
    n1 = op("n1", "exp", ["n0"], loc=(0, 1), t=t, mblock=(1, 2))
    n2 = op("n2", "exp", ["n1"], loc=(0, 2), t=1 if stack_last else t, mblock=(rows, 2))
    if stack_last:
        n2.input_tms = {0: (VStack(t),)}
    return netlist(qs, [graph("g", [n0, n1, n2], input_count=16)], program([("g", {"a": stream()})]))


def test_a_streamed_chain_fills_in_slices_and_a_stacking_consumer_waits_for_all():
    cfg = PerfConfig()
    e1, e2 = 40 + 10 * 1, 40 + 10 * 1  # NoC latency of one hop per edge
    r = estimate(_chain(4, stack_last=False), N150)
    c = [r.op(n).cycles for n in ("n0", "n1", "n2")]
    period = max(c) / 4  # the slowest op paces the chain's slices
    first = cfg.dram_latency_cycles + c[0] / 4 + e1 + c[1] / 4 + e2 + c[2] / 4
    assert r.epochs[0].fill_cycles == pytest.approx(first + 3 * period, abs=1)
    assert r.op("n2").latency_cycles == pytest.approx(first, abs=1)

    s = estimate(_chain(4, stack_last=True), N150)
    c = [s.op(n).cycles for n in ("n0", "n1", "n2")]
    n1_last = cfg.dram_latency_cycles + c[0] / 4 + e1 + c[1] / 4 + 3 * max(c[0], c[1]) / 4
    assert s.epochs[0].fill_cycles == pytest.approx(n1_last + e2 + c[2], abs=1)
