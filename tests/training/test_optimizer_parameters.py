"""An optimizer given some of a model's parameters (``parameters=[names]``) steps those and leaves the others
as they are, as torch's optimizer over a subset does, on the device and in CPU-fallback stages alike.

Found by ``tools/training_sweep.py`` (``optimize_subset*``): the device's trainer looked the list up under a
name the optimizers do not have and stepped every parameter; the fallback stages' torch twin took them all too.
"""

import copy

import pytest
import torch

import pybuda
from pybuda.errors import ConfigError

#: Float32 on the chip: TF32 products (as tests/training/test_training_api.py).
RTOL, ATOL = 2e-2, 2e-3


def float32_everywhere():
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     accumulate_df=pybuda.DataFormat.Float32,
                                     math_fidelity=pybuda.MathFidelity.HiFi4)


class SortNet(torch.nn.Module):
    """``a`` and sort run on a CPU pre-stage (sort is in ``cpu_fallback_ops``), ``b`` and ``c`` on the device."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = torch.nn.Linear(20, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.sort(self.a(x), dim=-1).values)))


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def _train(model, optimizer, steps=2):
    float32_everywhere()
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", model), optimizer=optimizer,
                          fp32_fallback=pybuda.DataFormat.Float32, arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(2, 20, generator=g), torch.randn(2, 10, generator=g)) for _ in range(steps)]
    for x, y in data:
        tt0.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    after = pybuda.run_training(steps=steps).get()[0]
    return {k: v.value() for k, v in after.items()}, data


@pytest.mark.parametrize("model, chosen", [(_mlp, ("2.weight", "0.bias")), (SortNet, ("a.weight", "c.weight"))],
                         ids=["device", "cpu_fallback_stage"])
def test_only_the_given_parameters_step(model, chosen):
    pybuda.config.add_cpu_fallback_ops("sort")
    model = model()
    twin = copy.deepcopy(model)
    initial = {n: p.detach().clone() for n, p in twin.named_parameters()}
    after, data = _train(model, pybuda.optimizers.SGD(learning_rate=0.1, parameters=list(chosen)))
    opt = torch.optim.SGD([p for n, p in twin.named_parameters() if n in chosen], lr=0.1)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(twin(x), y).backward()
        opt.step()
    for name, p in twin.named_parameters():
        got = after[name].reshape(p.shape)
        if name in chosen:
            assert not torch.equal(got, initial[name]), name
            assert torch.allclose(got, p.detach(), rtol=RTOL, atol=ATOL), name
        else:  # before the fix: stepped like the others (0.02 to 0.2 away)
            assert torch.equal(got, initial[name]), name


def test_a_parameter_name_the_model_lacks_is_a_config_error():
    with pytest.raises(ConfigError, match=r"given parameter\(s\) \['2.wieght'\].*trainable parameters: .*'2.weight'"):
        _train(_mlp(), pybuda.optimizers.SGD(learning_rate=0.1, parameters=["2.wieght"]), steps=1)
