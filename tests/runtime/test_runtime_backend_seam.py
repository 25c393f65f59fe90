"""The executor seam: what a TTDevice hands a backend, and the microbatch helpers."""

import sys
import types

import pytest
import torch

import pybuda
import pybuda.op
from pybuda.errors import InputError
from pybuda.runtime import backend_api


class Matmul(pybuda.PyBudaModule):
    def __init__(self, name, weight):
        super().__init__(name)
        self.w = pybuda.Parameter(weight, requires_grad=False)

    def forward(self, x):
        return pybuda.op.Matmul("mm", x, self.w)


class RecordingExecutor:
    """A stand-in golden executor: doubles the CPU reference result so the test can tell it ran."""

    def __init__(self, compile_results, microbatch, device):
        self.compile_results, self.microbatch, self.device = compile_results, microbatch, device
        self.graph = compile_results.initial_graph
        self.params = {n.name: self.graph.tensors[n.name] for n in self.graph.parameters}
        self.calls = []

    def run(self, inputs):
        self.calls.append([tuple(t.shape) for t in inputs])
        ref = backend_api.CPUReferenceExecutor(self.graph, self.microbatch)
        ref.update_parameters(self.params)
        return [2 * t for t in ref.run(inputs)]

    def get_parameters(self):
        return dict(self.params)

    def update_parameters(self, params):
        self.params.update(params)


def test_golden_backend_plugs_in_through_create_executor(monkeypatch):
    made = []

    def create_executor(compile_results, *, microbatch, device):
        made.append(RecordingExecutor(compile_results, microbatch, device))
        return made[-1]

    fake = types.ModuleType("pybuda.golden.executor")
    fake.create_executor = create_executor
    monkeypatch.setitem(sys.modules, "pybuda.golden.executor", fake)

    w = torch.randn(32, 32)
    tt0 = pybuda.TTDevice("tt0", module=Matmul("mm0", w), arch=pybuda.BackendDevice.Wormhole_B0)
    x = torch.randn(3, 32)  # microbatch 3 of [1, 32] samples
    out = pybuda.run_inference(inputs=[x]).get(timeout=30)
    (executor,) = made
    assert executor.microbatch == 3
    assert executor.device.arch == pybuda.BackendDevice.Wormhole_B0
    assert executor.compile_results.netlist is not None  # it gets the compiled netlist, not the model
    assert executor.calls == [[(3, 32)]]  # one call per push, microbatch folded into dim 0
    torch.testing.assert_close(out[0].value(), 2 * (x @ w), rtol=1e-5, atol=1e-5)
    assert tt0._artifact.backend == "golden"
    assert tt0.get_compiled_results()[0] is executor.compile_results


def test_split_and_fold_microbatch():
    a, b = torch.randn(4, 3), torch.randn(4, 2, 5)
    samples = backend_api.split_microbatch([a, b], [(1, 3), (1, 2, 5)], "g")
    assert len(samples) == 4 and samples[2][0].shape == (1, 3)
    folded = backend_api.fold_microbatch(samples)
    assert torch.equal(folded[0], a) and torch.equal(folded[1], b)
    assert backend_api.batched_shape((1, 3), 4) == (4, 3)
    assert backend_api.batched_shape((), 4) == (4,)
    assert backend_api.fold_microbatch([[torch.tensor(1.0)], [torch.tensor(2.0)]])[0].shape == (2,)
    with pytest.raises(InputError, match="microbatch"):
        backend_api.split_microbatch([a], [(1, 4)], "g")
    with pytest.raises(InputError, match="disagree"):
        backend_api.split_microbatch([a, torch.randn(2, 2, 5)], [(1, 3), (1, 2, 5)], "g")


def test_cpu_device_runs_pybuda_modules_on_the_cpu_reference():
    w = torch.randn(32, 8)
    cpu0 = pybuda.CPUDevice("cpu0", module=Matmul("mm0", w))
    x = torch.randn(2, 32)
    out = pybuda.run_inference(inputs=[x]).get(timeout=30)
    torch.testing.assert_close(out[0].value(), x @ w)
    assert set(pybuda.get_parameter_checkpoint(device=cpu0)[0]) == {"mm0.w"}
