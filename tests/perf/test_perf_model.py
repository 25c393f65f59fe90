"""The performance model on hand-built netlists: per-op cycles against the spec §6.1 formulas (through
perf/cost.py), bandwidth bounds (DRAM per channel and per chip, PCIe, Ethernet), pipeline fill, epoch
switches, multi-chip temporal epochs and host transfers."""

import math

import pytest

from perf_netlists import graph, netlist, op, program, queue, stream
from pybuda.arch import get_device_descriptor
from pybuda.perf import cost
from pybuda.perf.model import PerfConfig, estimate
from pybuda.errors import ConfigError, NetlistError
from pybuda.netlist import parse_file
from pybuda.dtypes import DataFormat as DF, MathFidelity as MF

N150 = get_device_descriptor(device_config="wh_n150")
E150 = get_device_descriptor(device_config="gs_e150")
N300 = get_device_descriptor(device_config="wh_n300")
BW_N150 = cost.device_bandwidth(N150)
TILE16 = 2080  # bytes of a Float16_b tile (spec §2.1)
TILE8 = 1120   # Bfp8_b


def _matmul_netlist(arch="wormhole_b0", fidelity=MF.HiFi2, in_df=DF.Float16_b, input_count=4):
    """act [1x1 grid, 4x4 tiles] x w [4x8 tiles] -> mm on 1x2 cores -> out queue."""
    qs = [queue("act", mblock=(2, 2), ublock=(2, 2), df=in_df, entries=2 * input_count, channels=(0,)),
          queue("w", grid=(1, 2), mblock=(2, 2), ublock=(2, 2), df=in_df, entries=1, channels=(1, 2)),
          queue("out", input="mm", grid=(1, 2), mblock=(2, 2), ublock=(2, 2), entries=2 * input_count, channels=(3, 4))]
    mm = op("mm", "matmul", ["act", "w"], grid=(1, 2), mblock=(2, 2), ublock=(2, 2), in_df=[in_df, in_df],
            fidelity=fidelity, attrs={"m_k": 2, "u_kt": 2})
    g = graph("g0", [mm], input_count=input_count)
    return netlist(qs, [g], program([("g0", {"act": stream(), "w": stream(prologue=True)})]), arch=arch)


# --- per-op cycles ----------------------------------------------------------------------------------

def test_matmul_kernel_matches_wh_v2_formula_by_hand():
    r = estimate(_matmul_netlist(), N150)
    row = r.op("mm")
    # WH B0 v3 FP16 set (spec §6.1): U = m_k·mb_m·mb_n = 2·2·2 = 8, F = 2 (HiFi2)
    math_ = 8 * 2 * 2 * 2 * 2 * 15.52           # U·u_kt·ur·uc·F·math_tiles
    spill = 1 * 2 * 2 * 2 * 2 * 47.70           # (m_k−1)·mb_m·mb_n·ur·uc·dest_spill
    unpack = 8 * 93.20 + 8 * 2 * 2 * 3 * 3.33   # U·unpack_ublocks + U·u_kt·ur·(1+uc)·unpack_tiles
    assert row.kernel_cycles == int(math_ + spill + unpack) == 3815
    # the ideal: t·tiles·K tile-MACs × 16 cycles × F (spec §6.2)
    # the ideal: t·tiles·K = 1·16·4 tile products per core × 16 cycles × F (spec §6.2)
    assert row.ideal_math_cycles == 64 * 16 * 2
    assert row.math_utilization == pytest.approx(row.ideal_math_cycles / row.cycles)
    assert row.flops_per_input == 2 * 32 ** 3 * 64 * 2  # tile products per core × 2 cores
    assert row.cores == 2 and row.bound == "kernel"


