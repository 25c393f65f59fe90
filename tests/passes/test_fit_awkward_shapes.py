"""Nothing fails to compile for lack of L1 (issue #12): ops on awkward tile counts (a prime number of tiles,
a huge single row, a huge z) run on the golden device through the public API and match torch at Float32.

A prime tile count has no grid but 1 x 1 that divides it; at Float32 a long row then needs more L1 than one
core has. The balancer pads such an op's tensor to a size a grid divides (OpModel.padding)."""

import pytest
import torch
from torch import nn

import pybuda
from pybuda.verify import calculate_pcc

PCC_MIN = 0.99
#: Float32 end to end (golden_ignore_df_precision): only the order of float32 sums differs from torch.
ATOL = 1e-4
RTOL = 1e-4
P = 313  # a prime number of tiles: 10016 datums


class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _run(fn, *shapes, seed=0, arch=pybuda.BackendDevice.Wormhole_B0, netlist=None):
    """Run ``fn`` on random inputs of ``shapes`` on a golden chip at Float32; (device, torch) outputs. A list
    passed as ``netlist`` receives the compiled netlist."""
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=True)
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(s, generator=g) for s in shapes]
    m = _Fn(fn).eval()
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("awkward", m), arch=arch)
    got = pybuda.run_inference(inputs=[tuple(xs)], _sequential=True).get(timeout=120)[0].value()
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None  # all on the device
    if netlist is not None:
        netlist.extend(r.netlist for r in tt._artifact.compile_results)
    return got, m(*xs)


def _check(got, want, atol=ATOL, rtol=RTOL):
    assert tuple(got.shape) == tuple(want.shape)
    assert calculate_pcc(got, want) >= PCC_MIN
    assert torch.allclose(got, want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("shape", [(1, 10000), (1, 1, P * 32), (2, 1, 397 * 32)], ids=["1d_10000", "prime_row", "z2"])
def test_an_eltwise_op_on_a_prime_row_of_tiles(shape):
    _check(*_run(torch.tanh, shape))


def test_a_chain_of_eltwise_ops_and_a_binary_op_on_prime_rows():
    _check(*_run(lambda x, y: torch.tanh(x) * torch.sigmoid(y) + x, (1, P * 32), (1, P * 32)))


def test_attention_over_a_prime_number_of_position_tiles_is_padded_and_exact():
    # 11 x 11 tiles of scores: every exact layout of the softmax runs on one core, so the balancer pads to 12 x 12
    # and the readers drop the padding again; the result must not see the padded rows or columns.
    def attention(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v

    n = 11 * 32
    netlists = []
    _check(*_run(attention, (1, n, 64), (1, n, 64), (1, n, 64), netlist=netlists))
    ops = [op for nl in netlists for graph in nl.graphs.values() for op in graph.ops.values()]
    assert any(op.input_unpad for op in ops)


def test_mish_on_a_1d_tensor_of_10000_values():
    # ONNX's node test test_mish: 10000 values, 313 tiles in one row.
    _check(*_run(nn.functional.mish, (10000,)))


@pytest.mark.parametrize("norm", ["softmax", "layernorm"])
def test_softmax_and_layernorm_over_a_prime_row(norm):
    if norm == "softmax":
        fn = lambda x: torch.softmax(x, -1)  # noqa: E731
    else:
        fn = lambda x: nn.functional.layer_norm(x, (P * 32,))  # noqa: E731
    got, want = _run(fn, (1, P * 32))
    _check(got, want, atol=1e-5 if norm == "softmax" else ATOL)


@pytest.mark.parametrize("dim", [-1, -2])
def test_reductions_over_and_along_a_prime_dimension(dim):
    _check(*_run(lambda x: x.sum(dim, keepdim=True), (1, 61 * 32, 67 * 32)), atol=1e-3)


def test_a_huge_z():
    _check(*_run(torch.exp, (1, 997, 32, 32)))


def test_a_matmul_with_prime_output_tiles():
    # [61 x 8] @ [8 x 61] tiles: the matmul cannot untilize (its output nop does), and a 61-tile row or column
    # slice of Float32 output plus its operand buffers overflows a core; padded to 64 it spreads over 8 x 8.
    _check(*_run(lambda x, y: x @ y, (1, 61 * 32, 8 * 32), (1, 8 * 32, 61 * 32)), atol=1e-4)


def test_a_picker_on_a_prime_number_of_column_tiles_and_a_large_z():
    # Random-graph seed 251's view: [1, 42, 32, 43] -> [1, 42, 1376] is a row gather (z = 42, 43 column tiles);
    # a sparse matmul cannot t-stream and a Grayskull core cannot hold the 43 tiles of 42 slices.
    _check(*_run(lambda x: torch.tanh(torch.tanh(x).reshape(1, 42, 1376)) * 2.0, (1, 42, 32, 43),
                 arch=pybuda.BackendDevice.Grayskull))


def test_a_pooling_picker_on_a_prime_number_of_row_tiles():
    # Random-graph seed 109 (--batch-mix): a 2x2 average pool over 75 rows gathers 73 row tiles (a prime).
    _check(*_run(lambda x: torch.tanh(nn.functional.avg_pool2d(x, 2, stride=1)), (1, 2, 76, 32),
                 arch=pybuda.BackendDevice.Grayskull))
