"""Integer-valued results (pybuda.ops.integer): every op's ``int_range`` rule against its own reference, on
integer operands, and the graph analysis that decides it for a node from its producers."""

from __future__ import annotations

import pytest
import torch
from test_op_registry import _cases

from pybuda.ir.graph import Graph
from pybuda.ops import integer, registry

RULED = [op.name for op in registry.all_ops() if op.int_range is not None]

#: Ops whose results must be known integers (the issue's list): a rule beside each definition.
PRESERVING = ["add", "subtract", "multiply", "maximum", "minimum", "abs", "where", "equal", "not_equal", "greater",
              "less", "greater_equal", "less_equal", "logical_and", "logical_not", "reduce_sum", "reduce_max",
              "argmax", "cast", "constant", "heaviside", "clip", "relu", "nop", "identity", "reshape", "transpose",
              "concatenate", "pad", "index", "select", "broadcast", "repeat", "squeeze", "unsqueeze", "stack",
              "adv_index", "embedding", "matmul", "cumsum", "square", "pow"]
#: Ops whose results are not integers in general: no rule.
NOT_INTEGER = ["exp", "log", "divide", "reduce_avg", "sqrt", "reciprocal", "sigmoid", "softmax", "gelu", "power"]


def test_preserving_ops_have_rules_and_float_math_has_none():
    for name in PRESERVING:
        assert registry.get(name).int_range is not None, name
    for name in NOT_INTEGER:
        assert registry.get(name).int_range is None, name


def _integer_operands(inputs, gen):
    """The case's operands with every float tensor replaced by small integers (same shape and dtype)."""
    out = []
    for t in inputs:
        if t.dtype.is_floating_point:
            out.append(torch.randint(-6, 7, t.shape, generator=gen).to(t.dtype))
        else:
            out.append(t)
    return out


def _range_of(t: torch.Tensor):
    f = t.to(torch.float64)
    return (float(f.min()), float(f.max())) if t.numel() else None


class _Extra:
    def __init__(self, inputs, attrs):
        self.inputs, self.attrs = inputs, attrs


#: Cases of our own where the registry's cases have no integer attributes.
EXTRA = {"clip": [_Extra([torch.zeros(4, 8)], {"min": -2.0, "max": 3.0})],
         "pow": [_Extra([torch.zeros(4, 8)], {"exponent": 3.0})],
         "constant": [_Extra([], {"constant": 4.0, "shape": (2, 3)})]}


@pytest.mark.parametrize("name", RULED)
def test_rule_bounds_the_reference_on_integer_operands(name):
    """Wherever the rule says "integers in [lo, hi]", the op's reference gives integers in [lo, hi]."""
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for case in list(_cases(name)) + EXTRA.get(name, []):
        try:
            inputs = _integer_operands(case.inputs, gen)
            shape, dtype, attrs = registry.infer(name, [tuple(t.shape) for t in inputs], [t.dtype for t in inputs],
                                                 case.attrs)
            out = registry.evaluate(name, inputs, attrs)
        except Exception:  # noqa: BLE001 - a case whose operands must be floats (e.g. a positive table): skip
            continue
        if not out.numel() or any(not t.numel() for t in inputs):
            continue
        r = registry.get(name).int_range([_range_of(t) for t in inputs], [tuple(t.shape) for t in inputs], attrs)
        if r is None:
            continue
        f = out.to(torch.float64)
        assert bool((f == f.round()).all()), f"{name}: rule says integers, reference gives {out}"
        assert r[0] <= float(f.min()) and float(f.max()) <= r[1], f"{name}: {_range_of(out)} outside {r}"
        checked += 1
    assert checked, f"no case of '{name}' exercised its rule"


def test_constant_rule_and_comparisons():
    assert registry.get("constant").int_range([], [], {"constant": 3.0}) == (3.0, 3.0)
    assert registry.get("constant").int_range([], [], {"constant": 0.5}) is None
    assert registry.get("greater").int_range([None, None], [(4,), (4,)], {}) == (0.0, 1.0)
    assert registry.get("argmax").int_range([None], [(3, 700)], {"dim": -1}) == (0.0, 699.0)
    assert registry.get("argmax").int_range([None], [(3, 700)], {"dim": None}) == (0.0, 2099.0)


