"""Lowering preserves numerics: every lowered graph is evaluated in float32 (buda_eval, with the netlist's
TM / sparse-picker / reduce / bias semantics) and compared with the IR graph's CPU reference."""

import pytest
import torch

from pass_helpers import check_lowering, lower, make_ctx
from pybuda.errors import CompileError
from pybuda.ir.graph import Graph
from pybuda.netlist.host_io import canonical_zrc, from_canonical, to_canonical


def _g(name="g"):
    torch.manual_seed(0)
    return Graph(name)


def test_canonical_form_folds_leading_dims_and_pads():
    assert canonical_zrc((2, 3, 5, 7)) == (6, 5, 7)
    assert canonical_zrc((7,)) == (1, 1, 7)
    assert canonical_zrc(()) == (1, 1, 1)
    t = torch.randn(2, 3, 5, 40)
    c = to_canonical(t)
    assert c.shape == (6, 32, 64) and torch.equal(c[:, 5:, :], torch.zeros(6, 27, 64))
    assert torch.equal(from_canonical(c, t.shape), t)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum", "heaviside"])
@pytest.mark.parametrize("bshape", [(1, 50, 70), (70,), (50, 1), (1,), (3, 1, 70)])
def test_binary_broadcasts(op, bshape):
    g = _g()
    g.add_input("a", (3, 50, 70))
    g.add_input("b", bshape)
    g.add_op("y", op, ["a", "b"])
    g.add_output("out", "y")
    check_lowering(g, [torch.randn(3, 50, 70), torch.randn(*bshape)])


def test_binary_broadcast_of_parameters_is_replicated_at_compile_time():
    g = _g()
    g.add_input("a", (1, 40, 96))
    g.add_parameter("bias", torch.randn(96))
    g.add_parameter("col", torch.randn(40, 1))
    g.add_op("y", "add", ["a", "bias"])
    g.add_op("z", "multiply", ["y", "col"])
    g.add_output("out", "z")
    bg = check_lowering(g, [torch.randn(1, 40, 96)])
    assert "bias.rep_r" in bg.queues and "col.rep_c" in bg.queues
    assert not any(op.tags.get("picker") == "tile_broadcast" for op in bg.ops.values())


def test_activation_broadcast_uses_tile_broadcast_matmul():
    g = _g()
    g.add_input("a", (1, 64, 64))
    g.add_input("m", (1, 1, 64))
    g.add_op("y", "add", ["a", "m"])
    g.add_output("out", "y")
    bg = check_lowering(g, [torch.randn(1, 64, 64), torch.randn(1, 1, 64)])
    assert "m.tile_bcast_r" in bg.ops
    assert bg.ops["y"].input_tms[1] == [{"broadcast": {"r": 2}}]


@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "reciprocal", "sigmoid", "tanh", "abs", "square", "gelu",
                                "sine", "cosine"])
def test_unary(op):
    g = _g()
    g.add_input("a", (2, 33, 65))
    g.add_op("y", op, ["a"])
    g.add_output("out", "y")
    x = torch.rand(2, 33, 65) + 0.5
    check_lowering(g, [x])


def test_relu_leaky_relu_pow_become_attributes():
    g = _g()
    g.add_input("a", (1, 32, 32))
    g.add_op("r", "relu", ["a"])
    g.add_op("l", "leaky_relu", ["r"], {"alpha": 0.1})
    g.add_op("p", "pow", ["l"], {"exponent": 3.0})
    g.add_output("out", "p")
    bg = check_lowering(g, [torch.randn(1, 32, 32)])
    assert bg.ops["r"].type == "nop" and bg.ops["r"].attrs["relu_en"] is True
    assert bg.ops["l"].type == "lrelu" and bg.ops["l"].attrs["slope"] == pytest.approx(0.1)
    assert bg.ops["p"].type == "power" and bg.ops["p"].attrs["exp"] == 3


@pytest.mark.parametrize("ashape,bshape", [((1, 64, 96), (96, 48)), ((4, 30, 40), (40, 70)),
                                           ((4, 64, 32), (4, 32, 64)), ((64, 96), (2, 96, 32))])
