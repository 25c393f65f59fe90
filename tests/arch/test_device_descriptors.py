"""Device descriptors: presets, grids, coordinate mapping, harvesting, memory and peak throughput."""

import pytest

from pybuda.arch import (
    PRESETS, BackendDevice, DeviceDescriptor, arch_from_netlist_name, device_config_names, get_device_descriptor,
    harvested_noc_cols, harvested_noc_rows, harvesting_mask_from_noc_rows, netlist_arch_name, tile_size_bytes,
    with_chips,
)
from pybuda.errors import ConfigError
from pybuda.dtypes import DataFormat, MathFidelity

KiB = 1024


@pytest.mark.parametrize("preset, arch, grid, chips, cores, clock", [
    ("gs_e75", BackendDevice.Grayskull, (8, 12), 1, 96, 1.0e9),
    ("gs_e150", BackendDevice.Grayskull, (10, 12), 1, 120, 1.2e9),
    ("wh_n150", BackendDevice.Wormhole_B0, (9, 8), 1, 72, 1.0e9),
    ("wh_n300", BackendDevice.Wormhole_B0, (8, 8), 2, 128, 1.0e9),
    ("bh_p150", BackendDevice.Blackhole, (10, 14), 1, 140, 1.35e9),
    ("galaxy", BackendDevice.Wormhole_B0, (10, 8), 32, 2560, 1.0e9),
])
def test_presets(preset, arch, grid, chips, cores, clock):
    d = get_device_descriptor(device_config=preset)
    assert isinstance(d, DeviceDescriptor)
    assert (d.arch, d.grid_size, d.chip_count, d.total_cores, d.aiclk_hz) == (arch, grid, chips, cores, clock)
    assert d.name == preset
    # arch may be given too, as an enum or a netlist string, as long as it matches
    assert get_device_descriptor(arch.value, device_config=preset) == d
    assert get_device_descriptor(arch, device_config=preset.upper()) == d


def test_unharvested_defaults_from_arch_alone():
    assert get_device_descriptor("grayskull").grid_size == (10, 12)
    assert get_device_descriptor(BackendDevice.Wormhole_B0).grid_size == (10, 8)
    assert get_device_descriptor("wormhole").grid_size == (10, 8)  # A0 name maps to B0
    assert get_device_descriptor("blackhole").grid_size == (10, 14)


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ConfigError) as err:
        get_device_descriptor(device_config="wh_n999")
    for name in ("gs_e75", "gs_e150", "wh_n150", "wh_n300", "bh_p150"):
        assert name in str(err.value)
    assert set(device_config_names()) == set(PRESETS)


@pytest.mark.parametrize("kwargs", [
    dict(arch="grayskull", device_config="wh_n150"),   # arch disagrees with preset
    dict(),                                             # nothing to build from
    dict(arch="quasar"),                                # unknown arch
    dict(arch="wormhole_b0", num_chips=0),
])
def test_bad_device_requests(kwargs):
    with pytest.raises(ConfigError):
        get_device_descriptor(**kwargs)


def test_chip_count_override():
    assert get_device_descriptor("wormhole_b0", num_chips=4).chip_count == 4
    assert get_device_descriptor(device_config="wh_n300").chip_count == 2
    assert with_chips(get_device_descriptor(device_config="wh_n150"), 2).total_cores == 144
    # Grayskull has no Ethernet: several chips are cards in one host, linked over PCIe
    cards = with_chips(get_device_descriptor("grayskull"), 2)
    assert cards.chip_count == 2 and cards.chip_link == "pcie"
    assert get_device_descriptor("wormhole_b0", num_chips=2).chip_link == "ethernet"
    with pytest.raises(ConfigError):
        with_chips(get_device_descriptor("grayskull"), 0)


# ---------------------------------------------------------------------------------------------------
# Coordinates
# ---------------------------------------------------------------------------------------------------

