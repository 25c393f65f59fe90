"""One training netlist per device: forward, backward and optimizer programs over shared queues.

The issue's contract: backward and optimizer ops have their own epochs; the netlist has run_fwd_*, run_bwd_*
and run_opt_* programs and accumulation queues; the golden device executes them with the chip's formats
(gradients accumulate in acc_df). These tests read the netlist the trainer built and check that training
through it matches torch.
"""

import copy

import pytest
import torch

import pybuda
from pybuda.netlist import parse_yaml, to_yaml
from pybuda.netlist.model import Param, VarInst
from pybuda.netlist.training import ZERO_GRAD_PARAM
from pybuda.netlist.validate import validate
from pybuda.runtime import training
from test_training_models import TorchCNN

#: Float32 on the chip multiplies in TF32: gradients and parameters within these of torch's.
RTOL, ATOL = 2e-2, 2e-3


class MLP(pybuda.PyBudaModule):
    """Linear, bias, ReLU, linear (feature sizes not multiples of 32)."""

    def __init__(self, name, d_in=20, d_hidden=40, d_out=10):
        super().__init__(name)
        g = torch.Generator().manual_seed(0)
        self.w1 = pybuda.Parameter(torch.randn(d_in, d_hidden, generator=g) * d_in ** -0.5, requires_grad=True)
        self.b1 = pybuda.Parameter(torch.zeros(d_hidden), requires_grad=True)
        self.w2 = pybuda.Parameter(torch.randn(d_hidden, d_out, generator=g) * d_hidden ** -0.5, requires_grad=True)

    def forward(self, x):
        h = pybuda.op.Relu("relu", pybuda.op.Add("bias", pybuda.op.Matmul("mm1", x, self.w1), self.b1))
        return pybuda.op.Matmul("mm2", h, self.w2)


def torch_forward(params, x):
    return torch.relu(x @ params["mlp.w1"] + params["mlp.b1"]) @ params["mlp.w2"]


def per_sample_mse(pred, target):
    return ((pred - target) ** 2).mean(dim=(-2, -1)).sum()


