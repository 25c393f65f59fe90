"""Training through the run API, written from the API reference: the manual loop, run_training, gradient
accumulation, checkpoints, CPU losses, and the errors a user gets for mistakes.

Every run is compared with the same loop in torch at Float32 (the chip's Float32 matmul multiplies in
TF32, hence the tolerances).
"""

import copy
import queue

import pytest
import torch

import pybuda
from pybuda.errors import CompileError, ConfigError, InputError, ModuleError, PybudaError
from pybuda.runtime.training import current as current_session

#: Loss curves of the chip vs torch at Float32: relative difference per step (the issue's 2 %).
LOSS_RTOL = 0.02
#: Gradients and parameters after a few steps at Float32 (TF32 products on the chip).
RTOL, ATOL = 2e-2, 2e-3
PCC_MIN = 0.99


def float32_everywhere():
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     accumulate_df=pybuda.DataFormat.Float32,
                                     math_fidelity=pybuda.MathFidelity.HiFi4)


def pcc(a, b):
    a, b = a.flatten().double(), b.flatten().double()
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


class MLP(pybuda.PyBudaModule):
    """Two linear layers with a ReLU between, as pybuda ops (feature sizes not multiples of 32)."""

    def __init__(self, name, d_in=20, d_hidden=40, d_out=10, seed=0):
        super().__init__(name)
        g = torch.Generator().manual_seed(seed)
        self.w1 = pybuda.Parameter(torch.randn(d_in, d_hidden, generator=g) * d_in ** -0.5, requires_grad=True)
        self.b1 = pybuda.Parameter(torch.zeros(d_hidden), requires_grad=True)
        self.w2 = pybuda.Parameter(torch.randn(d_hidden, d_out, generator=g) * d_hidden ** -0.5, requires_grad=True)

    def forward(self, x):
        h = pybuda.op.Relu("relu", pybuda.op.Add("bias", pybuda.op.Matmul("mm1", x, self.w1), self.b1))
        return pybuda.op.Matmul("mm2", h, self.w2)


def torch_mlp_params(module):
    return {k: p.value().detach().clone().requires_grad_(True) for k, p in
            ((p.get_name(), p) for p in module.get_parameters())}


def torch_mlp_forward(params, x, name="mlp"):
    h = torch.relu(x @ params[f"{name}.w1"] + params[f"{name}.b1"])
    return h @ params[f"{name}.w2"]


def per_sample_mse(pred, target):
    # pybuda.op.loss.MSELoss reduces each sample's output over its last two dims; the microbatch's
    # gradients add up on the device, so the torch twin sums the per-sample losses.
    return ((pred - target) ** 2).mean(dim=(-2, -1)).sum()


def make_data(steps, mb=4, seq=3, d_in=20, d_out=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    w_true = torch.randn(d_in, d_out, generator=g)
    xs = [torch.randn(mb, seq, d_in, generator=g) for _ in range(steps)]
    return xs, [torch.tanh(x @ w_true) for x in xs]


def setup_pybuda_mlp(lr=0.05, mb=4):
    float32_everywhere()
    mlp = MLP("mlp")
    tt0 = pybuda.TTDevice("tt0", module=mlp, optimizer=pybuda.optimizers.SGD(learning_rate=lr),
                          fp32_fallback=pybuda.DataFormat.Float32, arch=pybuda.BackendDevice.Wormhole_B0)
    tt0.place_loss_module(pybuda.op.loss.MSELoss("mse"))
    return mlp, tt0


def torch_sgd_curve(params, xs, ys, lr, accumulation=1):
    opt = torch.optim.SGD(list(params.values()), lr=lr)
    losses = []
    for step in range(0, len(xs), accumulation):
        opt.zero_grad()
        for x, y in zip(xs[step:step + accumulation], ys[step:step + accumulation]):
            loss = per_sample_mse(torch_mlp_forward(params, x), y)
            loss.backward()
            losses.append(float(loss))
        opt.step()
    return losses


def test_manual_loop_from_the_api_reference():
    """initialize_pipeline(training=True), then run_forward, run_backward, run_optimizer, run_schedulers."""
    mlp, tt0 = setup_pybuda_mlp()
    params = torch_mlp_params(mlp)
    xs, ys = make_data(3)
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        tt0.push_to_target_inputs(y)
    loss_q = pybuda.initialize_pipeline(training=True, sample_inputs=(xs[0],), sample_targets=(ys[0],))
    torch_losses = torch_sgd_curve(params, xs, ys, lr=0.05)
    for step in range(3):
        pybuda.run_forward(input_count=1)
        pybuda.run_backward(input_count=1, zero_grad=True)
        if step == 0:
            grads = pybuda.get_parameter_gradients(tt0)[0]
            assert set(grads) == {"mlp.w1", "mlp.b1", "mlp.w2"}
        pybuda.run_optimizer()
        pybuda.run_schedulers()
        loss = loss_q.get()[0].value()
        assert loss.numel() == 4  # one loss per sample of the microbatch
        assert float(loss.sum()) == pytest.approx(torch_losses[step], rel=LOSS_RTOL)
    final = pybuda.get_parameter_checkpoint(tt0)[0]
    for name, value in params.items():
        got = final[name].value()
        assert pcc(got, value.detach()) > PCC_MIN
        assert torch.allclose(got, value.detach(), rtol=RTOL, atol=ATOL), name


def test_gradients_match_torch_autograd():
    mlp, tt0 = setup_pybuda_mlp()
    params = torch_mlp_params(mlp)
    xs, ys = make_data(1)
    tt0.push_to_inputs(xs[0])
    tt0.push_to_target_inputs(ys[0])
    pybuda.initialize_pipeline(training=True)
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    grads = pybuda.get_parameter_gradients(tt0)[0]
    per_sample_mse(torch_mlp_forward(params, xs[0]), ys[0]).backward()
    for name, p in params.items():
        got = grads[name].value()
        assert pcc(got, p.grad) > PCC_MIN, name
        assert torch.allclose(got, p.grad, rtol=RTOL, atol=ATOL), name


def test_run_training_loss_curve_follows_torch():
    steps = 20
    mlp, tt0 = setup_pybuda_mlp()
    params = torch_mlp_params(mlp)
    xs, ys = make_data(steps)
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        tt0.push_to_target_inputs(y)
    loss_q = queue.Queue()
    checkpoints = pybuda.run_training(epochs=1, steps=steps, loss_queue=loss_q)
    got = [float(loss_q.get()[0].value().sum()) for _ in range(steps)]
    want = torch_sgd_curve(params, xs, ys, lr=0.05)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=LOSS_RTOL)
    assert got[-1] < got[0]
    last = checkpoints.get()[0]
    assert set(last) == {"mlp.w1", "mlp.b1", "mlp.w2"}