def test_fidelity_and_format_factors_come_from_cost():
    lofi = estimate(_matmul_netlist(fidelity=MF.LoFi, in_df=DF.Bfp8_b), N150).op("mm").kernel_cycles
    hifi4 = estimate(_matmul_netlist(fidelity=MF.HiFi4), N150).op("mm").kernel_cycles
    # BFP set, F = 1: math 8·2·2·2·1·14.16, spill 1·2·2·2·2·22.11, unpack 8·192.76 + 8·2·2·3·3.97
    assert lofi == int(64 * 14.16 + 16 * 22.11 + 8 * 192.76 + 96 * 3.97) == 3183
    assert hifi4 > estimate(_matmul_netlist(), N150).op("mm").kernel_cycles


def test_grayskull_matmul_uses_v1_formula():
    row = estimate(_matmul_netlist(arch="grayskull"), E150).op("mm")
    # t·((m_k−1)·1321 + (m_k·ub)·56 + (m_k·ub·u_kt·ur·uc)·36·F), ub = 4
    assert row.kernel_cycles == 1 * 1321 + 8 * 56 + 8 * 2 * 4 * 36 * 2


def test_eltwise_kernel_and_noc_bound():
    qs = [queue("a", mblock=(2, 2), ublock=(2, 2), entries=8), queue("b", mblock=(2, 2), ublock=(2, 2), entries=8),
          queue("o", input="add0", mblock=(2, 2), ublock=(2, 2), entries=8, channels=(2,))]
    n0 = op("nop0", "nop", ["a"], mblock=(2, 2), ublock=(2, 2))
    a0 = op("add0", "add", ["nop0", "b"], loc=(0, 1), mblock=(2, 2), ublock=(2, 2))
    nl = netlist(qs, [graph("g", [n0, a0])], program([("g", {"a": stream(), "b": stream()})]))
    r = estimate(nl, N150)
    add = r.op("add0")
    assert add.kernel_cycles == int(4 * 234.3 + 16 * 49.6 * 2)   # binary, df_w = 2 for Float16_b
    assert r.op("nop0").kernel_cycles == int(4 * 305 + 16 * 56)
    # nop0 -> add0 is an op-to-op pipe: 16 tiles at cost.py's NoC rate
    assert r.op("nop0").noc_cycles == math.ceil(16 * TILE16 / BW_N150.noc)


# --- bandwidth -------------------------------------------------------------------------------------

def _dram_readers(channels_a, channels_b, cores=8):
    """Two nops in one epoch, each reading a queue of ``cores`` buffers placed on the given channels. The
    queues are written by an earlier epoch (not by the host), so no host transfer hides the DRAM time."""
    qs = [queue("a", input="earlier", grid=(1, cores), mblock=(4, 4), ublock=(2, 2), entries=8,
                channels=channels_a),
          queue("b", input="earlier", grid=(1, cores), mblock=(4, 4), ublock=(2, 2), entries=8,
                channels=channels_b)]
    na = op("na", "nop", ["a"], grid=(1, cores), mblock=(4, 4), ublock=(2, 2))
    nb = op("nb", "nop", ["b"], grid=(1, cores), loc=(1, 0), mblock=(4, 4), ublock=(2, 2))
    return netlist(qs, [graph("g", [na, nb])], program([("g", {"a": stream(), "b": stream()})]))


def test_dram_channel_is_shared_by_every_reader_in_the_epoch():
    per_op = 8 * 64 * TILE16  # 8 cores × 64 tiles
    one_channel = estimate(_dram_readers((0,), (0,)), N150)
    assert one_channel.op("na").dram_cycles == math.ceil(2 * per_op / BW_N150.dram_per_channel)
    assert one_channel.op("na").bound == "dram"
    assert one_channel.epochs[0].dram_channel_cycles == {"0:0": math.ceil(2 * per_op / BW_N150.dram_per_channel)}
    separate = estimate(_dram_readers((0,), (1,)), N150)
    assert separate.op("na").dram_cycles == math.ceil(per_op / BW_N150.dram_per_channel)
    spread = estimate(_dram_readers(tuple(range(6)), tuple(range(6))), N150)
    # 16 buffers on 6 channels: channels 0 and 1 hold 3 each (round robin of 8 per queue: 0,1 twice)
    busiest = 4 * per_op / 8
    assert spread.op("na").dram_cycles == math.ceil(busiest / BW_N150.dram_per_channel)
    assert spread.samples_per_sec > separate.samples_per_sec > one_channel.samples_per_sec


