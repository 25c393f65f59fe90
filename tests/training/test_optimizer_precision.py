"""Optimizer programs and the precision of what they carry from step to step.

An optimizer accumulates across steps: Adam's moments decay by β each step, a LARS momentum by its momentum,
and every parameter adds up its updates. Grayskull's Dest holds no Float32, so an optimizer program computes
through a 16-bit Float16_b Dest there: β2 = 0.999 cannot be carried (Adam's first step came out twice torch's
with no error), and a parameter stored in Float32 was rounded to Float16_b every step (LARS's small steps came
out 3x torch's). Where that is so, the optimizer runs on the host CPU, with a warning and its reason in the
trainer's report; where the device can carry it, it stays there.

Also documented here: how a parameter stored in Float16_b moves by one step (the golden packs Float16_b by
truncation, as the BBE host model the spec follows does).
"""

import copy
import logging
import queue

import pytest
import torch

import pybuda
from pybuda.arch import get_device_descriptor
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat
from pybuda.golden.formats import quantize
from pybuda.update_graph import DECAY_TOLERANCE, decay_error
from pybuda.runtime.training_programs import compile_optimizer

GS, WH = pybuda.BackendDevice.Grayskull, pybuda.BackendDevice.Wormhole_B0


def _placement(optimizer, arch, parameter_formats=None):
    """Where ``optimizer``'s program for one 32x32 parameter runs on ``arch`` (compiled, not run)."""
    _, program = compile_optimizer("t", optimizer, {"w": (32, 32)}, device_desc=get_device_descriptor(arch),
                                   devtype=None, config=CompilerConfig(), run=False,
                                   parameter_formats=parameter_formats)
    return program.placement


def test_update_graph_records_the_state_each_rule_decays():
    adam = pybuda.optimizers.Adam(learning_rate=0.01).build_update_graph({"w": ((4, 4), torch.float32)})
    assert adam.state_decays == {"w.mean": 0.9, "w.variance": 0.999, "w.beta1_pow": 0.9, "w.beta2_pow": 0.999}
    lars = pybuda.optimizers.LARS(momentum=0.5).build_update_graph({"w": ((4, 4), torch.float32)})
    assert lars.state_decays == {"w.momentum": 0.5}
    assert pybuda.optimizers.SGD(0.1).build_update_graph({"w": ((4, 4), torch.float32)}).state_decays == {}


def test_decay_error_is_a_last_place_unit_against_the_per_step_change():
    assert decay_error(0.999, DataFormat.Float16_b) == pytest.approx(2 ** -7 / 0.001)  # 7.8: hopeless
    assert decay_error(0.9, DataFormat.Float16_b) == pytest.approx(2 ** -7 / 0.1)  # 0.078: carried
    assert decay_error(0.9, DataFormat.Float16_b) < DECAY_TOLERANCE
    assert decay_error(0.999, DataFormat.Float32) == pytest.approx(2 ** -23 / 0.001)
    assert decay_error(0.999, DataFormat.Float32) < DECAY_TOLERANCE
    assert decay_error(0.999, DataFormat.Float16) > DECAY_TOLERANCE  # 10 mantissa bits are not enough either
    assert decay_error(0.0, DataFormat.Float16_b) == 0.0