def test_gradient_accumulation_equals_one_bigger_batch():
    """Four accumulated microbatches of 2 give the gradient of one microbatch of 8."""
    mlp, tt0 = setup_pybuda_mlp(mb=2)
    xs, ys = make_data(1, mb=8)
    for k in range(4):
        tt0.push_to_inputs(xs[0][2 * k:2 * k + 2])
        tt0.push_to_target_inputs(ys[0][2 * k:2 * k + 2])
    pybuda.initialize_pipeline(training=True)
    for k in range(4):
        pybuda.run_forward(1)
        pybuda.run_backward(1, zero_grad=k == 0)
    accumulated = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    params = torch_mlp_params(mlp)
    per_sample_mse(torch_mlp_forward(params, xs[0]), ys[0]).backward()
    for name, p in params.items():
        assert torch.allclose(accumulated[name], p.grad, rtol=RTOL, atol=ATOL), name


def checkpoint_curves(setup, steps, data=None):
    """(losses of ``steps`` straight steps, losses of half the steps, then a fresh pipeline restored from
    their checkpoint with ``update_device_parameters`` running the other half). ``setup()`` builds the
    pipeline and returns (the TTDevice, the device that takes the targets); ``data``: (input, target) pairs,
    by default :func:`make_data`'s."""
    xs, ys = zip(*data) if data is not None else make_data(steps)

    def train(first, count, restore=None):
        pybuda.pybuda_reset()
        tt0, targets_to = setup()
        for x, y in zip(xs[first:first + count], ys[first:first + count]):
            tt0.push_to_inputs(x)
            targets_to.push_to_target_inputs(y)
        loss_q = queue.Queue()
        pybuda.initialize_pipeline(training=True)
        if restore is not None:
            pybuda.update_device_parameters(tt0, [restore])
        ckpt = pybuda.run_training(steps=count, loss_queue=loss_q).get()[0]
        return [float(loss_q.get()[0].value().sum()) for _ in range(count)], ckpt

    straight, _ = train(0, steps)
    first_half, ckpt = train(0, steps // 2)
    second_half, _ = train(steps // 2, steps // 2, restore={k: v.value() for k, v in ckpt.items()})
    return straight, first_half + second_half


def test_checkpoint_restored_continues_the_same_curve():
    def setup():
        _, tt0 = setup_pybuda_mlp()
        return tt0, tt0

    straight, resumed = checkpoint_curves(setup, steps=6)
    assert resumed == pytest.approx(straight, rel=1e-5)


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(20, 40)
        self.fc2 = torch.nn.Linear(40, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_pytorch_module_trains_with_a_torch_loss_on_the_cpu():
    float32_everywhere()
    model = TorchMLP()
    twin = copy.deepcopy(model)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("mlp", model),
                          optimizer=pybuda.optimizers.SGD(learning_rate=0.1), fp32_fallback=pybuda.DataFormat.Float32, arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    steps = 8
    xs, ys = make_data(steps)
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    loss_q = queue.Queue()
    pybuda.run_training(steps=steps, loss_queue=loss_q)
    got = [float(loss_q.get()[0].value()) for _ in range(steps)]
    opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    want = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(twin(x), y)
        loss.backward()
        opt.step()
        want.append(float(loss))
    assert got == pytest.approx(want, rel=LOSS_RTOL)
    assert tt0 is not None


def setup_pytorch_mlp(lr=0.1):
    """TorchMLP on a TTDevice; a summed torch MSE on a CPUDevice after it (sum: gradients add over samples)."""
    float32_everywhere()
    model = TorchMLP()
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("mlp", model),
                          optimizer=pybuda.optimizers.SGD(learning_rate=lr), fp32_fallback=pybuda.DataFormat.Float32,
                          arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss(reduction="sum")))
    return model, tt0, cpu


def test_pytorch_module_gradient_accumulation_equals_one_bigger_batch():
    """run_training with 4 accumulation steps of 2 samples takes the SGD step of one batch of 8: the device
    accumulates exactly the sum of the 4 microbatches' gradients, which is the batch's gradient."""
    model, tt0, cpu = setup_pytorch_mlp()
    twin = copy.deepcopy(model)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    xs, ys = make_data(1, mb=8)
    for _ in range(2):
        for k in range(4):
            tt0.push_to_inputs(xs[0][2 * k:2 * k + 2])
            cpu.push_to_target_inputs(ys[0][2 * k:2 * k + 2])
    pybuda.initialize_pipeline(training=True)
    # Each microbatch's gradient alone, then the four accumulated by one optimizer step of run_training.
    single = []
    for _ in range(4):
        pybuda.run_forward(1)
        pybuda.run_backward(1, zero_grad=True)
        single.append({k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()})
    pybuda.run_training(steps=1, accumulation_steps=4)
    accumulated = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    stepped = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    torch.nn.functional.mse_loss(twin(xs[0]), ys[0], reduction="sum").backward()
    assert set(accumulated) == {n for n, _ in twin.named_parameters()}
    for name, p in twin.named_parameters():
        total = sum(g[name] for g in single)
        # Float32 accumulation on the device: the sum up to float32 rounding.
        assert torch.allclose(accumulated[name], total, rtol=1e-5, atol=1e-5 * float(total.abs().max())), name
        # One SGD step over the accumulated gradient (the update's product lr·g is a TF32 multiply).
        step = 0.1 * accumulated[name]
        assert torch.allclose(stepped[name], initial[name] - step, rtol=1e-3, atol=1e-3 * float(step.abs().max())), name
        # And the batch's gradient in torch (TF32 products on the chip flip a few ReLU masks near zero).
        assert pcc(accumulated[name], p.grad) > 0.99, name


def test_pytorch_module_checkpoint_restored_continues_the_same_curve():
    def setup():
        _, tt0, cpu = setup_pytorch_mlp(lr=0.002)  # the loss sums 120 squared errors per microbatch
        return tt0, cpu

    straight, resumed = checkpoint_curves(setup, steps=6)
    assert resumed == pytest.approx(straight, rel=1e-5)
    assert straight[-1] < straight[0]


class TokenCE(torch.nn.Module):
    """Cross entropy over ``[..., classes]`` logits, averaged over the tokens whose target is not -100."""

    def forward(self, logits, target):
        return torch.nn.functional.cross_entropy(logits.flatten(0, -2), target.flatten(), ignore_index=-100)


def _train_with_a_torch_loss_on_the_device(loss, targets, steps=2, lr=0.1):
    """TorchMLP on a TTDevice that also holds the torch ``loss``, microbatches of 2; device and torch losses and
    final parameters."""
    float32_everywhere()
    model = TorchMLP()
    twin = copy.deepcopy(model)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("mlp", model),
                          optimizer=pybuda.optimizers.SGD(learning_rate=lr), fp32_fallback=pybuda.DataFormat.Float32,
                          arch=pybuda.BackendDevice.Wormhole_B0)
    tt0.place_loss_module(pybuda.PyTorchModule("loss", loss))
    g = torch.Generator().manual_seed(8)
    data = [(torch.randn(2, 3, 20, generator=g), targets(g)) for _ in range(steps)]
    for x, y in data:
        tt0.push_to_inputs(x)
        tt0.push_to_target_inputs(y)
    loss_q = queue.Queue()
    after = pybuda.run_training(steps=steps, loss_queue=loss_q).get()[0]
    got = [loss_q.get()[0].value() for _ in data]
    opt = torch.optim.SGD(twin.parameters(), lr=lr)
    want = []
    for x, y in data:
        opt.zero_grad()
        value = loss(twin(x), y)
        value.backward()
        opt.step()
        want.append(value.detach())
    return got, want, {k: v.value() for k, v in after.items()}, dict(twin.named_parameters())


