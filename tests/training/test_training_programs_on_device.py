"""Training programs that used to fall back to the host CPU with only a logged warning now compile for the chip,
and train as torch does (Float32, SGD, a few steps against a torch twin):

- a batch norm (eval) before a max pool: its backward broadcast a per-channel vector through a transposed
  matmul input, which fusion moved onto a fused op's input, where a transpose is not allowed;
- microbatch 2 with an activation the forward saves whose dim 0 is not the sample's (``x.reshape(-1, C)``, as
  nn.MultiheadAttention, LSTMs and Swin do): the backward refused the input ("every input needs dim 0 == 2");
- a trained 1x1 convolution from and to more than one tile of channels (MobileNetV2's pointwise convs): the
  weight's move to the im2col layout needed more picker parts than a gather may have.
"""

import copy

import pytest
import torch

import pybuda
from test_training_models import assert_all_on_device, train_in_torch, train_on_chip

STEPS = 3
LOSS_RTOL = 5e-3


class SavesReshaped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x):  # [b, 16, 32]
        return torch.tanh(self.fc(x.reshape(-1, 32))).reshape(x.shape)


def _conv_bn_pool():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2))
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    return model.eval()


MODELS = {
    "batch_norm_then_max_pool": (_conv_bn_pool, (3, 8, 8), 1),
    "saved_activation_folds_the_microbatch": (SavesReshaped, (16, 32), 2),
    "pointwise_conv_64_to_64": (lambda: torch.nn.Sequential(torch.nn.Conv2d(64, 64, 1), torch.nn.ReLU()).eval(),
                                (64, 4, 4), 1),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_training_runs_on_the_device_and_follows_torch(name):
    build, shape, mb = MODELS[name]
    torch.manual_seed(0)
    model = build()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        target_shape = model(torch.zeros((mb,) + shape)).shape
    data = [(torch.randn((mb,) + shape, generator=g), torch.randn(target_shape, generator=g)) for _ in range(STEPS)]
    got, report = train_on_chip(pybuda.PyTorchModule(name, model), data, torch.nn.MSELoss(),
                                pybuda.optimizers.SGD(learning_rate=0.05))
    assert_all_on_device(report)
    want = train_in_torch(twin, data, torch.nn.MSELoss(), lr=0.05)
    for step, (a, b) in enumerate(zip(got, want)):
        assert a == pytest.approx(b, rel=LOSS_RTOL), f"step {step}: chip {a}, torch {b}"
