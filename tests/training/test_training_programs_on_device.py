"""Training programs that used to fall back to the host CPU with only a logged warning now compile for the chip,
and train as torch does (Float32, SGD, a few steps against a torch twin):

- a batch norm (eval) before a max pool: its backward broadcast a per-channel vector through a transposed
  matmul input, which fusion moved onto a fused op's input, where a transpose is not allowed;
- microbatch 2 with an activation the forward saves whose dim 0 is not the sample's (``x.reshape(-1, C)``, as
  nn.MultiheadAttention, LSTMs and Swin do): the backward refused the input ("every input needs dim 0 == 2");
- a trained 1x1 convolution from and to more than one tile of channels (MobileNetV2's pointwise convs): the
  weight's move to the im2col layout needed more picker parts than a gather may have;
- trained convolution weights with more than 65,536 kernels (MobileNetV2's 320 -> 1280 head, ResNet-50's
  512 -> 512 3x3): the queue gave every ``[kh, kw]`` kernel a tile of its own, past the netlist's limit on t.
  They are held compact, ``[Cout, Cin·kh·kw]`` (``host_io.compact_shape``), and updated in that shape;
- an optimizer whose update of a parameter the balancer padded (a 2340-wide weight as 75 tiles instead of 74):
  the training netlist could not alias it to the parameter's queue and was not built at all.
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
    "pointwise_conv_80_to_1280": (lambda: torch.nn.Sequential(torch.nn.Conv2d(80, 1280, 1), torch.nn.ReLU()).eval(),
                                  (80, 2, 2), 1),
    "conv3x3_260_to_260": (lambda: torch.nn.Conv2d(260, 260, 3, padding=1).eval(), (260, 3, 3), 1),
}


def assert_updated_in_place(report):
    """Every trained parameter is updated in place in the training netlist (no host copy between programs)."""
    line = next(line for line in report if line.startswith("training netlist: "))
    counts = line.split(" parameters are updated in place")[0].rsplit(", ", 1)[-1].split("/")
    assert counts[0] == counts[1], line


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
    assert_updated_in_place(report)
    want = train_in_torch(twin, data, torch.nn.MSELoss(), lr=0.05)
    for step, (a, b) in enumerate(zip(got, want)):
        assert a == pytest.approx(b, rel=LOSS_RTOL), f"step {step}: chip {a}, torch {b}"


def test_adam_update_the_balancer_would_pad_is_written_in_place():
    """Adam over a Linear(2340 -> 260): 2340 is 74 tiles, which the balancer padded to 75 for a 3- or 5-column grid
    in the optimizer; the update then had another shape than the parameter's queue, and the bias gradient the
    backward padded likewise another than the optimizer's input. Ops writing in place keep the exact shape."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2340, 260)
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(1, 1, 2340, generator=g), torch.randn(1, 1, 260, generator=g)) for _ in range(STEPS)]
    got, report = train_on_chip(pybuda.PyTorchModule("wide", model), data, torch.nn.MSELoss(),
                                pybuda.optimizers.Adam(learning_rate=0.01))
    assert_all_on_device(report)
    assert_updated_in_place(report)
    opt = torch.optim.Adam(twin.parameters(), lr=0.01)
    for step, (x, y) in enumerate(data):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(twin(x), y)
        loss.backward()
        opt.step()
        assert got[step] == pytest.approx(float(loss), rel=LOSS_RTOL), f"step {step}"
