"""Instance norm runs on the device; batch norms that cannot say why accurately.

Instance norm standardises each sample's channels over their own spatial dims: no statistic spans the samples,
so it is ordinary device work in eval and training mode alike. It used to reach the mapping as torch's
decomposition (the batch folded into the channels of a training-mode batch norm) and fell back to the CPU
with "batch norm in training mode ... call model.eval()", on a model already in eval mode.
"""

import logging

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import pybuda
from pybuda.frontend.torch import capture
from pybuda.verify import calculate_pcc

#: On the simulated chip at its default formats (bfloat16 activations) against float32 torch.
DEVICE_PCC = 0.99


class ConvInstanceNorm(nn.Module):
    def __init__(self, norm: nn.Module, conv=nn.Conv2d):
        super().__init__()
        self.conv = conv(3, 16, 3, padding=1)
        self.norm = norm
        self.head = conv(16, 8, 1)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.conv(x))))


class FunctionalInstanceNorm(nn.Module):
    def forward(self, x):
        return F.instance_norm(x) * 2 + 1


def _prepared(norm: nn.Module, conv=nn.Conv2d) -> nn.Module:
    """An eval-mode model around ``norm``, with a non-trivial affine and (if tracked) warmed running statistics."""
    torch.manual_seed(0)
    model = ConvInstanceNorm(norm, conv)
    if getattr(norm, "weight", None) is not None:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    if norm.track_running_stats:
        model.train()
        shape = (4, 3, 16, 16) if conv is nn.Conv2d else (4, 3, 32)
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(shape) * 2 + 1)
    return model.eval()


CASES = {
    "plain": lambda: _prepared(nn.InstanceNorm2d(16)),
    "affine": lambda: _prepared(nn.InstanceNorm2d(16, affine=True)),
    "running_stats": lambda: _prepared(nn.InstanceNorm2d(16, track_running_stats=True)),
    "affine_running_stats": lambda: _prepared(nn.InstanceNorm2d(16, affine=True, track_running_stats=True)),
    "1d_affine": lambda: _prepared(nn.InstanceNorm1d(16, affine=True), nn.Conv1d),
}


def _input(name: str) -> torch.Tensor:
    shape = (2, 3, 32) if name.startswith("1d") else (2, 3, 16, 16)
    return torch.randn(shape, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", sorted(CASES))
def test_instance_norm_in_eval_is_mapped_for_the_device(name, fe):
    model, x = CASES[name](), _input(name)
    result = fe.check(model, x)  # fallback off: any unmapped op fails here
    assert not result.report.fallback_ops
    assert capture(model, (x,), for_device=True).report.fallback_ops == []


def test_functional_instance_norm_and_training_mode_are_mapped(fe):
    fe.check(FunctionalInstanceNorm(), _input("plain")[:, :, :4])
    # Training mode too: instance norm's statistics are per sample whatever the mode.
    model = _prepared(nn.InstanceNorm2d(16, affine=True)).train()
    assert capture(model, (_input("plain"),), for_device=True).report.fallback_ops == []


@pytest.mark.parametrize("name", ["affine", "affine_running_stats"])
def test_instance_norm_runs_on_the_device(name):
    model, x = CASES[name](), _input(name)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("inorm", model))
    got = pybuda.run_inference(inputs=[(x,)]).get(timeout=300)[0].value()
    with torch.no_grad():
        want = model(x)
    assert calculate_pcc(got.float(), want) >= DEVICE_PCC


def test_batch_norm_without_running_statistics_says_so_not_eval():
    # In eval mode already: a layer that keeps no running statistics uses the batch's in eval mode too.
    model = ConvInstanceNorm(nn.BatchNorm2d(16, track_running_stats=False)).eval()
    (op,) = capture(model, (_input("plain"),), for_device=True).report.fallback_ops
    assert "batch's own statistics" in op.reason and "track_running_stats=False" in op.reason
    assert "eval()" not in op.reason


def test_batch_norm_in_training_mode_says_call_eval():
    model = ConvInstanceNorm(nn.BatchNorm2d(16)).train()
    (op,) = capture(model, (_input("plain"),), for_device=True).report.fallback_ops
    assert "training mode" in op.reason and "model.eval()" in op.reason


def test_group_norm_stays_on_the_device(fe):
    model = ConvInstanceNorm(nn.GroupNorm(4, 16)).eval()
    result = fe.check(model, _input("plain"))
    assert not result.report.fallback_ops


def test_torch_compile_graphs_are_not_called_training_mode(caplog):
    # Dynamo's GraphModules are always flagged as training; their ops carry the mode they were traced in.
    from pybuda.frontend.torch_compile import make_backend

    torch._dynamo.reset()
    model = _prepared(nn.InstanceNorm2d(16, affine=True))
    with caplog.at_level(logging.WARNING, logger="pybuda.frontend.torch"):
        with torch.no_grad():
            got = torch.compile(model, backend=make_backend())(_input("plain"))
    torch._dynamo.reset()
    assert not [r for r in caplog.records if "training mode" in r.getMessage()]
    with torch.no_grad():
        assert calculate_pcc(got, model(_input("plain"))) >= 0.99
