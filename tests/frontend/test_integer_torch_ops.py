"""Integer-valued data on the device (pybuda.ops.integer): argmax/argmin indices, counts of masks, index
arithmetic and their casts run on the simulated chip and come back exact; a cast that truncates arbitrary
floats stays on the host and is exact too — never a wrong number."""

import pytest
import torch

import pybuda
from pybuda.frontend.torch import capture


class ArgIndices(torch.nn.Module):
    """torch.argmax, Tensor.argmax, argmin, a count of a mask and index arithmetic on them."""

    def forward(self, x, y):
        first = torch.argmax(x, -1)
        count = (x > y).long().sum(-1)
        low = x.argmin(dim=1)
        return first, count, low, first + count - 3, x.argmax(-1).long()


class Truncation(torch.nn.Module):
    """``x.long()`` of arbitrary floats truncates: it must not become a device identity."""

    def forward(self, x):
        return (x * 3.0).long() + 1, torch.argmax(x, -1)


#: Relative tolerance of float products on the simulated chip (19-bit multiplier source registers).
CHIP_RTOL = 5e-3


def _run(model, inputs, df=pybuda.DataFormat.Float32):
    pybuda.set_configuration_options(default_df_override=df)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", model), arch=pybuda.BackendDevice.Wormhole_B0)
    try:
        got = [t.value() for t in pybuda.run_inference(inputs=[inputs]).get()]
        return got, tt.cpu_fallback_device_pre, tt.cpu_fallback_device_post
    finally:
        pybuda.shutdown()


def _ties(shape, gen):
    """Random data with many ties and values 2**-12 apart (a 19-bit multiplier register would merge them)."""
    return (torch.randint(0, 6, shape, generator=gen).float() + torch.randint(0, 3, shape, generator=gen) * 2 ** -12)


@pytest.mark.parametrize("df", [pybuda.DataFormat.Float32, pybuda.DataFormat.Bfp8_b], ids=["float32", "bfp8_b"])
def test_argmax_and_index_math_run_on_the_device_exactly(df):
    g = torch.Generator().manual_seed(0)
    x, y = _ties((2, 6, 700), g), _ties((2, 6, 700), g)
    if df == pybuda.DataFormat.Bfp8_b:  # block rounding of the data itself changes ties: compare on exact data
        x, y = x.round(), y.round()
    model = ArgIndices().eval()
    want = model(x, y)
    got, pre, post = _run(model, (x, y), df)
    assert pre is None and post is None  # everything on the device
    for g_, w in zip(got, want):
        assert g_.dtype == w.dtype == torch.int64
        assert torch.equal(g_, w)  # integers: exact, whatever the default format (exact_df Float32)


def test_float_to_int_cast_of_non_integers_stays_on_the_host():
    model = Truncation().eval()
    x = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(1))
    want = model(x)
    result = capture(model, (x,), config=pybuda.CompilerConfig(), for_device=True)
    assert "truncates values not known to be integers" in str(result.report)
    got, pre, post = _run(model, (x,))
    assert pre is not None or post is not None
    for g_, w in zip(got, want):
        assert torch.equal(g_, w)


def test_integer_range_beyond_the_multiplier_stays_on_the_host():
    """A product of integer inputs (unknown range, up to 2**24) would be rounded by the multiplier's
    source registers, and their sum could leave Float32's exact range: both stay on the host. Once clamped
    the range is known, and adds run on the device."""

    class Mixed(torch.nn.Module):
        def forward(self, ids, x):
            return ids * ids, (ids + ids).float() * x, ids.clamp(-1000, 1000) + 7

    ids = torch.tensor([[3000, -2047, 5, 4001]])  # products stay below 2**24: the host result passes through
    x = torch.randn(1, 4, generator=torch.Generator().manual_seed(2))
    model = Mixed().eval()
    want = model(ids, x)
    result = capture(model, (ids, x), config=pybuda.CompilerConfig(), for_device=True)
    _, graph, _ = result.split_for_devices()
    on_device = {(n.op_type, n.dtype) for n in graph.ops}
    assert ("add", torch.int64) in on_device and ("multiply", torch.int64) not in on_device
    got, _, _ = _run(model, (ids, x))
    assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])
    # float math on the chip: the multiplier keeps about 10 bits of its operands (chip numerics, not integers)
    torch.testing.assert_close(got[1], want[1], rtol=CHIP_RTOL, atol=1e-3)


