"""Queue placement: host vs DRAM, the four channel algorithms, capacity, alignment, overrides, reuse."""

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.balancer import balance
from pybuda.config import CompilerConfig, DRAMPlacementAlgorithm as Algo, OpOverride, PlacerOverride
from pybuda.errors import CompileError
from pybuda.ir.lowered import BudaGraph, BudaOp, BudaQueue, TileShape
from pybuda.placer import DRAM_RESERVED_BYTES, QUEUE_HEADER_BYTES, place
from pybuda.placer.validate import validate_queues, validate_solution
from pybuda.dtypes import DataFormat as DF

GS = get_device_descriptor(device_config="gs_e150")
WH = get_device_descriptor(device_config="wh_n150")
BH = get_device_descriptor(device_config="bh_p150")


def _param_graph(n_params=8, shape=(1, 2, 2), df=DF.Float16_b, microbatch=4):
    """in → add0(param0) → add1(param1) → … → out; every op reads one parameter."""
    g = BudaGraph("p", microbatch=microbatch)
    s = TileShape(1, *shape)
    g.add_queue(BudaQueue("in", "input", s, df=df))
    prev = "in"
    for i in range(n_params):
        g.add_queue(BudaQueue(f"w{i}", "parameter", s, df=df))
        g.add_op(BudaOp(f"add{i}", "add", [prev, f"w{i}"], s, in_df=[df, df], out_df=df))
        prev = f"add{i}"
    g.add_queue(BudaQueue("out", "output", s, df=df, producer=prev))
    return g


def _run(g, device=GS, **kw):
    grids = kw.pop("grids", {})
    cfg = CompilerConfig(balancer_policy="MinimizeGrid", enable_t_streaming=False,
                         balancer_op_overrides={k: OpOverride(grid_shape=v) for k, v in grids.items()}, **kw)
    sol = balance(g, device, cfg)
    p = place(g, sol, device, cfg)
    assert validate_solution(g, sol, p, device, cfg) == []
    return sol, p


def test_round_robin_spreads_buffers_over_channels():
    g = _param_graph(8)
    _, p = _run(g)
    # Grayskull keeps its input queue in DRAM: "in" takes channel 0, then the parameters in turn
    dram_queues = [q for q in p.queue_placements.values() if q.loc == "dram"]
    assert [q.queue_name for q in dram_queues][:2] == ["in", "w0"]
    assert [q.dram[0][0] for q in dram_queues] == [i % 8 for i in range(len(dram_queues))]
    for i in range(8):
        q = p.queue_placements[f"w{i}"]
        assert q.entries == 1
        # w7 shares channel 0 with "in" (8 entries of the same 4-tile size, plus its header)
        assert q.dram[0][1] == DRAM_RESERVED_BYTES + (QUEUE_HEADER_BYTES + 8 * q.entry_size_bytes if i == 7 else 0)
        assert q.entry_size_bytes == 4 * 2080
        assert q.buffer_size_bytes == QUEUE_HEADER_BYTES + q.entries * q.entry_size_bytes


def test_host_and_device_io_queues():
    g = _param_graph(1)
    _, p = _run(g, device=WH)
    assert p.queue_placements["in"].loc == "host" and p.queue_placements["in"].host
    assert p.queue_placements["out"].loc == "host"
    assert p.queue_placements["in"].entries == g.microbatch * 2
    _, p2 = _run(g, device=WH, input_queues_on_host=False, output_queues_on_host=False)
    assert p2.queue_placements["in"].loc == "dram" and p2.queue_placements["out"].loc == "dram"
    # Grayskull cannot read host memory fast: its inputs always live in DRAM; outputs may stay on host
    _, gs = _run(g)
    assert gs.queue_placements["in"].loc == "dram" and gs.queue_placements["out"].loc == "host"


def test_multi_buffer_queue_follows_the_reader_split():
    g = _param_graph(1, shape=(1, 4, 6))
    _, p = _run(g, grids={"add0": (2, 3)}, input_queues_on_host=False)
    w = p.queue_placements["w0"]
    assert w.grid_size == (2, 3) and len(w.dram) == 6
    assert w.t * w.mblock[0] * w.ublock[0] * w.grid_size[0] == 4
    assert w.mblock[1] * w.ublock[1] * w.grid_size[1] == 6
    assert len({ch for ch, _ in w.dram}) == 6  # round robin over channels