def data(n, mb=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(20, 10, generator=g)
    xs = [torch.randn(mb, 3, 20, generator=g) for _ in range(n)]
    return xs, [torch.tanh(x @ w) for x in xs]


def start(optimizer, df=pybuda.DataFormat.Float32, steps=1, mb=4):
    acc = pybuda.DataFormat.Float32 if df == pybuda.DataFormat.Float32 else pybuda.DataFormat.Float16_b
    pybuda.set_configuration_options(default_df_override=df, accumulate_df=acc,
                                     math_fidelity=pybuda.MathFidelity.HiFi4)
    mlp = MLP("mlp")
    tt0 = pybuda.TTDevice("tt0", module=mlp, optimizer=optimizer, arch=pybuda.BackendDevice.Wormhole_B0,
                          fp32_fallback=df)
    tt0.place_loss_module(pybuda.op.loss.MSELoss("mse"))
    xs, ys = data(steps, mb=mb)
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        tt0.push_to_target_inputs(y)
    pybuda.initialize_pipeline(training=True, sample_inputs=(xs[0],), sample_targets=(ys[0],))
    params = {p.get_name(): p.value().detach().clone().requires_grad_(True) for p in mlp.get_parameters()}
    return tt0, training.current().trainer_of(tt0), params, xs, ys


def test_one_netlist_with_forward_backward_and_optimizer_programs():
    tt0, trainer, _, _, _ = start(pybuda.optimizers.SGD(learning_rate=0.05))
    tnl = trainer.training_netlist
    assert tnl is not None, trainer.report
    netlist = tnl.netlist
    # Model and loss each get a forward and a backward program; one optimizer program for the device.
    assert [p.name for p in netlist.programs] == ["run_fwd_0", "run_fwd_1", "run_bwd_1", "run_bwd_0", "run_opt_0"]
    kinds = [name.split("_")[0] for name in netlist.graphs]
    assert kinds == sorted(kinds, key=["fwd", "bwd", "opt"].index) and set(kinds) == {"fwd", "bwd", "opt"}
    validate(netlist, trainer.desc)
    assert parse_yaml(to_yaml(netlist)) == netlist

    # Every trainable parameter: one ram queue, read by forward and backward, written by an optimizer op.
    opt_graphs = {g for g in netlist.graphs if g.startswith("opt_")}
    for name in ("mlp.w1", "mlp.b1", "mlp.w2"):
        q = netlist.queues[name]
        assert q.type == "ram"
        graph, _ = netlist.find_op(q.input)
        assert graph.name in opt_graphs
    # Gradient accumulation queues: ram, one entry, in acc_df, written by gradient ops of a backward epoch
    # and read by the optimizer epoch.
    assert set(tnl.accumulators) == {"grad.mlp.w1", "grad.mlp.b1", "grad.mlp.w2"}
    for qname in tnl.accumulators.values():
        q = netlist.queues[qname]
        assert (q.type, q.entries, q.df, q.loc) == ("ram", 1, pybuda.DataFormat.Float32, "dram")
        graph, op = netlist.find_op(q.input)
        assert graph.name.startswith("bwd_") and op.gradient_op and op.out_df == op.intermed_df == q.df
        assert {g.name for g, _, _ in netlist.readers_of(qname)} <= opt_graphs
    # Activations the backward needs stay in DRAM: written by a forward epoch, read by a backward one.
    saved = [lk for lk in tnl.links if lk.kind == "saved"]
    assert saved
    for lk in saved:
        q = netlist.queues[tnl.part(lk.target_part).queue_names[lk.target]]
        assert q.loc == "dram" and netlist.find_op(q.input)[0].name.startswith("fwd_")
        assert all(g.name.startswith("bwd_") for g, _, _ in netlist.readers_of(q.name))
    # The backward program zeroes its accumulators on the first microbatch when asked to.
    bwd = netlist.program("run_bwd_0")
    assert isinstance(bwd.instructions[0], Param) and ZERO_GRAD_PARAM in bwd.instructions[0].names
    zeroed = {q for inst in bwd.instructions if hasattr(inst, "queue_settings")
              for q, s in inst.queue_settings.items() if s.zero not in (None, False)}
    assert zeroed == {tnl.accumulators[n] for n in ("grad.mlp.w1", "grad.mlp.b1", "grad.mlp.w2")}
    assert any(isinstance(i, VarInst) and i.args == (0,) for i in bwd.instructions)
    assert f"training netlist: {len(netlist.graphs)} epochs" in " ".join(trainer.report)


def test_performance_is_modelled_from_the_training_netlist():
    tt0, trainer, _, _, _ = start(pybuda.optimizers.SGD(learning_rate=0.05))
    perf = tt0.training_performance(microbatch_count=2, accumulation_steps=2)
    assert perf.epochs == len(trainer.training_netlist.netlist.graphs)
    assert len(perf.forward) == len(perf.backward) == 2 and perf.optimizer is not None
    assert perf.samples_per_step == 4 * 2 * 2 and perf.samples_per_sec > 0
    # Twice the microbatches per step: the optimizer's cost is shared by more samples.
    more = tt0.training_performance(microbatch_count=4, accumulation_steps=2)
    assert more.samples_per_sec > perf.samples_per_sec


def test_host_pushes_no_saved_activation_and_pops_no_parameter_gradient():
    _, trainer, _, _, _ = start(pybuda.optimizers.SGD(learning_rate=0.05))
    model = trainer.stages[0]
    bwd_part = model.backward.executor.part
    fwd_part = model.forward.executor.part
    from_forward = set(model.graphs.saved_outputs_sources())
    assert from_forward and from_forward <= bwd_part.linked_inputs
    assert set(model.graphs.saved_outputs) <= fwd_part.linked_outputs
    assert set(model.graphs.param_grads.values()) <= bwd_part.linked_outputs
    opt_part = trainer.optimizer_program.executor.part
    assert set(trainer.update.grad_inputs.values()) <= opt_part.linked_inputs
    assert set(trainer.update.param_outputs.values()) <= opt_part.linked_outputs


def test_zero_grad_zeroes_the_device_accumulators():
    tt0, trainer, params, xs, ys = start(pybuda.optimizers.SGD(learning_rate=0.05), steps=1)
    loss = per_sample_mse(torch_forward(params, xs[0]), ys[0])
    loss.backward()
    want = {k: p.grad for k, p in params.items()}
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    first = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    for k, g in want.items():
        assert torch.allclose(first[k], g, rtol=RTOL, atol=ATOL), k
    # The same sample again with zero_grad: the accumulator restarts from zero.
    tt0.push_to_inputs(xs[0])
    tt0.push_to_target_inputs(ys[0])
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    again = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    for k in want:
        assert torch.allclose(again[k], first[k], rtol=1e-5, atol=1e-6), k
    # Without zero_grad it accumulates on top.
    tt0.push_to_inputs(xs[0])
    tt0.push_to_target_inputs(ys[0])
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=False)
    twice = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    for k in want:
        assert torch.allclose(twice[k], 2 * first[k], rtol=1e-4, atol=1e-6), k


