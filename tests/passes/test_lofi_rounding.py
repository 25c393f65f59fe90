"""``lofi_rounding``: at LoFi, eltwise ops run at HiFi2, inexact reduction scales are read whole, and the host
rounds weights that only LoFi matmuls read to the 4 mantissa bits those read (pybuda.passes.lowered.lofi_weights)."""

import pytest
import torch

import pybuda
from pass_helpers import lower, make_ctx
from pybuda.config import AMPNodeProperties, CompilerConfig
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF
from pybuda.golden.formats import round_mantissa
from pybuda.ir.graph import RUNTIME_UPDATED, Graph
from pybuda.netlist.host_io import QueueIO, queue_io, to_device_layout
from pybuda.passes.lowered.data_formats import set_data_formats
from pybuda.passes.lowered.fuse_ops import fuse_elementwise_ops
from pybuda.passes.lowered.lofi_weights import MANTISSA_BITS, round_lofi_weights


def _config(fidelity=MF.LoFi, rounding=True):
    cfg = CompilerConfig()
    cfg.default_df_override = DF.Bfp8_b
    cfg.default_math_fidelity = fidelity
    cfg.lofi_rounding = rounding
    return cfg


def _linear_graph(shared_bias=False, trained=False):
    g = Graph("g")
    g.add_input("x", (1, 64, 64))
    g.add_parameter("w", torch.randn(64, 64))
    g.add_parameter("b", torch.randn(64))
    g.add_op("mm", "matmul", ["x", "w"])
    g.add_op("bias", "add", ["mm", "b"])
    g.add_op("act", "gelu", ["bias"])
    g.add_op("scaled", "multiply", ["act", "act"])
    last = "scaled"
    if shared_bias:  # w is also added to an activation: rounding it would be an error of its own there
        g.add_parameter("v", torch.randn(64, 64))
        g.add_op("mm2", "matmul", ["scaled", "v"])
        g.add_op("plus_w", "add", ["mm2", "w"])
        last = "plus_w"
    g.add_output("out", last)
    if trained:
        g["w"].tags[RUNTIME_UPDATED] = True
    return g


def _compiled(cfg, graph):
    ctx = make_ctx(cfg)
    bg = set_data_formats(lower(graph, ctx), ctx)
    return round_lofi_weights(fuse_elementwise_ops(bg, ctx), ctx)


def test_eltwise_ops_run_at_hifi2_and_matmuls_stay_at_lofi():
    bg = _compiled(_config(), _linear_graph())
    for op in bg.ops.values():
        assert op.math_fidelity == (MF.LoFi if op.type == "matmul" else MF.HiFi2), op.name
    off = _compiled(_config(rounding=False), _linear_graph())
    assert all(op.math_fidelity == MF.LoFi for op in off.ops.values())


def test_a_user_rule_keeps_its_fidelity():
    cfg = _config()
    cfg.amp_properties.append(AMPNodeProperties(op_type="gelu", math_fidelity=MF.LoFi))
    bg = _compiled(cfg, _linear_graph())
    gelu = [op for op in bg.ops.values() if op.type == "gelu" or op.tags.get("ir_op_type") == "gelu"]
    assert gelu and all(op.math_fidelity == MF.LoFi for op in gelu)


@pytest.mark.parametrize("width, fidelity", [(48, MF.HiFi2), (64, MF.LoFi)])
def test_a_mean_reads_its_scale_whole(width, fidelity):
    # 1/48 has more mantissa bits than LoFi reads of SrcA (it would be read as 1.3125/64); 1/64 has none.
    g = Graph("g")
    g.add_input("x", (1, 32, width))
    g.add_op("m", "reduce_avg", ["x"], {"dim": -1})
    g.add_output("out", "m")
    bg = _compiled(_config(), g)
    assert bg.ops["m"].type == "matmul" and bg.ops["m"].math_fidelity == fidelity


def test_only_weights_read_by_lofi_matmuls_alone_are_rounded():
    bg = _compiled(_config(), _linear_graph())
    assert bg.queues["w"].tags.get(MANTISSA_BITS) == 4
    bias = bg.queues["b.rep_r"]  # the bias, replicated over rows
    assert MANTISSA_BITS not in bias.tags  # added, not multiplied
    assert queue_io(bg.queues["w"]).mantissa_bits == 4 and queue_io(bias).mantissa_bits is None
    shared = _compiled(_config(), _linear_graph(shared_bias=True))
    assert MANTISSA_BITS not in shared.queues["w"].tags
    assert shared.queues["v"].tags.get(MANTISSA_BITS) == 4
    for cfg in (_config(MF.HiFi3), _config(rounding=False)):
        assert MANTISSA_BITS not in _compiled(cfg, _linear_graph()).queues["w"].tags
    trained = _compiled(_config(), _linear_graph(trained=True))  # the optimizer rewrites it on the device
    assert MANTISSA_BITS not in trained.queues["w"].tags


def test_the_host_rounds_to_nearest_even_before_writing():
    rec = QueueIO(queue="w", kind="parameter", name="w", framework_shape=(2, 3), tensor="w", mantissa_bits=4)
    value = torch.tensor([[1.03125, 1.09375, 1.0624], [-1.09375, 1 / 48, 0.0]])
    written = to_device_layout(rec, value)[0, 0, :2, :3]
    assert written.tolist() == [[1.0, 1.125, 1.0625], [-1.125, 1.3125 / 64, 0.0]]
    assert torch.equal(to_device_layout(rec, value, rounded=False)[0, 0, :2, :3], value)
    assert torch.equal(round_mantissa(written, 4), written)  # what LoFi reads of it: all of it
    again = QueueIO.from_dict(rec.to_dict())
    assert again.mantissa_bits == 4


@pytest.mark.parametrize("bits, kind", [(99, "parameter"), (True, "parameter"), ("4", "constant"), (4, "input")])
def test_a_bad_rounding_record_is_refused(bits, kind):
    with pytest.raises(ValueError, match="queue 'w'"):
        QueueIO(queue="w", kind=kind, name="w", mantissa_bits=bits)


def _deep_linear(depth=8, width=256):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(width, width, bias=False) for _ in range(depth)]
    for layer in layers:
        torch.nn.init.normal_(layer.weight, std=width ** -0.5)
    return torch.nn.Sequential(*layers).eval()


def _gain(rounding):
    model = _deep_linear()
    x = torch.randn(1, 32, 256)
    pybuda.set_configuration_options(default_df_override=DF.Bfp8_b, math_fidelity=MF.LoFi)
    pybuda.config._get_global_compiler_config().lofi_rounding = rounding
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("deep", model), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    with torch.no_grad():
        want = model(x)
    pybuda.pybuda_reset()
    return float(got.norm() / want.norm())


def test_rounded_weights_keep_the_gain_of_a_deep_network():
    # Truncated, every weight of 8 linear layers loses ~1 % towards zero and the output shrinks with depth;
    # rounded, the errors have no sign and the gain stays.
    assert _gain(rounding=False) < 0.95
    assert abs(_gain(rounding=True) - 1.0) < 0.02
