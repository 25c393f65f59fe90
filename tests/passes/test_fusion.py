"""Matmul epilogue fusion (bias, gelu, relu) and automatic elementwise fusion into fused ops."""

import torch

from pass_helpers import check_lowering, make_ctx
from pybuda.config import CompilerConfig
from pybuda.ir.graph import Graph
from pybuda.passes.lowered.data_formats import set_data_formats
from pybuda.passes.lowered.fuse_matmul_epilogue import fuse_matmul_epilogues
from pybuda.passes.lowered.fuse_ops import fuse_elementwise_ops


def _mlp():
    torch.manual_seed(0)
    g = Graph("mlp")
    g.add_input("x", (1, 64, 96))
    g.add_parameter("w1", torch.randn(96, 128) * 0.1)
    g.add_parameter("b1", torch.randn(128))
    g.add_parameter("w2", torch.randn(128, 64) * 0.1)
    g.add_parameter("b2", torch.randn(64))
    g.add_op("mm1", "matmul", ["x", "w1"])
    g.add_op("a1", "add", ["mm1", "b1"])
    g.add_op("g1", "gelu", ["a1"])
    g.add_op("mm2", "matmul", ["g1", "w2"])
    g.add_op("a2", "add", ["mm2", "b2"])
    g.add_op("r2", "relu", ["a2"])
    g.add_op("s", "multiply", ["r2", "r2"])
    g.add_op("e", "exp", ["s"])
    g.add_op("t", "tanh", ["e"])
    g.add_output("out", "t")
    return g


def _all_passes(bg, ctx):
    bg = fuse_matmul_epilogues(bg, ctx)
    bg = set_data_formats(bg, ctx)
    return fuse_elementwise_ops(bg, ctx)


def test_bias_gelu_relu_fold_into_matmuls_and_numerics_hold():
    bg = check_lowering(_mlp(), [torch.randn(1, 64, 96)], bg_transform=fuse_matmul_epilogues)
    mm1, mm2 = bg.ops["mm1"], bg.ops["mm2"]
    assert mm1.attrs["bias"] and mm1.attrs["sfpu_op"] == "gelu" and mm1.inputs[2] == "b1.rep_r"
    assert mm2.attrs["bias"] and mm2.attrs["relu_en"] and "sfpu_op" not in mm2.attrs
    assert not {"a1", "g1", "a2", "r2"} & set(bg.ops)


def test_auto_fusion_builds_a_schedule_and_respects_dont_fuse():
    bg = check_lowering(_mlp(), [torch.randn(1, 64, 96)], bg_transform=_all_passes)
    fused = [op for op in bg.ops.values() if op.type == "fused_op"]
    assert len(fused) == 1 and fused[0].name == "t"
    spec = bg.fused_ops[fused[0].attrs["fused_op_id"]]
    subs = [list(e.values())[0] for e in spec["schedules"][0]]
    assert [s["type"] for s in subs] == ["multiply", "exp", "tanh"]
    assert subs[0]["inputs"] == ["input0", "input1"] and subs[-1]["output"] == "output"
    assert subs[1]["pop"] == ["intermed0"] and spec["inputs"] == 2

    cfg = CompilerConfig()
    cfg.dont_fuse("e")
    bg = check_lowering(_mlp(), [torch.randn(1, 64, 96)], make_ctx(cfg), bg_transform=_all_passes)
    assert "e" in bg.ops and bg.ops["e"].type == "exp"


def test_auto_fusing_can_be_disabled():
    cfg = CompilerConfig()
    cfg.enable_auto_fusing = False
    bg = check_lowering(_mlp(), [torch.randn(1, 64, 96)], make_ctx(cfg), bg_transform=_all_passes)
    assert not bg.fused_ops and not any(op.type == "fused_op" for op in bg.ops.values())


def test_identical_schedules_share_a_fused_op_id():
    g = Graph("g")
    g.add_input("x", (1, 32, 64))
    g.add_input("y", (1, 32, 64))
    for name in ("x", "y"):
        g.add_op(f"{name}e", "exp", [name])
        g.add_op(f"{name}s", "sqrt", [f"{name}e"])
        g.add_output(f"out_{name}", f"{name}s")
    bg = check_lowering(g, [torch.rand(1, 32, 64), torch.rand(1, 32, 64)], bg_transform=_all_passes)
    ids = {op.attrs["fused_op_id"] for op in bg.ops.values() if op.type == "fused_op"}
    assert len(ids) == 1 and len(bg.fused_ops) == 1


def test_each_fusion_rewires_readers_and_output_queues():
    # The bias add folds into mm; its two readers (gelu, and the nop feeding output out2) then read mm, so
    # gelu, no longer mm's sole reader, stays an op of its own.
    torch.manual_seed(0)
    g = Graph("two_readers")
    g.add_input("x", (1, 64, 96))
    g.add_parameter("w", torch.randn(96, 128) * 0.1)
    g.add_parameter("b", torch.randn(128))
    g.add_op("mm", "matmul", ["x", "w"])
    g.add_op("a", "add", ["mm", "b"])
    g.add_op("gl", "gelu", ["a"])
    g.add_output("out", "gl")
    g.add_output("out2", "a")
    bg = check_lowering(g, [torch.randn(1, 64, 96)], bg_transform=fuse_matmul_epilogues)
    assert bg.ops["mm"].attrs["bias"] and "sfpu_op" not in bg.ops["mm"].attrs and "a" not in bg.ops
    assert sorted(op.type for op in bg.ops.values() if "mm" in op.inputs) == ["gelu", "nop"]
    assert sorted(bg.reader_map()["mm"]) == sorted(n for n, op in bg.ops.items() if "mm" in op.inputs)
