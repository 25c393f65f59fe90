"""Data-format and math-fidelity assignment: defaults, fp32 fallback, AMP, mixed-precision rules, legality."""

import torch

from pass_helpers import lower, make_ctx
from pybuda.config import AMPNodeProperties, CompilerConfig
from pybuda.ir.graph import Graph
from pybuda.passes.lowered.data_formats import set_data_formats
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF


def _graph():
    g = Graph("g")
    g.add_input("x", (1, 64, 96))
    g.add_parameter("w", torch.randn(96, 64))
    g.add_parameter("b", torch.randn(64))
    g.add_op("mm", "matmul", ["x", "w"])
    g.add_op("bias", "add", ["mm", "b"])
    g.add_op("sm", "softmax", ["bias"], {"dim": -1})
    g.add_op("g", "gelu", ["sm"])
    g.add_output("out", "g")
    return g


def _formats(cfg=None, dev="wh_n150"):
    ctx = make_ctx(cfg or CompilerConfig(), dev)
    bg = lower(_graph(), ctx)
    return set_data_formats(bg, ctx), ctx


def test_defaults_fp32_fallback_and_in_df_follow_producers():
    bg, _ = _formats()
    assert bg.queues["x"].df == DF.Float16_b and bg.queues["w"].df == DF.Float16_b
    for op in bg.ops.values():
        assert op.acc_df == DF.Float16_b
        assert op.in_df == [bg.df_of(i) for i in op.inputs]
    assert bg.ops["mm"].math_fidelity == MF.HiFi3
    assert bg.queues["out"].df == bg.ops[bg.queues["out"].producer].out_df


def test_fp32_fallback_can_be_changed():
    cfg = CompilerConfig()
    cfg.fp32_fallback = DF.Float16
    bg, _ = _formats(cfg)
    assert bg.queues["w"].df == DF.Float16 and bg.ops["mm"].out_df == DF.Float16


def test_default_df_override_and_untilize_output_format():
    cfg = CompilerConfig()
    cfg.default_df_override = DF.Bfp8_b
    cfg.default_math_fidelity = MF.LoFi
    bg, _ = _formats(cfg)
    assert bg.ops["mm"].out_df == DF.Bfp8_b and bg.queues["w"].df == DF.Bfp8_b
    out = bg.ops[bg.queues["out"].producer]
    assert out.untilize_output and out.out_df == DF.Float16_b  # host outputs are never block-float
    assert bg.ops["mm"].math_fidelity == MF.LoFi


def test_sparse_index_queues_stay_raw_and_pickers_keep_exact_fidelity():
    cfg = CompilerConfig()
    cfg.default_math_fidelity = MF.LoFi
    cfg.enable_amp_light(1)
    ctx = make_ctx(cfg)
    g = Graph("g")
    g.add_input("x", (1, 3, 40, 64))
    g.add_op("e", "exp", ["x"])
    g.add_op("s", "reduce_sum", ["e"], {"dim": 1})
    g.add_output("out", "s")
    bg = set_data_formats(lower(g, ctx), ctx)
    index = [q for q in bg.queues.values() if q.tags.get("sparse_index")]
    assert index and all(q.df == DF.RawUInt32 for q in index)
    picker = bg.ops["s"]
    assert picker.attrs["identity"] and picker.math_fidelity == MF.HiFi2
    assert picker.in_df[2] == DF.RawUInt32


def test_gs_cannot_accumulate_in_float32():
    cfg = CompilerConfig()
    cfg.default_accumulate_df = DF.Float32
    bg, ctx = _formats(cfg, "gs_e150")
    assert all(op.acc_df == DF.Float16_b for op in bg.ops.values())
    assert ctx.notes["acc_df_demoted"] == "Float32"
    bg, _ = _formats(cfg, "wh_n150")
    assert bg.ops["mm"].acc_df == DF.Float32 and bg.ops["mm"].intermed_df == DF.Float32


def test_amp_levels():
    cfg = CompilerConfig()
    cfg.amp_level = 1
    bg, _ = _formats(cfg)
    assert bg.ops["mm"].out_df == DF.Bfp8_b and bg.queues["w"].df == DF.Bfp8_b
    assert bg.ops["sm.exp"].out_df == DF.Float16_b
    cfg.amp_level = 2  # TT-Buda's mixed A formats
    bg, _ = _formats(cfg)
    assert bg.queues["w"].df == DF.Bfp8 and bg.ops["mm"].out_df == DF.Bfp8
    assert bg.ops["mm"].intermed_df == DF.Float16 and bg.ops["mm"].acc_df == DF.Float16


