"""The golden backend executes netlists: programs, queues, TMs, formats and fidelity."""

import pytest
import torch

from pybuda.golden import formats
from pybuda.golden.device import GoldenDevice
from pybuda.errors import InputError, NetlistError
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.verify import calculate_pcc

# The worked example of reference/netlist_backend_spec.md §1.7: act[64x128] @ w[128x256] + bias, gelu
# fused into the matmul, then a nop that untilizes into a host queue.
EXAMPLE = """
devices: {arch: wormhole_b0}
queues:
  act:  {input: HOST, type: queue, entries: 8, grid_size: [1,1], t: 1, mblock: [2,2], ublock: [1,2],
         ublock_order: r, df: Float16_b, target_device: 0, loc: dram, dram: [[0, 0x30000000]]}
  w:    {input: HOST, type: ram, entries: 1, grid_size: [1,2], t: 1, mblock: [2,2], ublock: [2,2],
         ublock_order: r, df: Bfp8_b, target_device: 0, loc: dram, dram: [[1, 0x30000000],[2, 0x30000000]]}
  bias: {input: HOST, type: ram, entries: 1, grid_size: [1,1], t: 1, mblock: [1,4], ublock: [1,2],
         ublock_order: r, df: Float16_b, target_device: 0, loc: dram, dram: [[3, 0x30000000]]}
  out:  {input: out_nop, type: queue, entries: 8, grid_size: [1,1], t: 1, mblock: [2,4], ublock: [1,2],
         ublock_order: r, df: Float16_b, target_device: 0, loc: host, host: [[0, 0x0]]}
graphs:
  fwd0:
    target_device: 0
    input_count: 4
    mm0: {type: matmul, grid_loc: [0,0], grid_size: [1,2], inputs: [act, w, bias],
          in_df: [Float16_b, Bfp8_b, Float16_b], out_df: Float16_b, intermed_df: Float16_b,
          acc_df: Float16_b, math_fidelity: HiFi2, t: 1, mblock: [1,2], ublock: [2,2],
          ublock_order: r, buf_size_mb: 2, input_2_tms: [broadcast: {r: 2}],
          attributes: {m_k: 2, u_kt: 2, bias: true, sfpu_op: gelu}}
    out_nop: {type: nop, grid_loc: [1,0], grid_size: [1,1], inputs: [mm0], in_df: [Float16_b],
          out_df: Float16_b, intermed_df: Float16_b, acc_df: Float16_b, math_fidelity: HiFi2,
          t: 1, mblock: [2,4], ublock: [1,2], ublock_order: r, buf_size_mb: 2, untilize_output: true}
programs:
  - run_fwd:
    - param: [$p_loop_count]
    - var: {$c_zero: 0, $c_mb: 4}
    - staticvar: {$lptr: 0, $gptr: 0}
    - loop: $p_loop_count
    - execute: {graph_name: fwd0, queue_settings: {
        act:  {prologue: false, epilogue: false, zero: false, rd_ptr_local: $lptr, rd_ptr_global: $gptr},
        w:    {prologue: true, epilogue: false, zero: false, rd_ptr_global: $c_zero, wr_ptr_global: $c_zero},
        bias: {prologue: true, epilogue: false, zero: false, rd_ptr_global: $c_zero, wr_ptr_global: $c_zero}}}
    - varinst: [$lptr, incwrap, $c_mb, 16]
    - varinst: [$gptr, incwrap, $c_mb, 16]
    - endloop
"""


def _device(fast: bool) -> GoldenDevice:
    from pybuda.netlist.parse import parse_yaml

    return GoldenDevice(parse_yaml(EXAMPLE), fast=fast)


def _load(device, torch_seed=0):
    g = torch.Generator().manual_seed(torch_seed)
    act = torch.randn(8, 1, 64, 128, generator=g)
    w = torch.randn(1, 128, 256, generator=g) * 0.1
    bias_row = torch.randn(256, generator=g)
    bias = torch.zeros(1, 32, 256)
    bias[0, 0] = bias_row  # the chip broadcasts row 0 of each bias tile
    device.write_ram("w", w)
    device.write_ram("bias", bias)
    device.push("act", act)
    return act, w, bias_row


def test_fast_mode_runs_the_example_program_exactly_in_float32():
    device = _device(fast=True)
    act, w, bias_row = _load(device)
    stats = device.run_program("run_fwd", {"$p_loop_count": 2})
    assert stats.executes == 2
    out = device.pop("out", 8)
    expected = torch.nn.functional.gelu(act @ w + bias_row)
    assert out.shape == (8, 1, 64, 256)
    assert torch.allclose(out, expected, atol=1e-5)


def test_precise_mode_applies_formats_and_fidelity():
    device = _device(fast=False)
    act, w, bias_row = _load(device)
    device.run_program("run_fwd", {"$p_loop_count": 2})
    out = device.pop("out", 8)
    # Reference with the same roundings done by hand: queue formats, HiFi2 matmul, bf16 accumulation.
    a = formats.quantize(act, DataFormat.Float16_b)
    wq = formats.quantize(w, DataFormat.Bfp8_b)
    b = formats.quantize(bias_row, DataFormat.Float16_b)
    mm = formats.fidelity_matmul(a, wq, MathFidelity.HiFi2)
    expected = formats.quantize(formats.accumulate(torch.nn.functional.gelu(mm + b), DataFormat.Float16_b),
                                DataFormat.Float16_b)
    assert torch.equal(out, expected)
    exact = torch.nn.functional.gelu(act @ w + bias_row)
    assert 0.99 < calculate_pcc(exact, out) < 1.0  # close, but the numerics are visibly the chip's


def test_pointers_persist_across_program_calls():
    device = _device(fast=True)
    act, w, bias_row = _load(device)
    device.run_program("run_fwd", {"$p_loop_count": 1})
    first = device.pop("out", 4)
    device.run_program("run_fwd", {"$p_loop_count": 1})  # staticvars continue at entry 4
    second = device.pop("out", 4)
    expected = torch.nn.functional.gelu(act @ w + bias_row)
    assert torch.allclose(torch.cat([first, second]), expected, atol=1e-5)


def test_queue_overflow_and_empty_reads_are_errors_not_hangs():
    device = _device(fast=True)
    _load(device)
    with pytest.raises(InputError, match="room for 0"):
        device.push("act", torch.zeros(1, 1, 64, 128))
    with pytest.raises(NetlistError, match="queue is empty"):
        device.run_program("run_fwd", {"$p_loop_count": 3})  # 12 inputs, only 8 pushed
    with pytest.raises(InputError, match="shape"):
        _device(fast=True).push("act", torch.zeros(1, 1, 32, 128))
    with pytest.raises(InputError, match="needs parameter"):
        _device(fast=True).run_program("run_fwd", {})


@pytest.mark.parametrize("fast", [False, True])
def test_write_ram_keeps_an_owned_value_and_copies_a_borrowed_one(fast):
    device = _device(fast=fast)
    bias = torch.randn(1, 32, 256)  # a Float16_b queue: rounded by clearing bits, which can be done in place
    original = bias.clone()
    device.write_ram("bias", bias)  # borrowed: the caller's tensor is neither changed nor kept
    kept = device.queues["bias"].slot(0)
    assert kept.data_ptr() != bias.data_ptr() and torch.equal(bias, original)
    mine = bias.clone()
    device.write_ram("bias", mine, owned=True)  # handed over: stored as it is, no second allocation
    stored = device.queues["bias"].slot(0)
    assert stored.data_ptr() == mine.data_ptr() and torch.equal(stored, kept)
