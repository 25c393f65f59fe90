"""Run helpers of the API reference: is_silicon, run_generative_inference, run_generate, Module.run, compile_torch."""

import pytest
import torch

import pybuda
from pybuda.errors import InputError


class Double(pybuda.PyBudaModule):
    def forward(self, x):
        return pybuda.op.Add("add", x, x)


def test_is_silicon_and_queues_outside_training():
    assert pybuda.is_silicon() is False
    assert pybuda.get_checkpoint_queue() is None and pybuda.get_loss_queue() is None


def test_run_generative_inference_is_run_inference_without_cache_buffers():
    x = torch.randn(1, 8, 32)
    out = pybuda.run_generative_inference(Double("d"), inputs=[(x,)]).get()[0].value()
    assert torch.allclose(out, 2 * x, atol=1e-2)


def test_run_generate_checks_its_cache_arguments():
    tt = pybuda.TTDevice("tt0", module=Double("d"))
    x = torch.randn(1, 8, 32)
    tt.push_to_inputs(x)
    q = pybuda.initialize_pipeline(training=False)
    with pytest.raises(InputError, match="write_index"):
        pybuda.run_generate(input_count=1)
    pybuda.run_generate(input_count=1, write_index=0)
    assert torch.allclose(q.get(timeout=30)[0].value(), 2 * x, atol=1e-2)


def test_module_run_returns_a_tuple():
    x = torch.randn(1, 8, 32)
    out = Double("d").run(x)
    assert isinstance(out, tuple) and torch.allclose(out[0].value(), 2 * x, atol=1e-2)


def test_compile_torch_is_the_torch_compile_backend():
    from pybuda.frontend.torch_compile import pybuda_backend

    assert pybuda.compile_torch is pybuda_backend
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    x = torch.randn(2, 8)
    compiled = torch.compile(model, backend=pybuda.compile_torch)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=1e-5)
