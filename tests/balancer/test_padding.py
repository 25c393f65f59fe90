"""Padded op models: an op whose awkward tile count (a prime, a huge single row) has no exact layout that fits
L1 computes a padded tensor instead (OpModel.padding), never a CompileError for lack of L1; one whose exact
layouts leave most of the grid idle is offered padded layouts beside them."""

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.balancer import Legalizer, stream_edge_tms
from pybuda.balancer.edges import edge_unpad
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF
from pybuda.ir.lowered import BudaGraph, BudaOp, BudaQueue, TileShape
from pybuda.netlist.tms import InputUnpad, Pad, as_tms

GS = get_device_descriptor(device_config="gs_e150")
WH = get_device_descriptor(device_config="wh_n150")


def _graph(op_type, out, in_shapes, *, attrs=None, tms=None, df=DF.Float32, read_by_op=False):
    """Op ``x`` (shapes in tiles, z = 1) reading input queues, writing an output queue (or, with
    ``read_by_op``, feeding a nop that does)."""
    g = BudaGraph("g")
    names = []
    for i, shape in enumerate(in_shapes):
        g.add_queue(BudaQueue(f"q{i}", "input", TileShape(1, 1, *shape), df=df))
        names.append(f"q{i}")
    g.add_op(BudaOp("x", op_type, names, TileShape(1, 1, *out), attrs=dict(attrs or {}), input_tms=dict(tms or {}),
                    in_df=[df] * len(names), out_df=df, intermed_df=df, acc_df=DF.Float32, math_fidelity=MF.HiFi4))
    last = "x"
    if read_by_op:
        g.add_op(BudaOp("y", "nop", ["x"], TileShape(1, 1, *out), in_df=[df], out_df=df, intermed_df=df,
                        acc_df=DF.Float32))
        last = "y"
    g.add_queue(BudaQueue("out", "output", TileShape(1, 1, *out), df=df, producer=last))
    return g


def _models(g, device=WH, name="x", **config):
    leg = Legalizer(g, device, CompilerConfig(**config))
    return leg, leg.models(g.ops[name])


def _check_padded(leg, g, models, device):
    f = leg.facts(g.ops["x"])
    for m in models:
        pr, pc = m.padding
        assert m.out_rt == f.rt + pr and m.out_ct == f.ct + pc  # grid·mblock·ublock covers the padded tensor
        assert 0 <= pr < m.grid_shape[0] and 0 <= pc < m.grid_shape[1]  # the least padding for the grid
        assert m.l1_bytes <= device.l1_pybuda_budget_bytes
        assert m.ublock[0] * m.ublock[1] <= device.max_ublock_tiles(DF.Float32)
        assert m.cycles >= m.kernel_cycles > 0


@pytest.mark.parametrize("ct", [313, 397, 1021])
def test_a_prime_single_row_eltwise_gets_a_padded_layout(ct):
    # 313 Float32 tiles on one core need ~1.3 MB: no exact grid divides a prime, so it used to be a CompileError.
    g = _graph("tanh", (1, ct), [(1, ct)])
    leg, models = _models(g)
    assert models and all(m.padded for m in models)
    _check_padded(leg, g, models, WH)
    for m in models:
        assert m.input_padding == (m.padding,)
        tms = as_tms(stream_edge_tms(None, m, "tanh", 0, []))
        assert tms == (Pad(m.padding[0], m.padding[1], 0.0),)


def test_ops_that_fit_exactly_keep_their_layouts():
    # An op with an exact layout keeps every exact layout it had; a padded one is only added beside them when
    # the exact ones leave most of the grid idle, and then only a small padding (see the next test).
    for shape, df in (((1, 313), DF.Float16_b), ((4, 64), DF.Float32), ((1, 16), DF.Float32)):
        _, exact = _models(_graph("tanh", shape, [shape], df=df), balancer_policy="Ribbon")
        _, models = _models(_graph("tanh", shape, [shape], df=df))
        assert exact and not any(m.padded for m in exact)
        assert [m for m in models if not m.padded] == exact
        if shape != (1, 313):  # 16 and 64 columns already spread over a grid row: nothing to gain
            assert not any(m.padded for m in models)