def test_per_chip_dram_bandwidth_never_exceeded():
    spread = estimate(_dram_readers(tuple(range(6)), tuple(range(6))), N150)
    total_bytes = 2 * 8 * 64 * TILE16
    # a steady interval can never move more than the chip's DRAM bandwidth
    assert spread.epochs[0].steady_cycles >= total_bytes / BW_N150.dram_total


def test_host_queues_share_pcie():
    qs = [queue("a", grid=(1, 2), mblock=(4, 4), ublock=(2, 2), entries=8, loc="host"),
          queue("b", grid=(1, 2), mblock=(4, 4), ublock=(2, 2), entries=8, loc="host")]
    na = op("na", "nop", ["a"], grid=(1, 2), mblock=(4, 4), ublock=(2, 2))
    nb = op("nb", "nop", ["b"], grid=(1, 2), loc=(1, 0), mblock=(4, 4), ublock=(2, 2))
    r = estimate(netlist(qs, [graph("g", [na, nb])], program([("g", {"a": stream(), "b": stream()})])), N150)
    expected = math.ceil(2 * 2 * 64 * TILE16 / BW_N150.pcie)
    assert r.op("na").pcie_cycles == expected and r.op("na").bound == "pcie"
    assert r.epochs[0].pcie_cycles_per_input == expected
    assert r.epochs[0].bottleneck_bound == "pcie"


def test_prologue_parameters_cost_nothing_per_input_but_are_loaded_at_switch():
    r = estimate(_matmul_netlist(), N150)
    row = r.op("mm")
    # w is in L1: the only DRAM traffic per input is act and the output. act is in0 of a 1x2 grid: fetched
    # once for the grid row and multicast to both cores (net2pipe row multicast)
    assert r.epochs[0].dram_channel_cycles["0:0"] == math.ceil(16 * TILE16 / BW_N150.dram_per_channel)
    assert row.dram_cycles >= r.epochs[0].dram_channel_cycles["0:0"]


# --- epochs ----------------------------------------------------------------------------------------

def _two_epochs(same_graph=False, chip_b=0):
    """g0: nop of act -> e2e queue; g1: matmul of e2e by a prologue weight -> out."""
    qs = [queue("act", mblock=(2, 2), ublock=(2, 2), entries=8),
          queue("e2e", input="n0", mblock=(2, 2), ublock=(2, 2), entries=4, channels=(1,), chip=chip_b),
          queue("w", grid=(1, 2), mblock=(2, 2), ublock=(2, 2), entries=1, channels=(2, 3), chip=chip_b),
          queue("out", input="mm", grid=(1, 2), mblock=(2, 2), ublock=(2, 2), entries=8, channels=(4,), chip=chip_b)]
    g0 = graph("g0", [op("n0", "nop", ["act"], mblock=(2, 2), ublock=(2, 2))])
    mm = op("mm", "matmul", ["e2e", "w"], grid=(1, 2), mblock=(2, 2), ublock=(2, 2), attrs={"m_k": 2, "u_kt": 2})
    g1 = graph("g1", [mm], chip=chip_b)
    prog = program([("g0", {"act": stream()}), ("g1", {"e2e": stream(), "w": stream(prologue=True)})])
    return netlist(qs, [g0, g1], prog)


