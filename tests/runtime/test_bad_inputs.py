"""Bad inputs fail in the caller with InputError that says what is wrong (DESIGN.md, Errors)."""

import pytest
import torch
from torch import nn

import pybuda
from pybuda.errors import InputError


class _Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x):
        return self.lin(x)


class _Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 32)

    def forward(self, ids):
        return self.emb(ids)


def test_empty_push_is_input_error():
    dev = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", _Linear().eval()))
    with pytest.raises(InputError, match=r"empty \(shape \[0, 32, 32\]\)"):
        dev.push_to_inputs(torch.zeros(0, 32, 32))


def test_complex_push_is_input_error():
    dev = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", _Linear().eval()))
    with pytest.raises(InputError, match="complex tensors are not supported"):
        dev.push_to_inputs(torch.randn(1, 32, 32, dtype=torch.complex64))


def test_embedding_ids_out_of_range_name_input_range_and_vocab():
    module = pybuda.PyTorchModule("m", _Embed().eval())
    with pytest.raises(InputError) as info:
        pybuda.run_inference(module, inputs=[(torch.tensor([[1, 12, 3, 40]]),)]).get()
    text = str(info.value)
    assert "model input 'ids'" in text
    assert "vocabulary size 10" in text and "from 1 to 40" in text


def test_embedding_ids_in_range_run():
    module = pybuda.PyTorchModule("m", _Embed().eval())
    out = pybuda.run_inference(module, inputs=[(torch.tensor([[1, 2, 3, 9]]),)]).get()
    assert list(out[0].value().shape) == [1, 4, 32]


class _IntPlusOne(nn.Module):
    def forward(self, x):
        return x + 1


class _IntHalved(nn.Module):
    def forward(self, x):
        return x.float() * 0.5  # the device reads the integers


def test_integer_input_beyond_the_queue_format_is_input_error_not_a_clamped_number():
    """Integer inputs the device reads are pushed as Float32, exact to 2**24: an int64 value beyond it would be
    read rounded."""
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", _IntHalved()), arch=pybuda.BackendDevice.Wormhole_B0)
    x = torch.tensor([[2 ** 40 + 1, 5]], dtype=torch.int64)
    with pytest.raises(InputError, match=r"holds values from 5 to 1099511627777; the simulated chip keeps integers exact"):
        pybuda.run_inference(inputs=[(x,)]).get()


def test_integer_input_beyond_float32_exact_integers_is_input_error():
    """2**30 + 1 fits Int32, but the golden device's float32 math would round it to 2**30."""
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", _IntHalved()), arch=pybuda.BackendDevice.Wormhole_B0)
    with pytest.raises(InputError, match=r"keeps integers exact in \[-16777216, 16777216\]"):
        pybuda.run_inference(inputs=[(torch.tensor([[2 ** 30 + 1, 1]], dtype=torch.int64),)]).get()


def test_integer_values_a_cpu_stage_computes_come_back_exactly():
    """Captured with 2**40 + 1, ``x + 1`` runs on the CPU (beyond what the device keeps exact), and the host hands
    its result back itself (``QueueIO.copy_of``) rather than through a device copy that would round it."""
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", _IntPlusOne()), arch=pybuda.BackendDevice.Wormhole_B0)
    x = torch.tensor([[2 ** 40 + 1, 5]], dtype=torch.int64)
    assert torch.equal(pybuda.run_inference(inputs=[(x,)]).get()[0].value(), x + 1)


def test_integer_input_within_the_queue_format_runs():
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", _IntPlusOne()), arch=pybuda.BackendDevice.Wormhole_B0)
    x = torch.tensor([[2 ** 24 - 1, -5]], dtype=torch.int64)
    out = pybuda.run_inference(inputs=[(x,)]).get()[0].value()
    assert torch.equal(out.to(torch.int64), x + 1)


def test_a_per_sample_model_passes_the_sample_check_at_microbatch_4():
    class PerSample(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=-1) @ x.transpose(-1, -2)

    x = torch.randn(4, 5, 40)
    pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("per_sample", PerSample().eval()),
                    arch=pybuda.BackendDevice.Wormhole_B0)
    out = pybuda.run_inference(inputs=[x]).get(timeout=60)[0].value()
    assert out.shape == (4, 5, 5)
    assert torch.allclose(out, PerSample()(x), rtol=0.05, atol=0.05)  # Float16_b default: ~1 % per value