def test_greatest_capacity():
    g = _param_graph(3, shape=(1, 8, 8))
    g.queues["w0"].shape = TileShape(1, 1, 8, 8)
    _, p = _run(g, dram_placement_algorithm=Algo.GREATEST_CAPACITY)
    used = [p.queue_placements[f"w{i}"].dram[0][0] for i in range(3)]
    assert len(set(used)) == 3  # each goes to a channel that is still empty


def test_flip_flop_alternates_channel_halves_by_epoch():
    g = _param_graph(4)
    _, p = _run(g, dram_placement_algorithm=Algo.ROUND_ROBIN_FLIP_FLOP, op_names_to_epoch_break=["add1", "add2", "add3"])
    halves = [p.queue_placements[f"w{i}"].dram[0][0] // 4 for i in range(4)]
    assert halves == [0, 1, 0, 1]
    for i in range(3):
        name = f"e2e_add{i}_0"
        ch = p.queue_placements[name].dram[0][0]
        assert ch // 4 == i % 2  # written in epoch i


def test_closest_picks_the_nearest_channel():
    g = _param_graph(2, shape=(1, 1, 1))
    starts = {"add0": PlacerOverride(start=(0, 0)), "add1": PlacerOverride(start=(9, 11))}
    _, p = _run(g, dram_placement_algorithm=Algo.CLOSEST, placer_op_overrides=starts)
    # core (0,0) is NoC (1,1): channel 0 at 1-0; core (9,11) is NoC (12,11): channel 7 at 10-6
    assert p.queue_placements["w0"].dram[0][0] == 0
    assert p.queue_placements["w1"].dram[0][0] == 7


def test_manual_queue_placement():
    g = _param_graph(2)
    _, p = _run(g, manual_dram_queue_placement={"w1": (None, 5), "in": (0, 3)})
    assert p.queue_placements["w1"].dram[0][0] == 5
    assert p.queue_placements["in"].loc == "dram" and p.queue_placements["in"].dram[0][0] == 3
    with pytest.raises(CompileError, match="queue 'w0': DRAM channel 9 does not exist"):
        _run(g, manual_dram_queue_placement={"w0": (None, 9)})
    with pytest.raises(CompileError, match="queue 'w0': chip 2 does not exist"):
        _run(g, manual_dram_queue_placement={"w0": (2, None)})


def test_capacity_is_enforced():
    g = _param_graph(1, shape=(1, 4, 4))
    cfg = CompilerConfig(balancer_policy="MinimizeGrid", enable_t_streaming=False)
    sol = balance(g, GS, cfg)
    # leave only 1000 bytes per channel: the 16-tile parameter cannot fit anywhere
    with pytest.raises(CompileError, match=r"queue '\w+': a \d+-byte buffer does not fit any DRAM channel"):
        place(g, sol, GS, cfg, dram_reserved_bytes=GS.dram_channels[0].size_bytes - 1000)


def test_alignment_on_blackhole():
    g = _param_graph(3, shape=(1, 1, 1), df=DF.Bfp2_b)
    _, p = _run(g, device=BH)
    for q in p.queue_placements.values():
        for _, addr in q.dram:
            assert addr % 64 == 0


def test_e2e_queues_reuse_dram_after_their_lifetime():
    g = _param_graph(6, shape=(1, 8, 8))
    breaks = [f"add{i}" for i in range(1, 6)]
    _, p = _run(g, op_names_to_epoch_break=breaks, manual_dram_queue_placement={
        f"e2e_add{i}_0": (None, 0) for i in range(5)})
    addrs = [p.queue_placements[f"e2e_add{i}_0"].dram[0][1] for i in range(5)]
    lifetimes = [p.queue_placements[f"e2e_add{i}_0"].lifetime for i in range(5)]
    assert lifetimes == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert addrs[0] == addrs[2] == addrs[4] and addrs[1] == addrs[3] != addrs[0]
    assert validate_queues(g, p, GS) == []


def test_e2e_reuse_can_be_disabled():
    g = _param_graph(3, shape=(1, 8, 8))
    cfg = CompilerConfig(balancer_policy="MinimizeGrid", enable_t_streaming=False, op_names_to_epoch_break=["add1", "add2"],
                         manual_dram_queue_placement={"e2e_add0_0": (None, 0), "e2e_add1_0": (None, 0)})
    sol = balance(g, GS, cfg)
    p = place(g, sol, GS, cfg, reuse_e2e_dram=False)
    a0 = p.queue_placements["e2e_add0_0"]
    a1 = p.queue_placements["e2e_add1_0"]
    assert a0.dram[0][1] + a0.buffer_size_bytes <= a1.dram[0][1]
    assert a0.lifetime == (0, 1)