def test_epoch_switch_loads_binaries_and_prologue_from_dram():
    r = estimate(_two_epochs(), N150)
    assert r.num_epochs == 2
    e1 = r.epochs[1]
    cfg = PerfConfig()
    binaries = 2 * (cfg.kernel_binary_bytes_per_core + cfg.overlay_blob_bytes_per_core) / BW_N150.dram_total
    # each core of mm holds its in1 column strip: t·K·cols = 1·4·4 tiles (spec §5.3 prologue buffer)
    prologue_bytes = 2 * 16 * TILE16
    assert e1.prologue_bytes == prologue_bytes
    # w's two buffers sit on channels 2 and 3: each channel serves half, so the per-channel time rules
    prologue = max(prologue_bytes / 2 / BW_N150.dram_per_channel, prologue_bytes / BW_N150.dram_total)
    assert e1.switch_breakdown["launch"] == cfg.epoch_launch_cycles
    assert e1.switch_breakdown["binaries"] == pytest.approx(binaries)
    assert e1.switch_breakdown["prologue"] == pytest.approx(prologue)
    assert e1.switch_cycles == math.ceil(cfg.epoch_launch_cycles + binaries + prologue)
    assert e1.total_cycles == e1.switch_cycles + e1.fill_cycles + (e1.input_count - 1) * e1.steady_cycles
    assert r.device_cycles_per_microbatch == sum(e.total_cycles for e in r.epochs)


def test_same_graph_back_to_back_reloads_nothing():
    r = estimate(_matmul_netlist(), N150)
    e = r.epochs[0]
    assert e.switch_breakdown == {"launch": float(PerfConfig().epoch_launch_cycles), "binaries": 0.0,
                                  "prologue": 0.0}


def test_binary_cache_overflow_makes_the_host_resend_binaries():
    base = estimate(_two_epochs(), N150)
    assert base.host_binary_cycles_per_microbatch == 0
    tiny_cache = estimate(_two_epochs(), N150, config=PerfConfig(binary_cache_slots=1))
    cfg = PerfConfig()
    per_core = cfg.kernel_binary_bytes_per_core + cfg.overlay_blob_bytes_per_core
    # both switches (1 core, then 2 cores) reload binaries the host must send again over PCIe
    assert [e.host_binary_bytes for e in tiny_cache.epochs] == [per_core, 2 * per_core]
    # written by the host runtime at its binary-write rate, not the PCIe DMA rate
    rate = cfg.host_binary_write_bytes_per_s / N150.aiclk_hz
    assert tiny_cache.host_binary_cycles_per_microbatch == math.ceil(3 * per_core / rate)
    # the host sends them ahead of the device: switch times do not change
    assert tiny_cache.device_cycles_per_microbatch == base.device_cycles_per_microbatch
    assert tiny_cache.cycles_per_microbatch >= tiny_cache.host_binary_cycles_per_microbatch


def test_report_says_whether_the_device_or_the_host_limits_the_run():
    base = estimate(_two_epochs(), N150)
    host_io = base.host_input_cycles_per_microbatch + base.host_output_cycles_per_microbatch
    # a two-op netlist does less on the device than the host's tilizing of its input and output
    assert base.limited_by == ("host io" if host_io > base.device_cycles_per_microbatch else "device")
    # a one-slot cache and a crawling host binary writer: re-sending binaries bounds the microbatch
    slow_host = estimate(_two_epochs(), N150, config=PerfConfig(binary_cache_slots=1,
                                                                host_binary_write_bytes_per_s=1e6))
    assert slow_host.limited_by == "host binaries"
    assert slow_host.cycles_per_microbatch >= slow_host.host_binary_cycles_per_microbatch
    assert slow_host.to_dict()["limited_by"] == "host binaries"
    assert "limited by the host binaries" in slow_host.summary()
    # the first microbatch waits for the binaries too: a short run is no faster than the steady state
    assert slow_host.samples_per_sec_for(4) <= slow_host.samples_per_sec * 1.001


def test_epoch_launch_constant_is_a_parameter():
    slow = estimate(_two_epochs(), N150, config=PerfConfig(epoch_launch_cycles=1_000_000))
    fast = estimate(_two_epochs(), N150)
    assert slow.device_cycles_per_microbatch - fast.device_cycles_per_microbatch == 2 * (1_000_000 - 20_000)


