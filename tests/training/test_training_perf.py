"""The modelled training step of a training netlist charges what still crosses the host.

Whatever the programs of one training netlist hand each other through the host (saved activations, gradients
the host accumulates) costs tilize/untilize and PCIe on the card, as the inference model charges a program's
host I/O; and the programs of a step share the chip's binary cache.
"""

import dataclasses

import pytest
import torch

import pybuda
from pybuda.golden.executor import executor_inputs
from pybuda.netlist import training as tn
from pybuda.perf.training import training_perf
from pybuda.runtime import training
from pybuda.runtime.training_netlist import training_netlist_performance


class MLP(pybuda.PyBudaModule):
    """Linear, bias, ReLU, linear (feature sizes not multiples of 32)."""

    def __init__(self, name):
        super().__init__(name)
        g = torch.Generator().manual_seed(0)
        self.w1 = pybuda.Parameter(torch.randn(20, 40, generator=g) * 0.2, requires_grad=True)
        self.b1 = pybuda.Parameter(torch.zeros(40), requires_grad=True)
        self.w2 = pybuda.Parameter(torch.randn(40, 10, generator=g) * 0.2, requires_grad=True)

    def forward(self, x):
        h = pybuda.op.Relu("relu", pybuda.op.Add("bias", pybuda.op.Matmul("mm1", x, self.w1), self.b1))
        return pybuda.op.Matmul("mm2", h, self.w2)


MB = 4


@pytest.fixture(scope="module")
def compiled():
    """The MLP's forward, backward and Adam programs, compiled without running (as ``benchmark -t`` does)."""
    from pybuda.compile import module_to_graph
    from pybuda.config import CompilerConfig

    config = CompilerConfig(default_df_override=pybuda.DataFormat.Float16_b,
                            default_math_fidelity=pybuda.MathFidelity.HiFi3)
    graph = module_to_graph(MLP("mlp"), [torch.randn(1, 3, 20)], graph_name="mlp", config=config).graph
    common = dict(device_desc="wh_n150", devtype=None, config=config, run=False)
    tg, fwd, bwd = training.compile_stage("mlp", graph, input_grads=(), microbatch=MB, **common)
    shapes = {n: tuple(tg.forward[n].shape) for n in tg.param_grads}
    update, opt = training.compile_optimizer("mlp", pybuda.optimizers.Adam(learning_rate=1e-3), shapes, **common)
    return tg, fwd, bwd, update, opt


def _host_io(reports):
    return sum(r.host_input_cycles_per_microbatch + r.host_output_cycles_per_microbatch for r in reports)


def test_hand_offs_through_the_host_are_charged(compiled):
    """The same programs merged with every queue linked and with none: the unlinked netlist pops each saved
    activation and gradient and pushes them back, which costs host cycles every microbatch."""
    tg, fwd, bwd, update, opt = compiled
    linked, perf = training.model_training_step("mlp", tg, fwd, bwd, update, opt, microbatch=MB,
                                                acc_df=pybuda.DataFormat.Float16_b)
    assert {"saved", "grad"} <= {lk.kind for lk in linked.links}
    programs = {"fwd0": fwd, "bwd0": bwd, "opt": opt}
    parts = [tn.Part(key, key[:3], name, *executor_inputs(programs[key].compile_results)[:2])
             for key, name in (("fwd0", "run_fwd_0"), ("bwd0", "run_bwd_0"), ("opt", "run_opt_0"))]
    bare = tn.build_training_netlist(parts, [], microbatch=MB, acc_df=pybuda.DataFormat.Float16_b,
                                     saved_entries=MB)
    via_host = training_netlist_performance(bare, programs, fwd.compile_results.device, microbatch=MB)

    for p in (perf, via_host):
        reports = p.forward + p.backward
        assert p.host_cycles_per_microbatch == pytest.approx(_host_io(reports), abs=1)  # no cache overflow
        device = sum(r.device_cycles_per_microbatch for r in reports)
        assert p.cycles_per_microbatch >= max(device, p.host_cycles_per_microbatch)
        assert p.host_cycles_per_step == pytest.approx(_host_io([p.optimizer]), abs=1)
    assert via_host.host_cycles_per_microbatch > perf.host_cycles_per_microbatch
    # The backward's gradients and saved activations cross the host only in the unlinked netlist.
    assert _host_io(via_host.backward) > _host_io(perf.backward)
    assert via_host.samples_per_sec <= perf.samples_per_sec
    assert "host" in via_host.summary()


def test_programs_that_overflow_the_binary_cache_together_rewrite_binaries(compiled):
    """Forward, backward and optimizer epochs share the binary cache: when they exceed its slots together,
    the host re-writes every epoch's binaries on each switch, though no program overflows it alone."""
    tg, fwd, bwd, update, opt = compiled
    _, perf = training.model_training_step("mlp", tg, fwd, bwd, update, opt, microbatch=MB,
                                           acc_df=pybuda.DataFormat.Float16_b)
    reports = perf.forward + perf.backward + [perf.optimizer]
    epochs = sum(r.num_epochs for r in reports)
    assert all(r.num_epochs < epochs for r in reports) and epochs >= 2

    def with_slots(r, slots):
        # every switch loads 64 KiB of binaries (a program of one epoch reloads nothing when modelled alone)
        epochs = [dataclasses.replace(e, binary_bytes=64 * 1024) for e in r.epochs]
        return dataclasses.replace(r, epochs=epochs, config=dataclasses.replace(r.config, binary_cache_slots=slots))

    roomy = [with_slots(r, epochs) for r in reports]
    tight = [with_slots(r, epochs - 1) for r in reports]
    fits = training_perf(roomy[:1], roomy[1:2], roomy[2], microbatch=MB, host_io=True)
    spills = training_perf(tight[:1], tight[1:2], tight[2], microbatch=MB, host_io=True)
    rate = reports[0].config.host_binary_write_bytes_per_s / reports[0].clock_hz
    per_microbatch = sum(len(r.epochs) for r in reports[:2]) * 64 * 1024 / rate
    assert fits.host_cycles_per_microbatch == pytest.approx(_host_io(reports[:2]), abs=1)
    assert spills.host_cycles_per_microbatch == pytest.approx(_host_io(reports[:2]) + per_microbatch, rel=1e-6)
    assert spills.host_cycles_per_step == pytest.approx(fits.host_cycles_per_step
                                                        + len(reports[2].epochs) * 64 * 1024 / rate, rel=1e-6)
    assert spills.samples_per_sec <= fits.samples_per_sec


def test_programs_compiled_apart_charge_only_the_forward_inputs(compiled):
    """``estimate_training`` (programs that could not be merged) keeps the old model: the queues between the
    programs are taken to stay on the card, so only the forward's inputs cross the host."""
    from pybuda.perf.training import estimate_training

    _, fwd, bwd, _, opt = compiled
    perf = estimate_training([fwd.compile_results], [bwd.compile_results], opt.compile_results, microbatch=MB)
    assert perf.host_cycles_per_microbatch == 0 and perf.host_cycles_per_step == 0
    device = sum(r.device_cycles_per_microbatch for r in perf.forward + perf.backward)
    assert perf.cycles_per_microbatch == max(device, perf.forward[0].host_input_cycles_per_microbatch)