@pytest.mark.parametrize("optimizer, arch, formats, where", [
    (lambda: pybuda.optimizers.Adam(learning_rate=0.01), GS, None, "host"),
    (lambda: pybuda.optimizers.AdamW(learning_rate=0.01), GS, None, "host"),
    (lambda: pybuda.optimizers.LAMB(learning_rate=0.01), GS, None, "host"),
    (lambda: pybuda.optimizers.LARS(learning_rate=0.1, momentum=0.99), GS, None, "host"),
    # β = 0.9 survives a Float16_b Dest (a unit is at most 8 % of the change); Float16_b parameters too.
    (lambda: pybuda.optimizers.Adam(learning_rate=0.01, beta2=0.9), GS, {"w": DataFormat.Float16_b}, "device"),
    (lambda: pybuda.optimizers.LARS(learning_rate=0.1), GS, {"w": DataFormat.Float16_b}, "device"),
    (lambda: pybuda.optimizers.SGD(learning_rate=0.1), GS, {"w": DataFormat.Float16_b}, "device"),
    # A Float32 parameter would be rounded to Float16_b by every update on Grayskull.
    (lambda: pybuda.optimizers.SGD(learning_rate=0.1), GS, {"w": DataFormat.Float32}, "host"),
    (lambda: pybuda.optimizers.Adam(learning_rate=0.01), WH, None, "device"),
    (lambda: pybuda.optimizers.LAMB(learning_rate=0.01), WH, {"w": DataFormat.Float32}, "device"),
    (lambda: pybuda.optimizers.SGD(learning_rate=0.1), WH, {"w": DataFormat.Float32}, "device"),
])
def test_an_optimizer_runs_on_the_host_where_the_device_cannot_carry_its_state(optimizer, arch, formats, where,
                                                                              caplog):
    with caplog.at_level(logging.WARNING, logger="pybuda.runtime.training"):
        placement = _placement(optimizer(), arch, formats)
    assert placement.split(":")[0] == where, placement
    warned = [r.getMessage() for r in caplog.records if "runs on the host CPU" in r.getMessage()]
    assert bool(warned) == (where == "host")
    if where == "host":
        assert "Grayskull's holds no Float32" in placement and placement[len("host: "):] in warned[0]


def _one_linear(optimizer, arch, steps=1):
    """A torch Linear trained ``steps`` steps on ``arch`` with an MSE loss on the CPU: (initial parameters,
    gradients of the first step, parameters after, losses, the trainer's report, the data)."""
    from pybuda.runtime import training

    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    initial = {k: p.detach().clone() for k, p in model.named_parameters()}
    twin = copy.deepcopy(model)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("lin", model), optimizer=optimizer, arch=arch)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(1, 4, 32, generator=g), torch.randn(1, 4, 32, generator=g)) for _ in range(steps)]
    for x, y in data:
        tt0.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    losses = queue.Queue()
    pybuda.run_training(steps=steps, loss_queue=losses)
    after = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    report = list(training.current().trainer_of(tt0).report)
    return initial, after, [float(losses.get()[0].value()) for _ in data], report, twin, data


def _torch_steps(twin, optimizer, data):
    opt = optimizer.get_pytorch_optimizer(list(twin.parameters()))
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(twin(x), y).backward()
        opt.step()
    return {k: p.detach() for k, p in twin.named_parameters()}


@pytest.mark.parametrize("make", [lambda: pybuda.optimizers.Adam(learning_rate=0.01),
                                  lambda: pybuda.optimizers.AdamW(learning_rate=0.01, weight_decay=0.0)])
def test_adam_on_grayskull_steps_as_torch_with_its_optimizer_on_the_host(make, caplog):
    # Grayskull's Float16_b Dest made β2 = 0.999 0.996 and 1 − β2^t 4x too large: the first step was 2x lr
    # (max 0.0205 at lr 0.01), no warning. Adam's first step is lr·sign(g) for every element.
    with caplog.at_level(logging.WARNING, logger="pybuda.runtime.training"):
        initial, after, _, report, _, _ = _one_linear(make(), GS)
    for name, before in initial.items():
        step = (after[name].reshape(before.shape) - before).abs()
        assert float(step.max()) < 0.01 * 1.001 and float(step.min()) > 0.01 * 0.99, name
    assert any("'opt_tt0' runs on the host CPU" in r.getMessage() for r in caplog.records)
    assert any(line.startswith("opt_tt0: host:") and "β = 0.999" in line for line in report), report