def test_wormhole_logical_to_noc_matches_overview_example():
    # docs/public/overview.md: WH logical [7, 6] -> physical x=8, y=9
    assert get_device_descriptor("wormhole_b0").logical_to_noc(7, 6) == (8, 9)


def test_workers_skip_dram_and_eth_rows_and_columns():
    gs = get_device_descriptor(device_config="gs_e150")
    assert gs.worker_noc_ys == (1, 2, 3, 4, 5, 7, 8, 9, 10, 11)  # row 0 and 6 hold DRAM
    assert gs.worker_noc_xs == tuple(range(1, 13))
    wh = get_device_descriptor("wormhole_b0")
    assert wh.worker_noc_xs == (1, 2, 3, 4, 6, 7, 8, 9)  # columns 0 and 5 hold DRAM
    assert wh.logical_to_noc(5, 4) == (6, 7)
    bh = get_device_descriptor(device_config="bh_p150")
    assert 8 not in bh.worker_noc_xs and 9 not in bh.worker_noc_xs and bh.worker_noc_ys[0] == 2


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_logical_noc_round_trip(preset):
    d = get_device_descriptor(device_config=preset)
    cores = d.worker_cores()
    assert len(cores) == d.cores_per_chip
    nocs = {d.logical_to_noc(r, c) for r, c in cores}
    assert len(nocs) == len(cores)
    for r, c in cores:
        assert d.noc_to_logical(*d.logical_to_noc(r, c)) == (r, c)
    dram = {xy for ch in d.dram_channels for xy in ch.noc_endpoints}
    assert not nocs & dram and not nocs & set(d.eth_cores)


def test_coordinates_out_of_range():
    d = get_device_descriptor(device_config="wh_n150")
    with pytest.raises(ConfigError):
        d.logical_to_noc(9, 0)  # only 9 rows after harvesting
    with pytest.raises(ConfigError):
        d.noc_to_logical(1, 11)  # NoC row 11 is harvested on n150
    with pytest.raises(ConfigError):
        d.noc_to_logical(0, 0)  # a DRAM core
    assert d.logical_to_translated(0, 0) == (18, 18)
    with pytest.raises(ConfigError):
        get_device_descriptor("grayskull").logical_to_translated(0, 0)


# ---------------------------------------------------------------------------------------------------
# Harvesting
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, table", [
    ("grayskull", (5, 7, 4, 8, 3, 9, 2, 10, 1, 11)),
    ("wormhole_b0", (11, 1, 10, 2, 9, 3, 8, 4, 7, 5)),
])
def test_mask_bits_are_logical_harvest_indices(arch, table):
    for bit, row in enumerate(table):
        assert harvested_noc_rows(arch, 1 << bit) == (row,)
        assert harvesting_mask_from_noc_rows(arch, [row]) == 1 << bit
        d = get_device_descriptor(arch, harvesting_mask=1 << bit)
        assert d.grid_rows == 9 and row not in d.worker_noc_ys and d.harvested_noc_rows == (row,)


def test_n150_harvests_noc_row_11():
    d = get_device_descriptor(device_config="wh_n150")
    assert d.harvested_noc_rows == (11,) and d.harvesting_mask == 0b1
    assert d.logical_to_noc(8, 0) == (1, 10)


def test_preset_mask_can_be_overridden():
    assert get_device_descriptor(device_config="wh_n150", harvesting_mask=0b11).grid_size == (8, 8)
    # mask 0 keeps the preset's mask: a config default of 0 must never un-harvest a card
    assert get_device_descriptor(device_config="wh_n150", harvesting_mask=0).grid_size == (9, 8)


@pytest.mark.parametrize("rows", [[0], [6], [12], [5, 6]])
def test_illegal_grayskull_rows(rows):
    # only rows 1-5 and 7-11 hold workers on Grayskull
    with pytest.raises(ConfigError) as err:
        harvesting_mask_from_noc_rows("grayskull", rows)
    assert "cannot be harvested" in str(err.value)