def test_multiplier_refuses_integers_it_would_round():
    big, small = (0.0, 5000.0), (0.0, 3.0)
    mul = registry.get("multiply").int_range
    assert mul([small, small], [(4,), (4,)], {}) == (0.0, 9.0)
    assert mul([big, small], [(4,), (4,)], {}) is None  # beyond 2**10 the source registers round
    assert registry.get("reduce_sum").int_range([big], [(4, 8)], {"dim": 1}) is None
    assert registry.get("reduce_sum").int_range([small], [(4, 8)], {"dim": 1}) == (0.0, 24.0)
    assert registry.get("add").int_range([big, big], [(4,), (4,)], {}) == (0.0, 10000.0)  # adds are exact
    reshape = registry.get("reshape").int_range
    with integer.exact_moves(False):  # TT-Buda's pickers: a move may be a matmul that rounds beyond 2**10
        assert reshape([big], [(4, 8)], {"shape": (32,)}) is None
    with integer.exact_moves(True):  # exact_data_movement copies Float32 data whole: exact to 2**24
        assert reshape([big], [(4, 8)], {"shape": (32,)}) == big
        assert reshape([(0.0, 2.0 ** 25)], [(4, 8)], {"shape": (32,)}) is None
        with integer.target_arch("grayskull"):  # no exact pickers there: the multiplier's bound
            assert reshape([big], [(4, 8)], {"shape": (32,)}) is None
            assert reshape([(0.0, 1000.0)], [(4, 8)], {"shape": (32,)}) == (0.0, 1000.0)


def _graph():
    g = Graph("g")
    g.add_input("x", (2, 8))  # float
    g.add_input("ids", (2, 8), torch.int64)
    g.add_constant("three", torch.tensor([3.0]))
    g.add_constant("half", torch.tensor([0.5]))
    g.add_op("am", "argmax", ["x"], {"dim": 1})
    g.add_op("am3", "add", ["am", "three"])
    g.add_op("gt", "greater", ["x", "half"])
    g.add_op("count", "reduce_sum", ["gt"], {"dim": 1})
    g.add_op("xh", "multiply", ["x", "half"])
    g.add_op("trunc", "cast", ["xh"], {"dtype": "int64"})
    g.add_op("ids2", "add", ["ids", "ids"])
    g.add_op("idsx", "multiply", ["ids", "am"])
    g.add_op("halfam", "add", ["am", "half"])
    return g


def test_graph_analysis_follows_producers():
    g = _graph()
    memo = {}
    assert integer.integer_range(g, "am", memo) == (0.0, 7.0)
    assert integer.integer_range(g, "am3", memo) == (3.0, 10.0)
    assert integer.integer_range(g, "count", memo) == (0.0, 8.0)
    assert integer.integer_range(g, "x", memo) is None
    assert not integer.is_integer_valued(g, "xh", memo)
    assert not integer.is_integer_valued(g, "halfam", memo)  # 0.5 is not an integer
    # a cast to an integer dtype truncates: integers, as large as a push may bring (2**24)
    assert integer.integer_range(g, "trunc", memo) == (-2.0 ** 24, 2.0 ** 24)
    assert integer.integer_range(g, "ids", memo) == (-2.0 ** 24, 2.0 ** 24)
    assert integer.integer_range(g, "ids2", memo) == (-2.0 ** 25, 2.0 ** 25)
    assert integer.integer_range(g, "idsx", memo) is None  # unknown ids on the multiplier