@pytest.mark.parametrize("loss, targets, lr", [
    (torch.nn.MSELoss(), lambda g: torch.randn(2, 3, 10, generator=g), 0.1),
    (torch.nn.MSELoss(reduction="sum"), lambda g: torch.randn(2, 3, 10, generator=g), 0.002),  # sums 60 errors
    (TokenCE(), lambda g: torch.randint(0, 10, (2, 3), generator=g), 0.1)], ids=["mse_mean", "mse_sum", "token_ce"])
def test_a_torch_loss_on_the_device_reduces_the_microbatch_as_torch(loss, targets, lr):
    # The device runs the loss per sample and added the samples' gradients: a mean-reduced torch loss trained
    # with twice torch's gradient at microbatch 2, and the loss queue held the two samples' losses, no error.
    got, want, after, params = _train_with_a_torch_loss_on_the_device(loss, targets, lr=lr)
    for g, w in zip(got, want):
        assert g.shape == w.shape  # one loss of the whole microbatch, as torch's
        assert float(g) == pytest.approx(float(w), rel=LOSS_RTOL)
    for name, p in params.items():
        assert torch.allclose(after[name].reshape(p.shape), p.detach(), rtol=RTOL, atol=ATOL), name


def test_a_torch_loss_that_is_not_a_sum_or_mean_of_its_samples_is_refused_on_the_device():
    def targets(g):  # the first sample's last token ignored: the mean runs over 5 tokens, not 3 and 2
        t = torch.randint(0, 10, (2, 3), generator=g)
        t[0, 2] = -100
        return t

    with pytest.raises(CompileError, match=r"loss module 'loss' is neither the sum nor the mean.*CPUDevice"):
        _train_with_a_torch_loss_on_the_device(TokenCE(), targets, steps=1)


def _with_ignored_tokens(g):
    t = torch.randint(0, 10, (2, 3), generator=g)
    t[0, 2] = -100
    return t


def test_a_summed_token_loss_with_ignored_tokens_trains_on_the_device():
    # A summed loss over the tokens whose target is not -100: the label gather runs on the device (the host checks
    # each pushed target is a class or -100) and the ignored tokens add nothing, as in torch.
    loss = TokenCE()
    loss.forward = lambda logits, target: torch.nn.functional.cross_entropy(
        logits.flatten(0, -2), target.flatten(), ignore_index=-100, reduction="sum")
    got, want, after, params = _train_with_a_torch_loss_on_the_device(loss, _with_ignored_tokens, lr=0.01)
    for g, w in zip(got, want):
        assert float(g) == pytest.approx(float(w), rel=LOSS_RTOL)
    for name, p in params.items():
        assert torch.allclose(after[name].reshape(p.shape), p.detach(), rtol=RTOL, atol=ATOL), name


def test_a_target_outside_the_classes_is_refused_at_the_push_in_training():
    def targets(g):
        t = _with_ignored_tokens(g)
        t[1, 0] = 10
        return t

    loss = TokenCE()
    loss.forward = lambda logits, target: torch.nn.functional.cross_entropy(
        logits.flatten(0, -2), target.flatten(), ignore_index=-100, reduction="sum")
    with pytest.raises(InputError, match="masks out"):
        _train_with_a_torch_loss_on_the_device(loss, targets, steps=1)