@pytest.mark.parametrize("arch, mask", [
    ("grayskull", 1 << 10),        # no 11th harvest index
    ("wormhole_b0", 0b1 << 12),
    ("grayskull", (1 << 10) - 1),  # every row
    ("wormhole_b0", -1),
    ("blackhole", 1 << 14),
])
def test_illegal_masks(arch, mask):
    with pytest.raises(ConfigError):
        get_device_descriptor(arch, harvesting_mask=mask)


def test_blackhole_harvests_columns():
    assert harvested_noc_cols("blackhole", 0b11) == (1, 16)
    d = get_device_descriptor(device_config="bh_p150", harvesting_mask=0b11)
    assert d.grid_size == (10, 12) and d.total_cores == 120
    assert d.peak_tflops("LoFi") == pytest.approx(664, rel=0.01)  # the 120-core firmware's figure
    with pytest.raises(ConfigError):
        harvesting_mask_from_noc_rows("blackhole", [3])


# ---------------------------------------------------------------------------------------------------
# Memory, Dest, DRAM, links
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, l1, budget", [
    ("grayskull", 1024 * KiB, 564 * KiB),
    ("wormhole_b0", 1_499_136, 1_499_136 - 460 * KiB),
])
def test_l1_budgets(arch, l1, budget):
    d = get_device_descriptor(arch)
    assert d.l1_size_bytes == l1
    assert d.l1_op_buffer_budget_bytes == budget
    assert d.l1_pybuda_budget_bytes == budget - 100 * KiB
    assert d.l1_op_buffer_budget_bytes // KiB in (564, 1004)


def test_dest_limits():
    d = get_device_descriptor(device_config="wh_n150")
    assert d.max_ublock_tiles(DataFormat.Float16_b) == 8
    assert d.max_ublock_tiles(DataFormat.Float32) == 4
    assert d.max_ublock_tiles(DataFormat.Int32) == 4


def test_dram_channels():
    gs = get_device_descriptor("grayskull")
    assert gs.dram_channel_count == 8 and gs.dram_bytes_per_chip == 8 * 2**30
    assert gs.dram_channels[0].noc_endpoints == ((1, 0),)
    wh = get_device_descriptor("wormhole_b0")
    assert wh.dram_channel_count == 6 and wh.dram_bytes_per_chip == 12 * 2**30
    assert all(len(ch.noc_endpoints) == 3 for ch in wh.dram_channels)
    # 12 GDDR6 blocks x 24 GiB/s theoretical; 19 GiB/s measured per block
    assert wh.dram_channel_bw_theoretical * 6 == pytest.approx(288 * 2**30)
    assert wh.dram_channel_bw_measured == pytest.approx(2 * 19 * 2**30)
    assert gs.dram_channel_bw_theoretical == pytest.approx(12.8 * 2**30)
    bh = get_device_descriptor(device_config="bh_p150")
    assert bh.dram_channel_count == 8 and bh.dram_channel_bw_theoretical * 8 == pytest.approx(512e9)


def test_links():
    wh = get_device_descriptor(device_config="wh_n300")
    assert wh.noc_bytes_per_cycle == 32 and wh.noc_bytes_per_s == 32e9
    assert len(wh.eth_cores) == 16
    assert wh.eth_link_bytes_per_s == pytest.approx(12.5 * 2**30 * 0.9)
    gs = get_device_descriptor("grayskull")
    assert gs.eth_cores == () and gs.eth_link_bytes_per_s == 0
    assert gs.pcie_bytes_per_s == 32e9 and gs.host_memory_channels == 1 and wh.host_memory_channels == 4


def test_tile_dims_per_arch():
    assert get_device_descriptor("grayskull").supported_tile_dims == ((32, 32),)
    assert (16, 32) in get_device_descriptor("wormhole_b0").supported_tile_dims


