"""Golden op semantics against independent torch expressions: TMs (pybuda.netlist.tms), reduce, sparse matmul, fidelity,
fused ops, gradient accumulation, relu attributes, splice, and the golden's numerics shortcuts."""

import numpy as np
import pytest
import torch

from pybuda.golden import formats
from pybuda.golden import kernels as golden_ops
from pybuda.golden.device import GoldenDevice
from pybuda.netlist import model as nl
from pybuda.netlist import tms
from pybuda.netlist.parse import parse_yaml
from pybuda.passes.lower.pickers import build_sparse_picker
from pybuda.passes.lower.pickers import sparse_matmul as picker_reference
from pybuda.dtypes import DataFormat, MathFidelity

TILE = 32
FIDELITIES = [MathFidelity.LoFi, MathFidelity.HiFi2, MathFidelity.HiFi2_B, MathFidelity.HiFi3, MathFidelity.HiFi4]


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --- TMs ---------------------------------------------------------------------------------------------------

def test_hslice_vslice_and_their_stacks():
    x = _rand(2, 2, 64, 96)
    h = tms.apply_tm(x, nl.HSlice(factor=3))
    # slice j of input slice t is column block j: new t index = t * 3 + j
    expected = torch.stack([blk for t in range(2) for blk in x[:, t].chunk(3, dim=-1)], dim=1)
    assert torch.equal(h, expected)
    assert torch.equal(tms.apply_tm(h, nl.HStack(factor=3)), x)
    v = tms.apply_tm(x, nl.VSlice(factor=2))
    expected = torch.stack([blk for t in range(2) for blk in x[:, t].chunk(2, dim=-2)], dim=1)
    assert torch.equal(v, expected)
    assert torch.equal(tms.apply_tm(v, nl.VStack(factor=2)), x)
    hs = tms.apply_tm(x, nl.HStack(factor=2))
    assert torch.equal(hs, torch.cat([x[:, 0], x[:, 1]], dim=-1).unsqueeze(1))
    vs = tms.apply_tm(x, nl.VStack(factor=2))
    assert torch.equal(vs, torch.cat([x[:, 0], x[:, 1]], dim=-2).unsqueeze(1))


def test_transpose_broadcast_tile_broadcast_and_pad():
    x = _rand(1, 1, 32, 64)
    assert torch.equal(tms.apply_tm(x, nl.Transpose()), x[0, 0].t()[None, None])
    assert torch.equal(tms.apply_tm(x, nl.Broadcast(dim="r", factor=3)), torch.cat([x] * 3, dim=2))
    assert torch.equal(tms.apply_tm(x, nl.Broadcast(dim="c", factor=2)), torch.cat([x] * 2, dim=3))
    z = tms.apply_tm(x, nl.Broadcast(dim="z", factor=4))
    assert z.shape == (1, 4, 32, 64) and all(torch.equal(z[:, i], x[:, 0]) for i in range(4))
    tr = tms.apply_tm(x, nl.TileBroadcast(dim="r"))
    for c0 in (0, 32):  # every row of a tile is that tile's row 0
        assert torch.equal(tr[0, 0, :, c0:c0 + 32], x[0, 0, 0:1, c0:c0 + 32].expand(32, 32))
    tc = tms.apply_tm(x, nl.TileBroadcast(dim="c"))
    for c0 in (0, 32):
        assert torch.equal(tc[0, 0, :, c0:c0 + 32], x[0, 0, :, c0:c0 + 1].expand(32, 32))
    p = tms.apply_tm(x, nl.Pad(rt=1, ct=2, value=0.5))
    assert p.shape == (1, 1, 64, 128)
    assert torch.equal(p[..., :32, :64], x) and bool((p[..., 32:, :] == 0.5).all()) and bool((p[..., 64:] == 0.5).all())


def test_input_transforms_unpad_then_tms_then_pad():
    x = _rand(1, 1, 64, 64)
    tm_list = (nl.Pad(rt=1, ct=0, value=0.0), nl.Transpose())  # pads are applied after the other TMs
    out = tms.apply_tms(x, tm_list, nl.InputUnpad(rt=1, ct=0), None)
    expected = torch.nn.functional.pad(x[..., :32, :].transpose(-1, -2), (0, 0, 0, 32))
    assert torch.equal(out, expected)


# --- reduce, relu, splice -------------------------------------------------------------------------------

