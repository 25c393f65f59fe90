"""exact_zero_padding turns a Float32 padding mask multiply into a select whose data is input 1: data that arrives
transposed keeps its multiply, since a transpose is not allowed on a binary op's input 1 (tm_allowed)."""

import torch

import pybuda


class ScaleByClampedCounts(torch.nn.Module):
    def forward(self, x):  # x [1, 4, 6]: a per-row count, clamped, read down the columns
        counts = x[0].abs().sum(-1)
        return (x[0] / counts.clamp(min=1)[:, None])[None]


def test_a_transposed_padding_mask_input_keeps_a_valid_netlist():
    # The clamp's padding mask read its data through a transpose; the select put that transpose on input 1 and
    # the netlist was refused as a compiler bug.
    torch.manual_seed(0)
    x = torch.randn(1, 4, 6)
    module = ScaleByClampedCounts()
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32, golden_ignore_df_precision=True)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", module), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    assert torch.allclose(got, module(x), atol=1e-6)
