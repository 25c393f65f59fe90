"""The one TM module (pybuda.netlist.tms): shape vs value agreement for every TM kind, the YAML form both
ways, the pad-order rule (pads after the other TMs) in every user, and the errors."""

import random

import pytest
import torch
import yaml

from pybuda.errors import NetlistError
from pybuda.netlist import tms as T
from pybuda.netlist.parse import parse_tms
from pybuda.netlist.tms import (
    Broadcast, HSlice, HStack, InputPad, InputUnpad, Pad, TileBroadcast, TileShape3, TM, TMError, Transpose,
    VSlice, VStack,
)

TILE = 32
KINDS = ["broadcast_r", "broadcast_c", "broadcast_z", "hslice", "vslice", "hstack", "vstack", "transpose",
         "tile_broadcast", "pad"]


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _random_tm(kind, shape, rng, valid=True):
    """A TM of ``kind`` that applies to ``shape`` (or, with valid=False, one whose factor does not divide)."""
    t, rt, ct = shape
    if kind.startswith("broadcast"):
        return Broadcast(kind[-1], rng.randint(1, 4))
    if kind in ("hslice", "vslice", "hstack", "vstack"):
        n = {"hslice": ct, "vslice": rt, "hstack": t, "vstack": t}[kind]
        cls = {"hslice": HSlice, "vslice": VSlice, "hstack": HStack, "vstack": VStack}[kind]
        if valid:
            return cls(rng.choice(_divisors(n)))
        return cls(rng.choice([f for f in range(2, n + 3) if n % f]))
    if kind == "transpose":
        return Transpose()
    if kind == "tile_broadcast":
        return TileBroadcast(rng.choice("rc"))
    return Pad(rng.randint(0, 2), rng.randint(0, 2), rng.choice([0.0, 1.5, -2.0]))


def _tensor(lead, shape, seed=0):
    t, rt, ct = shape
    return torch.randn(*lead, t, rt * TILE, ct * TILE, generator=torch.Generator().manual_seed(seed))