def test_reduce_max_r_c_z():
    x = _rand(2, 4, 64, 96)
    r = golden_ops.reduce(x, {"type": "max", "dim": "r"})
    assert r.shape == (2, 4, 32, 96)
    assert torch.equal(r[:, :, 0], x.max(dim=2).values) and not r[:, :, 1:].any()
    c = golden_ops.reduce(x, {"type": "max", "dim": "c"})
    assert c.shape == (2, 4, 64, 32)
    assert torch.equal(c[..., 0], x.max(dim=3).values) and not c[..., 1:].any()
    z = golden_ops.reduce(x, {"type": "max", "dim": "z", "z": 2})
    assert torch.equal(z, torch.stack([torch.maximum(x[:, 0], x[:, 1]), torch.maximum(x[:, 2], x[:, 3])], dim=1))


@pytest.mark.parametrize("mode,threshold", [("min", 0.0), ("min", 0.3), ("max", 0.5)])
@pytest.mark.parametrize("specials", [False, True])
def test_relu_attributes(mode, threshold, specials):
    # With specials: -0 (kept, signed), subnormals, infinities and NaN (which becomes 0); the 'min' at 0 case runs
    # as torch.relu and must agree bit for bit, NaN included.
    x = _rand(1, 1, 32, 32)
    if specials:
        x[0, 0, 0, :6] = torch.tensor([-0.0, 1e-45, -1e-45, float("inf"), float("-inf"), float("nan")])
    out = golden_ops.apply_relu(x, {"relu_en": True, "relu_mode": mode, "relu_threshold": threshold})
    expected = torch.where(x >= threshold, x, 0.0) if mode == "min" else torch.where(x <= threshold, x, 0.0)
    assert torch.equal(out, expected) and torch.equal(out.signbit(), expected.signbit())  # NaN became 0
    assert golden_ops.apply_relu(x, {}) is x



def test_relu_without_the_fast_kernel_gives_the_same_values(monkeypatch):
    # A CPU whose relu kernel disagreed with the rule at -0 or subnormals (the probe says no) takes the select.
    x = _rand(1, 1, 32, 32, seed=4)
    x[0, 0, 0, :3] = torch.tensor([-0.0, -1e-45, float("nan")])
    fast = golden_ops.apply_relu(x, {"relu_en": True})
    monkeypatch.setattr(golden_ops, "_relu_is_exact", False)
    slow = golden_ops.apply_relu(x, {"relu_en": True})
    assert torch.equal(fast, slow) and torch.equal(fast.signbit(), slow.signbit())

def test_splice_along_t():
    a, b = _rand(1, 4, 32, 32, seed=1), _rand(1, 2, 32, 32, seed=2)
    attrs = {"granularity": "t", "input0": [1, 2, 4], "input1": [0, 2, 2]}
    out = golden_ops.splice([a, b], attrs, nl.TileShape3(4, 1, 1))
    assert torch.equal(out, torch.cat([a[:, 1:3], b], dim=1))


# --- matmul ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fidelity", FIDELITIES)
@pytest.mark.parametrize("df", [DataFormat.Float32, DataFormat.Float16_b, DataFormat.Bfp8_b, DataFormat.Bfp4_b])
def test_fidelity_pieces_equal_the_formats_model(fidelity, df):
    a = formats.quantize(_rand(2, 1, 64, 96, seed=3), df)
    b = formats.quantize(_rand(1, 1, 96, 64, seed=4), df)
    got = golden_ops.matmul([a, b], {}, fidelity, dfs=[df, df])
    assert torch.allclose(got, formats.fidelity_matmul(a, b, fidelity), rtol=1e-6, atol=1e-5)
    # Knowing the operands' format only skips masks that cannot change them: the same bits as not knowing it.
    assert torch.equal(got, golden_ops.matmul([a, b], {}, fidelity))
    got = golden_ops.binary("multiply", a, a.flip(0), fidelity, dfs=(df, df))
    assert torch.equal(got, formats.fidelity_multiply(a, a.flip(0), fidelity))


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_copied_fraction_bits_are_what_a_picker_matmul_passes_through(fidelity):
    # x @ E copies column 0 of x (a SrcB operand) across the tile; E @ x copies row 0 (a SrcA operand).
    x = _rand(1, 1, 32, 32, seed=5)
    ones_row, ones_col = torch.zeros(1, 1, 32, 32), torch.zeros(1, 1, 32, 32)
    ones_row[..., 0, :] = 1.0
    ones_col[..., :, 0] = 1.0
    copies = {"b": (golden_ops.matmul([x, ones_row], {}, fidelity), x[..., :, :1].expand(x.shape)),
              "a": (golden_ops.matmul([ones_col, x], {}, fidelity), x[..., :1, :].expand(x.shape))}
    for role, (got, source) in copies.items():
        bits = golden_ops.copied_fraction_bits(role, fidelity)
        assert torch.equal(got, _truncated(source, bits))  # Float32 data loses the bits below
        # values with at most that many fraction bits come through whole
        narrow = _truncated(source, bits)
        args = [narrow, ones_row] if role == "b" else [ones_col, narrow]
        assert torch.equal(golden_ops.matmul(args, {}, fidelity), narrow)