def test_gradients_accumulate_in_the_accumulate_format():
    _, trainer, _, _, _ = start(pybuda.optimizers.SGD(learning_rate=0.05), df=pybuda.DataFormat.Float16_b)
    netlist = trainer.training_netlist.netlist
    for qname in trainer.training_netlist.accumulators.values():
        q = netlist.queues[qname]
        assert q.df == pybuda.DataFormat.Float16_b
        assert netlist.find_op(q.input)[1].acc_df == pybuda.DataFormat.Float16_b
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    for name, g in trainer.grads.items():
        # Values held in Float16_b: bfloat16 round trips them exactly.
        assert torch.equal(g, g.to(torch.bfloat16).float()), name


def _adam_run(steps=3):
    optimizer = pybuda.optimizers.Adam(learning_rate=0.01)
    tt0, trainer, params, xs, ys = start(optimizer, steps=steps)
    torch_opt = optimizer.get_pytorch_optimizer(params)
    for x, y in zip(xs, ys):
        torch_opt.zero_grad()
        per_sample_mse(torch_forward(params, x), y).backward()
        torch_opt.step()
        pybuda.run_forward(1)
        pybuda.run_backward(1, zero_grad=True)
        pybuda.run_optimizer()
    got = {k: v.value().clone() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    kinds = {lk.kind for lk in trainer.training_netlist.links} if trainer.training_netlist is not None else set()
    pybuda.shutdown()
    pybuda.pybuda_reset()
    return got, {k: v.detach() for k, v in params.items()}, kinds


def test_adam_state_is_updated_in_place_on_the_device(monkeypatch):
    on_device, want, kinds = _adam_run()
    assert kinds >= {"state", "update", "grad"}
    # The same steps with each program in its own netlist and the state going through the host.
    monkeypatch.setattr(training.TTTrainer, "_build_training_netlist", lambda self: None)
    via_host, _, no_links = _adam_run()
    assert not no_links
    for name, value in want.items():
        assert torch.allclose(on_device[name], via_host[name], rtol=1e-5, atol=1e-6), name
        # Adam follows the sign of tiny gradients too, so TF32 products move it a little off torch's path.
        assert torch.corrcoef(torch.stack([on_device[name].flatten(), value.flatten()]))[0, 1] > 0.99, name


def test_optimizer_without_backward_steps_on_zero_gradients():
    tt0, trainer, params, xs, ys = start(pybuda.optimizers.SGD(learning_rate=0.05), steps=1)
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    pybuda.run_optimizer()
    after_one = {k: v.value().clone() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    trainer.zero_grad()
    pybuda.run_optimizer()  # no backward since zero_grad: SGD leaves the parameters where they are
    after_two = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    for k in after_one:
        assert torch.equal(after_one[k], after_two[k]), k


def test_more_waiting_forwards_than_the_netlist_holds_is_a_clear_error():
    _, trainer, _, xs, ys = start(pybuda.optimizers.SGD(learning_rate=0.05), steps=1)
    capacity = trainer.saved_capacity
    tt0 = trainer.device
    for _ in range(capacity):
        tt0.push_to_inputs(xs[0])
        tt0.push_to_target_inputs(ys[0])
    with pytest.raises(pybuda.errors.PybudaError, match="wait for their backward"):
        pybuda.run_forward(capacity + 1)


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(20, 40)
        self.fc2 = torch.nn.Linear(40, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _float32_sgd_pipeline(name, model):
    """A Float32/HiFi4 TTDevice training the PyTorch ``model`` with SGD, and a CPUDevice with a summed MSE loss."""
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     accumulate_df=pybuda.DataFormat.Float32, math_fidelity=pybuda.MathFidelity.HiFi4)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule(name, model), arch=pybuda.BackendDevice.Wormhole_B0,
                          optimizer=pybuda.optimizers.SGD(learning_rate=0.1), fp32_fallback=pybuda.DataFormat.Float32)
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss(reduction="sum")))
    return tt0, cpu