def test_mixed_precision_rules_apply_in_order_with_regex_and_op_type():
    cfg = CompilerConfig()
    cfg.amp_properties = [
        AMPNodeProperties(op_type="matmul", output_df=DF.Bfp8_b, math_fidelity=MF.HiFi2),
        AMPNodeProperties(name_regex=r"sm\..*", output_df=DF.Float16),  # whole-name match (std::regex_match)
        AMPNodeProperties(name_regex=r"^sm\.exp", output_df=DF.Float32),
        AMPNodeProperties(op_type="matmul", name_regex="^mm$", input_df={1: (DF.Bfp4_b, False)}),
    ]
    bg, _ = _formats(cfg)
    assert bg.ops["mm"].out_df == DF.Bfp8_b and bg.ops["mm"].math_fidelity == MF.HiFi2
    assert bg.queues["w"].df == DF.Bfp4_b
    assert bg.ops["sm.exp"].out_df == DF.Float32  # the later rule wins
    assert bg.ops["sm.recip"].out_df == DF.Float16
    # the GS rule on exponent width: out Bfp8_b with a Float16 (A) intermediate is not allowed
    cfg.amp_properties = [AMPNodeProperties(op_type="matmul", output_df=DF.Bfp8_b, intermediate_df=DF.Float16)]
    bg, _ = _formats(cfg, "gs_e150")
    assert bg.ops["mm"].intermed_df.exponent_family == "b"


def test_configure_mixed_precision_api_reaches_the_compile():
    import pybuda
    from pybuda.config import _get_global_compiler_config

    pybuda.config.configure_mixed_precision(op_type="exp", output_df=DF.Float16)
    cfg = _get_global_compiler_config()
    bg, _ = _formats(cfg)
    assert bg.ops["sm.exp"].out_df == DF.Float16


def test_integer_inputs_are_exact_float32_at_hifi4():
    """Integer graph inputs are pushed as Float32 and the ops computing integers keep Float32 at HiFi4
    (``exact_df``): integers are exact up to 2**24 there, whatever the model's default format."""
    g = Graph("g")
    g.add_input("x", (1, 32, 32), dtype=torch.int32)
    g.add_op("y", "add", ["x", "x"])
    g.add_output("out", "y")
    ctx = make_ctx(CompilerConfig(default_df_override=DF.Bfp8_b, default_math_fidelity=MF.LoFi))
    bg = set_data_formats(lower(g, ctx), ctx)
    assert bg.queues["x"].df == DF.Float32
    op = bg.ops["y"]
    assert op.math_fidelity == MF.HiFi4 and op.acc_df == DF.Float32 and op.out_df == DF.Float32


def test_float32_models_accumulate_in_float32_where_the_chip_can():
    """A Float32 model keeps Float32 in Dest on Wormhole (bfloat16 Dest would truncate every result);
    Grayskull cannot, and an explicit accumulate_df always wins."""
    import torch

    import pybuda
    from pybuda.config import CompilerConfig
    from pybuda.compile import pybuda_compile
    from pybuda.dtypes import DataFormat

    class Tiny(pybuda.PyBudaModule):
        def __init__(self, name):
            super().__init__(name)
            self.w = pybuda.Parameter(torch.randn(64, 64))

        def forward(self, x):
            return pybuda.op.Matmul("mm", x, self.w)

    def acc_dfs(**kw):
        cfg = CompilerConfig(default_df_override=DataFormat.Float32, **kw)
        results = pybuda_compile(Tiny("t"), "t", torch.randn(1, 32, 64), compiler_cfg=cfg)
        return {op.acc_df for op in results.lowered_graph.ops.values()}

    assert acc_dfs(device_config="wh_n150") == {DataFormat.Float32}
    assert acc_dfs(device_config="gs_e150") == {DataFormat.Float16_b}
    assert acc_dfs(device_config="wh_n150", default_accumulate_df=DataFormat.Float16_b) == {DataFormat.Float16_b}


def test_matmul_rules_skip_pickers_and_sparse_matmul_rules_reach_them():
    """A rule's ``op_type`` names ops as TT-Buda's graph did: ``matmul`` is the model's matmuls, the index-driven
    picker of a reduction or convolution is ``sparse_matmul`` (enable_amp_light's HiFi2 reaches the one, not the
    other), and the compiler's other data-movement matmuls answer to neither."""
    def picker_and_matmul(rule):
        cfg = CompilerConfig()
        cfg.amp_properties = [rule]
        ctx = make_ctx(cfg)
        g = Graph("g")
        g.add_input("x", (1, 3, 40, 64))
        g.add_parameter("w", torch.randn(64, 32))
        g.add_op("s", "reduce_sum", ["x"], {"dim": 1})
        g.add_op("mm", "matmul", ["s", "w"])
        g.add_output("out", "mm")
        bg = set_data_formats(lower(g, ctx), ctx)
        assert bg.ops["s"].attrs.get("identity")
        return bg.ops["s"], bg.ops["mm"]

    picker, mm = picker_and_matmul(AMPNodeProperties(op_type="matmul", math_fidelity=MF.LoFi))
    assert mm.math_fidelity == MF.LoFi and picker.math_fidelity == MF.HiFi3  # the default, not the rule's LoFi
    picker, mm = picker_and_matmul(AMPNodeProperties(op_type="sparse_matmul", math_fidelity=MF.HiFi4))
    assert picker.math_fidelity == MF.HiFi4 and mm.math_fidelity == MF.HiFi3  # the default