def _truncated(x: torch.Tensor, fraction_bits: int) -> torch.Tensor:
    """``x`` with the mantissa bits below ``fraction_bits`` after the leading one cleared."""
    mask = ~((1 << (23 - fraction_bits)) - 1)
    return (x.contiguous().view(torch.int32) & mask).view(torch.float32)


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_fidelity_products_keep_infinities(fidelity):
    # An infinity has no mantissa bits for the phases to split: inf * 1 is inf at every fidelity, not the
    # NaN of its pieces' arithmetic (inf - inf, 0 * inf). NaN inputs and 0 * inf stay NaN, as in float32.
    a = torch.tensor([[float("-inf"), 2.0, float("nan"), float("inf"), 0.0, 3.0]]).reshape(1, 1, 1, 6)
    b = torch.tensor([[1.0, -1.5, 1.0, 0.5, float("inf"), 1.0]]).reshape(1, 1, 1, 6)
    plain = a * b
    for got in (golden_ops.binary("multiply", a, b, fidelity), golden_ops.binary("multiply", b, a, fidelity),
                formats.fidelity_multiply(a, b, fidelity)):
        assert torch.equal(torch.isnan(got), torch.isnan(plain))
        finite = torch.isfinite(plain)
        assert torch.equal(got[~finite & ~torch.isnan(plain)], plain[~finite & ~torch.isnan(plain)])
    rows = torch.tensor([[1.0, 2.0], [float("-inf"), 1.0]]).reshape(1, 1, 2, 2)
    cols = torch.tensor([[1.0, 0.5], [1.0, 1.0]]).reshape(1, 1, 2, 2)
    got = golden_ops.matmul([rows, cols], {}, fidelity)
    assert torch.equal(torch.isinf(got), torch.isinf(rows @ cols)) and not torch.isnan(got).any()


def test_gemm_batch_paths_match_torch():
    a = _rand(3, 4, 64, 96)
    for b in (_rand(1, 1, 96, 32), _rand(1, 4, 96, 32), _rand(3, 4, 96, 32)):
        assert torch.allclose(golden_ops.gemm(a, b), torch.matmul(a, b), rtol=1e-5, atol=1e-5)
    z = _rand(3, 1, 64, 96).expand(3, 4, 64, 96)  # broadcast z: one slice against 4 weight slices
    b = _rand(1, 4, 96, 32)
    assert torch.allclose(golden_ops.gemm(z, b, {}), torch.matmul(z.contiguous(), b), rtol=1e-5, atol=1e-5)


def test_gemm_broadcast_weight_and_alike_columns():
    a = _rand(2, 4, 64, 96, seed=8)
    w = _rand(1, 1, 96, 64, seed=9)
    # One weight broadcast over t (stride 0): one GEMM of all rows, the same numbers as per slice.
    assert torch.allclose(golden_ops.gemm(a, w.expand(1, 4, 96, 64), {}), torch.matmul(a, w), rtol=1e-5, atol=1e-5)
    # A reduce constant (every column alike): one column computed, the others a stride-0 view of it.
    ones = torch.full((1, 1, 96, 32), 1.0 / 96)
    cache = {}
    for _ in range(2):  # the second call reads the cached column check
        out = golden_ops.gemm(a, ones, cache)
        assert out.stride(-1) == 0 and out.shape == (2, 4, 64, 32)
        assert torch.allclose(out, torch.matmul(a, ones), rtol=1e-5, atol=1e-6)
    assert golden_ops.gemm(a, w, {}).stride(-1) == 1  # columns that differ: a plain GEMM
    # With a bias the broadcast product is made dense first (the bias is added in place).
    bias = _rand(1, 1, 64, 32, seed=10)
    out = golden_ops.matmul([a, ones, bias], {"bias": True}, None, caches=[None, {}, {}])
    assert torch.allclose(out, torch.matmul(a, ones) + tms.apply_tm(bias, nl.TileBroadcast("r")), atol=1e-6)