def test_pipeline_fill_is_the_longest_path():
    qs = [queue("a", mblock=(2, 2), ublock=(2, 2), entries=8),
          queue("o", input="n2", mblock=(2, 2), ublock=(2, 2), entries=8, channels=(1,))]
    ops = [op("n0", "nop", ["a"], mblock=(2, 2), ublock=(2, 2)),
           op("n1", "exp", ["n0"], loc=(0, 3), mblock=(2, 2), ublock=(2, 2)),
           op("n2", "nop", ["n1"], loc=(2, 3), mblock=(2, 2), ublock=(2, 2))]
    r = estimate(netlist(qs, [graph("g", ops, input_count=16)], program([("g", {"a": stream()})])), N150)
    c = [r.op(n).cycles for n in ("n0", "n1", "n2")]
    cfg = PerfConfig()
    fill = cfg.dram_latency_cycles + c[0] + (40 + 10 * 3) + c[1] + (40 + 10 * 2) + c[2]
    e = r.epochs[0]
    assert e.fill_cycles == fill
    assert e.steady_cycles == max(c) and e.bottleneck_op == "n1"
    assert e.total_cycles == e.switch_cycles + fill + 15 * e.steady_cycles
    assert r.op("n1").core_utilization == 1.0 and r.op("n1").bottleneck


# --- multi-chip --------------------------------------------------------------------------------------

def test_chips_of_one_temporal_epoch_run_concurrently_and_pay_ethernet():
    two_chips = estimate(_two_epochs(chip_b=1), N300)
    assert two_chips.num_epochs == 1 and two_chips.epochs[0].chips == [0, 1]
    mm, n0 = two_chips.op("mm"), two_chips.op("n0")
    eth_rate = N300.eth_link_bytes_per_s * PerfConfig().eth_links_per_chip_pair / N300.aiclk_hz
    # the e2e queue lives on chip 1: n0 (chip 0) writes its 16 tiles over Ethernet, mm reads it locally
    assert n0.eth_cycles == math.ceil(16 * TILE16 / eth_rate) and mm.eth_cycles == 0
    assert "1:1" in two_chips.epochs[0].dram_channel_cycles
    e = two_chips.epochs[0]
    assert e.steady_cycles == max(mm.cycles, n0.cycles)
    one_chip = estimate(_two_epochs(), N300)
    assert one_chip.num_epochs == 2
    # pipelining over two chips beats running the two epochs one after the other
    assert two_chips.device_cycles_per_microbatch < one_chip.device_cycles_per_microbatch


def test_explicit_temporal_epochs_split_chips():
    r = estimate(_two_epochs(chip_b=1), N300, temporal_epochs={"g0": 0, "g1": 1})
    assert [e.chips for e in r.epochs] == [[0], [1]]


# --- program / host ----------------------------------------------------------------------------------

def test_microbatch_scales_input_count():
    base = estimate(_matmul_netlist(input_count=4), N150)
    assert base.microbatch == 4
    big = estimate(_matmul_netlist(input_count=4), N150, microbatch=32)
    assert big.microbatch == 32 and big.epochs[0].input_count == 32
    # the fixed per-microbatch costs (switch, fill) are amortised over more samples
    assert big.device_cycles_per_microbatch / 32 < base.device_cycles_per_microbatch / 4