def test_float32_parameters_on_grayskull_train_as_torch():
    # Float32 parameters were updated through Grayskull's Float16_b Dest: rounded to Float16_b (by truncation)
    # every step, so LARS's steps, small against that unit, came out 3.3x torch's on average, no warning.
    pybuda.set_configuration_options(default_df_override=DataFormat.Float32)
    optimizer = pybuda.optimizers.LARS(learning_rate=1.0)
    initial, after, _, report, twin, data = _one_linear(optimizer, GS, steps=4)
    assert any(line.startswith("opt_tt0: host:") and "stored in Float32" in line for line in report), report
    want = _torch_steps(twin, pybuda.optimizers.LARS(learning_rate=1.0), data)
    for name, before in initial.items():
        moved = (after[name].reshape(before.shape) - before).abs().mean()
        torch_moved = (want[name] - before).abs().mean()
        # The forward and backward still compute through Float16_b: gradients within about 1 %.
        assert float(moved / torch_moved) == pytest.approx(1.0, abs=0.02), name


def test_a_float16_b_parameter_moves_by_one_step_truncated_to_its_format():
    # Documents the golden's numerics, not a bug: on Wormhole the optimizer computes in Float32, and the new
    # value is packed to the parameter's Float16_b queue by truncation (the BBE host model, spec §8.2; the
    # chip's packer rounds to nearest even by default). The host's write of the initial Float32 value into
    # that queue truncates too, so against the Float32 initial value a step is off by up to two units in the
    # last place (first-step sizes 0.93x to 1.17x lr for |p| < 0.25 at lr 0.01), and by at most one against
    # the stored value. The step itself is within 0.5 % of lr (TF32 multiplier operands, SFPU reciprocal and
    # square root).
    pybuda.set_configuration_options(default_df_override=DataFormat.Float16_b)
    lr = 0.01
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    initial = {k: p.detach().clone() for k, p in model.named_parameters()}
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("lin", model),
                          optimizer=pybuda.optimizers.Adam(learning_rate=lr), arch=WH)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    g = torch.Generator().manual_seed(0)
    tt0.push_to_inputs(torch.randn(1, 4, 32, generator=g))
    cpu.push_to_target_inputs(torch.randn(1, 4, 32, generator=g))
    pybuda.initialize_pipeline(training=True)
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    grads = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    pybuda.run_optimizer()
    after = pybuda.get_parameter_checkpoint(tt0)[0]
    for name, before in initial.items():
        got = after[name].value().reshape(before.shape)
        direction = torch.sign(grads[name].reshape(before.shape))  # Adam's first step: lr·sign(g)
        stored = quantize(before, DataFormat.Float16_b)
        exact = stored - lr * direction
        # Float16_b's unit in the last place (7 mantissa bits), of the larger of the old and the new value.
        ulp = 2.0 ** (torch.floor(torch.log2(torch.maximum(exact.abs(), stored.abs()))) - 7)
        slack = 0.005 * lr  # the step's own error: TF32 multiplier operands, SFPU reciprocal and sqrt
        assert bool(((got - exact).abs() <= ulp + slack).all()), name
        assert bool((got.abs() <= exact.abs() + slack).all()), name  # truncation: towards zero
        from_initial = (got - (before - lr * direction)).abs()
        assert bool((from_initial <= 2 * ulp + slack).all()), name
        assert float((from_initial / ulp).max()) > 1.0, name  # the two truncations do add up


@pytest.mark.parametrize("override, explicit", [(DataFormat.Float32, None), (None, DataFormat.Float32)])
def test_gradients_accumulate_in_a_format_the_chip_holds(override, explicit):
    """A Float32 training run accumulates gradients in Float32 on Wormhole; Grayskull's Dest holds no Float32, so
    there they accumulate in Float16_b (a training netlist accumulating in Float32 did not validate on Grayskull,
    and the programs fell back to separate netlists)."""
    from pybuda.runtime.training_programs import accumulate_format

    cfg = CompilerConfig(default_df_override=override, default_accumulate_df=explicit)
    assert accumulate_format(cfg, get_device_descriptor(WH)) == DataFormat.Float32
    assert accumulate_format(cfg, get_device_descriptor(GS)) == DataFormat.Float16_b