def test_matmul_shapes(ashape, bshape):
    g = _g()
    g.add_input("a", ashape)
    g.add_parameter("b", torch.randn(*bshape))
    g.add_op("y", "matmul", ["a", "b"])
    g.add_output("out", "y")
    check_lowering(g, [torch.randn(*ashape)])


@pytest.mark.parametrize("weights", [True, False], ids=["parameter", "activation"])
def test_matmul_operands_broadcasting_over_different_leading_dims(weights):
    # A capsule layer's W [1, 8, 3, 16, 8] @ u [b, 8, 1, 8, 1]: each operand broadcasts over a dim the other has.
    g = _g()
    g.add_input("u", (2, 8, 1, 8, 1))
    if weights:
        g.add_parameter("w", torch.randn(1, 8, 3, 16, 8))
    else:
        g.add_input("w", (1, 8, 3, 16, 8))
    g.add_op("y", "matmul", ["w", "u"])
    g.add_output("out", "y")
    inputs = [torch.randn(2, 8, 1, 8, 1)] + ([] if weights else [torch.randn(1, 8, 3, 16, 8)])
    check_lowering(g, inputs)


def test_matmul_with_bias_operand():
    g = _g()
    g.add_input("a", (1, 64, 96))
    g.add_parameter("w", torch.randn(96, 64))
    g.add_parameter("b", torch.randn(64))
    g.add_op("y", "matmul", ["a", "w", "b"])
    g.add_output("out", "y")
    bg = check_lowering(g, [torch.randn(1, 64, 96)])
    assert bg.ops["y"].attrs["bias"] is True and len(bg.ops["y"].inputs) == 3


def test_matmul_unaligned_inner_dim_of_two_activations_is_masked():
    g = _g()
    g.add_input("a", (1, 32, 40))
    g.add_input("b", (1, 40, 32))
    g.add_op("ea", "exp", ["a"])  # exp makes the padding of both operands non-zero
    g.add_op("eb", "exp", ["b"])
    g.add_op("y", "matmul", ["ea", "eb"])
    g.add_output("out", "y")
    bg = check_lowering(g, [torch.randn(1, 32, 40), torch.randn(1, 40, 32)])
    assert any(n.endswith("zero_pad_r") or n.endswith("zero_pad_c") for n in bg.ops)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_avg", "reduce_max"])
@pytest.mark.parametrize("dim", [-1, -2, -3])
def test_reductions(op, dim):
    g = _g()
    g.add_input("a", (2, 3, 40, 70))
    g.add_op("y", op, ["a"], {"dim": dim})
    g.add_output("out", "y")
    check_lowering(g, [torch.randn(2, 3, 40, 70) - 3.0])  # all-negative rows: padding must not win a max


def test_reduce_sum_over_outer_leading_dim_uses_a_picker():
    g = _g()
    g.add_input("a", (2, 3, 40, 64))
    g.add_op("y", "reduce_sum", ["a"], {"dim": 0})
    g.add_output("out", "y")
    bg = check_lowering(g, [torch.randn(2, 3, 40, 64)])
    assert bg.ops["y"].attrs.get("identity") is True


@pytest.mark.parametrize("shape,dim", [((2, 3, 32, 32), 0), ((1, 2, 5, 7, 12), 1), ((3, 4, 2, 9, 40), 0)])
def test_reduce_max_over_outer_leading_dim_moves_it_to_z_first(shape, dim):
    g = _g()
    g.add_input("a", shape)
    g.add_op("e", "exp", ["a"])
    g.add_op("y", "reduce_max", ["e"], {"dim": dim})
    g.add_output("out", "y")
    bg = check_lowering(g, [torch.randn(*shape)])
    assert bg.ops["y"].attrs == {"dim": "z", "type": "max", "z": shape[dim]}


def test_softmax_layernorm_need_no_tile_broadcast():
    g = _g()
    g.add_input("x", (1, 64, 96))
    g.add_parameter("w", torch.randn(96))
    g.add_parameter("b", torch.randn(96))
    g.add_op("ln", "layernorm", ["x", "w", "b"])
    g.add_op("sm", "softmax", ["ln"], {"dim": -1, "stable": False})
    g.add_output("out", "sm")
    bg = check_lowering(g, [torch.randn(1, 64, 96)])
    assert not any(op.tags.get("picker") == "tile_broadcast" for op in bg.ops.values())