class AgainstTheMaximum(torch.nn.Module):
    """Index ops and an equality mask that compare values with their maximum broadcast back over them."""

    def forward(self, x, y):
        sums = x.sum(-1)  # a column: its reader transposes it, so op fusion cannot take the broadcast
        return (sums.argmax(-1),  # the reported case: the maximum broadcast over columns of a tile
                sums.argmin(-1),
                sums == sums.amax(-1, keepdim=True),
                x.argmax(-2),  # over rows of a tile
                y.argmax(2))  # over a leading dim, inside others: the maximum's slices are repeated


def _run_wholly_on_device(model, inputs, arch):
    """``model``'s outputs for ``inputs`` on a TTDevice of ``arch`` (current config), no op on the host."""
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", model), arch=arch)
    try:
        got = [t.value() for t in pybuda.run_inference(inputs=[inputs]).get()]
        assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    finally:
        pybuda.shutdown()
    return got


def _exact_sums_data(wide: bool, gen):
    """Data whose row sums the chip computes exactly. ``wide``: integers plus a column of multiples of 2**-8,
    sums of up to 15 significant bits (a matmul that broadcast them kept 10 or 11); else small integers,
    exact in Float16_b and in a Float16_b Dest (Grayskull's)."""
    if not wide:
        return torch.randint(-8, 8, (1, 8, 16), generator=gen).float()
    x = torch.randint(-64, 64, (1, 8, 16), generator=gen).float()
    x[..., -1] = torch.randint(0, 256, (1, 8), generator=gen) * 2.0 ** -8
    return x