def test_pytorch_module_gradients_accumulate_in_the_optimizer_layout():
    """torch.nn.Linear keeps its weight as (out, in): the backward's weight gradient comes out transposed
    relative to what the optimizer reads, so the accumulating nop transposes it on its way in."""
    model = TorchMLP()
    tt0, cpu = _float32_sgd_pipeline("mlp", model)
    xs, ys = data(1, mb=2)
    tt0.push_to_inputs(xs[0])
    cpu.push_to_target_inputs(ys[0])
    pybuda.initialize_pipeline(training=True)
    trainer = training.current().trainer_of(tt0)
    tnl = trainer.training_netlist
    validate(tnl.netlist, trainer.desc)
    assert set(tnl.accumulators) == set(trainer.stages[0].graphs.param_grads.values())
    turned = [lk for lk in tnl.links if lk.at_producer]
    assert {lk.kind for lk in turned} == {"grad"} and len(turned) == 2  # the two weights
    for lk in turned:
        q = tnl.netlist.queues[tnl.part(lk.target_part).queue_names[lk.target]]
        _, op = tnl.netlist.find_op(q.input)
        assert op.gradient_op and [tm.name for tm in op.tms_of(0)] == ["transpose"]
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    grads = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    torch.nn.functional.mse_loss(model(xs[0]), ys[0], reduction="sum").backward()
    for name, p in model.named_parameters():
        assert grads[name].shape == p.shape
        assert torch.corrcoef(torch.stack([grads[name].flatten(), p.grad.flatten()]))[0, 1] > 0.99, name


def test_compiled_programs_model_one_training_step_without_running():
    """What ``pybuda benchmark -t`` does: compile the programs (run=False) and model the training netlist."""
    from pybuda.compile import module_to_graph
    from pybuda.config import _get_global_compiler_config

    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float16_b,
                                     math_fidelity=pybuda.MathFidelity.HiFi3)
    config = _get_global_compiler_config()
    graph = module_to_graph(MLP("mlp"), [torch.randn(1, 3, 20)], graph_name="mlp").graph
    common = dict(device_desc="wh_n150", devtype=None, config=config, run=False)
    tg, fwd, bwd = training.compile_stage("mlp", graph, input_grads=(), microbatch=4, **common)
    shapes = {n: tuple(tg.forward[n].shape) for n in tg.param_grads}
    update, opt = training.compile_optimizer("mlp", pybuda.optimizers.Adam(learning_rate=1e-3), shapes,
                                             junk_gradients=training.junk_padded_gradients(tg, bwd), **common)
    tnl, perf = training.model_training_step("mlp", tg, fwd, bwd, update, opt, microbatch=4,
                                             acc_df=pybuda.DataFormat.Float16_b, microbatch_count=2)
    assert [p.name for p in tnl.netlist.programs] == ["run_fwd_0", "run_bwd_0", "run_opt_0"]
    assert set(tnl.accumulators) == set(tg.param_grads.values())
    assert perf.epochs == len(tnl.netlist.graphs) and perf.samples_per_sec > 0


def test_forward_inputs_the_backward_reads_stay_on_the_device():
    """The model's input feeds the first weight's gradient: the forward returns a kept copy that the backward
    reads from device DRAM, so the host pushes each input once."""
    _, trainer, _, _, _ = start(pybuda.optimizers.SGD(learning_rate=0.05))
    model = trainer.stages[0]
    x = model.graphs.forward.inputs[0].name
    assert x in model.graphs.saved and x in model.graphs.saved_outputs_sources()
    assert x in model.backward.executor.part.linked_inputs
    line = next(line for line in trainer.report if line.startswith("training netlist:"))
    assert "via the host: 0/1 forward inputs" in line, line


class TorchConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def test_conv_gradients_accumulate_in_the_backward_layout():
    """A conv weight's gradient leaves the backward as the matmul that computed it, (out, in * kh * kw), not
    in the (out, in, kh, kw) layout the optimizer's parameter has: the optimizer reads the accumulator in
    the backward's layout and reshapes on the device, so no gradient goes through the host."""
    model = TorchConvNet()
    tt0, cpu = _float32_sgd_pipeline("conv", model)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(1, 3, 8, 8, generator=g), torch.randn(1, 4, generator=g)
    tt0.push_to_inputs(x)
    cpu.push_to_target_inputs(y)
    pybuda.initialize_pipeline(training=True)
    trainer = training.current().trainer_of(tt0)
    tnl = trainer.training_netlist
    validate(tnl.netlist, trainer.desc)
    assert set(tnl.accumulators) == set(trainer.stages[0].graphs.param_grads.values()), trainer.report
    reshaped = [p for p in trainer.update.param_names
                if tuple(trainer.update.graph[trainer.update.grad_inputs[p]].shape) != trainer.shapes[p]]
    assert "conv.weight" in reshaped
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pybuda.run_forward(1)
    pybuda.run_backward(1, zero_grad=True)
    grads = {k: v.value() for k, v in pybuda.get_parameter_gradients(tt0)[0].items()}
    pybuda.run_optimizer()
    after = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
    for name, p in model.named_parameters():
        assert grads[name].shape == p.shape
        assert torch.corrcoef(torch.stack([grads[name].flatten(), p.grad.flatten()]))[0, 1] > 0.99, name
        assert torch.allclose(grads[name], p.grad, rtol=RTOL, atol=ATOL), name
        assert torch.allclose(after[name], before[name] - 0.1 * p.grad, rtol=RTOL, atol=ATOL), name


def test_model_training_compiles_merges_and_models_in_one_call():
    """``pybuda benchmark -t``'s entry point: the same training netlist as compiling the programs one by one."""
    from pybuda.compile import module_to_graph
    from pybuda.config import _get_global_compiler_config

    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float16_b,
                                     math_fidelity=pybuda.MathFidelity.HiFi3)
    graph = module_to_graph(MLP("mlp"), [torch.randn(1, 3, 20)], graph_name="mlp").graph
    tnl, perf = training.model_training("mlp", graph, pybuda.optimizers.Adam(learning_rate=1e-3), device_desc="wh_n150",
                                        config=_get_global_compiler_config(), microbatch=4, accumulation_steps=2)
    assert [p.name for p in tnl.netlist.programs] == ["run_fwd_0", "run_bwd_0", "run_opt_0"]
    assert len(tnl.accumulators) == 3 and {lk.kind for lk in tnl.links} >= {"saved", "grad", "update", "state"}
    assert perf.samples_per_step == 8 and perf.epochs == len(tnl.netlist.graphs)


def test_channels_last_activations_stay_on_the_device():
    """A conv's output leaves the forward channels-last (the host would turn it to NCHW): the backward is
    compiled to read it in that layout and turn it on the device, so no saved activation crosses the host,
    and two steps over microbatches of 2 still follow torch."""
    model = TorchCNN(channels=6, outputs=4)
    reference = copy.deepcopy(model)
    tt0, cpu = _float32_sgd_pipeline("convs", model)
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(2, 3, 10, 10, generator=g) for _ in range(2)]
    ys = [torch.randn(2, 4, generator=g) for _ in range(2)]
    for x, y in zip(xs, ys):
        tt0.push_to_inputs(x)
        cpu.push_to_target_inputs(y)
    pybuda.initialize_pipeline(training=True)
    trainer = training.current().trainer_of(tt0)
    stage = trainer.stages[0]
    assert stage.backward.input_layouts, trainer.report  # the conv outputs are read channels-last
    line = next(line for line in trainer.report if line.startswith("training netlist:"))
    saved = len(stage.graphs.saved) - 1  # the saved activations other than the model's input
    assert f"0/{saved} activations" in line, line
    assert all(name in stage.backward.executor.part.linked_inputs for name in stage.backward.input_layouts)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in zip(xs, ys):
        pybuda.run_forward(1)
        pybuda.run_backward(1, zero_grad=True)
        pybuda.run_optimizer()
        opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y, reduction="sum").backward()
        opt.step()
    after = {k: v.value() for k, v in pybuda.get_parameter_checkpoint(tt0)[0].items()}
    for name, p in reference.named_parameters():
        assert torch.corrcoef(torch.stack([after[name].flatten(), p.detach().flatten()]))[0, 1] > 0.99, name
        assert torch.allclose(after[name], p.detach(), rtol=RTOL, atol=ATOL), name