def _attention(g, heads=4, seq=64, dim=32, batch=1):
    hidden = heads * dim
    g.add_input("x", (batch, seq, hidden))
    for n in ("q", "k", "v"):
        g.add_parameter(f"w{n}", torch.randn(hidden, hidden) * 0.1)
        g.add_op(f"{n}_t", "transpose", [f"w{n}"], {"dim0": 0, "dim1": 1})
        g.add_op(n, "matmul", ["x", f"{n}_t"])
        g.add_op(f"{n}_r", "reshape", [n], {"shape": (batch, seq, heads, dim)})
        g.add_op(f"{n}_h", "transpose", [f"{n}_r"], {"dim0": 1, "dim1": 2})
    g.add_op("kT", "transpose", ["k_h"], {"dim0": -1, "dim1": -2})
    g.add_op("sc", "matmul", ["q_h", "kT"])
    g.add_op("p", "softmax", ["sc"], {"dim": -1})
    g.add_op("ctx", "matmul", ["p", "v_h"])
    g.add_op("ctx_t", "transpose", ["ctx"], {"dim0": 1, "dim1": 2})
    g.add_op("ctx_r", "reshape", ["ctx_t"], {"shape": (batch, seq, hidden)})
    g.add_parameter("wo", torch.randn(hidden, hidden) * 0.1)
    g.add_op("o", "matmul", ["ctx_r", "wo"])
    g.add_output("out", "o")


def test_attention_head_split_and_merge_are_slice_and_stack_tms():
    g = _g()
    _attention(g)
    bg = check_lowering(g, [torch.randn(1, 64, 128)])
    assert bg.ops["sc"].input_tms == {0: [{"hslice": 4}], 1: ["transpose", {"vslice": 4}]}
    assert bg.ops["ctx"].input_tms == {1: [{"hslice": 4}]}
    assert bg.ops["o"].input_tms == {0: [{"hstack": 4}]}
    assert not any(op.attrs.get("identity") for op in bg.ops.values())


def test_microbatch_graph_runs_per_sample():
    g = _g()
    _attention(g, batch=3)
    ctx = make_ctx(microbatch=3)
    bg = check_lowering(g, [torch.randn(3, 64, 128)], ctx)
    assert bg.queues["x"].shape.as_tuple() == (1, 1, 2, 4)
    assert bg.queues["x"].tags["batched"] is True


@pytest.mark.parametrize("op,attrs,shape", [
    ("index", {"dim": -1, "start": 5, "stop": 45, "stride": 2}, (2, 40, 64)),
    ("index", {"dim": -2, "start": 3, "stop": 37}, (2, 40, 64)),
    ("index", {"dim": 0, "start": 1, "stop": 2}, (2, 40, 64)),
    ("narrow", {"dim": -1, "start": 10, "length": 20}, (2, 40, 64)),
    ("select", {"dim": -2, "index": (1, 2), "stride": 4}, (2, 40, 64)),
    ("pad", {"pad": (3, 5, 2, 1)}, (2, 40, 64)),
    ("broadcast", {"dim": -2, "shape": 37}, (2, 1, 64)),
    ("repeat", {"factors": (1, 2, 3)}, (2, 20, 30)),
    ("transpose", {"dim0": 0, "dim1": 1}, (2, 40, 64)),
    ("transpose", {"dim0": -1, "dim1": -2}, (2, 40, 50)),
    ("reshape", {"shape": (2, 20, 128)}, (2, 40, 64)),
])
def test_data_movement(op, attrs, shape):
    g = _g()
    g.add_input("a", shape)
    g.add_op("e", "exp", ["a"])  # an op in front, so the movement happens on the device
    g.add_op("y", op, ["e"], attrs)
    g.add_op("z", "sqrt", ["y"])
    g.add_output("out", "z")
    check_lowering(g, [torch.randn(*shape)])


@pytest.mark.parametrize("axis", [-1, -2, 0])
def test_concatenate(axis):
    g = _g()
    g.add_input("a", (2, 40, 50))
    g.add_input("b", (2, 40, 50))
    g.add_op("ea", "exp", ["a"])
    g.add_op("eb", "sigmoid", ["b"])
    g.add_op("y", "concatenate", ["ea", "eb"], {"axis": axis})
    g.add_op("z", "sqrt", ["y"])
    g.add_output("out", "z")
    check_lowering(g, [torch.randn(2, 40, 50), torch.randn(2, 40, 50)])