def _tiles(x):
    return TileShape3(x.shape[-3], x.shape[-2] // TILE, x.shape[-1] // TILE)


# --- shape vs value ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_value_shape_agrees_with_shape_function(kind):
    rng = random.Random(kind)
    for case in range(25):
        shape = TileShape3(1 if kind == "broadcast_z" else rng.randint(1, 6), rng.randint(1, 6), rng.randint(1, 6))
        lead = rng.choice([(), (1,), (2,), (2, 3)])
        tm = _random_tm(kind, shape, rng)
        x = _tensor(lead, shape, case)
        out = T.apply_tm(x, tm)
        assert tuple(out.shape[:-3]) == lead
        assert _tiles(out) == T.tm_shape(shape, tm) == tm.apply(shape), (tm, shape)


@pytest.mark.parametrize("kind", ["hslice", "vslice", "hstack", "vstack", "broadcast_z"])
def test_value_and_shape_reject_the_same_tms(kind):
    rng = random.Random(kind)
    for case in range(10):
        shape = TileShape3(rng.randint(2, 6), rng.randint(2, 6), rng.randint(2, 6))
        tm = Broadcast("z", 2) if kind == "broadcast_z" else _random_tm(kind, shape, rng, valid=False)
        with pytest.raises(TMError):
            T.tm_shape(shape, tm)
        with pytest.raises(TMError):
            T.apply_tm(_tensor((), shape, case), tm)


def test_random_tm_lists_with_unpad_and_pad_agree():
    rng = random.Random(7)
    kinds = [k for k in KINDS if k != "broadcast_z"]
    for case in range(60):
        shape = TileShape3(rng.randint(1, 4), rng.randint(2, 5), rng.randint(2, 5))
        unpad = InputUnpad(rt=rng.randint(0, 1), ct=rng.randint(0, 1)) if rng.random() < 0.5 else None
        s = T.tms_shape(shape, (), unpad)
        tms = []
        for _ in range(rng.randint(0, 4)):
            tm = _random_tm(rng.choice(kinds), s, rng)
            if not isinstance(tm, Pad):  # pads take effect at the end: the shape they see is the final one
                s = tm.apply(s)
            tms.append(tm)
        pad = InputPad(rt=rng.randint(0, 2), ct=rng.randint(0, 2), pad_value=3.0) if rng.random() < 0.5 else None
        lead = rng.choice([(), (2,)])
        out = T.apply_tms(_tensor(lead, shape, case), tms, unpad, pad)
        assert _tiles(out) == T.tms_shape(shape, tms, unpad, pad), (shape, tms, unpad, pad)
        # YAML forms give the same values as the objects
        assert torch.equal(out, T.apply_tms(_tensor(lead, shape, case), T.tms_to_obj(tms), unpad, pad))


def test_leading_dims_are_independent():
    rng = random.Random(3)
    x = _tensor((3, 2), (4, 2, 6), 1)
    tms = [HSlice(2), Transpose(), VStack(2), TileBroadcast("c"), Broadcast("r", 2), Pad(1, 0, 0.5)]
    out = T.apply_tms(x, tms)
    for i in range(3):
        for j in range(2):
            assert torch.equal(out[i, j], T.apply_tms(x[i, j], tms))
    assert rng  # seeded for reproducibility only


def test_values_follow_the_spec():
    x = _tensor((), (2, 2, 3), 4)
    h = T.apply_tm(x, HSlice(3))  # output slice zi*f+s = column block s of input slice zi
    assert torch.equal(h, torch.stack([blk for z in range(2) for blk in x[z].chunk(3, dim=-1)]))
    assert torch.equal(T.apply_tm(h, HStack(3)), x)
    v = T.apply_tm(x, VSlice(2))
    assert torch.equal(v, torch.stack([blk for z in range(2) for blk in x[z].chunk(2, dim=-2)]))
    assert torch.equal(T.apply_tm(v, VStack(2)), x)
    assert torch.equal(T.apply_tm(x, Transpose()), x.transpose(-1, -2))
    assert torch.equal(T.apply_tm(x, Broadcast("r", 2)), torch.cat([x, x], dim=-2))
    assert torch.equal(T.apply_tm(x, Broadcast("c", 2)), torch.cat([x, x], dim=-1))
    tb = T.apply_tm(x, TileBroadcast("r"))
    assert torch.equal(tb[:, 5, 40], x[:, 0, 40]) and torch.equal(tb[:, 37, 40], x[:, 32, 40])
    p = T.apply_tm(x, Pad(1, 2, 0.5))
    assert torch.equal(p[:, :64, :96], x) and bool((p[:, 64:] == 0.5).all()) and bool((p[:, :, 96:] == 0.5).all())


def test_z_broadcast_is_a_stride_0_view():
    """Golden's GEMM and fidelity masks run a z-broadcast operand once; they recognise it by stride 0."""
    x = _tensor((2,), (1, 1, 2), 0)
    z = T.apply_tm(x, Broadcast("z", 4))
    assert z.shape == (2, 4, 32, 64) and z.stride(1) == 0
    assert all(torch.equal(z[:, i], x[:, 0]) for i in range(4))


# --- YAML form ---------------------------------------------------------------------------------------------

ALL = [Broadcast("r", 2), Broadcast("c", 3), Broadcast("z", 4), HSlice(2), VSlice(3), HStack(4), VStack(5),
       Transpose(), TileBroadcast("r"), TileBroadcast("c"), Pad(1, 2, 0.5), Pad(0, 0, 0.0)]


@pytest.mark.parametrize("tm", ALL, ids=repr)
def test_yaml_round_trip(tm):
    obj = tm.to_obj()
    assert T.to_obj(tm) == obj
    assert T.as_tm(obj) == tm
    assert T.as_tm(yaml.safe_load(yaml.safe_dump([obj]))[0]) == tm
    assert T.as_tms([obj]) == (tm,)
    assert T.as_tm(tm) is tm


def test_yaml_list_round_trip_and_multi_key_items():
    text = yaml.safe_dump(T.tms_to_obj(ALL))
    assert T.as_tms(yaml.safe_load(text)) == tuple(ALL)
    assert parse_tms(yaml.safe_load(text), "x") == tuple(ALL)
    # one item may hold several TMs: broadcast over two dims, or two keys
    assert T.as_tms([{"broadcast": {"r": 2, "c": 3}}]) == (Broadcast("r", 2), Broadcast("c", 3))
    assert T.as_tms([{"hslice": 2, "vstack": 3}]) == (HSlice(2), VStack(3))
    assert T.as_tms(()) == ()
    assert T.tm_names([{"hstack": 9}, "transpose", Pad(1, 0)]) == ["hstack", "transpose", "pad"]
    assert not T.has_reshaping_tms([{"tile_broadcast": "r"}]) and T.has_reshaping_tms(["transpose"])
    hash(T.as_tms([{"hstack": 9}, {"broadcast": {"z": 2}}]))  # hashable, e.g. as balancer cache keys


def test_numpy_integers_are_integers():
    np = pytest.importorskip("numpy")
    assert T.as_tm({"hslice": np.int64(2)}) == HSlice(2)


# --- pad order ---------------------------------------------------------------------------------------------

def test_pads_apply_after_the_other_tms_everywhere():
    tms = [{"pad": [1, 0, 0.0]}, "transpose", {"hslice": 2}]
    assert T.effective_order(tms) == (Transpose(), HSlice(2), Pad(1, 0, 0.0))
    # shape: (1, 2, 4) -> transpose (1, 4, 2) -> hslice (2, 4, 1) -> pad (2, 5, 1)
    assert T.tms_shape((1, 2, 4), tms) == TileShape3(2, 5, 1)
    x = _tensor((), (1, 2, 4), 0)
    out = T.apply_tms(x, tms)
    expected = T.apply_tm(T.apply_tm(T.apply_tm(x, Transpose()), HSlice(2)), Pad(1, 0, 0.0))
    assert torch.equal(out, expected)
    # the netlist model's shape function and the balancer's stack check follow the same rule
    from pybuda.netlist.model import apply_tms as model_apply_tms
    assert model_apply_tms(TileShape3(1, 2, 4), T.as_tms(tms)) == TileShape3(2, 5, 1)


def test_input_transform_order_unpad_tms_pads_input_pad():
    x = _tensor((2,), (1, 3, 2), 0)
    unpad, pad = InputUnpad(rt=1, ct=0), InputPad(rt=0, ct=1, pad_value=2.0)
    out = T.apply_tms(x, [Pad(1, 0, 1.0), Transpose()], unpad, pad)
    step = x[..., :64, :].transpose(-1, -2)                      # unpad, then transpose
    step = torch.nn.functional.pad(step, (0, 0, 0, 32), value=1.0)  # then the pad TM
    step = torch.nn.functional.pad(step, (0, 32, 0, 0), value=2.0)  # then input_N_pad
    assert torch.equal(out, step)
    assert T.tms_shape((1, 3, 2), [Pad(1, 0, 1.0), Transpose()], unpad, pad) == _tiles(out) == (1, 3, 3)


def test_balancer_stack_check_sees_the_unpadded_width():
    """A pad written before an hstack still applies after it: the stacked slice width is the unpadded one."""
    from pybuda.balancer.edges import stacks_ok
    from pybuda.balancer.types import OpModel

    model = OpModel(grid_shape=(1, 1), t=1, mblock=(1, 1), ublock=(1, 2))  # a nop's hstack block: 2 tiles
    # slices 2 tiles wide fit the block of 2; had the pad (1 column tile) applied first they would be 3
    assert stacks_ok((2, 1, 2), [{"pad": [0, 1, 0.0]}, {"hstack": 2}], "nop", 0, model)


# --- errors ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("items, path, message", [
    ("transpose", "", "expected a list, got a string"),
    (["hslice"], "[0]", "only transpose may be written as a bare name"),
    ([3], "[0]", "expected a map, got an integer"),
    ([{}], "[0]", "empty TM"),
    ([{"transpose": None}], "[0].transpose", "bare list item"),
    ([{"select": [0, 1]}], "[0].select", "unsupported TM"),
    (["transpose", {"broadcast": {"q": 2}}], "[1].broadcast.q", "expected one of ['r', 'c', 'z']"),
    ([{"broadcast": {}}], "[0].broadcast", "broadcast needs"),
    ([{"broadcast": 2}], "[0].broadcast", "expected a map"),
    ([{"hslice": 0}], "[0].hslice", "must be >= 1, got 0"),
    ([{"vstack": True}], "[0].vstack", "expected an integer, got a bool"),
    ([{"hstack": "2"}], "[0].hstack", "expected an integer, got a string"),
    ([{"tile_broadcast": "z"}], "[0].tile_broadcast", "expected one of ['r', 'c']"),
    ([{"pad": [1, 2]}], "[0].pad", "pad needs [rt, ct, value], got 2 values"),
    ([{"pad": 1}], "[0].pad", "expected a list"),
    ([{"pad": [-1, 0, 0.0]}], "[0].pad[0]", "must be >= 0"),
    ([{"pad": [0, 0, "x"]}], "[0].pad[2]", "expected a number, got a string"),
])
def test_parse_errors_name_the_key_path(items, path, message):
    with pytest.raises(TMError) as e:
        T.as_tms(items)
    assert e.value.path == path and message in e.value.reason
    # the netlist parser reports the same error under the YAML key path of the list
    with pytest.raises(NetlistError) as n:
        parse_tms(items, "graphs.g.op.input_0_tms")
    assert n.value.path == "graphs.g.op.input_0_tms" + path and message in str(n.value)