# --- mistakes ---------------------------------------------------------------------------------------------------


def test_run_backward_before_run_forward_is_an_error():
    mlp, tt0 = setup_pybuda_mlp()
    xs, ys = make_data(1)
    tt0.push_to_inputs(xs[0])
    tt0.push_to_target_inputs(ys[0])
    pybuda.initialize_pipeline(training=True)
    with pytest.raises(PybudaError, match="run_forward first"):
        pybuda.run_backward(1)


def test_bad_target_shape_is_refused_at_the_push():
    mlp, tt0 = setup_pybuda_mlp()
    xs, ys = make_data(1)
    tt0.push_to_target_inputs(ys[0])
    with pytest.raises(InputError, match="do not match the first targets"):
        tt0.push_to_target_inputs(ys[0][:, :, :5])


def test_targets_without_a_loss_module_are_refused():
    tt0 = pybuda.TTDevice("tt0", module=MLP("mlp"))
    with pytest.raises(InputError, match="no loss module"):
        tt0.push_to_target_inputs(torch.zeros(4, 3, 10))


def test_loss_on_a_device_that_is_not_last_is_an_error():
    float32_everywhere()
    tt0 = pybuda.TTDevice("tt0", module=MLP("mlp"), optimizer=pybuda.optimizers.SGD(learning_rate=0.1))
    tt0.place_loss_module(pybuda.op.loss.MSELoss("mse"))
    pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("id", torch.nn.Identity()))
    xs, ys = make_data(1)
    tt0.push_to_inputs(xs[0])
    tt0.push_to_target_inputs(ys[0])
    with pytest.raises(ModuleError, match="not the last device"):
        pybuda.initialize_pipeline(training=True)


def test_a_torch_optimizer_on_a_tt_device_is_a_config_error():
    # The TTDevice kept it and the first step failed with AttributeError: 'SGD' object has no attribute
    # 'build_update_graph' (found by tools/training_sweep.py).
    model = torch.nn.Linear(8, 4)
    with pytest.raises(ConfigError, match=r"optimizer must be a pybuda optimizer .*torch\.optim\.sgd\.SGD.*CPUDevice"):
        pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("lin", model),
                        optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))


def test_run_training_without_enough_inputs_fails_before_running():
    mlp, tt0 = setup_pybuda_mlp()
    xs, ys = make_data(2)
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        tt0.push_to_target_inputs(y)
    with pytest.raises(InputError, match="needs 3 input"):
        pybuda.run_training(steps=3)
    with pytest.raises(InputError, match="positive int"):
        pybuda.run_training(steps=0)


def test_pybuda_module_trains_on_a_cpu_device():
    """A PyBudaModule and a PyBuda loss on a CPUDevice train with torch autograd over the op references."""
    float32_everywhere()
    mlp = MLP("mlp")
    params = torch_mlp_params(mlp)
    cpu = pybuda.CPUDevice("cpu0", optimizer_f=lambda p: torch.optim.SGD(p, lr=0.05))
    cpu.place_module(mlp)
    cpu.place_loss_module(pybuda.op.loss.MSELoss("mse"))
    steps = 5
    xs, ys = make_data(steps)
    for x, y in zip(xs, ys):
        cpu.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    loss_q = queue.Queue()
    checkpoint = pybuda.run_training(steps=steps, loss_queue=loss_q).get()[0]
    got = [float(loss_q.get()[0].value().sum()) for _ in range(steps)]
    want = torch_sgd_curve(params, xs, ys, lr=0.05)
    # Both run the same float32 math on the CPU.
    assert got == pytest.approx(want, rel=1e-4)
    for name, value in params.items():
        assert torch.allclose(checkpoint[name].value(), value.detach(), rtol=1e-4, atol=1e-5), name


def test_run_training_with_more_microbatches_than_the_default_saved_queue():
    """A step of 12 microbatches (more than the 8 the saved-activation queues hold by default) runs: the
    training netlist's forward->backward queues are sized for the step's microbatch_count."""
    steps, count = 2, 12
    mlp, tt0 = setup_pybuda_mlp(mb=1)
    params = torch_mlp_params(mlp)
    xs, ys = make_data(steps * count, mb=1)
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        tt0.push_to_target_inputs(y)
    loss_q = queue.Queue()
    pybuda.run_training(epochs=1, steps=steps, microbatch_count=count, loss_queue=loss_q)
    got = [float(loss_q.get()[0].value().sum()) for _ in range(steps * count)]
    want = torch_sgd_curve(params, xs, ys, lr=0.05, accumulation=count)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=LOSS_RTOL)


