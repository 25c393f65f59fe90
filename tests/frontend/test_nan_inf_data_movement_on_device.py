"""NaN and +-inf survive data movement on the device: a slice, a gather, a concatenation, a pad, a flip ... of a
tensor holding them gives torch's values, NaN for NaN and each infinity in its place, on Grayskull and Wormhole at the
default formats and at Float32 (pybuda.passes.lower.nonfinite_pickers). Before, the picker matmuls that move rows
and columns no tile TM can multiplied the infinities by their zeros and made whole rows and columns NaN."""

import pytest
import torch
import torch.nn.functional as F

import pybuda
from nan_inf_helpers import configure, run_on_device

FORMATS = {"default": None, "float32": pybuda.DataFormat.Float32}

_IDX = torch.tensor([5, 3, 40, 1, 47, 0, 33, 34, 12, 12, 7])
_PERM = torch.randperm(48, generator=torch.Generator().manual_seed(0))  # too many runs for slices: a one-hot matmul


def _forms():
    """Data-movement forms as functions of a [1, 48, 48] tensor."""
    return {
        "slice_rows": lambda x: x[:, 3:20],
        "slice_cols": lambda x: x[:, :, 5:37],
        "strided": lambda x: x[:, 3:40:2, 5:37],
        "concat": lambda x: torch.cat([x, x[:, :7]], 1),
        "concat_cols": lambda x: torch.cat([x[:, :, :20], x], 2),
        "index_select": lambda x: torch.index_select(x, 2, _IDX),
        "gather_rows": lambda x: x[:, _IDX],
        "permutation": lambda x: x[:, :, _PERM],
        "permute_rows": lambda x: x[:, _PERM],
        "transpose": lambda x: x.transpose(1, 2),
        "permute": lambda x: x.reshape(1, 2, 24, 48).permute(0, 2, 1, 3),
        "reshape": lambda x: x.reshape(1, 24, 96),
        "flatten": lambda x: x[:, :, :37].reshape(1, 48 * 37),
        "expand": lambda x: x[:, :, 3:4].expand(1, 48, 48),
        "repeat": lambda x: x.repeat(1, 2, 1),
        "pad": lambda x: F.pad(x, (1, 2, 3, 4)),
        "roll": lambda x: torch.roll(x, 3, -1),
        "flip": lambda x: torch.flip(x, [-1]),
    }


FORMS = _forms()


class Move(torch.nn.Module):
    def __init__(self, form: str):
        super().__init__()
        self.form = form

    def forward(self, x):
        return FORMS[self.form](x)


def special_input(seed: int = 0) -> torch.Tensor:
    """Random [1, 48, 48] data with a few NaNs and infinities of both signs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 48, 48, generator=g)
    x[0, 5, 7] = float("nan")
    x[0, 9, 3] = float("inf")
    x[0, 22, 36] = -float("inf")
    x[0, 41, 40] = float("inf")
    x[0, 0, 33] = -float("inf")
    return x


def wrong_values(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-2, atol: float = 1e-2) -> int:
    """Places where ``got`` is not ``want``: NaN where torch has a number or the other way, another infinity, or
    a finite value outside the tolerance (``rtol`` covers the default format's rounding)."""
    got = got.reshape(want.shape).float()
    nan = torch.isnan(got) | torch.isnan(want)
    same = torch.isnan(got) & torch.isnan(want)
    inf = torch.isinf(got) | torch.isinf(want)
    close = (got - want).abs() <= atol + rtol * want.abs()
    ok = same | (~nan & inf & (got == want)) | (~nan & ~inf & close)
    return int((~ok).sum())


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
@pytest.mark.parametrize("form", list(FORMS))
def test_data_movement_carries_nan_and_infinities(form, arch, df):
    configure(FORMATS[df])
    x = special_input()
    want = Move(form)(x)
    got = run_on_device(pybuda.PyTorchModule(form, Move(form).eval()), (x,), arch)[0]
    assert wrong_values(got, want) == 0


class MaskedSoftmax(torch.nn.Module):
    def forward(self, x, m):
        return torch.softmax(x + m[:, 3:40:2, 5:37], -1)


class NanTestsOfMoves(torch.nn.Module):
    def forward(self, x):
        return torch.isnan(x[:, 3:40:2, 5:37]), torch.isinf(torch.cat([x[:, :7], x], 1))


@pytest.mark.parametrize("arch", ["wh", "gs"])
@pytest.mark.parametrize("df", list(FORMATS))
def test_softmax_over_a_sliced_causal_mask(arch, df):
    """The fully masked rows are NaN as in torch (32 of them), and nothing else: was 608 NaNs, 576 of them wrong."""
    configure(FORMATS[df])
    m = torch.full((1, 48, 48), float("-inf")).triu(1)
    x = torch.randn(1, 19, 32, generator=torch.Generator().manual_seed(1))
    want = MaskedSoftmax()(x, m)
    got = run_on_device(pybuda.PyTorchModule("masked", MaskedSoftmax().eval()), (x, m), arch)[0]
    assert int(torch.isnan(want).sum()) == 32
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert wrong_values(got, want, rtol=2e-2, atol=2e-3) == 0


@pytest.mark.parametrize("arch", ["wh", "gs"])
def test_nan_tests_of_moved_data(arch):
    """A value a NaN/infinity test reads is carried through data movement whatever the compile sample held."""
    configure(None)
    x = torch.randn(1, 48, 48, generator=torch.Generator().manual_seed(2))
    module = pybuda.PyTorchModule("tested", NanTestsOfMoves().eval())
    tt = pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0 if arch == "wh"
                         else pybuda.BackendDevice.Grayskull)
    finite = pybuda.run_inference(inputs=[(x,)]).get()  # compiled for a finite sample
    assert not any(bool(t.value().any()) for t in finite)
    x[0, 5, 7], x[0, 9, 3], x[0, 22, 36] = float("nan"), float("inf"), -float("inf")
    got = [t.value() for t in pybuda.run_inference(inputs=[(x,)]).get()]
    assert tt.cpu_fallback_device_pre is None
    for g, w in zip(got, NanTestsOfMoves()(x)):
        assert torch.equal(g, w), int((g != w).sum())


class SliceOrExp(torch.nn.Module):
    def __init__(self, slice_it: bool):
        super().__init__()
        self.slice_it = slice_it

    def forward(self, x):
        return x[:, 3:20] * 2.0 if self.slice_it else torch.exp(x) * 2.0


def test_an_infinity_pushed_into_moves_compiled_for_finite_values_is_refused():
    """Compiled for a finite sample, a slice would make whole rows NaN of a later push's infinity: the host refuses
    that push (InputError, never a wrong value); an elementwise model takes it."""
    configure(None)
    x = torch.randn(1, 48, 40, generator=torch.Generator().manual_seed(3))
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("moves", SliceOrExp(True).eval()),
                         arch=pybuda.BackendDevice.Wormhole_B0)
    pybuda.run_inference(inputs=[(x,)]).get()
    x[0, 4, 4] = float("inf")
    with pytest.raises(pybuda.errors.InputError, match="NaN or infinite"):
        pybuda.run_inference(inputs=[(x,)]).get()
    del tt
    pybuda.pybuda_reset()
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("exp", SliceOrExp(False).eval()),
                    arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
    assert torch.isinf(got[0, 4, 4]) and int(torch.isinf(got).sum()) == 1