@pytest.mark.parametrize("op_type", ["exp", "matmul"])
def test_a_narrow_op_also_gets_padded_layouts_that_use_more_cores(op_type):
    # 47 x 47 tiles (Whisper's 1500 positions): no grid side of the worker grid divides 47, so every exact layout
    # runs on one core; padding to 48 x 48 (4 % more tiles) lets a grid of up to 8 x 8 share the work.
    shapes = [(47, 47)] if op_type == "exp" else [(47, 2), (2, 47)]
    g = _graph(op_type, (47, 47), shapes, df=DF.Float16_b, read_by_op=True)  # read by an op: it may t-stream
    leg, models = _models(g)
    exact = [m for m in models if not m.padded]
    padded = [m for m in models if m.padded]
    assert exact and max(m.cores for m in exact) == 1
    assert padded and max(m.cores for m in padded) >= 16
    _check_padded(leg, g, padded, WH)
    for m in padded:  # beside exact layouts only a padding of at most 1/8 of the tiles
        assert (m.out_rt * m.out_ct - 47 * 47) * 8 <= 47 * 47
    assert min(m.cycles for m in padded) * 8 < min(m.cycles for m in exact)
    _, ribbon = _models(g, balancer_policy="Ribbon")  # TT-Buda padded only ops that did not fit at all
    assert ribbon == exact


def test_a_pad_already_on_the_edge_is_merged():
    # The netlist allows one pad per input: the lowering's pad and the balancer's become one TM.
    g = _graph("exp", (1, 313), [(1, 311)], tms={0: [{"pad": [0, 2, -1.0]}]})
    _, models = _models(g)
    m = models[0]
    tms = as_tms(stream_edge_tms(None, m, "exp", 0, [{"pad": [0, 2, -1.0]}]))
    assert tms == (Pad(m.padding[0], 2 + m.padding[1], -1.0),)


def test_a_matmul_pads_rows_through_in0_and_columns_through_in1_never_k():
    g = _graph("matmul", (61, 61), [(61, 313), (313, 61)])
    leg, models = _models(g)
    assert models and all(m.padded for m in models)
    _check_padded(leg, g, models, WH)
    for m in models:
        pr, pc = m.padding
        assert m.input_padding == ((pr, 0), (0, pc))
        assert m.u_kt * m.m_k == 313


def test_a_reduce_never_pads_the_reduced_dimension():
    g = _graph("reduce", (1, 313), [(3, 313)], attrs={"dim": "r", "type": "sum"})
    leg, models = _models(g)
    f = leg.facts(g.ops["x"])
    assert f.pad_dims == (False, True)
    assert models and all(m.padding[0] == 0 for m in models)
    g = _graph("reduce", (313, 1), [(313, 3)], attrs={"dim": "c", "type": "sum"})
    leg, _ = _models(g)
    assert leg.facts(g.ops["x"]).pad_dims == (True, False)


def test_an_operand_broadcast_inside_the_kernel_blocks_padding_that_dimension():
    # A fused op reading a one-column operand (tile-broadcast inside the schedule) cannot pad its columns.
    g = _graph("fused_op", (2, 313), [(2, 313), (2, 1)], attrs={"fused_op_id": 0})
    leg = Legalizer(g, WH, CompilerConfig())
    assert leg.facts(g.ops["x"]).pad_dims == (True, False)


def test_an_op_read_by_ops_is_padded_and_its_readers_unpad():
    # Without t-streaming (which would otherwise slice it into 313 one-tile slices) only padding fits.
    g = _graph("tanh", (1, 313), [(1, 313)], read_by_op=True)
    leg, models = _models(g, enable_t_streaming=False)
    assert models and all(m.padded for m in models)
    assert edge_unpad(models[0]) == InputUnpad(rt=models[0].padding[0], ct=models[0].padding[1])
    assert edge_unpad(None) is None


def test_grayskull_and_a_huge_row_of_bfp_still_fit():
    g = _graph("add", (1, 1009), [(1, 1009), (1, 1009)], df=DF.Float16_b)
    leg, models = _models(g, GS)
    assert models
    _check_padded(leg, g, models, GS)
