"""A PyTorch model is captured once, and run on the CPU reference only when verification asks for it.

``torch.export`` traces the model's forward once (the minimum: that is how it is captured). Before this
was fixed, ``initialize_pipeline`` also ran the captured graph on the CPU twice (for sample outputs nobody
read): for BERT-Large that was as long as the compile itself.
"""

import pytest
import torch

import pybuda
import pybuda.verify as verify_module
from pybuda.verify import VerifyConfig, calculate_pcc

PCC_MIN = 0.99

FORWARD_CALLS = []  # a list, not a module attribute: torch.export must see no module state change


class CountingMLP(torch.nn.Module):
    """A small MLP whose Python forward records every call (eager runs and torch.export's trace)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 32)

    def forward(self, x):
        FORWARD_CALLS.append(1)
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture
def model():
    torch.manual_seed(0)
    FORWARD_CALLS.clear()
    return CountingMLP().eval()


@pytest.fixture
def cpu_graph_runs(monkeypatch):
    """Counts runs of a captured graph on the CPU reference (every caller imports it from pybuda.verify)."""
    runs = []
    real = verify_module.run_graph_on_cpu

    def counted(*args, **kwargs):
        runs.append(args[0].name)
        return real(*args, **kwargs)

    monkeypatch.setattr(verify_module, "run_graph_on_cpu", counted)
    return runs


def _capture_forward_calls(model, x):
    """How often capturing the model alone calls its forward: the minimum a compile can do."""
    from pybuda.frontend.torch import capture

    before = len(FORWARD_CALLS)
    capture(model, (x,), for_device=True)
    return len(FORWARD_CALLS) - before


def test_initialize_pipeline_captures_once_and_runs_nothing_on_the_cpu(model, cpu_graph_runs):
    x = torch.randn(1, 32, 32)
    expected = model(x).detach()
    minimum = _capture_forward_calls(model, x)
    FORWARD_CALLS.clear()
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden)
    tt.place_module(pybuda.PyTorchModule("counting_mlp", model))
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    assert len(FORWARD_CALLS) == minimum >= 1
    assert cpu_graph_runs == []
    assert not tt.get_compiled_results()[0].golden_outputs

    tt.push_to_inputs(x)
    pybuda.run_forward(input_count=1)
    assert calculate_pcc(expected, q.get(timeout=120)[0].value()) >= PCC_MIN
    assert len(FORWARD_CALLS) == minimum  # running an input does not touch the PyTorch model either


def test_run_inference_matches_torch_without_a_reference_run(model, cpu_graph_runs):
    x = torch.randn(1, 32, 32)
    expected = model(x).detach()
    FORWARD_CALLS.clear()
    q = pybuda.run_inference(pybuda.PyTorchModule("counting_mlp", model), inputs=[(x,)])
    got = q.get(timeout=120)[0].value()
    assert calculate_pcc(expected, got) >= PCC_MIN
    assert len(FORWARD_CALLS) == 1  # torch.export's trace
    assert cpu_graph_runs == []


def test_verification_runs_the_cpu_reference(model, cpu_graph_runs):
    x = torch.randn(1, 32, 32)
    expected = model(x).detach()
    FORWARD_CALLS.clear()
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden)
    tt.place_module(pybuda.PyTorchModule("counting_mlp", model))
    pybuda.initialize_pipeline(training=False, sample_inputs=(x,), _verify_cfg=VerifyConfig())
    assert len(FORWARD_CALLS) == 1  # the reference is the captured graph, not another PyTorch forward
    assert cpu_graph_runs  # the model's outputs on the sample, the golden of the check
    results = tt.get_compiled_results()[0]
    assert calculate_pcc(expected, results.golden_outputs[0]) >= PCC_MIN
    assert calculate_pcc(results.golden_outputs[0], results.outputs[0]) >= PCC_MIN


def test_verification_with_a_microbatch_checks_the_push(model, cpu_graph_runs):
    x = torch.randn(2, 32, 32)
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden)
    tt.place_module(pybuda.PyTorchModule("counting_mlp", model))
    pybuda.initialize_pipeline(training=False, sample_inputs=(x,), _verify_cfg=VerifyConfig(run_golden=True))
    results = tt.get_compiled_results()[0]
    assert calculate_pcc(model(x).detach(), results.golden_outputs[0]) >= PCC_MIN  # the whole push, sample by sample
    assert "backend_golden_outputs" in results.notes


def test_a_following_device_gets_real_sample_outputs_from_one_cpu_run(model, cpu_graph_runs):
    x = torch.randn(1, 32, 32)
    head = torch.nn.Linear(32, 4).eval()
    expected = head(model(x)).detach()
    FORWARD_CALLS.clear()
    pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=pybuda.PyTorchModule("counting_mlp", model))
    pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("head", head))
    pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    # The CPU device compiles by running its module on the TTDevice's sample outputs: those need one run.
    assert len(cpu_graph_runs) == 1 and len(FORWARD_CALLS) == 1
    q = pybuda.run_inference(inputs=[(x,)])
    assert calculate_pcc(expected, q.get(timeout=120)[0].value()) >= PCC_MIN


def test_pybuda_compile_runs_the_model_only_to_verify(model, cpu_graph_runs, tmp_path):
    from pybuda.compile import pybuda_compile
    from pybuda.config import CompilerConfig

    x = torch.randn(1, 32, 32)
    cfg = CompilerConfig(backend_output_dir=str(tmp_path))
    FORWARD_CALLS.clear()
    r = pybuda_compile(pybuda.PyTorchModule("counting_mlp", model), "counting_mlp", x, compiler_cfg=cfg)
    assert r.netlist is not None and not r.golden_outputs
    assert len(FORWARD_CALLS) == 1 and cpu_graph_runs == []

    r = pybuda_compile(pybuda.PyTorchModule("counting_mlp", model), "counting_mlp", x, compiler_cfg=cfg,
                       verify_cfg=VerifyConfig())
    assert cpu_graph_runs and calculate_pcc(model(x).detach(), r.outputs[0]) >= PCC_MIN
