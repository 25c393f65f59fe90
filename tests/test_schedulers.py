"""pybuda.schedulers: lr sequences equal torch's, and they drive the update graph without a rebuild."""

from __future__ import annotations

import pytest
import torch

from pybuda.errors import ConfigError
from pybuda.optimizers import LAMB, SGD, Adam
from pybuda.schedulers import ExponentialLR, LambdaLR, LearningRateScheduler, StepLR, TorchLearningRateScheduler
from pybuda.verify import run_graph_on_cpu

#: float32 parameters over 10 steps (see tests/test_optimizers.py); lrs are Python floats, compared tightly.
RTOL = 1e-5
ATOL = 1e-5
LR_RTOL = 1e-12
STEPS = 10


def _warmup(step: int) -> float:
    return min(1.0, (step + 1) / 4)


#: pybuda scheduler factory, torch scheduler factory over the same formula.
SCHEDULES = {
    "constant": (LearningRateScheduler, lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0)),
    "step": (lambda o: StepLR(o, step_size=3, gamma=0.5),
             lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    "exponential": (lambda o: ExponentialLR(o, gamma=0.8),
                    lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.8)),
    "lambda_warmup": (lambda o: LambdaLR(o, _warmup), lambda o: torch.optim.lr_scheduler.LambdaLR(o, _warmup)),
}


def _torch_lrs(make_torch_sched, lr: float, steps: int = STEPS):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    sched = make_torch_sched(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("case", sorted(SCHEDULES))
def test_lr_sequence_equals_torch_scheduler(case):
    make, make_torch = SCHEDULES[case]
    opt = SGD(0.2)
    sched = make(opt)
    lrs = [sched.get_lr()]
    for _ in range(STEPS):
        sched.step()
        assert opt.learning_rate == sched.get_lr()
        assert sched.get_scheduler_params()["lr"].item() == pytest.approx(opt.learning_rate, rel=1e-6)
        lrs.append(opt.learning_rate)
    assert lrs == pytest.approx(_torch_lrs(make_torch, 0.2), rel=LR_RTOL)
    # and the torch twin of the pybuda scheduler gives the same sequence again
    assert _torch_lrs(make(SGD(0.2)).get_pytorch_scheduler, 0.2) == pytest.approx(lrs, rel=LR_RTOL)


def test_get_pytorch_scheduler_is_a_torch_scheduler():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    ts = StepLR(SGD(1.0), step_size=2).get_pytorch_scheduler(opt)
    assert isinstance(ts, TorchLearningRateScheduler)
    assert isinstance(ts, torch.optim.lr_scheduler.LRScheduler)


@pytest.mark.parametrize("make_opt,make_torch_opt", [
    (lambda: SGD(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    (lambda: Adam(0.05, weight_decay=0.01), lambda p: torch.optim.Adam(p, lr=0.05, weight_decay=0.01)),
])
@pytest.mark.parametrize("case", ["step", "exponential"])
def test_scheduler_drives_update_graph_without_rebuild(make_opt, make_torch_opt, case):
    make, make_torch = SCHEDULES[case]
    gen = torch.Generator().manual_seed(0)
    shapes = {"w": (17, 45), "b": (45,), "k": (3, 5, 7)}
    params = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    grads = [{n: torch.randn(s, generator=gen) for n, s in shapes.items()} for _ in range(STEPS)]

    opt = make_opt()
    sched = make(opt)
    ug = opt.build_update_graph({n: (v.shape, v.dtype) for n, v in params.items()})
    graph_json = ug.graph.to_json()
    cur, state, got, lrs = dict(params), ug.initial_state(), [], []
    for grad in grads:
        lrs.append(ug.hyperparameters()["lr"].item())
        cur, state = ug.split_outputs(run_graph_on_cpu(ug.graph, ug.inputs(grad), ug.parameter_values(cur, state)))
        got.append(cur)
        sched.step()
    assert ug.graph.to_json() == graph_json  # the same graph all along
    assert len(set(lrs)) > 1  # and the learning rate did change

    tensors = {n: torch.nn.Parameter(v.clone()) for n, v in params.items()}
    topt = make_torch_opt(list(tensors.values()))
    tsched = make_torch(topt)
    for i, grad in enumerate(grads):
        for n, t in tensors.items():
            t.grad = grad[n].clone()
        topt.step()
        tsched.step()
        for n, t in tensors.items():
            torch.testing.assert_close(got[i][n], t.detach(), rtol=RTOL, atol=ATOL, msg=lambda m: f"step {i} {n}: {m}")


def test_scheduler_updates_torch_parameter_update_golden():
    opt = LAMB(0.1)
    sched = ExponentialLR(opt, gamma=0.5)
    w, g = torch.ones(2, 2), torch.ones(2, 2)
    opt.torch_parameter_update(parameter_name="w", parameter=w, gradient=g)
    sched.step()
    _, torch_opt = opt._torch_golden["w"]
    assert torch_opt.param_groups[0]["lr"] == pytest.approx(0.05)


@pytest.mark.parametrize("make,match", [
    (lambda: LearningRateScheduler("sgd"), "must be a pybuda.optimizers.Optimizer"),
    (lambda: StepLR(SGD(0.1), step_size=0), "step_size must be a positive integer"),
    (lambda: StepLR(SGD(0.1), step_size=2, gamma=-1.0), "gamma must be a positive number"),
    (lambda: ExponentialLR(SGD(0.1), gamma=float("inf")), "gamma must be a positive number"),
    (lambda: LambdaLR(SGD(0.1), 3), "lr_lambda must be callable"),
    (lambda: LambdaLR(SGD(0.1), lambda s: -1.0).step(), "invalid learning rate"),
    (lambda: LearningRateScheduler(SGD(0.1)).get_pytorch_scheduler("opt"), "torch.optim.Optimizer"),
])
def test_bad_scheduler_arguments(make, match):
    with pytest.raises(ConfigError, match=match):
        make()