class TorchSortNet(torch.nn.Module):
    """Linear layers around two sorts, kept on the CPU (``cpu_fallback_ops``): the first linear and sort run in a
    CPU-fallback stage before the device part and the second sort and last linear in one after it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a, self.b, self.c = torch.nn.Linear(20, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 10)

    def forward(self, x):
        h = torch.relu(self.b(torch.sort(self.a(x), dim=-1).values))
        return self.c(torch.sort(h, dim=-1).values)


def test_cpu_fallback_stages_train_beside_the_device_part():
    """A PyTorch model split into host / device / host stages trains like torch: gradients cross the device
    boundary both ways, the host stages step with the TTDevice's optimizer, and the device's checkpoints,
    gradients and parameter updates cover the host stages' parameters by their torch names. (A small learning
    rate: sort routes gradients by the order of its inputs, so TF32 differences that swap two close values
    would make the runs part ways.)"""
    float32_everywhere()
    pybuda.config.add_cpu_fallback_ops("sort")
    model = TorchSortNet()
    twin = copy.deepcopy(model)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("sortnet", model),
                          optimizer=pybuda.optimizers.SGD(learning_rate=0.01), fp32_fallback=pybuda.DataFormat.Float32,
                          arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss(reduction="sum")))
    steps = 4
    xs, ys = make_data(steps)
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    pybuda.initialize_pipeline(training=True)
    assert tt0.cpu_fallback_device_pre is not None and tt0.cpu_fallback_device_post is not None
    opt = torch.optim.SGD(twin.parameters(), lr=0.01)
    for step in range(steps):
        pybuda.run_forward(1)
        pybuda.run_backward(1, zero_grad=True)
        opt.zero_grad()
        torch.nn.functional.mse_loss(twin(xs[step]), ys[step], reduction="sum").backward()
        if step == 0:
            grads = pybuda.get_parameter_gradients(tt0)[0]
            assert set(grads) == {n for n, _ in twin.named_parameters()}
            for name, p in twin.named_parameters():
                assert torch.allclose(grads[name].value(), p.grad, rtol=RTOL, atol=ATOL), name
        pybuda.run_optimizer()
        opt.step()
    after = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    assert set(after) == {n for n, _ in twin.named_parameters()}
    for name, p in twin.named_parameters():
        assert pcc(after[name], p.detach()) > PCC_MIN, name
        assert torch.allclose(after[name], p.detach(), rtol=RTOL, atol=ATOL), name
    # An update of a host stage's parameter reaches that stage; an unknown name lists every parameter there is.
    tt0.update_device_parameters({"a.bias": torch.zeros(16)})
    assert torch.equal(pybuda.get_parameter_checkpoint(tt0)[0]["a.bias"].value(), torch.zeros(16))
    with pytest.raises(InputError, match=r"no trainable parameter\(s\) \['nope'\].*'a.weight'"):
        tt0.update_device_parameters({"nope": torch.zeros(1)})


class SignedBessel(torch.nn.Module):
    """The device reads the CPU stage's ``h`` only through a comparison: no gradient reaches that input."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.a, self.b = torch.nn.Linear(20, 16), torch.nn.Linear(16, 10)

    def forward(self, x):
        h = self.a(x)
        gate = torch.special.i0(h)  # no device form: a CPU pre-stage that hands the device h and gate
        return self.b(torch.where(h > 0, gate, -gate))


def test_an_input_the_device_only_compares_gets_a_zero_gradient_for_every_sample():
    # Its gradient is a constant of one sample: it came back as [1, 3, 16] for a microbatch of 4, and the CPU
    # stage's backward failed to reshape it.
    float32_everywhere()
    model = SignedBessel()
    twin = copy.deepcopy(model)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("signed", model),
                          optimizer=pybuda.optimizers.SGD(learning_rate=0.01), arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss(reduction="sum")))
    (x,), (y,) = make_data(1)
    tt0.push_to_inputs(x)
    cpu.push_to_target_inputs(y)
    pybuda.initialize_pipeline(training=True)
    assert tt0.cpu_fallback_device_pre is not None
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    torch.nn.functional.mse_loss(twin(x), y, reduction="sum").backward()
    grads = pybuda.get_parameter_gradients(tt0)[0]
    for name, p in twin.named_parameters():
        assert torch.allclose(grads[name].value(), p.grad, rtol=RTOL, atol=ATOL * float(p.grad.abs().max())), name


def _torch_module_with_a_cpu_loss(model, name, lr=0.05):
    """``model`` on a TTDevice (SGD ``lr``, Float32) and a torch MSE on a CPUDevice after it: ``(tt0, cpu)``."""
    float32_everywhere()
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule(name, model),
                          optimizer=pybuda.optimizers.SGD(learning_rate=lr), fp32_fallback=pybuda.DataFormat.Float32,
                          arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    return tt0, cpu


def _trained_on_device(model, name, data):
    """``(losses, tt0)``: ``model`` trained on the (input, target) pairs ``data`` on TTDevice ``tt0``, one step each
    (an input may be a tuple of the model's inputs)."""
    tt0, cpu = _torch_module_with_a_cpu_loss(model, name)
    for x, y in data:
        tt0.push_to_inputs(*(x if isinstance(x, tuple) else (x,)))
        cpu.push_to_target_inputs(y)
    loss_q = queue.Queue()
    pybuda.run_training(steps=len(data), loss_queue=loss_q)
    return [float(loss_q.get()[0].value()) for _ in data], tt0


def _train_on_device(model, name, data):
    """The losses of ``model`` trained on the (input, target) pairs ``data``, one step each."""
    return _trained_on_device(model, name, data)[0]


def _train_in_torch(twin, data):
    """The losses of ``twin`` trained in torch as :func:`_train_on_device` trains."""
    opt = torch.optim.SGD(twin.parameters(), lr=0.05)
    want = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(twin(*(x if isinstance(x, tuple) else (x,))), y)
        loss.backward()
        opt.step()
        want.append(float(loss))
    return want


class ConvBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))))


def _train_conv_bn(model, mb, steps=3):
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(mb, 3, 8, 8, generator=g), torch.randn(mb, 4, 8, 8, generator=g)) for _ in range(steps)]
    return _train_on_device(model, "convbn", data), data


def test_batch_norm_on_batch_statistics_with_a_microbatch_is_refused():
    # Training runs a microbatch sample by sample: batch statistics would be each sample's own, not torch's.
    with pytest.raises(CompileError, match=r"batch statistics \(bn\).*Freeze them"):
        _train_conv_bn(ConvBatchNorm().train(), mb=2)


@pytest.mark.parametrize("frozen", [False, True], ids=["microbatch_1", "frozen_batch_norm"])
def test_batch_norm_trains_with_microbatch_1_or_frozen(frozen):
    model = ConvBatchNorm().train()
    if frozen:
        model.bn.eval()  # running statistics: every sample alone, as the device runs them
    twin = copy.deepcopy(model)
    got, data = _train_conv_bn(model, mb=2 if frozen else 1)
    assert got == pytest.approx(_train_in_torch(twin, data), rel=LOSS_RTOL)


