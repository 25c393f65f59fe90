"""Pushed integer tensors (int64/int32 ids, 0/1 masks as long) in float arithmetic, on the golden device: each idiom
runs on the device (or partly on the CPU with a fallback report) and matches torch within the chip's float numerics,
integer results exactly -- never an integer op's truncation of a float operand.

The data-format legaliser makes an op reading an integer-format queue an integer op (Int32 output and Dest), so an
integer queue feeding float arithmetic would truncate the float operands; integer inputs and tables within 2**24
are Float32 queues instead, which these idioms check end to end."""

import pytest
import torch

import pybuda
from tests.frontend.nan_inf_helpers import ARCHS, configure

FORMATS = {"float32": pybuda.DataFormat.Float32, "default": None}


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class RowsTimesHalf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(50, 32, generator=torch.Generator().manual_seed(7)))

    def forward(self, ids):
        return self.table[ids] * 0.5


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 8, 32, generator=g)
    ids = torch.randint(0, 10, (1, 8, 32), generator=g)
    mask = (torch.rand(1, 8, 32, generator=g) > 0.5).long()
    pos = torch.arange(32).expand(1, 8, 32).contiguous()
    rows = torch.randint(0, 50, (1, 8), generator=g)
    return x, ids, mask, pos, rows


IDIOMS = {
    "x_times_ids_float": (lambda x, i: x * i.float(), lambda d: (d[0], d[1])),
    "x_times_int32_ids": (lambda x, i: x * i.float(), lambda d: (d[0], d[1].int())),
    "x_plus_mask_long": (lambda x, m: x + m.long(), lambda d: (d[0], d[2])),
    "positions_over_10": (lambda p: p.float() / 10, lambda d: (d[3],)),
    "where_ids_gt_3": (lambda x, i: torch.where(i > 3, x, 0.5), lambda d: (d[0], d[1])),
    "ids_mean": (lambda i: i.float().mean(-1), lambda d: (d[1],)),
    "ids_cumsum": (lambda i: i.cumsum(-1), lambda d: (d[1],)),
    "mask_cumsum_times_x": (lambda x, m: m.cumsum(-1) * x, lambda d: (d[0], d[2])),
    "ids_floor_div": (lambda i: i // 3, lambda d: (d[1],)),
    "ids_remainder": (lambda i: i % 3, lambda d: (d[1],)),
    "ids_true_div": (lambda i: i / 3, lambda d: (d[1],)),
    "float_gt_int": (lambda x, i: x * 10 > i, lambda d: (d[0], d[1])),
}


def _check(got: torch.Tensor, want: torch.Tensor, rtol: float) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want)  # integers and masks: exact
    else:
        assert torch.allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_integer_inputs_in_float_arithmetic_match_torch(idiom, arch, df):
    configure(FORMATS[df])
    fn, pick = IDIOMS[idiom]
    inputs = pick(_data())
    want = fn(*inputs)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule(idiom, Fn(fn).eval()), arch=ARCHS[arch])
    got = pybuda.run_inference(inputs=[inputs]).get()[0].value()
    # Float32 on Wormhole: TF32-like products; Float16_b storage (the default, and Grayskull's Dest) ~2**-8.
    _check(got, want, 5e-3 if (df == "float32" and arch == "wh") else 2e-2)


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_rows_looked_up_by_pushed_ids_then_scaled(arch, df):
    configure(FORMATS[df])
    model = RowsTimesHalf().eval()
    rows = _data()[4]
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("rows", model), arch=ARCHS[arch])
    got = pybuda.run_inference(inputs=[(rows,)]).get()[0].value()
    _check(got, model(rows).detach(), 5e-3 if (df == "float32" and arch == "wh") else 2e-2)
