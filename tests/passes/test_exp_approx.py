"""``exp_approx`` (TT-Buda's PYBUDA_EXP_APPROX): exp in the SFPU's approximate mode, in the netlist, the
golden's numerics and the cycle model; Ribbon prices standalone ops exact, as TT-Buda did. The golden also
computes an approximate reciprocal when a netlist asks for one."""

import math

import pytest
import torch

import pybuda
from pass_helpers import lower, make_ctx
from pybuda.balancer.legalizer import Legalizer
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat as DF
from pybuda.ir.graph import Graph
from pybuda.netlist.device_ops import find_device_op
from pybuda.netlist.sfpu_approx import approximate_exp, approximate_reciprocal, newton_reciprocal
from pybuda.passes.lowered.approximate_sfpu import mark_approximate_exp
from pybuda.passes.lowered.data_formats import set_data_formats
from pybuda.passes.lowered.fuse_ops import fuse_elementwise_ops


def test_approximate_exp_is_schraudolphs_form():
    x = torch.linspace(-41.0, 44.0, 20001)
    y = x.double() / math.log(2.0)
    schraudolph = torch.pow(2.0, torch.floor(y)) * (1.0 + y - torch.floor(y))
    got = approximate_exp(x).double()
    assert torch.allclose(got, schraudolph, rtol=2e-5, atol=0.0)
    ratio = got / torch.exp(x.double())
    assert ratio.min() >= 1.0 - 1e-4 and ratio.max() <= 1.0615  # never below e^x, at most 6.1 % above
    edges = approximate_exp(torch.tensor([0.0, 89.0, 1000.0, -42.5, -1000.0]))
    assert edges.tolist() == [1.0, math.inf, math.inf, 0.0, 0.0]


def test_newton_reciprocal_converges_as_the_sfpu_does():
    x = torch.cat([torch.logspace(-30, 30, 4001), -torch.logspace(-30, 30, 401)])
    err = {n: ((newton_reciprocal(x, n).double() * x.double()) - 1.0).abs().max().item() for n in (2, 3)}
    assert 0.01 < err[2] < 0.04 and err[3] < 0.002  # quadratic convergence from a 19 % first guess
    assert torch.equal(approximate_reciprocal(x), newton_reciprocal(x, 2))
    assert (torch.sign(approximate_reciprocal(x)) == torch.sign(x)).all()
    assert approximate_reciprocal(torch.tensor([2.0 ** 127])).item() == 0.0  # exponent underflow saturates to 0


def _exp_graph(then="reciprocal", with_gelu=False):
    """exp of x (of gelu(x) with ``with_gelu``), followed by a ``then`` op."""
    g = Graph("g")
    g.add_input("x", (1, 64, 64))
    src = "x"
    if with_gelu:
        g.add_op("act", "gelu", ["x"])
        src = "act"
    g.add_op("e", "exp", [src])
    g.add_op("r", then, ["e"])
    g.add_output("out", "r")
    return g


def _lowered(graph, approx=True, fusing=False, policy=None):
    cfg = CompilerConfig()
    cfg.exp_approx = approx
    cfg.enable_auto_fusing = fusing
    if policy:
        cfg.balancer_policy = policy
    ctx = make_ctx(cfg)
    bg = fuse_elementwise_ops(set_data_formats(lower(graph, ctx), ctx), ctx)
    return mark_approximate_exp(bg, ctx), ctx


def test_exp_gets_approximate_mode_only_when_asked():
    on, _ = _lowered(_exp_graph())
    marked = {op.type for op in on.ops.values() if op.attrs.get("approximate_mode")}
    assert marked == {"exp"}  # a reciprocal stays exact: its error would scale every layer norm
    off, _ = _lowered(_exp_graph(), approx=False)
    assert not any(op.attrs.get("approximate_mode") for op in off.ops.values())


@pytest.mark.parametrize("then, with_gelu, marked", [("sqrt", False, True), ("reciprocal", False, False),
                                                      ("sqrt", True, False)])
def test_a_fused_op_carries_the_flag_unless_it_holds_another_approximation(then, with_gelu, marked):
    # The flag sits on the fused op and holds for all its SFPU sub-ops: it is set only where it changes exp alone.
    fused, _ = _lowered(_exp_graph(then, with_gelu), fusing=True)
    ops = [op for op in fused.ops.values() if op.type == "fused_op"]
    assert ops and all(bool(op.attrs.get("approximate_mode")) == marked for op in ops)


def test_the_environment_switch_is_ttbudas(monkeypatch):
    monkeypatch.setenv("PYBUDA_EXP_APPROX", "1")
    assert CompilerConfig().exp_approx
    monkeypatch.setenv("PYBUDA_EXP_APPROX", "0")
    assert not CompilerConfig().exp_approx


def test_the_cycle_model_prices_approximate_mode():
    row = find_device_op("exp")
    wh = row.cycles["wormhole_b0"].coefficients
    assert wh["approx_tile"] < 0.5 * wh["tile"]
    bg, ctx = _lowered(_exp_graph(), policy="NLP")
    exp = next(op for op in bg.ops.values() if op.type == "exp")
    device = ctx.device
    nlp = Legalizer(bg, device, ctx.config).models(exp)
    ribbon_cfg = CompilerConfig(balancer_policy="Ribbon")
    ribbon = Legalizer(bg, device, ribbon_cfg).models(exp)
    exact_bg, exact_ctx = _lowered(_exp_graph(), approx=False, policy="NLP")
    exact_op = next(op for op in exact_bg.ops.values() if op.type == "exp")
    exact = Legalizer(exact_bg, device, exact_ctx.config).models(exact_op)
    # NLP sees the cheaper kernel; Ribbon, like TT-Buda's balancer, prices the standalone op as exact
    assert min(m.kernel_cycles for m in nlp) < 0.6 * min(m.kernel_cycles for m in exact)
    assert [m.kernel_cycles for m in ribbon] == [m.kernel_cycles for m in exact]


def _softmax_run(approx):
    torch.manual_seed(0)
    x = torch.randn(1, 1, 64, 128) * 3

    class Softmax(torch.nn.Module):
        def forward(self, t):
            return torch.softmax(t, dim=-1)

    pybuda.set_configuration_options(default_df_override=DF.Float16_b)
    pybuda.config._get_global_compiler_config().exp_approx = approx
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("softmax", Softmax()), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    pybuda.pybuda_reset()
    return got, torch.softmax(x, dim=-1)


@pytest.mark.slow
def test_the_golden_runs_the_approximations():
    exact, want = _softmax_run(approx=False)
    approx, _ = _softmax_run(approx=True)
    assert not torch.equal(exact, approx)  # the approximation reaches the numbers
    for got in (exact, approx):
        pcc = torch.corrcoef(torch.stack([got.flatten(), want.flatten()]))[0, 1].item()
        assert pcc >= 0.99
    # rows still sum to about 1: exp's error is mostly shared by a row, reciprocal's is within 4 %
    assert torch.allclose(approx.sum(-1), torch.ones(1), atol=0.06)