def test_shape_errors():
    with pytest.raises(TMError, match="broadcast z needs input t == 1"):
        T.tms_shape((2, 1, 1), [{"broadcast": {"z": 2}}])
    with pytest.raises(TMError, match="hslice 3"):
        T.tms_shape((1, 1, 4), [{"hslice": 3}])
    with pytest.raises(TMError, match="unpad"):
        T.tms_shape((1, 2, 2), (), InputUnpad(rt=2, ct=0))
    with pytest.raises(TMError, match="dim must be"):
        Broadcast("w", 2).apply(TileShape3(1, 1, 1))
    with pytest.raises(TMError, match="expected one TM"):
        T.as_tm({"broadcast": {"r": 2, "c": 2}})
    with pytest.raises(TMError) as e:
        T.as_tm({"hslice": 0})
    assert e.value.path == "hslice"
    assert T.as_tms(None) == () and T.tm_names(None) == []
    assert issubclass(TMError, ValueError)


def test_value_errors():
    with pytest.raises(TMError, match="whole 32x32 tiles"):
        T.apply_tm(torch.zeros(1, 30, 64), Transpose())
    with pytest.raises(TMError, match=r"\[\.\.\., z, R, C\]"):
        T.apply_tm(torch.zeros(32, 32), Transpose())
    with pytest.raises(TMError):
        T.apply_tms(torch.zeros(3, 32, 32), [{"vstack": 2}])


def test_tm_objects_are_frozen_and_equal_by_value():
    assert HSlice(2) == T.as_tm({"hslice": 2}) and hash(HSlice(2)) == hash(HSlice(2))
    assert isinstance(Pad(1, 1), TM) and Pad(1, 1).value == 0.0
    with pytest.raises(Exception):
        HSlice(2).factor = 3