def test_unsupported_op_names_the_op():
    g = _g()
    g.add_input("a", (1, 32, 32))
    g.add_input("i", (4,), torch.int64)
    g.add_input("v", (1, 4, 32))
    g.add_op("copy", "index_copy", ["a", "i", "v"], {"dim": 1})
    g.add_output("out", "copy")
    with pytest.raises(CompileError) as e:
        lower(g)
    assert e.value.op == "copy" and "device" in str(e.value)


def _conv_graph(stride=1, padding=1, groups=1, cin=8, cout=16, k=3, h=14, w=14, bias=True):
    g = _g("conv")
    g.add_input("img", (1, cin, h, w))
    g.add_parameter("w", torch.randn(cout, cin // groups, k, k) * 0.2)
    ops = ["img", "w"]
    if bias:
        g.add_parameter("b", torch.randn(cout) * 0.2)
        ops.append("b")
    g.add_op("c", "conv2d", ops, {"stride": stride, "padding": padding, "groups": groups})
    g.add_op("r", "relu", ["c"])
    g.add_output("out", "r")
    return g


@pytest.mark.parametrize("stride,padding,k,groups,cout", [(1, 1, 3, 1, 16), (2, 3, 7, 1, 16), (2, 0, 1, 1, 16),
                                                        (1, 0, 1, 1, 40), (1, 1, 3, 8, 8), (2, 1, 3, 8, 8),
                                                        (1, 1, 3, 2, 16)])
def test_conv2d(stride, padding, k, groups, cout):
    g = _conv_graph(stride, padding, groups, cout=cout, k=k)
    bg = check_lowering(g, [torch.randn(1, 8, 14, 14)])
    assert bg.queues["img"].tags["host_tms"], "the NCHW->NHWC transposes of the input run on the host"


def test_conv_pool_residual_block_keeps_channel_last_between_convs():
    g = _g("block")
    g.add_input("img", (1, 3, 20, 20))
    g.add_parameter("w1", torch.randn(16, 3, 3, 3) * 0.2)
    g.add_op("c1", "conv2d", ["img", "w1"], {"padding": 1})
    for p in ("w", "b", "m", "v"):
        g.add_parameter(f"bn.{p}", torch.rand(16) + 0.5, requires_grad=False)
    g.add_op("bn", "batchnorm", ["c1", "bn.w", "bn.b", "bn.m", "bn.v"])
    g.add_op("r1", "relu", ["bn"])
    g.add_op("mp", "max_pool2d", ["r1"], {"kernel_size": 3, "stride": 2, "padding": 1})
    g.add_parameter("w2", torch.randn(16, 16, 3, 3) * 0.2)
    g.add_op("c2", "conv2d", ["mp", "w2"], {"padding": 1})
    g.add_op("add", "add", ["c2", "mp"])
    g.add_op("ap", "avg_pool2d", ["add"], {"kernel_size": 2, "stride": 2})
    g.add_op("gp", "reduce_avg", ["ap"], {"dim": -1})
    g.add_op("gp2", "reduce_avg", ["gp"], {"dim": -2})
    g.add_op("fl", "reshape", ["gp2"], {"shape": (1, 16)})
    g.add_output("out", "fl")
    bg = check_lowering(g, [torch.randn(1, 3, 20, 20) - 1.0])
    assert not any("to_nchw" in n or "to_nhwc" in n for n in bg.ops), "no layout conversion inside the network"


def test_sparse_picker_encoding_round_trip():
    import numpy as np

    from pybuda.passes.lower.pickers import build_sparse_picker, sparse_matmul

    rng = np.random.default_rng(0)
    out_rows, in_rows = rng.integers(0, 100, 300), rng.integers(0, 70, 300)
    out_t = rng.integers(0, 3, 300)
    values = rng.standard_normal(300).astype(np.float32)
    sp = build_sparse_picker(out_rows, in_rows, values, 4, 3, out_t, 3)
    dense = torch.zeros(3, 128, 96)
    for t, r, k, v in zip(out_t, out_rows, in_rows, values):
        dense[t, r, k] += float(v)
    assert torch.allclose(sp.dense(), dense, atol=1e-6)
    act = torch.randn(1, 96, 64)
    assert torch.allclose(sparse_matmul(sp.tiles, sp.index, sp.indices_len, act, 4, 3), dense @ act[0], atol=1e-4)
    assert sp.index.dtype == torch.int32 and sp.tiles.shape == (32 * sp.num_sparse_tiles, 32)


def test_outputs_that_are_inputs_parameters_or_shared_get_their_own_nop():
    g = _g()
    g.add_input("a", (1, 32, 64))
    g.add_parameter("p", torch.randn(32, 64))
    g.add_op("e", "exp", ["a"])
    g.add_output("o_in", "a")
    g.add_output("o_param", "p")
    g.add_output("o_e1", "e")
    g.add_output("o_e2", "e")
    bg = check_lowering(g, [torch.randn(1, 32, 64)])
    producers = [bg.queues[q].producer for q in bg.output_order]
    assert len(set(producers)) == 4 and all(p in bg.ops for p in producers)
    assert all(bg.ops[p].untilize_output for p in producers)


def test_transposed_binary_operands_on_grayskull_go_through_a_nop():
    g = _g()
    g.add_input("a", (1, 64, 32))
    g.add_input("b", (1, 32, 64))
    g.add_op("ea", "exp", ["a"])
    g.add_op("eb", "exp", ["b"])
    g.add_op("ta", "transpose", ["ea"], {"dim0": -1, "dim1": -2})
    g.add_op("s", "subtract", ["eb", "ta"])
    g.add_output("out", "s")
    x = [torch.randn(1, 64, 32), torch.randn(1, 32, 64)]
    bg = check_lowering(g, x, make_ctx(dev="gs_e150"))
    assert bg.ops["s"].input_tms == {} and "ea.tm_nop" in bg.ops
    bg = check_lowering(g, x, make_ctx(dev="wh_n150"))
    assert "ea.tm_nop" in bg.ops  # subtract cannot swap its inputs: transpose only on input 0
    g2 = _g()
    g2.add_input("a", (1, 64, 32))
    g2.add_input("b", (1, 32, 64))
    g2.add_op("ea", "exp", ["a"])
    g2.add_op("ta", "transpose", ["ea"], {"dim0": -1, "dim1": -2})
    g2.add_op("s", "add", ["b", "ta"])
    g2.add_output("out", "s")
    bg = check_lowering(g2, x, make_ctx(dev="wh_n150"))
    assert bg.ops["s"].input_tms == {0: ["transpose"]}  # add swaps its inputs to carry the transpose on input 0


@pytest.mark.parametrize("act,masked", [("relu", False), ("tanh", True)])
def test_max_pool_padding_needs_no_mask_after_a_relu(act, masked):
    """Padded positions pick zeros; after a relu no value is below zero, so the -inf pad mask (an add and
    a DRAM constant per input) is skipped. Any other producer keeps it, and both stay exact."""
    g = _g("pool")
    g.add_input("img", (1, 20, 20, 16))
    g.add_op("a", act, ["img"])
    g.add_op("mp", "max_pool2d", ["a"], {"kernel_size": 3, "stride": 2, "padding": 1, "channel_last": True})
    g.add_output("out", "mp")
    bg = check_lowering(g, [torch.randn(1, 20, 20, 16) - 2.0])  # mostly negative inputs
    assert any(name.endswith(".mask") for name in bg.ops) == masked


def test_an_op_feeding_an_output_queue_feeds_no_other_op():
    """An output whose trailing transpose runs on the host shares its producer with another output: each
    output still gets a producer of its own (an untilizing op cannot be read by ops)."""
    g = _g()
    g.add_input("x", (2, 20, 4))
    g.add_op("r", "reciprocal", ["x"])
    g.add_op("t", "transpose", ["r"], {"dim0": 1, "dim1": 2})
    g.add_output("out_t", "t")
    g.add_output("out_r", "r")
    bg = check_lowering(g, [torch.rand(2, 20, 4) + 1])
    read = {name for op in bg.ops.values() for name in op.inputs}
    for name in bg.output_order:
        assert bg.queues[name].producer not in read, name