def test_a_bound_with_single_values_besides_narrows_as_every_reader_needs():
    tags = {}
    integer.narrow_value_range(tags, 0, 9, also=(-100,))  # a label with ignore_index -100
    assert tags == {"value_range": (0, 9), "value_also": (-100,)}
    integer.narrow_value_range(tags, -100, 20)  # a reader that allows the whole span keeps both
    assert tags == {"value_range": (0, 9), "value_also": (-100,)}
    integer.narrow_value_range(tags, 0, 5, also=(7,))  # 7 was allowed already (within 0..9): it stays allowed
    assert tags == {"value_range": (0, 5), "value_also": (7,)}
    integer.narrow_value_range(tags, 0, 5)  # a reader that refuses anything else drops the single values
    assert tags == {"value_range": (0, 5)}
    g = Graph("g")
    g.add_input("label", (4,), torch.int64)
    integer.narrow_value_range(g["label"].tags, 0, 9, also=(-100,))
    assert integer.integer_range(g, "label") == (-100.0, 9.0)  # other readers see every value the host lets in


def test_exact_integer_bounds_per_format():
    from pybuda.dtypes import DataFormat as DF
    from pybuda.golden import formats

    assert formats.exact_integer_bound(DF.Float32) == 2 ** 24
    assert formats.exact_integer_bound(DF.Float16_b) == 256
    assert formats.exact_integer_bound(DF.Float16) == 2048
    assert formats.exact_integer_bound(DF.Bfp8_b) == 127
    for df in (DF.Float32, DF.Float16_b, DF.Float16, DF.Bfp8_b, DF.Bfp4_b):
        bound = formats.exact_integer_bound(df)
        ints = torch.arange(-bound, bound + 1, dtype=torch.float32)
        ints = ints[: (ints.numel() // 1024) * 1024] if ints.numel() > 4096 else ints
        # every integer within the bound survives rounding into the format, one block of 16 at a time
        pad = (-ints.numel()) % 1024
        tile = torch.cat([ints, torch.zeros(pad)]).reshape(-1, 32, 32)
        assert torch.equal(formats.quantize(tile, df).reshape(-1)[: ints.numel()], ints), df
        # one past the bound is not: bound + 1 itself (floats), or 1 in a block holding bound + 1 (blocks)
        above = torch.tensor([float(bound + 1), 1.0] * 512).reshape(32, 32)
        if df != DF.Float32:
            assert not torch.equal(formats.quantize(above, df), above), df


def test_a_comparison_decided_by_the_ranges_selects_one_side_of_a_where():
    """JAX wraps negative indices (``where(i < 0, i + n, i)``): of an index proven non-negative that is the index
    itself, so its range stays [0, n - 1] (a gather at it is then proven in bounds)."""
    g = Graph("g")
    g.add_input("x", (2, 8))
    g.add_constant("zero", torch.tensor([0.0]))
    g.add_constant("eight", torch.tensor([8.0]))
    g.add_op("am", "argmax", ["x"], {"dim": 1})  # [0, 7]
    g.add_op("neg", "less", ["am", "zero"])
    g.add_op("negb", "cast", ["neg"], {"dtype": "bool"})
    g.add_op("wrapped", "add", ["am", "eight"])  # [8, 15]
    g.add_op("index", "where", ["negb", "wrapped", "am"])
    g.add_op("big", "greater_equal", ["wrapped", "eight"])  # always true
    g.add_op("open", "less", ["am", "wrapped"])  # always true ([0, 7] < [8, 15])
    g.add_constant("three", torch.tensor([3.0]))
    g.add_op("undecided", "greater", ["am", "three"])
    memo = {}
    assert integer.integer_range(g, "neg", memo) == (0.0, 0.0)
    assert integer.integer_range(g, "negb", memo) == (0.0, 0.0)
    assert integer.integer_range(g, "index", memo) == (0.0, 7.0)  # not the hull [0, 15]
    assert integer.integer_range(g, "big", memo) == (1.0, 1.0)
    assert integer.integer_range(g, "open", memo) == (1.0, 1.0)
    assert integer.integer_range(g, "undecided", memo) == (0.0, 1.0)
    assert registry.get("equal").int_range([(2.0, 2.0), (2.0, 2.0)], [(4,), (4,)], {}) == (1.0, 1.0)
    assert registry.get("not_equal").int_range([(0.0, 1.0), (5.0, 9.0)], [(4,), (4,)], {}) == (1.0, 1.0)
    assert registry.get("less").int_range([None, (0.0, 0.0)], [(4,), (4,)], {}) == (0.0, 1.0)  # float operand