@pytest.mark.parametrize("fidelity", FIDELITIES)
@pytest.mark.parametrize("special", [False, True])
def test_large_constant_pieces_are_masked_at_each_use_not_kept(monkeypatch, fidelity, special):
    # A constant's masked fidelity pieces of KEPT_PIECE_MAX_DATUMS datums or more stay out of its cache (they
    # doubled a model's weights at HiFi3): each use masks again, bit for bit the product of kept pieces, and
    # repeated uses add nothing to the cache. With special values (inf, NaN, a subnormal) in the weight the
    # NaN handling agrees too.
    a = _rand(2, 3, 64, 96, seed=20)
    w = _rand(1, 1, 96, 64, seed=21)  # float32: every mask below 23 fraction bits changes it
    if special:
        w[0, 0, 0, :3] = torch.tensor([float("inf"), float("nan"), 1e-40])
    kept = {}
    expected = golden_ops.matmul([a, w], {}, fidelity, caches=[None, kept])
    assert any(p is not w for p in kept[("fidelity", "a", fidelity, None)])  # a masked copy, kept
    monkeypatch.setattr(golden_ops, "KEPT_PIECE_MAX_DATUMS", 1)
    cache = {}
    for use in range(3):
        got = golden_ops.matmul([a, w], {}, fidelity, caches=[None, cache])
        assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(), expected.nan_to_num())
        if use == 0:
            keys = set(cache)
    assert set(cache) == keys
    assert all(p is None or p is w for p in cache[("fidelity", "a", fidelity, None)])


