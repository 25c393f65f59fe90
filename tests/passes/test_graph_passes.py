"""The IR passes before lowering: decomposition, consteval, channel-last, TM cancelling/hoisting, microbatch."""

import pytest
import torch

from pass_helpers import make_ctx
from pybuda.config import CompilerConfig
from pybuda.errors import CompileError
from pybuda.ir.graph import Graph
from pybuda.passes.graph.channel_last import convert_convs_to_channel_last
from pybuda.passes.graph.consteval import evaluate_constants
from pybuda.passes.graph.decompose import decompose_high_level_ops
from pybuda.passes.graph.microbatch import strip_microbatch
from pybuda.passes.graph.optimize_tms import optimize_tms
from pybuda.verify import run_graph_on_cpu


def _types(g):
    return [n.op_type for n in g.ops]


def _same(g1, g2, inputs, atol=1e-5):
    for a, b in zip(run_graph_on_cpu(g1, inputs), run_graph_on_cpu(g2, inputs)):
        assert a.shape == b.shape and torch.allclose(a, b, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("stable", [True, False])
def test_softmax_decomposition_follows_stable_softmax_flag(stable):
    g = Graph("g")
    g.add_input("x", (1, 8, 40))
    g.add_op("sm", "softmax", ["x"], {"dim": -1})
    g.add_output("out", "sm")
    cfg = CompilerConfig()
    cfg.enable_stable_softmax = stable
    d = decompose_high_level_ops(g, make_ctx(cfg))
    assert ("reduce_max" in _types(d)) == stable
    assert {"exp", "reduce_sum", "reciprocal", "multiply"} <= set(_types(d))
    _same(g, d, [torch.randn(1, 8, 40) * 5])


@pytest.mark.parametrize("op,attrs,n", [("layernorm", {"dim": -1, "epsilon": 1e-5}, 3), ("log_softmax", {"dim": -2}, 1),
                                        ("divide", {}, 2), ("minimum", {}, 2), ("power", {}, 2),
                                        ("clip", {"min": -0.5, "max": 0.7}, 1), ("clip", {"min": 0.0, "max": 6.0}, 1),
                                        ("pow", {"exponent": 2.5}, 1), ("pow", {"exponent": -0.5}, 1),
                                        ("where", {}, 3), ("batchnorm", {"epsilon": 1e-3}, 5)])
def test_decompositions_keep_numerics(op, attrs, n):
    g = Graph("g")
    shapes = {"layernorm": [(2, 6, 24), (24,), (24,)], "batchnorm": [(2, 6, 4, 4)] + [(6,)] * 4}.get(op, [(2, 6, 24)] * n)
    for i, s in enumerate(shapes):
        g.add_input(f"i{i}", s)
    g.add_op("y", op, [f"i{i}" for i in range(n)], attrs)
    g.add_output("out", "y")
    d = decompose_high_level_ops(g, make_ctx())
    assert op not in _types(d)
    inputs = [torch.rand(*s) + 0.5 for s in shapes]
    if op == "where":
        inputs[0] = (inputs[0] > 1.0).float()
    _same(g, d, inputs)


def test_layernorm_decomposes_to_tt_buda_ops():
    g = Graph("g")
    g.add_input("x", (1, 4, 16))
    g.add_parameter("w", torch.ones(16))
    g.add_parameter("b", torch.zeros(16))
    g.add_op("ln", "layernorm", ["x", "w", "b"])
    g.add_output("out", "ln")
    d = decompose_high_level_ops(g, make_ctx())
    assert _types(d).count("reduce_avg") == 2
    assert {"subtract", "multiply", "add", "sqrt", "reciprocal"} <= set(_types(d))



@pytest.mark.parametrize("op,attrs", [("layernorm", {"dim": -1}), ("softmax", {"dim": 2}),
                                      ("reduce_avg", {"dim": 1}), ("reduce_max", {"dim": 1})])
def test_reductions_over_one_element_are_the_identity(op, attrs):
    # On the chip a reduction is a multiply that rounds: over one element it must not run at all, or a layer
    # norm sees x - mean(x) != 0 and divides that by sqrt(eps).
    g = Graph("g")
    g.add_input("x", (2, 1, 1))
    operands = ["x"]
    if op == "layernorm":
        g.add_parameter("w", torch.full((1,), 2.0))
        g.add_parameter("b", torch.full((1,), 0.5))
        operands += ["w", "b"]
    g.add_op("r", op, operands, attrs)
    g.add_output("out", "r")
    d = decompose_high_level_ops(g, make_ctx())
    assert not any(t.startswith("reduce") for t in _types(d))
    _same(g, d, [torch.randn(2, 1, 1)])

def test_embedding_becomes_a_one_hot_matmul_with_a_checked_id_range():
    g = Graph("g")
    g.add_input("ids", (1, 8), torch.int64)
    g.add_parameter("table", torch.randn(100, 16))
    g.add_op("emb", "embedding", ["table", "ids"])
    g.add_output("out", "emb")
    d = decompose_high_level_ops(g, make_ctx())
    assert "embedding" not in _types(d) and _types(d)[-1] == "matmul"
    # The ids are pushed as exact floats, and the host refuses ids outside the table.
    assert d.nodes["ids"].tags["device_dtype"] == "float32" and d.nodes["ids"].tags["value_range"] == (0, 99)


def test_consteval_folds_parameter_transposes_and_records_the_trace():
    g = Graph("g")
    g.add_input("x", (1, 8, 16))
    g.add_parameter("w", torch.randn(32, 16))
    g.add_op("wt", "transpose", ["w"], {"dim0": 0, "dim1": 1})
    g.add_op("mm", "matmul", ["x", "wt"])
    g.add_output("out", "mm")
    ctx = make_ctx()
    c = evaluate_constants(g, ctx)
    assert c["wt"].kind == "parameter" and _types(c) == ["matmul"]
    assert torch.equal(c.tensors["wt"], g.tensors["w"].t())
    trace = ctx.consteval_trace["wt"]
    assert trace["sources"] == ["w"] and trace["ops"][0]["op_type"] == "transpose"
    _same(g, c, [torch.randn(1, 8, 16)])


def test_consteval_does_not_blow_up_broadcasts():
    g = Graph("g")
    g.add_input("x", (1, 512, 512))
    g.add_constant("c", torch.tensor([2.0]))
    g.add_op("b", "broadcast", ["c"], {"dim": -1, "shape": 512 * 512})
    g.add_op("r", "reshape", ["b"], {"shape": (1, 512, 512)})
    g.add_op("y", "multiply", ["x", "r"])
    g.add_output("out", "y")
    c = evaluate_constants(g, make_ctx())
    assert "b" in c and c["b"].kind == "op"


def test_transpose_pairs_cancel_and_reshapes_merge():
    g = Graph("g")
    g.add_input("x", (2, 8, 16))
    g.add_op("e", "exp", ["x"])
    g.add_op("t1", "transpose", ["e"], {"dim0": 1, "dim1": 2})
    g.add_op("t2", "transpose", ["t1"], {"dim0": -1, "dim1": -2})
    g.add_op("r1", "reshape", ["t2"], {"shape": (16, 16)})
    g.add_op("r2", "reshape", ["r1"], {"shape": (2, 128)})
    g.add_op("s", "sqrt", ["r2"])
    g.add_output("out", "s")
    o = optimize_tms(g, make_ctx())
    assert _types(o) == ["exp", "reshape", "sqrt"]
    _same(g, o, [torch.rand(2, 8, 16)])


def test_input_and_output_tms_are_hoisted_to_the_host():
    g = Graph("g")
    g.add_input("x", (1, 3, 8, 8))
    g.add_op("t", "transpose", ["x"], {"dim0": 1, "dim1": 3})
    g.add_op("e", "exp", ["t"])
    g.add_op("r", "reshape", ["e"], {"shape": (1, 64, 3)})
    g.add_output("out", "r")
    ctx = make_ctx()
    o = optimize_tms(g, ctx)
    assert _types(o) == ["exp"]
    assert o["x"].shape == (1, 8, 8, 3) and ctx.input_host_tms["x"] == [("transpose", {"dim0": 1, "dim1": 3})]
    assert ctx.output_host_tms["out"][0][0] == "reshape"


def test_channel_last_region_has_conversions_only_at_its_edges():
    g = Graph("g")
    g.add_input("x", (1, 4, 8, 8))
    g.add_parameter("w1", torch.randn(8, 4, 3, 3))
    g.add_parameter("w2", torch.randn(8, 8, 3, 3))
    g.add_parameter("s", torch.randn(8, 1, 1))
    g.add_op("c1", "conv2d", ["x", "w1"], {"padding": 1})
    g.add_op("m", "multiply", ["c1", "s"])
    g.add_op("r", "relu", ["m"])
    g.add_op("c2", "conv2d", ["r", "w2"], {"padding": 1})
    g.add_op("a", "add", ["c2", "r"])
    g.add_output("out", "a")
    ctx = make_ctx()
    cl = convert_convs_to_channel_last(g, ctx)
    assert all(n.attrs["channel_last"] for n in cl.ops if n.op_type == "conv2d")
    transposes = [n.name for n in cl.ops if n.op_type == "transpose"]
    assert len(transposes) == 4  # two into the region (input), two out of it (output)
    _same(g, cl, [torch.randn(1, 4, 8, 8)], atol=1e-4)


def test_microbatch_strip_and_mixing_error():
    g = Graph("g")
    g.add_input("x", (4, 8, 16))
    g.add_op("e", "exp", ["x"])
    g.add_op("r", "reshape", ["e"], {"shape": (4, 128)})
    g.add_output("out", "r")
    s = strip_microbatch(g, make_ctx(microbatch=4))
    assert s["x"].shape == (1, 8, 16) and s["r"].shape == (1, 128) and s["x"].tags["batched"]

    g2 = Graph("g2")
    g2.add_input("x", (4, 8, 16))
    g2.add_op("r", "reduce_sum", ["x"], {"dim": 0})
    g2.add_output("out", "r")
    with pytest.raises(CompileError) as e:
        strip_microbatch(g2, make_ctx(microbatch=4))
    assert e.value.op == "r" and "microbatch" in str(e.value)
