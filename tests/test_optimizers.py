"""pybuda.optimizers: the update graph against torch.optim and the published-rule twins."""

from __future__ import annotations

import math

import pytest
import torch

import pybuda
from pybuda.errors import ConfigError
from pybuda.ir.graph import Graph
from pybuda.optimizers import (
    LAMB, LARS, SGD, Adam, AdamW, Optimizer, TorchAdamNoBiasCorrection, TorchLAMB, TorchLARS,
    get_optimizer_type_from_string, optimizer_from_config,
)
from pybuda.verify import run_graph_on_cpu

#: float32, 10 steps: the graph and torch compute the same formulas in a different association order
#: (e.g. torch divides sqrt(v) by sqrt(1 - beta2^t), the graph divides v by 1 - beta2^t).
RTOL = 1e-5
ATOL = 1e-5  # parameters are O(1); Adam-type updates amplify rounding where v is tiny
STEPS = 10
SHAPES = {"w": (17, 45), "b": (45,), "k": (3, 5, 7)}


def _initial(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g) for n, s in SHAPES.items()}


def _gradients(seed: int = 1, steps: int = STEPS):
    g = torch.Generator().manual_seed(seed)
    return [{n: torch.randn(s, generator=g) for n, s in SHAPES.items()} for _ in range(steps)]


def graph_trajectory(opt: Optimizer, params, grads, between_steps=None):
    """Run the update graph step by step on the CPU interpreter, feeding parameters and state back."""
    ug = opt.build_update_graph({n: (tuple(v.shape), v.dtype) for n, v in params.items()})
    state = ug.initial_state()
    params = {n: v.clone() for n, v in params.items()}
    out = []
    for i, grad in enumerate(grads):
        outputs = run_graph_on_cpu(ug.graph, ug.inputs(grad), ug.parameter_values(params, state))
        params, state = ug.split_outputs(outputs)
        out.append(params)
        if between_steps is not None:
            between_steps(i)
    return out, ug


def torch_trajectory(make_opt, params, grads, between_steps=None):
    """Run a torch optimizer over the same gradients."""
    tensors = {n: torch.nn.Parameter(v.clone()) for n, v in params.items()}
    opt = make_opt(list(tensors.values()))
    out = []
    for i, grad in enumerate(grads):
        for n, t in tensors.items():
            t.grad = grad[n].clone()
        opt.step()
        out.append({n: t.detach().clone() for n, t in tensors.items()})
        if between_steps is not None:
            between_steps(i, opt)
    return out


def assert_same(a, b, rtol=RTOL, atol=ATOL):
    assert len(a) == len(b)
    for step, (x, y) in enumerate(zip(a, b)):
        for n in x:
            assert torch.isfinite(x[n]).all(), f"step {step} {n}: non-finite"
            torch.testing.assert_close(x[n], y[n], rtol=rtol, atol=atol, msg=lambda m: f"step {step} {n}: {m}")


# --- (a) the update graph against torch.optim ----------------------------------------------------------------

