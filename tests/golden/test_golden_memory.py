"""What the golden device keeps alive: intermediate values only until their last reader, e2e queue entries
only within the queue's lifetime (``allocate_queue`` .. ``deallocate_queue``), and a broadcast constant as
a stride-0 view, never materialised. Each is checked for the memory it frees and for unchanged results."""

import pytest
import torch

from pybuda.errors import NetlistError
from pybuda.golden import device as golden_device
from pybuda.golden.device import GoldenDevice
from pybuda.netlist.parse import parse_yaml
from pybuda.netlist.tms import Broadcast, TileBroadcast, apply_tms

_Q = "grid_size: [1,1], t: 1, mblock: [1,1], ublock: [2,2], ublock_order: r, df: Float32, target_device: 0"
_OP = ("grid_size: [1,1], in_df: [Float32], out_df: Float32, intermed_df: Float32, acc_df: Float32, "
       "math_fidelity: HiFi4, t: 1, mblock: [1,1], ublock: [2,2], ublock_order: r, buf_size_mb: 2")

# Two epochs joined by the e2e queue ``mid``: fwd0 computes exp(exp(act)) + exp(act) through two
# intermediates, fwd1 copies ``mid`` to the host. The program ends ``mid``'s lifetime after fwd1.
TWO_EPOCHS = f"""
devices: {{arch: wormhole_b0}}
queues:
  act: {{input: HOST, type: queue, entries: 2, {_Q}, loc: dram, dram: [[0, 0x30000000]]}}
  mid: {{input: add0, type: queue, entries: 2, {_Q}, loc: dram, dram: [[1, 0x30000000]]}}
  out: {{input: copy, type: queue, entries: 2, {_Q}, loc: host, host: [[0, 0x0]]}}
graphs:
  fwd0:
    target_device: 0
    input_count: 2
    e0: {{type: exp, grid_loc: [0,0], inputs: [act], {_OP}}}
    e1: {{type: exp, grid_loc: [0,1], inputs: [e0], {_OP}}}
    add0: {{type: add, grid_loc: [0,2], inputs: [e1, e0], {_OP.replace("in_df: [Float32]", "in_df: [Float32, Float32]")}}}
  fwd1:
    target_device: 0
    input_count: 2
    copy: {{type: nop, grid_loc: [0,0], inputs: [mid], {_OP}}}
programs:
  - run_fwd:
    - var: {{$c_zero: 0}}
    - allocate_queue: [mid]
    - execute: {{graph_name: fwd0, queue_settings: {{
        act: {{prologue: false, epilogue: false, zero: false}}}}}}
    - execute: {{graph_name: fwd1, queue_settings: {{
        mid: {{prologue: false, epilogue: false, zero: false}}}}}}
    - deallocate_queue: [mid]
"""


def _run(device: GoldenDevice, act: torch.Tensor) -> torch.Tensor:
    device.push("act", act)
    device.run_program("run_fwd")
    return device.pop("out", 2)


def test_values_of_a_graph_are_dropped_after_their_last_reader_unless_a_queue_keeps_them():
    netlist = parse_yaml(TWO_EPOCHS)
    graph = netlist.graphs["fwd0"]
    order = golden_device._topological(graph)
    # e0 is read last by add0, e1 by add0; add0 feeds the queue ``mid`` and is never dropped early
    assert golden_device._last_reads(graph, order, {"add0": "mid"}) == {"add0": ["e0", "e1"]}
    assert golden_device._last_reads(graph, order, {"add0": "mid", "e0": "q"}) == {"add0": ["e1"]}


def test_the_results_are_those_of_the_math_when_values_are_freed_on_the_way():
    act = torch.rand(2, 1, 64, 64)
    out = _run(GoldenDevice(parse_yaml(TWO_EPOCHS), fast=True), act)
    assert torch.allclose(out, torch.exp(torch.exp(act)) + torch.exp(act))


@pytest.mark.parametrize("fast", [True, False])
def test_deallocate_queue_ends_the_lifetime_of_an_e2e_queue(fast):
    device = GoldenDevice(parse_yaml(TWO_EPOCHS), fast=fast)
    act = torch.rand(2, 1, 64, 64)
    first = _run(device, act)
    mid = device.queues["mid"]
    assert all(entry is None for entry in mid.slots)  # nothing of it is held after its lifetime
    assert torch.equal(_run(device, act), first)  # the next run writes it again: same results
    mid.wr = mid.advance(mid.rd, 2)  # a program that read it now would read freed DRAM: an error, named
    with pytest.raises(NetlistError, match="deallocate_queue"):
        mid.read_entries([mid.rd])


def test_a_broadcast_of_alike_rows_stays_a_stride_0_view_with_the_same_values():
    row = torch.randn(1, 1, 1, 96)
    tile = row.expand(1, 1, 32, 96).clone()  # a bias stored with its row repeated over the tile
    views = {
        "tile broadcast of one tile row": apply_tms(tile, [TileBroadcast("r")]),
        "broadcast of a tile-broadcast row": apply_tms(tile, [TileBroadcast("r"), Broadcast("r", 4)]),
        "broadcast of alike rows": apply_tms(golden_device._alike_as_broadcast(tile, [Broadcast("r", 4)]),
                                             [Broadcast("r", 4)]),
    }
    for what, value in views.items():
        assert value.stride(-2) == 0, what
        assert torch.equal(value, row.expand(1, 1, value.shape[-2], 96)), what
    # rows that differ are left alone (a copy, as before)
    mixed = torch.randn(1, 1, 32, 96)
    assert golden_device._alike_as_broadcast(mixed, [Broadcast("r", 4)]) is mixed
    assert torch.equal(apply_tms(mixed, [Broadcast("r", 2)]), mixed.repeat(1, 1, 2, 1))
    # a tile broadcast deeper than one tile keeps row 0 of each tile, materialised
    two = torch.randn(1, 1, 64, 32)
    expected = torch.cat([two[..., 0:1, :].expand(1, 1, 32, 32), two[..., 32:33, :].expand(1, 1, 32, 32)], -2)
    assert torch.equal(apply_tms(two, [TileBroadcast("r")]), expected)
