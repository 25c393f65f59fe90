"""Bad pushes raise InputError in the caller at push time, never a hang (tt-buda#56)."""

import numpy as np
import pytest
import torch

import pybuda
import pybuda.op
from pybuda.errors import InputError, PybudaError


class TwoInputs(pybuda.PyBudaModule):
    def __init__(self, name):
        super().__init__(name)

    def forward(self, a, b):
        return pybuda.op.Add("add", a, b)


class KwargsModel(torch.nn.Module):
    def forward(self, x, scale=None, bias=None):
        y = x * 2 if scale is None else x * scale
        return y if bias is None else y + bias


@pytest.fixture
def tt_two_inputs():
    tt0 = pybuda.TTDevice("tt0", module=TwoInputs("two"))
    tt0.push_to_inputs(torch.randn(2, 32, 32), torch.randn(2, 32, 32))
    return tt0


def test_wrong_shape_dtype_count_raise_at_push(tt_two_inputs):
    tt0 = tt_two_inputs
    with pytest.raises(InputError, match=r"input 1 has shape \[2, 32, 16\], expected \[2, 32, 32\]"):
        tt0.push_to_inputs(torch.randn(2, 32, 32), torch.randn(2, 32, 16))
    with pytest.raises(InputError, match="microbatch"):
        tt0.push_to_inputs(torch.randn(4, 32, 32), torch.randn(4, 32, 32))
    with pytest.raises(InputError, match="dtype torch.float16, expected torch.float32"):
        tt0.push_to_inputs(torch.randn(2, 32, 32), torch.randn(2, 32, 32).half())
    with pytest.raises(InputError, match="pushed 1 tensor"):
        tt0.push_to_inputs(torch.randn(2, 32, 32))
    with pytest.raises(InputError, match="must be a torch.Tensor"):
        tt0.push_to_inputs(torch.randn(2, 32, 32), [1.0, 2.0])
    with pytest.raises(InputError, match="first push was positional"):
        tt0.push_to_inputs({"a": torch.randn(2, 32, 32), "b": torch.randn(2, 32, 32)})
    # Rejected pushes were not queued: exactly the first push runs.
    q = pybuda.run_inference()
    out = q.get(timeout=10)
    assert tuple(out[0].shape) == (2, 32, 32)


def test_first_push_is_checked_against_forward_signature():
    tt0 = pybuda.TTDevice("tt0", module=TwoInputs("two"))
    with pytest.raises(InputError, match="forward takes 2 input"):
        tt0.push_to_inputs(torch.randn(1, 32, 32), torch.randn(1, 32, 32), torch.randn(1, 32, 32))
    with pytest.raises(InputError, match=r"needs input\(s\) \['b'\]"):
        tt0.push_to_inputs(torch.randn(1, 32, 32))
    with pytest.raises(InputError, match=r"no argument\(s\) \['c'\]"):
        tt0.push_to_inputs({"a": torch.randn(1, 32, 32), "c": torch.randn(1, 32, 32)})
    with pytest.raises(InputError, match="at least one tensor"):
        tt0.push_to_inputs()
    assert tt0.get_first_inputs() is None  # nothing was accepted


def test_tt_inputs_must_share_the_microbatch_dim():
    tt0 = pybuda.TTDevice("tt0", module=TwoInputs("two"))
    with pytest.raises(InputError, match="disagree on dim 0"):
        tt0.push_to_inputs(torch.randn(2, 32, 32), torch.randn(1, 32, 32))
    with pytest.raises(InputError, match="0-d tensor"):
        tt0.push_to_inputs(torch.tensor(1.0), torch.tensor(2.0))


