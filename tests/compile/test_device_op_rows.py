"""Ops added to the device through the device-op table (a row in pybuda.netlist.device_ops plus the
registry's ``lower`` slot) compile and run on the simulated chip with its numerics, like torch.

One row per such op: a PyBudaModule built from the public ``pybuda.op`` function, the inputs (unaligned
shapes, so tile padding is exercised, and a broadcast operand), and the torch reference.
"""

import pytest
import torch

import pybuda
from pybuda.verify import calculate_pcc

PCC_MIN = 0.99  # TT-Buda's default verification PCC
ATOL_REL = 0.02  # Float16_b storage: 8 mantissa bits, relative to max |reference|


class _Module(pybuda.PyBudaModule):
    def __init__(self, name, fn):
        super().__init__(name)
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _heaviside_inputs(b_shape):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1, 40, 70, generator=g)
    a[:, ::4] = 0.0  # rows where the result is b
    return a, torch.randn(*b_shape, generator=g)


ROWS = {
    "heaviside": (lambda a, b: pybuda.op.Heaviside("hv", a, b), _heaviside_inputs((1, 40, 70)), torch.heaviside),
    "heaviside_broadcast_b": (lambda a, b: pybuda.op.Heaviside("hv", a, b), _heaviside_inputs((1, 1, 70)),
                              torch.heaviside),
    # fused with its neighbours (auto-fusion schedules heaviside as a sub-op)
    "heaviside_fused": (lambda a, b: pybuda.op.Multiply("m", pybuda.op.Heaviside("hv", pybuda.op.Add("s", a, a), b), b),
                        _heaviside_inputs((1, 40, 70)), lambda a, b: torch.heaviside(a + a, b) * b),
}


@pytest.fixture
def chip(monkeypatch, tmp_path):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path))  # compile artifacts stay out of the work tree
    monkeypatch.setenv("PYBUDA_FORCE_SEQUENTIAL", "1")
    monkeypatch.delenv("PYBUDA_GOLDEN_FAST", raising=False)  # the chip's numerics, not plain float32
    pybuda.pybuda_reset()
    yield
    pybuda.shutdown()
    pybuda.pybuda_reset()


@pytest.mark.parametrize("row", sorted(ROWS))
def test_device_op_runs_on_the_simulated_chip_like_torch(row, chip):
    build, inputs, reference = ROWS[row]
    pybuda.TTDevice("tt0", module=_Module(row, build), arch=pybuda.BackendDevice.Wormhole_B0)
    out = pybuda.run_inference(inputs=[inputs]).get()[0].value()
    want = reference(*inputs)
    assert out.shape == want.shape
    assert calculate_pcc(want, out) >= PCC_MIN
    assert torch.allclose(out, want, atol=ATOL_REL * want.abs().max().item())
