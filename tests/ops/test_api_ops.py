"""API-reference ops compiled for a TTDevice and run on the golden chip (issue #17).

Each op of ``pybuda.op`` that the device has no single op for (comparisons, argmax, cumsum, transposed
conv, resize, 1-D pooling, embedding, sparse matmul ...) is decomposed by the compiler into matmuls with
constant matrices, eltwise ops, reduces and TMs. Every case runs a PyBudaModule through
``pybuda.run_inference`` on a Wormhole B0 TTDevice (it accumulates in Float32; Grayskull cannot), on shapes
that are not multiples of 32, against torch: PCC >= 0.99 and ``torch.allclose`` within the tolerance named
in the row at Float32, plus a Bfp8_b run of every op that must still compile and track torch loosely.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pybuda
from tests.fn_module import FnModule
from pybuda import op
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.errors import UnsupportedOpError
from pybuda.verify import calculate_pcc

_GEN = torch.Generator().manual_seed(17)


def rn(*shape):
    return torch.randn(shape, generator=_GEN)


def ints(lo, hi, *shape):
    return torch.randint(lo, hi, shape, generator=_GEN).float()


def run_on_device(module, inputs, df=DataFormat.Float32):
    """Compile ``module`` for a Wormhole TTDevice at ``df`` and return its first output."""
    pybuda.set_configuration_options(default_df_override=df, default_math_fidelity=MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0)
    tt.push_to_inputs(*inputs)
    out = pybuda.run_inference().get(timeout=120)
    value = out[0].value() if hasattr(out[0], "value") else out[0]
    return value.float()


# Named tolerances. Comparisons and argmax are exact. The chip's matmul reads its operands
# through 19-bit (TF32-like) source registers even at Float32, so every op that becomes a matmul with a
# constant matrix (cumsum, transposed conv, resize, embedding, sparse matmul, the pool pickers) carries
# about 1e-3 relative error per term.
EXACT = 0.0
MATMUL_ATOL = 2e-2
ELTWISE_ATOL = 1e-5

_CMP_A, _CMP_B = ints(-2, 3, 2, 5, 7), ints(-2, 3, 2, 1, 7)  # broadcast over rows
_X = rn(2, 3, 9, 11)
_T = rn(2, 5, 37)
_W_T = rn(3, 4, 3, 3) * 0.3  # conv_transpose weight [Cin, Cout/groups, kh, kw]
_W_TG = rn(4, 3, 2, 3) * 0.3  # groups=2: Cout = 6
_B_T = rn(6) * 0.1
_TABLE = rn(50, 12)
_IDS = torch.randint(0, 50, (2, 7), generator=_GEN)
_SPARSE = (torch.rand(13, 9, generator=_GEN) < 0.3).float() * rn(13, 9)

# (id, fn(module, *inputs), inputs, torch reference(*inputs), params, atol at Float32)
ROWS = [
    ("heaviside", lambda m, a, b: op.Heaviside("h", a, b), [_CMP_A, _CMP_B],
     lambda a, b: torch.heaviside(a, b), None, EXACT),
    ("greater", lambda m, a, b: op.Greater("c", a, b), [_CMP_A, _CMP_B], lambda a, b: (a > b).float(), None, EXACT),
    ("greater_equal", lambda m, a, b: op.GreaterEqual("c", a, b), [_CMP_A, _CMP_B],
     lambda a, b: (a >= b).float(), None, EXACT),
    ("less", lambda m, a, b: op.Less("c", a, b), [_CMP_A, _CMP_B], lambda a, b: (a < b).float(), None, EXACT),
    ("less_equal", lambda m, a, b: op.LessEqual("c", a, b), [_CMP_A, _CMP_B],
     lambda a, b: (a <= b).float(), None, EXACT),
    ("equal", lambda m, a, b: op.Equal("c", a, b), [_CMP_A, _CMP_B], lambda a, b: (a == b).float(), None, EXACT),
    ("not_equal", lambda m, a, b: op.NotEqual("c", a, b), [_CMP_A, _CMP_B],
     lambda a, b: (a != b).float(), None, EXACT),
    ("greater_scalar", lambda m, a: op.Greater("c", a, 0.25), [_X], lambda a: (a > 0.25).float(), None, EXACT),
    ("argmax_last", lambda m, a: op.Argmax("am", a, dim=-1), [_T], lambda a: a.argmax(-1).float(), None, EXACT),
    ("argmax_rows_keep", lambda m, a: op.Argmax("am", a, dim=-2, keep_dim=True), [_X],
     lambda a: a.argmax(-2, keepdim=True).float(), None, EXACT),
    ("argmax_ties", lambda m, a: op.Argmax("am", a, dim=-1), [ints(0, 3, 2, 4, 19)],
     lambda a: a.argmax(-1).float(), None, EXACT),
    ("argmax_all", lambda m, a: op.Argmax("am", a), [rn(1, 6, 7)], lambda a: a.argmax().reshape(1).float(),
     None, EXACT),
    ("cumsum_last", lambda m, a: op.CumSum("cs", a, axis=-1), [_T], lambda a: a.cumsum(-1), None, MATMUL_ATOL),
    ("cumsum_exclusive_dim1", lambda m, a: op.CumSum("cs", a, axis=1, exclusive=True), [_X],
     lambda a: a.cumsum(1) - a, None, MATMUL_ATOL),
    ("conv2d_transpose_s2p1", lambda m, a: op.Conv2dTranspose("ct", a, m.w, stride=2, padding=1), [_X],
     lambda a: F.conv_transpose2d(a, _W_T, stride=2, padding=1), {"w": _W_T}, MATMUL_ATOL),
    ("conv2d_transpose_s1_dil2", lambda m, a: op.Conv2dTranspose("ct", a, m.w, stride=1, padding=0, dilation=2),
     [_X], lambda a: F.conv_transpose2d(a, _W_T, dilation=2), {"w": _W_T}, MATMUL_ATOL),
    ("conv2d_transpose_groups_bias", lambda m, a: op.Conv2dTranspose("ct", a, m.w, m.b, stride=(3, 2), padding=2,
                                                                     groups=2),
     [rn(1, 4, 7, 6)], lambda a: F.conv_transpose2d(a, _W_TG, _B_T, stride=(3, 2), padding=2, groups=2),
     {"w": _W_TG, "b": _B_T}, MATMUL_ATOL),
    ("resize2d_nearest_up", lambda m, a: op.Resize2d("rs", a, (19, 23)), [_X],
     lambda a: F.interpolate(a, (19, 23), mode="nearest"), None, MATMUL_ATOL),
    ("resize2d_nearest_down", lambda m, a: op.Resize2d("rs", a, (5, 4)), [_X],
     lambda a: F.interpolate(a, (5, 4), mode="nearest"), None, MATMUL_ATOL),
    ("resize2d_bilinear", lambda m, a: op.Resize2d("rs", a, (14, 17), method="bilinear"), [_X],
     lambda a: F.interpolate(a, (14, 17), mode="bilinear", align_corners=False), None, MATMUL_ATOL),
    ("resize2d_bilinear_align", lambda m, a: op.Resize2d("rs", a, (14, 5), method="bilinear", align_corners=True),
     [_X], lambda a: F.interpolate(a, (14, 5), mode="bilinear", align_corners=True), None, MATMUL_ATOL),
    ("maxpool1d", lambda m, a: op.MaxPool1d("mp", a, 3, stride=2, padding=1), [_T],
     lambda a: F.max_pool1d(a, 3, 2, 1), None, MATMUL_ATOL),  # the window picker is a matmul
    ("maxpool1d_ceil_dil", lambda m, a: op.MaxPool1d("mp", a, 2, stride=3, dilation=2, ceil_mode=True), [_T],
     lambda a: F.max_pool1d(a, 2, 3, 0, 2, ceil_mode=True), None, MATMUL_ATOL),
    ("maxpool1d_module", lambda m, a: m.pool(a), [_T], lambda a: F.max_pool1d(a, 4, 1), None, MATMUL_ATOL),
    ("avgpool2d_ceil", lambda m, a: op.AvgPool2d("ap", a, 3, stride=2, padding=0, ceil_mode=True), [rn(2, 3, 10, 12)],
     lambda a: F.avg_pool2d(a, 3, 2, 0, ceil_mode=True), None, MATMUL_ATOL),
    ("avgpool2d_ceil_pad", lambda m, a: op.AvgPool2d("ap", a, 3, stride=2, padding=1, ceil_mode=True),
     [rn(2, 3, 10, 12)], lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True), None, MATMUL_ATOL),
    ("avgpool2d_ceil_pad_exclude", lambda m, a: op.AvgPool2d("ap", a, 3, stride=2, padding=1, ceil_mode=True,
                                                             count_include_pad=False),
     [rn(2, 3, 10, 12)], lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False), None, MATMUL_ATOL),
    ("embedding", lambda m, i: op.Embedding("emb", i, m.table), [_IDS], lambda i: F.embedding(i, _TABLE),
     {"table": _TABLE}, MATMUL_ATOL),
    ("embedding_table_first", lambda m, i: op.Embedding("emb", m.table, i), [_IDS], lambda i: F.embedding(i, _TABLE),
     {"table": _TABLE}, MATMUL_ATOL),
    ("sparse_matmul", lambda m, b: op.SparseMatmul("sp", _SPARSE.to_sparse(), b), [rn(2, 9, 5)],
     lambda b: _SPARSE @ b, None, MATMUL_ATOL),
    ("sparse_matmul_module", lambda m, b: m.sp(b), [rn(2, 9, 5)], lambda b: _SPARSE @ b, None, MATMUL_ATOL),
    ("dram_queue", lambda m, a: op.Add("add", op.DRAMQueue("q", a, num_entries=4), a), [_X], lambda a: a + a,
     None, ELTWISE_ATOL),
]

_MODULES = {
    "maxpool1d_module": lambda: {"pool": op.nn.MaxPool1dModule("pool", 4)},
    "sparse_matmul_module": lambda: {"sp": op.nn.SparseMatmulModule("sp", _SPARSE.to_sparse())},
}


def _module(row):
    key, fn, _, _, params, _ = row
    module = FnModule(fn, params)
    for attr_name, sub in (_MODULES.get(key, lambda: {})()).items():
        setattr(module, attr_name, sub)
    return module


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_op_float32_matches_torch(row):
    key, fn, inputs, ref, params, atol = row
    got = run_on_device(_module(row), inputs)
    expected = ref(*inputs).float()
    assert tuple(got.shape) == tuple(expected.shape), key
    pcc = calculate_pcc(got, expected) if expected.numel() > 1 and expected.std() > 0 else 1.0
    assert pcc >= 0.99, (key, pcc)
    assert torch.allclose(got, expected, atol=atol, rtol=1e-5), (key, (got - expected).abs().max().item())


# Bfp8_b: the same rows must still compile and run; values carry ~3 significant bits per block, so the
# check is PCC only (and exact 0/1 comparisons only where no rounding can flip them).
_BFP8_ROWS = [r for r in ROWS if r[0] in {"greater", "equal", "argmax_last", "cumsum_last", "conv2d_transpose_s2p1",
                                           "resize2d_bilinear", "maxpool1d", "avgpool2d_ceil_pad", "embedding",
                                           "sparse_matmul", "heaviside", "not_equal", "less_equal", "dram_queue"}]


@pytest.mark.parametrize("row", _BFP8_ROWS, ids=[r[0] for r in _BFP8_ROWS])
def test_op_bfp8_compiles_and_runs(row):
    key, fn, inputs, ref, params, _ = row
    got = run_on_device(_module(row), inputs, df=DataFormat.Bfp8_b)
    expected = ref(*inputs).float()
    assert tuple(got.shape) == tuple(expected.shape), key
    assert torch.isfinite(got).all(), key
    if key.startswith(("greater", "equal", "not_equal", "less", "heaviside")):
        # Small integers are exact in Bfp8_b, so the 0/1 results are too.
        assert torch.equal(got, expected), key
    elif key.startswith("argmax"):
        # Indices are whole numbers in range, and the index math stays exact (Float32 whatever the default
        # format). The chip compares Bfp8_b-rounded inputs, so where two elements round to the same value
        # the first wins: every row must point at an element within one Bfp8_b step (7 mantissa bits with
        # the block's shared exponent, at most 2**-6 of the row's largest magnitude) of the true maximum.
        x = inputs[0]
        assert torch.equal(got, got.round()) and got.min() >= 0 and got.max() < x.shape[-1], key
        picked = x.gather(-1, got.long().unsqueeze(-1)).squeeze(-1)
        step = x.abs().amax(-1) * 2.0 ** -6
        assert ((x.max(-1).values - picked) <= step).all(), key
    else:
        assert calculate_pcc(got, expected) >= 0.97, key


def test_argmax_recorded_shape_and_keep_dim():
    x = pybuda.Tensor.create_from_torch(rn(1, 4, 6))
    assert tuple(op.Argmax("a", x, dim=-1).shape.dims) == (1, 4)
    assert tuple(op.Argmax("b", x, dim=1, keep_dim=True).shape.dims) == (1, 1, 6)


def test_buda_requantize_is_named_unsupported_on_device():
    # Integer requantization: TT-Buda ran it on Wormhole B0's int8 path only; here it is refused by name.
    x = torch.randint(-300, 300, (1, 5, 7), generator=_GEN).to(torch.int32)
    module = FnModule(lambda m, a: op.BudaRequantize("rq", a, 0.25, zero_point=1.0))
    ref = op.BudaRequantize("rq_ref", pybuda.Tensor.create_from_torch(x), 0.25, zero_point=1.0).value()
    assert torch.equal(ref.to(torch.int32), torch.clamp(torch.round(x * 0.25) + 1, -128, 127).to(torch.int32))
    with pytest.raises(UnsupportedOpError, match="buda_requantize"):
        run_on_device(module, [x])


def test_large_ids_and_wide_argmax_stay_exact_at_bfp8():
    """Embedding ids beyond a block format's integer range and argmax indices beyond 127 must not merge: the
    ids queue and the index math keep Float32 whatever the default format is."""
    table = rn(1000, 24)
    ids = torch.randint(0, 1000, (1, 40), generator=_GEN)
    got = run_on_device(FnModule(lambda m, i: op.Embedding("emb", i, m.table), {"table": table}), [ids],
                        df=DataFormat.Bfp8_b)
    expected = F.embedding(ids, table)
    rows = torch.nn.functional.cosine_similarity(got.reshape(-1, 24), expected.reshape(-1, 24), dim=-1)
    assert rows.min() > 0.98, rows.min()  # a wrong id would pick an unrelated random row (cosine ~ 0)
    pybuda.pybuda_reset()
    x = torch.randn(1, 3, 300, generator=_GEN)
    got = run_on_device(FnModule(lambda m, a: op.Argmax("am", a, dim=-1), None), [x], df=DataFormat.Bfp8_b)
    picked = x.gather(-1, got.long().unsqueeze(-1)).squeeze(-1)
    assert ((x.max(-1).values - picked) <= x.abs().amax(-1) * 2.0 ** -6).all()
    assert got.max() > 127 or x.argmax(-1).max() <= 127


def test_embedding_ids_outside_the_table_are_refused_at_push():
    """On the device an id outside the table selects no row (zeros, where torch raises): the host refuses it."""
    module = FnModule(lambda m, i: op.Embedding("emb", i, m.table), {"table": _TABLE})
    run_on_device(module, [torch.tensor([[3, 49, 7]])])
    with pytest.raises(pybuda.errors.PybudaError, match=r"compiled for \[0, 49\].*first value outside: 50"):
        pybuda.run_inference(inputs=[(torch.tensor([[3, 50, 7]]),)]).get(timeout=120)


def test_embedding_beyond_the_device_lookup_is_a_compile_error_naming_it():
    """Tables larger than the device's chunked one-hot lookup takes fail to compile, naming the op."""
    from pybuda.passes.graph.lookups import EMBEDDING_MAX_ROWS

    table = torch.zeros(EMBEDDING_MAX_ROWS + 1, 1)
    module = FnModule(lambda m, i: op.Embedding("emb", i, m.table), {"table": table})
    with pytest.raises(pybuda.errors.CompileError, match="'embedding'.*emb|emb.*'embedding'"):
        run_on_device(module, [torch.tensor([[1, 2]])])