def test_dict_pushes_keys_and_order():
    model = KwargsModel()
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("kw", model))
    x, b = torch.randn(3, 8), torch.randn(3, 8)
    cpu0.push_to_inputs({"bias": b, "x": x})
    # Same keys in another order are fine; other keys are not.
    cpu0.push_to_inputs({"x": 2 * x, "bias": b})
    with pytest.raises(InputError, match=r"pushed keys \['x'\]"):
        cpu0.push_to_inputs({"x": x})
    with pytest.raises(InputError, match=r"pushed keys"):
        cpu0.push_to_inputs({"x": x, "scale": b})
    # Positional pushes after a dict push follow the first push's key order (bias, x after sorting
    # into forward-signature order: x, bias).
    cpu0.push_to_inputs(3 * x, b)
    q = pybuda.run_inference(input_count=3)
    outs = [q.get(timeout=10)[0].value() for _ in range(3)]
    for k, out in zip((1, 2, 3), outs):
        torch.testing.assert_close(out, model(k * x, bias=b))


def test_numpy_and_pybuda_tensors_are_accepted():
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", torch.nn.Linear(4, 2)))
    cpu0.push_to_inputs(np.ones((1, 4), dtype=np.float32))
    cpu0.push_to_inputs(pybuda.Tensor.create_from_torch(torch.ones(1, 4)))
    q = pybuda.run_inference(input_count=2)
    assert torch.equal(q.get(timeout=10)[0].value(), q.get(timeout=10)[0].value())


def test_input_count_rules():
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", torch.nn.Linear(4, 2)))
    x = torch.randn(1, 4)
    with pytest.raises(InputError, match="input_count=2 does not match the 3 input"):
        pybuda.run_inference(inputs=[x, x, x], input_count=2)
    with pytest.raises(InputError, match="list of inputs"):
        pybuda.run_inference(inputs=x)
    # Sequential mode refuses to wait for inputs that were never pushed.
    cpu0.push_to_inputs(x)
    with pytest.raises(InputError, match="only 1 are queued"):
        pybuda.run_inference(input_count=2, _sequential=True)
    pybuda.shutdown()


def test_input_count_zero_in_sequential_mode_runs_every_push():
    """TT-Buda's loop: run_inference(input_count=0), then push and get. Sequential mode has nothing running in
    the background, so each push runs as it is made."""
    lin = torch.nn.Linear(4, 2)
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", lin))
    xs = [torch.randn(1, 4) for _ in range(4)]
    cpu0.push_to_inputs(xs[0])
    out_q = pybuda.run_inference(input_count=0, _sequential=True)
    assert torch.allclose(out_q.get(timeout=10)[0].value(), lin(xs[0]).detach())
    for x in xs[1:]:
        cpu0.push_to_inputs(x)
        assert torch.allclose(out_q.get(timeout=10)[0].value(), lin(x).detach())
    pybuda.shutdown()


def test_run_inference_inputs_are_all_or_nothing():
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", torch.nn.Linear(4, 2)))
    x = torch.randn(1, 4)
    with pytest.raises(InputError, match="input 0 has shape"):
        pybuda.run_inference(inputs=[x, x, torch.randn(1, 5)])
    assert cpu0.get_first_inputs() is None and cpu0._staging.empty()


def test_no_device_or_no_input_errors():
    with pytest.raises(PybudaError, match="no devices"):
        pybuda.run_inference()
    pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("lin", torch.nn.Linear(4, 2)))
    with pytest.raises(InputError, match="no inputs to compile"):
        pybuda.initialize_pipeline(training=False)
    with pytest.raises(PybudaError, match="no pipeline is running"):
        pybuda.run_forward(1)


def test_pushing_to_a_middle_device_is_rejected():
    cpu0 = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("a", torch.nn.Linear(4, 4)))
    cpu1 = pybuda.CPUDevice("cpu1", module=pybuda.PyTorchModule("b", torch.nn.Linear(4, 4)))
    cpu1.push_to_inputs(torch.randn(1, 4))
    cpu0.push_to_inputs(torch.randn(1, 4))
    with pytest.raises(InputError, match="not the first device"):
        pybuda.initialize_pipeline(training=False)
