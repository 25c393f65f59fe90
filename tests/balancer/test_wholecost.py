"""The balancer's whole-cost view of a placement (pybuda.balancer.wholecost) and NLP's per-epoch targets."""

from types import SimpleNamespace

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.balancer import balance
from pybuda.balancer import policies, segment
from pybuda.balancer.legalizer import Legalizer
from pybuda.balancer.synthetic import bert_encoder_graph
from pybuda.balancer.synthetic import chain_graph
from pybuda.balancer.wholecost import EpochAccumulator, host_io_cycles, placement_cycles, switch_costs
from pybuda.perf import cost
from pybuda.config import CompilerConfig
from pybuda.perf.config import PerfConfig
from pybuda.placer import place
from pybuda.placer.validate import validate_solution

N150 = get_device_descriptor(device_config="wh_n150")
E150 = get_device_descriptor(device_config="gs_e150")


def _model(cycles, cores=1, t=1, dram_bytes=0.0, dram_inputs=()):
    return SimpleNamespace(cycles=cycles, cores=cores, t=t, dram_bytes=dram_bytes, dram_inputs=dram_inputs)


def _epoch(costs, models, chain=True):
    acc = EpochAccumulator(costs)
    for i, m in enumerate(models):
        acc.add(i, m, [(i - 1, 1)] if chain and i else [], 0.0)
    return acc


def test_switch_costs_are_the_performance_models():
    perf = PerfConfig()
    costs = switch_costs(N150)
    assert costs.launch == perf.epoch_launch_cycles
    assert costs.binary_bytes_per_core == perf.kernel_binary_bytes_per_core + perf.overlay_blob_bytes_per_core
    assert costs.cache_slots == perf.binary_cache_slots
    assert costs.host_binary_rate == pytest.approx(perf.host_binary_write_bytes_per_s / N150.aiclk_hz)


def test_a_microbatch_of_one_pays_the_chain_not_the_slowest_op():
    costs = switch_costs(N150)
    models = [_model(1000), _model(3000), _model(2000)]
    switch = costs.switch_cycles(3, 0.0)
    one = _epoch(costs, models).device_cycles(1)
    assert one - switch == pytest.approx(1000 + 3000 + 2000 + 2 * costs.noc_latency)
    many = _epoch(costs, models).device_cycles(64)
    assert many - switch == pytest.approx(1000 + 3000 + 2000 + 2 * costs.noc_latency + 63 * 3000)
    # unconnected ops run side by side: the fill is the slowest one
    assert _epoch(costs, models, chain=False).device_cycles(1) - switch == pytest.approx(3000)


def test_the_epochs_dram_traffic_bounds_its_steady_state():
    costs = switch_costs(N150)
    models = [_model(100, dram_bytes=costs.dram_total * 5000), _model(100, dram_bytes=costs.dram_total * 5000)]
    acc = _epoch(costs, models, chain=False)
    assert acc.device_cycles(11) - acc.device_cycles(10) == pytest.approx(10000)


def test_binary_cache_overflow_makes_the_host_rewrite_every_epoch():
    costs = switch_costs(N150)
    fits = [_epoch(costs, [_model(10_000, cores=72)]) for _ in range(costs.cache_slots)]
    device = sum(e.device_cycles(64) for e in fits) / 64
    assert placement_cycles(fits, 64) == pytest.approx(device)
    over = fits + [_epoch(costs, [_model(10_000, cores=72)])]
    host = len(over) * costs.host_binary_cycles(72) / 64
    assert host > device  # this case is host-bound
    assert placement_cycles(over, 64) == pytest.approx(host)


def test_host_io_is_the_tilize_of_inputs_and_outputs_plus_pcie_for_dram_queues():
    g = chain_graph([(1, 4, 8), (1, 4, 8)], microbatch=16)
    perf = PerfConfig()
    nbytes = 2 * 4 * 8 * cost.tile_size_bytes(g.queues["in0"].df) * 16  # the input and the output queue
    on_host = host_io_cycles(g, N150, CompilerConfig(), 16)
    assert on_host == pytest.approx(nbytes / (perf.host_tilize_bytes_per_s / N150.aiclk_hz))
    # Grayskull reads its inputs from device DRAM: the input also crosses PCIe
    in_dram = host_io_cycles(g, E150, CompilerConfig(), 16)
    tilize = nbytes / (perf.host_tilize_bytes_per_s / E150.aiclk_hz)
    assert in_dram == pytest.approx(tilize + nbytes / 2 / cost.device_bandwidth(E150).pcie)
    # a host busier than the device bounds the microbatch
    costs = switch_costs(N150)
    epochs = [_epoch(costs, [_model(100)])]
    assert placement_cycles(epochs, 16, host_io=1e9) == pytest.approx(1e9 / 16)