def test_host_input_transfer_overlaps_only_with_a_second_buffer():
    overlapped = estimate(_matmul_netlist(input_count=4), N150)  # act has 8 = 2·4 entries
    assert overlapped.host_overlapped
    nl = _matmul_netlist(input_count=4)
    nl.queues["act"].entries = 4
    serial = estimate(nl, N150)
    assert not serial.host_overlapped
    # the host tilizes the microbatch, then writes it over PCIe into the DRAM queue
    act_bytes = 4 * 16 * TILE16
    tilize = PerfConfig().host_tilize_bytes_per_s / N150.aiclk_hz
    assert serial.host_input_cycles_per_microbatch == math.ceil(act_bytes / tilize + act_bytes / BW_N150.pcie)
    # and untilizes the output it reads back over PCIe
    out_bytes = 4 * 32 * TILE16
    assert serial.host_output_cycles_per_microbatch == math.ceil(out_bytes / tilize + out_bytes / BW_N150.pcie)
    assert serial.cycles_per_microbatch == pytest.approx(serial.device_cycles_per_microbatch +
                                                         serial.host_input_cycles_per_microbatch +
                                                         serial.host_output_cycles_per_microbatch, abs=2)
    assert serial.samples_per_sec < overlapped.samples_per_sec


def test_loop_count_throughput_includes_first_latency():
    r = estimate(_matmul_netlist(), N150)
    assert r.samples_per_sec_for(1) == pytest.approx(r.microbatch / r.latency_s)
    assert r.samples_per_sec_for(1000) == pytest.approx(r.samples_per_sec, rel=0.01)
    with pytest.raises(ConfigError):
        r.samples_per_sec_for(0)


def test_spec_example_and_rich_fixture():
    here = "tests/netlist/fixtures/"
    r = estimate(parse_file(here + "spec_example.yaml"), "wh_n150")
    assert [o.name for o in r.ops] == ["mm0", "out_nop"]
    assert r.op("out_nop").pcie_cycles > 0  # untilizes into a host queue
    assert r.samples_per_sec > 0 and r.latency_s > 0
    rich = estimate(parse_file(here + "rich.yaml", arch="wormhole_b0"), "wh_n150")
    assert rich.num_epochs == 2
    assert rich.op("fused0").kernel_cycles > rich.op("ew").kernel_cycles  # exp + gelu per tile


def test_report_tables_and_summary():
    r = estimate(_two_epochs(), N150)
    d = r.to_dict()
    assert d["epochs"] == 2 and len(d["op_table"]) == 2 and len(d["epoch_table"]) == 2
    assert {"cycles", "bound", "cores", "math_utilization", "core_utilization"} <= set(d["op_table"][0])
    assert "samples/s" in r.summary()
    assert r.bottleneck is not None


# --- errors ------------------------------------------------------------------------------------------

def test_errors():
    with pytest.raises(ConfigError, match="grayskull"):
        estimate(_matmul_netlist(arch="grayskull"), N150)
    with pytest.raises(ConfigError, match="chip 1"):
        estimate(_two_epochs(chip_b=1), N150)
    with pytest.raises(ConfigError, match="no program"):
        estimate(_matmul_netlist(), N150, program="nope")
    with pytest.raises(ConfigError, match="PerfConfig"):
        estimate(_matmul_netlist(), N150, config=object())
    nl = _matmul_netlist()
    nl.programs[0].instructions = []
    with pytest.raises(NetlistError):
        estimate(nl, N150)


def test_estimate_compiled_uses_the_placer_temporal_epochs():
    from types import SimpleNamespace

    from pybuda.perf.model import estimate_compiled

    nl = _two_epochs(chip_b=1)
    nl.graphs = {"fwd_0": nl.graphs["g0"], "fwd_1": nl.graphs["g1"]}
    for g, name in zip(nl.graphs.values(), nl.graphs):
        g.name = name
    for ins in nl.programs[0].instructions:
        if hasattr(ins, "graph_name"):
            ins.graph_name = {"g0": "fwd_0", "g1": "fwd_1"}[ins.graph_name]
    epochs = [SimpleNamespace(epoch_type="fwd", global_epoch=0, temporal_epoch=0),
              SimpleNamespace(epoch_type="fwd", global_epoch=1, temporal_epoch=1)]
    results = SimpleNamespace(netlist=nl, device=N300, placer_solution=SimpleNamespace(epochs=epochs))
    assert estimate_compiled(results).num_epochs == 2
    epochs[1].temporal_epoch = 0
    assert estimate_compiled(results).num_epochs == 1
    with pytest.raises(ConfigError, match="no netlist"):
        estimate_compiled(SimpleNamespace(netlist=None))