TORCH_CASES = {
    "sgd": (lambda: SGD(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    "adam": (lambda: Adam(0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    "adam_l2": (lambda: Adam(0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, weight_decay=0.05),
                lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)),
    "adam_enable_w": (lambda: Adam(0.01, weight_decay=0.1, enable_adam_w=True),
                      lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
    "adamw": (lambda: AdamW(), lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)),
    "adamw_big_wd": (lambda: AdamW(0.02, eps=1e-7, weight_decay=0.3),
                     lambda p: torch.optim.AdamW(p, lr=0.02, eps=1e-7, weight_decay=0.3)),
    "adamw_no_wd": (lambda: AdamW(0.01, weight_decay=0.0), lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0)),
}


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_update_graph_matches_torch_optim(case):
    make_pybuda, make_torch = TORCH_CASES[case]
    params, grads = _initial(), _gradients()
    got, _ = graph_trajectory(make_pybuda(), params, grads)
    want = torch_trajectory(make_torch, params, grads)
    assert_same(got, want)
    # the run really moved the parameters
    assert not torch.allclose(got[-1]["w"], params["w"])


TWIN_CASES = {
    "adam_no_bias_correction": (lambda: Adam(0.01, bias_correction=False),
                                lambda p: TorchAdamNoBiasCorrection(p, lr=0.01)),
    "adam_no_bias_correction_l2": (lambda: Adam(0.01, weight_decay=0.1, bias_correction=False),
                                   lambda p: TorchAdamNoBiasCorrection(p, lr=0.01, weight_decay=0.1)),
    "adamw_no_bias_correction": (lambda: AdamW(0.01, weight_decay=0.1, bias_correction=False),
                                 lambda p: TorchAdamNoBiasCorrection(p, lr=0.01, weight_decay=0.1, decoupled=True)),
    "lamb": (lambda: LAMB(0.01), lambda p: TorchLAMB(p, lr=0.01)),
    "lamb_correction": (lambda: LAMB(0.01, correction=True, weight_decay=0.1),
                        lambda p: TorchLAMB(p, lr=0.01, correction=True, weight_decay=0.1)),
    "lamb_clip_no_wd": (lambda: LAMB(0.05, beta1=0.8, eps=1e-5, weight_decay=0.0, clip_value=(0.5, 3.0)),
                        lambda p: TorchLAMB(p, lr=0.05, betas=(0.8, 0.999), eps=1e-5, weight_decay=0.0,
                                            clip_value=(0.5, 3.0))),
    "lars": (lambda: LARS(0.1), lambda p: TorchLARS(p, lr=0.1)),
    "lars_nesterov": (lambda: LARS(0.1, nesterov=True, lars_coeff=0.01),
                      lambda p: TorchLARS(p, lr=0.1, nesterov=True, lars_coeff=0.01)),
    "lars_no_momentum": (lambda: LARS(0.5, momentum=0.0, weight_decay=0.0),
                         lambda p: TorchLARS(p, lr=0.5, momentum=0.0, weight_decay=0.0)),
    "lars_dampening": (lambda: LARS(0.1, momentum=0.8, dampening=0.3, weight_decay=0.05),
                       lambda p: TorchLARS(p, lr=0.1, momentum=0.8, dampening=0.3, weight_decay=0.05)),
}


@pytest.mark.parametrize("case", sorted(TWIN_CASES))
def test_update_graph_matches_published_rule_twins(case):
    make_pybuda, make_torch = TWIN_CASES[case]
    params, grads = _initial(), _gradients()
    got, _ = graph_trajectory(make_pybuda(), params, grads)
    want = torch_trajectory(make_torch, params, grads)
    assert_same(got, want)
    assert not torch.allclose(got[-1]["w"], params["w"])


# --- the twins against the published formulas, one step in float64 ---------------------------------------


def test_lamb_twin_one_step_by_hand():
    w = torch.tensor([3.0, -4.0], dtype=torch.float64)  # ||w|| = 5
    g = torch.tensor([1.0, 2.0], dtype=torch.float64)
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-6, 0.01
    m, v = (1 - b1) * g, (1 - b2) * g * g
    u = m / (v.sqrt() + eps) + wd * w
    expected = w - lr * (min(max(5.0, 0.0), 10.0) / u.norm()) * u
    p = torch.nn.Parameter(w.clone())
    opt = TorchLAMB([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    p.grad = g.clone()
    opt.step()
    torch.testing.assert_close(p.detach(), expected, rtol=1e-12, atol=1e-12)


def test_lars_twin_two_steps_by_hand():
    w = torch.tensor([3.0, -4.0], dtype=torch.float64)
    g = torch.tensor([0.6, 0.8], dtype=torch.float64)  # ||g|| = 1
    lr, mu, wd, coeff, eps = 0.1, 0.9, 0.01, 1e-3, 1e-8
    p = torch.nn.Parameter(w.clone())
    opt = TorchLARS([p], lr=lr, momentum=mu, weight_decay=wd, lars_coeff=coeff, eps=eps)
    buf = torch.zeros(2, dtype=torch.float64)
    expected = w.clone()
    for _ in range(2):
        local = coeff * expected.norm() / (g.norm() + wd * expected.norm() + eps)
        buf = mu * buf + local * (g + wd * expected)
        expected = expected - lr * buf
        p.grad = g.clone()
        opt.step()
    torch.testing.assert_close(p.detach(), expected, rtol=1e-12, atol=1e-12)


# --- (b) get_pytorch_optimizer gives the same trajectory -------------------------------------------------


ALL_CASES = {**{k: v[0] for k, v in TORCH_CASES.items()}, **{k: v[0] for k, v in TWIN_CASES.items()}}


@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_get_pytorch_optimizer_same_trajectory(case):
    opt = ALL_CASES[case]()
    params, grads = _initial(2), _gradients(3)
    got, _ = graph_trajectory(opt, params, grads)
    want = torch_trajectory(lambda p: opt.get_pytorch_optimizer(p), params, grads)
    assert_same(got, want)


def test_get_pytorch_optimizer_types_and_lr_override():
    p = [torch.nn.Parameter(torch.zeros(3))]
    assert type(SGD(0.1).get_pytorch_optimizer(p)) is torch.optim.SGD
    assert type(Adam(0.1).get_pytorch_optimizer(p)) is torch.optim.Adam
    assert type(AdamW().get_pytorch_optimizer(p)) is torch.optim.AdamW
    assert type(Adam(0.1, enable_adam_w=True).get_pytorch_optimizer(p)) is torch.optim.AdamW
    assert type(Adam(0.1, bias_correction=False).get_pytorch_optimizer(p)) is TorchAdamNoBiasCorrection
    assert type(LAMB().get_pytorch_optimizer(p)) is TorchLAMB
    assert type(LARS().get_pytorch_optimizer(p)) is TorchLARS
    torch_opt = SGD(0.1).get_pytorch_optimizer({"x": p[0]}, lr=0.5)  # a dict name -> tensor works too
    assert torch_opt.param_groups[0]["lr"] == 0.5


@pytest.mark.parametrize("case", ["sgd", "adam_l2", "lamb_correction", "lars_nesterov"])
def test_torch_parameter_update_is_golden(case):
    opt = ALL_CASES[case]()
    params, grads = _initial(4), _gradients(5)
    got, _ = graph_trajectory(opt, params, grads)
    golden, cur = [], dict(params)
    for grad in grads:
        cur = {n: opt.torch_parameter_update(parameter_name=n, parameter=cur[n], gradient=grad[n]) for n in cur}
        golden.append(cur)
    assert_same(got, golden)


# --- the graph's shape: names, state, hyper-parameters, ops -------------------------------------------------


def test_update_graph_names_and_order():
    opt = Adam(0.01)
    ug = opt.build_update_graph({"w": ((17, 45), torch.float32), "b": ((45,), torch.float32)})
    g = ug.graph
    assert [n.name for n in g.inputs] == ["grad.w", "grad.b"]
    assert ug.param_names == ["w", "b"]
    assert ug.param_outputs == {"w": "w.new", "b": "b.new"}
    states = ["w.mean", "w.variance", "w.beta1_pow", "w.beta2_pow", "b.mean", "b.variance", "b.beta1_pow",
              "b.beta2_pow"]
    assert list(ug.state_outputs) == states
    assert [n.name for n in g.outputs] == ["w.new", "b.new"] + [s + ".new" for s in states]
    params = {n.name for n in g.parameters}
    assert {"w", "b", "lr"} | set(states) == params
    assert g["w"].shape == (17, 45) and g["lr"].shape == (1, 1)
    init = ug.initial_state()
    assert torch.equal(init["w.mean"], torch.zeros(17, 45))
    assert torch.equal(init["w.beta1_pow"], torch.ones(1, 1))
    assert init["b.beta2_pow"].shape == (1,)
    assert ug.state_names["b.mean"] == "b"
    # device-expressible: elementwise ops, one-dim reductions, and rank/dtype views of the hyper-parameters
    allowed = {"add", "subtract", "multiply", "divide", "sqrt", "square", "greater", "where", "clip",
               "reduce_sum", "reshape", "cast"}
    for name, make in ALL_CASES.items():
        ops = {n.op_type for n in make().build_update_graph({"w": ((3, 5, 7), torch.float32),
                                                             "b": ((45,), torch.float32)}).graph.ops}
        assert ops <= allowed, (name, ops - allowed)


@pytest.mark.parametrize("make,keys", [
    (lambda: SGD(0.1), []),
    (lambda: Adam(0.1), ["mean", "variance", "beta1_pow", "beta2_pow"]),
    (lambda: Adam(0.1, bias_correction=False), ["mean", "variance"]),
    (lambda: LAMB(), ["mean", "variance"]),
    (lambda: LAMB(correction=True), ["mean", "variance", "beta1_pow", "beta2_pow"]),
    (lambda: LARS(), ["momentum"]),
    (lambda: LARS(momentum=0.0), []),
])
def test_state_keys(make, keys):
    assert make().get_optimizer_state_keys() == keys


def test_hyperparameters_follow_set_optimizer_parameters():
    opt = SGD(0.1)
    ug = opt.build_update_graph({"w": ((4, 4), torch.float32)})
    assert ug.hyperparameters()["lr"].item() == pytest.approx(0.1)
    opt.set_optimizer_parameters(learning_rate=0.25)
    assert ug.hyperparameters()["lr"].shape == (1, 1)
    assert ug.hyperparameters()["lr"].item() == pytest.approx(0.25)
    opt.set_optimizer_parameters()  # None leaves it alone
    assert opt.learning_rate == 0.25
    w, grad = torch.ones(4, 4), torch.full((4, 4), 2.0)
    new, _ = ug.step({"w": w}, {"w": grad}, ug.initial_state())
    torch.testing.assert_close(new["w"], torch.full((4, 4), 0.5))


def test_parameters_and_param_dict():
    w = pybuda.Parameter(torch.randn(8, 4), name="lin.weight")
    b = pybuda.Parameter(torch.randn(4), name="lin.bias")
    opt = Adam(0.01, parameters=[w, b])
    assert opt.parameter_names == ["lin.weight", "lin.bias"]
    d = opt.get_param_dict()
    assert set(d) == {"lin.weight", "lin.bias"}
    assert set(d["lin.weight"]) == {"lr", "mean", "variance", "beta1_pow", "beta2_pow"}
    assert d["lin.bias"]["mean"].shape == (4,)
    assert opt.get_optimizer_params("other", True) is None
    ug = opt.build_update_graph()  # shapes from the Parameters
    assert ug.param_names == ["lin.weight", "lin.bias"]
    by_name = SGD(0.1, parameters=["a", "b"])
    assert by_name.parameter_names == ["a", "b"]
    assert by_name.get_optimizer_params("a", False) == {"lr": torch.tensor([[0.1]])}
    with pytest.raises(ConfigError, match="shapes"):
        by_name.build_update_graph()
    by_name.set_parameters_to_optimize([w])
    assert by_name.parameter_names == ["lin.weight"]
    assert Adam(0.1, device_params=True).device_params is True


def test_graph_json_round_trip():
    ug = LAMB(correction=True).build_update_graph({"w": ((5, 3), torch.float32), "b": ((3,), torch.float32)})
    again = Graph.from_json(ug.graph.to_json(), ug.graph.tensors)
    assert [n.name for n in again] == [n.name for n in ug.graph]


def test_type_strings_and_config():
    for s, cls in {"sgd": SGD, "adam": Adam, "adamw": AdamW, "lars": LARS, "lamb": LAMB}.items():
        assert get_optimizer_type_from_string(s) is cls
    assert get_optimizer_type_from_string("AdamW") is AdamW
    opt = optimizer_from_config({"type": "sgd", "params": {"learning_rate": 50.0}})
    assert isinstance(opt, SGD) and opt.learning_rate == 50.0
    for make in ALL_CASES.values():
        o = make()
        again = optimizer_from_config(o.to_config())
        assert type(again) is type(o) and again.to_config() == o.to_config()


def test_top_level_names_resolve_to_this_module():
    # pybuda/__init__.py's lazy table may not list these yet; the module path is what it should point to.
    import pybuda.optimizers as m
    assert {"SGD", "Adam", "AdamW", "LAMB", "LARS"} <= set(m.__all__)


# --- (d) bad arguments, and no NaN on zeros -------------------------------------------------------------------


@pytest.mark.parametrize("make,match", [
    (lambda: SGD(-0.1), "learning_rate must be >= 0"),
    (lambda: SGD(float("nan")), "learning_rate must be a finite number"),
    (lambda: SGD("0.1"), "learning_rate must be a finite number"),
    (lambda: Adam(-1e-3), "learning_rate must be >= 0"),
    (lambda: Adam(0.1, beta1=1.0), r"beta1 must be in \[0, 1\)"),
    (lambda: Adam(0.1, beta2=-0.5), r"beta2 must be in \[0, 1\)"),
    (lambda: AdamW(beta1=1.5), r"beta1 must be in \[0, 1\)"),
    (lambda: AdamW(eps=-1.0), "epsilon must be >= 0"),
    (lambda: Adam(0.1, weight_decay=-0.1), "weight_decay must be >= 0"),
    (lambda: Adam(0.1, bias_correction="yes"), "bias_correction must be True or False"),
    (lambda: LAMB(beta2=1.0), r"beta2 must be in \[0, 1\)"),
    (lambda: LAMB(clip_value=(5.0, 1.0)), "clip_value min"),
    (lambda: LAMB(clip_value=3.0), "clip_value must be a"),
    (lambda: LARS(momentum=-0.9), "momentum must be >= 0"),
    (lambda: LARS(momentum=0.0, nesterov=True), "nesterov"),
    (lambda: LARS(lars_coeff=-1.0), "lars_coeff must be >= 0"),
    (lambda: SGD(0.1, parameters=[3]), "Parameter or a name"),
    (lambda: get_optimizer_type_from_string("rmsprop"), "unknown optimizer type 'rmsprop'"),
    (lambda: optimizer_from_config({"type": "sgd", "params": {"lr": 1}}), "bad parameters"),
    (lambda: SGD(0.1).set_optimizer_parameters(learning_rate=-2.0), "learning_rate must be >= 0"),
    (lambda: SGD(0.1).build_update_graph({}), "at least one parameter"),
    (lambda: SGD(0.1).build_update_graph({"w": ((2, 2), torch.int32)}), "floating dtype"),
    (lambda: SGD(0.1).build_update_graph({"lr": ((2, 2), torch.float32)}), "clashes"),
])
def test_bad_arguments_raise_config_error(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_config_error_is_a_pybuda_error():
    with pytest.raises(pybuda.errors.PybudaError):
        get_optimizer_type_from_string("nope")


@pytest.mark.parametrize("case", sorted(ALL_CASES))
@pytest.mark.parametrize("zero", ["weights", "gradients", "both"])
def test_zero_weights_or_gradients_give_no_nan(case, zero):
    opt = ALL_CASES[case]()
    params = _initial(6)
    grads = _gradients(7, steps=3)
    if zero in ("weights", "both"):
        params = {n: torch.zeros_like(v) for n, v in params.items()}
    if zero in ("gradients", "both"):
        grads = [{n: torch.zeros_like(v) for n, v in g.items()} for g in grads]
    got, _ = graph_trajectory(opt, params, grads)
    want = torch_trajectory(lambda p: opt.get_pytorch_optimizer(p), params, grads)
    for step in got:
        for n, v in step.items():
            assert torch.isfinite(v).all(), (case, zero, n)
    assert_same(got, want)
    if zero == "both":  # nothing to do: the weights stay zero
        for n, v in got[-1].items():
            assert torch.equal(v, torch.zeros_like(v)), n


def test_lamb_and_lars_trust_ratio_is_one_for_zero_weights():
    # zero weights: trust ratio 1, so the first step is a plain Adam-direction / SGD step.
    g = torch.tensor([[1.0, -2.0, 0.5]])
    w = torch.zeros(1, 3)
    ug = LAMB(0.1, weight_decay=0.0).build_update_graph({"w": ((1, 3), torch.float32)})
    new, _ = ug.step({"w": w}, {"w": g}, ug.initial_state())
    expected = -0.1 * (0.1 * g) / ((0.001 * g * g).sqrt() + 1e-6)
    torch.testing.assert_close(new["w"], expected, rtol=RTOL, atol=ATOL)
    ug = LARS(0.1, momentum=0.0, weight_decay=0.0).build_update_graph({"w": ((1, 3), torch.float32)})
    new, _ = ug.step({"w": w}, {"w": g}, ug.initial_state())
    torch.testing.assert_close(new["w"], -0.1 * g, rtol=RTOL, atol=ATOL)
    assert math.isfinite(new["w"].sum().item())


def test_non_float32_parameters_get_cast_views_of_lr():
    ug = LAMB().build_update_graph({"w": ((4, 3), torch.bfloat16), "b": ((3,), torch.bfloat16)})
    views = {n.name: n.op_type for n in ug.graph.ops if n.op_type in ("cast", "reshape")}
    assert views == {"lr.r2.bfloat16": "cast", "lr.r1": "reshape", "lr.r1.bfloat16": "cast"}
    assert ug.initial_state()["w.mean"].dtype == torch.bfloat16
    assert ug.graph["w.new"].dtype == torch.bfloat16


def test_gradient_read_in_another_layout_is_reshaped_in_the_graph():
    """A gradient given in the layout a backward wrote it in (a conv weight's (1, out, in * kh * kw)) updates
    the parameter exactly as one given in the parameter's own shape; a layout of another size is refused."""
    shape, layout = (4, 2, 3, 3), (1, 4, 18)
    opt = pybuda.optimizers.Adam(learning_rate=0.01)
    plain = opt.build_update_graph({"w": (shape, torch.float32)})
    laid = opt.build_update_graph({"w": (shape, torch.float32)}, grad_layouts={"w": layout})
    assert tuple(laid.graph[laid.grad_inputs["w"]].shape) == layout
    g = torch.Generator().manual_seed(0)
    grad, w = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    state = plain.initial_state()
    want = run_graph_on_cpu(plain.graph, plain.inputs({"w": grad}), plain.parameter_values({"w": w}, state))
    got = run_graph_on_cpu(laid.graph, laid.inputs({"w": grad.reshape(layout)}), laid.parameter_values({"w": w}, state))
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    with pytest.raises(ConfigError, match="gradient layout"):
        opt.build_update_graph({"w": (shape, torch.float32)}, grad_layouts={"w": (1, 4, 17)})