@pytest.mark.slow
def test_nlp_on_bert_large_e150_pays_for_the_binary_cache_it_overflows():
    """BERT-Large seq 384 on gs_e150 (the synthetic encoder, unfused): the placer honours NLP's epoch
    breaks, and its whole cost, which charges the host's binary re-writes when the placement has more
    epochs than the binary cache holds, beats the best single global target's and every per-epoch cut
    that stays within the cache."""
    g = bert_encoder_graph(layers=24)
    cfg = CompilerConfig()
    sol = balance(g, E150, cfg)
    placement = place(g, sol, E150, cfg)
    assert validate_solution(g, sol, placement, E150, cfg) == []
    starts = {e.ops[0] for e in placement.epochs}
    assert set(sol.epoch_breaks) <= starts

    ctx = policies._Context(g, E150, cfg, Legalizer(g, E150, cfg))
    targets = policies._Targets(ctx)
    target, rows = policies.global_target(ctx, targets, policies._whole_score)
    global_cost = policies._whole_score(ctx, policies.assign_for_target(ctx, targets, target, rows))[0]
    chosen = [sol.op_models[op.name] for op in ctx.ops]
    chosen_cost = policies._whole_score(ctx, chosen, policies._merge_breaks(
        ctx, [ctx.index[name] for name in sol.epoch_breaks]))[0]
    assert chosen_cost <= global_cost
    slots = PerfConfig().binary_cache_slots
    for models, breaks, _ in segment.segment(ctx, targets, target):
        cost_, epochs = policies._whole_score(ctx, models, policies._merge_breaks(ctx, breaks))
        if epochs <= slots:
            assert chosen_cost <= cost_ * (1 + 1e-9)


def test_an_edge_between_epochs_costs_dram_traffic_in_both():
    """The producer's epoch writes the epoch-to-epoch queue once; every consuming op of a later epoch reads it."""
    from pybuda.balancer.wholecost import e2e_bytes, score_solution
    from pybuda.dtypes import DataFormat

    costs = switch_costs(N150)
    ops = [SimpleNamespace(out_df=DataFormat.Float16_b, name=n) for n in ("a", "b", "c")]
    m = SimpleNamespace(cycles=100, cores=1, t=2, out_rt=4, out_ct=8, dram_bytes=0.0, dram_inputs=(), prologue_inputs=())
    producers = [[], [(0, 1)], [(0, 1)]]
    nbytes = e2e_bytes(ops[0], m)
    assert nbytes == 2 * 4 * 8 * cost.tile_size_bytes(DataFormat.Float16_b)
    split, _ = score_solution(ops, [m, m, m], [0, 1, 1], producers, costs, 1000, prologue=[0.0] * 3)
    first, second = EpochAccumulator(costs), EpochAccumulator(costs)
    first.add(0, m, [], 0.0)
    second.add(1, m, [(0, 1)], 0.0)
    second.add(2, m, [(0, 1)], 0.0)
    without_queue = placement_cycles([first, second], 1000)
    first.dram += nbytes  # written once
    second.dram += 2 * nbytes  # read by b and by c
    first.queues = costs.queue_cycles(nbytes, m.cores)  # the queue's own channels: one buffer, one channel
    second.queues = costs.queue_cycles(2 * nbytes, m.cores)
    assert split == pytest.approx(placement_cycles([first, second], 1000))
    assert 2 * nbytes / costs.dram_total > m.cycles  # here the queue, not the ops, bounds the second epoch
    assert split > without_queue


def test_a_queue_on_few_channels_bounds_its_epochs():
    """A small producer grid writes a queue of few buffers, so few channels: its readers wait on those."""
    from pybuda.balancer.wholecost import e2e_bytes, score_solution
    from pybuda.dtypes import DataFormat

    costs = switch_costs(N150)
    assert costs.dram_channels > 1
    assert costs.queue_cycles(1000.0, 1) == pytest.approx(1000.0 / costs.dram_per_channel)
    assert costs.queue_cycles(1000.0, 100) == pytest.approx(1000.0 / (costs.dram_channels * costs.dram_per_channel))
    ops = [SimpleNamespace(out_df=DataFormat.Float16_b, name=n) for n in ("a", "b")]

    def model(cores):
        return SimpleNamespace(cycles=10, cores=cores, t=1, out_rt=16, out_ct=16, dram_bytes=0.0, dram_inputs=(),
                               prologue_inputs=(), grid_shape=(1, cores))
    one_core, wide = model(1), model(costs.dram_channels)
    narrow, _ = score_solution(ops, [one_core, one_core], [0, 1], [[], [(0, 1)]], costs, 1000, prologue=[0.0, 0.0])
    spread, _ = score_solution(ops, [wide, one_core], [0, 1], [[], [(0, 1)]], costs, 1000, prologue=[0.0, 0.0])
    nbytes = e2e_bytes(ops[0], one_core)
    assert costs.queue_cycles(nbytes, 1) > 10  # the one-channel queue, not the ops, sets the pace
    assert narrow > spread


def test_the_per_epoch_search_counts_the_queues_its_cut_makes():
    """An epoch [1, 2) of a chain reads op0's queue and writes op1's for op2; [1, 3) only reads op0's."""
    g = chain_graph([(1, 32, 32)] * 3, microbatch=64, with_output=True)
    cfg = CompilerConfig()
    ctx = policies._Context(g, N150, cfg, Legalizer(g, N150, cfg))
    targets = policies._Targets(ctx)
    ladder = [targets.fastest(1)[0].cycles]
    options = segment._epoch_options(ctx, targets, 1, ladder, segment._WindowMemo())
    model = targets.pick(1, ladder[0])
    queue = ctx.queue_write[0]
    assert queue == 32 * 32 * cost.tile_size_bytes(g.ops["op0"].out_df)
    acc = EpochAccumulator(ctx.switch)
    acc.add(1, model, [(0, 1)], ctx.prologue(1, model))
    acc.dram += ctx.read_bytes(1, 0, model) + ctx.queue_write[1]  # op0's queue read, op1's written
    assert options[2][0] == pytest.approx(acc.device_cycles(64))
    assert acc.dram / ctx.switch.dram_total > model.cycles  # the queues, not the op, set this epoch's pace
