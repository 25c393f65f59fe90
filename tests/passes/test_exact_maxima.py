"""A reduce max returns one of its operand's elements bit for bit, on every chip and format
(passes/lowered/data_formats.py, "exact maxima"): argmax, argmin and ``x == x.max(d)`` compare the operand with
its maximum for equality, and a rounded maximum matched no element (argmax returned the index one past the end,
with no error). A comparison's difference keeps its sign and stays nonzero (``SIGN_EXACT``)."""

import pytest
import torch

from pybuda.compile import compile_graph
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat as DF
from pybuda.golden.executor import create_executor
from pybuda.golden.formats import quantize
from pybuda.ir.graph import HOLDS_OPERAND, SIGN_EXACT, Graph


def _graph(op: str, shape, dim: int) -> Graph:
    g = Graph("g")
    g.add_input("x", shape)
    g.add_op("y", op, ["x"], {"dim": dim})
    g.add_output("out", "y")
    return g


def _run(graph: Graph, device: str, df, *inputs):
    results = compile_graph(graph, device, CompilerConfig(default_df_override=df))
    return results, create_executor(results).run(list(inputs))


def _stored(results, name: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` as the host stores it in input queue ``name``."""
    return quantize(x, results.lowered_graph.queues[name].df)


@pytest.mark.parametrize("df", [DF.Float32, DF.Float16], ids=["float32", "float16"])
def test_grayskull_argmax_over_padded_columns_is_an_index_of_the_data(df):
    # Grayskull's Dest holds Float16_b: the padding mask (an add) rounded Float32 data, and with Float16 data
    # accumulated in Float16_b it did too; the rounded maximum equalled no element, and argmax returned 40.
    x = torch.randn(1, 8, 40, generator=torch.Generator().manual_seed(0))
    results, (got,) = _run(_graph("argmax", (1, 8, 40), -1), "gs_e150", df, x)
    bg = results.lowered_graph
    mask = bg.ops["y.max.mask"]
    assert mask.tags[HOLDS_OPERAND] == 0
    if df == DF.Float32:  # stored as Float16_b where it is made: every reader sees the values the max is of
        assert bg.queues["x"].df == DF.Float16_b
    else:
        assert bg.queues["x"].df == DF.Float16 and mask.acc_df == DF.Float16
    assert torch.equal(got.long().flatten(), _stored(results, "x", x).argmax(-1).flatten())


@pytest.mark.parametrize("dim", [-1, -2], ids=["columns", "rows"])
@pytest.mark.parametrize("device", ["gs_e150", "wh_n150"])
def test_a_block_format_maximum_over_padding_is_exact(device, dim):
    # The mask wrote NEG_LARGE into the padding of a Bfp8_b block: the block took its exponent, and the valid
    # values beside it became zero (the row maximum 1.5435 at column 36 came back as the 1.46875 of another).
    x = torch.randn(1, 40, 40, generator=torch.Generator().manual_seed(0))
    results, (got,) = _run(_graph("reduce_max", (1, 40, 40), dim), device, DF.Bfp8_b, x)
    mask = results.lowered_graph.ops["y.mask"]
    assert not mask.out_df.is_bfp
    assert torch.equal(got, _stored(results, "x", x).amax(dim, keepdim=True))


@pytest.mark.parametrize("device", ["gs_e150", "wh_n150", "bh_p150"])
def test_a_maximum_over_an_outer_leading_dim_stacks_slices_by_tms(device):
    # A row picker (a sparse matmul) moved dim 0 next to the rows: it read Float32 data through 19-bit source
    # registers, and argmax over dim 0 matched no element. Stacking whole tiles copies every bit.
    x = torch.randn(3, 4, 8, 40, generator=torch.Generator().manual_seed(1))
    results, (got,) = _run(_graph("argmax", (3, 4, 8, 40), 0), device, DF.Float32, x)
    bg = results.lowered_graph
    assert not [op for op in bg.ops.values() if op.type == "matmul"]
    reduce_max = bg.ops["y.max"]
    assert reduce_max.attrs["z"] == 3 and reduce_max.input_tms[0] == [{"vstack": 4}]
    assert torch.equal(got.long(), _stored(results, "x", x).argmax(0, keepdim=True))


@pytest.mark.parametrize("op, reference", [("equal", torch.eq), ("greater", torch.gt), ("less_equal", torch.le)])
@pytest.mark.parametrize("device", ["gs_e150", "wh_n150"])
def test_close_small_values_never_compare_equal_in_float16(device, op, reference):
    # The difference of two Float16 values 2**-16 apart flushed to zero in a Float16 output (below 2**-14).
    g = Graph("g")
    g.add_input("a", (1, 32, 32))
    g.add_input("b", (1, 32, 32))
    g.add_op("y", op, ["a", "b"])
    g.add_output("out", "y")
    a = torch.full((1, 32, 32), 2.0 ** -6)
    b = a + torch.randint(-1, 2, (1, 32, 32), generator=torch.Generator().manual_seed(2)) * 2.0 ** -16
    assert torch.equal(quantize(b, DF.Float16), b)  # both exact in Float16
    results, (got,) = _run(g, device, DF.Float16, a, b)
    signed = [o for o in results.lowered_graph.ops.values() if o.tags.get(SIGN_EXACT)]
    # Float16_b, or Float32 in place of Float16 (as precise) off Grayskull
    no_flush = (DF.Float16_b, DF.Float32)
    assert signed and all(o.out_df in no_flush and o.acc_df in no_flush for o in signed)
    assert torch.equal(got, reference(a, b).float())


@pytest.mark.parametrize("shape, dim", [((5, 7, 9), 0), ((3, 4, 8, 40), 0), ((2, 40, 8), 1)],
                         ids=["z", "outer_z", "rows"])
@pytest.mark.parametrize("df", [DF.Bfp8_b, DF.Bfp8], ids=["bfp8_b", "bfp8"])
def test_block_format_maxima_equal_their_elements(shape, dim, df):
    # A z-reduce outputs its input's format, and a reduce over rows writes its maxima side by side in row 0:
    # Bfp8 blocks gathered maxima of different blocks and rounded them anew, and ``x == x.max(d)`` held nowhere.
    g = Graph("g")
    g.add_input("x", shape)
    g.add_op("m", "reduce_max", ["x"], {"dim": dim})
    g.add_op("eq", "equal", ["x", "m"])
    g.add_output("out", "eq")
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(6))
    results, (got,) = _run(g, "wh_n150", df, x)
    stored = _stored(results, "x", x)
    assert torch.equal(got, (stored == stored.amax(dim, keepdim=True)).float())