class CentredOverTheBatch(torch.nn.Module):
    """Subtracts the batch's mean: an op across dim 0, in a model in training mode."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
        self.drop = torch.nn.Dropout(0.5)  # training mode draws masks: the probe runs in eval mode

    def forward(self, x):
        h = self.drop(self.a(x))
        return self.b(h - h.mean(0, keepdim=True))


def test_a_model_that_mixes_the_samples_of_a_microbatch_is_refused_for_training():
    # Training compiles for one sample: each sample was centred on itself and the loss came out 0.774 for
    # torch's 0.693, with no error (inference refused it; the check skipped models in training mode).
    model = CentredOverTheBatch().train()
    g = torch.Generator().manual_seed(0)
    with pytest.raises(CompileError, match="mixes the samples of a microbatch"):
        _train_on_device(model, "centred", [(torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g))])
    assert model.training and model.drop.training  # the probe leaves the modes as they were


class HeadsAsWideAsTheMicrobatch(torch.nn.Module):
    """Graph attention over 2 heads (an einsum that merges batch and heads for its bmm), trained at microbatch 2."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 12, bias=False)
        self.score = torch.nn.Parameter(torch.randn(2, 6) * 0.1)

    def forward(self, x):  # [b, n, 8]
        h = self.proj(x).view(x.shape[0], x.shape[1], 2, 6)
        e = (h * self.score).sum(-1)  # [b, n, heads]
        att = torch.softmax(e.unsqueeze(2) + e.unsqueeze(1), dim=2)  # [b, i, j, heads]
        return torch.einsum("bijh,bjhf->bihf", att, h).reshape(x.shape[0], x.shape[1], 12)


def test_a_backward_whose_saved_values_have_the_microbatch_as_dim_0_trains_on_the_device():
    # The backward saves [heads * 1, ...] values of a forward traced for one sample; with 2 heads at microbatch 2
    # their dim 0 looked like the microbatch, and the backward was refused as mixing samples (then run on the host).
    model = HeadsAsWideAsTheMicrobatch()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(2, 7, 8, generator=g), torch.randn(2, 7, 12, generator=g)) for _ in range(2)]
    got, tt0 = _trained_on_device(model, "heads", data)
    assert got == pytest.approx(_train_in_torch(twin, data), rel=LOSS_RTOL)
    programs = [line for line in current_session().trainer_of(tt0).report if line.startswith(("fwd_", "bwd_"))]
    assert programs == ["fwd_heads: device", "bwd_heads: device"]


class PaddedSequenceAttention(torch.nn.Module):
    """torch's MultiheadAttention (sequence-first inside, so saved activations have the sequence as dim 0) over
    2 heads with a key padding mask from pushed lengths, trained at microbatch 2."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.att = torch.nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x, lengths):  # [b, 6, 16], [b] in [1, 6]
        pad = torch.arange(x.shape[1])[None, :] >= lengths[:, None]
        out, _ = self.att(x, x, x, key_padding_mask=pad)  # with the heads' mean attention weights, as by default
        return out.masked_fill(pad[..., None], 0.0)


def test_a_backward_whose_saved_values_have_the_sequence_as_dim_0_trains_on_the_device():
    # A saved [heads, ...] value (dim 0 == the microbatch) made the backward look traced for the microbatch; a
    # saved [seq, hidden] one then failed the input check and the backward ran on the host.
    model = PaddedSequenceAttention()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(5)
    data = [((torch.randn(2, 6, 16, generator=g), torch.randint(1, 7, (2,), generator=g)),
             torch.randn(2, 6, 16, generator=g)) for _ in range(2)]
    got, tt0 = _trained_on_device(model, "seqfirst", data)
    assert got == pytest.approx(_train_in_torch(twin, data), rel=LOSS_RTOL)
    programs = [line for line in current_session().trainer_of(tt0).report if line.startswith(("fwd_", "bwd_"))]
    assert programs == ["fwd_seqfirst: device", "bwd_seqfirst: device"]


class ScalarLengthScale(torch.nn.Module):
    """A Gaussian-process head whose length scale is a 0-dim parameter, squared (CLIP's logit scale, a temperature)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.centres = torch.nn.Parameter(torch.randn(6, 3))
        self.log_scale = torch.nn.Parameter(torch.tensor(0.3))
        self.out = torch.nn.Linear(6, 2)

    def forward(self, x):  # [b, 3]
        d2 = (x.unsqueeze(1) - self.centres).pow(2).sum(-1)
        return self.out(torch.exp(-0.5 * d2 / self.log_scale.exp().pow(2)))


def test_a_zero_dim_parameter_trains_on_the_device():
    # A Python scalar in the backward (square's 2.0) raised the 0-dim parameter's gradient to shape [1]: a CompileError.
    model = ScalarLengthScale()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(4)
    data = [(torch.randn(2, 3, generator=g), torch.randn(2, 2, generator=g)) for _ in range(3)]
    got, tt0 = _trained_on_device(model, "scalar", data)
    assert got == pytest.approx(_train_in_torch(twin, data), rel=LOSS_RTOL)
    programs = [line for line in current_session().trainer_of(tt0).report if line.startswith(("fwd_", "bwd_"))]
    assert programs == ["fwd_scalar: device", "bwd_scalar: device"]
    after = pybuda.get_parameter_checkpoint(tt0)[0]["log_scale"].value()
    assert after.shape == () and float(after) != pytest.approx(0.3)  # the scalar itself was stepped, as a scalar
    # the step itself within the device's gradient precision (its default formats hold about 3 digits)
    assert float(after) - 0.3 == pytest.approx(float(twin.log_scale) - 0.3, rel=0.03)


class RowFromAnIndex(torch.nn.Module):
    """An integer the device computes (a row index) that a CPU post stage uses: the device's outputs then include
    one no gradient flows back to."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        row = (h > 2).sum(-1)[:, 0]  # an integer: 0 (tanh never exceeds 2)
        return self.out(h + h[torch.arange(h.shape[0]), row].unsqueeze(1))  # advanced indexing: CPU post stage


def test_an_integer_device_output_takes_no_gradient_pushes():
    # The backward's gradient input for the integer output is read by no op; each step pushed into it anyway
    # and the second step failed ("has room for 0 more entries").
    model = RowFromAnIndex()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(1, 8, 16, generator=g), torch.randn(1, 8, 16, generator=g)) for _ in range(3)]
    assert _train_on_device(model, "rows", data) == pytest.approx(_train_in_torch(twin, data), rel=LOSS_RTOL)


class TwoResidualLinears(torch.nn.Module):
    """x1 = x + A x; x2 = x1 + B x1: B's gradient reads a saved activation and is computed transposed."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(64, 64, bias=False)
        self.b = torch.nn.Linear(64, 64, bias=False)

    def forward(self, x):
        x = x + self.a(x)
        return x + self.b(x)


def test_parameter_gradients_read_back_in_the_weights_orientation():
    # The accumulator of B's gradient holds it in the backward's (transposed) layout; reading it back dropped
    # the record's host transpose, so a square weight's gradient came back transposed with no error.
    _assert_first_gradients_match_torch(TwoResidualLinears(), "res")


def _assert_first_gradients_match_torch(model, name):
    """One forward and backward of ``model`` (Float32, Wormhole) on a [1, 16, 64] sample: every parameter
    gradient read back matches torch's."""
    twin = copy.deepcopy(model)
    tt0, cpu = _torch_module_with_a_cpu_loss(model, name)
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(1, 16, 64, generator=g), torch.randn(1, 16, 64, generator=g)
    tt0.push_to_inputs(x)
    cpu.push_to_target_inputs(y)
    pybuda.initialize_pipeline(training=True)
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    grads = pybuda.get_parameter_gradients(tt0)[0]
    torch.nn.functional.mse_loss(twin(x), y).backward()
    for param, p in twin.named_parameters():
        got = grads[param].value().reshape(p.shape)
        assert pcc(got, p.grad) > PCC_MIN, param
        assert torch.allclose(got, p.grad, rtol=RTOL, atol=ATOL), param


class SoftmaxAttention(torch.nn.Module):
    """``x + softmax(h hᵀ) h`` with ``h`` a linear of ``x`` split into heads, ``layers`` times."""

    def __init__(self, layers, d=64, heads=4):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(layers)])
        self.heads = heads

    def forward(self, x):
        b, s, d = x.shape
        for lin in self.lin:
            h = lin(x).reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
            a = torch.softmax(h @ h.transpose(-1, -2), -1) @ h
            x = x + a.transpose(1, 2).reshape(b, s, d)
        return x