@pytest.mark.parametrize("fusing", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("df", [pybuda.DataFormat.Float32, None], ids=["float32", "default_df"])
@pytest.mark.parametrize("arch", [pybuda.BackendDevice.Grayskull, pybuda.BackendDevice.Wormhole_B0,
                                  pybuda.BackendDevice.Blackhole], ids=["gs", "wh", "bh"])
def test_argmax_against_a_broadcast_maximum_is_exact(arch, df, fusing):
    """A Float32 maximum broadcast by a picker matmul lost its low mantissa bits, matched no element, and
    argmax returned the index one past the end (8 of 8), with no error."""
    # Wormhole and Blackhole keep Float32 in Dest; Grayskull's Dest is Float16_b, which rounds the row sums
    # (a matmul) there, so their data is exact in Float16_b. y is compared as it is: raw Float32 data
    # (the host stores it in Float16_b at the default formats).
    wide = df == pybuda.DataFormat.Float32 and arch != pybuda.BackendDevice.Grayskull
    g = torch.Generator().manual_seed(3)
    x = _exact_sums_data(wide, g)
    y = torch.randn(1, 2, 3, 8, 16, generator=g)
    y = y if df == pybuda.DataFormat.Float32 else y.to(torch.bfloat16).float()
    model = AgainstTheMaximum().eval()
    want = model(x, y)
    pybuda.set_configuration_options(default_df_override=df, enable_auto_fusing=fusing)
    got = _run_wholly_on_device(model, (x, y), arch)
    for g_, w in zip(got, want):
        assert g_.dtype == w.dtype and torch.equal(g_, w)


class RawIndices(torch.nn.Module):
    """Indices and equality masks against a maximum or minimum, along padded columns and rows (a padding
    mask precedes the device's reduce) and along leading dims."""

    def forward(self, x, y):
        return (x.argmax(-1), x.argmin(-1), x.argmax(1), x.argmin(1),
                x == x.amax(-1, keepdim=True), x == x.amin(1, keepdim=True), x.amin(-1),
                y.argmax(1), y.argmin(2), y == y.amax(1, keepdim=True))  # the outer of two leading dims, the inner


_STORED = (pybuda.DataFormat.Float16_b, pybuda.DataFormat.Float16)


@pytest.mark.parametrize("scale", [1.0, 1e-3], ids=["unit", "small"])
@pytest.mark.parametrize("df", [None, pybuda.DataFormat.Float16_b, pybuda.DataFormat.Float16, pybuda.DataFormat.Float32],
                         ids=["default_df", "float16_b", "float16", "float32"])
@pytest.mark.parametrize("arch", [pybuda.BackendDevice.Grayskull, pybuda.BackendDevice.Wormhole_B0,
                                  pybuda.BackendDevice.Blackhole], ids=["gs", "wh", "bh"])
def test_indices_and_masks_of_raw_float32_data_match_torch(arch, df, scale):
    """Raw random Float32 data: on Grayskull at Float32 and Float16, argmax returned 40 (one past the end) for
    rows of 40: the padding mask before the reduce, an add, rounded the data in Dest (Float16_b), and the
    rounded maximum equalled none of the elements the comparison read. Masks against a maximum failed so at
    Float16 on every chip, a min (the max of x * -1) never equalled its element on Wormhole, an argmax over an
    outer leading dim moved its slices by a matmul that rounded them, and small differences flushed to zero
    in Float16 made close values compare equal."""
    from pybuda.golden.formats import quantize

    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(1, 8, 40, generator=g) * scale, torch.randn(1, 3, 4, 2, 40, generator=g) * scale
    model = RawIndices().eval()
    want = model(x, y)
    for stored in _STORED:  # the data's indices and masks do not change where the host stores it in 16 bits
        same = model(quantize(x, stored), quantize(y, stored))
        assert all(torch.equal(s, w) for s, w in zip(same, want) if not w.is_floating_point()), \
            f"the test data has ties in {stored.name}"
    pybuda.set_configuration_options(default_df_override=df)
    got = _run_wholly_on_device(model, (x, y), arch)
    for i, (g_, w) in enumerate(zip(got, want)):
        if w.is_floating_point():  # the min itself: the element as the device stores the data
            # x is compared (x == x.amax), so with a Float16 default, which holds no NaN or infinity, it is pushed in
            # Float32 (pybuda.passes.graph.nonfinite): Float16_b in Grayskull's Dest
            wide = df in (pybuda.DataFormat.Float32, pybuda.DataFormat.Float16)
            stored = pybuda.DataFormat.Float32 if wide and arch != pybuda.BackendDevice.Grayskull \
                else pybuda.DataFormat.Float16_b
            w = quantize(w, stored)
        assert g_.dtype == w.dtype and torch.equal(g_, w), f"output {i}"


class Negate(torch.nn.Module):
    def forward(self, x):
        return -x


def test_negation_of_float32_data_is_exact():
    # A negation was a multiply by -1, which reads its operand through the multiplier's source registers: on
    # Wormhole at Float32, -x kept about 10 of x's 23 mantissa bits.
    x = torch.randn(1, 8, 40, generator=torch.Generator().manual_seed(9))
    assert torch.equal(_run(Negate(), [x])[0][0], -x)


class PlusOneHot(torch.nn.Module):
    """Float data plus a one-hot of its argmax: the one-hot compares with a constant int64 ``arange``."""

    def forward(self, x):
        y = x * 1.5
        return y + torch.nn.functional.one_hot(y.argmax(-1), y.shape[-1]).float()


@pytest.mark.parametrize("arch", [pybuda.BackendDevice.Wormhole_B0, pybuda.BackendDevice.Grayskull], ids=["wh", "gs"])
def test_float_math_reading_an_integer_constant_stays_float(arch):
    # The int64 constant once got an Int32 queue, every op downstream of it became an Int32 op, and the float
    # sum came back rounded to integers (0.5 off) on Wormhole, while Grayskull refused the model.
    x = torch.randn(3, 24, generator=torch.Generator().manual_seed(0))
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     default_math_fidelity=pybuda.MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", PlusOneHot()), arch=arch)
    try:
        got = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
        assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    finally:
        pybuda.shutdown()
    torch.testing.assert_close(got, PlusOneHot()(x), atol=2e-2, rtol=CHIP_RTOL)


class IdsAsFloats(torch.nn.Module):
    """Integer ids the model only does float math with."""

    def forward(self, ids, x):
        return ids.float() * 0.5 + x


class IdsAsIntegers(torch.nn.Module):
    """The device moves the ids as integers (a reshape); the host adds."""

    def forward(self, ids):
        return ids.reshape(8, 32) + 0


def test_integer_inputs_read_only_as_floats_take_any_float32_value_on_grayskull():
    """Grayskull keeps integer results exact only up to 256 (its Float16_b Dest), so integer data is refused at
    push beyond that; ids the device only turns into floats are float data there, rounded as floats are (was:
    InputError for ids up to 1000)."""
    gen = torch.Generator().manual_seed(3)
    ids, x = torch.randint(0, 1000, (4, 64), generator=gen), torch.randn(4, 64, generator=gen)
    (got,) = _run_wholly_on_device(IdsAsFloats(), (ids, x), pybuda.BackendDevice.Grayskull)
    assert torch.allclose(got, IdsAsFloats()(ids, x), rtol=2e-2, atol=0.1)


def test_integer_inputs_kept_as_integers_are_refused_beyond_what_grayskull_keeps_exact():
    ids = torch.randint(0, 1000, (4, 64), generator=torch.Generator().manual_seed(3))
    with pytest.raises(pybuda.errors.InputError, match="exact in"):
        _run_wholly_on_device(IdsAsIntegers(), (ids,), pybuda.BackendDevice.Grayskull)