def test_matmul_operands_are_fetched_once_per_grid_row_and_column():
    # 2x3 grid: in0 (rows x K) multicast along each of 2 rows, in1 (K x cols) down each of 3 columns
    qs = [queue("a", input="earlier", grid=(2, 1), mblock=(1, 2), ublock=(2, 2), entries=8, channels=(0,)),
          queue("b", input="earlier", grid=(1, 3), mblock=(2, 1), ublock=(2, 2), entries=8, channels=(1,))]
    mm = op("mm", "matmul", ["a", "b"], grid=(2, 3), mblock=(1, 1), ublock=(2, 2), attrs={"m_k": 2, "u_kt": 2})
    r = estimate(netlist(qs, [graph("g", [mm])], program([("g", {"a": stream(), "b": stream()})])), N150)
    in0_per_core, in1_per_core = 2 * 4, 4 * 2  # rows·K and K·cols tiles
    chans = r.epochs[0].dram_channel_cycles
    assert chans["0:0"] == math.ceil(2 * in0_per_core * TILE16 / BW_N150.dram_per_channel)
    assert chans["0:1"] == math.ceil(3 * in1_per_core * TILE16 / BW_N150.dram_per_channel)


def test_sparse_matmul_costs_its_tile_products():
    from pybuda.perf.model import _CostModel, _CostOp

    qs = [queue("sp", grid=(2, 1), mblock=(1, 1), ublock=(3, 1), entries=1, channels=(0,)),
          queue("act", input="earlier", mblock=(8, 1), ublock=(8, 2), entries=8, channels=(1,)),
          queue("idx", grid=(2, 1), mblock=(1, 1), ublock=(2, 1), entries=1, channels=(2,), df=DF.RawUInt32)]
    attrs = {"m_k": 64, "u_kt": 1, "identity": True, "num_sparse_tiles": 6, "num_index_tiles": 4,
             "indices_len": 100, "act_t": 1}
    sp = op("sp_mm", "matmul", ["sp", "act", "idx"], grid=(2, 1), mblock=(2, 1), ublock=(2, 2),
            in_df=[DF.Float16_b, DF.Float16_b, DF.RawUInt32], attrs=attrs)
    nl = netlist(qs, [graph("g", [sp])],
                 program([("g", {"sp": stream(prologue=True), "act": stream(), "idx": stream(prologue=True)})]))
    row = estimate(nl, N150).op("sp_mm")
    # each core (BBE sparse V2, HiFi2 table at ublock 2x2: math 38, reload 50, pack 50): ceil(100 / 2) = 50
    # non-zero tiles x 2 output columns; no num_nz_strips in this hand-written netlist, so each core is taken to
    # reach its half of the 64 strips and one more (33), and 33 + 2 non-zero ublocks
    decode = 33 * 2 * 80 + 35 * 80 + 33 * 100
    assert row.kernel_cycles == int(decode + 50 * 2 * 38 + 35 * 2 * 2 * 50 + 2 * 2 * 2 * 50) == 22580
    assert row.ideal_math_cycles == 50 * 2 * 16 * 2
    # one source of truth: cost.py's sparse formula (what the balancer uses) gives the same numbers
    nl_op = nl.graphs["g"].ops["sp_mm"]
    assert cost.kernel_cycles(_CostOp(nl_op), _CostModel(nl_op), N150) == row.kernel_cycles
    assert cost.matmul_ideal_cycles(_CostOp(nl_op), _CostModel(nl_op), N150) == row.ideal_math_cycles


# --- fork/join loops and gather pipes (PerfConfig.fork_join_stalls / gather_pipes, off by default) ---

