"""General data movement on the device (issue #12): reshapes, permutes, strided slices, pads, concat, stack,
repeat and expand of odd shapes lower to tile TMs or pickers that compute exactly what torch computes, the
capability check agrees with what lowering can express, and what it cannot goes to the CPU with a reason."""

import random

import pytest
import torch

import pybuda
from pass_helpers import check_lowering, lower
from pybuda.errors import CompileError
from pybuda.ir.graph import Graph
from pybuda.netlist.host_io import canonical_zrc
from pybuda.passes.lower import gather_plan, movement
from pybuda.passes.lower.common import _hashable
from pybuda.verify import calculate_pcc

#: Named tolerances for models run on the simulated chip at Float32 (HiFi4 products, the SFPU's exp and
#: reciprocal approximations), as in tools/random_graphs.py: atol relative to max|want|.
PCC_MIN = 0.99
ATOL_REL = 0.02
RTOL = 0.02


def _dim(rng: random.Random) -> int:
    return rng.choice([3, 5, 6, 7, 9, 10, 12, 14, 20, 24, 33, 40])


def _random_move(rng: random.Random, shape):
    """One random data-movement op (registry form) on ``shape``: (op_type, attrs), or None."""
    rank = len(shape)
    kind = rng.choice(["split", "merge", "transpose", "transpose", "index", "pad", "repeat", "flatten"])
    if kind == "split":
        dims = [d for d in range(1, rank) if any(shape[d] % f == 0 and shape[d] > f for f in (2, 3, 5))]
        if not dims or rank >= 5:
            return None
        d = rng.choice(dims)
        f = rng.choice([f for f in (2, 3, 5) if shape[d] % f == 0 and shape[d] > f])
        return "reshape", {"shape": tuple(shape[:d]) + (f, shape[d] // f) + tuple(shape[d + 1:])}
    if kind == "merge" and rank >= 3:
        d = rng.randrange(1, rank - 1)
        return "reshape", {"shape": tuple(shape[:d]) + (shape[d] * shape[d + 1],) + tuple(shape[d + 2:])}
    if kind == "flatten" and rank >= 3:
        return "reshape", {"shape": (shape[0], -1)}
    if kind == "transpose" and rank >= 3:
        a, b = rng.sample(range(1, rank), 2)
        return "transpose", {"dim0": a, "dim1": b}
    if kind == "index":
        d = rng.randrange(1, rank)
        if shape[d] < 3:
            return None
        start = rng.randrange(0, shape[d] - 1)
        return "index", {"dim": d, "start": start, "stop": shape[d], "stride": rng.choice([1, 2, 3])}
    if kind == "pad":
        mode = rng.choice(["constant", "replicate", "reflect"])
        pads = tuple(rng.randint(0, min(2, shape[-1 - i // 2] - 1)) for i in range(4 if rank >= 3 else 2))
        return "pad", {"pad": pads, "mode": mode, "value": 0.0}
    if kind == "repeat":
        return "repeat", {"factors": tuple([1] * (rank - 1) + [rng.choice([2, 3])])}
    return None


def _random_chain(seed: int):
    rng = random.Random(seed)
    rank = rng.choice([3, 4, 4, 5])
    shape = (1,) + tuple(_dim(rng) for _ in range(rank - 1))
    ops, cur = [], shape
    while len(ops) < rng.randint(1, 3):
        move = _random_move(rng, cur)
        if move is None:
            continue
        out = gather_plan.index_map([cur], ((move[0], _hashable(move[1])),)).shape
        if out.numel() > 60_000:
            continue
        ops.append(move)
        cur = tuple(out)
    return shape, ops


def _graph(shape, ops) -> Graph:
    g = Graph("move")
    g.add_input("a", shape)
    g.add_op("e", "exp", ["a"])  # an op in front, so the movement happens on the device
    prev = "e"
    for i, (op, attrs) in enumerate(ops):
        g.add_op(f"m{i}", op, [prev], attrs)
        prev = f"m{i}"
    g.add_op("z", "sqrt", [prev])
    g.add_output("out", "z")
    return g


@pytest.mark.parametrize("seed", range(40))
def test_generated_moves_lower_to_exact_device_ops(seed):
    shape, ops = _random_chain(seed)
    check_lowering(_graph(shape, ops), [torch.randn(*shape)])


@pytest.mark.parametrize("shape,ops,max_pickers", [
    # a reshape that splits a row into two rows of an odd width
    ((1, 8, 66), [("reshape", {"shape": (1, 8, 2, 33)})], 2),
    # Swin/ConvNeXt-style window split: [16, 16, 32] -> [16, 2, 16, 16]
    ((16, 16, 32), [("reshape", {"shape": (16, 16, 2, 16)}), ("transpose", {"dim0": 1, "dim1": 2})], 1),
    # BERT attention with head_dim 24: split into heads, and merge back
    ((1, 20, 72), [("reshape", {"shape": (1, 20, 3, 24)}), ("transpose", {"dim0": 1, "dim1": 2})], 1),
    ((1, 3, 20, 24), [("transpose", {"dim0": 1, "dim1": 2}), ("reshape", {"shape": (1, 20, 72)})], 1),
    # NCHW <-> NHWC of odd sizes
    ((1, 5, 7, 9), [("transpose", {"dim0": 1, "dim1": 3})], 2),
    ((1, 6, 10, 12), [("reshape", {"shape": (1, 6, 5, 2, 12)}), ("transpose", {"dim0": 2, "dim1": 4})], 2),
])
def test_named_moves_are_cheap(shape, ops, max_pickers):
    bg = check_lowering(_graph(shape, ops), [torch.randn(*shape)])
    pickers = [op for op in bg.ops.values() if op.tags.get("picker") in ("column", "sparse")]
    assert len(pickers) <= max_pickers, [op.name for op in pickers]


def test_row_pickers_within_a_batch_like_dim_read_one_slice_group_each():
    """[1, 32, 18, 36] -> [1, 32, 18, 2, 18]: every output slice reads one of the 32 source slices, so the
    picker runs per slice (act_t 32, a short K strip) instead of on all 32 slices stacked."""
    shape = (1, 32, 18, 36)
    bg = check_lowering(_graph(shape, [("reshape", {"shape": (1, 32, 18, 2, 18)})]), [torch.randn(*shape)])
    sparse = [op for op in bg.ops.values() if op.tags.get("picker") == "sparse"]
    assert sparse and all(op.attrs["act_t"] == 32 and op.shape.z == 32 for op in sparse)


@pytest.mark.parametrize("seed", range(40))
def test_capability_check_agrees_with_lowering(seed, monkeypatch):
    """With the part limit at 1 many moves have no plan: exactly those are refused by the check, the others
    lower (so the frontend never sends the device a move lowering cannot express)."""
    monkeypatch.setattr(gather_plan, "MAX_PARTS", 1)
    rng = random.Random(1000 + seed)
    shape = (1,) + tuple(_dim(rng) for _ in range(rng.choice([2, 3])))
    move = None
    while move is None:
        move = _random_move(rng, shape)
    op, attrs = move
    reason = gather_plan.unsupported_movement([shape], op, attrs)
    g = _graph(shape, [move])
    if reason is None:
        check_lowering(g, [torch.randn(*shape)])
    else:
        assert "cannot express" in reason
        with pytest.raises(CompileError) as info:
            lower(g)
        assert info.value.op == "m0"


def test_every_single_move_of_odd_shapes_has_a_plan():
    for shape in [(1, 5, 7, 9), (1, 3, 40, 36), (2, 3, 4, 5, 6), (1, 40, 2, 50)]:
        for a in range(len(shape)):
            for b in range(a + 1, len(shape)):
                assert gather_plan.unsupported_movement([shape], "transpose", {"dim0": a, "dim1": b}) is None


def test_plans_need_few_parts_for_head_splits():
    emap = gather_plan.index_map([(1, 20, 72)], (("reshape", _hashable({"shape": (1, 20, 3, 24)})),
                                              ("transpose", _hashable({"dim0": 1, "dim1": 2}))))
    plan = gather_plan.plan_gather((1, 20, 72), emap.reshape(canonical_zrc(tuple(emap.shape))).numpy())
    assert plan is not None and plan.parts == 1


# --- through the torch frontend, on the simulated chip ---------------------------------------------------
class HeadSplit(torch.nn.Module):
    """BERT-style attention with head_dim 24 (not a multiple of 32)."""

    def __init__(self, heads=3, dim=24):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = torch.nn.Linear(heads * dim, 3 * heads * dim)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / self.dim ** 0.5, dim=-1)
        return (att @ v).transpose(1, 2).reshape(b, s, self.heads * self.dim)


class WindowPartition(torch.nn.Module):
    """Swin-style windows of an odd-sized feature map, then flatten/unflatten, stack, repeat and expand."""

    def forward(self, x):  # [1, 12, 10, 6]
        b, h, w, c = x.shape
        win = x.reshape(b, h // 2, 2, w // 5, 5, c).permute(0, 1, 3, 2, 4, 5).reshape(b, -1, 10, c)
        y = torch.tanh(win).flatten(2).unflatten(2, (5, 12))
        z = torch.stack([y, y * 2], dim=2).reshape(b, -1, 12)[:, 1::3]
        return torch.relu(z.repeat(1, 1, 2) + z.mean(dim=1, keepdim=True).expand(-1, z.shape[1], -1).repeat(1, 1, 2))


class Pads(torch.nn.Module):
    def forward(self, x):  # [1, 5, 9, 11]
        y = torch.nn.functional.pad(torch.exp(x), (1, 2, 2, 1), mode="reflect")
        y = torch.nn.functional.pad(y, (2, 0, 1, 3), mode="replicate")
        return torch.cat([y, torch.tanh(y)], dim=1)[..., ::2, 1::3]


class PaddingOnly(torch.nn.Module):
    """Slices that keep nothing but a pad's border (seed 21360 of tools/random_graphs.py, Blackhole): zeros,
    and a non-zero pad value, without one source element; the slice of a pad is one gather."""

    def forward(self, x):  # [1, 6, 10]
        border = torch.nn.functional.pad(torch.tanh(x), (2, 0), value=0.0)[..., 0:2]
        filled = torch.nn.functional.pad(torch.exp(x), (1, 0), value=3.0)[..., 0:1]
        return torch.cat([border, filled, x[..., :3]], dim=-1)


class PaddingOnlyOutput(torch.nn.Module):
    """A graph output that is nothing but padding, beside a computed one."""

    def forward(self, x):  # [1, 6, 10]
        return torch.tanh(x), torch.nn.functional.pad(x, (1, 0), value=0.0)[:, :, 0:1]


def _run_all(model, x):
    """Every output of ``model`` run on a golden TTDevice at Float32 / HiFi4."""
    pybuda.pybuda_reset()
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     default_math_fidelity=pybuda.MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden)
    tt.place_module(pybuda.PyTorchModule("move", model))
    tt.push_to_inputs(x.clone())
    try:
        out = pybuda.run_inference(_sequential=True).get(timeout=120)
    finally:
        pybuda.shutdown()
        pybuda.pybuda_reset()
    return [o.value() if hasattr(o, "value") else o for o in out]


def _run(model, x):
    return _run_all(model, x)[0]


def _assert_close(got, want):
    assert tuple(got.shape) == tuple(want.shape)
    assert calculate_pcc(got, want) >= PCC_MIN
    assert torch.allclose(got, want, atol=ATOL_REL * float(want.abs().max()), rtol=RTOL)


@pytest.mark.parametrize("model,shape", [(HeadSplit(), (1, 20, 72)), (WindowPartition(), (1, 12, 10, 6)),
                                         (Pads(), (1, 5, 9, 11)), (PaddingOnly(), (1, 6, 10))])
def test_torch_moves_run_on_the_device_without_fallback(model, shape):
    from pybuda.frontend.torch import capture

    torch.manual_seed(0)
    model = model.eval()
    x = torch.randn(*shape)
    assert not capture(model, (x,), for_device=True).report.has_fallback
    with torch.no_grad():
        want = model(x)
    _assert_close(_run(model, x), want)


def test_an_output_of_padding_only_is_zeros_on_the_device():
    x = torch.randn(1, 6, 10)
    got = _run_all(PaddingOnlyOutput(), x)
    _assert_close(got[0], torch.tanh(x))
    assert torch.equal(got[1], torch.zeros(1, 6, 1))


class Flatten(torch.nn.Module):
    """Merges 12 rows of 7 into rows of 84: 12 column parts, more in every other orientation."""

    def forward(self, x):  # [1, 33, 12, 7]
        return torch.exp(x).flatten(2) * 2.0


def test_a_move_without_a_plan_is_refused_by_the_check_and_by_lowering(monkeypatch):
    monkeypatch.setattr(gather_plan, "MAX_PARTS", 4)
    reason = gather_plan.unsupported_movement([(1, 33, 12, 7)], "reshape", {"shape": (1, 33, 84)})
    assert reason is not None and "cannot express" in reason
    with pytest.raises(CompileError) as info:
        lower(_graph((1, 33, 12, 7), [("reshape", {"shape": (1, 33, 84)})]))
    assert info.value.op == "m0" and "cannot express" in str(info.value)


def test_a_move_without_a_plan_falls_back_to_the_cpu_with_a_reason(monkeypatch):
    from pybuda.frontend.torch import capture

    model = Flatten().eval()
    x = torch.randn(1, 33, 12, 7)
    with torch.no_grad():
        want = model(x)
    assert not capture(model, (x,), for_device=True).report.has_fallback  # 12 parts: on the device
    _assert_close(_run(model, x), want)
    monkeypatch.setattr(gather_plan, "MAX_PARTS", 4)
    report = capture(model, (x,), for_device=True).report
    assert report.has_fallback
    assert any("cannot express" in f.reason for f in report.fallback_ops), str(report)
    _assert_close(_run(model, x), want)


def _single_input_map(shape, op, attrs):
    """(canonical source, element map in canonical output form) of one move of ``shape``."""
    emap = gather_plan.index_map([shape], ((op, _hashable(attrs)),))
    return canonical_zrc(shape), emap.reshape(canonical_zrc(tuple(emap.shape)))


@pytest.mark.parametrize("max_parts", [1, 2, gather_plan.MAX_PARTS])
def test_the_capability_check_finds_a_plan_exactly_when_the_planners_do(max_parts, monkeypatch):
    """The check only asks whether a plan exists (stopping at the first): it answers as plan_move and
    plan_gather do, including where the part limit leaves no plan."""
    monkeypatch.setattr(gather_plan, "MAX_PARTS", max_parts)
    rng = random.Random(77 + max_parts)
    for _ in range(30):
        shape = (1,) + tuple(_dim(rng) for _ in range(rng.choice([2, 3])))
        move = _random_move(rng, shape)
        if move is None:
            continue
        src, emap = _single_input_map(shape, *move)
        assert gather_plan.move_possible(src, emap) == (gather_plan.plan_move(src, emap) is not None), move
        e = emap.numpy()
        assert gather_plan.gather_possible(src, e) == (gather_plan.plan_gather(src, e) is not None)


@pytest.mark.parametrize("shape", [(1024, 1024), (7, 40), (1, 5, 7, 9), (2, 3, 33, 64), (1, 384, 16, 64)])
def test_plain_tm_moves_are_accepted_without_an_element_map(shape):
    """A transpose of the last two dims is the transpose TM and a reshape keeping the canonical (z, r, c)
    form is no move at all, whatever the shape: the check accepts them without building the element map,
    and the element map agrees (the TM sequence lowering finds is exactly that)."""
    rank = len(shape)
    moves = [("transpose", {"dim0": rank - 2, "dim1": rank - 1}), ("transpose", {"dim0": -1, "dim1": -2}),
             ("reshape", {"shape": (1,) + tuple(shape)}), ("reshape", {"shape": canonical_zrc(shape)})]
    for op, attrs in moves:
        assert gather_plan._plain_tm_move([shape], op, attrs), (op, attrs)
        assert gather_plan.unsupported_movement([shape], op, attrs) is None
        src, emap = _single_input_map(shape, op, attrs)
        assert movement._match_mapping(src, emap) == ([] if op == "reshape" else [movement.Transpose()])
    # Other moves take the full check.
    others = [("transpose", {"dim0": rank - 2, "dim1": rank - 2}), ("transpose", {"dim0": rank, "dim1": rank - 1}),
              ("reshape", {"shape": tuple(shape[:-2]) + (shape[-2] * shape[-1],)}),
              ("reshape", {"shape": (-1,) + tuple(shape[-2:])})]
    if rank >= 3:
        others.append(("transpose", {"dim0": 0, "dim1": rank - 1}))
    assert not any(gather_plan._plain_tm_move([shape], op, attrs) for op, attrs in others)
    assert not gather_plan._plain_tm_move([shape, shape], "transpose", {"dim0": -1, "dim1": -2})


def test_two_unkeyed_row_pickers_of_one_name_get_their_own_constants():
    # A picker without a sharing key used to key its constants by id(picker): the first one, freed once its op
    # was emitted, left its address to the next, which then read the first one's index (a wrong number, no
    # error; seen as an out-of-range index in the backward of a CNN under CI).
    import numpy as np

    from pybuda.ir.graph import Graph
    from pybuda.ir.lowered import BudaQueue, TileShape
    from pybuda.passes.lower.common import DVal
    from pybuda.passes.lower.to_tiles import _Lowering
    from pass_helpers import make_ctx

    lowering = _Lowering(Graph("g"), make_ctx())
    lowering.bg.add_queue(BudaQueue("x", "input", TileShape(1, 1, 2, 1)))
    x = DVal("x", (), 1, 64, 32)
    for rows in ((1, 0), (0, 1)):  # a swap, then the identity
        lowering._row_pick(x, "pick", np.array([0, 1]), np.array(rows), np.ones(2, np.float32), out_r=64, k_r=64)
    first, second = lowering.bg.ops.values()
    assert first.inputs[0] != second.inputs[0] and first.inputs[2] != second.inputs[2]
    # a swap of rows 0 and 1, then the identity: the same index (one tile pair) over different picker tiles
    assert not torch.equal(lowering.bg.tensors[first.inputs[0]], lowering.bg.tensors[second.inputs[0]])


def test_the_movement_check_of_a_long_flatten_builds_no_map_per_source_row():
    """Flattening ``[1, R, C, 2]`` to one row has one candidate column part per source row; the capability check
    built every part's column map (one int per output column) before counting them against MAX_PARTS: R x 2R
    entries, 53 GB for a [1, 42, 1376, 2] activation, and the capture was killed. It stops at MAX_PARTS now."""
    import tracemalloc

    gather_plan._MOVE_CACHE.clear()
    tracemalloc.start()
    try:
        reason = gather_plan.unsupported_movement([(1, 64, 64, 2)], "reshape", {"shape": (1, 8192)})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reason is None  # still lowered (by another plan)
    assert peak < 32 * 2**20, f"{peak / 2**20:.0f} MiB"  # was 258 MiB: 4096 maps of 8192 entries