@pytest.mark.parametrize("layers", [1, 2])
def test_gradients_through_saved_activations_with_tile_padding(layers):
    # 16 keys fill half a tile: the forward's softmax leaves non-zero tile padding in its output queue, which
    # the backward reads on the device as a saved activation, compiled for a host push's zero padding. The
    # weight gradients came out 4x (one layer) to 300x (two) torch's, with no error.
    _assert_first_gradients_match_torch(SoftmaxAttention(layers), "att")


class PositionTable(torch.nn.Module):
    """A learned position table looked up by ``arange`` (an embedding: on a CPU pre-stage), computed once per
    push and so without a microbatch dim, added to a linear of the input."""

    def __init__(self, seq=12, d=32):
        super().__init__()
        torch.manual_seed(0)
        self.positions = torch.nn.Embedding(seq, d)
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        return self.lin(x) + self.positions(torch.arange(x.shape[1]))


def test_training_with_an_unbatched_tensor_from_the_cpu_pre_stage():
    # The trainer took dim 0 of every pre-stage output as the microbatch: the [12, 32] table became [1, 32]
    # and the compile failed ("input 'embedding' expects shape [12, 32], got [1, 32]"), as for T5's
    # relative-position bias.
    model = PositionTable()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(1, 12, 32, generator=g), torch.randn(1, 12, 32, generator=g)) for _ in range(3)]
    got = _train_on_device(model, "positions", data)
    want = _train_in_torch(twin, data)
    assert got == pytest.approx(want, rel=RTOL)


def test_training_with_an_unbatched_tensor_from_the_cpu_pre_stage_at_microbatch_two():
    # The CPU pre-stage folds its two samples' tables into [24, 32]: the trainer's sample is its first 12 rows.
    model = PositionTable()
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(6)
    data = [(torch.randn(2, 12, 32, generator=g), torch.randn(2, 12, 32, generator=g)) for _ in range(2)]
    got = _train_on_device(model, "positions", data)
    want = _train_in_torch(twin, data)
    assert got == pytest.approx(want, rel=RTOL)


class TiedEmbedding(torch.nn.Module):
    """An LM-style model whose output head is its input embedding (one ``nn.Parameter`` under two names): the
    embedding runs on a CPU pre-stage (integer ids)."""

    def __init__(self, vocab=50, d=32):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, d)
        self.mid = torch.nn.Linear(d, d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mid(self.emb(ids))))