def _fork_join_netlist(long_ops=3, buf=2):
    """in -> a (fork) -> [exp x long_ops] -> j (add, join) <- a: a fork/join whose long path has
    ``long_ops`` SFPU ops and whose short path is the direct a -> j edge."""
    blk = dict(grid=(1, 1), mblock=(2, 2), ublock=(2, 2))
    qs = [queue("in", entries=8, **blk), queue("out", input="j", entries=8, **blk)]
    ops = [op("a", "nop", ["in"], **blk)]
    prev = "a"
    for k in range(long_ops):
        ops.append(op(f"e{k}", "exp", [prev], loc=(0, k + 1), **blk))
        prev = f"e{k}"
    ops.append(op("j", "add", [prev, "a"], loc=(0, long_ops + 1), **blk))
    for o in ops:
        o.buf_size_mb = buf
    return netlist(qs, [graph("g0", ops)], program([("g0", {"in": stream()})]))


def test_fork_join_loop_bounds_interval_by_latency_over_short_path_buffer():
    nl = _fork_join_netlist(long_ops=3, buf=2)
    off = estimate(nl, N150)
    on = estimate(nl, N150, config=PerfConfig(fork_join_stalls=True))
    # off by default: the slowest op sets the interval
    assert off.epochs[0].steady_cycles == max(r.cycles for r in off.ops)
    # on: loop latency = a + 3 exp + j (t = 1: per-mblock time = cycles), tokens = a's 2 output mblocks
    # plus j's 2-ublock input buffer (2 of the 4 tiles per input = 0.5 inputs)
    loop = sum(on.op(n).cycles for n in ("a", "e0", "e1", "e2", "j"))
    e = on.epochs[0]
    assert e.bottleneck_bound == "fork_join" and e.bottleneck_op == "a"
    assert e.steady_cycles == pytest.approx(loop / (2 + 8 / 16), rel=1e-3)
    assert on.op("a").fork_join_with == "j"
    assert on.samples_per_sec < off.samples_per_sec


def test_fork_join_more_short_path_buffering_removes_the_stall():
    small = estimate(_fork_join_netlist(buf=2), N150, config=PerfConfig(fork_join_stalls=True))
    big = estimate(_fork_join_netlist(buf=8), N150, config=PerfConfig(fork_join_stalls=True))
    assert big.epochs[0].steady_cycles < small.epochs[0].steady_cycles
    assert big.epochs[0].bottleneck_bound != "fork_join"  # 8 mblocks cover the 5-op loop


def test_gather_pipe_rates_follow_source_count():
    """A consumer on one core gathering from a 1x4 producer grid reads at the gather rate, one fed by
    a same-grid producer at the direct-pipe rate (NBS §6.3)."""
    def nl(prod_grid):
        qs = [queue("in", grid=prod_grid, mblock=(1, 4 // prod_grid[1]), ublock=(1, 1), entries=8),
              queue("out", input="c", mblock=(1, 4), entries=8)]
        p = op("p", "nop", ["in"], grid=prod_grid, mblock=(1, 4 // prod_grid[1]))
        c = op("c", "nop", ["p"], loc=(1, 0), mblock=(1, 4))
        return netlist(qs, [graph("g0", [p, c])], program([("g0", {"in": stream()})]))
    cfg = PerfConfig(gather_pipes=True)
    direct = estimate(nl((1, 1)), N150, config=cfg).op("c")
    gather = estimate(nl((1, 4)), N150, config=cfg).op("c")
    nbytes = 4 * TILE16
    assert direct.noc_cycles == math.ceil(nbytes / (cfg.pipe_direct_bytes_per_s / N150.aiclk_hz))
    # 4 sources: log2(4)-1 = 1 of the 3 steps from 16 GB/s (2 sources) to 10 GB/s (16 sources)
    rate = (16e9 - (16e9 - 10e9) / 3) / N150.aiclk_hz
    assert gather.noc_cycles == math.ceil(nbytes / rate)
    assert gather.noc_cycles > direct.noc_cycles