def test_broadcast_inputs_stay_broadcast_through_unary_ops_bias_and_dest():
    # A reduction's column expanded across its tile: the reciprocal, the Dest rounding and an alike-columns
    # bias compute each distinct value once and return a view; the values are those of the dense inputs.
    col = _rand(2, 3, 64, 1, seed=13).abs() + 0.5
    wide = col.expand(2, 3, 64, 32)
    got = golden_ops.unary("reciprocal", wide, {})
    assert got.stride(-1) == 0 and torch.equal(got, golden_ops.UNARY["reciprocal"](wide.contiguous(), {}))
    rounded = formats.accumulate(wide, DataFormat.Float16_b)
    assert rounded.stride(-1) == 0 and torch.equal(rounded, formats.accumulate(wide.contiguous(), DataFormat.Float16_b))
    dropped = golden_ops.unary("dropout", wide, {"p": 0.5, "seed": 3})  # one draw per datum: made dense
    assert dropped.stride(-1) != 0
    a = _rand(2, 3, 64, 96, seed=14)
    ones, eps = torch.full((1, 1, 96, 32), 1.0 / 96), torch.full((1, 1, 64, 32), 1e-5)
    out = golden_ops.matmul([a, ones, eps], {"bias": True}, None, caches=[None, {}, {}])
    dense = golden_ops.matmul([a, ones.clone(), eps], {"bias": True}, None)  # no caches: a plain GEMM
    assert out.stride(-1) == 0 and torch.allclose(out, dense, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("df", [DataFormat.Bfp8_b, DataFormat.Bfp4, DataFormat.Float16_b, DataFormat.Float16,
                                DataFormat.Int8])
def test_quantize_keeps_a_broadcast_a_broadcast(df):
    # A stride-0 view rounds as its materialised copy does (BFP blocks of one repeated value included) and
    # comes back as a view of the same shape.
    col = _rand(2, 3, 64, 1, seed=11) * 37
    for view in (col.expand(2, 3, 64, 96), col[:, :1].expand(2, 3, 64, 40), _rand(1, 1, 1, 48, seed=12).expand(2, 3, 64, 48)):
        got = formats.quantize(view, df)
        assert torch.equal(got, formats.quantize(view.contiguous(), df))
        assert got.shape == view.shape and 0 in got.stride()


def test_matmul_accumulate_z_bias_and_gelu():
    a, b = _rand(1, 4, 32, 64, seed=5), _rand(1, 4, 64, 32, seed=6)
    bias = _rand(1, 1, 32, 32, seed=7)
    out = golden_ops.matmul([a, b, bias], {"accumulate": True, "z": 2, "bias": True, "sfpu_op": "gelu"}, None)
    prod = a @ b
    expected = torch.nn.functional.gelu(torch.stack([prod[:, 0] + prod[:, 1], prod[:, 2] + prod[:, 3]], 1)
                                        + bias[0, 0, 0])
    assert torch.allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("bias_shape", [(1, 3, 64, 96), (2, 3, 64, 96), (1, 1, 64, 96)])
def test_matmul_bias_adds_row_0_of_each_bias_tile_bit_for_bit(bias_shape):
    # The bias is added as tile_broadcast r of its value (row 0 of every tile, to every row of that tile),
    # for a constant (batch 1, cached) or per-input bias, with t slices or one broadcast over t.
    a, b = _rand(2, 3, 64, 48, seed=1), _rand(1, 3, 48, 96, seed=2)
    bias = _rand(*bias_shape, seed=3)  # rows differ within each tile: only row 0 may be used
    expected = golden_ops.gemm(a, b) + tms.apply_tm(bias, nl.TileBroadcast("r"))
    cache = {} if bias_shape[0] == 1 else None
    for _ in range(2):  # the second call reads the cached rows
        out = golden_ops.matmul([a, b, bias], {"bias": True}, None, caches=[None, None, cache])
        assert torch.equal(out, expected)


def _picker_attrs(picker) -> dict:
    """The ``identity: true`` matmul attributes of a built sparse picker."""
    return {"identity": True, "indices_len": picker.indices_len, "num_sparse_tiles": picker.num_sparse_tiles,
            "num_index_tiles": picker.num_index_tiles}


def _picker_inputs(picker, act, index=None) -> list:
    """The sparse matmul's operands as the golden device holds them: sparse tiles, activation, index (the picker's
    own unless ``index`` is given)."""
    index = picker.index if index is None else index
    return [picker.tiles[None, None], act, index.to(torch.float32)[None, None]]


@pytest.mark.parametrize("fidelity", [None, MathFidelity.HiFi4, MathFidelity.LoFi])
def test_sparse_identity_matmul_matches_the_picker_reference(fidelity):
    rng = np.random.default_rng(0)
    out_rows, k_rows = 96, 128
    rows_out = rng.integers(0, out_rows, 300)
    rows_in = rng.integers(0, k_rows, 300)
    values = rng.choice([1.0, 0.5, -2.0], 300)
    picker = build_sparse_picker(rows_out, rows_in, values, out_rows // TILE, k_rows // TILE)
    act = formats.quantize(_rand(1, 1, k_rows, 64, seed=8), DataFormat.Float16_b)
    attrs = _picker_attrs(picker)
    inputs = _picker_inputs(picker, act)
    out_shape = nl.TileShape3(1, out_rows // TILE, 2)
    caches = [{}, None, {}]
    got = golden_ops.matmul(inputs, attrs, fidelity, out_shape, caches)
    ref = picker_reference(picker.tiles, picker.index, picker.indices_len, act[0], out_rows // TILE)
    dense = picker.dense()[0] @ act[0, 0]
    assert torch.allclose(ref[0], dense, atol=1e-4)
    if fidelity in (None, MathFidelity.HiFi4):  # values and bf16 activations are exact at HiFi4
        assert torch.allclose(got[0], ref, atol=1e-4)
    else:
        masked = picker_reference(picker.tiles, picker.index, picker.indices_len,
                                  golden_ops.fidelity_pieces(act, "a", fidelity)[0][0], out_rows // TILE)
        assert torch.allclose(got[0], masked, atol=1e-4)
    assert any(key[0] == "sparse" for key in caches[0])  # quadruples decoded once, then reused
    again = golden_ops.matmul(inputs, attrs, fidelity, out_shape, caches)
    assert torch.equal(again, got)
    # The operands' formats, when given, only skip masks that cannot change them.
    dfs = [DataFormat.Float16_b, DataFormat.Float16_b, DataFormat.RawUInt32]
    assert torch.equal(golden_ops.matmul(inputs, attrs, fidelity, out_shape, [{}, None, {}], dfs), got)



@pytest.mark.parametrize("fidelity", FIDELITIES + [None])
@pytest.mark.parametrize("act_t", [1, 3])
@pytest.mark.parametrize("choices", [(1.0, 0.5, -2.0), (1.0, 0.3)])  # SrcB "lo" pieces zero, or not
@pytest.mark.parametrize("terms", [1, 3])
def test_a_picker_of_one_term_per_row_and_tile_is_a_gather_bit_for_bit(monkeypatch, fidelity, act_t, choices, terms):
    # Every tile giving an output row at most one term (im2col, pooling windows, nearest resizes: one term per
    # row; a depthwise convolution's or a pool's sum: one per tap, each from its own tile) runs as gathers of
    # rows times values, summed in the index's order: the tile products' numbers bit for bit, at every
    # fidelity, with the activation in one t slice or one per output slice. A non-finite activation (0 * inf
    # is NaN in a tile product) takes the tile products, and so does a tile giving a row two terms.
    rng = np.random.default_rng(3)
    out_t, out_rt, k_rows, cols = 3, 3, 96, 64
    picked = np.repeat(rng.choice(out_t * out_rt * TILE, 200, replace=False), terms)
    # a row's terms from distinct activation tiles (k_rows = 3 tiles), in a random order
    tiles_of = np.concatenate([rng.permutation(3)[:terms] for _ in range(200)])
    in_rows = tiles_of * TILE + rng.integers(0, TILE, picked.size)
    values = rng.choice(choices, picked.size)
    picker = build_sparse_picker(picked % (out_rt * TILE), in_rows, values, out_rt, k_rows // TILE,
                                 out_t=picked // (out_rt * TILE), num_t=out_t)
    act = _rand(2, act_t, k_rows, cols, seed=11)  # float32: every fidelity mask changes it
    attrs = _picker_attrs(picker)
    inputs = _picker_inputs(picker, act)
    out_shape = nl.TileShape3(out_t, out_rt, cols // TILE)

    def run(x):
        caches = [{}, None, {}]
        got = golden_ops.matmul([inputs[0], x, inputs[2]], attrs, fidelity, out_shape, caches)
        return got, any(key[0] == "sparse_gather" and value[1] is not None for key, value in caches[0].items())

    got, gathered = run(act)
    assert gathered
    monkeypatch.setattr(golden_ops, "_gather_rows", lambda *args: None)  # the tile products
    tiles, gathered = run(act)
    assert not gathered and torch.equal(got, tiles)
    monkeypatch.undo()
    two = build_sparse_picker(np.array([0, 0]), np.array([1, 2]), np.array([1.0, 1.0]), out_rt, k_rows // TILE)
    tiles, _, index = _picker_inputs(two, None)
    assert golden_ops._gather_rows(*golden_ops._decode_sparse(tiles, index, two.indices_len), 1, out_rt, 1, k_rows) is None
    act[1, 0, 5, 3] = float("inf")
    got, _ = run(act)
    monkeypatch.setattr(golden_ops, "_gather_rows", lambda *args: None)
    tiles, _ = run(act)
    assert torch.equal(got.isnan(), tiles.isnan()) and torch.equal(got.nan_to_num(), tiles.nan_to_num())



@pytest.mark.parametrize("fidelity", [None, MathFidelity.LoFi, MathFidelity.HiFi3])
@pytest.mark.parametrize("value", [1.0, 0.5])
def test_a_sum_over_stacked_taps_is_slices_bit_for_bit(monkeypatch, fidelity, value):
    # A depthwise convolution's sum: output row i adds activation rows i, rows + i, 2 rows + i (one tap per
    # block of rows). Each rank of terms is then a slice of the activation, a view when the values are ones;
    # the numbers are the tile products', and the activation is left as it was.
    rows, taps, cols = 64, 3, 32
    out_rows = np.tile(np.arange(rows), taps)
    in_rows = np.repeat(np.arange(taps), rows) * rows + out_rows
    picker = build_sparse_picker(out_rows, in_rows, np.full(out_rows.size, value), rows // TILE, taps * rows // TILE)
    act = _rand(2, 1, taps * rows, cols, seed=12)
    act[0, 0, ::rows, 0] = -0.0  # every tap of output row 0, column 0: the sum is +0, as in a zeroed accumulator
    kept = act.clone()
    attrs = _picker_attrs(picker)
    inputs = _picker_inputs(picker, act)
    out_shape = nl.TileShape3(1, rows // TILE, cols // TILE)
    caches = [{}, None, {}]
    got = golden_ops.matmul(inputs, attrs, fidelity, out_shape, caches)
    plan = next(value for key, value in caches[0].items() if key[0] == "sparse_gather")[1]
    assert [rank.start for rank in plan] == [0, rows, 2 * rows] and all(rank.ones == (value == 1.0) for rank in plan)
    assert all(rank.rows is None for rank in plan)
    assert torch.equal(act, kept) and not torch.signbit(got[0, 0, 0, 0])
    monkeypatch.setattr(golden_ops, "_gather_rows", lambda *args: None)  # the tile products
    assert torch.equal(golden_ops.matmul(inputs, attrs, fidelity, out_shape, [{}, None, {}]), got)


def test_sparse_matmul_cache_follows_a_rewritten_index():
    # The decoded index is kept with the sparse tiles' cache: an index rewritten into a new dict, even one
    # at a freed dict's address, must be decoded again (an id()-keyed cache served the old quadruples).
    rng = np.random.default_rng(1)
    rows = 64
    picker = build_sparse_picker(rng.integers(0, rows, 80), rng.integers(0, rows, 80), np.ones(80), rows // TILE,
                                 rows // TILE)
    act = formats.quantize(_rand(1, 1, rows, 32, seed=9), DataFormat.Float16_b)
    attrs = _picker_attrs(picker)
    out_shape = nl.TileShape3(1, rows // TILE, 1)
    flipped = picker.index.clone().reshape(-1)
    quads = flipped[: 4 * picker.indices_len].reshape(-1, 4)
    quads[:, 1] = rows // TILE - 1 - quads[:, 1]  # every output row tile moves: same size, other rows
    flipped = flipped.reshape(picker.index.shape)
    tiles_cache = {}
    for index in (picker.index, flipped):
        inputs = _picker_inputs(picker, act, index)
        got = golden_ops.matmul(inputs, attrs, None, out_shape, [tiles_cache, None, {}])  # a fresh index dict
        want = picker_reference(picker.tiles, index, picker.indices_len, act[0], rows // TILE)
        assert torch.allclose(got[0], want, atol=1e-4)

# --- numerics shortcuts the golden relies on -------------------------------------------------------------

@pytest.mark.parametrize("df", [DataFormat.Float16_b, DataFormat.Bfp8_b, DataFormat.Bfp4_b, DataFormat.Bfp2_b])
def test_b_family_packing_subsumes_a_float16_b_dest(df):
    g = torch.Generator().manual_seed(9)
    for scale in (1e-20, 1.0, 1e20):
        x = torch.randn(64, 1024, generator=g) * scale * torch.exp(3 * torch.randn(64, 1024, generator=g))
        assert torch.equal(formats.quantize(formats.accumulate(x, DataFormat.Float16_b), df), formats.quantize(x, df))


@pytest.mark.parametrize("df", list(DataFormat.__members__.values()))
def test_quantize_is_idempotent(df):
    # The golden rounds an operand only when its format changes: this must lose nothing.
    if df in (DataFormat.Invalid,) or not hasattr(formats, "format_info"):
        pytest.skip("no format")
    try:
        formats.format_info(df)
    except Exception:
        pytest.skip("not a storage format")
    x = _rand(4, 64, 64) * 10
    once = formats.quantize(x, df)
    assert torch.equal(formats.quantize(once, df), once)


# --- whole netlists: fused ops, gradient accumulation, constant caching -------------------------------------

_Q = ("grid_size: [1,1], t: 1, mblock: [1,1], ublock: [1,1], ublock_order: r, target_device: 0, loc: dram, "
      "dram: [[{ch}, 0x30000000]]")
_OP = ("grid_loc: [{r},0], grid_size: [1,1], t: 1, mblock: [1,1], ublock: [1,1], ublock_order: r, "
       "buf_size_mb: 2, acc_df: Float32, intermed_df: {idf}, math_fidelity: {fid}")


def _netlist(df="Float32", idf="Float32", fid="HiFi4"):
    return f"""
devices: {{arch: wormhole_b0}}
queues:
  a:    {{input: HOST, type: queue, entries: 4, df: {df}, {_Q.format(ch=0)}}}
  w:    {{input: HOST, type: ram, entries: 1, df: {df}, {_Q.format(ch=1)}}}
  out:  {{input: fused0, type: queue, entries: 4, df: {df}, {_Q.format(ch=2)}}}
  gacc: {{input: grad0, type: ram, entries: 1, df: {df}, {_Q.format(ch=3)}}}
fused_ops:
  0:
    inputs: 2
    intermediates: 1
    schedules:
      - - mul0: {{type: multiply, inputs: [input0, input1], output: intermed0, mblock: [1,1], ublock: [1,1]}}
        - add0: {{type: add, inputs: [intermed0, input0], output: output, mblock: [1,1], ublock: [1,1],
                  attributes: {{relu_en: true, relu_mode: min, relu_threshold: 0.0}}}}
graphs:
  g:
    target_device: 0
    input_count: 2
    fused0: {{type: fused_op, inputs: [a, w], in_df: [{df}, {df}], out_df: {df}, {_OP.format(r=0, idf=idf, fid=fid)},
              attributes: {{fused_op_id: 0}}}}
    grad0: {{type: nop, inputs: [fused0], in_df: [{df}], out_df: {df}, gradient_op: true,
             {_OP.format(r=1, idf=idf, fid=fid)}}}
programs:
  - run:
    - var: {{$c_zero: 0, $c_two: 2}}
    - staticvar: {{$ptr: 0}}
    - execute: {{graph_name: g, queue_settings: {{
        a:    {{prologue: false, epilogue: false, zero: false, rd_ptr_local: $ptr, rd_ptr_global: $ptr}},
        w:    {{prologue: true, epilogue: false, zero: false, rd_ptr_global: $c_zero, wr_ptr_global: $c_zero}},
        gacc: {{prologue: false, epilogue: false, zero: false, rd_ptr_global: $c_zero, wr_ptr_global: $c_zero}}}}}}
    - varinst: [$ptr, incwrap, $c_two, 8]
"""


def _fused_reference(a, w):
    # Float32 operands: HiFi4 multiplies keep 10 mantissa bits of each (TF32 on the multiplier).
    return torch.relu(formats.fidelity_multiply(a, w, MathFidelity.HiFi4) + a)


def test_fused_op_and_gradient_accumulation_in_float32():
    dev = GoldenDevice(parse_yaml(_netlist()), fast=False)
    a, w = _rand(4, 1, 32, 32, seed=10), _rand(1, 32, 32, seed=11)
    dev.write_ram("w", w)
    dev.push("a", a)
    dev.run_program("run")
    dev.run_program("run")
    out = dev.pop("out", 4)
    expected = _fused_reference(a, w)
    assert torch.allclose(out, expected, atol=1e-5)
    # The gradient op sums every input of both executes into its ram queue.
    assert torch.allclose(dev.read_ram("gacc"), expected.sum(0), atol=1e-4)


def test_fused_intermediates_use_intermed_df_and_parameter_updates_are_seen():
    dev = GoldenDevice(parse_yaml(_netlist(df="Float16_b", idf="Bfp8_b", fid="HiFi4")), fast=False)
    a, w = _rand(2, 1, 32, 32, seed=12), _rand(1, 32, 32, seed=13)
    dev.write_ram("w", w)
    dev.push("a", a)
    dev.run_program("run")
    q16 = lambda x: formats.quantize(x, DataFormat.Float16_b)  # noqa: E731
    aq, wq = q16(a), q16(w)
    inter = formats.quantize(formats.fidelity_multiply(aq, wq, MathFidelity.HiFi4), DataFormat.Bfp8_b)
    assert torch.equal(dev.pop("out", 2), q16(torch.relu(inter + aq)))
    # A new parameter value replaces what the golden cached for the old one.
    dev.write_ram("w", -w)
    dev.push("a", a)
    dev.run_program("run")
    inter = formats.quantize(formats.fidelity_multiply(aq, -wq, MathFidelity.HiFi4), DataFormat.Bfp8_b)
    assert torch.equal(dev.pop("out", 2), q16(torch.relu(inter + aq)))


def test_gradient_accumulation_rounds_each_partial_sum_to_the_queue_format():
    dev = GoldenDevice(parse_yaml(_netlist(df="Float16_b")), fast=False)
    a, w = _rand(2, 1, 32, 32, seed=14), _rand(1, 32, 32, seed=15)
    dev.write_ram("w", w)
    dev.push("a", a)
    dev.run_program("run")
    out = dev.pop("out", 2)
    q16 = lambda x: formats.quantize(x, DataFormat.Float16_b)  # noqa: E731
    assert torch.equal(dev.read_ram("gacc"), q16(out[0] + out[1]))


def test_bfp_weights_are_not_reblocked_by_a_transpose():
    # The unpacker moves decoded datums: a transposed Bfp8_b weight keeps exactly its stored values.
    text = f"""
devices: {{arch: wormhole_b0}}
queues:
  a:   {{input: HOST, type: queue, entries: 1, df: Float32, {_Q.format(ch=0)}}}
  w:   {{input: HOST, type: ram, entries: 1, df: Bfp8_b, {_Q.format(ch=1)}}}
  out: {{input: mm, type: queue, entries: 1, df: Float32, {_Q.format(ch=2)}}}
graphs:
  g:
    target_device: 0
    input_count: 1
    mm: {{type: matmul, inputs: [a, w], in_df: [Float32, Bfp8_b], out_df: Float32, input_1_tms: [transpose],
          {_OP.format(r=0, idf='Float32', fid='HiFi4')}, attributes: {{m_k: 1, u_kt: 1}}}}
programs:
  - run:
    - var: {{$c_zero: 0}}
    - execute: {{graph_name: g, queue_settings: {{
        a: {{prologue: false, epilogue: false, zero: false, rd_ptr_local: $c_zero, rd_ptr_global: $c_zero}},
        w: {{prologue: true, epilogue: false, zero: false, rd_ptr_global: $c_zero, wr_ptr_global: $c_zero}}}}}}
"""
    dev = GoldenDevice(parse_yaml(text), fast=False)
    a, w = _rand(1, 1, 32, 32, seed=16), _rand(1, 32, 32, seed=17)
    dev.write_ram("w", w)
    dev.push("a", a)
    dev.run_program("run")
    wq = formats.quantize(w, DataFormat.Bfp8_b)
    expected = formats.fidelity_matmul(a, wq.transpose(-1, -2), MathFidelity.HiFi4)
    assert torch.allclose(dev.pop("out", 1)[0], expected, rtol=1e-6, atol=1e-6)