# ---------------------------------------------------------------------------------------------------
# Peak throughput vs the board spec table (perf_calibration §2.1-2.2)
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset, fidelity, column", [
    ("gs_e75", "HiFi4", "FP16"),      # 96 x 1.0 GHz x 2304/4
    ("gs_e75", "LoFi", "FP8"),        # 96 x 2304
    ("gs_e150", "HiFi4", "FP16"),     # 120 x 1.2 GHz x 576 = 83
    ("gs_e150", "LoFi", "FP8"),
    ("gs_e150", "HiFi4", "BLOCKFP8"),  # no BFP8 speed-up on Grayskull
    ("wh_n150", "HiFi4", "FP16"),     # 72 x 1.024 = 74
    ("wh_n150", "HiFi2", "BLOCKFP8"),  # 72 x 2.048 = 148
    ("wh_n300", "HiFi4", "FP16"),     # 128 x 1.024 = 131
    ("wh_n300", "HiFi2", "BLOCKFP8"),
    ("bh_p150", "LoFi", "BLOCKFP8"),  # 140 x 1.35 GHz x 4096 = 774
])
def test_peak_tflops_reproduce_board_table(preset, fidelity, column):
    d = get_device_descriptor(device_config=preset)
    assert d.peak_tflops(fidelity) == pytest.approx(d.published[column], rel=0.01)


def test_wormhole_fp8_figure_is_derated():
    # The WH spec's FP8 numbers are ~0.89 of LoFi peak (262 = 64 cores x 4.096 TF); record, don't model.
    d = get_device_descriptor(device_config="wh_n150")
    assert d.peak_tflops(MathFidelity.LoFi) == pytest.approx(294.9, rel=0.001)
    assert d.published["FP8"] / d.peak_tflops("LoFi") == pytest.approx(0.89, abs=0.01)


def test_flops_per_cycle_follow_fidelity_phases():
    wh = get_device_descriptor("wormhole_b0")
    assert [wh.flops_per_cycle_per_core(f) for f in ("LoFi", "HiFi2", "HiFi3", "HiFi4")] == [4096, 2048, 4096 / 3, 1024]
    assert wh.flops_per_cycle_per_core("HiFi2_B") == 2048
    assert get_device_descriptor("grayskull").flops_per_cycle_per_core("HiFi4") == 576


# ---------------------------------------------------------------------------------------------------
# Names and tiles
# ---------------------------------------------------------------------------------------------------

def test_netlist_arch_names():
    assert netlist_arch_name(BackendDevice.Grayskull) == "grayskull"
    assert netlist_arch_name(BackendDevice.Wormhole_B0) == "wormhole_b0"
    assert netlist_arch_name("Blackhole") == "blackhole"
    assert arch_from_netlist_name("WORMHOLE_B0") == BackendDevice.Wormhole_B0
    assert arch_from_netlist_name("wormhole") == BackendDevice.Wormhole_B0
    with pytest.raises(ConfigError):
        arch_from_netlist_name("gpu")


@pytest.mark.parametrize("df, size", [
    (DataFormat.Float32, 4128), (DataFormat.Int32, 4128), (DataFormat.Float16, 2080), (DataFormat.Float16_b, 2080),
    (DataFormat.Bfp8, 1120), (DataFormat.Bfp8_b, 1120), (DataFormat.Bfp4_b, 608), (DataFormat.Bfp2, 352),
    (DataFormat.Lf8, 1056), (DataFormat.Int8, 1056), (DataFormat.UInt8, 1056),
])
def test_tile_sizes(df, size):
    assert tile_size_bytes(df) == size


def test_tiny_tile_sizes():
    assert tile_size_bytes(DataFormat.Float16_b, (16, 32)) == 1056  # 16 + 1024, aligned
    assert tile_size_bytes(DataFormat.Bfp8_b, (1, 32)) == 64       # 16 header + 16 exps + 32 data
    with pytest.raises(ValueError):
        tile_size_bytes(DataFormat.Bfp2_b, (2, 32))  # would not be 32-byte aligned
    with pytest.raises(ValueError):
        tile_size_bytes(DataFormat.Float16_b, (3, 32))