class SharedBySortStages(torch.nn.Module):
    """Linear ``a`` read by the CPU pre-stage (before one sort) and by the CPU post-stage (after another), with
    sort in ``cpu_fallback_ops``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.b(torch.sort(self.a(x), dim=-1).values))
        return self.a(torch.sort(self.c(h), dim=-1).values)


def _tied_data(steps):
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 50, (2, 6), generator=g), torch.randn(2, 6, 50, generator=g)) for _ in range(steps)]


def _sorted_data(steps):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(1, 4, 16, generator=g), torch.randn(1, 4, 16, generator=g)) for _ in range(steps)]


@pytest.mark.parametrize("model, data, lr", [(TiedEmbedding, _tied_data, 0.5), (SharedBySortStages, _sorted_data, 0.1)],
                         ids=["tied_embedding_and_head", "parameter_of_both_cpu_stages"])
def test_a_parameter_read_in_two_stages_steps_once_with_its_whole_gradient(model, data, lr):
    # The tied head ran on the device with a copy of the embedding table, which the CPU pre-stage trained
    # too: each copy stepped with its own share of the gradient and they drifted apart (the checkpoint held
    # both, 'head.weight' and 'emb.weight', 25 apart after one step). A parameter both CPU stages read was
    # stepped by both stages' optimizers: twice torch's step. No error either way.
    pybuda.config.add_cpu_fallback_ops("sort")
    model = model()
    twin = copy.deepcopy(model)
    tt0, cpu = _torch_module_with_a_cpu_loss(model, "shared", lr)
    samples = data(2)
    for x, y in samples:
        tt0.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    pybuda.run_training(steps=len(samples))
    after = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    opt = torch.optim.SGD(twin.parameters(), lr=lr)
    for x, y in samples:
        opt.zero_grad()
        torch.nn.functional.mse_loss(twin(x), y).backward()
        opt.step()
    assert set(after) == {n for n, _ in twin.named_parameters()}
    for name, p in twin.named_parameters():
        # TF32 products at a large learning rate: within 1 % of the parameter's range (the bug was 6x that).
        scale = float(p.detach().abs().max())
        assert torch.allclose(after[name].reshape(p.shape), p.detach(), rtol=RTOL, atol=1e-2 * scale), name


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "lars"])
def test_optimizer_steps_match_torch_from_the_same_gradients(optimizer):
    # Each step, torch's optimizer steps from the device's own parameters and gradients: what is left is the
    # optimizer program's arithmetic. Moments computed as beta * m read beta through the multiplier's source
    # registers (0.999 became 0.998), which made Adam's first steps 20 % longer than torch's, with no error.
    popt = {"adam": lambda: pybuda.optimizers.Adam(learning_rate=0.01),
            "adamw": lambda: pybuda.optimizers.AdamW(learning_rate=0.01, weight_decay=0.1),
            "lars": lambda: pybuda.optimizers.LARS(learning_rate=0.01, momentum=0.9)}[optimizer]()
    float32_everywhere()
    model = SoftmaxAttention(1, d=48)
    twin = copy.deepcopy(model)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("att", model), optimizer=popt,
                          fp32_fallback=pybuda.DataFormat.Float32, arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    g = torch.Generator().manual_seed(4)
    data = [(torch.randn(1, 20, 48, generator=g), torch.randn(1, 20, 48, generator=g)) for _ in range(3)]
    for x, y in data:
        tt0.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    pybuda.initialize_pipeline(training=True)
    topt = popt.get_pytorch_optimizer(dict(twin.named_parameters()))
    for _ in data:
        before = {k: v.value().clone() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
        pybuda.run_forward(1)
        pybuda.run_backward(1, zero_grad=True)
        grads = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
        with torch.no_grad():
            for name, p in twin.named_parameters():
                p.copy_(before[name].reshape(p.shape))
                p.grad = grads[name].reshape(p.shape).clone()
        topt.step()
        pybuda.run_optimizer()
        after = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
        for name, p in twin.named_parameters():
            step_dev = after[name].reshape(p.shape) - before[name].reshape(p.shape)
            step_torch = p.detach() - before[name].reshape(p.shape)
            assert torch.allclose(step_dev, step_torch, rtol=1e-2, atol=1e-4), name


@pytest.mark.parametrize("df", [pybuda.DataFormat.Float16_b, pybuda.DataFormat.Bfp8_b])
def test_adam_steps_by_the_learning_rate_at_low_precision_formats(df):
    # Adam's first step is lr·sign(g) for every element. The optimizer program computed in the model's format:
    # at Float16_b, β2 = 0.999 rounded and the bias correction 1 − β2 came out 4x too large, so every step
    # was 2x lr; at Bfp8_b a block flushed small gradients' squares to zero and m / (√v + ε) made parameters
    # infinite. No error either way. The parameters themselves are stored in the model's format, so the new
    # values round to it: a few of its units in the last place (2^-8 relative for Float16_b).
    pybuda.set_configuration_options(default_df_override=df)
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    initial = {k: p.detach().clone() for k, p in model.named_parameters()}
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("lin", model),
                          optimizer=pybuda.optimizers.Adam(learning_rate=0.01), arch=pybuda.BackendDevice.Wormhole_B0)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    g = torch.Generator().manual_seed(0)
    tt0.push_to_inputs(torch.randn(1, 4, 32, generator=g))
    cpu.push_to_target_inputs(torch.randn(1, 4, 32, generator=g))
    pybuda.run_training(steps=1)
    after = pybuda.get_parameter_checkpoint(tt0)[0]
    for name, before in initial.items():
        got = after[name].value().reshape(before.shape)
        assert torch.isfinite(got).all(), name
        step = (got - before).abs()
        # One step of 0.01, give or take the rounding of the stored parameter (|p| < 0.25: 2^-10 per unit).
        assert float(step.max()) < 0.01 + 3 * 2 ** -10 and float(step.median()) == pytest.approx(0.01, rel=0.1), name


def test_recompute_trains_as_torch_without_saving_activations():
    # enable_recompute was refused as "pybuda does not train yet" although training honours it.
    from pybuda.runtime import training

    pybuda.set_configuration_options(enable_recompute=True)
    model = SoftmaxAttention(2, d=48)
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(7)
    data = [(torch.randn(1, 20, 48, generator=g), torch.randn(1, 20, 48, generator=g)) for _ in range(3)]
    got = _train_on_device(model, "att", data)
    graphs = training.current().trainers[0].stages[0].graphs
    assert set(graphs.saved) <= {node.name for node in graphs.forward.inputs}
    assert got == pytest.approx(_train_in_torch(twin, data), rel=RTOL)
